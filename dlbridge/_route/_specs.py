"""The route's specs, one per target framework: what the public functions hand the route.

A spec is a one-item list holding the target's ``State`` (``_records``), replaced whole when it changes
(``_replay``). It is made on first use, as a state not yet prepared that names the target by its
registry name; the first conversion through the pipeline prepares it (``_replay._pipeline``, which
finds the target's adapter). Made here, so that ``import dlbridge`` builds its ``to_<name>`` functions
without importing the route or any adapter; the rest of the route loads with the first conversion.
"""

from __future__ import annotations

from .._accelerator import accel

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SPECS"]


class _Specs(dict[str, "list[Any]"]):
    """target name -> its spec, made on first use."""

    def __missing__(self, name: str) -> list[Any]:
        if accel is not None:
            state = accel.State(target=name)  # (the compiled record, as _records.State is where built)
        else:
            from ._records import State

            state = State(target=name)
        return self.setdefault(name, [state])


SPECS: dict[str, list[Any]] = _Specs()
