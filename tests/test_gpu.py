"""The conversion matrix on CUDA: torch, CuPy and JAX, plus devices and the stream handshake.

Skipped with the reason where CUDA is absent. Crash-prone handoffs (a consumer's own
from_dlpack on a dtype it may reject) are never made here; dlbridge's own paths are.
"""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from tests._arrays import DTYPES, LAYOUTS, bits, dtype_name, make_source, to_host
from tests.conftest import need

pytestmark = pytest.mark.gpu

GPU_FRAMEWORKS = ("torch", "cupy", "jax")
CONVERT = {"torch": dlbridge.to_torch, "cupy": dlbridge.to_cupy, "jax": dlbridge.to_jax, "numpy": dlbridge.to_numpy}


def _gpu_source(framework: str, dtype: str, layout: str):
    """Make the CPU source with known bits, then move it to CUDA in ``framework``."""
    torch_src, expected = make_source("torch", dtype, layout)
    if framework == "torch":
        return torch_src.cuda(), expected
    if framework == "cupy":
        cp = need("cupy")
        if dtype.startswith("float8_"):
            pytest.skip("CuPy cannot make float8 arrays")
        if dtype == "bfloat16":
            return cp.asarray(np.ascontiguousarray(expected)), expected
        arr = cp.asarray(expected)
        return arr, expected
    if framework == "jax":
        import jax

        gpu = jax.devices("gpu")[0]
        return jax.device_put(np.ascontiguousarray(expected), gpu), expected
    raise ValueError(framework)


def _ptr(framework: str, arr) -> int:
    return {"torch": lambda a: a.data_ptr(), "cupy": lambda a: a.data.ptr, "jax": lambda a: a.unsafe_buffer_pointer()}[
        framework
    ](arr)


def _holds(consumer: str, dtype: str) -> bool:
    from dlbridge._adapters import ADAPTERS

    return dtype in ADAPTERS[consumer].capabilities().holds


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("consumer", GPU_FRAMEWORKS)
@pytest.mark.parametrize("producer", GPU_FRAMEWORKS)
def test_cuda_cell(cuda, producer: str, consumer: str, dtype: str, layout: str) -> None:
    need(producer)
    need(consumer)
    if dtype == "int64" and "jax" in (producer, consumer):
        import jax

        if not jax.config.jax_enable_x64:
            pytest.skip("JAX without x64 has no int64")
    src, expected = _gpu_source(producer, dtype, layout)
    if not _holds(consumer, dtype):
        with pytest.raises(dlbridge.UnsupportedDtypeError):
            CONVERT[consumer](src)
        view = CONVERT[consumer](src, fallback="view")
        assert _ptr(consumer, view) == _ptr(producer, src) or expected.size == 0
        back = dlbridge.convert(view, producer)
        np.testing.assert_array_equal(bits(to_host(producer, back)), bits(expected))
        return
    out = CONVERT[consumer](src)
    assert dtype_name(consumer, out) == dtype
    np.testing.assert_array_equal(bits(to_host(consumer, out)), bits(expected))
    info = dlbridge.inspect(src)
    if expected.size and (consumer != "jax" or info.is_compact()):
        assert _ptr(consumer, out) == _ptr(producer, src)


def test_cuda_to_numpy_needs_a_copy(cuda) -> None:
    torch = need("torch")
    t = torch.arange(4.0, device="cuda").to(torch.bfloat16)
    with pytest.raises(dlbridge.DeviceMismatchError, match='pass device="cpu" or copy=True'):
        dlbridge.to_numpy(t)
    for kwargs in ({"copy": True}, {"device": "cpu"}):
        n = dlbridge.to_numpy(t, **kwargs)
        assert n.dtype.name == "bfloat16" and n.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_cpu_to_cupy_with_device(cuda) -> None:
    torch = need("torch")
    need("cupy")
    for src in (torch.arange(4.0).to(torch.bfloat16), np.arange(4.0, dtype=np.float32)):
        out = dlbridge.to_cupy(src, device="cuda")
        assert out.get().astype(np.float32).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_fp8_to_cupy_view_and_back(cuda) -> None:
    torch = need("torch")
    need("cupy")
    t = torch.arange(8.0, device="cuda").to(torch.float8_e4m3fn)
    with pytest.raises(dlbridge.UnsupportedDtypeError, match='fallback="view"'):
        dlbridge.to_cupy(t)
    v = dlbridge.to_cupy(t, fallback="view")
    assert v.dtype == np.uint8 and v.data.ptr == t.data_ptr()
    back = dlbridge.to_torch(v)
    assert back.dtype == torch.float8_e4m3fn and back.data_ptr() == t.data_ptr()
    up = dlbridge.to_cupy(t, fallback="upcast")
    assert up.get().tolist() == [float(i) for i in range(8)]


def test_stream_handshake_makes_pending_writes_visible(cuda) -> None:
    """The producer writes on a side stream; the consumer reads on its own stream right away."""
    torch = need("torch")
    cp = need("cupy")
    n = 1 << 24
    side = torch.cuda.Stream()
    consumer_stream = cp.cuda.Stream(non_blocking=True)
    bad = 0
    for trial in range(50):
        with torch.cuda.stream(side):
            t = torch.full((n,), float(trial), device="cuda")
            t.mul_(2).add_(1)  # enough work to still be running at the handoff
            # Converted while ``side`` is torch's current stream: torch's __dlpack__ makes the
            # consumer's stream wait on its current stream, which is the one with the pending work.
            with consumer_stream:
                c = dlbridge.to_cupy(t)
                total = float(c.sum())
        bad += total != (2 * trial + 1) * n
        torch.cuda.synchronize()
    assert bad == 0
