"""The DLPack struct layout, declared once on the Python side (``dlbridge/_csrc/accel.h`` declares it
for C; tests/test_capsule_layout.py checks that both agree, field by field, against the compiled module).

dlpack.h (v1.3): ``DLTensor`` is ``{void *data; DLDevice device; int32_t ndim; DLDataType dtype;
int64_t *shape; int64_t *strides; uint64_t byte_offset}`` with ``DLDevice {int32 type, int32 id}`` and
``DLDataType {uint8 code, uint8 bits, uint16 lanes}``; ``DLManagedTensorVersioned`` is ``{DLPackVersion
version (uint32 major, minor); void *manager_ctx; void (*deleter)(...); uint64_t flags; DLTensor
dl_tensor}``; a legacy ``DLManagedTensor`` starts with its ``DLTensor``. The ctypes structures below
are the declaration; the ``struct`` formats the readers unpack with, and every offset, are derived
from them (native alignment, as the C compiler lays the structs out).
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

__all__ = ["DLTensor", "VersionedHeader", "TENSOR_STRUCT", "MANAGED_STRUCT", "LEGACY_STRUCT", "VERSIONED_TENSOR",
           "VERSIONED_FLAGS", "VERSIONED_DELETER", "int64s", "INT64_SIZE", "LAYOUT"]  # fmt: skip


class DLTensor(ctypes.Structure):
    """``DLTensor`` with its device and dtype fields flattened (one read gets every scalar)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


class VersionedHeader(ctypes.Structure):
    """``DLManagedTensorVersioned`` up to its ``DLTensor``."""

    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
    ]


_CODES = {ctypes.c_void_p: "P", ctypes.c_int32: "i", ctypes.c_uint32: "I", ctypes.c_uint8: "B",
          ctypes.c_uint16: "H", ctypes.c_uint64: "Q"}  # fmt: skip


def _format(structure: type[ctypes.Structure]) -> str:
    return "".join(_CODES[kind] for _, kind in structure._fields_)  # type: ignore[misc]


# One unpack reads a DLTensor's scalars; one reads a versioned header and the DLTensor after it.
TENSOR_STRUCT = struct.Struct("@" + _format(DLTensor))
MANAGED_STRUCT = struct.Struct("@" + _format(VersionedHeader) + _format(DLTensor))
VERSIONED_TENSOR = ctypes.sizeof(VersionedHeader)  # where dl_tensor starts in DLManagedTensorVersioned
VERSIONED_FLAGS: int = VersionedHeader.flags.offset
VERSIONED_DELETER: int = VersionedHeader.deleter.offset
# A legacy DLManagedTensor: its DLTensor, then manager_ctx and the deleter.
LEGACY_STRUCT = struct.Struct("@" + _format(DLTensor) + "PP")
assert TENSOR_STRUCT.size == ctypes.sizeof(DLTensor)
assert MANAGED_STRUCT.size == VERSIONED_TENSOR + TENSOR_STRUCT.size
assert LEGACY_STRUCT.size == TENSOR_STRUCT.size + 2 * ctypes.sizeof(ctypes.c_void_p)

# What the compiled module reports of its own structs (``dlbridge._accel.LAYOUT``), for the check.
LAYOUT = {
    "DLTensor": ctypes.sizeof(DLTensor),
    **{f"DLTensor.{name}": getattr(DLTensor, name).offset for name in ("data", "device_type", "ndim", "code",
                                                                         "shape", "strides", "byte_offset")},
    "DLManagedTensorVersioned.deleter": VERSIONED_DELETER,
    "DLManagedTensorVersioned.flags": VERSIONED_FLAGS,
    "DLManagedTensorVersioned.dl_tensor": VERSIONED_TENSOR,
    "DLManagedTensor.deleter": TENSOR_STRUCT.size + ctypes.sizeof(ctypes.c_void_p),
}  # fmt: skip

INT64_SIZE = ctypes.sizeof(ctypes.c_int64)  # a shape or strides entry (int64_t)

# One unpack_from per count of int64 values (shape, strides, or both where they are adjacent).
_INT64S: dict[int, Any] = {}


def int64s(count: int) -> Any:
    """``unpack_from(buffer, offset)`` reading ``count`` int64 values (shape or strides) as one tuple."""
    found = _INT64S.get(count)
    if found is None:
        found = _INT64S[count] = struct.Struct(f"@{count}q").unpack_from
    return found
