"""Error wording for ``@dlbridge.guard``: the same exception class, with the function, the argument
and what it received in front of the conversion's own message."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .._errors import DLBridgeError
from .._pipeline._convert import inspect

if TYPE_CHECKING:
    from ._call import _Spec

__all__ = ["in_context", "call_head", "describe", "usage"]

_CALL_PREFIX = re.compile(r"^(to_\w+\(\)|\w+): ")


def describe(x: Any) -> str:
    try:
        return inspect(x).describe()
    except MemoryError:
        raise
    except Exception:
        return f"{type(x).__module__}.{type(x).__qualname__}"


def in_context(err: DLBridgeError, spec: _Spec, where: tuple[Any, ...], x: Any, extra: str = "",
               returned: bool = False) -> DLBridgeError:  # fmt: skip
    """The same exception class, its message prefixed with the function, argument and value received."""
    inner = _CALL_PREFIX.sub("", str(err), count=1)
    received = describe(x)
    if returned:
        lead = f"{spec.name}() returned {spec.label(where)}={received}, which could not go back"
    elif received in inner:
        lead = call_head(spec, where)
    else:
        lead = f"{call_head(spec, where)}: received {received}"
    return type(err)(f"{lead}: {inner}{extra}")


def call_head(spec: _Spec, where: tuple[Any, ...]) -> str:
    return f"{spec.name}({spec.label(where)}=…) under @dlbridge.guard({spec.to_label!r})"


def usage(to: object) -> str:
    """Why ``guard(to)`` is not a target framework, and how the decorator is written."""
    from .._adapters import ADAPTERS

    names = ", ".join(sorted(ADAPTERS))
    example = next(iter(ADAPTERS))  # the table's first framework
    how = f'name the framework the body is written for: @dlbridge.guard("{example}") (one of {names}, or the module)'
    if callable(to) and not isinstance(to, type):
        name = getattr(to, "__qualname__", None) or getattr(to, "__name__", None) or repr(to)
        return f"@dlbridge.guard was applied to {name}() without a target framework; {how}"
    shown = repr(to) if isinstance(to, (int, float, bytes, type(None))) else describe(to)
    return f"dlbridge.guard({shown}): the first argument is not a framework; {how}"
