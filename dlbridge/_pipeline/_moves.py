"""Conversions that move memory between devices: the producer's own copy, an upload of the host's
bytes by the target, or a DLPack ``dl_device=`` copy from a producer dlbridge has no adapter for.

``plan_move`` decides (the record's ``move``), ``move`` runs it: the moved array goes to the pipeline's
next stage, whose memory the target can use.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._adapters import HOST, Adapter, producer_name
from .._capsule._read import GPU_CODES, CapsuleType, DLPackInfo, device_name
from .._dtypes import BY_NAME, unsigned_of_width
from .._errors import CapsuleError, DeviceMismatchError, DLBridgeError, OptionError
from .._options import Fallback
from . import _convert as pipeline  # the pipeline (it imports this module: read at call time)
from ._consume import finish
from ._devices import device_of
from ._export import MAX_VERSION, inspect
from ._handoff import COPIED, Handoff, Move, decide, dense_info
from ._plan import Plan, plan_for

__all__ = ["plan_move", "move"]


def plan_move(x: Any, source: Adapter | None, target: Adapter, src_dev: tuple[int, int], dst_dev: tuple[int, int],
              fallback: Fallback, dtype: Any, device: Any, copy: bool | None, stream: int | None) -> Handoff:  # fmt: skip
    """The record of a conversion that moves ``x`` to ``dst_dev`` first, decided before any copy: a
    refusal (a move the caller did not ask for, a device the target lacks, a dtype) keeps the move."""
    try:
        return _plan_move(x, source, target, src_dev, dst_dev, fallback, dtype, device, copy, stream)
    except DLBridgeError as err:
        who = producer_name(x) or "?"
        return Handoff(who, target.name, None, type(err), str(err), move=Move(src_dev, dst_dev, "?"), raised=err)


def _plan_move(x: Any, source: Adapter | None, target: Adapter, src_dev: tuple[int, int], dst_dev: tuple[int, int],
               fallback: Fallback, dtype: Any, device: Any, copy: bool | None, stream: int | None) -> Handoff:  # fmt: skip
    target.check_installed()  # "install cupy" comes before "pass device=" (cached; imports nothing)
    # The caller's stream= is the stream the target reads on (on the destination device): the copy's
    # handoff is synchronised with it. Off the GPU only stream=None is valid.
    if stream is not None and dst_dev[0] not in GPU_CODES:
        raise OptionError(f"stream={stream!r} on {device_name(dst_dev[0])}: only stream=None is valid off the GPU")
    there = f"{device_name(dst_dev[0])}:{dst_dev[1]}"
    _check_move_allowed(x, source, target, src_dev, dst_dev, device, copy, there)
    # Decide the dtype first, so an unsupported one raises before any copy is made.
    probe = inspect(x)
    caps = target.capabilities()
    plan = plan_for(probe, caps, fallback, dtype, f"to_{target.name}()")
    if source is not None and (dst_dev[0] in source.device_codes or dst_dev[0] == 1):
        how = source.name  # every adapter can bring its arrays to the host
    elif src_dev[0] == 1:
        how = f"{target.name} (an upload of the host's bytes)"
    elif dst_dev[0] == 1:
        how = f"{probe.producer or 'the producer'} (DLPack dl_device=)"
    else:
        raise DeviceMismatchError(f"to_{target.name}(): dlbridge knows no way to move {probe.describe()} to {there}")
    moved = replace(dense_info(probe), device_type=device_name(dst_dev[0]), device_code=dst_dev[0],
                    device_id=dst_dev[1])  # fmt: skip
    then = decide(moved, target, caps, fallback, dtype, None, source=source, readonly=COPIED)  # the move's own copy
    who = probe.producer or "?"
    return Handoff(who, target.name, probe, plan=plan, move=Move(src_dev, dst_dev, how), then=then)


def move(front: Any, target: Adapter, device: Any, copy: bool | None, stream: int | None) -> Any:
    """Run a record's move: the moved array for the next stage (``Next``), or the result (an upload)."""
    record, x, source = front.record, front.x, front.source
    src_dev, dst_dev = record.move.source, record.move.destination
    wire = stream if dst_dev[0] in GPU_CODES else None
    there = f"{device_name(dst_dev[0])}:{dst_dev[1]}"
    probe = record.given
    if source is not None and (dst_dev[0] in source.device_codes or dst_dev[0] == 1):
        moved = _moved_by(source, x, dst_dev, target, probe, there)
        # A CPU copy keeps the CPU device asked for (JAX numbers its CPU devices).
        return pipeline.Next(moved, front.fallback, front.dtype, dst_dev if dst_dev[0] == 1 else None, None, wire,
                             COPIED)  # fmt: skip
    if src_dev[0] == 1:
        return _upload(x, target, record.plan, probe, dst_dev, wire, there)
    return pipeline.Next(_host_capsule(x, target, probe), front.fallback, front.dtype, dst_dev, None, None, COPIED)


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


def _moved_by(adapter: Adapter, x: Any, dst_dev: tuple[int, int], target: Adapter, probe: DLPackInfo,
              there: str) -> Any:  # fmt: skip
    """``adapter.to_device(x, dst_dev)``, its failure (e.g. a CPU-only build asked for CUDA) a DeviceMismatchError."""
    try:
        return adapter.to_device(x, dst_dev)
    except MemoryError:
        raise
    except Exception as err:
        raise DeviceMismatchError(
            f"to_{target.name}(): {adapter.name} could not copy {probe.describe()} to {there}: "
            f"{type(err).__name__}: {err}"
        ) from err


def _upload(x: Any, target: Adapter, plan: Plan, probe: DLPackInfo, dst_dev: tuple[int, int], wire: int | None,
            there: str) -> Any:  # fmt: skip
    """CPU memory its producer cannot move: the target uploads the raw bytes (a same-width uint
    array), labels them with the dtype it imports (plan.wire), and the plan is applied there."""
    width = BY_NAME[plan.wire].width
    host = pipeline.to_host(x, unsigned_of_width(width) or plan.wire)
    writable = True if HOST.is_readonly(host) else None  # the upload copies: a read-only source is fine
    try:
        if 1 in target.device_codes:
            moved = target.to_device(pipeline.direct(host, target, plan.wire, writable), dst_dev)
        else:
            moved = pipeline.direct(target.from_host(host, dst_dev), target, plan.wire, None, wire)
    except DLBridgeError:
        raise
    except MemoryError:
        raise
    except Exception as err:  # e.g. a CPU-only build asked for CUDA
        raise DeviceMismatchError(
            f"to_{target.name}(): {target.name} could not copy {probe.describe()} to {there}: "
            f"{type(err).__name__}: {err}"
        ) from err
    return finish(moved, plan, target, None)


def _host_capsule(x: Any, target: Adapter, probe: DLPackInfo) -> Any:
    """A capsule of a CPU copy of ``x``, asked of a producer dlbridge has no adapter for (DLPack 1.0 dl_device=)."""
    caps = target.capabilities()
    try:
        capsule = x.__dlpack__(
            dl_device=(1, 0), copy=True, max_version=MAX_VERSION if caps.versioned_capsules else None
        )
    except MemoryError:
        raise
    except Exception as err:
        raise DeviceMismatchError(
            f"to_{target.name}(): {probe.producer} cannot copy {probe.describe()} to the CPU through "
            f"DLPack (__dlpack__(dl_device=(1, 0), copy=True) raised {type(err).__name__}: {err})"
        ) from err
    if type(capsule) is not CapsuleType:
        raise CapsuleError(f"{type(x).__name__}.__dlpack__(dl_device=...) returned {type(capsule).__name__}")
    return capsule
