"""The wording of two refusals ``decide`` makes (``_handoff``): a capsule without a deleter for a
consumer that dies releasing it, and a caller's raw fp4 capsule in a layout the consumer does not take."""

from __future__ import annotations

from .._adapters import HOST, Adapter
from .._capabilities import Capabilities, table
from .._capsule._read import DLPackInfo
from ._devices import holders
from ._subbyte import FLAG_PADDED, PAIRS

__all__ = ["null_deleter_refusal", "raw_fp4_refusal"]


def null_deleter_refusal(info: DLPackInfo, target: Adapter, caps: Capabilities) -> str:
    """Why a capsule without a deleter is not handed to a consumer that dies releasing its import,
    and the two steps that do it safely (a framework that releases it first, then its export)."""
    if not info.on_host or info.versioned:
        via = _holder(info, target)
        fix = f"dlbridge.to_{target.name}(dlbridge.to_{via}(x)) shares the same memory"
        if via == HOST.name and HOST.loaded() and info.versioned and not HOST.caps.versioned_capsules:
            since = next((r.since for r in table() if r.consumer == HOST.name and r.what == "versioned_capsules"), "")
            upgrade = f'pip install -U "{HOST.distributions[0]}>={since}"; ' if since and HOST.distributions else ""
            have = f"{HOST.name} {HOST.version}"
            fix += f" once {HOST.name} reads versioned capsules ({upgrade}{have} reads only legacy ones)"
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


def _holder(info: DLPackInfo, target: Adapter) -> str:
    """A framework that can hold the capsule's memory: one imported already whose capability rows say it
    reads the capsule's kind and releases it without a deleter safely (NumPy first for host memory), else
    NumPy for host memory, else the first the registry lists for that device."""
    found = holders(info, target)
    if info.on_host and HOST in found:
        found = [HOST, *(a for a in found if a is not HOST)]
    for adapter in found:
        reads = adapter.loaded() and (adapter.caps.versioned_capsules or not info.versioned)
        if reads and not adapter.caps.aborts_on_null_deleter:
            return adapter.name
    return HOST.name if info.on_host or not found else found[0].name


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
