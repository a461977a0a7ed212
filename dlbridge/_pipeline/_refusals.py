"""The wording of two refusals ``decide`` makes (``_handoff``): a capsule without a deleter for a
consumer that dies releasing it, and a caller's raw fp4 capsule in a layout the consumer does not take."""

from __future__ import annotations

from .._adapters import ADAPTERS, HOST, Adapter
from .._capabilities import Capabilities
from .._capsule._read import DLPackInfo
from ._subbyte import FLAG_PADDED, PAIRS

__all__ = ["null_deleter_refusal", "raw_fp4_refusal"]


def null_deleter_refusal(info: DLPackInfo, target: Adapter, caps: Capabilities) -> str:
    """Why a capsule without a deleter is not handed to a consumer that dies releasing its import,
    and the two steps that do it safely (a framework that releases it first, then its export)."""
    if info.device_code != 1:
        via = _device_holder(info, target)
        fix = f"dlbridge.to_{target.name}(dlbridge.to_{via}(x)) shares the same memory"
    elif info.versioned:
        via = HOST.name
        fix = f"dlbridge.to_{target.name}(dlbridge.to_{via}(x)) shares the same memory"
    else:  # NumPy imports a legacy capsule read-only (it cannot say otherwise), which JAX gets as a copy
        via = HOST.name
        fix = (f"dlbridge.to_{target.name}(dlbridge.to_{via}(x), copy=True) (one copy: a legacy capsule cannot say "
               f"its memory is writable, so {via} imports it read-only)")  # fmt: skip
    return (
        f"to_{target.name}(): {info.describe()} comes in a capsule whose deleter is NULL (DLPack allows one: the "
        f"producer keeps the memory alive itself), and {caps.consumer} {caps.version} kills the process when it "
        f"releases an array imported from such a capsule (see dlbridge.capabilities('{target.name}')"
        f".aborts_on_null_deleter). Hand it to {via} first, which releases it safely: {fix}; or have the producer "
        "set a deleter"
    )


def _device_holder(info: DLPackInfo, target: Adapter) -> str:
    """A framework that can hold the capsule's device memory: one imported already whose capability row says
    it releases a capsule without a deleter safely, else the first the registry lists for that device."""
    holders = [a for a in ADAPTERS.values() if a is not target and info.device_code in a.device_codes]
    for adapter in holders:
        if adapter.loaded() and not adapter.caps.aborts_on_null_deleter:
            return adapter.name
    return holders[0].name if holders else HOST.name


def raw_fp4_refusal(info: DLPackInfo, target: Adapter, caps: Capabilities, kind: str) -> str:
    """Why a caller's raw fp4 capsule is not handed over in the layout the consumer takes, and what to do."""
    layout = "one value a byte (IS_SUBBYTE_TYPE_PADDED)" if info.flags & FLAG_PADDED else "packed two values a byte"
    if PAIRS in caps.imports:
        takes = f"holds fp4 as {PAIRS} (pairs of values along the last dimension, two a byte)"
    else:
        takes = f"takes fp4 as {info.dtype} arrays dlbridge builds from one value a byte"
    how = (
        f"the same bytes, which dlbridge relabels as {PAIRS} (zero-copy) by rewriting the capsule's shape: it does "
        "that only to a capsule it asked the producer for"
        if kind == "pairs"
        else "dlbridge repacks them into that layout (a copy) only from an array"
    )
    return (
        f"to_{target.name}(): {caps.consumer} {caps.version} {takes}, and this raw capsule holds {info.describe()} "
        f"{layout}: {how}; pass the array itself (not its capsule), which dlbridge converts"
    )
