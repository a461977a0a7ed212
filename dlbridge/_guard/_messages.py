"""Error wording for ``@dlbridge.guard``: the same exception class, with the function, the argument
and what it received in front of the conversion's own message."""

from __future__ import annotations

import re
from typing import Any, Protocol

from .._errors import DLBridgeError, NotAnArrayError
from .._pipeline._convert import inspect

__all__ = ["in_context", "call_head", "describe", "usage", "nesting_error"]


class _Spec(Protocol):
    """What the wording reads of a guarded function's settings (``_call._Spec``)."""

    name: str
    to_label: str

    def label(self, where: tuple[Any, ...]) -> str: ...


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


def nesting_error(spec: _Spec, where: tuple[Any, ...], value: Any, cycle: bool, depth: int) -> NotAnArrayError:
    """A container the guard cannot rebuild: it holds itself (``cycle``), or nests deeper than ``depth``."""
    at = spec.label(where) if len(where) <= 4 else spec.label(where[:3]) + "[…]" + spec.label(("", *where[-1:]))
    what = (
        f"a {type(value).__qualname__} that holds itself (the guard rebuilds tuples, lists and dicts with their "
        "arrays converted, which one holding itself cannot be)"
        if cycle
        else f"containers nested more than {depth} levels deep (the guard converts arrays at most {depth} levels down)"
    )
    if where[0] in ("result", "yield", "return"):
        return NotAnArrayError(
            f"{spec.name}() returned {what} at {at}, under @dlbridge.guard({spec.to_label!r}); pass returns=None to "
            "leave results as the body made them, or return the arrays in a structure without it"
        )
    head = spec.label(where[:1])
    return NotAnArrayError(
        f"{spec.name}({head}=…) under @dlbridge.guard({spec.to_label!r}): received {what} at {at}; pass args= "
        f"naming the parameters to convert, leaving {head} out (it is then passed as it is), or pass the arrays "
        "in a structure without it"
    )


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
