"""DLPack's binary interface as dlbridge reads it: capsule names and flags, the CPython capsule calls
(private ctypes prototypes), and DLPack's device types. The struct layout is ``_layout``'s."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

__all__ = ["LEGACY", "VERSIONED", "USED", "SUPPORTED_MAJOR", "FLAG_READ_ONLY", "FLAG_IS_COPIED", "FLAG_PADDED", "MAX_NDIM",
           "CapsuleType", "DEVICE_CODES", "GPU_CODES", "DEVICE_ALIASES", "alias_device", "device_name",
           "dlpack_stream"]  # fmt: skip

LEGACY = b"dltensor"
VERSIONED = b"dltensor_versioned"
USED = (b"used_dltensor", b"used_dltensor_versioned")
SUPPORTED_MAJOR = 1
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_PADDED = 1 << 2  # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (dlpack.h, DLPack 1.1)
# Sanity bound on ndim: DLPack sets none, but no real array has more than a few dozen.
MAX_NDIM = 64

# Private prototypes: never touch ctypes.pythonapi.X.argtypes, that object is shared with
# every other library in the process. PYFUNCTYPE raises any Python error the call sets.
_api = ctypes.pythonapi
_get_name: Callable[[object], bytes | None] = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", _api)
)
_get_pointer: Callable[[object, bytes | None], int | None] = ctypes.PYFUNCTYPE(
    ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p
)(("PyCapsule_GetPointer", _api))
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api)
)
_get_context: Callable[[object], int | None] = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(
    ("PyCapsule_GetContext", _api)
)
_set_context: Callable[[object, int], int] = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetContext", _api)
)
# A legacy capsule has no flags: one dlbridge made of one-value-a-byte sub-byte data (``_edit.mark_padded``)
# says IS_SUBBYTE_TYPE_PADDED through its PyCapsule context, set to this address (a capsule's context is
# the holder's, which DLPack consumers never read; the mark lives and dies with the capsule object).
_PADDED_MARK = ctypes.create_string_buffer(b"dlbridge: one sub-byte value a byte")
PADDED_CONTEXT: int = ctypes.addressof(_PADDED_MARK)
_TYPE_PROBE_NAME = b"dlbridge.type_probe"  # must outlive the probe capsule: module constant
# types.CapsuleType only exists from 3.13; a capsule made here (no destructor) gives the type
# without importing a module that happens to export one.
CapsuleType: type = type(_new_capsule(1, _TYPE_PROBE_NAME, None))


_DEVICE_NAMES = {
    1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
    10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi",
    15: "webgpu", 16: "hexagon", 17: "maia", 18: "trn",
}  # fmt: skip
DEVICE_CODES = {v: k for k, v in _DEVICE_NAMES.items()}
# Device memory a CUDA/ROCm stream orders (the DLPack stream handshake applies).
GPU_CODES = frozenset({2, 10, 13})
# Memory that another device type can address as it is: page-locked host memory (torch's pinned
# tensors) is plain CPU memory, CUDA managed memory is plain CUDA memory on its device. A consumer
# that lacks the first type is handed the capsule relabelled as the second.
DEVICE_ALIASES = {3: 1, 11: 1, 13: 2}


def alias_device(device: tuple[int, int]) -> tuple[int, int]:
    """The device ``device``'s memory can be described as (itself when there is no alias)."""
    alias = DEVICE_ALIASES.get(device[0])
    if alias is None:
        return device
    return (1, 0) if alias == 1 else (alias, device[1])


def device_name(device_type: int) -> str:
    return _DEVICE_NAMES.get(device_type, f"device_type_{device_type}")


def dlpack_stream(handle: int, device_type: int) -> int:
    """A stream handle as DLPack's ``__dlpack__(stream=)`` spells it (the array API standard's DLPack
    protocol): on CUDA the legacy default stream (handle 0) is 1, as 0 is ambiguous there; on ROCm the
    default stream is 0 (1 and 2 are not allowed). Other handles are themselves."""
    return handle if device_type == 10 else (handle or 1)
