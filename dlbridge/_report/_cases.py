"""What the report probes: frameworks, devices, dtypes, and how to build a source per cell.

The names and defaults are plain data the parent process reads without importing any
framework. The functions below them (making sources, reading results back as bytes) run in
the worker process only and import their framework on first use.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from .._adapters import ADAPTERS
from .._dtypes import BY_NAME, FLOAT8

__all__ = ["FRAMEWORKS", "DEVICES", "BASE_DTYPES", "PRODUCER_DEVICES", "installed_frameworks", "short_dtype",
           "reference", "make_source", "host_bytes", "dtype_of", "native_import", "gpu_info"]  # fmt: skip

FRAMEWORKS: tuple[str, ...] = tuple(ADAPTERS)  # torch, cupy, jax, numpy
DEVICES = ("cpu", "cuda")
DEVICE_CODE = {"cpu": 1, "cuda": 2}
# Where each framework can *make* arrays (numpy only on the host, CuPy only on the GPU).
PRODUCER_DEVICES: dict[str, tuple[str, ...]] = {"torch": DEVICES, "cupy": ("cuda",), "jax": DEVICES, "numpy": ("cpu",)}
BASE_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "complex64", "uint16", "int64")
# The fp8 kinds beyond the base list that a default run adds when some producer can make them.
EXTRA_FP8 = tuple(n for n in BY_NAME if n in FLOAT8 and n not in BASE_DTYPES)
CANDIDATE_DTYPES = BASE_DTYPES + EXTRA_FP8
_SHAPE = (4, 6)
_ALIGN = 64


def installed_frameworks() -> list[str]:
    """Frameworks importable here, found without importing them."""
    return [name for name in FRAMEWORKS if importlib.util.find_spec(ADAPTERS[name].module) is not None]


def short_dtype(name: str) -> str:
    """Column label: float32 -> f32, float8_e4m3fn -> e4m3fn, complex64 -> c64."""
    if name.startswith("float8_"):
        return name.removeprefix("float8_")
    for long, short in (("bfloat", "bf"), ("float", "f"), ("complex", "c"), ("uint", "u"), ("int", "i")):
        if name.startswith(long):
            return short + name.removeprefix(long)
    return name


# --- worker side: sources and results ----------------------------------------------------------


def _np_dtype(name: str) -> Any:
    import numpy as np

    if name == "bfloat16" or name.startswith("float"):
        import ml_dtypes

        if hasattr(ml_dtypes, name):
            return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def reference(dtype: str) -> Any:
    """A NumPy array (ml_dtypes for bf16/fp8) with known, finite, mostly distinct values."""
    import numpy as np

    n = _SHAPE[0] * _SHAPE[1]
    k = np.arange(n)
    if dtype == "bool":
        return ((k * 7) % 3 == 0).reshape(_SHAPE)
    if dtype.startswith(("int", "uint")):
        return ((k * 2654435761) % 30011).astype(dtype).reshape(_SHAPE)
    if dtype == "float8_e8m0fnu":  # only positive powers of two
        return (2.0 ** (k % 9 - 4)).astype(np.float32).astype(_np_dtype(dtype)).reshape(_SHAPE)
    # Small halves and integers are exact in every float format here, fp8 included.
    halves = ((k * 5) % 17 - 8) / 2
    if dtype.startswith("complex"):
        return (halves + 1j * halves[::-1]).astype(dtype).reshape(_SHAPE)
    if dtype.endswith("fnuz"):  # fnuz formats have no -0.0
        halves = np.where(halves == 0, 1.0, halves)
    return halves.astype(np.float32).astype(_np_dtype(dtype)).reshape(_SHAPE)


def _raw(ref: Any) -> Any:
    """``ref`` as a NumPy array the framework understands: ml_dtypes data as same-width uints."""
    return ref.view(f"u{ref.dtype.itemsize}") if ref.dtype.type.__module__ == "ml_dtypes" else ref


def _aligned_copy(a: Any) -> Any:
    """A copy of ``a`` at a 64-byte aligned address.

    JAX copies CPU buffers that are not aligned the way XLA wants; NumPy's own allocations
    are only 16-byte aligned, so without this the zero-copy column would depend on chance.
    """
    import numpy as np

    buf = np.empty(a.nbytes + _ALIGN, dtype=np.uint8)
    start = -buf.ctypes.data % _ALIGN
    out = buf[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def make_source(framework: str, device: str, dtype: str) -> Any:
    """The source array for one cell; raises (any exception) when the framework cannot make it."""
    ref = reference(dtype)
    if framework == "numpy":
        return _aligned_copy(ref)  # bf16/fp8: an ml_dtypes array (the "numpy with ml_dtypes" producer)
    if framework == "torch":
        import torch

        target = getattr(torch, dtype, None)
        if not isinstance(target, torch.dtype):
            raise TypeError(f"torch has no {dtype}")
        t = torch.from_numpy(_aligned_copy(_raw(ref)))
        t = t.view(target) if t.dtype != target else t
        return t.to("cuda") if device == "cuda" else t
    if framework == "jax":
        import jax

        dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
        return jax.device_put(ref, dev)
    if framework == "cupy":
        import cupy

        raw = cupy.asarray(_raw(ref))
        return raw.view(ref.dtype) if raw.dtype != ref.dtype else raw
    raise ValueError(f"unknown framework {framework!r}")


def dtype_of(framework: str, arr: Any) -> str:
    """dlbridge's name for an array's dtype (``torch.bfloat16`` -> ``bfloat16``)."""
    text = str(arr.dtype).removeprefix("torch.") if framework == "torch" else str(arr.dtype)
    return text


def host_bytes(framework: str, arr: Any) -> Any:
    """The array's raw bytes on the host, C order, as a flat NumPy uint8 array."""
    import numpy as np

    if framework == "torch":
        import torch

        t = arr.detach().cpu().contiguous().reshape(-1)
        if t.is_complex():
            t = torch.view_as_real(t).reshape(-1)
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        return t.view(torch.uint8).numpy()
    if framework == "cupy":
        import cupy

        a = cupy.ascontiguousarray(arr).reshape(-1)
        return a.view(f"u{a.dtype.itemsize}").get().view(np.uint8)
    a = np.ascontiguousarray(np.asarray(arr)).reshape(-1)  # numpy and jax
    return a.view(np.uint8)


def native_import(consumer: str, src: Any) -> Any:
    """The consumer's own ``from_dlpack`` on the producer's array."""
    return ADAPTERS[consumer].from_dlpack()(src)


def cuda_producers(frameworks: list[str]) -> list[str]:
    """Which of ``frameworks`` see a CUDA device here (imports them: worker only)."""
    return [name for name in frameworks if ADAPTERS[name].has_cuda()]


def gpu_info(frameworks: list[str]) -> str | None:
    """The GPU's name as a framework reports it (worker only)."""
    try:
        if "torch" in frameworks:
            import torch

            if torch.cuda.is_available():
                return str(torch.cuda.get_device_name(0))
        if "cupy" in frameworks:
            import cupy

            return str(cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
        if "jax" in frameworks:
            import jax

            return str(jax.devices("gpu")[0].device_kind)
    except Exception:
        return None
    return None
