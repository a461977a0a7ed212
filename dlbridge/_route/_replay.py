"""The fast route: the common conversion, decided once and replayed.

Most handoffs are the same few cases over and over: a CPU array of a framework's own type, dense
C order, no keyword but ``fallback=``. For those the decision depends only on the consumer's
capability row, the capsule's dtype and the fallback, so it is made once by the pipeline's own
rules (``_handoff.decide``) and stored as a *route*: the dtype the consumer is handed (the same one, or
a same-width relabel) and what turns its import into the result (nothing, or a zero-copy view).

``convert(spec, x, fallback, dtype, device, copy, stream)`` replays a route: the compiled one in
``dlbridge/_csrc/`` when it is built, else the Python one here, which does the same steps. Both decline
anything else (another device, layout, a read-only array a consumer cannot hold, an object that
is not exactly a framework's own array type, a view dlbridge made, a guard that fails, any error
on the way) to the full pipeline in ``_convert``, which decides again with every check and says
what went wrong. Everything framework-specific comes from the adapters (``fast_export``,
``fast_import``); the route holds no framework knowledge.

A spec is a one-item list holding the target's ``State``, replaced whole when it changes. Three
records with named fields, immutable and built by keyword: ``State`` (a consumer's state),
``Producer`` (how arrays of one type are exported) and ``Replay`` (a stored route: the dtype triple
handed over, what turns the import into the result, and the ``Handoff`` record it replays). Where the
accelerator is built they are its C types (``dlbridge/_csrc/records.c``), which both routes read;
else the Python classes here, with the same fields. A replay holds the state it started with (one
strong reference), so code that runs in the middle of a conversion (a ``TorchFunctionMode``, a
producer's Python ``__dlpack__``, another thread) and makes dlbridge learn again changes what the next
call reads, never what this one holds. The routes in a state are keyed by
``code | bits << 8 | lanes << 16 | fallback index << 32``.

One rule for errors on the way, on both paths: an ``Exception`` sends the call to the pipeline (which
meets it again and says what went wrong), except ``MemoryError``; ``KeyboardInterrupt``, ``SystemExit``
and every other ``BaseException`` propagate as they are. The producer is asked once per conversion:
an ``Exception`` its export raised is handed to the pipeline, which handles it as its own export's, and
so is a capsule the consumer refused without taking it (``_Handover``).
"""

from __future__ import annotations

import sys
from functools import partial
from math import prod
from typing import Any, NamedTuple

from .._accelerator import accel
from .._adapters import ADAPTERS, Adapter, adapter_for
from .._capabilities import Capabilities
from .._capsule._carriers import Carrier
from .._capsule._edit import relabel_triple, restore_triple
from .._capsule._exchange import export_exchange
from .._capsule._probe import probe
from .._capsule._read import GPU_CODES, DLPackInfo, c_strides, device_name
from .._dtypes import BY_NAME, BY_TRIPLE
from .._options import FALLBACKS, NOT_GIVEN, default_cell, get_default_fallback, resolve_fallback
from .._pipeline import _logical
from .._pipeline._convert import _convert
from .._pipeline._handoff import decide
from . import _gpu as gpu
from ._records import (  # noqa: F401  (_Py*: the pure-Python records, also where compiled ones are used)
    EXPORT_EXCHANGE,
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
    guards_hold,
)

__all__ = ["SPECS", "Producer", "Replay", "State", "convert", "spec_for"]

_VERSION = (1, 3)
_CPU = (1, 0)
_DEVICE_SHIFT = 40  # a GPU capsule's route key: ... | device type << 40 (CPU keys: 0 there)

# exact type -> Producer: filled as arrays of each type pass the pipeline; replaced whole, never edited.
_producers: dict[type, Any] = {}
_seen: dict[type, int] = {}


def _state(target: Adapter) -> Any:
    """A state not yet prepared: the next conversion through the pipeline prepares it."""
    return State(target=target)


def _spec(target: Adapter) -> list[Any]:
    return [_state(target)]


SPECS: dict[str, list[Any]] = {name: _spec(a) for name, a in ADAPTERS.items()}


def spec_for(target: Adapter) -> list[Any]:
    return SPECS[target.name]


def _pipeline(spec: list[Any], x: Any, fallback: Any, dtype: Any, device: Any, copy: Any, stream: Any,
              exported: Any = None) -> Any:  # fmt: skip
    """What both routes decline to: the route's GPU half (``_route_gpu``), else the full pipeline
    converts x, then the route learns from it. ``exported``: x's capsule, which the route exported and
    declined before any consumer saw it; the pipeline reads it instead of exporting x again."""
    state, capsule = spec[0], exported
    if capsule is None and dtype is None and device is None and copy is None and stream is None and state.ready:
        fb = _fallback_index(fallback)
        on_gpu = gpu.export(state, x) if fb is not None and not (_views and id(x) in _views) else None
        if isinstance(on_gpu, Exception):
            capsule = on_gpu  # the export failed: the pipeline handles its error, not asking again
        elif on_gpu is not None and fb is not None:
            result = _deliver(state, on_gpu[0], fb, on_gpu[1])
            if type(result) is _Handover:
                capsule = result.capsule
            elif result is not _DECLINED:
                return result
    target = state.target
    result = _convert(x, target, resolve_fallback(fallback), dtype, device, copy, stream, capsule)
    _learn(spec, target, x, result if dtype is device is copy is stream is None else None)
    return result


def _learn(spec: list[Any], target: Adapter, x: Any, result: Any) -> None:
    """After a conversion through the pipeline: make the target's state ready, and note x's type."""
    if target.loaded():
        caps = target.capabilities()
        if spec[0].caps is not caps:
            spec[0] = _prepare(target, caps)
    state = spec[0]
    if result is not None and type(x) is state.self_type and type(result) is type(x):
        # Its own array type: the route may hand back x's own kind of alias (self_import), but only
        # for dtypes the pipeline took as they are (it refuses others: object, byte-swapped, ...).
        dtypes, dtype = state.self_dtypes, x.dtype
        if result.dtype == dtype and not any(d is dtype for d in dtypes) and len(dtypes) < 64:
            dtypes.append(dtype)  # matched by identity (a dtype's hash is slow): its own dtype objects
    # x's type, asked again when more modules have loaded (an export may depend on them: ml_dtypes).
    cls, loaded = type(x), len(sys.modules)
    if _seen.get(cls) == loaded:
        return
    if len(_seen) >= 256:
        _seen.clear()
    _seen[cls] = loaded
    source = adapter_for(x)
    gpu.note(cls, source)
    export = source.fast_export(cls) if source is not None else None
    if export is None:
        _producers.pop(cls, None)
        return
    if len(_producers) >= 64:
        _producers.clear()
    kind, handle, guards, alias, relabels = export
    _producers[cls] = Producer(kind=kind, handle=handle, guards=tuple(guards), alias=alias, relabels=relabels)


def _prepare(target: Adapter, caps: Capabilities) -> Any:
    """The target's state for capability row ``caps``: a new State (routes decided afresh)."""
    found = target.fast_import(caps)
    if found is None:
        return State(target=target, caps=caps)
    routes: dict[int, Any] = {}
    self_type, self_import = target.fast_self_import() or (None, None)
    return State(
        target=target,
        ready=True,
        kind=found[0],
        importer=found[1],
        api=found[2],
        versioned=caps.versioned_capsules,
        align=target.import_alignment(caps),
        readonly_ok=caps.readonly_arrays,
        offset_ok=not caps.offset_needs_strides,
        routes=routes,
        caps_fn=target.capabilities if target.dynamic_capabilities else None,
        caps=caps,
        decide=partial(_decide_into, routes, target, caps),
        self_type=self_type,
        self_import=self_import,
        self_dtypes=[],
    )


def _decide_into(routes: dict[int, Any], target: Adapter, caps: Capabilities, key: int) -> Any:
    route = _decide(target, caps, key)
    if len(routes) >= 1024:  # dtype codes are few; a bound all the same
        routes.clear()
    routes[key] = route
    return route


def _decide(target: Adapter, caps: Capabilities, key: int) -> Any:
    """The route for one (consumer row, dtype, fallback): a Replay of the record ``decide`` makes for
    a plain capsule of that dtype (dense C order, writable, the capsule kind the consumer reads), kept
    where it is a native import or a zero-copy relabel; None: the pipeline decides each time (a
    refusal, a remembered view, an upcasting copy)."""
    code, bits, lanes, fallback = key & 0xFF, (key >> 8) & 0xFF, (key >> 16) & 0xFFFF, (key >> 32) & 0xFF
    device = key >> _DEVICE_SHIFT or 1
    name = BY_TRIPLE.get((code, bits, lanes))
    if name is None:
        return None
    versioned = caps.versioned_capsules
    # one element (the dimensions are the consumer's importer's to check: Warp's, from its "ndim" row)
    info = DLPackInfo(name, code, bits, lanes, device_name(device), 0, (1,), None, 0, 0, False, versioned, None, None,
                      device_code=device)  # fmt: skip
    record = decide(info, target, caps, FALLBACKS[fallback], None, None)
    plan = record.plan
    if record.error is not None or plan is None or record.writable or record.c_order or record.drop_readonly:
        return None
    triple = key & 0xFFFFFFFF
    if plan.mode == "native":
        return Replay(wire=triple, finish=None, record=record)
    if plan.mode == "reinterpret":
        wire = BY_NAME[plan.wire]
        return Replay(
            wire=wire.code | wire.bits << 8 | wire.lanes << 16, finish=target.viewer(plan.logical), record=record
        )
    return None


# --- the Python route (the same steps as _csrc/route.c's convert) ------------------------------------

_views = _logical._entries  # mutated in place, never rebound


def convert(spec: list[Any], x: Any, fallback: Any, dtype: Any, device: Any, copy: Any, stream: Any) -> Any:
    """x converted for the spec's target: a replayed route, else the pipeline (``_pipeline``)."""
    state = spec[0]  # held for the whole call (see the module docstring)
    if dtype is None and device is None and copy is None and stream is None and state.ready:
        producer = _producers.get(type(x))
        if producer is not None and not (_views and id(x) in _views):
            result = _replay(state, producer, x, fallback)
            if type(result) is _Handover:
                return _pipeline(spec, x, fallback, dtype, device, copy, stream, result.capsule)
            if result is not _DECLINED:
                return result
    return _pipeline(spec, x, fallback, dtype, device, copy, stream)


_DECLINED = object()


class _Handover(NamedTuple):
    """A decline after the export, before any consumer took the capsule: the pipeline reads this capsule
    (or handles this error, the export's) rather than exporting x again (one export per conversion)."""

    capsule: Any


_FALLBACK_INDEX = {name: i for i, name in enumerate(FALLBACKS)}


def _fallback_index(fallback: Any) -> int | None:
    """fallback= as the index of its canonical name (route keys); None for anything else (a str
    subclass, an array: the pipeline resolves and explains it)."""
    if fallback is NOT_GIVEN or fallback is None:
        fallback = default_cell[0] or get_default_fallback()  # None: a fallback_policy block was used
    return _FALLBACK_INDEX.get(fallback) if type(fallback) is str else None  # an array's == is elementwise


def _replay(state: Any, producer: Any, x: Any, fallback: Any) -> Any:
    cell = default_cell[0] if fallback is NOT_GIVEN else None  # the common call, without a function call
    fb = _FALLBACK_INDEX.get(cell) if cell is not None else _fallback_index(fallback)
    if fb is None:
        return _DECLINED
    try:
        caps_fn = state.caps_fn
        if caps_fn is not None and caps_fn() is not state.caps:
            return _DECLINED
        if type(x) is state.self_type:  # its own array: no capsule at all, for dtypes the pipeline took
            dtype = x.dtype
            return state.self_import(x) if any(d is dtype for d in state.self_dtypes) else _DECLINED
        capsule = _export(state, producer, x)
    except MemoryError:
        raise
    except _ExportFailed as failed:
        return _Handover(failed.error)
    except Exception:
        return _DECLINED
    return _deliver(state, capsule, fb, _CPU)


def _deliver(state: Any, capsule: Any, fb: int, device: tuple[int, int]) -> Any:
    """An exported capsule on ``device`` (the one its array claimed) checked, and imported as its
    stored route says; a ``_Handover`` of it where the route does not replay it (or the consumer
    refused it without taking it), ``_DECLINED`` where the consumer took it and failed."""
    raw = probe(capsule)
    if raw is None or (raw[0] and not state.versioned):
        return _DECLINED  # unread, or not the capsule kind the pipeline asks this consumer's producer for
    if (raw[5], raw[6]) != device and raw[5] in GPU_CODES:
        return _DECLINED  # memory elsewhere than its array said: the pipeline exports it with its handshake
    if not _plain(state, raw, device):
        return _Handover(capsule)
    triple = raw[8] | raw[9] << 8 | raw[10] << 16
    key = triple | fb << 32 | (device[0] << _DEVICE_SHIFT if device[0] != 1 else 0)
    replay = state.routes.get(key, _DECLINED)
    if replay is _DECLINED:
        replay = state.decide(key)
    if replay is None:
        return _Handover(capsule)
    return _import(state, capsule, triple, replay, device)


def _export(state: Any, producer: Any, x: Any) -> Any:
    """x's capsule as the Producer says; guards that fail raise (a decline)."""
    kind, alias, relabels = producer.kind, producer.alias, producer.relabels
    if producer.guards and not guards_hold(producer.guards, x):
        raise _Declined
    relabel = relabels.get(x.dtype) if relabels else None
    source = x if alias is None else getattr(x, alias)()
    if relabel is not None:  # a dtype the framework holds but cannot export
        source = x.view(relabel[0])
    if kind == EXPORT_EXCHANGE and state.versioned:  # (the exchange API makes versioned tensors only)
        capsule = export_exchange(producer.handle, source)
    else:
        try:
            if kind == EXPORT_FUNCTION:
                capsule = producer.handle(source)
            else:
                legacy = not state.versioned or kind == EXPORT_METHOD_LEGACY  # a producer before DLPack 1.0
                capsule = source.__dlpack__() if legacy else source.__dlpack__(max_version=_VERSION)
        except MemoryError:
            raise
        except Exception as err:  # the producer's own failure: handled by the pipeline, not asked again
            raise _ExportFailed(err) from None
    if relabel is not None:
        relabel_triple(capsule, relabel[1])
    return capsule


class _Declined(Exception):
    """A guard that does not hold: the pipeline converts x."""


class _ExportFailed(Exception):
    """The producer's export raised ``error`` (an Exception): handed to the pipeline."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error


def _plain(state: Any, raw: tuple[Any, ...], device: tuple[int, int]) -> bool:
    """Whether a probed capsule is what the route replays: on ``device`` (CPU 0, or the GPU its array
    claimed), dense C order, flags and alignment the consumer takes."""
    is_versioned, _, _, flags, data, device_type, device_id, _, _, bits, lanes, shape, strides, offset = raw
    if (device_type, device_id) != device or (is_versioned and not state.versioned):
        return False
    if (strides and strides != c_strides(shape)) or (flags & 1 and not state.readonly_ok):
        return False
    if offset and not state.offset_ok:
        return False
    size = prod(shape)
    if not size:
        return True
    span = size * ((bits * lanes + 7) // 8)
    if (shape and min(shape) < 0) or not data or data + offset + span >= 1 << 64 or span >= 1 << 62:
        return False
    return not (data + offset) % state.align


def _import(state: Any, capsule: Any, triple: int, replay: Any, device: tuple[int, int]) -> Any:
    wire, finish = replay.wire, replay.finish
    if wire != triple:
        relabel_triple(capsule, wire)
    try:
        result = state.importer(Carrier(capsule, device) if state.kind == IMPORT_CARRIER else capsule)
    except MemoryError:
        raise
    except Exception:
        if wire != triple:
            restore_triple(capsule, triple)
        # refused without taking it (still named as exported): the pipeline decides on it, no second export
        return _Handover(capsule) if probe(capsule) is not None else _DECLINED
    return result if finish is None else finish(result)


_convert_py = convert  # the Python route, by this name also where the compiled one is bound over it

if accel is not None:
    # The compiled route (dlbridge/_csrc/route.c) takes the same steps as ``convert`` above, reading the
    # same records, and declines to the same ``_pipeline``.
    accel.configure(_producers, _views, default_cell, FALLBACKS, NOT_GIVEN, get_default_fallback, _pipeline)
    convert = accel.convert
