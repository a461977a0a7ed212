"""Devices and CUDA streams: parsing ``device=``, asking objects where they live, and the stream
a consumer passes to a producer's ``__dlpack__`` (the DLPack handshake)."""

from __future__ import annotations

from typing import Any

from ._adapters import Adapter
from ._capsule import DEVICE_CODES, GPU_CODES, DLPackInfo, alias_device, device_name
from ._errors import CapsuleError, DeviceMismatchError, OptionError

__all__ = ["device_of", "check_device", "parse_device", "stream_for"]


def device_of(x: Any, source: Adapter | None = None) -> tuple[int, int]:
    """Where ``x`` lives; asked through its adapter when it is a known framework's array."""
    try:
        if source is not None:
            return source.device_of(x)
        dev = x.__dlpack_device__()
        return (int(dev[0]), 0 if dev[1] is None else int(dev[1]))
    except Exception as err:
        raise CapsuleError(f"{type(x).__name__}.__dlpack_device__() failed: {type(err).__name__}: {err}") from err


def check_device(info: DLPackInfo, claimed: tuple[int, int]) -> DLPackInfo:
    # torch says (3, 0) for a pinned tensor but writes kDLCPU into its capsule (pytorch#136250):
    # the alias of the claimed device describes the same memory.
    if info.device != claimed and info.device != alias_device(claimed):
        raise CapsuleError(
            f"{info.producer}.__dlpack__ returned a capsule on {info.device_type}:{info.device_id} but "
            f"__dlpack_device__ said {device_name(claimed[0])}:{claimed[1]}"
        )
    return info


def parse_device(device: Any, default: tuple[int, int]) -> tuple[int, int]:
    """Accepts "cpu", "cuda", "cuda:1", (type, id), torch/jax/cupy device objects."""
    if device is None:
        return default
    if isinstance(device, tuple) and len(device) == 2:
        return (int(device[0]), int(device[1]))
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        kind = {"gpu": "cuda"}.get(kind, kind)
        if kind in DEVICE_CODES and (not index or index.isdigit()):
            same_kind = default[0] == DEVICE_CODES[kind]
            return (DEVICE_CODES[kind], int(index) if index else (default[1] if same_kind else 0))
    platform = getattr(device, "type", None) or getattr(device, "platform", None)  # torch / jax
    if isinstance(platform, str):
        number = getattr(device, "index", None)
        return parse_device(f"{platform}:{number if number is not None else getattr(device, 'id', 0)}", default)
    if type(device).__module__.startswith("cupy"):
        return (2, int(device.id))
    raise OptionError(f'device={device!r} is not a device; pass "cpu", "cuda", "cuda:N" or a framework device')


def stream_for(stream: int | None, target: Adapter, device: tuple[int, int]) -> int | None:
    if device[0] not in GPU_CODES:
        if stream is not None:
            raise OptionError(f"stream={stream!r} on {device_name(device[0])}: only stream=None is valid off the GPU")
        return None
    if stream is None:
        try:
            return target.current_stream(device)
        except Exception as err:  # e.g. a CPU-only build asked about a CUDA source
            raise DeviceMismatchError(
                f"to_{target.name}(): the source says it is on {device_name(device[0])}:{device[1]}, which "
                f"{target.name} cannot use in this process ({type(err).__name__}: {err})"
            ) from err
    if stream == 0 and device[0] != 10:
        raise OptionError("stream=0 is ambiguous in DLPack on CUDA; pass 1 for the legacy default stream")
    return stream
