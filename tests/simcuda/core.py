"""The simulated device: memory, streams, capsules and the call log (see the package docstring:
nothing here is GPU evidence).

Device memory is a ctypes buffer (``tests/ctypes_producer.py``'s ``CtypesArray``, which already
builds real DLPack capsules and counts deleter calls); what makes it "device" memory is only what
its capsules and :func:`pointer_attributes` say. Streams are integers: ``1`` and ``2`` are CUDA's
``cudaStreamLegacy`` / ``cudaStreamPerThread`` handles (the values the DLPack Python specification
gives them, dmlc/dlpack ``docs/source/python_spec.rst``, "stream"), any other stream is a fresh
integer from :func:`new_stream`.
"""

from __future__ import annotations

import ctypes
import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.ctypes_producer import (
    CtypesArray,
    DLManagedTensor,
    DLManagedTensorVersioned,
    Fields,
    _get_name,
    _get_pointer,
    _name_buffer,
    _set_name,
)

__all__ = [
    "LOG", "SimulatedCrash", "reset", "new_stream", "LEGACY", "PER_THREAD", "KDL_CPU", "KDL_CUDA",
    "KDL_CUDA_HOST", "KDL_CUDA_MANAGED", "DeviceMemory", "alloc", "pointer_attributes", "CapsuleView",
    "read_capsule", "relabel", "STATE",
]  # fmt: skip

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13  # dlpack.h DLDeviceType
LEGACY, PER_THREAD = 1, 2  # CUDA driver_types.h cudaStreamLegacy / cudaStreamPerThread (as DLPack numbers them)


class SimulatedCrash(BaseException):
    """Where the real library would take the process down (a double free, SIGSEGV/SIGABRT).

    A ``BaseException`` so that no ``except Exception`` in dlbridge can swallow it: a test that
    sees one has found a path on which dlbridge handed a library something that crashes it.
    """


@dataclass
class Call:
    who: str  # "torch", "jax", "cupy", "carrier", ...
    what: str  # "export" (a __dlpack__ call), "wait" (stream order established), "stream" (a query)
    stream: Any = None
    detail: dict[str, Any] = field(default_factory=dict)


class Log:
    """Every simulated call, in order. Tests pin export counts and the streams producers were handed."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def add(self, who: str, what: str, stream: Any = None, **detail: Any) -> None:
        self.calls.append(Call(who, what, stream, detail))

    def of(self, what: str, who: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.what == what and (who is None or c.who == who)]

    def exports(self, who: str | None = None) -> int:
        return len(self.of("export", who))

    def streams_handed(self, who: str | None = None) -> list[Any]:
        """The ``stream=`` each export of ``who`` was handed (absent keyword: the string "absent")."""
        return [c.stream for c in self.of("export", who)]

    def waits(self, who: str | None = None) -> list[Any]:
        """The consumer streams ``who`` made wait on its own work (producer-side stream order)."""
        return [c.stream for c in self.of("wait", who)]

    def clear(self) -> None:
        self.calls.clear()

    def __repr__(self) -> str:
        return "\n".join(f"{c.who}.{c.what}(stream={c.stream!r}, {c.detail})" for c in self.calls) or "(empty log)"


LOG = Log()

_stream_ids = itertools.count(1)


def new_stream() -> int:
    """A fresh ``cudaStream_t`` stand-in: an integer > 2 that no other stream has."""
    return 0x7F00_0000 + 0x100 * next(_stream_ids)


@dataclass
class State:
    device_count: int = 2
    current_device: int = 0  # cudaGetDevice / cudaSetDevice: the CUDA runtime's, per thread (one thread here)
    memory: dict[int, DeviceMemory] = field(default_factory=dict)  # base address -> allocation


STATE = State()


def reset(device_count: int = 2) -> None:
    """A clean simulated machine: empty log, device 0 current, no allocations."""
    LOG.clear()
    STATE.device_count = device_count
    STATE.current_device = 0
    STATE.memory.clear()


class DeviceMemory:
    """One allocation: ``kind`` is "device" (cudaMalloc), "managed" (cudaMallocManaged) or "pinned"
    (cudaMallocHost); ``device`` is the ordinal it belongs to."""

    def __init__(self, nbytes: int, device: int = 0, kind: str = "device") -> None:
        self.buffer = CtypesArray(max(nbytes, 1), Fields(1, 8, 1, (max(nbytes, 1),), None))
        self.base = self.buffer.base
        self.nbytes = nbytes
        self.device = device
        self.kind = kind

    def host(self, dtype: Any, shape: tuple[int, ...], strides: tuple[int, ...] | None = None,
             offset: int = 0) -> np.ndarray:  # fmt: skip
        """A NumPy view of (part of) this allocation (strides in bytes)."""
        return host_array(self.base + offset, dtype, shape, strides, keepalive=self)


def alloc(nbytes: int, device: int = 0, kind: str = "device") -> DeviceMemory:
    mem = DeviceMemory(nbytes, device, kind)
    STATE.memory[mem.base] = mem
    return mem


def pointer_attributes(ptr: int) -> tuple[str, int]:
    """``cudaPointerGetAttributes``: (memory kind, device ordinal) of the allocation holding ``ptr``;
    ("host", -1) for memory the simulated driver did not allocate."""
    for base, mem in STATE.memory.items():
        if base <= ptr < base + max(mem.nbytes, 1):
            return mem.kind, mem.device
    return "host", -1


def host_array(address: int, dtype: Any, shape: tuple[int, ...], strides: tuple[int, ...] | None,
               keepalive: Any) -> np.ndarray:  # fmt: skip
    """A writable NumPy array over raw memory at ``address`` (strides in bytes, None: C order)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if strides is None:
        strides = tuple(int(s) for s in np.empty(shape, dtype=dtype).strides) if shape else ()
    if 0 in shape:
        return np.empty(shape, dtype=dtype)
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + dtype.itemsize
    raw = (ctypes.c_char * (hi - lo)).from_address(address + lo)
    arr = np.ndarray(shape, dtype=dtype, buffer=raw, offset=-lo, strides=strides)
    _KEEP[id(arr)] = keepalive
    return arr


_KEEP: dict[int, Any] = {}  # host views keep their allocation alive for the test's lifetime


def export(memory: Any, address: int, shape: tuple[int, ...], strides_elems: tuple[int, ...] | None,
           triple: tuple[int, int, int], device: tuple[int, int], versioned: bool, byte_offset: int = 0,
           flags: int = 0) -> Any:  # fmt: skip
    """A real DLPack capsule over ``address`` (which ``memory`` keeps alive until its deleter runs)."""
    code, bits, lanes = triple
    carrier = CtypesArray(0, Fields(code, bits, lanes, tuple(shape), strides_elems, byte_offset, device))
    carrier.with_(data=address, flags=flags)
    carrier.keepalive = memory  # type: ignore[attr-defined]
    return carrier.capsule(versioned)


@dataclass
class CapsuleView:
    """What a consumer reads from a capsule (the struct is not copied: ``struct`` is live)."""

    name: bytes
    address: int
    versioned: bool
    struct: Any
    version: tuple[int, int] | None

    @property
    def tensor(self) -> Any:
        return self.struct.dl_tensor

    @property
    def device(self) -> tuple[int, int]:
        return (self.tensor.device_type, self.tensor.device_id)

    @property
    def dtype(self) -> tuple[int, int, int]:
        return (self.tensor.code, self.tensor.bits, self.tensor.lanes)

    @property
    def shape(self) -> tuple[int, ...]:
        t = self.tensor
        return tuple(ctypes.cast(t.shape, ctypes.POINTER(ctypes.c_int64))[i] for i in range(t.ndim)) if t.ndim else ()

    @property
    def strides(self) -> tuple[int, ...] | None:
        t = self.tensor
        if not t.strides:
            return None
        return tuple(ctypes.cast(t.strides, ctypes.POINTER(ctypes.c_int64))[i] for i in range(t.ndim))

    def take(self, capsule: Any) -> None:
        """Take ownership the protocol's way: rename to ``used_...`` (then the deleter is ours)."""
        _set_name(capsule, _name_buffer(b"used_" + self.name))

    def delete(self) -> None:
        if self.struct.deleter:
            self.struct.deleter(self.address)


def read_capsule(capsule: Any) -> CapsuleView:
    """Read a ``dltensor`` / ``dltensor_versioned`` capsule without taking it."""
    name = _get_name(capsule)
    address = _get_pointer(capsule, name)
    if name == b"dltensor_versioned":
        struct: Any = DLManagedTensorVersioned.from_address(address)
        return CapsuleView(name, address, True, struct, (struct.major, struct.minor))
    struct = DLManagedTensor.from_address(address)
    return CapsuleView(name, address, False, struct, None)


def relabel(capsule: Any, device: tuple[int, int]) -> Any:
    """Rewrite the device a (not yet consumed) capsule says, in place: how a real CPU export is
    made to claim CUDA."""
    view = read_capsule(capsule)
    view.tensor.device_type, view.tensor.device_id = device
    return capsule
