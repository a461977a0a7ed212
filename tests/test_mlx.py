"""MLX both ways with torch, NumPy and JAX: values bit for bit, dtype, and what is shared.

MLX copies every CPU array it imports (the ``copies_imports`` row), so conversions into MLX are
checked to be copies with the true dtype (float64 included, which MLX's own from_dlpack narrows),
and ``copy=False`` to be refused; conversions out of MLX share its buffer where the consumer can.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from tests._arrays import bits, cpu_array, data_ptr, reference, to_host
from tests.conftest import need

MLX = ADAPTERS["mlx"]
PRODUCERS = ("torch", "numpy", "jax")
DTYPES = ("float32", "float16", "bfloat16", "bool", "complex64", "uint16", "int8", "uint64")


@pytest.fixture(autouse=True)
def mx() -> Any:
    need("ml_dtypes")
    return need("mlx.core")


# --- into MLX: always a copy, always the true dtype ------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("producer", PRODUCERS)
def test_into_mlx_is_a_copy_with_the_true_dtype(producer: str, dtype: str) -> None:
    need(producer)
    ref = reference(dtype, (3, 4))
    src = cpu_array(producer, ref)
    out = dlbridge.to_mlx(src)
    assert MLX.prober.dtype_str(out) == dtype
    assert tuple(out.shape) == ref.shape
    np.testing.assert_array_equal(bits(to_host("mlx", out)), bits(ref))
    assert data_ptr("mlx", out) != data_ptr(producer, src), "MLX copies every CPU import"


@pytest.mark.parametrize("producer", ("torch", "numpy"))
def test_float64_arrives_as_float64_not_narrowed(producer: str, mx: Any) -> None:
    need(producer)
    ref = np.array([[1 + 2.0**-40, -3.5e300], [np.pi, 2.0**-1074]])  # none of them fits float32
    src = cpu_array(producer, ref)
    native = mx.from_dlpack(src)  # what MLX does by itself: float32, other values
    assert native.dtype == mx.float32
    out = dlbridge.convert(src, "mlx")
    assert out.dtype == mx.float64
    np.testing.assert_array_equal(bits(to_host("mlx", out)), bits(ref))
    with mx.stream(mx.cpu):
        assert float((out * 1.0)[0, 0].item()) == 1 + 2.0**-40  # MLX computes with it as float64


def test_copy_false_is_refused_before_mlx_copies() -> None:
    torch = need("torch")
    t = torch.arange(6, dtype=torch.float32, device="cpu")
    with pytest.raises(dlbridge.LayoutError, match=r"mlx \S+ copies every cpu array it imports.*Pass copy=None"):
        dlbridge.to_mlx(t, copy=False)
    with pytest.raises(dlbridge.LayoutError, match="copy=False forbids"):
        dlbridge.to_mlx(t.double(), copy=False)  # the float64 path too


def test_copy_true_gives_one_new_buffer(mx: Any) -> None:
    torch = need("torch")
    t = torch.arange(6, dtype=torch.float32, device="cpu")
    out = dlbridge.to_mlx(t, copy=True)
    assert data_ptr("mlx", out) != t.data_ptr()
    t[0] = 42.0
    assert out[0].item() == 0.0  # a copy: later writes to the source do not show


def test_read_only_source_is_converted_as_a_copy() -> None:
    src = np.arange(6, dtype=np.float32)
    src.flags.writeable = False
    out = dlbridge.to_mlx(src)  # no ReadOnlyError: MLX's import is a copy, no write reaches src
    np.testing.assert_array_equal(to_host("mlx", out), src)
    assert data_ptr("mlx", out) != src.ctypes.data


def test_transposed_and_sliced_sources_arrive_right() -> None:
    torch = need("torch")
    t = torch.arange(12, dtype=torch.float32, device="cpu").reshape(3, 4)
    np.testing.assert_array_equal(to_host("mlx", dlbridge.to_mlx(t.T)), t.T.numpy())
    np.testing.assert_array_equal(to_host("mlx", dlbridge.to_mlx(t[1:, 2:])), t[1:, 2:].numpy())
    a = np.arange(6, dtype=np.float32)[::-1]  # MLX's own from_dlpack refuses negative strides
    np.testing.assert_array_equal(to_host("mlx", dlbridge.to_mlx(a)), a)


def test_dtypes_mlx_cannot_hold_are_refused_by_name() -> None:
    torch = need("torch")
    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r"mlx cannot hold complex128.*astype\(complex64\)"):
        dlbridge.to_mlx(torch.ones(2, dtype=torch.complex128, device="cpu"))  # MLX would narrow it to complex64
    fp8 = torch.tensor([0.5, -2.0], device="cpu").to(torch.float8_e4m3fn)
    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r'float8_e4m3fn.*fallback="view" for a uint8 copy'):
        dlbridge.to_mlx(fp8)
    view = dlbridge.to_mlx(fp8, fallback="view")
    assert MLX.prober.dtype_str(view) == "uint8"
    np.testing.assert_array_equal(to_host("mlx", view), fp8.view(torch.uint8).numpy())
    up = dlbridge.to_mlx(fp8, fallback="upcast")
    np.testing.assert_array_equal(to_host("mlx", up), np.array([0.5, -2.0], np.float32))


def test_module_and_alias_name_the_target(mx: Any) -> None:
    src = np.arange(3, dtype=np.int32)
    assert isinstance(dlbridge.convert(src, mx), mx.array)
    assert isinstance(dlbridge.convert(src, "mlx.core"), mx.array)


# --- out of MLX: its buffer, shared -------------------------------------------------------------


@pytest.mark.parametrize("dtype", (*DTYPES, "float64"))
@pytest.mark.parametrize("consumer", ("torch", "numpy"))
def test_out_of_mlx_shares_the_buffer(consumer: str, dtype: str) -> None:
    need(consumer)
    ref = reference(dtype, (3, 4)) if dtype != "float64" else np.arange(12.0).reshape(3, 4) / 3
    src = MLX.prober.make_array(ref, "cpu")
    out = dlbridge.convert(src, consumer)
    assert ADAPTERS[consumer].prober.dtype_str(out) == dtype
    np.testing.assert_array_equal(bits(to_host(consumer, out)), bits(ref))
    assert data_ptr(consumer, out) == data_ptr("mlx", src)


def test_out_of_mlx_into_jax_shares_aligned_buffers_only() -> None:
    need("jax")
    ref = reference("float32", (3, 4))
    src = MLX.prober.make_array(ref, "cpu")
    out = dlbridge.to_jax(src)
    np.testing.assert_array_equal(np.asarray(out), ref)
    shared = out.unsafe_buffer_pointer() == data_ptr("mlx", src)
    assert shared == (data_ptr("mlx", src) % 64 == 0)  # MLX aligns to 8 or 16 bytes; XLA copies those


def test_writes_through_torch_show_in_mlx(mx: Any) -> None:
    need("torch")
    src = MLX.prober.make_array(np.zeros(4, np.float32), "cpu")
    t = dlbridge.to_torch(src)
    t[1] = 7.0
    assert src[1].item() == 7.0


def test_lazy_arrays_are_exported_with_their_values(mx: Any) -> None:
    torch = need("torch")
    x = MLX.prober.make_array(np.arange(5, dtype=np.float32), "cpu")
    y = x * 2 + 1  # not evaluated yet: MLX's __dlpack__ evaluates it
    out = dlbridge.to_torch(y)
    assert torch.equal(out, torch.arange(5, dtype=torch.float32, device="cpu") * 2 + 1)
    assert out.data_ptr() == data_ptr("mlx", y)


def test_transposed_mlx_array_is_shared_strided() -> None:
    torch = need("torch")
    src = MLX.prober.transpose(MLX.prober.make_array(np.arange(12, dtype=np.float32).reshape(3, 4), "cpu"))
    out = dlbridge.to_torch(src)
    assert out.stride() == (1, 4)
    assert torch.equal(out, torch.arange(12, dtype=torch.float32, device="cpu").reshape(3, 4).T)
    assert out.data_ptr() == data_ptr("mlx", src)


def test_mlx_to_mlx_keeps_float64(mx: Any) -> None:
    with mx.stream(mx.cpu):
        src = mx.array(np.array([1 + 2.0**-40]), dtype=mx.float64)
    out = dlbridge.to_mlx(src)
    assert out.dtype == mx.float64 and out.item() == 1 + 2.0**-40


def test_without_mlx_the_error_says_what_to_install() -> None:
    from tests.conftest import run_child

    proc = run_child(
        """
        import sys
        import numpy as np, dlbridge
        try:
            dlbridge.to_mlx(np.ones(2))
        except dlbridge.MissingFrameworkError as err:
            print("MISSING:", err)
        print("LOADED:", "mlx.core" in sys.modules and sys.modules["mlx.core"] is not None)
        """,
        block=("mlx",),  # as if it were not installed (mlx.core with it)
    )
    assert 'install it (pip install "mlx[cpu]")' in proc.stdout, proc.stdout + proc.stderr
    assert "LOADED: False" in proc.stdout
