"""Objects that hand a consumer a capsule where it takes only objects with ``__dlpack__``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._accelerator import accel
from .._errors import CapsuleError

__all__ = ["Carrier", "DeferredCarrier"]


class Carrier:
    """Hands a ready capsule to a consumer that only takes objects with ``__dlpack__``.

    dlbridge has already done the stream handshake with the real producer, so the keywords
    the consumer passes are not needed. Single use, like the capsule.
    """

    __slots__ = ("_capsule", "_device")

    def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
        self._capsule = capsule
        self._device = device

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise CapsuleError("this capsule was already handed to a consumer")
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


class DeferredCarrier:
    """Hands a consumer that asks the producer for a stream itself (JAX) an object whose
    ``__dlpack__(stream=S)`` makes the export then, with the consumer's own ``S``: one export, and
    the producer waits on the stream the consumer reads on. (Asking the consumer for a stream first
    and letting it ask again would not do for JAX: XLA hands out its external-ready-event streams
    round-robin, openxla/xla ``xla/pjrt/local_device_state.cc``
    ``LocalDeviceState::GetExternalReadyEventStream``, so the second answer is another stream.)
    ``export(stream)`` returns the capsule; single use, like a capsule."""

    __slots__ = ("_device", "_export")

    def __init__(self, export: Callable[[Any], Any], device: tuple[int, int]) -> None:
        self._export: Callable[[Any], Any] | None = export
        self._device = device

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        export, self._export = self._export, None
        if export is None:
            raise CapsuleError("this capsule was already handed to a consumer")
        return export(stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


if accel is not None:
    Carrier = accel.Carrier  # type: ignore[misc]  # the compiled one: the same behaviour, faster
