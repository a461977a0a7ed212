"""Devices and CUDA streams: parsing ``device=``, asking objects where they live, and the stream
a consumer passes to a producer's ``__dlpack__`` (the DLPack handshake)."""

from __future__ import annotations

from typing import Any

from .._adapters import ADAPTERS, Adapter, producer_error
from .._capsule._read import DEVICE_ALIASES, DEVICE_CODES, GPU_CODES, DLPackInfo, alias_device, device_name
from .._errors import CapsuleError, DeviceMismatchError, DLBridgeError, OptionError

__all__ = ["device_of", "check_device", "home_of", "parse_device", "host_device", "stream_for"]


def device_of(x: Any, source: Adapter | None = None) -> tuple[int, int]:
    """Where ``x`` lives, asked through its adapter when it has one (a framework may lack the method)."""
    try:
        if source is not None:
            return source.device_of(x)
        dev = x.__dlpack_device__()
        return (int(dev[0]), 0 if dev[1] is None else int(dev[1]))  # some producers say None for 0
    except (DLBridgeError, MemoryError):
        raise  # from dlbridge inside the producer: already says what to do; no memory: no producer's fault
    except Exception as err:  # a deleted or traced array, ...: the adapter names the fix when it knows
        raise producer_error(x, err, "__dlpack_device__") from err


def check_device(info: DLPackInfo, claimed: tuple[int, int]) -> DLPackInfo:
    # torch says (3, 0) for a pinned tensor but writes kDLCPU into its capsule (pytorch#136250):
    # the alias of the claimed device describes the same memory. Any CPU id is the host: JAX writes
    # its CPU device's number into the capsule but says (1, 0) in __dlpack_device__ (probe
    # 2026-11-23, jax 0.10.2 with --xla_force_host_platform_device_count=4).
    # CuPy < 13.4 writes device id 0 into every managed-memory capsule ("make it accessible on CPU
    # too", cupy v13.3.0 cupy/_core/dlpack.pyx toDlpack line 127) while __dlpack_device__ says the
    # array's device (core.pyx lines 331-343): managed memory is the claimed device's all the same.
    managed_zero = info.device == (13, 0) and claimed[0] == 13
    alias = alias_device(claimed)
    if info.device != claimed and info.device != alias and not info.device_code == 1 == alias[0] and not managed_zero:
        raise CapsuleError(
            f"{info.producer}.__dlpack__ returned a capsule on {info.device_type}:{info.device_id} but "
            f"__dlpack_device__ said {device_name(claimed[0])}:{claimed[1]}"
        )
    return info


def home_of(device: tuple[int, int], target: Adapter) -> tuple[tuple[int, int], bool]:
    """Where ``target`` finds memory on ``device``, and whether it can use it there (else the memory
    must be moved first): the one device rule of the pipeline (``_convert.decide_stage``) and the
    report's prediction. Pinned host memory is CPU memory to a CPU consumer, managed memory CUDA
    memory to a CUDA one (``DEVICE_ALIASES``): shared as such, the capsule's device relabelled.
    Every CPU id names the host's memory."""
    home = alias_device(device) if device[0] in DEVICE_ALIASES and device[0] not in target.device_codes else device
    if home[1] and home[0] == 1:
        home = (1, 0)
    return home, home[0] in target.device_codes


def parse_device(device: Any, default: tuple[int, int]) -> tuple[int, int]:
    """Accepts "cpu", "cuda", "cuda:1", (type, id), ("cuda", 1), and the device objects of the frameworks dlbridge knows."""
    if device is None:
        return default
    if isinstance(device, tuple) and len(device) == 2:
        kind, index = device
        if isinstance(kind, str) and kind in DEVICE_CODES:
            kind = DEVICE_CODES[kind]
        if _is_index(kind) and _is_index(index):
            return (int(kind), int(index))
    elif isinstance(device, str):
        kind, _, index = device.partition(":")
        kind = {"gpu": "cuda"}.get(kind, kind)
        if kind in DEVICE_CODES and (not index or index.isdigit()):
            same_kind = default[0] == DEVICE_CODES[kind]
            return (DEVICE_CODES[kind], int(index) if index else (default[1] if same_kind else 0))
    else:
        for adapter in ADAPTERS.values():
            spec = adapter.parse_device(device)
            if spec is not None:
                return parse_device(spec, default)
    raise OptionError(
        f'device={device!r} is not a device; pass "cpu", "cuda", "cuda:N", a (device_type, id) pair of '
        f'integers as __dlpack_device__ returns it (e.g. (1, 0)), ("cuda", N), or a framework device'
    )


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def host_device(target: Adapter, device: tuple[int, int], asked: Any) -> tuple[int, int]:
    """``device`` (a CPU id) checked against the target's CPU devices: every CPU id names the host's
    memory, JAX numbers its CPU devices (XLA's --xla_force_host_platform_device_count), the others
    have one."""
    if device[1]:
        count = target.cpu_devices()
        if device[1] >= count:
            raise DeviceMismatchError(
                f"to_{target.name}(): device={asked!r} names CPU device {device[1]}, but {target.display} has "
                f"{count} CPU device{'s' if count > 1 else ''} (cpu:0{f'..cpu:{count - 1}' if count > 1 else ''});"
                ' pass device="cpu"'
            )
    return device


def stream_for(stream: int | None, target: Adapter, device: tuple[int, int]) -> int | None:
    if device[0] not in GPU_CODES:
        if stream is not None:
            raise OptionError(f"stream={stream!r} on {device_name(device[0])}: only stream=None is valid off the GPU")
        return None
    if stream is None:
        try:
            return target.current_stream(device)
        except MemoryError:
            raise
        except Exception as err:  # e.g. a CPU-only build asked about a CUDA source
            raise DeviceMismatchError(
                f"to_{target.name}(): the source says it is on {device_name(device[0])}:{device[1]}, which "
                f"{target.display} cannot use in this process ({type(err).__name__}: {err})"
            ) from err
    if stream == 0 and device[0] != 10:
        raise OptionError("stream=0 is ambiguous in DLPack on CUDA; pass 1 for the legacy default stream")
    return stream
