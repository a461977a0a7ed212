"""Shared by the @dlbridge.guard tests: array makers, framework and value probes, skips."""

from __future__ import annotations

import warnings

import pytest

import dlbridge
from tests._arrays import jax_cpu
from tests.conftest import need

torch = need("torch")
np = need("numpy")

FRAMEWORKS = ("torch", "jax", "numpy")


def ptr(x: object) -> int:
    return dlbridge.inspect(x).data_ptr


def framework(x: object) -> str | None:
    return dlbridge._adapters.adapter_for(x).name if dlbridge._adapters.adapter_for(x) else None


def make(name: str, values: list[float], dtype: str = "float32") -> object:
    ref = np.asarray(values, dtype=np.float32)
    if name == "torch":
        return torch.tensor(ref, device="cpu").to(getattr(torch, dtype))
    if name == "jax":
        jnp = need("jax.numpy")
        return jax_cpu(ref, dtype=getattr(jnp, dtype))
    return ref.astype(dlbridge._adapters._numpy.numpy_dtype(dtype))


def values(x: object) -> list[float]:
    return np.asarray(dlbridge.to_numpy(x, fallback="upcast")).astype(np.float32).tolist()


def fp4(n: int = 4) -> object:
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    return torch.tensor([0x12, 0x34, 0x56, 0x78][:n], dtype=torch.uint8, device="cpu").view(torch.float4_e2m1fn_x2)


def chalf(n: int = 4) -> object:
    """A torch complex32 tensor: a dtype NumPy cannot hold in any form (fp4 it now holds, repacked)."""
    with warnings.catch_warnings():  # "ComplexHalf support is experimental"
        warnings.simplefilter("ignore")
        return (torch.arange(2 * n, dtype=torch.float16, device="cpu") + 1).view(torch.complex32)  # n values


def require_no_x64() -> None:
    """Skip the calling test where jax_enable_x64 is on (64-bit results could then go back)."""
    jax = need("jax")
    if jax.config.jax_enable_x64:
        pytest.skip("jax_enable_x64 is on in this process")
