"""``dlbridge.explain``: the record of a conversion, decided by the pipeline's own first stage and not run.

The conversion would export ``x``, read the capsule and decide (``_convert.decide_stage``); explain
does exactly that and stops: nothing reaches the consumer, nothing is copied (the capsule is
dropped unconsumed, which frees it). A record with a device move or a dense copy carries in
``then`` the record for the moved or dense array, decided on what its capsule will say.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from .._adapters import adapter_named, producer_name
from .._capsule._read import CapsuleType, device_name, read
from .._errors import DLBridgeError, OptionError
from .._options import NOT_GIVEN, check_readonly, resolve_fallback
from ._convert import decide_stage
from ._devices import check_device
from ._export import MAX_VERSION, export
from ._handoff import Handoff, decide, refused

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
        front = decide_stage(x, target, resolved, dtype, device, copy, stream, readonly=readonly)
        record = front.record
        if record.deferred:  # the consumer asks for the capsule with its stream: described here without one
            record = _deferred(front, target, resolved, copy, readonly)
    except DLBridgeError as err:
        return refused(who, target.name, err)
    return record


def _deferred(front: Any, target: Any, fallback: Any, copy: bool | None, readonly: str) -> Handoff:
    """The record a deferred export (a GPU source into a consumer that asks with its own stream) would
    get: the capsule described as the pipeline's export then describes it, without a stream."""
    caps, source, (src_dev, home) = front.caps, front.source, front.devices
    stream = source.no_sync_stream if source is not None else -1  # nothing reads the data
    version = MAX_VERSION if caps.versioned_capsules else None
    with source.on_device(src_dev) if source is not None else nullcontext():
        capsule = export(front.x, source, stream, version, copy, target, front.dtype)
    info = read(capsule, front.record.source)
    if info.device != home:  # as the pipeline relabels its own export (pinned/managed memory)
        check_device(info, src_dev)
        info = replace(info, device_type=device_name(home[0]), device_code=home[0], device_id=home[1])
    record = decide(info, target, caps, fallback, front.dtype, copy, source=source, readonly=readonly)
    return record._replace(deferred=True)
