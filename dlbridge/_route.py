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

A spec is a one-item list holding the target's *state*: an immutable tuple, read by index (``S_*``,
mirrored in ``_csrc/accel.h`` and checked by a test), replaced whole when it changes. A replay holds
the state it started with (one strong reference), so code that runs in the middle of a conversion
(a ``TorchFunctionMode``, a producer's Python ``__dlpack__``, another thread) and makes dlbridge learn
again changes what the next call reads, never what this one holds. The routes in a state are keyed by
``code | bits << 8 | lanes << 16 | fallback index << 32``.

One rule for errors on the way, on both paths: an ``Exception`` sends the call to the pipeline (which
meets it again and says what went wrong), except ``MemoryError``; ``KeyboardInterrupt``, ``SystemExit``
and every other ``BaseException`` propagate as they are.
"""

from __future__ import annotations

import sys
from functools import partial
from math import prod
from typing import Any

from . import _logical
from ._accelerator import accel
from ._adapters import ADAPTERS, Adapter, adapter_for
from ._capabilities import Capabilities
from ._capsule import DLPackInfo, c_strides
from ._capsule_edit import relabel_triple, restore_triple
from ._capsule_probe import probe
from ._carriers import Carrier
from ._convert import _convert
from ._dtypes import BY_NAME, BY_TRIPLE
from ._exchange import export_exchange
from ._handoff import decide
from ._options import FALLBACKS, NOT_GIVEN, default_cell, get_default_fallback, resolve_fallback

__all__ = ["SPECS", "convert", "spec_for", "replace_slow"]

# State indexes (the same in _csrc/accel.h; tests/test_route_reentrancy.py checks them).
S_SLOW, S_READY, S_KIND, S_IMPORT, S_API, S_VERSIONED, S_ALIGN, S_READONLY_OK, S_OFFSET_OK = range(9)
S_ROUTES, S_CAPS_FN, S_CAPS, S_DECIDE, S_SELF, S_SELF_IMPORT, S_SELF_DTYPES, S_LEN = range(9, 16 + 1)
# Producer entry indexes (the same in accel.h).
P_KIND, P_HANDLE, P_GUARDS, P_ALIAS, P_RELABEL, P_LEN = range(6)
# Import kinds: the consumer takes a bare capsule, an object with __dlpack__, or a managed tensor
# through its DLPack C exchange API. Export kinds: x.__dlpack__(), the exchange API, a function.
IMPORT_CAPSULE, IMPORT_CARRIER, IMPORT_EXCHANGE = 0, 1, 2
EXPORT_METHOD, EXPORT_EXCHANGE, EXPORT_FUNCTION, EXPORT_METHOD_LEGACY = 0, 1, 2, 3
_VERSION = (1, 3)

# exact type -> producer entry (kind, handle, guards, alias, relabels): filled as arrays of each type
# pass the pipeline; an entry is replaced whole, never edited.
_producers: dict[type, tuple[Any, ...]] = {}
_seen: dict[type, int] = {}


def _state(slow: Any, **fields: Any) -> tuple[Any, ...]:
    state: list[Any] = [None] * S_LEN
    state[S_SLOW], state[S_READY] = slow, False
    for name, value in fields.items():
        state[globals()[name]] = value
    return tuple(state)


def _spec(target: Adapter) -> list[Any]:
    spec: list[Any] = [None]

    def slow(x: Any, fallback: Any, dtype: Any, device: Any, copy: Any, stream: Any) -> Any:
        result = _convert(x, target, resolve_fallback(fallback), dtype, device, copy, stream)
        _learn(spec, target, x, result if dtype is device is copy is stream is None else None)
        return result

    spec[0] = _state(slow)
    return spec


SPECS: dict[str, list[Any]] = {name: _spec(a) for name, a in ADAPTERS.items()}


def spec_for(target: Adapter) -> list[Any]:
    return SPECS[target.name]


def replace_slow(spec: list[Any], slow: Any) -> Any:
    """Put ``slow`` in place of the spec's pipeline callable (tests count the calls); returns the old one."""
    state = spec[0]
    spec[0] = (*state[:S_SLOW], slow, *state[S_SLOW + 1 :])
    return state[S_SLOW]


def _learn(spec: list[Any], target: Adapter, x: Any, result: Any) -> None:
    """After a conversion through the pipeline: make the target's state ready, and note x's type."""
    if target.loaded():
        caps = target.capabilities()
        if spec[0][S_CAPS] is not caps:
            spec[0] = _prepare(spec[0][S_SLOW], target, caps)
    state = spec[0]
    if result is not None and type(x) is state[S_SELF] and type(result) is type(x):
        # Its own array type: the route may hand back x's own kind of alias (S_SELF_IMPORT), but only
        # for dtypes the pipeline took as they are (it refuses others: object, byte-swapped, ...).
        dtypes, dtype = state[S_SELF_DTYPES], x.dtype
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
    export = source.fast_export(cls) if source is not None else None
    if export is None:
        _producers.pop(cls, None)
        return
    if len(_producers) >= 64:
        _producers.clear()
    _producers[cls] = tuple(export)


def _prepare(slow: Any, target: Adapter, caps: Capabilities) -> tuple[Any, ...]:
    """The target's state for capability row ``caps``: a new tuple (routes decided afresh)."""
    found = target.fast_import(caps)
    if found is None:
        return _state(slow, S_CAPS=caps)
    routes: dict[int, Any] = {}
    self_type, self_import = target.fast_self_import() or (None, None)
    return _state(
        slow,
        S_READY=True,
        S_KIND=found[0],
        S_IMPORT=found[1],
        S_API=found[2],
        S_VERSIONED=caps.versioned_capsules,
        S_ALIGN=target.import_alignment(caps),
        S_READONLY_OK=caps.readonly_arrays,
        S_OFFSET_OK=not caps.offset_needs_strides,
        S_ROUTES=routes,
        S_CAPS_FN=target.capabilities if target.dynamic_capabilities else None,
        S_CAPS=caps,
        S_DECIDE=partial(_decide_into, routes, target, caps),
        S_SELF=self_type,
        S_SELF_IMPORT=self_import,
        S_SELF_DTYPES=[],
    )


def _decide_into(routes: dict[int, Any], target: Adapter, caps: Capabilities, key: int) -> tuple[int, Any] | None:
    route = _decide(target, caps, key)
    if len(routes) >= 1024:  # dtype codes are few; a bound all the same
        routes.clear()
    routes[key] = route
    return route


def _decide(target: Adapter, caps: Capabilities, key: int) -> tuple[int, Any] | None:
    """The route for one (consumer row, dtype, fallback): the record ``decide`` makes for a plain
    capsule of that dtype (dense C order, writable, the capsule kind the consumer reads), kept where
    it is a native import or a zero-copy relabel; None: the pipeline decides each time (a refusal,
    a remembered view, an upcasting copy)."""
    code, bits, lanes, fallback = key & 0xFF, (key >> 8) & 0xFF, (key >> 16) & 0xFFFF, key >> 32
    name = BY_TRIPLE.get((code, bits, lanes))
    if name is None:
        return None
    versioned = caps.versioned_capsules
    info = DLPackInfo(name, code, bits, lanes, "cpu", 0, (), None, 0, 0, False, versioned, None, None)
    record = decide(info, target, caps, FALLBACKS[fallback], None, None)
    plan = record.plan
    if record.error is not None or plan is None or record.writable or record.c_order or record.drop_readonly:
        return None
    triple = key & 0xFFFFFFFF
    if plan.mode == "native":
        return (triple, None)
    if plan.mode == "reinterpret":
        wire = BY_NAME[plan.wire]
        return (wire.code | wire.bits << 8 | wire.lanes << 16, target.viewer(plan.logical))
    return None


# --- the Python route (the same steps as _csrc/route.c's convert) ------------------------------------

_views = _logical._entries  # mutated in place, never rebound


def _convert_py(spec: list[Any], x: Any, fallback: Any, dtype: Any, device: Any, copy: Any, stream: Any) -> Any:
    state = spec[0]  # held for the whole call (see the module docstring)
    if dtype is None and device is None and copy is None and stream is None and state[S_READY]:
        producer = _producers.get(type(x))
        if producer is not None and not (_views and id(x) in _views):
            result = _replay(state, producer, x, fallback)
            if result is not _DECLINED:
                return result
    return state[S_SLOW](x, fallback, dtype, device, copy, stream)


_DECLINED = object()


_FALLBACK_INDEX = {name: i for i, name in enumerate(FALLBACKS)}


def _replay(state: tuple[Any, ...], producer: tuple[Any, ...], x: Any, fallback: Any) -> Any:
    if fallback is NOT_GIVEN or fallback is None:
        fallback = default_cell[0] or get_default_fallback()  # None: a fallback_policy block was used
    fb = _FALLBACK_INDEX.get(fallback) if type(fallback) is str else None  # an array's == is elementwise
    if fb is None:
        return _DECLINED
    try:
        caps_fn = state[S_CAPS_FN]
        if caps_fn is not None and caps_fn() is not state[S_CAPS]:
            return _DECLINED
        if type(x) is state[S_SELF]:  # its own array: no capsule at all, for dtypes the pipeline took
            dtype = x.dtype
            return state[S_SELF_IMPORT](x) if any(d is dtype for d in state[S_SELF_DTYPES]) else _DECLINED
        capsule = _export(state, producer, x)
    except MemoryError:
        raise
    except Exception:
        return _DECLINED
    raw = probe(capsule)
    if raw is None or not _plain(state, raw):
        return _DECLINED
    triple = raw[8] | raw[9] << 8 | raw[10] << 16
    key = triple | fb << 32
    route = state[S_ROUTES].get(key, _DECLINED)
    if route is _DECLINED:
        route = state[S_DECIDE](key)
    if route is None:
        return _DECLINED
    return _import(state, capsule, triple, route)


def _export(state: tuple[Any, ...], producer: tuple[Any, ...], x: Any) -> Any:
    """x's capsule as the producer entry says; guards that fail raise (a decline)."""
    kind, handle, guards, alias, relabels = producer
    for name, call, expected in guards:
        value = getattr(x, name)
        if (value() if call else value) is not expected:
            raise _Declined
    relabel = relabels.get(x.dtype) if relabels else None
    source = x if alias is None else getattr(x, alias)()
    if relabel is not None:  # a dtype the framework holds but cannot export
        source = x.view(relabel[0])
    if kind == EXPORT_EXCHANGE and state[S_VERSIONED]:  # (the exchange API makes versioned tensors only)
        capsule = export_exchange(handle, source)
    elif kind == EXPORT_FUNCTION:
        capsule = handle(source)
    else:
        legacy = not state[S_VERSIONED] or kind == EXPORT_METHOD_LEGACY  # a producer before DLPack 1.0
        capsule = source.__dlpack__() if legacy else source.__dlpack__(max_version=_VERSION)
    if relabel is not None:
        relabel_triple(capsule, relabel[1])
    return capsule


class _Declined(Exception):
    """A guard that does not hold: the pipeline converts x."""


def _plain(state: tuple[Any, ...], raw: tuple[Any, ...]) -> bool:
    """Whether a probed capsule is what the route replays: CPU device 0, dense C order, flags and
    alignment the consumer takes."""
    is_versioned, _, _, flags, data, device_type, device_id, _, _, bits, lanes, shape, strides, offset = raw
    if device_type != 1 or device_id or (is_versioned and not state[S_VERSIONED]):
        return False
    if (strides and strides != c_strides(shape)) or (flags & 1 and not state[S_READONLY_OK]):
        return False
    if offset and not state[S_OFFSET_OK]:
        return False
    size = prod(shape)
    if not size:
        return True
    span = size * ((bits * lanes + 7) // 8)
    if (shape and min(shape) < 0) or not data or data + offset + span >= 1 << 64 or span >= 1 << 62:
        return False
    return not (data + offset) % state[S_ALIGN]


def _import(state: tuple[Any, ...], capsule: Any, triple: int, route: tuple[int, Any]) -> Any:
    wire, finish = route
    if wire != triple:
        relabel_triple(capsule, wire)
    try:
        result = state[S_IMPORT](Carrier(capsule, (1, 0)) if state[S_KIND] == IMPORT_CARRIER else capsule)
    except MemoryError:
        raise
    except Exception:
        if wire != triple:
            restore_triple(capsule, triple)
        return _DECLINED
    return result if finish is None else finish(result)


if accel is not None:
    accel.configure(_producers, _views, default_cell, FALLBACKS, NOT_GIVEN, get_default_fallback)
    convert = accel.convert
else:
    convert = _convert_py
