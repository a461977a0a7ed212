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
PATHS = ("compiled", "pure")  # dlbridge with its compiled accelerator / forced to pure Python
TARGET_IMPORT_MS = 30.0

# --- targets: dlbridge ÷ native (medians of one run), per path; None = no target ("-") ---------
# Compiled, CPU: at most native speed wherever the native handoff runs Python on either side
# (torch's and JAX's __dlpack__/from_dlpack, TensorFlow's and PaddlePaddle's from_dlpack).
TARGET_COMPILED = 1.0
TARGET_COMPILED_PAIR = {
    ("numpy", "numpy"): 1.15,  # NumPy's own handoff is C end to end
    ("numpy", "torch"): 1.05,  # torch.from_dlpack on a NumPy array: one short Python frame
    ("jax", "numpy"): 1.3,
}
# Rows timed against the native import of a same-width unsigned array (bf16/fp8 reinterpret or
# view): the pair's target, or this one where it is looser.
TARGET_COMPILED_REINTERPRET = {("numpy", "torch"): 1.25}  # ml_dtypes arrays leave NumPy as uint
# Pure Python, CPU: pairs with JAX (a slow native handoff) and the NumPy/torch pairs; numpy ->
# numpy is exempt (NumPy's C handoff is well under a microsecond: a fixed Python cost dominates any
# ratio) and TensorFlow/PaddlePaddle pairs have none.
TARGET_PURE_JAX = 1.3
TARGET_PURE_PAIR = {("numpy", "torch"): 2.3, ("torch", "numpy"): 2.3, ("torch", "torch"): 2.3}
# CUDA rows (compiled path only): where dlbridge hands the consumer a ready capsule it skips the
# consumer's device query and export, so it should beat the native handoff.
TARGET_CUDA_NATIVE, TARGET_CUDA_RAW_CAPSULE, TARGET_CUDA_VIEW = 1.10, 0.70, 1.25
RAW_CAPSULE_CONSUMERS = ("torch", "cupy")


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
    path: str = "compiled"  # one of PATHS
    # readonly= dlbridge is timed with: "drop" for the arrays of a producer whose arrays are immutable (JAX), which
    # dlbridge refuses by default into a consumer without read-only arrays (torch) and native from_dlpack aliases.
    readonly: str = "keep"


def target_for(row: Row) -> float | None:
    """The row's target on its path (after timing: it depends on the plan and the baseline)."""
    pair = (row.producer, row.consumer)
    reinterpret = row.mode in ("reinterpret", "view") or row.baseline != row.dtype
    if row.device == "cuda":
        if row.path != "compiled":
            return None
        if reinterpret:
            return TARGET_CUDA_VIEW
        return TARGET_CUDA_RAW_CAPSULE if row.consumer in RAW_CAPSULE_CONSUMERS else TARGET_CUDA_NATIVE
    if row.path == "compiled":
        target = TARGET_COMPILED_PAIR.get(pair, TARGET_COMPILED)
        return max(target, TARGET_COMPILED_REINTERPRET.get(pair, target)) if reinterpret else target
    if "jax" in pair:
        return TARGET_PURE_JAX
    return TARGET_PURE_PAIR.get(pair)


def accelerator() -> tuple[bool, str]:
    """(whether this process converts through the compiled accelerator, the loader's reason)."""
    try:
        from dlbridge import _accelerator  # type: ignore[attr-defined, unused-ignore]
    except ImportError:
        return False, "pure Python (no accelerator in this build)"
    return _accelerator.accel is not None, str(_accelerator.reason)


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
    return adapter.prober.dtype_str(x) if adapter is not None else str(x.dtype)


def make_source(producer: str, dtype: str, nbytes: int, device: str) -> tuple[Any, Any]:
    """(array of ``dtype``, same-width unsigned array) from ``producer`` on ``device``."""
    np = HOST.mod
    n = nbytes // ITEMSIZE[dtype]
    pattern = np.arange(8, dtype=np.float32).astype(HOST.prober.dtype_for(dtype))  # 0..7: exact in every format
    adapter = ADAPTERS[producer]
    x = adapter.prober.make_array(np.tile(pattern, n // 8), device)  # 64-byte aligned on the host
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


def readonly_for(producer: str) -> str:
    """The readonly= a row of ``producer`` is timed with (``Row.readonly``): zero-copy, as native from_dlpack."""
    return "keep" if ADAPTERS[producer].mutable_arrays else "drop"


def cpu_rows(quick: bool) -> list[Row]:
    rows = []
    for producer in CPU_FRAMEWORKS:
        readonly = readonly_for(producer)
        for consumer in CPU_FRAMEWORKS:  # same-framework pairs too: they convert (a fresh alias)
            for dtype in DTYPES:
                rows.append(Row(producer, consumer, "cpu", dtype, KIB, readonly=readonly))
            if not quick:  # the cost does not grow with size
                rows.append(Row(producer, consumer, "cpu", "float32", 16 * MIB, readonly=readonly))
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
                    rows.append(Row(producer, consumer, "cuda", dtype, nbytes, readonly=readonly_for(producer)))
    return rows
