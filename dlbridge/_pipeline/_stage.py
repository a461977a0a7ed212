"""One stage of a conversion: an array's (or a raw capsule's) export read, checked and decided
(``decide_stage``), and the decided import run (``direct``: a one-stage handoff, which moves, dense
copies and fp4 repacks use to stage what they made). The pipeline (``_convert``) loops over stages;
``dlbridge.explain`` calls ``decide_stage`` dry.

An array's stage is one sequence, written once (``exported_handoff``): export, read, check and
relabel the capsule's device, decide. Asking the producer for its capsule is ``_export``'s; where
memory is, which stream the producer is given and what the target can use, ``_devices``'; whether
memory must move to another device first, ``_moves.plan_move``'s.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

from .._adapters import HOST, Adapter, AsIs, adapter_for, producer_name, symbolic_error
from .._capabilities import Capabilities
from .._capsule._read import CapsuleType, DLPackInfo, read
from .._errors import CapsuleError, LayoutError, NotAnArrayError
from .._options import Fallback
from . import _logical
from ._consume import import_capsule
from ._devices import (
    Handshake,
    check_stream,
    defers,
    described_on,
    destination,
    device_of,
    handshake,
    on_device,
    placed,
    raw_destination,
    require_device,
)
from ._export import MAX_VERSION, StandIn, capsule_of, described, export, inspect
from ._handoff import COPIED, Handoff, decide
from ._logical import _entries as _views  # mutated in place, never rebound
from ._moves import plan_move
from ._plan import recalled_fallback

__all__ = ["Next", "Front", "decide_stage", "exported_handoff", "run_one", "direct", "to_host"]


class Next(NamedTuple):
    """What a move or a dense copy hands the next stage: the new array and the options for it."""

    x: Any
    fallback: Fallback
    dtype: Any
    device: Any
    copy: bool | None
    stream: int | None
    readonly: str = "keep"  # a copy the pipeline made: COPIED


class Front(NamedTuple):
    """A stage decided: its record, and what running it needs (the capsule, unconsumed)."""

    record: Handoff
    capsule: Any = None
    info: DLPackInfo | None = None
    x: Any = None
    source: Adapter | None = None
    caps: Capabilities | None = None
    fallback: Fallback = "raise"
    dtype: Any = None
    devices: tuple[tuple[int, int], tuple[int, int]] = ((1, 0), (1, 0))  # (the source's, the home it shares)
    device_to: tuple[int, int] | None = None  # a raw capsule relabelled for the import
    value: Any = None  # record.keep: what the consumer gets
    readonly: str = "keep"  # readonly= checked (``check_readonly``), or the pipeline's own copy: COPIED
    failed: BaseException | None = None  # a deferred stage: the error of the fast route's export inside the ask


def decide_stage(x: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
                 stream: int | None, exported: Any = None, dry: bool = False, *, readonly: str = "keep") -> Front:  # fmt: skip
    """Where ``x`` is, its capsule (exported, not consumed) and the record for it; raises the errors
    found before a record can be made (not an array, a producer that fails, a device it cannot use).
    ``dry`` (``dlbridge.explain``): the record only, nothing copied (a copy the producer would export
    in x's place is described, not made; the capsule is not kept). ``readonly``: checked
    (``check_readonly``), or the pipeline's COPIED."""
    if type(x) is not CapsuleType:
        return _array_stage(x, target, fallback, dtype, device, copy, stream, exported, dry, readonly)
    return _capsule_stage(x, target, fallback, dtype, device, copy, stream, readonly)


def _array_stage(x: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
                 stream: int | None, exported: Any, dry: bool, readonly: str) -> Front:  # fmt: skip
    """``decide_stage`` for an array (anything but a raw capsule)."""
    cls = type(x)
    source = adapter_for(x)
    if source is None and not hasattr(cls, "__dlpack__"):
        raise symbolic_error(cls) or NotAnArrayError(
            f"to_{target.name}() needs an array that supports DLPack (__dlpack__), got {cls.__module__}."
            f"{cls.__qualname__}; wrap Python data with your framework first (e.g. {HOST.wrap_call})"
        )
    if dtype is None and _views and _logical.holds(x):  # x is a view dlbridge made (none: one dict test)
        dtype = _logical.recall(x, inspect(x))  # its own memory (the export below may be a copy)
        fallback = recalled_fallback(fallback) if dtype is not None else fallback
    src_dev = device_of(x, source)
    home, move_to = destination(src_dev, target, device, copy)
    if move_to is not None:
        record, probed = plan_move(x, source, target, home, move_to, fallback, dtype, device, copy, stream)
        front = Front(record, None if dry else probed, x=x, source=source, fallback=fallback, dtype=dtype,
                      readonly=readonly)  # fmt: skip
        return front._replace(devices=(src_dev, home))
    check_stream(stream, target, src_dev)  # the caller's options first
    require_device(target, home, f"to_{target.name}()")  # then a GPU this process lacks (a CPU-only build)
    caps = target.capabilities()
    front = Front(Handoff("?", target.name), None, None, x, source, caps, fallback, dtype, (src_dev, home),
                  readonly=readonly)  # fmt: skip
    deferred = defers(stream, target, src_dev)
    if deferred and not dry:  # decided when the consumer asks for the capsule, with its stream (no export before)
        who = source.name if source is not None else producer_name(x) or "?"
        # (an error the fast route's export raised inside the consumer's own ask is handled when it asks again)
        failed = exported if isinstance(exported, BaseException) else None
        return front._replace(record=Handoff(who, target.name, deferred=True, copy=copy is True), failed=failed)
    wire = handshake(stream, source, target, src_dev, describe=dry)  # (explain: described, no synchronisation)
    try:  # (free unless raised) AsIs: the target gets x itself, e.g. torch -> torch keeping autograd
        capsule, info, record = exported_handoff(front, target, copy, wire, exported, dry)
    except AsIs as kept:
        record = Handoff(source.name if source else "?", target.name, keep=True, copy=copy is True)
        return front._replace(record=record, value=None if dry else kept.result())
    if deferred:  # explain of a deferred export: described as the consumer's own ask would make it
        record = record._replace(deferred=True)
    return front._replace(record=record, capsule=capsule, info=info, value=x if record.keep else None)


def exported_handoff(front: Front, target: Adapter, copy: bool | None, wire: Handshake, exported: Any = None,
                     dry: bool = False) -> tuple[Any, DLPackInfo, Handoff]:  # fmt: skip
    """Export ``front.x`` for ``front``'s target, read the capsule, check and relabel its device
    (``_devices.placed``), decide: the one sequence of the array stage, of the deferred export (with
    the stream the consumer asks with) and of ``dlbridge.explain`` (``dry``: nothing copied, the
    capsule only described). ``exported``: the capsule the fast route made, or the error its export
    raised (the producer is not asked again). Returns (capsule, what it says, the record); raises
    ``AsIs`` where the target gets x itself."""
    x, source, caps = front.x, front.source, front.caps
    assert caps is not None
    src_dev, home = front.devices
    who = source.name if source is not None else producer_name(x)
    if exported is not None and type(exported) is CapsuleType:
        made: Any = exported
    else:
        with on_device(source, src_dev):
            made = _export(x, source, target, caps, front.dtype, copy, wire.stream, exported)
    standin = type(made) is StandIn
    if dry:
        capsule, info = None, described(made, who)
    else:
        capsule = capsule_of(made)  # a stand-in's copy, made now
        try:
            info = read(capsule, who)
        except CapsuleError as err:  # a capsule its producer could not fill (no memory): the adapter may say why
            known = source.state_error(x) if source is not None else None
            if known is None:
                raise
            raise known from err
    info = placed(capsule, info, src_dev, home, relabel=capsule is not None)
    # A copy the producer made is the copy copy=True asks for (none after the import), and memory of its own
    # (COPIED): the source's read-only state is not its, and it is handed over writable where the consumer
    # imports it read-only (NumPy < 2.2).
    record = decide(info, target, caps, front.fallback, front.dtype, None if standin and copy else copy, source=source,
                    readonly=COPIED if standin else front.readonly)  # fmt: skip
    return capsule, info, record._replace(producer_copy=made.why) if standin else record


def _export(x: Any, source: Adapter | None, target: Adapter, caps: Capabilities, dtype: Any, copy: bool | None,
            stream: int | None, failed: BaseException | None = None) -> Any:  # fmt: skip
    """``x``'s capsule for ``target``, or the StandIn of a copy (raises ``AsIs`` where the target gets
    ``x`` itself); ``failed``: the error the fast route's export of ``x`` raised."""
    if source is target and failed is None and not caps.readonly_arrays and dtype is None:
        shared = target.readonly_alias(x)  # NumPy < 2.1 cannot export a read-only array to itself
        if shared is not None:  # (copy=True: its own copy, as a NumPy that can export it gives)
            raise AsIs(shared, partial(target.copy, shared) if copy is True else None)
    version = MAX_VERSION if caps.versioned_capsules else None
    return export(x, source, stream, version, copy, target, dtype, failed)


def run_one(front: Front, target: Adapter, copy: bool | None) -> Any:
    """Hand the decided capsule to the consumer and finish the result as the record says."""
    capsule, info, caps, record = front.capsule, front.info, front.caps, front.record
    assert info is not None and caps is not None and record.plan is not None
    return import_capsule(capsule, info, target, caps, record, copy, front.device_to)


def _capsule_stage(capsule: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any,
                   copy: bool | None, stream: int | None, readonly: str) -> Front:  # fmt: skip
    """A raw capsule: it can be relabelled (pinned -> cpu, CPU ids), not moved or made dense."""
    info = read(capsule)
    device_to = raw_destination(info, target, device)  # the caller's capsule: relabelled right before the import
    if device_to is not None:
        info = described_on(info, device_to)
    caps = target.capabilities()
    record = decide(info, target, caps, fallback, dtype, copy, raw=True, readonly=readonly)
    return Front(record, capsule, info, capsule, None, caps, fallback, dtype, (info.device, info.device), device_to,
                 readonly=readonly)  # fmt: skip


def to_host(x: Any, dtype: str | None, exported: Any = None) -> Any:
    """``x`` (CPU memory) as the host framework's array, its bits labelled ``dtype`` (None: as they
    are): the staging array of a dense copy or an upload. ``exported``: x's capsule, unconsumed."""
    return direct(x, HOST, dtype, exported=exported)


def direct(x: Any, target: Adapter, dtype: str | None, copy: bool | None = None, stream: int | None = None,
           exported: Any = None) -> Any:  # fmt: skip
    """A one-stage handoff (no move, no dense copy) for staging: raises where the record needs more."""
    front = decide_stage(x, target, "raise", dtype, None, copy, stream, exported)
    record = front.record
    record.raise_error()
    if record.keep:
        return front.value
    if record.move is not None or record.dense is not None or record.deferred:
        raise LayoutError(f"to_{target.name}(): cannot stage {record.given.describe() if record.given else x!r} "
                          f"in one step ({record})")  # fmt: skip
    return run_one(front, target, copy)
