"""Source arrays with known bit patterns, made in each framework, and helpers to read them back.

Every test array is built from a NumPy reference (ml_dtypes for bf16/fp8) so that values can
be compared bit for bit, whatever framework produced or consumed them.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from dlbridge._adapters import ADAPTERS

DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "complex64", "uint16", "int64")
LAYOUTS = ("contiguous", "transposed", "sliced", "0-d", "empty")
# Every framework in the registry that makes arrays on the CPU (tests skip the ones not installed).
# Frameworks with an import-order hazard (``Adapter.unsafe_after``) and the modules they must not follow
# have their own matrix, run in a child process (tests/test_tensorflow_paddle.py); the in-process
# matrix covers the rest of the registry.
_CHILD_ONLY = {n for n, a in ADAPTERS.items() if a.unsafe_after} | {
    n for n, a in ADAPTERS.items() for b in ADAPTERS.values() if a.module in b.unsafe_after
}
# ONNX Runtime and Warp have their own files (tests/test_onnxruntime.py, tests/test_warp.py): OrtValues have
# no indexing or shape attribute, Warp arrays no 0-d form, so this matrix's generic source recipes do not apply.
_OWN_FILES = {"onnxruntime", "warp"}
FRAMEWORKS = tuple(
    name for name, a in ADAPTERS.items() if "cpu" in a.producer_devices and name not in _CHILD_ONLY | _OWN_FILES
)


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16" or name.startswith("float8_"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def reference(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A NumPy array of ``dtype`` with distinct, finite values (checked bit for bit later)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        return (rng.integers(0, 2, n) == 1).reshape(shape)
    if dtype == "complex64":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64).reshape(shape)
    if dtype in ("uint16", "int64"):
        return rng.integers(0, 30000, n).astype(dtype).reshape(shape)
    # Small integers and halves are exact in every float format used here (fp8 included).
    return (rng.integers(-8, 8, n) / 2).astype(np.float32).astype(np_dtype(dtype)).reshape(shape)


def _is_ml(a: np.ndarray) -> bool:
    return a.dtype.type.__module__ == "ml_dtypes"


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bytes of each element (so NaN payloads and -0.0 compare exactly)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape((*a.shape, a.dtype.itemsize)) if a.dtype != bool else a


def layout_of(ref_full: np.ndarray, layout: str) -> np.ndarray:
    """Apply a layout to a NumPy array (the framework sources repeat the same indexing)."""
    if layout == "transposed":
        return ref_full.T
    if layout == "sliced":
        return ref_full[1:, 2:]
    return ref_full


def base_shape(layout: str) -> tuple[int, ...]:
    return {"contiguous": (3, 4), "transposed": (4, 3), "sliced": (4, 6), "0-d": (), "empty": (0, 3)}[layout]


def torch_from(full: np.ndarray):
    """A dense CPU torch tensor with ``full``'s dtype and bits (bf16/fp8 through their raw bits)."""
    import torch

    if full.dtype == bool or not _is_ml(full):
        return torch.from_numpy(full.copy())
    return torch.from_numpy(full.view(f"u{full.dtype.itemsize}").copy()).view(getattr(torch, full.dtype.name))


def apply_layout(arr, layout: str):
    """The same indexing as ``layout_of``, on any framework's array (torch, CuPy): a view, no copy."""
    if layout == "transposed":
        return arr.T
    if layout == "sliced":
        return arr[1:, 2:]
    return arr


def make_source(framework: str, dtype: str, layout: str):
    """(source array in ``framework``, NumPy array with the same logical values)."""
    full = reference(dtype, base_shape(layout))
    expected = layout_of(full, layout)
    adapter = ADAPTERS[framework]
    made = adapter.prober.make_array(full, "cpu")
    try:
        return apply_layout(made, layout), expected
    except (AttributeError, TypeError):  # no .T or slicing views: a fresh dense array with the same values
        return adapter.prober.make_array(np.ascontiguousarray(expected), "cpu"), expected


def to_host(framework: str, arr) -> np.ndarray:
    """A NumPy copy of ``arr`` with its logical dtype, read through the framework's own API."""
    return ADAPTERS[framework].prober.to_host(arr)


def data_ptr(framework: str, arr) -> int:
    return ADAPTERS[framework].data_ptr(arr)


def dtype_name(framework: str, arr) -> str:
    return ADAPTERS[framework].prober.dtype_str(arr)


# X64: what JAX holds only in its x64 mode (off here: tests that need it run in a child)
X64 = frozenset({"float64", "complex128", "uint64", "int64"})


def cpu_array(framework: str, ref: np.ndarray):
    """``ref``'s dtype and bits as a dense CPU array of ``framework`` (skipped where JAX cannot hold it)."""
    if framework == "jax" and ref.dtype.name in X64:
        import pytest

        pytest.skip("JAX without x64 holds no 64-bit types")
    return ADAPTERS[framework].prober.make_array(ref, "cpu")


def torch_bits(t) -> np.ndarray:
    """A torch tensor's raw bytes per element, shaped like ``bits()`` of a NumPy array: (*shape, itemsize)."""
    import torch

    if t.dtype == torch.bool:
        return t.numpy()
    width = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32, 8: torch.uint64}[t.element_size()]
    raw = t.contiguous().view(width)
    return np.ascontiguousarray(raw.numpy()).view(np.uint8).reshape(*t.shape, t.element_size())


def jax_cpu(values, dtype=None):
    """``jnp.asarray(values, dtype)`` placed on the first CPU device, whatever JAX's default device is (on
    a GPU machine, the GPU). Committed there: what JAX computes from it stays on the CPU too, as the
    tests' CPU expectations assume (``tests/_foreign.py`` checks that they do)."""
    import jax

    return jax.device_put(jax.numpy.asarray(values, dtype=dtype), jax.devices("cpu")[0])


def set_in_place(x: Any, **attributes: Any) -> Any:
    """``x.shape = ...`` / ``x.dtype = ...`` on a NumPy array, as user code does it: NumPy 2.5 deprecates
    both (a DeprecationWarning, an error under the suite's filterwarnings), and they still work."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name, value in attributes.items():
            setattr(x, name, value)
    return x
