"""Decisions: how a capsule's dtype reaches a consumer (native, reinterpret, view, upcast) or why not.

Pure functions of the capsule's description and the consumer's capability row; nothing here
touches memory. Used by the conversion pipeline, the guard's ``convert=False`` check and the report.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from .._adapters import ADAPTERS
from .._capabilities import Capabilities, missing_requirements
from .._capsule._read import DLPackInfo
from .._dtypes import BY_NAME, DType, decode_table, lookup, unsigned_of_width
from .._errors import OptionError, UnsupportedDtypeError
from .._options import Fallback

__all__ = ["Plan", "plan_for", "native_plan", "recalled_fallback"]


class Plan(NamedTuple):
    """What dlbridge will do with one capsule for one target (also used by guard and report)."""

    mode: str  # "native", "reinterpret", "view", "upcast"
    logical: str  # the dtype the data really has
    wire: str  # the dtype written into the capsule the target reads


def recalled_fallback(fallback: Fallback) -> Fallback:
    """The fallback for a ``fallback="view"`` result converted onward (its remembered dtype is the
    ``dtype=`` of that conversion). The caller chose a view when it was made, so under ``"raise"`` a
    consumer that cannot hold that dtype gets another view (which remembers it) instead of an error;
    an explicit ``"upcast"`` still upcasts."""
    return "view" if fallback == "raise" else fallback


def plan_for(info: DLPackInfo, caps: Capabilities, fallback: Fallback, dtype: Any = None, target: str = "") -> Plan:
    """Decide how ``info`` reaches a consumer with ``caps``; raises UnsupportedDtypeError."""
    logical = info.dtype if dtype is None else _logical_dtype(info, dtype)
    if logical in caps.imports:
        return native_plan(logical)
    width = BY_NAME[logical].width if logical in BY_NAME else info.bits * info.lanes
    uint = unsigned_of_width(width) if info.lanes == 1 or logical in BY_NAME else None
    if logical in caps.holds and uint in caps.imports:
        return Plan("reinterpret", logical, uint)
    # No bool views: bytes written through a uint8 view that are not 0/1 would come back as bools
    # consumers mis-handle (see _logical_dtype).
    if fallback == "view" and uint is not None and uint in caps.imports and logical != "bool":
        return Plan("view", logical, uint)
    if fallback == "upcast" and uint in caps.imports and _upcastable(logical):
        return Plan("upcast", logical, uint)
    raise UnsupportedDtypeError(_unsupported_message(info, caps, logical, fallback, uint, target))


@cache  # Plans are frozen: one per dtype name (consumer-imported names only)
def native_plan(logical: str) -> Plan:
    return Plan("native", logical, logical)


def _upcastable(logical: str) -> bool:
    return logical == "bfloat16" or decode_table(logical) is not None


def _logical_dtype(info: DLPackInfo, dtype: Any) -> str:
    """``dtype=`` (the caller's, or a view's remembered one) checked against the capsule's width."""
    wanted = lookup(dtype)
    if wanted is None:
        valid = ", ".join(BY_NAME)
        raise OptionError(f"dtype={dtype!r} is not a dtype dlbridge knows; expected one of: {valid}")
    if wanted == BY_NAME["bool"] and info.dtype != "bool":
        # Bytes other than 0/1 labelled bool give wrong results (JAX: x ^ True, x & True; probe
        # 2026-11-23, jax 0.10.2). Checking them would read all the data, and could not hold:
        # the memory stays shared, so the source can write a 2 right after the check.
        raise OptionError(
            f'dtype="bool" cannot reinterpret {info.describe()}: only bytes 0 and 1 are valid bools, '
            "and consumers compute wrong results on others. Convert without dtype= and compare "
            "instead (x != 0), which makes a real bool array."
        )
    if wanted.width != info.bits * info.lanes:
        raise OptionError(
            f"dtype={dtype!r} ({wanted.width} bits) cannot reinterpret {info.describe()} "
            f"({info.bits * info.lanes} bits): dtype= relabels memory and needs the same width"
        )
    return _name_of(wanted)


def _name_of(d: DType) -> str:
    return next(name for name, value in BY_NAME.items() if value == d)


def _unsupported_message(info: DLPackInfo, caps: Capabilities, logical: str, fallback: str,
                         uint: str | None, target: str) -> str:  # fmt: skip
    who = f"{caps.consumer} {caps.version}"
    lines = [
        f"{target or caps.consumer}: cannot hand {info.describe()} to {who}: {caps.consumer} cannot hold {logical}."
    ]
    for requirement in missing_requirements(caps.consumer, caps.version, logical):
        module, _, minimum = requirement.partition(">=")
        if minimum:
            lines.append(f"It needs {requirement} (pip install -U {module}) to get it zero-copy with the real dtype.")
        else:
            lines.append(f"Install {module} (pip install {module}) to get it zero-copy with the real dtype.")
    hint = ADAPTERS[caps.consumer].hint(logical) if caps.consumer in ADAPTERS else None
    if hint:
        lines.append(hint)
    options = []
    if uint is not None and uint in caps.imports and fallback != "view" and logical != "bool":
        view = f"a {uint} copy of its bits" if caps.copies_imports else f"a zero-copy {uint} view of the same memory"
        options.append(f'fallback="view" for {view}')
    if uint is not None and uint in caps.imports and _upcastable(logical) and fallback != "upcast":
        options.append('fallback="upcast" for a float32 copy with equal values')
    if options:
        lines.append("Pass " + ", or ".join(options) + ".")
    if fallback != "raise":
        lines.append(f'fallback="{fallback}" cannot help: {_why_fallback_fails(caps, logical, fallback, uint)}.')
    return " ".join(lines)


def _why_fallback_fails(caps: Capabilities, logical: str, fallback: str, uint: str | None) -> str:
    """Why the fallback the caller chose does not apply to ``logical`` (plan_for found it did not)."""
    if fallback == "upcast" and not _upcastable(logical):
        return f"it widens bfloat16 and float8 formats to float32, and {logical} is not one of them"
    if uint is None:
        return f"{logical} has no same-width unsigned dtype to carry its bits"
    if logical == "bool" and uint in caps.imports:
        return f"a {uint} view of bool memory could come back as bool holding bytes other than 0/1"
    how = "hand over" if fallback == "view" else "carry the bits of"
    return f"it would {how} {logical} as {uint}, which {caps.consumer} does not import either"
