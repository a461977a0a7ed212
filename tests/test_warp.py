"""NVIDIA Warp (``warp.array``) both ways with torch, NumPy and JAX: values bit for bit, dtype and
shared memory for every zero-copy claim; its NULL-strides exports, vector dtypes, the dimensions
and dtypes it refuses, and the ``byte_offset`` its importer ignores."""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters._numpy import aligned_copy
from tests._arrays import bits, jax_cpu, reference, torch_bits
from tests.conftest import need, run_child
from tests.ctypes_producer import CtypesArray

wp = need("warp")
torch = need("torch")
need("ml_dtypes")
wp.config.log_level = wp.LOG_WARNING  # its greeting is not ours to print
wp.init()

SHARED = ("float32", "float16", "bfloat16", "bool", "uint16", "int64", "int8", "float64")


def warp_of(ref: np.ndarray):
    """A CPU warp array with ``ref``'s bits, made with Warp's own API (bf16 as a view of uint16)."""
    if ref.dtype.name == "bfloat16":
        return wp.array(aligned_copy(ref.view(np.uint16)), dtype=wp.uint16, device="cpu").view(wp.bfloat16)
    return wp.array(aligned_copy(ref), dtype=getattr(wp, ref.dtype.name), device="cpu")


@pytest.mark.parametrize("dtype", SHARED)
def test_torch_to_warp_shares_memory_with_the_true_dtype(dtype: str) -> None:
    ref = reference(dtype, (3, 4))
    src = (
        torch.from_numpy(ref.view(np.uint16).copy()).view(torch.bfloat16)
        if dtype == "bfloat16"
        else torch.from_numpy(ref.copy())
    )
    out = dlbridge.to_warp(src)
    assert isinstance(out, wp.array)
    assert out.dtype is getattr(wp, dtype)
    assert out.shape == (3, 4)
    assert out.ptr == src.data_ptr()
    np.testing.assert_array_equal(torch_bits(torch.from_dlpack(out)), bits(ref))  # read back by torch itself


@pytest.mark.parametrize("dtype", SHARED)
def test_warp_to_torch_shares_memory_with_the_true_dtype(dtype: str) -> None:
    ref = reference(dtype, (3, 4))
    src = warp_of(ref)
    assert dlbridge.inspect(src).strides is None  # Warp leaves strides NULL for a dense array: C order
    out = dlbridge.to_torch(src)
    assert out.dtype == getattr(torch, dtype)
    assert out.stride() == (4, 1)
    assert out.data_ptr() == src.ptr
    np.testing.assert_array_equal(torch_bits(out), bits(ref))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bool", "uint16", "int64"])
def test_numpy_both_ways_share_memory(dtype: str) -> None:
    ref = aligned_copy(reference(dtype, (2, 5)))
    out = dlbridge.to_warp(ref)  # Warp's own wp.array(ref) would copy; from_dlpack shares
    assert out.dtype is getattr(wp, dtype)
    assert out.ptr == ref.ctypes.data
    back = dlbridge.to_numpy(out)  # NULL strides read as C order
    assert back.dtype == ref.dtype
    assert back.strides == ref.strides
    assert back.ctypes.data == ref.ctypes.data
    np.testing.assert_array_equal(bits(back), bits(ref))


def test_jax_both_ways() -> None:
    need("jax")
    ref = reference("float32", (4, 6))
    src = jax_cpu(ref)
    out = dlbridge.to_warp(src, readonly="drop")  # JAX arrays are read-only; Warp arrays cannot be
    assert out.ptr == src.unsafe_buffer_pointer()
    np.testing.assert_array_equal(out.numpy(), ref)
    value = warp_of(ref)  # 64-byte aligned: XLA shares it
    back = dlbridge.to_jax(value)
    assert back.dtype == np.float32
    assert back.unsafe_buffer_pointer() == value.ptr
    np.testing.assert_array_equal(np.asarray(back), ref)


def test_vector_dtypes_arrive_with_a_trailing_dimension() -> None:
    flat = np.arange(12, dtype=np.float32).reshape(4, 3)
    src = wp.array(aligned_copy(flat), dtype=wp.vec3, device="cpu")
    out = dlbridge.to_torch(src)
    assert out.shape == (4, 3) and out.dtype == torch.float32
    assert out.data_ptr() == src.ptr
    np.testing.assert_array_equal(out.numpy(), flat)
    mats = dlbridge.to_numpy(wp.array(aligned_copy(np.arange(8, dtype=np.float32).reshape(2, 2, 2)), dtype=wp.mat22))
    assert mats.shape == (2, 2, 2)
    np.testing.assert_array_equal(mats, np.arange(8, dtype=np.float32).reshape(2, 2, 2))


def test_strided_layouts_are_shared_both_ways() -> None:
    base = torch.arange(12.0, device="cpu").reshape(3, 4)
    for src in (base.t(), base[:, ::2], base.flip(0)):  # transposed, sliced, negative strides
        out = dlbridge.to_warp(src)
        assert out.ptr == src.data_ptr()
        np.testing.assert_array_equal(out.numpy(), src.numpy())
    w = warp_of(np.arange(6, dtype=np.float32).reshape(2, 3)).transpose()
    back = dlbridge.to_torch(w)
    assert back.data_ptr() == w.ptr and back.stride() == (1, 3)
    np.testing.assert_array_equal(back.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3).T)


def test_transposed_warp_into_onnxruntime_is_copied_densely() -> None:
    need("onnxruntime")
    w = warp_of(np.arange(6, dtype=np.float32).reshape(2, 3)).transpose()
    dense = dlbridge.to_onnxruntime(w)  # ONNX Runtime takes only row-major: a dense copy
    assert dense.data_ptr() != w.ptr
    np.testing.assert_array_equal(dense.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3).T)


def test_byte_offset_is_honoured() -> None:
    # warp.from_dlpack reads dlt.data and drops byte_offset; dlbridge points the array at data + offset.
    raw = np.arange(8, dtype=np.float32)
    src = CtypesArray.from_bytes(raw.tobytes(), "float32", (6,), byte_offset=8)
    out = dlbridge.to_warp(src)
    assert out.ptr == src.data_ptr
    np.testing.assert_array_equal(out.numpy(), raw[2:])


def test_dimensions_warp_cannot_hold_are_refused() -> None:
    # A LayoutError decided from the capability row ("ndim"), before Warp sees the capsule, and the
    # one explain names; warm (the route learnt float32) as cold.
    for _ in range(2):
        with pytest.raises(dlbridge.LayoutError, match=r"1 to 4 dimensions, and .* has 0; pass x\.reshape\(1\)"):
            dlbridge.to_warp(torch.tensor(3.0, device="cpu"))
        with pytest.raises(dlbridge.LayoutError, match="has 5; pass a reshape"):
            dlbridge.to_warp(torch.zeros(1, 1, 1, 1, 2, device="cpu"))
        assert dlbridge.explain(torch.tensor(3.0, device="cpu"), "warp").error is dlbridge.LayoutError
        assert dlbridge.explain(np.zeros((1,) * 5, np.float32), "warp").error is dlbridge.LayoutError
        dlbridge.to_warp(torch.zeros(2, device="cpu"))


def test_float8_and_complex_are_refused_and_fallbacks_work() -> None:
    ref = reference("float8_e4m3fn", (2, 3))
    src = torch.from_numpy(ref.view(np.uint8).copy()).view(torch.float8_e4m3fn)
    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r'warp cannot hold float8_e4m3fn.*fallback="view"'):
        dlbridge.to_warp(src)
    view = dlbridge.to_warp(src, fallback="view")
    assert view.dtype is wp.uint8 and view.ptr == src.data_ptr()
    np.testing.assert_array_equal(view.numpy(), ref.view(np.uint8))
    up = dlbridge.to_warp(src, fallback="upcast")
    assert up.dtype is wp.float32
    np.testing.assert_array_equal(up.numpy(), ref.astype(np.float32))
    with pytest.raises(dlbridge.UnsupportedDtypeError, match="warp cannot hold complex64"):
        dlbridge.to_warp(torch.zeros(2, dtype=torch.complex64, device="cpu"))


def test_read_only_numpy_is_refused_unless_copied() -> None:
    src = np.arange(4.0)
    src.flags.writeable = False
    with pytest.raises(dlbridge.ReadOnlyError, match="copy=True"):
        dlbridge.to_warp(src)
    out = dlbridge.to_warp(src, copy=True)
    assert out.ptr != src.ctypes.data
    np.testing.assert_array_equal(out.numpy(), src)


def test_writes_are_visible_through_zero_copy() -> None:
    src = torch.zeros(2, 3, device="cpu")
    out = dlbridge.to_warp(src)
    src[1, 2] = 7.5
    assert out.numpy()[1, 2] == 7.5


def test_dlbridge_initialises_warp_quietly() -> None:
    proc = run_child(
        """
        import torch, dlbridge
        out = dlbridge.to_warp(torch.ones(3, device="cpu"))
        print(out.numpy().tolist())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1.0, 1.0, 1.0]"  # no "Warp ... initialized" greeting
