"""Writing into an unconsumed DLPack capsule before a consumer reads it: its dtype, device, strides
and READ_ONLY flag, and undoing that when the consumer refuses it (a caller's capsule comes back as it was)."""

from __future__ import annotations

import ctypes
import struct

from .._dtypes import DType
from ._abi import (
    FLAG_PADDED,
    FLAG_READ_ONLY,
    LEGACY,
    PADDED_CONTEXT,
    VERSIONED,
    _get_context,
    _get_name,
    _get_pointer,
    _set_context,
)
from ._layout import VERSIONED_FLAGS, VERSIONED_TENSOR, DLTensor
from ._probe import _MEMORY, tensor_at
from ._read import c_strides, tensor_address

__all__ = ["relabel", "relabel_device", "set_c_strides", "set_shape", "add_flags", "rewrite", "restore", "relabel_triple", "relabel_at",
           "restore_triple", "mark_padded"]  # fmt: skip


# The dtype and device fields of a DLTensor, written with one ``pack_into`` on the address-space buffer
# (``_probe._address_space``) where a ctypes structure made at the address would cost an object and a
# call per field.
_DTYPE, _DTYPE_AT = struct.Struct("@BBH"), DLTensor.code.offset  # uint8 code, uint8 bits, uint16 lanes
_DEVICE, _DEVICE_AT = struct.Struct("@ii"), DLTensor.device_type.offset  # int32 device_type, device_id


def _write(fields: struct.Struct, address: int, *values: int) -> None:
    try:
        fields.pack_into(_MEMORY, address, *values)
    except struct.error:  # an address past the address-space buffer (none on a 64-bit system): through ctypes
        ctypes.memmove(address, fields.pack(*values), fields.size)


def relabel(capsule: object, dtype: DType) -> None:
    """Rewrite the capsule's dtype in place before a consumer reads it (zero-copy reinterpret).

    Only called with a dtype of the same total width, on a capsule nobody has consumed yet.
    """
    _write(_DTYPE, tensor_address(capsule) + _DTYPE_AT, dtype.code, dtype.bits, dtype.lanes)


def mark_padded(capsule: object, dtype: DType) -> None:
    """Label an unconsumed capsule of one-value-a-byte sub-byte data (exported as its bytes) ``dtype``,
    flagged IS_SUBBYTE_TYPE_PADDED, so that its readers know each value fills a byte: in its flags where it
    is versioned, else (a legacy capsule has no flags: NumPy < 2.1's) through the capsule's context
    (``_abi.PADDED_CONTEXT``), which ``_read.read`` reads back as the flag."""
    relabel(capsule, dtype)
    if _get_name(capsule) == VERSIONED:
        add_flags(capsule, FLAG_PADDED)
    elif _get_context(capsule) is None:  # (a context the producer set is its own: never overwritten)
        _set_context(capsule, PADDED_CONTEXT)


def relabel_device(capsule: object, device: tuple[int, int]) -> None:
    """Rewrite the capsule's device (pinned host memory -> CPU) before a consumer reads it."""
    _write(_DEVICE, tensor_address(capsule) + _DEVICE_AT, *device)


def set_c_strides(capsule: object, shape: tuple[int, ...]) -> None:
    """Write C-order strides into a capsule whose layout already is C order up to size-1 dimensions
    (whose strides address nothing), for consumers that compare strides literally (JAX < 0.8)."""
    head = DLTensor.from_address(tensor_address(capsule))
    if head.strides:
        (ctypes.c_int64 * len(shape)).from_address(head.strides)[:] = list(c_strides(shape))


def set_shape(capsule: object, shape: tuple[int, ...], strides: tuple[int, ...] | None) -> None:
    """Write a shape of the same ndim (and strides, where the capsule has them) into an unconsumed capsule."""
    head = DLTensor.from_address(tensor_address(capsule))
    (ctypes.c_int64 * len(shape)).from_address(head.shape)[:] = list(shape)
    if head.strides and strides is not None:
        (ctypes.c_int64 * len(shape)).from_address(head.strides)[:] = list(strides)


def add_flags(capsule: object, flags: int) -> None:
    """Set DLPack flags on an unconsumed versioned capsule (a legacy one has none: left as it is)."""
    if _get_name(capsule) == VERSIONED:
        address = tensor_address(capsule) - VERSIONED_TENSOR + VERSIONED_FLAGS
        ctypes.c_uint64.from_address(address).value |= flags


# What rewrite() changed: (name, DLTensor address, device type, device id, code, bits, lanes, flags).
Saved = tuple[bytes | None, int, int, int, int, int, int, int]


def rewrite(capsule: object, dtype: DType | None, device: tuple[int, int] | None, writable: bool) -> Saved:
    """Relabel an unconsumed capsule for a consumer (dtype, device, READ_ONLY dropped) in one go.

    Returns what ``restore`` needs to put the header back if the consumer then refuses it.
    """
    address = tensor_address(capsule)
    name = _get_name(capsule)
    head = DLTensor.from_address(address)
    versioned = name == VERSIONED
    flags = ctypes.c_uint64.from_address(address - VERSIONED_TENSOR + VERSIONED_FLAGS) if versioned else None
    old_flags = flags.value if flags is not None else 0
    saved = (name, address, head.device_type, head.device_id, head.code, head.bits, head.lanes, old_flags)
    if dtype is not None:
        head.code, head.bits, head.lanes = dtype.code, dtype.bits, dtype.lanes
    if device is not None:
        head.device_type, head.device_id = device
    if writable and flags is not None:
        flags.value &= ~FLAG_READ_ONLY
    return saved


def restore(capsule: object, saved: Saved) -> bool:
    """Undo ``rewrite`` on a capsule nobody consumed (same name, same struct); True if it did.

    A consumer that took the capsule renamed it (``used_...``) and owns the struct now: that one
    is left alone, since its memory may already be freed.
    """
    name, address, device_type, device_id, code, bits, lanes, flags = saved
    versioned = name == VERSIONED
    managed = address - VERSIONED_TENSOR if versioned else address
    if _get_name(capsule) != name or _get_pointer(capsule, name) != managed:
        return False
    head = DLTensor.from_address(address)
    head.device_type, head.device_id, head.code, head.bits, head.lanes = device_type, device_id, code, bits, lanes
    if versioned:
        ctypes.c_uint64.from_address(managed + VERSIONED_FLAGS).value = flags
    return True


def relabel_triple(capsule: object, triple: int) -> None:
    """Write dtype ``code | bits << 8 | lanes << 16`` into an unconsumed capsule (a route's relabel, on every
    warm call of a relabelled dtype: ``_write`` written out, without its frame)."""
    address = tensor_at(capsule)
    relabel_at(tensor_address(capsule) if address is None else address, triple)


def relabel_at(tensor: int, triple: int) -> None:
    """``relabel_triple`` into the ``DLTensor`` at address ``tensor`` (``_probe.located`` found it, in an
    unconsumed capsule)."""
    address = tensor + _DTYPE_AT
    try:
        _DTYPE.pack_into(_MEMORY, address, triple & 0xFF, (triple >> 8) & 0xFF, triple >> 16)
    except struct.error:
        _write(_DTYPE, address, triple & 0xFF, (triple >> 8) & 0xFF, triple >> 16)


def restore_triple(capsule: object, triple: int) -> None:
    """Undo ``relabel_triple`` if nobody consumed the capsule (its name is unchanged)."""
    if _get_name(capsule) in (LEGACY, VERSIONED):
        relabel_triple(capsule, triple)
