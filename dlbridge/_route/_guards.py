"""A Producer's guards, the states of an array its route may export (``Adapter.fast_export``): each guard
is ``(attribute, call, expected[, unless])`` and holds where ``getattr(x, attribute)`` (or ``attribute``
itself where it is not a name: a function of the process's state, such as torch's mode check), called
where ``call`` says, is ``expected`` (by identity); a guard with a fourth item ``unless`` also holds where
that answer differs but ``unless()`` is True (asked only then, so the common answer costs no Python call).

The compiled route parses them once into its Producer and checks them in C (``dlbridge/_csrc/steps.c``
``check_guards``). The Python route checks them with one function made once per Producer (``holds``):
a single expression, ``x.is_cpu is e0 and x.requires_grad is e1 and ...``, where a loop over the guards
would pay for its indexing and ``getattr`` calls on every conversion. Its source is made of attribute
names that are identifiers and of names bound in its own namespace, never of other text.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from typing import Any

__all__ = ["holds", "always"]

Guards = tuple[tuple[Any, ...], ...]


def always(x: Any) -> bool:  # the route compares it by identity and skips the call
    """No guards: every array of the type holds (NumPy's)."""
    return True


def holds(guards: Guards | None) -> Callable[[Any], bool] | None:
    """``guards`` as one function of x, True where every guard holds; None for None (no route)."""
    if guards is None:
        return None
    if not guards:
        return always
    namespace: dict[str, Any] = {"__builtins__": {"getattr": getattr}}
    terms = []
    for i, guard in enumerate(guards):
        if len(guard) not in (3, 4):
            raise TypeError(f"a guard is (attribute, call, expected[, unless]), got {guard!r}")
        name, call, namespace[f"e{i}"] = guard[0], guard[1], guard[2]
        if type(name) is str and name.isidentifier() and not keyword.iskeyword(name):
            value = f"x.{name}"
        elif type(name) is str:
            namespace[f"n{i}"], value = name, f"getattr(x, n{i})"
        else:
            namespace[f"f{i}"], value = name, f"f{i}"
        term = f"{value}{'()' if call else ''} is e{i}"
        if len(guard) == 4:
            namespace[f"u{i}"] = guard[3]
            term = f"({term} or u{i}() is True)"
        terms.append(term)
    exec(f"def holds(x):\n    return {' and '.join(terms)}\n", namespace)  # (see the docstring)
    return namespace["holds"]  # type: ignore[no-any-return]
