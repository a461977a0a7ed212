"""Conversions that move memory between devices, decided: the producer's own copy, an upload of the
host's bytes by the target, or a DLPack ``dl_device=`` copy from a producer dlbridge has no adapter for.

``plan_move`` decides (the record's ``move``) before anything is copied; the pipeline runs it
(``_convert.move``): the moved array goes to its next stage, whose memory the target can use.
"""

from __future__ import annotations

from typing import Any

from .._adapters import Adapter, producer_name
from .._capsule._read import DLPackInfo, device_name, read
from .._errors import DeviceMismatchError, DLBridgeError
from .._options import Fallback
from ._devices import check_device, described_on, device_of, handshake, on_device, require_device, stream_rule
from ._export import MAX_VERSION, export
from ._handoff import COPIED, Handoff, Move, decide, dense_info
from ._plan import plan_for

__all__ = ["plan_move"]


def plan_move(x: Any, source: Adapter | None, target: Adapter, src_dev: tuple[int, int], dst_dev: tuple[int, int],
              fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
              stream: int | None) -> tuple[Handoff, Any]:  # fmt: skip
    """The record of a conversion that moves ``x`` to ``dst_dev`` first, decided before any copy: a
    refusal (a move the caller did not ask for, a device the target or the mover lacks, a dtype)
    keeps the move. Also x's capsule the decision read (unconsumed; None where refused before it),
    which an upload stages rather than asking x's producer again."""
    try:
        return _plan_move(x, source, target, src_dev, dst_dev, fallback, dtype, device, copy, stream)
    except DLBridgeError as err:
        who = producer_name(x) or "?"
        return Handoff(who, target.name, None, type(err), str(err), move=Move(src_dev, dst_dev, "?"), raised=err), None


def _plan_move(x: Any, source: Adapter | None, target: Adapter, src_dev: tuple[int, int], dst_dev: tuple[int, int],
               fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
               stream: int | None) -> tuple[Handoff, Any]:  # fmt: skip
    target.check_installed()  # "install cupy" comes before "pass device=" (cached; imports nothing)
    # The caller's stream= is the stream the target reads on (on the destination device): the copy's
    # handoff is synchronised with it.
    stream_rule(stream, dst_dev)
    there = f"{device_name(dst_dev[0])}:{dst_dev[1]}"
    _check_move_allowed(x, source, target, src_dev, dst_dev, device, copy, there)
    how = _mover(source, target, src_dev, dst_dev)
    call = f"to_{target.name}()"
    require_device(target, dst_dev, call)  # before anything is exported: a device this process lacks
    if source is not None and how == source.name:
        require_device(source, dst_dev, call, "copy its array to")
    # Decide the dtype first, so an unsupported one raises before any copy is made.
    capsule, probe = _probe(x, source, src_dev)
    caps = target.capabilities()
    plan = plan_for(probe, caps, fallback, dtype, call)
    if how is None:
        raise DeviceMismatchError(f"{call}: dlbridge knows no way to move {probe.describe()} to {there}")
    if how == "dl_device":
        how = f"{probe.producer or 'the producer'} (DLPack dl_device=)"
    then = decide(described_on(dense_info(probe), dst_dev), target, caps, fallback, dtype, None, source=source,
                  readonly=COPIED)  # the move's own copy  # fmt: skip
    who = probe.producer or "?"
    return Handoff(who, target.name, probe, plan=plan, move=Move(src_dev, dst_dev, how), then=then), capsule


def _mover(source: Adapter | None, target: Adapter, src_dev: tuple[int, int], dst_dev: tuple[int, int]) -> str | None:
    """Who copies the memory to ``dst_dev`` (None: nobody dlbridge knows)."""
    if source is not None and (dst_dev[0] in source.device_codes or dst_dev[0] == 1):
        return source.name  # every adapter can bring its arrays to the host
    if src_dev[0] == 1:
        return f"{target.name} (an upload of the host's bytes)"
    return "dl_device" if dst_dev[0] == 1 else None


def _probe(x: Any, source: Adapter | None, src_dev: tuple[int, int]) -> tuple[Any, DLPackInfo]:
    """x's capsule, described (no synchronisation: the decision reads no data), as ``inspect`` does."""
    wire = handshake(None, source, None, src_dev)
    with on_device(source, src_dev):
        capsule = export(x, source, wire.stream, MAX_VERSION)
    return capsule, check_device(read(capsule, producer_name(x)), src_dev)


def _check_move_allowed(x: Any, source: Adapter | None, target: Adapter, src_dev: tuple[int, int],
                        dst_dev: tuple[int, int], device: Any, copy: bool | None, there: str) -> None:  # fmt: skip
    """Refuse a move the caller did not ask for (a copy they must opt into), or to a device the target lacks."""
    if copy is False or (copy is None and device is None):
        real = device_of(x, source)  # src_dev may be its alias (pinned -> cpu): name the device the caller has
        here = f"{device_name(real[0])}:{real[1]}"
        home = dst_dev if dst_dev != src_dev else target.home_device
        hint = f'pass device="{device_name(home[0])}" or copy=True to copy it there'
        why = "copy=False forbids the copy" if copy is False else "that needs a copy"
        raise DeviceMismatchError(
            f"to_{target.name}(): the source is on {here} and {target.name} cannot use memory there "
            f"without moving it ({why}); {hint}" if dst_dev == src_dev else
            f"to_{target.name}(): moving {here} -> {there} is a copy, which copy=False forbids"
        )  # fmt: skip
    if dst_dev[0] not in target.device_codes:
        raise DeviceMismatchError(f"to_{target.name}(): {target.name} cannot live on {there}")
