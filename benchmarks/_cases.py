"""What benchmarks/bench.py measures: the rows (pairs, dtypes, sizes, targets), the frameworks'
own entry points, and source arrays made in each framework (all read off dlbridge's adapter registry)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from dlbridge._adapters import ADAPTERS, HOST, adapter_for  # noqa: E402 - needs ROOT on sys.path

CPU_FRAMEWORKS = tuple(name for name, a in ADAPTERS.items() if "cpu" in a.producer_devices)
GPU_FRAMEWORKS = tuple(name for name, a in ADAPTERS.items() if "cuda" in a.producer_devices)
# Frameworks whose import must come first (importing them after another module crashes the process).
IMPORT_FIRST = tuple(name for name, a in ADAPTERS.items() if a.unsafe_after)
DTYPES = ("float32", "bfloat16", "float8_e4m3fn")
UINT_OF = {"float32": "uint32", "bfloat16": "uint16", "float8_e4m3fn": "uint8"}
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float8_e4m3fn": 1, "uint32": 4, "uint16": 2, "uint8": 1}
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
# The speed targets (dlbridge / native, medians of one run).
TARGET_NATIVE, TARGET_RAW_CAPSULE, TARGET_VIEW, TARGET_IMPORT_MS = 1.10, 0.70, 1.25, 50.0
RAW_CAPSULE_CONSUMERS = ("torch", "cupy")  # where dlbridge hands over a ready capsule


@dataclass
class Row:
    producer: str
    consumer: str
    device: str
    dtype: str
    nbytes: int
    mode: str = ""  # dlbridge's plan
    baseline: str = ""  # the dtype the native side converts
    native_us: float | None = None
    dlbridge_us: float | None = None
    ratio: float | None = None
    target: float | None = None
    met: bool | None = None
    zero_copy_native: bool | None = None
    zero_copy_dlbridge: bool | None = None
    alloc_bytes: int | None = None  # consumer allocator delta around one dlbridge call (GPU)
    rounds: int = 0
    calls_per_round: int = 0
    skipped: str = ""
    notes: list[str] = field(default_factory=list)


# --- frameworks -------------------------------------------------------------------------------


def _mod(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def _available(name: str) -> str | None:
    """None when framework (or module) ``name`` imports, else why not."""
    module = ADAPTERS[name].module if name in ADAPTERS else name
    try:
        _mod(module)
    except Exception as err:  # any failure means "not here"
        return f"{name} not importable ({type(err).__name__}: {err})"
    return None


def cuda_reason(name: str) -> str | None:
    """None when ``name`` can use a CUDA device here, else why not."""
    missing = _available(name)
    if missing:
        return missing
    return None if ADAPTERS[name].has_cuda() else f"{name}: no CUDA device"


def native_import(consumer: str) -> Callable[[Any], Any]:
    return ADAPTERS[consumer].from_dlpack()


def data_ptr(x: Any) -> int:
    adapter = adapter_for(x)
    if adapter is None:
        raise TypeError(f"no data pointer for {type(x)}")
    return adapter.data_ptr(x)


def dtype_label(x: Any) -> str:
    adapter = adapter_for(x)
    return adapter.dtype_str(x) if adapter is not None else str(x.dtype)


def make_source(producer: str, dtype: str, nbytes: int, device: str) -> tuple[Any, Any]:
    """(array of ``dtype``, same-width unsigned array) from ``producer`` on ``device``."""
    np = HOST.mod
    n = nbytes // ITEMSIZE[dtype]
    pattern = np.arange(8, dtype=np.float32).astype(HOST.dtype_for(dtype))  # 0..7: exact in every format
    adapter = ADAPTERS[producer]
    x = adapter.make_array(np.tile(pattern, n // 8), device)  # 64-byte aligned on the host
    u = adapter.view(x, UINT_OF[dtype])  # a copy where the framework cannot view (JAX); only its cost matters
    for arr in (x, u):
        if hasattr(arr, "block_until_ready"):  # asynchronous frameworks: finished before timing starts
            arr.block_until_ready()
    return x, u


def alloc_counter(consumer: str) -> Callable[[], int] | None:
    """The consumer's device allocator counter (bytes in use), or None where it has none."""
    if consumer == "torch":
        return _mod("torch").cuda.memory_allocated
    if consumer == "cupy":
        return _mod("cupy").get_default_memory_pool().used_bytes
    if consumer == "jax":
        dev = _mod("jax").devices("gpu")[0]
        return lambda: int((dev.memory_stats() or {}).get("bytes_in_use", 0))
    return None


def synchronize(device: str) -> None:
    if device == "cuda" and "torch" in sys.modules:
        sys.modules["torch"].cuda.synchronize()


# --- the rows -------------------------------------------------------------------------------


def cpu_rows(quick: bool) -> list[Row]:
    rows = []
    for producer in CPU_FRAMEWORKS:
        for consumer in CPU_FRAMEWORKS:
            if producer == consumer:
                continue
            for dtype in DTYPES:
                rows.append(Row(producer, consumer, "cpu", dtype, KIB))
            if not quick:  # the cost does not grow with size
                rows.append(Row(producer, consumer, "cpu", "float32", 16 * MIB))
    return rows


def gpu_rows(quick: bool) -> list[Row]:
    rows = []
    sizes = (KIB,) if quick else (KIB, GIB)
    for producer in GPU_FRAMEWORKS:
        for consumer in GPU_FRAMEWORKS:
            if producer == consumer:
                continue
            for dtype in DTYPES:
                for nbytes in sizes:
                    rows.append(Row(producer, consumer, "cuda", dtype, nbytes))
    return rows
