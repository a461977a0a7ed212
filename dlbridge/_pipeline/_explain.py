"""``dlbridge.explain``: the record of a conversion, decided by the pipeline's own first stage and not run.

The conversion would export ``x``, read the capsule and decide (``_stage.decide_stage``); explain
does exactly that, ``dry``, and stops: nothing reaches the consumer and nothing is copied. The capsule
is dropped unconsumed (which frees it); a copy the producer would export in x's place (a torch
tensor's conjugate bit resolved, a read-only or byte-swapped array copied for copy=True) is described
from memory that exists already, not made; a GPU array is described without synchronising (no stream
waits). A record with a device move or a dense copy carries in ``then`` the record for the moved or
dense array, decided on what its capsule will say; a deferred export (JAX asks the producer with its
own stream) is described as that export would make it.
"""

from __future__ import annotations

from typing import Any

from .._adapters import adapter_named, producer_name
from .._capsule._read import CapsuleType
from .._errors import DLBridgeError, OptionError
from .._options import NOT_GIVEN, check_readonly, resolve_fallback
from ._handoff import Handoff, refused
from ._stage import decide_stage

__all__ = ["explain"]


def explain(x: Any, to: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
            copy: bool | None = None, stream: int | None = None, readonly: Any = "keep") -> Handoff:  # fmt: skip
    """What ``convert(x, to, ...)`` with the same options would do, without doing it.

    Returns a ``Handoff``: ``error`` (the ``DLBridgeError`` subclass the conversion would raise, or
    None), ``message``, ``shares`` (whether the result would share ``x``'s memory), ``steps`` and
    ``str()`` (readable), ``to_json()``. ``to`` is a framework name or module, as for ``convert``.
    """
    target = adapter_named(to)  # an unknown target is the caller's error, raised as convert raises it
    who = "capsule" if type(x) is CapsuleType else producer_name(x) or "?"
    try:
        if copy is not None and copy is not True and copy is not False:
            raise OptionError(f"copy={copy!r}; expected True, False or None")
        resolved, readonly = resolve_fallback(fallback), check_readonly(readonly)
        front = decide_stage(x, target, resolved, dtype, device, copy, stream, dry=True, readonly=readonly)
    except DLBridgeError as err:
        return refused(who, target.name, err)
    return _outcome(front.record)


def _outcome(record: Handoff) -> Handoff:
    """``record`` with the error its chain ends in: a move or dense copy whose array is then refused
    raises that refusal, so ``error`` and ``message`` say it (``steps`` keep the copy made first)."""
    last = record
    while last.then is not None:
        last = last.then
    if last is record or last.error is None:
        return record
    return record._replace(error=last.error, message=last.message, raised=last.raised)
