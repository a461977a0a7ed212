"""What the fast route learns from the pipeline: each consumer's ``State``, each array type's ``Producer``,
and the stored routes (``Replay``) made from the records ``decide`` makes.

A spec is a one-item list holding the target's ``State``, replaced whole when it changes. The route keys
are ``dtype triple | options << 32 | device type << 40 | device id << 48``, where ``options`` is
``fallback index | readonly index << 4 | read-only memory << 5`` (``readonly=``'s index in ``READONLY``;
read-only memory: the capsule's READ_ONLY flag, or its Producer's ``readonly``, ORed): a route is
decided once per key (``_decide``), by the pipeline's own decision function, for a plain capsule of that
dtype on that device, writable or read-only as the key says, and stored where its record says it may be
replayed (``Handoff.admits``).
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from dataclasses import replace
from functools import partial
from typing import Any

from .._adapters import Adapter, adapter_for
from .._adapters._fast import FastRoute
from .._capabilities import Capabilities
from .._capsule._read import DLPackInfo, device_name
from .._dtypes import BY_NAME, BY_TRIPLE
from .._options import FALLBACKS, READONLY
from .._pipeline._devices import home_of
from .._pipeline._handoff import decide
from .._pipeline._logical import remembering
from .._pipeline._plan import Plan
from ._records import EXPORT_EXCHANGE, EXPORT_FUNCTION, EXPORT_METHOD, Producer, Replay, Routes, State
from ._specs import SPECS

__all__ = ["SPECS", "OPTIONS_SHIFT", "READONLY_SHIFT", "READ_ONLY_MEMORY", "DEVICE_SHIFT", "DEVICE_ID_SHIFT",
           "producers", "spec_for", "new_state", "learn", "current"]  # fmt: skip

# The route key's fields (the module docstring; route.c's find_route builds the same key).
OPTIONS_SHIFT, DEVICE_SHIFT, DEVICE_ID_SHIFT = 32, 40, 48
READONLY_SHIFT, READ_ONLY_MEMORY = 4, 1 << 5  # within the options byte

# exact type -> Producer: filled as arrays of each type pass the pipeline; a Producer is replaced whole, never edited;
# the mapping is never rebound (``_replay`` hands it to the compiled route once). A ``Routes`` where compiled: a
# mapping that keeps the compiled route's cache of it current (a dict otherwise).
producers: MutableMapping[type, Any] = Routes()
_seen: dict[type, int] = {}


def new_state(target: Adapter | str) -> Any:
    """A state not yet prepared (its target an adapter, or a registry name: ``_specs``): the next
    conversion through the pipeline prepares it."""
    return State(target=target)


def spec_for(target: Adapter) -> list[Any]:
    return SPECS[target.name]


def learn(spec: list[Any], target: Adapter, x: Any, result: Any) -> None:
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
    producer = _producer(cls, adapter_for(x))
    if producer is None:
        producers.pop(cls, None)
        return
    if len(producers) >= 64:
        producers.clear()
    producers[cls] = producer


def current(x: Any) -> bool:
    """Whether the stored Producer of ``type(x)`` is the one its adapter gives now, so that an export it
    made is the adapter's own. One learned before a module the adapter reads was loaded (ml_dtypes:
    NumPy's relabels) exports as the producer alone does, which fails where the adapter's export does not."""
    held, fresh = producers.get(type(x)), _producer(type(x), adapter_for(x))
    if held is None or fresh is None:
        return held is fresh
    return all(getattr(held, name) == getattr(fresh, name) for name in held._fields)


def _producer(cls: type, source: Any) -> Any:
    """How arrays of type ``cls`` take the route: their CPU export (``Adapter.fast_export``) and their GPU
    export (``Adapter.fast_gpu_export``), either of which may be absent; None: neither."""
    if not isinstance(source, FastRoute):  # an adapter without the route's part: the pipeline every time
        return None
    export = source.fast_export(cls)
    gpu = source.fast_gpu_export(cls)
    if source.caps.exports_uint8:  # its own capsules mislabel a dtype: only its
        export = export if export is not None and export[0] == EXPORT_FUNCTION else None  # adapter's export
        gpu = None  # (kind 2) relabels them
    if export is None and gpu is None:
        return None
    kind, handle, guards, alias, relabels = export if export is not None else (EXPORT_METHOD, None, None, None, None)
    fields: dict[str, Any] = {}
    if gpu is not None:
        gpu_kind = gpu.kind if gpu.kind != EXPORT_EXCHANGE or kind == EXPORT_EXCHANGE else EXPORT_METHOD
        fields = {"gpu_guards": tuple(gpu.guards), "device_method": gpu.device_method, "device_type": gpu.device_type,
                  "gpu_kind": gpu_kind, "current_device": gpu.current_device}  # fmt: skip
        alias = alias if export is not None else gpu.alias
        relabels = relabels if export is not None else gpu.relabels
    # Immutable arrays (JAX) are read-only memory whatever their capsules say: the route ORs READ_ONLY in.
    return Producer(kind=kind, handle=handle, guards=None if guards is None else tuple(guards), alias=alias,
                    keep=source.export_keeps, relabels=relabels, readonly=not source.mutable_arrays,
                    **fields)  # fmt: skip


def _prepare(target: Adapter, caps: Capabilities) -> Any:
    """The target's state for capability row ``caps``: a new State (routes decided afresh)."""
    if not isinstance(target, FastRoute):  # an adapter without the route's part: the pipeline every time
        return State(target=target, caps=caps)
    found = target.fast_import(caps)
    if found is None:
        return State(target=target, caps=caps)
    routes = Routes()
    self_type, self_import = target.fast_self_import() or (None, None)
    return State(
        target=target,
        ready=True,
        kind=found[0],
        importer=found[1],
        api=found[2],
        versioned=caps.versioned_capsules,
        routes=routes,
        caps_guard=_caps_guard(target),
        caps=caps,
        decide=partial(_decide_into, routes, target, caps),
        self_type=self_type,
        self_import=self_import,
        self_dtypes=[],
        stream_query=target.fast_stream_query(),
        deferred=target.asks_producer_stream,
    )


def _caps_guard(target: FastRoute) -> Any:
    """(object, attribute, value now) where the target's capability row depends on a run-time switch."""
    switch = target.caps_switch()
    return None if switch is None else (switch[0], switch[1], getattr(switch[0], switch[1]))


def _decide_into(routes: Any, target: FastRoute, caps: Capabilities, key: int) -> Any:
    route = _decide(target, caps, key)
    if len(routes) >= 1024:  # dtype codes are few; a bound all the same
        routes.clear()
    routes[key] = route
    return route


def _decide(target: FastRoute, caps: Capabilities, key: int) -> Any:
    """The route for one (consumer row, dtype, fallback, readonly=, read-only memory, device): a Replay of
    the record ``decide`` makes for a plain capsule of that dtype on that device (dense C order, writable
    or read-only memory as the key says, the capsule kind the consumer reads), where the record says the
    route may replay it (``Handoff.admits``: a native import or a zero-copy relabel, and the capsules it
    holds for); None: the pipeline decides each time (a refusal, an upcasting copy, memory the consumer
    finds elsewhere)."""
    code, bits, lanes, options = key & 0xFF, (key >> 8) & 0xFF, (key >> 16) & 0xFFFF, (key >> OPTIONS_SHIFT) & 0xFF
    fallback, choice, readonly = options & 0xF, (options >> READONLY_SHIFT) & 1, bool(options & READ_ONLY_MEMORY)
    device = ((key >> DEVICE_SHIFT) & 0xFF, key >> DEVICE_ID_SHIFT)
    name = BY_TRIPLE.get((code, bits, lanes))
    if name is None or home_of(device, target) != (device, True):  # the pipeline relabels or moves it first
        return None
    if fallback >= len(FALLBACKS):
        return None
    versioned = caps.versioned_capsules  # (read-only memory in a legacy capsule: its producer's, decide knows)
    # one element (the dimensions are the consumer's importer's to check: Warp's, from its "ndim" row; a
    # capsule it refuses without taking it goes to the pipeline, which says why)
    info = DLPackInfo(name, code, bits, lanes, device_name(device[0]), device[1], (1,), None, 0, 0, readonly, versioned,
                      None, None, device_code=device[0])  # fmt: skip
    decided = partial(decide, target=target, caps=caps, fallback=FALLBACKS[fallback], dtype=None, copy=None,
                      readonly=READONLY[choice])  # fmt: skip
    record = decided(info)
    if record.admits is None or record.plan is None:
        return None
    unaligned = None
    importer = target.fast_unaligned_import(caps) if device[0] == 1 and record.admits.align > 1 else None
    if importer is not None:  # host memory below the consumer's alignment: decided again, data 1 byte past
        below = decided(replace(info, data_ptr=1))
        if below.admits is not None and below.plan is not None and below.admits.misaligned:
            unaligned = Replay(record=below, finish=_finish(target, below.plan), importer=importer)
    return Replay(record=record, finish=_finish(target, record.plan), unaligned=unaligned)


def _finish(target: FastRoute, plan: Plan) -> Any:
    """What turns the consumer's import into the result for ``plan``: a zero-copy relabel, the record of a
    view's logical dtype (the same the pipeline makes), or None (the import is the result)."""
    if plan.mode == "reinterpret":
        return target.viewer(plan.logical)
    if plan.mode == "view":
        wire = BY_NAME[plan.wire]
        return remembering(target.view_memory, plan.logical, wire.bits * wire.lanes, target.fast_view_address())
    return None
