"""The conversion pipeline: export, read the capsule, decide (``_handoff.decide``), run the record.

Every decision comes from the capsule (dtype code, bits, lanes, device, strides, flags) and
the target's row in the capability table, never from framework-specific attributes, so any
DLPack producer is covered. A capsule the target would reject is never handed to it.

A conversion is at most three stages, run in a loop (never by calling itself): a device move, a
dense copy, the import; each is decided on the array the stage before made (``decide_stage``,
which ``dlbridge.explain`` also calls). Asking the producer for its capsule is ``_export``'s;
moving memory to another device, ``_moves``'.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from typing import Any, NamedTuple

from .._adapters import (
    HOST,
    Adapter,
    AsIs,
    adapter_for,
    adapter_named,
    producer_name,
    symbolic_error,
)
from .._capabilities import Capabilities
from .._capsule._carriers import DeferredCarrier
from .._capsule._edit import relabel_device
from .._capsule._read import GPU_CODES, CapsuleType, DLPackInfo, alias_device, device_name, read
from .._dtypes import BY_NAME, unsigned_of_width
from .._errors import (
    CapsuleError,
    DeviceMismatchError,
    DLBridgeError,
    LayoutError,
    NotAnArrayError,
    OptionError,
)
from .._options import NOT_GIVEN, Fallback, check_readonly, resolve_fallback
from . import _logical
from . import _subbyte as subbyte
from ._consume import import_capsule, imported, ready
from ._devices import check_device, device_of, home_of, host_device, parse_device, stream_for
from ._export import MAX_VERSION, export, inspect
from ._handoff import COPIED, Handoff, decide
from ._logical import _entries as _views  # mutated in place, never rebound
from ._moves import move, plan_move
from ._plan import recalled_fallback
from ._sizes import check_copy_size, size_text

__all__ = ["convert", "inspect", "MAX_VERSION", "decide_stage", "run_stages", "Front", "Next", "direct", "to_host"]


# --- the pipeline -----------------------------------------------------------------------------


def convert(x: Any, to: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
            copy: bool | None = None, stream: int | None = None, readonly: Any = "keep") -> Any:  # fmt: skip
    """Hand ``x`` to framework ``to`` (a name such as ``"torch"`` or the module).

    Zero-copy whenever the target can hold the data where it is; see the README for the
    fallback policy. ``copy=False`` forbids any copy, ``copy=True`` always copies.
    """
    target = adapter_named(to)
    return _convert(x, target, resolve_fallback(fallback), dtype, device, copy, stream, readonly=readonly)


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


def _convert(x: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
             stream: int | None, exported: Any = None, *, readonly: Any = "keep") -> Any:  # fmt: skip
    return run_stages(x, target, fallback, dtype, device, copy, stream, exported, readonly=readonly)[0]


def run_stages(x: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
               stream: int | None, exported: Any = None, *, readonly: Any = "keep") -> tuple[Any, Handoff]:  # fmt: skip
    """Decide, then run: at most a device move, a dense copy and the import, each stage decided on
    the array the stage before made (export -> read -> decide -> run). Returns the result and the
    record of its last stage (the import). ``exported``: x's capsule as the fast route exported it
    before declining (for a GPU array, with the consumer's stream), read by the first stage instead of
    exporting x again."""
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
            return subbyte.run(record.fp4, front.capsule, front.info, target, front.caps, copy), record
        if record.move is not None:
            step = move(front, target, device, copy, stream)
        elif record.dense is not None:
            step = _dense_copy(front, target, copy, readonly)
        elif record.deferred:
            step = _deferred(front, target, copy, readonly)
        else:
            return _run(front, target, copy), record
        if type(step) is not Next:
            return step, record.then or record
        x, fallback, dtype, device, copy, stream, readonly = step
    raise AssertionError(f"to_{target.name}(): no handoff after four stages")  # pragma: no cover


def decide_stage(x: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
                 stream: int | None, exported: Any = None, *, readonly: str = "keep") -> Front:  # fmt: skip
    """Where ``x`` is, its capsule (exported, not consumed) and the record for it; raises the errors
    found before a record can be made (not an array, a producer that fails, a device it cannot use).
    ``readonly``: checked (``check_readonly``), or the pipeline's COPIED."""
    if type(x) is not CapsuleType:
        return _array_stage(x, target, fallback, dtype, device, copy, stream, exported, readonly)
    return _capsule_stage(x, target, fallback, dtype, device, copy, stream, readonly)


def _array_stage(x: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
                 stream: int | None, exported: Any, readonly: str) -> Front:  # fmt: skip
    """``decide_stage`` for an array (anything but a raw capsule)."""
    cls = type(x)
    source = adapter_for(x)
    if source is None and not hasattr(cls, "__dlpack__"):
        raise symbolic_error(cls) or NotAnArrayError(
            f"to_{target.name}() needs an array that supports DLPack (__dlpack__), got {cls.__module__}."
            f"{cls.__qualname__}; wrap Python data with your framework first (e.g. {HOST.wrap_call})"
        )
    if dtype is None and _views and id(x) in _views:  # x may be a view dlbridge made (none: one dict test)
        dtype = _logical.recall(x, inspect(x))  # its own memory (the export below may be a copy)
        fallback = recalled_fallback(fallback) if dtype is not None else fallback
    src_dev = device_of(x, source)
    home, usable = home_of(src_dev, target)  # pinned / managed memory aliased, every CPU id the host's
    dst_dev = home if device is None else parse_device(device, home)
    if device is None and copy and not usable:
        dst_dev = target.home_device  # copy=True: the target's home device
    if dst_dev != home or not usable:
        if dst_dev[0] != 1 or home[0] != 1 or 1 not in target.device_codes:
            record = plan_move(x, source, target, home, dst_dev, fallback, dtype, device, copy, stream)
            return Front(record, x=x, source=source, fallback=fallback, dtype=dtype, devices=(src_dev, home))
        home = host_device(target, dst_dev, device)  # JAX's CPU device N: the same memory, labelled N
    caps = target.capabilities()
    front = Front(Handoff("?", target.name), None, None, x, source, caps, fallback, dtype, (src_dev, home))
    if stream is None and target.asks_producer_stream and src_dev[0] in GPU_CODES:
        # Decided when the consumer asks for the capsule, with its stream (no export before that).
        who = source.name if source is not None else producer_name(x) or "?"
        return front._replace(record=Handoff(who, target.name, deferred=True, copy=copy is True))
    try:  # (free unless raised) AsIs: the target gets x itself, e.g. torch -> torch keeping autograd
        capsule = exported if exported is not None else _export(x, source, target, caps, dtype, copy, stream, src_dev)
    except AsIs as kept:
        record = Handoff(source.name if source else "?", target.name, keep=True, copy=copy is True)
        return front._replace(record=record, value=kept.value)
    try:
        info = read(capsule, source.name if source is not None else producer_name(x))
    except CapsuleError as err:  # a capsule its producer could not fill (no memory): the adapter may say why
        known = source.state_error(x) if source is not None else None
        if known is None:
            raise
        raise known from err
    if info.device_code != home[0] or info.device_id != home[1]:
        check_device(info, src_dev)  # raises unless the capsule is on the claimed device (or its alias)
        relabel_device(capsule, home)  # our own export: relabelled as the memory the target can use
        info = replace(info, device_type=device_name(home[0]), device_code=home[0], device_id=home[1])
    record = decide(info, target, caps, fallback, dtype, copy, source=source, readonly=readonly)
    return front._replace(record=record, capsule=capsule, info=info, value=x if record.keep else None)


def _export(x: Any, source: Adapter | None, target: Adapter, caps: Capabilities, dtype: Any, copy: bool | None,
            stream: int | None, src_dev: tuple[int, int]) -> Any:  # fmt: skip
    """``x``'s capsule for ``target`` (raises ``AsIs`` where the target gets ``x`` itself)."""
    version = MAX_VERSION if caps.versioned_capsules else None
    if src_dev[0] in GPU_CODES:
        wire_stream = _gpu_stream(stream, source, target, src_dev)
        with source.on_device(src_dev) if source is not None else nullcontext():
            return export(x, source, wire_stream, version, copy, target, dtype)
    if stream is not None:
        raise OptionError(f"stream={stream!r} on {device_name(src_dev[0])}: only stream=None is valid off the GPU")
    if source is target and not caps.readonly_arrays and dtype is None and copy is not True:
        shared = target.readonly_alias(x)  # NumPy < 2.1 cannot export a read-only array to itself
        if shared is not None:
            raise AsIs(shared)
    return export(x, source, None, version, copy, target, dtype)


def _run(front: Front, target: Adapter, copy: bool | None) -> Any:
    """Hand the decided capsule to the consumer and finish the result as the record says."""
    capsule, info, caps, record = front.capsule, front.info, front.caps, front.record
    assert info is not None and caps is not None and record.plan is not None
    return import_capsule(capsule, info, target, caps, record, copy, front.device_to)


def _dense_copy(front: Front, target: Adapter, copy: bool | None, readonly: str) -> Next:
    """The dense copy the record asks for, handed to the next stage (the pipeline's own copy: COPIED)."""
    info = front.info
    assert info is not None
    dense, relabelled = _dense_source(front.x, front.source, info, target)
    dtype = relabelled if front.dtype is None else front.dtype
    # A dense array at another address is already the copy copy=True asks for, and the target
    # may copy it once more (JAX, misaligned) without harm: copy=None. At the same address
    # (only re-exported, e.g. NumPy dropping a byte_offset) the caller's copy= still applies.
    moved = info.size and adapter_for(dense).data_ptr(dense) != info.data_ptr  # type: ignore[union-attr]
    return Next(dense, front.fallback, dtype, None, None if moved else copy, None, COPIED if moved else readonly)


class _NeedsDense(Exception):  # a signal from inside a consumer's from_dlpack, caught in _deferred
    pass


def _deferred(front: Front, target: Adapter, copy: bool | None, readonly: str) -> Any:
    """A GPU source handed to a consumer that asks the producer for a stream itself (JAX): the
    consumer gets a ``DeferredCarrier``, and the export, with every check of the pipeline, happens
    when it calls ``__dlpack__(stream=S)``, with its own ``S`` (one export, the right stream)."""
    x, source, caps, (src_dev, home) = front.x, front.source, front.caps, front.devices
    assert caps is not None
    state: dict[str, Any] = {}

    def export_when_asked(stream: Any) -> Any:
        with source.on_device(src_dev) if source is not None else nullcontext():
            version = MAX_VERSION if caps.versioned_capsules else None
            capsule = export(x, source, stream, version, copy, target, front.dtype)
        info = read(capsule, source.name if source is not None else producer_name(x))
        if info.device_code != home[0] or info.device_id != home[1]:
            check_device(info, src_dev)
            relabel_device(capsule, home)
            info = replace(info, device_type=device_name(home[0]), device_code=home[0], device_id=home[1])
        record = state["record"] = decide(info, target, caps, front.fallback, front.dtype, copy, source=source,
                                          readonly=readonly)  # fmt: skip
        state["info"] = info
        if record.dense is not None:
            raise _NeedsDense
        record.raise_error()
        ready(capsule, info, record)
        return capsule

    try:
        result = target._from_dlpack(DeferredCarrier(export_when_asked, home))
    except AsIs as kept:
        return kept.value
    except _NeedsDense:
        return _dense_copy(front._replace(info=state["info"], record=state["record"]), target, copy, readonly)
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


def _gpu_stream(stream: int | None, source: Adapter | None, target: Adapter, device: tuple[int, int]) -> int | None:
    """The stream= a GPU producer is given: the consumer's current stream, or the caller's."""
    if stream is not None and stream != -1 and not target.honours_stream:
        raise OptionError(
            f"stream={stream!r}: {target.name} imports on a stream of its own choosing, so the producer would "
            f"synchronise with a stream {target.name} does not read on; pass stream=None (dlbridge then "
            f"synchronises with {target.name}'s stream) or stream=-1 (no synchronisation)"
        )
    wire = stream_for(stream, target, device)
    return source.no_sync_stream if wire == -1 and source is not None else wire


def _capsule_stage(capsule: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any,
                   copy: bool | None, stream: int | None, readonly: str) -> Front:  # fmt: skip
    """A raw capsule: it can be relabelled (pinned -> cpu, CPU ids), not moved or made dense."""
    info = read(capsule)
    alias = alias_device(info.device)  # pinned / managed memory: see _devices.home_of
    usable = alias != info.device and info.device_code not in target.device_codes and alias[0] in target.device_codes
    device_to = None  # the caller's capsule is relabelled only right before the import (and restored)
    if usable and parse_device(device, alias) == alias:
        device_to = alias
    elif info.device_code == 1 and (info.device_id or device is not None) and 1 in target.device_codes:
        wanted = parse_device(device, (1, 0))  # every CPU id names the host's memory: see _devices.home_of
        if wanted[0] == 1 and wanted != info.device:
            device_to = host_device(target, wanted, device)
    if device_to is not None:
        info = replace(info, device_type=device_name(device_to[0]), device_code=device_to[0], device_id=device_to[1])
    if parse_device(device, info.device) != info.device or info.device_code not in target.device_codes:
        target.check_installed()
        raise DeviceMismatchError(
            f"to_{target.name}(): a raw capsule on {info.device_type} cannot be moved; pass the array "
            "itself (not its capsule) so dlbridge can ask its producer for a copy"
        )
    caps = target.capabilities()
    record = decide(info, target, caps, fallback, dtype, copy, raw=True, readonly=readonly)
    return Front(record, capsule, info, capsule, None, caps, fallback, dtype, (info.device, info.device), device_to)


def _writable(dense: Any, info: DLPackInfo) -> Any:
    """A host copy the host framework may have imported read-only (NumPy < 2.2 does so for every
    capsule): writable again when the target's own (versioned) capsule said the memory is."""
    return HOST.writable(dense) if info.versioned and not info.readonly else dense


def _dense_source(x: Any, source: Adapter | None, info: DLPackInfo, target: Adapter) -> tuple[Any, str | None]:
    """A dense copy of ``x``, and the dtype its bits have when the copy's own dtype differs."""
    check_copy_size(info, target.name, f"the dense copy {target.name} needs")
    try:
        if source is not None:
            return source.contiguous(x), None
        # through the host: as raw unsigned bits where it cannot hold the dtype
        caps = HOST.capabilities()
        if info.dtype in caps.imports or info.dtype in caps.holds:
            return _writable(HOST.contiguous(to_host(x, None)), info), None
        host = to_host(x, unsigned_of_width(info.bits * info.lanes))
        return _writable(HOST.contiguous(host), info), info.dtype if info.dtype in BY_NAME else None
    except MemoryError as err:
        raise LayoutError(
            f"to_{target.name}(): the dense copy {target.name} needs of {info.describe()} "
            f"({size_text(info.nbytes)}) did not fit in memory (MemoryError: {err}). Pass a smaller array."
        ) from err


def to_host(x: Any, dtype: str | None) -> Any:
    """``x`` (CPU memory) as the host framework's array, its bits labelled ``dtype`` (None: as they
    are): the staging array of a dense copy or an upload."""
    return direct(x, HOST, dtype)


def direct(x: Any, target: Adapter, dtype: str | None, copy: bool | None = None, stream: int | None = None) -> Any:
    """A one-stage handoff (no move, no dense copy) for staging: raises where the record needs more."""
    front = decide_stage(x, target, "raise", dtype, None, copy, stream)
    record = front.record
    record.raise_error()
    if record.keep:
        return front.value
    if record.move is not None or record.dense is not None or record.deferred:
        raise LayoutError(f"to_{target.name}(): cannot stage {record.given.describe() if record.given else x!r} "
                          f"in one step ({record})")  # fmt: skip
    return _run(front, target, copy)
