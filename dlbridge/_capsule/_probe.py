"""The one capsule reader: a capsule's raw fields as one tuple, or None for a capsule it does not
describe (``_read.read`` then says what is wrong with it). ``dlbridge/_csrc/capsules.c`` (``probe``,
``view_capsule``) is its compiled twin, which the compiled route also reads capsules with; tests check
that the two agree on every crafted capsule.

The tuple (``Facts``; indices below): versioned, major, minor, flags, data, device_type, device_id,
ndim, code, bits, lanes, shape, strides (None when the capsule has none), byte_offset, layout, has_deleter
(whether the managed tensor names a deleter: DLPack allows NULL, which some consumers cannot release). ``layout``
is the capsule's layout class: ``DENSE`` for dense C order (no strides, or exactly the C strides), bits
and lanes set, a non-NULL data pointer and a span inside the 64-bit address space; ``EMPTY`` for a dense
tensor of no elements; ``OTHER`` for anything else. A stored route replays dense and empty capsules
only (see ``_handoff.Admission``).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import Any

from .._accelerator import accel
from ._abi import LEGACY, MAX_NDIM, SUPPORTED_MAJOR, VERSIONED, CapsuleType, _get_name, _get_pointer, _new_capsule
from ._layout import LEGACY_STRUCT, MANAGED_STRUCT, LegacyBytes, VersionedBytes, int64s

__all__ = ["probe", "Facts", "OTHER", "DENSE", "EMPTY", "VERSIONED_AT", "FLAGS_AT", "DATA_AT", "DEVICE_AT",
           "NDIM_AT", "CODE_AT", "SHAPE_AT", "STRIDES_AT", "OFFSET_AT", "LAYOUT_AT",
           "DELETER_AT"]  # fmt: skip

Facts = tuple[bool, int, int, int, int, int, int, int, int, int, int, tuple[int, ...], "tuple[int, ...] | None",
              int, int, bool]  # fmt: skip
VERSIONED_AT, FLAGS_AT, DATA_AT, DEVICE_AT, NDIM_AT, CODE_AT = 0, 3, 4, 5, 7, 8
SHAPE_AT, STRIDES_AT, OFFSET_AT, LAYOUT_AT, DELETER_AT = 11, 12, 13, 14, 15
OTHER, DENSE, EMPTY = 0, 1, 2  # layout classes (capsules.c: LAYOUT_OTHER, LAYOUT_DENSE, LAYOUT_EMPTY)

# The pure-Python probe reads a capsule's pointer and name straight from the object (PyCapsule's
# layout: the object header, then pointer, name), three times cheaper than two ctypes calls into
# the C API; the layout is checked against PyCapsule_GetPointer/GetName on a probe capsule at import,
# and where it differs (another interpreter build) the C API is called instead.
_CAPSULE_FIELDS = struct.Struct("@PP")  # void *pointer; const char *name
_CapsuleFields = ctypes.c_char * _CAPSULE_FIELDS.size
_FIELDS_AT = object.__basicsize__  # after the object header
_PROBE_NAME = b"dlbridge.layout_probe"  # must outlive the probe capsule: module constant


def _fields_layout_ok() -> bool:
    capsule = _new_capsule(12345, _PROBE_NAME, None)
    try:
        pointer, name = _CAPSULE_FIELDS.unpack_from(_CapsuleFields.from_address(id(capsule) + _FIELDS_AT))
        size = len(_PROBE_NAME) + 1
        return pointer == 12345 and bool(name) and (ctypes.c_char * size).from_address(name).raw == _PROBE_NAME + b"\0"
    except MemoryError:
        raise
    except Exception:
        return False


_DIRECT_FIELDS = _fields_layout_ok()
_Versioned19 = ctypes.c_char * (len(VERSIONED) + 1)
_Legacy9 = ctypes.c_char * (len(LEGACY) + 1)
_VERSIONED_Z, _LEGACY_Z = VERSIONED + b"\0", LEGACY + b"\0"  # the names with their terminating NUL
_u32 = ctypes.c_uint32
_C_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}


def _name_and_address(capsule: object) -> tuple[bytes, int] | None:
    if _DIRECT_FIELDS:
        address, name_at = _CAPSULE_FIELDS.unpack_from(_CapsuleFields.from_address(id(capsule) + _FIELDS_AT))
        if not name_at or not address:
            return None
        if _Versioned19.from_address(name_at).raw == _VERSIONED_Z:
            return VERSIONED, address
        if _Legacy9.from_address(name_at).raw == _LEGACY_Z:
            return LEGACY, address
        return None
    found = _get_name(capsule)
    if found != VERSIONED and found != LEGACY:
        return None
    address = _get_pointer(capsule, found)
    return (found, address) if address else None


def _layout(data: int, bits: int, lanes: int, shape: tuple[int, ...], strides: tuple[int, ...] | None,
            byte_offset: int) -> int:  # fmt: skip
    """The layout class (see the module docstring); the same test as capsules.c's ``layout_class``."""
    if not bits or not lanes:
        return OTHER
    size = 1
    for dim in shape:
        if dim < 0:
            return OTHER
        size *= dim
    if strides is not None and strides != _c_strides(shape):
        return OTHER
    if not size:
        return EMPTY
    span = size * ((bits * lanes + 7) // 8)
    return DENSE if data and span < 1 << 62 and data + byte_offset + span < 1 << 64 else OTHER


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    found = _C_STRIDES.get(shape)
    if found is None:
        strides, step = [], 1
        for dim in reversed(shape):
            strides.append(step)
            step *= dim
        found = tuple(reversed(strides))
        if len(_C_STRIDES) < 256:
            _C_STRIDES[shape] = found
    return found


def _probe_py(capsule: object) -> Facts | None:
    """A capsule's raw fields, or None for anything ``read`` must judge (and explain)."""
    if type(capsule) is not CapsuleType:
        return None
    found = _name_and_address(capsule)
    if found is None:
        return None
    name, address = found
    if name == VERSIONED:
        # DLPack: a consumer must not read past the version of a major it does not know.
        if _u32.from_address(address).value != SUPPORTED_MAJOR:
            return None
        major, minor, _, deleter, flags, data, device_type, device_id, ndim, code, bits, lanes, shape_at, \
            strides_at, byte_offset = MANAGED_STRUCT.unpack_from(VersionedBytes.from_address(address))  # fmt: skip
        versioned = True
    else:
        data, device_type, device_id, ndim, code, bits, lanes, shape_at, strides_at, byte_offset, _, deleter = (
            LEGACY_STRUCT.unpack_from(LegacyBytes.from_address(address))
        )
        versioned, major, minor, flags = False, 0, 0, 0
    if not 0 <= ndim <= MAX_NDIM or (ndim and not shape_at):
        return None
    if ndim and strides_at == shape_at + 8 * ndim:  # strides right after shape (NumPy's, torch's): one read
        unpack, raw = int64s(2 * ndim)
        both = unpack(raw.from_address(shape_at))
        shape, strides = both[:ndim], both[ndim:]
    elif ndim:
        unpack, raw = int64s(ndim)
        shape = unpack(raw.from_address(shape_at))
        strides = unpack(raw.from_address(strides_at)) if strides_at else None
    else:
        shape, strides = (), None
    data = data or 0
    layout = _layout(data, bits, lanes, shape, strides, byte_offset)
    return (versioned, major, minor, flags, data, device_type, device_id, ndim, code, bits, lanes, shape, strides,
            byte_offset, layout, bool(deleter))  # fmt: skip


if accel is not None:
    probe: Callable[[object], Any] = accel.probe
else:
    probe = _probe_py
