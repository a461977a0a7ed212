"""The fast route's GPU half: a GPU array of a framework's own type, replayed with one export.

The compiled route (``_route``) replays CPU memory only and declines GPU arrays before exporting
them (their guards fail: ``is_cpu``). The declined call comes here before the pipeline: for an
array whose type the pipeline converted before (``learn``), on a GPU the target can use, the
handshake is done once, as the pipeline does it, and the record is the one ``_handoff.decide``
made for that (consumer row, dtype, fallback, device) and the route cached:

- the consumer's current stream on the array's device (``target.current_stream``: torch's
  ``torch.cuda.current_stream``, CuPy's ``get_current_stream``), handed to the producer's
  ``__dlpack__(stream=)`` (``source.export``) inside ``source.on_device`` (torch refuses, and CuPy
  records its event on, the current device only), so the producer makes that stream wait for its
  work;
- the capsule checked (``probe``: the device it claimed, dense C order, flags and alignment the
  consumer takes), relabelled where the record says so, and imported by the consumer as a capsule
  (or a ``Carrier`` saying the device) — the consumer does not ask the producer again.

Everything that does not fit declines before the export (unknown type, a guard, another device,
a consumer that chooses its own stream: JAX, whose pipeline path exports once with JAX's stream),
or, rarely, after it (a strided capsule, an import that fails): then the pipeline converts ``x``
and says what went wrong. The rule for errors is the route's: an ``Exception`` declines, except
``MemoryError``; other ``BaseException`` propagate.
"""

from __future__ import annotations

from typing import Any

from ._adapters import Adapter, adapter_for
from ._capsule import GPU_CODES
from ._capsule_edit import relabel_triple, restore_triple
from ._capsule_probe import probe
from ._carriers import Carrier

__all__ = ["replay", "learn", "DECLINED", "KEY_DEVICE_SHIFT"]

DECLINED = object()
KEY_DEVICE_SHIFT = 40  # a GPU route's key: code | bits << 8 | lanes << 16 | fallback << 32 | device type << 40
_VERSION = (1, 3)

# exact type -> (source adapter, guards), or None: the pipeline always (learned as arrays of each type
# pass the pipeline; an entry is replaced whole, never edited).
_producers: dict[type, tuple[Adapter, tuple[tuple[str, bool, Any], ...]] | None] = {}


def learn(x: Any) -> None:
    """After a conversion of ``x`` through the pipeline: note whether its type takes the GPU half."""
    cls = type(x)
    if cls in _producers:
        return
    if len(_producers) >= 64:
        _producers.clear()
    source = adapter_for(x)
    guards = source.fast_gpu_export(cls) if source is not None else None
    _producers[cls] = None if guards is None else (source, guards)  # type: ignore[assignment]


def replay(state: Any, target: Adapter, x: Any, fb: int) -> Any:
    """``x`` converted for ``target`` on the GPU half of the route, or ``DECLINED``. ``state`` is the
    target's route state (``_route``), ``fb`` the fallback's index."""
    entry = _producers.get(type(x))
    if entry is None or not state.ready or target.asks_producer_stream:
        return DECLINED
    source, guards = entry
    try:
        for name, call, expected in guards:
            value = getattr(x, name)
            if (value() if call else value) is not expected:
                return DECLINED
        device = source.device_of(x)
        if device[0] not in GPU_CODES or device[0] not in target.device_codes:
            return DECLINED
        if state.caps_fn is not None and state.caps_fn() is not state.caps:
            return DECLINED
        stream = target.current_stream(device)  # the consumer's, on the array's device
        with source.on_device(device):
            capsule = source.export(x, stream=stream, max_version=_VERSION if state.versioned else None)
    except MemoryError:
        raise
    except Exception:
        return DECLINED
    return _import(state, capsule, device, fb)


def _import(state: Any, capsule: Any, device: tuple[int, int], fb: int) -> Any:
    raw = probe(capsule)
    if raw is None or not _plain(state, raw, device):
        return DECLINED
    triple = raw[8] | raw[9] << 8 | raw[10] << 16
    key = triple | fb << 32 | device[0] << KEY_DEVICE_SHIFT
    route = state.routes.get(key, DECLINED)
    if route is DECLINED:
        route = state.decide(key)
    if route is None:
        return DECLINED
    wire, finish = route.wire, route.finish
    if wire != triple:
        relabel_triple(capsule, wire)
    try:
        result = state.importer(Carrier(capsule, device) if state.kind == 1 else capsule)
    except MemoryError:
        raise
    except Exception:
        if wire != triple:
            restore_triple(capsule, triple)
        return DECLINED
    return result if finish is None else finish(result)


def _plain(state: Any, raw: tuple[Any, ...], device: tuple[int, int]) -> bool:
    """A capsule on the device its array claimed, dense C order, with flags and alignment the consumer takes."""
    is_versioned, _, _, flags, data, device_type, device_id, _, _, bits, lanes, shape, strides, offset = raw
    if (device_type, device_id) != device or (is_versioned and not state.versioned):
        return False
    if (strides and strides != _c_strides(shape)) or (flags & 1 and not state.readonly_ok):
        return False
    if offset and not state.offset_ok:
        return False
    return not data or not (data + offset) % state.align
