"""The fast route's capsule read (see ``_route``): a capsule's fields as one tuple, or None for
anything the route leaves to the full read (``_capsule.read``). ``dlbridge/_csrc/`` has the compiled form."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable

from .._accelerator import accel
from ._read import (
    _HEAD_STRUCT,
    _INT64_READERS,
    _TYPE_PROBE_NAME,
    _VERSIONED_STRUCT,
    LEGACY,
    MAX_NDIM,
    SUPPORTED_MAJOR,
    VERSIONED,
    CapsuleType,
    _get_name,
    _get_pointer,
    _HeadBytes,
    _int64_reader,
    _new_capsule,
    _u32,
    _VersionedBytes,
)

__all__ = ["probe"]


_Probe = tuple[bool, int, int, int, int, int, int, int, int, int, int, tuple[int, ...], "tuple[int, ...] | None", int]


# The pure-Python probe reads a capsule's pointer and name straight from the object (PyCapsule's
# layout: the object header, then pointer, name), three times cheaper than two ctypes calls into
# the C API; the layout is checked against PyCapsule_GetPointer/GetName on a probe capsule at import,
# and where it differs (another interpreter build) the C API is called instead.
_CAPSULE_FIELDS = struct.Struct("@PP")  # void *pointer; const char *name
_CapsuleFields = ctypes.c_char * _CAPSULE_FIELDS.size
_FIELDS_AT = object.__basicsize__  # after the object header


def _fields_layout_ok() -> bool:
    probe = _new_capsule(12345, _TYPE_PROBE_NAME, None)
    try:
        pointer, name = _CAPSULE_FIELDS.unpack_from(_CapsuleFields.from_address(id(probe) + _FIELDS_AT))
        size = len(_TYPE_PROBE_NAME) + 1
        return (
            pointer == 12345
            and bool(name)
            and (ctypes.c_char * size).from_address(name).raw == (_TYPE_PROBE_NAME + b"\0")
        )
    except MemoryError:
        raise
    except Exception:
        return False


_DIRECT_FIELDS = _fields_layout_ok()
_Versioned19 = ctypes.c_char * (len(VERSIONED) + 1)
_Legacy9 = ctypes.c_char * (len(LEGACY) + 1)


def _probe_py(capsule: object) -> _Probe | None:
    """A capsule's raw fields, or None for anything ``read`` must judge (and explain)."""
    if type(capsule) is not CapsuleType:
        return None
    if _DIRECT_FIELDS:
        address, name_at = _CAPSULE_FIELDS.unpack_from(_CapsuleFields.from_address(id(capsule) + _FIELDS_AT))
        if not name_at or not address:
            return None
        if _Versioned19.from_address(name_at).raw == b"dltensor_versioned\0":
            name = VERSIONED
        elif _Legacy9.from_address(name_at).raw == b"dltensor\0":
            name = LEGACY
        else:
            return None
    else:
        found = _get_name(capsule)
        if found != VERSIONED and found != LEGACY:
            return None
        name, address = found, _get_pointer(capsule, found)
    if name == VERSIONED:
        if not address or _u32.from_address(address).value != SUPPORTED_MAJOR:
            return None
        major, minor, _, _, flags, data, device_type, device_id, ndim, code, bits, lanes, shape_at, strides_at, \
            byte_offset = _VERSIONED_STRUCT.unpack_from(_VersionedBytes.from_address(address))  # fmt: skip
        versioned = True
    else:
        if not address:
            return None
        data, device_type, device_id, ndim, code, bits, lanes, shape_at, strides_at, byte_offset = (
            _HEAD_STRUCT.unpack_from(_HeadBytes.from_address(address))
        )
        versioned, major, minor, flags = False, 0, 0, 0
    if not 0 <= ndim <= MAX_NDIM or (ndim and not shape_at):
        return None
    if ndim:
        unpack, raw = _INT64_READERS.get(ndim) or _int64_reader(ndim)
        shape = unpack(raw.from_address(shape_at))
        strides = unpack(raw.from_address(strides_at)) if strides_at else None
    else:
        shape, strides = (), None
    return (versioned, major, minor, flags, data or 0, device_type, device_id, ndim, code, bits, lanes, shape,
            strides, byte_offset)  # fmt: skip


if accel is not None:
    probe: Callable[[object], _Probe | None] = accel.probe
else:
    probe = _probe_py
