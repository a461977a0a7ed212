"""Shared by the robustness tests: the conversion entry points by name, and data pointers."""

from __future__ import annotations

import dlbridge
from tests.conftest import need
from tests.ctypes_producer import CtypesArray

np = need("numpy")
torch = need("torch")

TO = {"torch": dlbridge.to_torch, "jax": dlbridge.to_jax, "numpy": dlbridge.to_numpy}


def data_ptr(x) -> int:
    """The data pointer of a torch tensor, CtypesArray, NumPy or JAX array."""
    if isinstance(x, torch.Tensor):
        return x.data_ptr()
    if isinstance(x, CtypesArray):
        return x.data_ptr
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0]
    return x.unsafe_buffer_pointer()
