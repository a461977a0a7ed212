"""fp4 handed over in another layout than its source's: the ``fp4`` record ``_handoff.decide`` makes
(through ``_subbyte.plan``) run on the capsule, unconsumed until here: relabelled in place as pairs
(zero-copy), relabelled for the host as one value a byte (zero-copy), or repacked on the host (a copy)
and handed to the consumer as its own fp4 array. The layouts and the plan are ``_subbyte``'s.
"""

from __future__ import annotations

import ctypes
from dataclasses import replace
from math import prod
from typing import Any

from .._adapters import HOST, Adapter
from .._capabilities import Capabilities
from .._capsule._edit import restore, rewrite, set_shape
from .._capsule._read import DLPackInfo, c_strides
from .._dtypes import BY_NAME
from .._errors import LayoutError
from ._consume import import_capsule
from ._handoff import decide
from ._stage import direct
from ._subbyte import FLAG_PADDED, FP4, PAIRS, _form, _odd_message, pack, unpack

__all__ = ["run"]


def run(kind: str, capsule: Any, info: DLPackInfo, target: Adapter, caps: Capabilities, copy: bool | None) -> Any:
    """Carry out ``_subbyte.plan``'s kind on the capsule (unconsumed until here)."""
    if kind == "pairs":
        pairs = _pairs_info(info)
        _as_pairs(capsule, info, target)
        return _import(capsule, pairs, target, caps, None, copy)
    if kind == "elements":  # also a caller's raw capsule: relabelled, and restored if the host refuses it
        u8 = replace(info, dtype="uint8", code=1, bits=8, lanes=1)
        saved = rewrite(capsule, BY_NAME["uint8"], None, False)
        try:
            host = _import(capsule, u8, HOST, HOST.capabilities(), None, copy)
        except BaseException:
            restore(capsule, saved)
            raise
        return _fp4_view(host)
    codes = _codes(capsule, info)
    del capsule  # unconsumed: the producer's destructor frees it
    return _deliver(codes, info, target, _form(caps) or "elements")


def _import(capsule: Any, info: DLPackInfo, target: Adapter, caps: Capabilities, dtype: str | None,
            copy: bool | None) -> Any:  # fmt: skip
    """A one-stage handoff of ``capsule`` to ``target`` (its record decided and checked first)."""
    record = decide(info, target, caps, "raise", dtype, copy)
    record.raise_error()
    return import_capsule(capsule, info, target, caps, record, copy)


def _deliver(codes: Any, info: DLPackInfo, target: Adapter, form: str) -> Any:
    """Codes (one a byte, the source's logical shape) as the consumer's fp4 array (a new one)."""
    if form == "elements":
        return target.from_host(_fp4_view(codes), (1, 0))
    return direct(HOST.mod.ascontiguousarray(pack(codes)), target, PAIRS)


def _codes(capsule: Any, info: DLPackInfo) -> Any:
    """The capsule's values as uint8 codes, one a byte, in its logical shape (a new host array)."""
    xp = HOST.mod  # the host framework's module
    if info.lanes == 2:  # pairs: the bytes as uint8 (zero-copy, any strides), then split
        host = _import(capsule, info, HOST, HOST.capabilities(), "uint8", None)
        shape = (*info.shape[:-1], info.shape[-1] * 2) if info.shape else (2,)
        return unpack(host, host.size * 2).reshape(shape)
    if info.flags & FLAG_PADDED:  # one value a byte: the bytes as uint8 (any strides), low nibbles
        rewrite(capsule, BY_NAME["uint8"], None, False)
        u8 = replace(info, dtype="uint8", code=1, bits=8, lanes=1)
        return _import(capsule, u8, HOST, HOST.capabilities(), None, None) & 0x0F
    size = prod(info.shape)
    packed = xp.frombuffer(ctypes.string_at(info.data_ptr, (size + 1) // 2), dtype=xp.uint8)
    return unpack(packed, size).reshape(info.shape)


def _as_pairs(capsule: Any, info: DLPackInfo, target: Adapter) -> None:
    """Relabel a C-ordered packed capsule in place as pairs: dtype (17, 4, 2), last dimension halved."""
    if not info.shape or info.shape[-1] % 2:
        raise LayoutError(_odd_message(info, target))
    pairs = _pairs_info(info)
    rewrite(capsule, BY_NAME[PAIRS], None, False)
    set_shape(capsule, pairs.shape, pairs.strides)


def _pairs_info(info: DLPackInfo) -> DLPackInfo:
    shape = (*info.shape[:-1], info.shape[-1] // 2)
    return replace(info, dtype=PAIRS, lanes=2, shape=shape, strides=c_strides(shape))


def _fp4_view(codes: Any) -> Any:
    return HOST.view(codes, FP4)  # ml_dtypes' float4_e2m1fn: one value a byte
