"""The fast route's GPU half: the export of a GPU array of a framework's own type, with the stream
handshake done once.

The route (``_route``) replays CPU memory on its first half, compiled or not, and declines GPU arrays
before exporting them (their guards fail: torch's ``is_cpu``; CuPy's arrays have no CPU entry). The
declined call comes to ``_route._pipeline``, which asks here first: for an array whose type the
pipeline converted before (``note``), on a GPU the consumer can use, the export is the pipeline's —
the stream ``_pipeline._devices.handshake`` picks (the consumer's current stream on the array's device:
torch's ``torch.cuda.current_stream``, CuPy's ``get_current_stream``) handed to the producer's
``__dlpack__(stream=)`` (``source.export``), inside ``_devices.on_device`` (torch refuses, and CuPy
records its event on, the current device only) — so the producer makes that stream wait for its work,
once. The route then checks the capsule and imports it as it does a CPU one (``_route._deliver``), with
the record ``_handoff.decide`` made for that (consumer row, dtype, fallback, device); the consumer
is handed the capsule, or a ``Carrier`` saying the device, and does not ask the producer again.

Declined before any export: an unknown type, a guard (autograd, a lazy conjugate or negative bit, a
non-strided layout), another device, a consumer that picks its own stream (JAX: the pipeline's
deferred export hands the producer the stream JAX asks with). After the export (rarely: a strided
capsule, an import that fails) the pipeline converts ``x`` again and says what went wrong. The rule for
errors is the route's: an ``Exception`` declines, except ``MemoryError``; an ``Exception`` the export
itself raised is handed to the pipeline, which handles it without asking the producer again.
"""

from __future__ import annotations

from typing import Any

from .._adapters import Adapter
from .._capsule._read import GPU_CODES
from .._pipeline._devices import handshake, on_device
from ._records import guards_hold

__all__ = ["export", "note"]

_VERSION = (1, 3)

# exact type -> (source adapter, guards): GPU arrays of the type take this half; absent: the pipeline
# (noted as arrays of each type pass the pipeline, ``note``; an entry is replaced whole, never edited).
_producers: dict[type, tuple[Adapter, tuple[tuple[str, bool, Any], ...]]] = {}


def note(cls: type, source: Adapter | None) -> None:
    """After the pipeline converted an array of type ``cls``: whether its GPU arrays take this half."""
    guards = source.fast_gpu_export(cls) if source is not None else None
    if guards is None:
        _producers.pop(cls, None)
        return
    if len(_producers) >= 64:
        _producers.clear()
    _producers[cls] = (source, tuple(guards))  # type: ignore[assignment]


def export(state: Any, x: Any) -> tuple[Any, tuple[int, int]] | Exception | None:
    """``x``'s capsule for the consumer of ``state`` (a ready route ``State``), exported with the
    consumer's stream, and the device it claimed; None: declined, nothing exported; an Exception: the
    error the export raised (the pipeline handles it and says what went wrong)."""
    entry = _producers.get(type(x))
    if entry is None:
        return None
    target = state.target
    if target.asks_producer_stream:  # JAX: the pipeline's deferred export, with the stream JAX asks with
        return None
    source, guards = entry
    try:
        if not guards_hold(guards, x):
            return None
        device = source.device_of(x)
        if device[0] not in GPU_CODES or device[0] not in target.device_codes:
            return None
        if state.caps_fn is not None and state.caps_fn() is not state.caps:
            return None
        wire = handshake(None, source, target, device)  # the consumer's current stream, on the array's device
    except MemoryError:
        raise
    except Exception:
        return None
    try:
        with on_device(source, device):
            capsule = source.export(x, stream=wire.stream, max_version=_VERSION if state.versioned else None)
    except MemoryError:
        raise
    except Exception as err:
        return err
    return capsule, device
