"""Decisions: how a capsule's dtype reaches a consumer (native, reinterpret, view, upcast) or why not.

Pure functions of the capsule's description and the consumer's capability row; nothing here
touches memory. Used by the conversion pipeline, the guard's ``convert=False`` check and the report.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from . import _logical
from ._adapters import ADAPTERS
from ._capabilities import Capabilities, missing_requirements
from ._capsule import DLPackInfo
from ._dtypes import BY_NAME, DType, decode_table, lookup, unsigned_of_width
from ._errors import OptionError, UnsupportedDtypeError
from ._options import Fallback

__all__ = ["Plan", "plan_for", "native_plan"]


class Plan(NamedTuple):
    """What dlbridge will do with one capsule for one target (also used by guard and report)."""

    mode: str  # "native", "reinterpret", "view", "upcast"
    logical: str  # the dtype the data really has
    wire: str  # the dtype written into the capsule the target reads


def plan_for(info: DLPackInfo, caps: Capabilities, fallback: Fallback, dtype: Any = None, target: str = "") -> Plan:
    """Decide how ``info`` reaches a consumer with ``caps``; raises UnsupportedDtypeError."""
    logical = info.dtype if dtype is None and info.code != 1 else _logical_dtype(info, dtype)
    if logical in caps.imports:
        return native_plan(logical)
    width = BY_NAME[logical].width if logical in BY_NAME else info.bits * info.lanes
    uint = unsigned_of_width(width) if info.lanes == 1 or logical in BY_NAME else None
    if logical in caps.holds and uint in caps.imports:
        return Plan("reinterpret", logical, uint)
    if fallback == "view" and uint is not None and uint in caps.imports:
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
    if dtype is not None:
        wanted = lookup(dtype)
        if wanted is None:
            valid = ", ".join(BY_NAME)
            raise OptionError(f"dtype={dtype!r} is not a dtype dlbridge knows; expected one of: {valid}")
        if wanted.width != info.bits * info.lanes:
            raise OptionError(
                f"dtype={dtype!r} ({wanted.width} bits) cannot reinterpret {info.describe()} "
                f"({info.bits * info.lanes} bits): dtype= relabels memory and needs the same width"
            )
        return _name_of(wanted)
    if info.code == 1:  # an unsigned view may carry a remembered logical dtype
        remembered = _logical.recall(info)
        if remembered is not None:
            return remembered
    return info.dtype


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
    if uint is not None and uint in caps.imports and fallback != "view":
        options.append(f'fallback="view" for a zero-copy {uint} view of the same memory')
    if uint is not None and uint in caps.imports and _upcastable(logical) and fallback != "upcast":
        options.append('fallback="upcast" for a float32 copy with equal values')
    if options:
        lines.append("Pass " + ", or ".join(options) + ".")
    elif fallback != "raise":
        lines.append(f'fallback="{fallback}" cannot help: there is no same-width unsigned dtype it imports.')
    return " ".join(lines)
