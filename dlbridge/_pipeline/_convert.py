"""The conversion pipeline: export, read the capsule, decide (``_handoff.decide``), run the record.

Every decision comes from the capsule (dtype code, bits, lanes, device, strides, flags) and
the target's row in the capability table, never from framework-specific attributes, so any
DLPack producer is covered. A capsule the target would reject is never handed to it.

A conversion is at most three stages, run in a loop (never by calling itself): a device move, a
dense copy, the import; each is decided on the array the stage before made (``_stage.decide_stage``,
which ``dlbridge.explain`` also calls, ``dry``), and run here: the move (``_moves.plan_move`` decided
it), the dense copy, the deferred export JAX asks for, fp4 in another layout (``_repack``), the
import (``_stage``). What a stage made is staged for the next one by ``_stage.direct``, one stage that
loops over nothing, so the modules a stage runs through never import this one.
"""

from __future__ import annotations

from typing import Any

from .._adapters import HOST, Adapter, AsIs, adapter_for, adapter_named
from .._capsule._carriers import DeferredCarrier
from .._capsule._read import CapsuleType, DLPackInfo, device_name
from .._dtypes import BY_NAME, unsigned_of_width
from .._errors import CapsuleError, DeviceMismatchError, DLBridgeError, LayoutError, OptionError
from .._options import NOT_GIVEN, Fallback, check_readonly, resolve_fallback
from . import _repack as repack
from ._consume import finish, imported, ready
from ._devices import asked
from ._export import MAX_VERSION, inspect
from ._handoff import COPIED, Handoff
from ._plan import Plan
from ._sizes import check_copy_size, size_text
from ._stage import Front, Next, decide_stage, direct, exported_handoff, run_one, to_host

__all__ = ["convert", "inspect", "MAX_VERSION", "decide_stage", "exported_handoff", "run_stages", "Front", "Next",
           "direct", "to_host"]  # fmt: skip


# --- the pipeline -----------------------------------------------------------------------------


def convert(x: Any, to: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
            copy: bool | None = None, stream: int | None = None, readonly: Any = "keep") -> Any:  # fmt: skip
    """Hand ``x`` to framework ``to`` (a name such as ``"torch"`` or the module).

    Zero-copy whenever the target can hold the data where it is; see the README for the
    fallback policy. ``copy=False`` forbids any copy, ``copy=True`` always copies.
    """
    target = adapter_named(to)
    return _convert(x, target, resolve_fallback(fallback), dtype, device, copy, stream, readonly=readonly)


def _convert(x: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
             stream: int | None, exported: Any = None, *, readonly: Any = "keep") -> Any:  # fmt: skip
    return run_stages(x, target, fallback, dtype, device, copy, stream, exported, readonly=readonly)[0]


def run_stages(x: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
               stream: int | None, exported: Any = None, *, readonly: Any = "keep") -> tuple[Any, Handoff]:  # fmt: skip
    """Decide, then run: at most a device move, a dense copy and the import, each stage decided on
    the array the stage before made (export -> read -> decide -> run). Returns the result and the
    record of its last stage (the import). ``exported``: x's capsule as the fast route exported it
    before declining (for a GPU array, with the consumer's stream), read by the first stage instead of
    exporting x again, or the error that export raised (x's producer is not asked twice)."""
    if copy is not None and copy is not True and copy is not False:
        raise OptionError(f"copy={copy!r}; expected True, False or None")
    readonly = check_readonly(readonly)
    for _ in range(4):
        front = decide_stage(x, target, fallback, dtype, device, copy, stream, exported, readonly=readonly)
        exported = None
        record = front.record
        if record.error is not None:
            record.raise_error()
        if record.keep:
            return front.value, record
        if record.fp4 is not None:
            assert front.info is not None and front.caps is not None
            return repack.run(record.fp4, front.capsule, front.info, target, front.caps, copy), record
        if record.move is not None:
            step = move(front, target, device, copy, stream)
        elif record.dense is not None:
            step = _dense_copy(front, target, copy)
        elif record.deferred:
            step = _deferred(front, target, copy)
        else:
            return run_one(front, target, copy), record
        if type(step) is not Next:
            return step, record.then or record
        x, fallback, dtype, device, copy, stream, readonly = step
    raise AssertionError(f"to_{target.name}(): no handoff after four stages")  # pragma: no cover


def _dense_copy(front: Front, target: Adapter, copy: bool | None) -> Next:
    """The dense copy the record asks for, handed to the next stage (the pipeline's own copy: COPIED)."""
    info = front.info
    assert info is not None
    dense, relabelled = _dense_source(front.x, front.source, info, target, front.capsule)
    dtype = relabelled if front.dtype is None else front.dtype
    # A dense array at another address is already the copy copy=True asks for, and the target
    # may copy it once more (JAX, misaligned) without harm: copy=None. At the same address
    # (only re-exported, e.g. NumPy dropping a byte_offset) the caller's copy= still applies.
    moved = info.size and adapter_for(dense).data_ptr(dense) != info.data_ptr  # type: ignore[union-attr]
    return Next(dense, front.fallback, dtype, None, None if moved else copy, None, COPIED if moved else front.readonly)


class _NeedsDense(Exception):  # a signal from inside a consumer's from_dlpack, caught in _deferred
    pass


def _deferred(front: Front, target: Adapter, copy: bool | None) -> Any:
    """A GPU source handed to a consumer that asks the producer for a stream itself (JAX): the
    consumer gets a ``DeferredCarrier``, and the export, with every check of the pipeline, happens
    when it calls ``__dlpack__(stream=S)``, with its own ``S`` (one export, the right stream). Where the
    fast route's export inside the consumer's ask failed (``front.failed``), that error is handled at
    this ask instead of asking the producer again."""
    caps, (src_dev, home) = front.caps, front.devices
    assert caps is not None
    state: dict[str, Any] = {}

    def export_when_asked(stream: Any) -> Any:
        capsule, info, record = exported_handoff(front, target, copy, asked(stream), front.failed)
        state["info"], state["record"] = info, record
        if record.dense is not None:
            raise _NeedsDense
        record.raise_error()
        ready(capsule, info, record)
        return capsule

    try:
        result = target._from_dlpack(DeferredCarrier(export_when_asked, home))
    except AsIs as kept:
        return kept.result()
    except _NeedsDense:
        return _dense_copy(front._replace(info=state["info"], record=state["record"]), target, copy)
    except DLBridgeError:
        raise
    except MemoryError:
        raise
    except Exception as err:
        info = state.get("info")
        if info is None:  # the consumer failed before it asked for the capsule: it cannot use the device
            raise DeviceMismatchError(
                f"to_{target.name}(): the source says it is on {device_name(src_dev[0])}:{src_dev[1]}, which "
                f"{target.name} cannot use in this process ({type(err).__name__}: {err})"
            ) from err
        raise CapsuleError(
            f"to_{target.name}(): {caps.consumer} {caps.version} refused {info.describe()}: {type(err).__name__}: {err}"
        ) from err
    return imported(result, state["info"], state["record"], target, caps, copy)


def _writable(dense: Any, info: DLPackInfo) -> Any:
    """A host copy the host framework may have imported read-only (NumPy < 2.2 does so for every
    capsule): writable again when the target's own (versioned) capsule said the memory is."""
    return HOST.writable(dense) if info.versioned and not info.readonly else dense


def _dense_source(x: Any, source: Adapter | None, info: DLPackInfo, target: Adapter,
                  capsule: Any = None) -> tuple[Any, str | None]:  # fmt: skip
    """A dense copy of ``x``, and the dtype its bits have when the copy's own dtype differs.
    ``capsule``: x's export the stage decided on (unconsumed), which the host imports rather than
    asking x's producer again (where the host reads its kind)."""
    check_copy_size(info, target.name, f"the dense copy {target.name} needs")
    try:
        if source is not None:
            return source.contiguous(x), None
        # through the host: as raw unsigned bits where it cannot hold the dtype
        caps = HOST.capabilities()
        given = capsule if caps.versioned_capsules or not info.versioned else None
        if info.dtype in caps.imports or info.dtype in caps.holds:
            return _writable(HOST.contiguous(to_host(x, None, given)), info), None
        host = to_host(x, unsigned_of_width(info.bits * info.lanes), given)
        return _writable(HOST.contiguous(host), info), info.dtype if info.dtype in BY_NAME else None
    except MemoryError as err:
        raise LayoutError(
            f"to_{target.name}(): the dense copy {target.name} needs of {info.describe()} "
            f"({size_text(info.nbytes)}) did not fit in memory (MemoryError: {err}). Pass a smaller array."
        ) from err


# --- a device move, run (``_moves.plan_move`` decided it) ------------------------------------


def move(front: Any, target: Adapter, device: Any, copy: bool | None, stream: int | None) -> Any:
    """Run a record's move: the moved array for the next stage (``Next``), or the result (an upload)."""
    record, x, source = front.record, front.x, front.source
    src_dev, dst_dev = record.move.source, record.move.destination
    wire = stream  # the target's stream on the destination (stream_rule: None off the GPU)
    there = f"{device_name(dst_dev[0])}:{dst_dev[1]}"
    probe = record.given
    if source is not None and (dst_dev[0] in source.device_codes or dst_dev[0] == 1):
        moved = _moved_by(source, x, dst_dev, target, probe, there)
        # A CPU copy keeps the CPU device asked for (JAX numbers its CPU devices).
        return Next(moved, front.fallback, front.dtype, dst_dev if dst_dev[0] == 1 else None, None, wire, COPIED)
    if src_dev[0] == 1:
        return _upload(x, target, record.plan, probe, dst_dev, wire, there, front.capsule)
    return Next(_host_capsule(x, target, probe), front.fallback, front.dtype, dst_dev, None, None, COPIED)


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
            there: str, capsule: Any) -> Any:  # fmt: skip
    """CPU memory its producer cannot move: the target uploads the raw bytes (a same-width uint
    array), labels them with the dtype it imports (plan.wire), and the plan is applied there.
    ``capsule``: x's export the move was decided on (staged, x's producer is not asked again)."""
    width = BY_NAME[plan.wire].width
    given = capsule if HOST.capabilities().versioned_capsules else None  # (a versioned capsule: _probe)
    host = to_host(x, unsigned_of_width(width) or plan.wire, given)
    writable = True if HOST.is_readonly(host) else None  # the upload copies: a read-only source is fine
    try:
        if 1 in target.device_codes:
            moved = target.to_device(direct(host, target, plan.wire, writable), dst_dev)
        else:
            moved = direct(target.from_host(host, dst_dev), target, plan.wire, None, wire)
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
