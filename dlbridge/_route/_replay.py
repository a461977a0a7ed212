"""The fast route: the common conversion, decided once and replayed.

Most handoffs are the same few cases over and over: an array of a framework's own type, dense C order,
no keyword but ``fallback=`` and ``readonly=``. For those the decision depends only on the consumer's
capability row, the capsule's dtype, the fallback, ``readonly=``, whether the memory is read-only (the
capsule's READ_ONLY flag, or its Producer's ``readonly``: JAX arrays are immutable whatever their capsules
say) and the device, so it is made once by the pipeline's own decision function
(``_handoff.decide``, through ``_learn``) and stored as a ``Replay`` of its record: the dtype the consumer
is handed, what turns its import into the result, and the capsules the record holds for (its
``Admission``), which the route compares with each export's facts — it decides nothing itself.

``convert(spec, x, fallback, dtype, device, copy, stream, readonly)`` replays a route: the compiled one in
``dlbridge/_csrc/route.c`` when it is built, else the Python one here, which takes the same steps:
the producer's guards (CPU memory), or its GPU guards, the array's device and the stream handshake
(``_gpu``); one export; the capsule read (``_capsule._probe``) and checked against the stored route;
the import. Both decline anything else (another layout, a read-only array a consumer cannot hold, an
object that is not exactly a framework's own array type, a view dlbridge made, a guard that fails, a
handshake the producer must do on another stream or device, any error on the way) to the full
pipeline (``_pipeline``), which decides again with every check and says what went wrong; a capsule
the route exported and declined before any consumer saw it is handed to the pipeline, never exported
twice. Everything framework-specific comes from the adapters (``fast_export``, ``fast_gpu_export``,
``fast_import``, ``fast_stream_query``); the route holds no framework knowledge.

The records (``State``, ``Producer``, ``Replay``; ``_records``) are the compiled module's C types where it
is built, which both routes read. A call holds the state it started with (one strong reference), so code
that runs in the middle of a conversion (a ``TorchFunctionMode``, a producer's Python ``__dlpack__``,
another thread) and makes dlbridge learn again changes what the next call reads, never what this one holds.

One rule for errors on the way, on both paths: an ``Exception`` sends the call to the pipeline (which
meets it again and says what went wrong), except ``MemoryError``; ``KeyboardInterrupt``, ``SystemExit``
and every other ``BaseException`` propagate as they are. The producer is asked once per conversion:
an ``Exception`` its export raised is handed to the pipeline, which handles it as its own export's, and
so is a capsule the consumer refused without taking it (``_Handover``), and the error of an export made
inside the consumer's import (a deferred export: JAX asks with its own stream).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._accelerator import accel
from .._adapters import adapter_named
from .._capsule._carriers import Carrier
from .._capsule._edit import relabel_at, restore, restore_triple, rewrite
from .._capsule._probe import EMPTY, OTHER, located, probe
from .._options import FALLBACKS, NOT_GIVEN, READONLY, default_cell, get_default_fallback, resolve_fallback
from .._pipeline import _logical
from .._pipeline._convert import _convert
from . import _gpu as gpu
from ._guards import always
from ._learn import (
    DEVICE_ID_SHIFT,
    DEVICE_SHIFT,
    OPTIONS_SHIFT,
    READ_ONLY_MEMORY,
    READONLY_SHIFT,
    SPECS,
    current,
    learn,
    new_state,
    producers,
    spec_for,
)
from ._records import (  # noqa: F401  (_Py*: the pure-Python records, also where compiled ones are used)
    EXPORT_FUNCTION,
    EXPORT_METHOD,
    EXPORT_METHOD_LEGACY,
    IMPORT_CARRIER,
    Producer,
    Replay,
    State,
    _PyProducer,
    _PyReplay,
    _PyState,
)

__all__ = ["SPECS", "Producer", "Replay", "State", "convert", "spec_for"]

_VERSION = (1, 3)
_CPU = (1, 0)
_GPU_TYPES = (2, 10)  # CUDA, ROCm: the GPU memory the route replays (managed memory: the pipeline)
_producers = producers  # exact type -> Producer (see _learn), also handed to the compiled route
_state = new_state


def _pipeline(spec: list[Any], x: Any, fallback: Any, dtype: Any, device: Any, copy: Any, stream: Any,
              readonly: Any = "keep", exported: Any = None) -> Any:  # fmt: skip
    """What both routes decline to: the full pipeline converts x, then the route learns from it.
    ``exported``: x's capsule, which the route exported and declined before any consumer saw it; the
    pipeline reads it instead of exporting x again. Or the error that export raised, which the pipeline
    handles as its own export's where x's Producer is current (else its adapter exports x itself)."""
    if isinstance(exported, Exception) and not current(x):
        exported = None  # a Producer learned before ml_dtypes loaded: the adapter relabels what the route did not
    if type(spec[0].target) is str:  # a spec not yet used (_specs): its target by name
        spec[0] = new_state(adapter_named(spec[0].target))
    target = spec[0].target
    result = _convert(x, target, resolve_fallback(fallback), dtype, device, copy, stream, exported, readonly=readonly)
    learn(spec, target, x, result if dtype is device is copy is stream is None else None)
    return result


# --- the Python route (the same steps as _csrc/route.c's convert) ------------------------------------

_views = _logical._entries  # mutated in place, never rebound


def convert(spec: list[Any], x: Any, fallback: Any, dtype: Any, device: Any, copy: Any, stream: Any,
            readonly: Any = "keep") -> Any:  # fmt: skip
    """x converted for the spec's target: the pipeline (``_pipeline``), unless a stored route replays it."""
    state = spec[0]  # held for the whole call (see the module docstring)
    plain = dtype is None and device is None and copy is None and stream is None and state.ready
    producer = producers.get(type(x)) if plain else None
    if producer is None or (_views and id(x) in _views):  # no route for x: the pipeline decides
        return _pipeline(spec, x, fallback, dtype, device, copy, stream, readonly)
    result = _replay(state, producer, x, fallback, readonly)
    if type(result) is _Handover:
        return _pipeline(spec, x, fallback, dtype, device, copy, stream, readonly, result.capsule)
    if result is _DECLINED:
        return _pipeline(spec, x, fallback, dtype, device, copy, stream, readonly)
    return result


_DECLINED = object()


class _Handover(NamedTuple):
    """A decline after the export, before any consumer took the capsule: the pipeline reads this capsule
    (or handles this error, the export's) rather than exporting x again (one export per conversion)."""

    capsule: Any


_FALLBACK_INDEX = {name: i for i, name in enumerate(FALLBACKS)}
_KEEP = READONLY[0]
# readonly= as its route key bits (the options byte): its canonical names only (the pipeline checks the rest).
_READONLY_BITS = {name: i << READONLY_SHIFT for i, name in enumerate(READONLY)}


def _fallback_index(fallback: Any) -> int | None:
    """fallback= as the index of its canonical name (route keys); None for anything else (a str
    subclass, an array: the pipeline resolves and explains it)."""
    if fallback is NOT_GIVEN or fallback is None:
        fallback = default_cell[0] or get_default_fallback()  # None: a fallback_policy block was used
    return _FALLBACK_INDEX.get(fallback) if type(fallback) is str else None  # an array's == is elementwise


def _replay(state: Any, producer: Any, x: Any, fallback: Any, readonly: Any) -> Any:
    cell = default_cell[0] if fallback is NOT_GIVEN else None  # the common call, without a function call
    fb = _FALLBACK_INDEX.get(cell) if cell is not None else _fallback_index(fallback)
    choice = 0 if readonly is _KEEP else _READONLY_BITS.get(readonly) if type(readonly) is str else None
    if fb is None or choice is None:
        return _DECLINED
    options = fb | choice
    if producer.readonly:  # its arrays are read-only whatever their capsules say
        options |= READ_ONLY_MEMORY
    try:
        guard = state.caps_guard  # capabilities that vary at run time (JAX's x64 flag)
        if guard is not None and getattr(guard[0], guard[1]) is not guard[2]:
            return _DECLINED
        if type(x) is state.self_type:  # its own array: no capsule at all, for dtypes the pipeline took
            dtype = x.dtype
            for known in state.self_dtypes:  # by identity (a loop: any() over a generator costs ~5 times as much)
                if known is dtype:
                    return state.self_import(x)
            return _DECLINED
        holds = producer.holds  # the guards (_guards.holds); always: none, not called
        if holds is always or (holds is not None and holds(x)):  # CPU memory (the guards say so)
            capsule, forced = _export(state, producer, x)
            return _deliver(state, capsule, options, _CPU, forced)
        if producer.gpu_holds is None or not producer.gpu_holds(x):
            return _DECLINED
        device = gpu.device_of(producer, x)
        if device[0] == 1:  # a CPU array of a producer whose arrays may be anywhere (JAX with a GPU)
            capsule, forced = _export(state, producer, x)
            return _deliver(state, capsule, options, device, forced)
        if device[0] not in _GPU_TYPES:
            return _DECLINED
        if state.deferred:
            return _import_deferred(state, producer, x, options, device)
        stream = gpu.consumer_stream(state, device)
        exported = None if stream is None else gpu.export(producer, x, device, stream, state.versioned)
        if exported is None:
            return _DECLINED
        if isinstance(exported, Exception):  # the export failed: the pipeline handles its error, not asking again
            return _Handover(exported)
    except MemoryError:
        raise
    except _ExportFailed as failed:
        return _Handover(failed.error)
    except Exception:
        return _DECLINED
    return _deliver(state, exported[0], options, device, exported[1])


def _deliver(state: Any, capsule: Any, options: int, device: tuple[int, int], forced: int | None = None) -> Any:
    """An exported capsule on ``device`` (the one its array claimed) checked, and imported as its
    stored route says; a ``_Handover`` of it where the route does not replay it (or the consumer
    refused it without taking it), ``_DECLINED`` where the consumer took it and failed. ``options``: the
    route key's options byte (``_learn``), its read-only bit the Producer's; ``forced``: the dtype triple its
    capsule is given (``_export``), or None."""
    found = _route_for(state, capsule, options, device, forced)
    if type(found) is not tuple:
        return found
    triple, replay, saved, tensor = found
    wire, finish, importer = replay.wire, replay.finish, replay.importer
    if wire != triple:
        relabel_at(tensor, wire)
    try:
        importer = state.importer if importer is None else importer  # (the record's own: a copy it makes first)
        result = importer(Carrier(capsule, device) if state.kind == IMPORT_CARRIER else capsule)
    except MemoryError:
        raise
    except Exception:
        if saved is not None:  # READ_ONLY cleared by _route_for
            restore(capsule, saved)
        if wire != triple:
            restore_triple(capsule, triple)
        # refused without taking it (still named as exported): the pipeline decides on it, no second export
        return _Handover(capsule) if probe(capsule) is not None else _DECLINED
    return result if finish is None else finish(result)


def _route_for(state: Any, capsule: Any, options: int, device: tuple[int, int], forced: int | None = None) -> Any:
    """(triple, Replay, saved, tensor) for a capsule the stored route replays; a ``_Handover`` or ``_DECLINED``
    otherwise. The capsule's READ_ONLY flag is ORed into the options' read-only bit (the Producer's) for both
    the key and the admission; where the route clears it (``Admission.clear_readonly``: readonly="drop", or a
    consumer that copies every import) it is cleared here, and ``saved`` is what puts it back (None: nothing
    cleared), as the compiled ``find_route`` does. ``forced``: the dtype triple written into the capsule as soon
    as it is read (before anything can hand it over), or None; ``tensor``: its ``DLTensor``'s address."""
    found = located(capsule)
    if found is None:
        return _DECLINED  # unread: the pipeline reads it and says what is wrong
    facts, tensor = found
    versioned, _, _, capsule_flags, data, device_type, device_id, _, code, bits, lanes, _, _, offset, layout, _ = facts
    if forced is not None:  # a view's capsule (the same width): labelled with x's own dtype
        relabel_at(tensor, forced)
        code, bits, lanes = forced & 0xFF, (forced >> 8) & 0xFF, forced >> 16
    if versioned and not state.versioned:
        return _DECLINED  # not the capsule kind the pipeline asks this consumer's producer for
    if device_type != device[0] or device_id != device[1]:
        # memory elsewhere than its array said: a GPU capsule is exported again, with its handshake
        return _DECLINED if device_type in _GPU_TYPES or device_type == 13 else _Handover(capsule)
    if not 0 <= device_type <= 0xFF or not 0 <= device_id <= 0x7FFF:
        return _Handover(capsule)
    triple = code | bits << 8 | lanes << 16
    flags = capsule_flags | (1 if options & READ_ONLY_MEMORY else 0)  # READ_ONLY: the capsule's, or its Producer's
    options |= READ_ONLY_MEMORY if flags & 1 else 0
    key = triple | options << OPTIONS_SHIFT | device_type << DEVICE_SHIFT | device_id << DEVICE_ID_SHIFT
    replay = state.routes.get(key, _DECLINED)
    if replay is _DECLINED:
        replay = state.decide(key)
    # The admission: whether the capsule is one the stored route's record holds for, compared field by field
    # (``decide`` made them; nothing is decided here), as the compiled route's ``admitted`` does. ``flags``:
    # the capsule's, READ_ONLY ORed in where its Producer's arrays are read-only. Data on the other side of the
    # record's alignment has a record of its own (``unaligned``: the consumer copies it), admitted the same way.
    if replay is None or layout == OTHER:
        return _Handover(capsule)
    if (layout == EMPTY or not (data + offset) % replay.align) is replay.misaligned:
        replay = replay.unaligned
        if replay is None or (layout == EMPTY or not (data + offset) % replay.align) is replay.misaligned:
            return _Handover(capsule)
    if triple != replay.triple or not replay.kinds & (2 if versioned else 1):
        return _Handover(capsule)
    if device_type != replay.device_type or device_id != replay.device_id:
        return _Handover(capsule)
    if (flags & 1 and not replay.readonly_ok) or (offset and not replay.offset_ok):
        return _Handover(capsule)
    cleared = replay.clear_readonly and capsule_flags & 1  # a flag to clear (Admission.clear_readonly says when)
    return triple, replay, rewrite(capsule, None, None, True) if cleared else None, tensor


def _export(state: Any, producer: Any, x: Any) -> tuple[Any, int | None]:
    """x's capsule as the Producer says (host memory: no stream), and the dtype triple it is to be given where it
    is a view's (None: as it is). An exchange-API producer (EXPORT_EXCHANGE)
    is exported through its own ``__dlpack__`` here: the exchange API's tensor needs a capsule whose
    destructor frees it unless consumed, which only C code can be (a Python one runs while the capsule
    dies, where an exception, a Ctrl-C, is printed and dropped); the compiled route has it
    (``_csrc/capsules.c``), and through ctypes the exchange API is no faster than ``__dlpack__``."""
    kind, alias, relabels = producer.kind, producer.alias, producer.relabels
    relabel = relabels.get(x.dtype) if relabels else None
    source = x if alias is None else getattr(x, alias)
    if relabel is not None:  # a dtype the framework holds but cannot export
        source = x.view(relabel[0])
    try:
        if kind == EXPORT_FUNCTION:
            capsule = producer.handle(source)
        else:  # the exchange API's kind too: see below
            legacy = not state.versioned or kind == EXPORT_METHOD_LEGACY  # a producer before DLPack 1.0
            capsule = source.__dlpack__() if legacy else source.__dlpack__(max_version=_VERSION)
    except MemoryError:
        raise
    except Exception as err:  # the producer's own failure: handled by the pipeline, not asked again
        raise _ExportFailed(err) from None
    return capsule, None if relabel is None else relabel[1]  # (_route_for writes the triple when it reads it)


class _ExportFailed(Exception):
    """The producer's export raised ``error`` (an Exception): handed to the pipeline."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error


def _import_deferred(state: Any, producer: Any, x: Any, options: int, device: tuple[int, int]) -> Any:
    """A GPU array into a consumer that asks for the capsule with its own stream (``_gpu.deferred``):
    exported inside its import, checked against the stored route there, finished as the route says."""
    chosen: list[Any] = []

    def check(capsule: Any, forced: int | None) -> Any:
        found = _route_for(state, capsule, options, device, forced)
        if type(found) is not tuple:
            raise gpu.Declined
        triple, replay, _, tensor = found  # (READ_ONLY cleared where readonly="drop" asks)
        if replay.wire != triple:
            relabel_at(tensor, replay.wire)
        chosen.append(replay)
        return capsule

    failed: list[Exception] = []  # the producer's export raised: its error, handed to the pipeline
    try:
        result = state.importer(gpu.deferred(producer, x, device, state.versioned, check, failed))
    except MemoryError:
        raise
    except Exception:
        if failed:
            raise _ExportFailed(failed[0]) from None
        raise
    finish = chosen[0].finish if chosen else None
    return result if finish is None else finish(result)


_convert_py = convert  # the Python route, by this name also where the compiled one is bound over it

if accel is not None:
    # The compiled route (dlbridge/_csrc/route.c) takes the same steps as ``convert`` above, reading the
    # same records, and declines to the same ``_pipeline``.
    accel.configure(producers, _views, default_cell, FALLBACKS, NOT_GIVEN, get_default_fallback, _pipeline, READONLY)
    convert = accel.convert
