"""fp4 (float4_e2m1fn) between the three ways frameworks hold it.

* *pairs*: a capsule of dtype ``(17, 4, 2)`` (``float4_e2m1fn_x2``), one byte per pair, its shape
  counting bytes: ``(..., n)`` holds ``(..., 2n)`` values, value ``2i`` in the low nibble.
* *packed*: ``(17, 4, 1)`` without DLPack's ``IS_SUBBYTE_TYPE_PADDED`` flag, its shape counting
  values: the values two to a byte in C order over the whole array, value ``2i`` in the low nibble
  (DLPack's default for sub-byte types; a capsule whose shape's last dimension is even holds the
  same bytes as a pairs capsule with that dimension halved).
* *elements*: one value per byte, in the low nibble (ml_dtypes' ``float4_e2m1fn``; a ``(17, 4, 1)``
  capsule flagged ``IS_SUBBYTE_TYPE_PADDED``).

A consumer imports pairs (its ``imports`` row names ``float4_e2m1fn_x2``) or holds single values
(``holds`` names ``float4_e2m1fn``: built on the host and handed over with ``Adapter.from_host``).
Where the source's bytes are what the consumer reads, the capsule is relabelled in place (packed ->
pairs, padded -> NumPy: zero-copy); otherwise the values are repacked on the host (a copy, refused
under ``copy=False``). For an fp4 capsule its target
does not import as it is (``_handoff.decide`` asks :func:`plan`, the pipeline calls :func:`run`); NumPy's
ml_dtypes arrays, which NumPy cannot export, are exported as flagged one-value-a-byte capsules
(``_capsule._edit.mark_padded``, the NumPy adapter's ``export_failed``).
"""

from __future__ import annotations

import ctypes
from dataclasses import replace
from math import prod
from typing import Any

from .._adapters import HOST, Adapter, export_capsule
from .._capabilities import Capabilities
from .._capsule._abi import FLAG_PADDED
from .._capsule._edit import mark_padded, restore, rewrite, set_shape
from .._capsule._read import DLPackInfo, c_strides
from .._dtypes import BY_NAME
from .._errors import DLBridgeError, LayoutError
from .._options import Fallback

__all__ = ["FP4", "PAIRS", "FLAG_PADDED", "plan", "run", "handles_fp4", "pack", "padded_capsule",
           "unpack"]  # fmt: skip

FP4 = "float4_e2m1fn"
PAIRS = "float4_e2m1fn_x2"


# --- the repacking (NumPy host arrays of uint8 codes) -------------------------------------------


def unpack(packed: Any, count: int) -> Any:
    """The first ``count`` 4-bit codes of the bytes ``packed`` (value 2i in byte i's low nibble), one a byte."""
    xp = HOST.mod  # the host framework's module
    flat = xp.ascontiguousarray(packed).reshape(-1)
    codes = xp.empty(flat.size * 2, dtype=xp.uint8)
    codes[0::2] = flat & 0x0F
    codes[1::2] = flat >> 4
    return codes[:count]


def pack(codes: Any) -> Any:
    """Codes ``(..., 2n)`` (one a byte, low nibble) as pairs ``(..., n)``: value 2i in the low nibble."""
    return (codes[..., 0::2] & 0x0F) | ((codes[..., 1::2] & 0x0F) << 4)


def _fp4_view(codes: Any) -> Any:
    return HOST.view(codes, FP4)  # ml_dtypes' float4_e2m1fn: one value a byte


# --- the pipeline's hook ------------------------------------------------------------------------


def _layout(info: DLPackInfo) -> str:
    if info.lanes == 2:
        return "pairs"
    return "elements" if info.flags & FLAG_PADDED else "packed"


def _form(caps: Capabilities) -> str | None:
    """How the consumer takes fp4: "pairs" (it imports them), "elements" (single values it holds or
    imports, made on the host and handed over with ``from_host``), or None."""
    if PAIRS in caps.imports:
        return "pairs"
    return "elements" if FP4 in caps.holds else None


def handles_fp4(caps: Capabilities) -> bool:
    """Whether dlbridge gives a consumer with ``caps`` fp4 it does not import as it is (the report's plan)."""
    return _form(caps) is not None


def plan(info: DLPackInfo, caps: Capabilities, target: Adapter, source: Adapter | None, fallback: Fallback,
         copy: bool | None) -> tuple[str, type[DLBridgeError] | None, str] | None:  # fmt: skip
    """How an fp4 capsule (``info``: code 17) the consumer does not import as it is reaches it:
    (kind, error, message), kind "same" (the consumer's own array), "pairs" (relabelled as pairs,
    zero-copy), "elements" (relabelled for the host, zero-copy) or "repack" (a copy); None where this
    module has nothing to do (the pipeline's other rules decide)."""
    form = _form(caps)
    layout = _layout(info)
    # fallback="view" asks for a zero-copy uint8 view of pairs' bytes, which it keeps getting
    if form is None or info.device_code != 1 or (fallback == "view" and info.lanes == 2):
        return None
    if layout == "elements" and target is HOST:
        return ("elements", None, "")
    if source is target and form == "elements" and copy is not True:
        return ("same", None, "")  # its own array, which it cannot import (JAX >= 0.10): the same array
    if form == "pairs" and info.lanes == 1 and (not info.shape or info.shape[-1] % 2):
        return ("repack", LayoutError, _odd_message(info, target))
    if layout == "packed" and form == "pairs" and info.is_c_contiguous():
        return ("pairs", None, "")  # the same bytes: zero-copy
    if copy is False:
        return ("repack", LayoutError, _copy_message(info, target, caps, form))
    if layout == "packed" and not info.is_c_contiguous():
        return ("repack", LayoutError, (
            f"{info.describe()} has strides {list(info.strides or ())}: dlbridge reads fp4 capsules of two "
            "values a byte in C order only; pass a C-contiguous array"
        ))  # fmt: skip
    return ("repack", None, "")


def run(kind: str, capsule: Any, info: DLPackInfo, target: Adapter, caps: Capabilities, copy: bool | None) -> Any:
    """Carry out ``plan``'s kind on the capsule (unconsumed until here)."""
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
    from ._consume import import_capsule
    from ._handoff import decide

    record = decide(info, target, caps, "raise", dtype, copy)
    record.raise_error()
    return import_capsule(capsule, info, target, caps, record, copy)


def _deliver(codes: Any, info: DLPackInfo, target: Adapter, form: str) -> Any:
    """Codes (one a byte, the source's logical shape) as the consumer's fp4 array (a new one)."""
    from ._convert import direct

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


def padded_capsule(elements_u8: Any, max_version: tuple[int, int] | None) -> Any:
    """A capsule describing one-value-a-byte fp4 (``elements_u8``: its bytes as uint8): dtype (17, 4, 1),
    flagged IS_SUBBYTE_TYPE_PADDED where the capsule is versioned (for describing it: ``inspect``)."""
    capsule = export_capsule(elements_u8, stream=None, max_version=max_version)
    mark_padded(capsule, BY_NAME[FP4])
    return capsule


def _pairs_info(info: DLPackInfo) -> DLPackInfo:
    shape = (*info.shape[:-1], info.shape[-1] // 2)
    return replace(info, dtype=PAIRS, lanes=2, shape=shape, strides=c_strides(shape))


def _copy_message(info: DLPackInfo, target: Adapter, caps: Capabilities, form: str) -> str:
    if form == "pairs":
        how = f"imports fp4 only as {PAIRS} (two values a byte)"
    else:
        how = f"does not import {info.dtype} as it is through DLPack (it holds {FP4}: dlbridge hands it a copy)"
    if info.lanes == 2:
        hint = ', or fallback="view" for a zero-copy uint8 view of its bytes'
    elif info.producer == HOST.name:
        hint = ", or view the source as uint8 for its codes (one a byte), zero-copy"
    else:
        hint = ""
    return (
        f"to_{target.name}(): {caps.consumer} {caps.version} {how}, so {info.describe()} "
        f"({_layout(info)}) reaches it as a repacked copy, which copy=False forbids. Pass copy=None for the copy{hint}"
    )


def _odd_message(info: DLPackInfo, target: Adapter) -> str:
    last = info.shape[-1] if info.shape else "no"
    return (
        f"to_{target.name}(): {target.name} holds fp4 as {PAIRS}, pairs of values along the last dimension, "
        f"and {info.describe()} has {last} values there (an odd count, or a 0-d array), which cannot be paired. "
        "Pad the last dimension to an even length with a zero value first (its framework's pad), or convert "
        f"it to a framework that holds single fp4 values (one whose capabilities() hold {FP4})"
    )
