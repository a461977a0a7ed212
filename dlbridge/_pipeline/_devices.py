"""Devices and CUDA streams, decided in one place: where an array's memory is, where the target can
use it (and whether this process has that device at all), which stream a producer's ``__dlpack__``
is given, and whether that asks it to make the stream wait (the DLPack handshake).

Everyone asks here: the pipeline's stages (``_convert``), moves (``_moves``), ``dlbridge.explain`` and
``inspect`` (``_export``), the fast route's learning (``_route._learn``: ``home_of``), the guard
(``_guard``); the fast route's GPU half replays the consumer's stream query its state holds
(``_route._gpu``) and declines to the pipeline wherever that is not the whole handshake. A capsule's
device is read, checked against its array's claim and relabelled only here (``placed``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any, NamedTuple

from .._adapters import ADAPTERS, Adapter, producer_error
from .._capsule._edit import relabel_device
from .._capsule._read import DEVICE_ALIASES, DEVICE_CODES, GPU_CODES, DLPackInfo, alias_device, device_name
from .._errors import CapsuleError, DeviceMismatchError, DLBridgeError, OptionError

__all__ = ["device_of", "check_device", "placed", "described_on", "home_of", "destination", "require_device", "raw_destination",
           "parse_device", "host_device", "Handshake", "check_stream", "handshake", "asked", "defers", "stream_for", "stream_rule",
           "on_device", "result_device", "holders"]  # fmt: skip

DeviceT = tuple[int, int]


# --- where the memory is ----------------------------------------------------------------------


def device_of(x: Any, source: Adapter | None = None) -> DeviceT:
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


def check_device(info: DLPackInfo, claimed: DeviceT) -> DLPackInfo:
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


def placed(capsule: Any, info: DLPackInfo, claimed: DeviceT, home: DeviceT, relabel: bool = True) -> DLPackInfo:
    """The capsule of an array that claimed ``claimed`` (its export), checked to be there (or on its
    alias) and described as ``home``, the memory the target uses (pinned -> cpu, managed -> cuda, CPU
    ids -> 0); ``relabel``: the capsule too (the pipeline's own export, before any consumer sees it)."""
    if info.device_code == home[0] and info.device_id == home[1]:
        return info
    check_device(info, claimed)  # raises unless the capsule is on the claimed device (or its alias)
    if relabel:
        relabel_device(capsule, home)
    return described_on(info, home)


def described_on(info: DLPackInfo, device: DeviceT) -> DLPackInfo:
    """``info`` as a capsule of the same memory labelled ``device`` says it (a relabel, or a copy moved there)."""
    return replace(info, device_type=device_name(device[0]), device_code=device[0], device_id=device[1])


# --- where the target can use it --------------------------------------------------------------


def holders(info: DLPackInfo, other_than: Adapter) -> list[Adapter]:
    """The frameworks (registry order) that can hold the memory ``info`` describes where it is."""
    return [a for a in ADAPTERS.values() if a is not other_than and info.device_code in a.device_codes]


def home_of(device: DeviceT, target: Adapter) -> tuple[DeviceT, bool]:
    """Where ``target`` finds memory on ``device``, and whether it can use it there (else the memory
    must be moved first): the one device rule of the pipeline and the report's prediction. Pinned
    host memory is CPU memory to a CPU consumer, managed memory CUDA memory to a CUDA one
    (``DEVICE_ALIASES``): shared as such, the capsule's device relabelled. Every CPU id names the
    host's memory."""
    home = alias_device(device) if device[0] in DEVICE_ALIASES and device[0] not in target.device_codes else device
    if home[1] and home[0] == 1:
        home = (1, 0)
    return home, home[0] in target.device_codes


def destination(src_dev: DeviceT, target: Adapter, device: Any, copy: bool | None) -> tuple[DeviceT, DeviceT | None]:
    """(home, move): where ``target`` finds memory on ``src_dev`` as the caller asks (``device=``,
    ``copy=``), and the device it must be moved to first (None: none, it is used where it is)."""
    home, usable = home_of(src_dev, target)  # pinned / managed memory aliased, every CPU id the host's
    dst_dev = home if device is None else parse_device(device, home)
    if device is None and copy and not usable:
        dst_dev = target.home_device  # copy=True: the target's home device
    if dst_dev == home and usable:
        return home, None
    if dst_dev[0] == 1 and home[0] == 1 and 1 in target.device_codes:
        return host_device(target, dst_dev, device), None  # JAX's CPU device N: the same memory, labelled N
    return home, dst_dev


def require_device(adapter: Adapter, device: DeviceT, call: str, role: str = "") -> None:
    """Raise DeviceMismatchError where ``adapter`` has no ``device`` in this process (a CPU-only build
    asked for CUDA, a GPU index past its count), before anything is exported or copied; ``role``:
    what it would do there (the target: use the memory; a mover: copy it there)."""
    if device[0] == 1 or device[0] not in adapter.device_codes:
        return  # CPU ids: host_device; a type it never has: the move rules refuse it
    count = adapter.device_count(device[0])
    if count is None or device[1] < count:
        return
    kind = device_name(device[0])
    has = (
        f"{count} {kind} device{'s' if count > 1 else ''} ({kind}:0..{kind}:{count - 1})"
        if count
        else f"no {kind} device"
    )
    raise DeviceMismatchError(
        f"{call}: {adapter.display} has {has} in this process, so it cannot {role or 'use memory on'} "
        f'{kind}:{device[1]}; pass an array on a device it has, or device="cpu"'
    )


def raw_destination(info: DLPackInfo, target: Adapter, device: Any) -> DeviceT | None:
    """A raw capsule (it cannot be moved, only relabelled): the device it is relabelled as for
    ``target`` right before the import (None: as it is), or DeviceMismatchError where the target cannot
    use its memory (another device, or one this process does not have)."""
    alias = alias_device(info.device)  # pinned / managed memory: see home_of
    usable = alias != info.device and info.device_code not in target.device_codes and alias[0] in target.device_codes
    device_to = None  # the caller's capsule is relabelled only right before the import (and restored)
    if usable and parse_device(device, alias) == alias:
        device_to = alias
    elif info.device_code == 1 and (info.device_id or device is not None) and 1 in target.device_codes:
        wanted = parse_device(device, (1, 0))  # every CPU id names the host's memory: see home_of
        if wanted[0] == 1 and wanted != info.device:
            device_to = host_device(target, wanted, device)
    there = info.device if device_to is None else device_to
    if parse_device(device, there) != there or there[0] not in target.device_codes:
        target.check_installed()
        raise DeviceMismatchError(
            f"to_{target.name}(): a raw capsule on {device_name(there[0])} cannot be moved; pass the "
            "array itself (not its capsule) so dlbridge can ask its producer for a copy"
        )
    require_device(target, there, f"to_{target.name}()")  # e.g. a CUDA capsule, torch built without CUDA
    return device_to


def result_device(device: DeviceT, source: Adapter | None) -> DeviceT:
    """Where results made from an array on ``device`` come back (the guard's): pinned host memory
    its producer cannot hold as such (a pinned torch tensor's results are CPU tensors) is the CPU's."""
    if device[0] in DEVICE_ALIASES and (source is None or device[0] not in source.device_codes):
        return alias_device(device)
    return device


def parse_device(device: Any, default: DeviceT) -> DeviceT:
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


def host_device(target: Adapter, device: DeviceT, asked: Any) -> DeviceT:
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


# --- the stream handshake ---------------------------------------------------------------------


class Handshake(NamedTuple):
    """What a producer's ``__dlpack__(stream=)`` is given, and whether that asks it to make the stream
    wait for its pending work on the array (DLPack: any stream but -1, or None off the GPU)."""

    stream: int | None
    waits: bool


_NONE = Handshake(None, False)


def stream_rule(stream: int | None, device: DeviceT) -> None:
    """Off the GPU a producer takes no stream: only stream=None is valid (the one place it is said)."""
    if stream is not None and device[0] not in GPU_CODES:
        raise OptionError(f"stream={stream!r} on {device_name(device[0])}: only stream=None is valid off the GPU")


def check_stream(stream: int | None, target: Adapter | None, device: DeviceT) -> None:
    """The caller's ``stream=`` for an array on ``device``, checked (OptionError) before anything else
    is asked of the producer or the target."""
    if device[0] not in GPU_CODES:
        stream_rule(stream, device)
        return
    if stream is not None and stream != -1 and target is not None and not target.honours_stream:
        raise OptionError(
            f"stream={stream!r}: {target.name} imports on a stream of its own choosing, so the producer would "
            f"synchronise with a stream {target.name} does not read on; pass stream=None (dlbridge then "
            f"synchronises with {target.name}'s stream) or stream=-1 (no synchronisation)"
        )
    if stream == 0 and device[0] != 10:
        raise OptionError("stream=0 is ambiguous in DLPack on CUDA; pass 1 for the legacy default stream")


def handshake(stream: int | None, source: Adapter | None, target: Adapter | None, device: DeviceT,
              describe: bool = False) -> Handshake:  # fmt: skip
    """The stream the producer of an array on ``device`` is given for ``target`` (None: described only):
    the consumer's current stream (``stream=None``), no synchronisation (``stream=-1``, and a capsule only
    described: nothing reads the data), or the caller's (``stream=S``). The caller's options are checked
    either way (``describe`` too: explain says what the conversion raises)."""
    check_stream(stream, target, device)
    if device[0] not in GPU_CODES:
        return _NONE
    if describe or stream == -1 or target is None:
        # No synchronisation: -1 in DLPack; JAX and CPU-only producers need None (see their adapters).
        return Handshake(-1 if source is None else source.no_sync_stream, False)
    if stream is None:
        return Handshake(_current_stream(target, device), True)
    return Handshake(stream, True)


def _current_stream(target: Adapter, device: DeviceT) -> int | None:
    try:
        return target.current_stream(device)
    except MemoryError:
        raise
    except Exception as err:  # e.g. a CPU-only build asked about a CUDA source
        raise DeviceMismatchError(
            f"to_{target.name}(): the source says it is on {device_name(device[0])}:{device[1]}, which "
            f"{target.display} cannot use in this process ({type(err).__name__}: {err})"
        ) from err


def stream_for(stream: int | None, target: Adapter, device: DeviceT) -> int | None:
    """The stream= of ``handshake`` for a producer dlbridge has no adapter for (-1: no synchronisation)."""
    return handshake(stream, None, target, device).stream


def asked(stream: Any) -> Handshake:
    """The stream a consumer that asks the producer itself (JAX, through a ``DeferredCarrier``) asked with."""
    return Handshake(stream, stream is not None and stream != -1)


def defers(stream: int | None, target: Adapter, device: DeviceT) -> bool:
    """Whether the export waits until the consumer asks for it with its own stream (JAX on a GPU):
    XLA hands out its streams round-robin, so only the stream it asks with is the one it reads on."""
    return stream is None and target.asks_producer_stream and device[0] in GPU_CODES


def on_device(source: Adapter | None, device: DeviceT) -> AbstractContextManager[Any]:
    """The producer's current GPU made ``device`` for its export (torch refuses, and CuPy records its
    event on, the current device only); nothing off the GPU."""
    return source.on_device(device) if source is not None and device[0] in GPU_CODES else nullcontext()
