"""The fast route: the common conversion, decided once and replayed.

Most handoffs are the same few cases over and over: a CPU array of a framework's own type, dense
C order, no keyword but ``fallback=``. For those the decision depends only on the consumer's
capability row, the capsule's dtype and the fallback, so it is made once by the pipeline's own
rules (``plan_for``) and stored as a *route*: the dtype the consumer is handed (the same one, or
a same-width relabel) and what turns its import into the result (nothing, or a zero-copy view).

``convert(spec, x, fallback, dtype, device, copy, stream)`` replays a route: the compiled one in
``dlbridge/_csrc/`` when it is built, else the Python one here, which does the same steps. Both decline
anything else (another device, layout, a read-only array a consumer cannot hold, an object that
is not exactly a framework's own array type, a view dlbridge made, a guard that fails, any error
on the way) to the full pipeline in ``_convert``, which decides again with every check and says
what went wrong. Everything framework-specific comes from the adapters (``fast_export``,
``fast_import``); the route holds no framework knowledge.

A spec is a list, one per target, read by index (``T_*``, mirrored in ``_csrc/accel.h``); the routes in
it are keyed by ``code | bits << 8 | lanes << 16 | fallback index << 32``.
"""

from __future__ import annotations

import sys
from math import prod
from typing import Any

from . import _logical
from ._accelerator import accel
from ._adapters import ADAPTERS, Adapter, adapter_for
from ._capabilities import Capabilities
from ._capsule import Carrier, DLPackInfo, c_strides, export_exchange, probe, relabel_triple, restore_triple
from ._convert import _convert
from ._dtypes import BY_NAME, BY_TRIPLE
from ._errors import DLBridgeError
from ._options import FALLBACKS, NOT_GIVEN, default_cell, get_default_fallback, resolve_fallback
from ._plan import plan_for

__all__ = ["SPECS", "convert", "spec_for"]

# Spec indexes (the same in _csrc/accel.h).
T_SLOW, T_READY, T_KIND, T_IMPORT, T_API, T_VERSIONED, T_ALIGN, T_READONLY_OK, T_OFFSET_OK = range(9)
T_ROUTES, T_CAPS_FN, T_CAPS, T_DECIDE, T_SELF, T_SELF_IMPORT, T_LEN = range(9, 15 + 1)
# Import kinds: the consumer takes a bare capsule, an object with __dlpack__, or a managed tensor
# through its DLPack C exchange API. Export kinds: x.__dlpack__(), the exchange API, a function.
IMPORT_CAPSULE, IMPORT_CARRIER, IMPORT_EXCHANGE = 0, 1, 2
EXPORT_METHOD, EXPORT_EXCHANGE, EXPORT_FUNCTION, EXPORT_METHOD_LEGACY = 0, 1, 2, 3
_VERSION = (1, 3)

# exact type -> (export kind, handle, guards, alias method): filled as arrays of each type pass the pipeline.
_producers: dict[type, tuple[Any, ...]] = {}
_seen: dict[type, int] = {}


def _spec(target: Adapter) -> list[Any]:
    spec: list[Any] = [None] * T_LEN
    spec[T_READY] = False
    spec[T_ROUTES] = {}

    def slow(x: Any, fallback: Any, dtype: Any, device: Any, copy: Any, stream: Any) -> Any:
        result = _convert(x, target, resolve_fallback(fallback), dtype, device, copy, stream)
        _learn(spec, target, x)
        return result

    def decide(key: int) -> tuple[int, Any] | None:
        route = _decide(target, spec[T_CAPS], key)
        routes = spec[T_ROUTES]
        if len(routes) >= 1024:  # dtype codes are few; a bound all the same
            routes.clear()
        routes[key] = route
        return route

    spec[T_SLOW], spec[T_DECIDE] = slow, decide
    return spec


SPECS: dict[str, list[Any]] = {name: _spec(a) for name, a in ADAPTERS.items()}


def spec_for(target: Adapter) -> list[Any]:
    return SPECS[target.name]


def _learn(spec: list[Any], target: Adapter, x: Any) -> None:
    """After a conversion through the pipeline: make the target's spec ready, and note x's type."""
    if target.loaded():
        caps = target.capabilities()
        if spec[T_CAPS] is not caps:
            _prepare(spec, target, caps)
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
    _producers[cls] = export


def _prepare(spec: list[Any], target: Adapter, caps: Capabilities) -> None:
    spec[T_READY] = False
    found = target.fast_import(caps)
    spec[T_ROUTES] = {}
    spec[T_CAPS] = caps
    spec[T_CAPS_FN] = target.capabilities if target.dynamic_capabilities else None
    if found is None:
        return
    spec[T_KIND], spec[T_IMPORT], spec[T_API] = found
    spec[T_VERSIONED] = caps.versioned_capsules
    spec[T_ALIGN] = target.import_alignment(caps)
    spec[T_READONLY_OK] = caps.readonly_arrays
    spec[T_OFFSET_OK] = not caps.offset_needs_strides
    spec[T_SELF], spec[T_SELF_IMPORT] = target.fast_self_import() or (None, None)
    spec[T_READY] = True


def _decide(target: Adapter, caps: Capabilities, key: int) -> tuple[int, Any] | None:
    """The route for one (consumer row, dtype, fallback), by the pipeline's rules; None: the
    pipeline decides each time (a refusal, a remembered view, an upcasting copy)."""
    code, bits, lanes, fallback = key & 0xFF, (key >> 8) & 0xFF, (key >> 16) & 0xFFFF, key >> 32
    name = BY_TRIPLE.get((code, bits, lanes))
    if name is None or caps is None:
        return None
    info = DLPackInfo(name, code, bits, lanes, "cpu", 0, (), None, 0, 0, False, True, None, None)
    try:
        plan = plan_for(info, caps, FALLBACKS[fallback])
    except DLBridgeError:
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
    if dtype is None and device is None and copy is None and stream is None and spec[T_READY]:
        producer = _producers.get(type(x))
        if producer is not None and not (_views and id(x) in _views):
            result = _replay(spec, producer, x, fallback)
            if result is not _DECLINED:
                return result
    return spec[T_SLOW](x, fallback, dtype, device, copy, stream)


_DECLINED = object()


_FALLBACK_INDEX = {name: i for i, name in enumerate(FALLBACKS)}


def _replay(spec: list[Any], producer: tuple[Any, ...], x: Any, fallback: Any) -> Any:
    if fallback is NOT_GIVEN or fallback is None:
        fallback = default_cell[0] or get_default_fallback()  # None: a fallback_policy block was used
    fb = _FALLBACK_INDEX.get(fallback) if type(fallback) is str else None  # an array's == is elementwise
    if fb is None:
        return _DECLINED
    caps_fn = spec[T_CAPS_FN]
    if caps_fn is not None and caps_fn() is not spec[T_CAPS]:
        return _DECLINED
    kind, handle, guards, alias, relabels = producer
    versioned = spec[T_VERSIONED]
    try:
        for name, call, expected in guards:
            value = getattr(x, name)
            if (value() if call else value) is not expected:
                return _DECLINED
        if type(x) is spec[T_SELF]:
            return spec[T_SELF_IMPORT](x)  # its own array: no capsule at all
        relabel = relabels.get(x.dtype) if relabels else None
        source = x if alias is None else getattr(x, alias)()
        if relabel is not None:  # a dtype the framework holds but cannot export
            source = x.view(relabel[0])
        if kind == EXPORT_EXCHANGE and versioned:  # (the exchange API makes versioned tensors only)
            capsule = export_exchange(handle, source)
        elif kind == EXPORT_FUNCTION:
            capsule = handle(source)
        else:
            legacy = not versioned or kind == EXPORT_METHOD_LEGACY  # a producer before DLPack 1.0
            capsule = source.__dlpack__() if legacy else source.__dlpack__(max_version=_VERSION)
        if relabel is not None:
            relabel_triple(capsule, relabel[1])
        raw = probe(capsule)
    except Exception:
        return _DECLINED
    if raw is None:
        return _DECLINED
    is_versioned, _, _, flags, data, device_type, device_id, _, code, bits, lanes, shape, strides, offset = raw
    if device_type != 1 or device_id or (is_versioned and not versioned) or (strides and strides != c_strides(shape)):
        return _DECLINED
    if (flags & 1 and not spec[T_READONLY_OK]) or (offset and not spec[T_OFFSET_OK]):
        return _DECLINED
    size = prod(shape)
    if size:
        span = size * ((bits * lanes + 7) // 8)
        if (shape and min(shape) < 0) or not data or data + offset + span >= 1 << 64 or span >= 1 << 62:
            return _DECLINED
        if (data + offset) % spec[T_ALIGN]:
            return _DECLINED
    triple = code | bits << 8 | lanes << 16
    key = triple | fb << 32
    route = spec[T_ROUTES].get(key, _DECLINED)
    if route is _DECLINED:
        route = spec[T_DECIDE](key)
    if route is None:
        return _DECLINED
    wire, finish = route
    if wire != triple:
        relabel_triple(capsule, wire)
    try:
        result = spec[T_IMPORT](Carrier(capsule, (1, 0)) if spec[T_KIND] == IMPORT_CARRIER else capsule)
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
