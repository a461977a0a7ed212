"""What benchmarks/bench.py measures: the rows (pairs, dtypes, sizes, targets), the frameworks'
own entry points, and source arrays made in each framework."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository

CPU_FRAMEWORKS = ("torch", "jax", "numpy")
# TensorFlow and PaddlePaddle: their pairs with NumPy and torch, both ways (CPU).
EXTRA_CPU_PAIRS = tuple(
    (a, b) for x in ("tensorflow", "paddle") for y in ("numpy", "torch") for a, b in ((y, x), (x, y))
)
# Imported before anything else when a row needs them: paddle after tensorflow crashes the process.
IMPORT_FIRST = ("paddle",)
GPU_FRAMEWORKS = ("torch", "cupy", "jax")
DTYPES = ("float32", "bfloat16", "float8_e4m3fn")
UINT_OF = {"float32": "uint32", "bfloat16": "uint16", "float8_e4m3fn": "uint8"}
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float8_e4m3fn": 1, "uint32": 4, "uint16": 2, "uint8": 1}
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
# Issue 5's targets (dlbridge / native, medians of one run).
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
    """None when ``name`` imports, else why not."""
    try:
        _mod(name)
    except Exception as err:  # any failure means "not here"
        return f"{name} not importable ({type(err).__name__}: {err})"
    return None


def cuda_reason(name: str) -> str | None:
    """None when ``name`` can use a CUDA device here, else why not."""
    missing = _available(name)
    if missing:
        return missing
    try:
        if name == "torch":
            ok = _mod("torch").cuda.is_available()
        elif name == "cupy":
            ok = _mod("cupy").cuda.runtime.getDeviceCount() > 0
        else:
            ok = bool(_mod("jax").devices("gpu"))
    except Exception as err:
        return f"{name}: no CUDA device ({type(err).__name__}: {str(err).splitlines()[0][:80]})"
    return None if ok else f"{name}: no CUDA device"


def native_import(consumer: str) -> Callable[[Any], Any]:
    if consumer == "jax":
        return _mod("jax.numpy").from_dlpack
    if consumer == "tensorflow":  # TF's from_dlpack takes only a capsule
        imp = _mod("tensorflow").experimental.dlpack.from_dlpack
        return lambda x: imp(x.__dlpack__())
    return _mod(consumer).from_dlpack


def data_ptr(x: Any) -> int:
    top = type(x).__module__.partition(".")[0]
    if top == "torch":
        return int(x.data_ptr())
    if top == "numpy":
        return int(x.__array_interface__["data"][0])
    if top in ("jax", "jaxlib"):
        return int(x.unsafe_buffer_pointer())
    if top in ("cupy", "cupy_backends"):
        return int(x.data.ptr)
    if top == "paddle":
        return int(x.data_ptr())
    if top == "tensorflow":  # no public pointer: read it off a capsule (freed unconsumed)
        from dlbridge._capsule import read

        return read(_mod("tensorflow").experimental.dlpack.to_dlpack(x)).data_ptr
    raise TypeError(f"no data pointer for {type(x)}")


def dtype_label(x: Any) -> str:
    if type(x).__module__.startswith("paddle"):
        return str(x.dtype).removeprefix("paddle.")  # its dtype's .name is "FLOAT32"
    return str(getattr(x.dtype, "name", x.dtype)).replace("torch.", "")


def _aligned_numpy(n_bytes: int) -> Any:
    # JAX copies CPU buffers that are not 64-byte aligned; align so the zero-copy path is measured.
    np = _mod("numpy")
    raw = np.empty(n_bytes + 64, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start : start + n_bytes]


def make_source(producer: str, dtype: str, nbytes: int, device: str) -> tuple[Any, Any]:
    """(array of ``dtype``, same-width unsigned array) from ``producer`` on ``device``."""
    n = nbytes // ITEMSIZE[dtype]
    uint = UINT_OF[dtype]
    if producer == "torch":
        torch = _mod("torch")
        dev = "cuda" if device == "cuda" else "cpu"
        x = (torch.arange(n, device=dev, dtype=torch.float32) % 8).to(getattr(torch, dtype))
        return x, x.view(getattr(torch, uint))
    if producer == "numpy":
        np = _mod("numpy")
        ml = _mod("ml_dtypes")
        np_dtype = np.dtype(getattr(ml, dtype)) if dtype != "float32" else np.dtype(np.float32)
        x = _aligned_numpy(nbytes).view(np_dtype)
        x[...] = (np.arange(n, dtype=np.float32) % 8).astype(np_dtype)
        return x, x.view(uint)
    if producer == "jax":
        jax = _mod("jax")
        jnp = jax.numpy
        dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
        x = jax.device_put((jnp.arange(n, dtype=jnp.float32) % 8).astype(getattr(jnp, dtype)), dev)
        u = jax.lax.bitcast_convert_type(x, getattr(jnp, uint))  # a copy; only its cost matters
        return x.block_until_ready(), u.block_until_ready()
    if producer == "tensorflow":
        tf = _mod("tensorflow")
        if dtype.startswith("float8_"):
            raise ValueError("TensorFlow cannot export float8 through DLPack")
        x = tf.constant(make_source("numpy", dtype, nbytes, "cpu")[0])
        return x, tf.bitcast(x, getattr(tf, uint))
    if producer == "paddle":
        paddle = _mod("paddle")
        x = paddle.to_tensor(make_source("numpy", "float32", n * 4, "cpu")[0]).astype(dtype)
        # Paddle has no uint16 (bf16 exports natively, so no baseline is needed); fp8 views as uint8.
        return x, x.view(getattr(paddle, uint)) if uint != "uint16" else x
    if producer == "cupy":
        cp = _mod("cupy")
        if dtype == "float32":
            x = cp.arange(n, dtype=cp.float32) % 8
        else:
            ml = _mod("ml_dtypes")  # CuPy 14 holds bf16 via ml_dtypes; no CuPy holds fp8
            x = (cp.arange(n, dtype=cp.float32) % 8).astype(getattr(ml, dtype))
        return x, x.view(uint)
    raise ValueError(producer)


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
    for producer, consumer in EXTRA_CPU_PAIRS:
        rows += [Row(producer, consumer, "cpu", dtype, KIB) for dtype in DTYPES]
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
