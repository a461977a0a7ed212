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
import sys
from collections.abc import Callable
from typing import Any

from .._accelerator import accel
from ._abi import LEGACY, MAX_NDIM, SUPPORTED_MAJOR, VERSIONED, CapsuleType, _get_name, _get_pointer, _new_capsule
from ._layout import _INT64S, LEGACY_STRUCT, MANAGED_STRUCT, VERSIONED_TENSOR, int64s
from ._layout import INT64_SIZE as _INT64

__all__ = ["probe", "managed", "located", "tensor_at", "Facts", "OTHER", "DENSE", "EMPTY", "VERSIONED_AT", "FLAGS_AT",
           "DATA_AT", "DEVICE_AT", "NDIM_AT", "CODE_AT", "SHAPE_AT", "STRIDES_AT", "OFFSET_AT", "LAYOUT_AT",
           "DELETER_AT"]  # fmt: skip

Facts = tuple[bool, int, int, int, int, int, int, int, int, int, int, tuple[int, ...], "tuple[int, ...] | None",
              int, int, bool]  # fmt: skip
VERSIONED_AT, FLAGS_AT, DATA_AT, DEVICE_AT, NDIM_AT, CODE_AT = 0, 3, 4, 5, 7, 8
SHAPE_AT, STRIDES_AT, OFFSET_AT, LAYOUT_AT, DELETER_AT = 11, 12, 13, 14, 15
OTHER, DENSE, EMPTY = 0, 1, 2  # layout classes (capsules.c: LAYOUT_OTHER, LAYOUT_DENSE, LAYOUT_EMPTY)

# The pure-Python probe reads a capsule's pointer and name straight from the object (PyCapsule's
# layout: the object header, then pointer, name), cheaper than two ctypes calls into the C API; the
# layout is checked against PyCapsule_GetPointer/GetName on a probe capsule at import, and where it
# differs (another interpreter build) the C API is called instead.
_CAPSULE_FIELDS = struct.Struct("@PP")  # void *pointer; const char *name
_FIELDS_AT = object.__basicsize__  # after the object header
_PROBE_NAME = b"dlbridge.layout_probe"  # must outlive the probe capsule: module constant


def _address_space() -> memoryview:
    """The process's memory as one buffer whose offsets are addresses: ``Struct.unpack_from(_MEMORY, address)``
    reads foreign memory in one C call, where a ctypes object made at the address (``from_address``) costs an
    allocation and a type's machinery each time. Like ``from_address`` it reads whatever is there: only
    addresses a capsule gives are read. An address past its end (none on a 64-bit system) raises
    ``struct.error``, and the probe leaves that capsule to ``_read.read``; so does every read where no such
    buffer can be made (an empty one stands in)."""
    try:
        return memoryview((ctypes.c_char * sys.maxsize).from_address(0))
    except (OverflowError, ValueError, TypeError):
        return memoryview(bytearray())  # writable, like the real one: a write past it is a struct.error


_MEMORY = _address_space()


def _fields_layout_ok() -> bool:
    capsule = _new_capsule(12345, _PROBE_NAME, None)
    try:
        pointer, name = _CAPSULE_FIELDS.unpack_from(_MEMORY, id(capsule) + _FIELDS_AT)
        size = len(_PROBE_NAME) + 1
        return pointer == 12345 and bool(name) and bytes(_MEMORY[name : name + size]) == _PROBE_NAME + b"\0"
    except MemoryError:
        raise
    except Exception:
        return False


_DIRECT_FIELDS = _fields_layout_ok()
_VERSIONED_Z, _LEGACY_Z = VERSIONED + b"\0", LEGACY + b"\0"  # the names with their terminating NUL
_NAME_HEAD = struct.Struct(f"{len(_LEGACY_Z)}s")  # b"dltensor\0", or b"dltensor_" and then ...
_NAME_TAIL = struct.Struct(f"{len(_VERSIONED_Z) - len(_LEGACY_Z)}s")  # ... b"versioned\0"
_VERSIONED_HEAD, _VERSIONED_TAIL = _VERSIONED_Z[: len(_LEGACY_Z)], _VERSIONED_Z[len(_LEGACY_Z) :]
_MAJOR = struct.Struct("@I")  # DLPackVersion.major, the versioned struct's first field
_C_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}


def _name_and_address(capsule: object) -> tuple[bool, int] | None:
    """(versioned, address of its managed tensor) through the C API, where the object's fields are not read
    directly (``_DIRECT_FIELDS``)."""
    found = _get_name(capsule)
    if found != VERSIONED and found != LEGACY:
        return None
    address = _get_pointer(capsule, found)
    return (found == VERSIONED, address) if address else None


def _dense_size(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> int:
    """The element count where ``shape`` has no negative size and ``strides`` are None or its C strides; else -1."""
    size = 1
    for dim in shape:
        if dim < 0:
            return -1
        size *= dim
    return size if strides is None or strides == _c_strides(shape) else -1


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


# The same few shapes pass again and again, and a lookup costs less than checking them each time: shape and
# strides read in one (adjacent: NumPy's) -> (shape, strides, _dense_size); (shape, strides) -> _dense_size.
_ADJACENT: dict[tuple[int, ...], tuple[tuple[int, ...], tuple[int, ...], int]] = {}
_SIZES: dict[tuple[tuple[int, ...], tuple[int, ...] | None], int] = {}


def _adjacent(both: tuple[int, ...], ndim: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    shape, strides = both[:ndim], both[ndim:]
    found = _ADJACENT[both] = (shape, strides, _dense_size(shape, strides))
    if len(_ADJACENT) > 256:
        _ADJACENT.clear()
    return found


def _probe_py(capsule: object) -> Facts | None:
    """A capsule's raw fields, or None for anything ``read`` must judge (and explain)."""
    found = managed(capsule)
    if found is None:
        return None
    try:
        return _tensor_facts(found[0], found[1])
    except struct.error:  # an address past the address-space buffer (_address_space)
        return None


def located(capsule: object) -> tuple[Facts, int] | None:
    """``_probe_py``'s facts and the address of the capsule's ``DLTensor`` (for ``_edit.relabel_at``: the
    Python route writes a dtype without finding the tensor again); None where ``_probe_py`` gives None."""
    found = managed(capsule)
    if found is None:
        return None
    try:
        facts = _tensor_facts(found[0], found[1])
    except struct.error:  # an address past the address-space buffer (_address_space)
        return None
    return None if facts is None else (facts, found[1] + VERSIONED_TENSOR if found[0] else found[1])


def managed(capsule: object) -> tuple[bool, int] | None:
    """(versioned, address of its managed tensor) of an unconsumed DLPack capsule (named ``dltensor`` or
    ``dltensor_versioned``, with a pointer); None for anything else, which ``_read`` judges and explains."""
    if type(capsule) is not CapsuleType:
        return None
    if not _DIRECT_FIELDS:
        return _name_and_address(capsule)
    try:
        address, name_at = _CAPSULE_FIELDS.unpack_from(_MEMORY, id(capsule) + _FIELDS_AT)
        if not name_at or not address:
            return None
        # the name in two reads, the second only where the first found b"dltensor_" (a name at least that long)
        head = _NAME_HEAD.unpack_from(_MEMORY, name_at)[0]
        if head == _LEGACY_Z:
            return False, address
        if head == _VERSIONED_HEAD and _NAME_TAIL.unpack_from(_MEMORY, name_at + _NAME_HEAD.size)[0] == _VERSIONED_TAIL:
            return True, address
    except struct.error:  # an address past the address-space buffer (_address_space)
        pass
    return None


def tensor_at(capsule: object) -> int | None:
    """The address of an unconsumed capsule's ``DLTensor`` (a versioned one of the major dlbridge reads), for
    the writers in ``_edit``; None for anything else (``_read.tensor_address`` says what is wrong with it)."""
    found = managed(capsule)
    if found is None:
        return None
    if not found[0]:
        return found[1]
    try:
        return found[1] + VERSIONED_TENSOR if _MAJOR.unpack_from(_MEMORY, found[1])[0] == SUPPORTED_MAJOR else None
    except struct.error:  # an address past the address-space buffer (_address_space)
        return None


def _tensor_facts(versioned: bool, address: int) -> Facts | None:
    if versioned:
        # DLPack: a consumer must not read past the version of a major it does not know.
        if _MAJOR.unpack_from(_MEMORY, address)[0] != SUPPORTED_MAJOR:
            return None
        major, minor, _, deleter, flags, data, device_type, device_id, ndim, code, bits, lanes, shape_at, \
            strides_at, byte_offset = MANAGED_STRUCT.unpack_from(_MEMORY, address)  # fmt: skip
    else:
        data, device_type, device_id, ndim, code, bits, lanes, shape_at, strides_at, byte_offset, _, deleter = (
            LEGACY_STRUCT.unpack_from(_MEMORY, address)
        )
        major, minor, flags = 0, 0, 0
    if not 0 <= ndim <= MAX_NDIM or (ndim and not shape_at):
        return None
    strides: tuple[int, ...] | None
    if ndim and strides_at == shape_at + _INT64 * ndim:  # strides right after shape (NumPy's): one read
        both = (_INT64S.get(2 * ndim) or int64s(2 * ndim))(_MEMORY, shape_at)
        shape, strides, size = _ADJACENT.get(both) or _adjacent(both, ndim)
    elif ndim:
        unpack = _INT64S.get(ndim) or int64s(ndim)
        shape = unpack(_MEMORY, shape_at)
        strides = unpack(_MEMORY, strides_at) if strides_at else None
        known = _SIZES.get((shape, strides))
        if known is None:
            known = _SIZES[shape, strides] = _dense_size(shape, strides)
            if len(_SIZES) > 256:
                _SIZES.clear()
        size = known
    else:
        shape, strides, size = (), None, 1
    # the layout class (the module docstring), as capsules.c's layout_class gives it
    if size < 0 or not bits or not lanes:
        layout = OTHER
    elif not size:
        layout = EMPTY
    else:
        span = size * ((bits * lanes + 7) // 8)
        layout = DENSE if data and span < 1 << 62 and data + byte_offset + span < 1 << 64 else OTHER
    return (versioned, major, minor, flags, data, device_type, device_id, ndim, code, bits, lanes, shape, strides,
            byte_offset, layout, bool(deleter))  # fmt: skip


if accel is not None:
    probe: Callable[[object], Any] = accel.probe
else:
    probe = _probe_py
