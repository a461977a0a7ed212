"""ONNX Runtime (``onnxruntime.OrtValue``) both ways with torch, NumPy and JAX: values bit for bit,
dtype and shared memory for every zero-copy claim; the layouts and dtypes it refuses."""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters._numpy import aligned_copy
from tests._arrays import bits, jax_cpu, reference, torch_bits
from tests.conftest import caps_of, need, need_supported

ort = need_supported("onnxruntime")
torch = need("torch")
need("ml_dtypes")
CAPS = caps_of("onnxruntime")  # dtypes before 1.32 (bool, float8): tests/test_onnxruntime_versions.py


def _needs(dtype: str, *, into: bool = False, out_of: bool = False) -> None:
    """Skip, with the reason, a dtype this ONNX Runtime's rows say it does not import or export."""
    if into and dtype not in CAPS.imports:
        pytest.skip(f"onnxruntime {ort.__version__} does not import {dtype} (its capability rows)")
    if out_of and dtype in CAPS.cannot_export:
        pytest.skip(f"onnxruntime {ort.__version__} cannot export {dtype} (its capability rows)")


# dtype -> ONNX TensorProto number, for OrtValues made with ONNX Runtime's own API
ONNX = {"float32": 1, "uint8": 2, "uint16": 4, "int64": 7, "bool": 9, "float16": 10, "bfloat16": 16,
        "float8_e4m3fn": 17, "float8_e5m2": 19}  # fmt: skip
ORT_NAME = {"float32": "float", "bfloat16": "bfloat16", "float8_e4m3fn": "float8e4m3fn", "float8_e5m2": "float8e5m2",
            "bool": "bool", "uint16": "uint16", "int64": "int64", "float16": "float16"}  # fmt: skip
SHARED = tuple(ORT_NAME)


def ort_value(ref: np.ndarray):
    """An OrtValue over an aligned copy of ``ref`` (ml_dtypes kinds by their ONNX type number)."""
    host = aligned_copy(ref)
    if ref.dtype.type.__module__ == "ml_dtypes":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            host.view(f"u{ref.dtype.itemsize}"), ONNX[ref.dtype.name]
        )
    return ort.OrtValue.ortvalue_from_numpy(host)


def torch_of(ref: np.ndarray):
    """A torch tensor with ``ref``'s bits and logical dtype (bf16/fp8 through a same-width view)."""
    if ref.dtype.type.__module__ != "ml_dtypes":
        return torch.from_numpy(ref.copy())
    raw = torch.from_numpy(ref.view(f"u{ref.dtype.itemsize}").copy())
    return raw.view(getattr(torch, ref.dtype.name))


@pytest.mark.parametrize("dtype", SHARED)
def test_torch_to_onnxruntime_shares_memory_with_the_true_dtype(dtype: str) -> None:
    _needs(dtype, into=True)
    ref = reference(dtype, (3, 4))
    src = torch_of(ref)
    out = dlbridge.to_onnxruntime(src)
    assert isinstance(out, ort.OrtValue)
    assert out.data_type() == f"tensor({ORT_NAME[dtype]})"
    assert out.shape() == [3, 4]
    assert out.data_ptr() == src.data_ptr()
    np.testing.assert_array_equal(torch_bits(torch.from_dlpack(out)), bits(ref))  # read back by torch itself


@pytest.mark.parametrize("dtype", SHARED)
def test_onnxruntime_to_torch_shares_memory_with_the_true_dtype(dtype: str) -> None:
    _needs(dtype, out_of=True)
    ref = reference(dtype, (3, 4))
    src = ort_value(ref)
    out = dlbridge.to_torch(src)
    assert out.dtype == getattr(torch, dtype)
    assert out.data_ptr() == src.data_ptr()
    np.testing.assert_array_equal(torch_bits(out), bits(ref))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bool", "uint16", "int64", "bfloat16", "float8_e4m3fn"])
def test_numpy_both_ways_share_memory(dtype: str) -> None:
    _needs(dtype, into=True, out_of=True)
    ref = aligned_copy(reference(dtype, (2, 5)))
    out = dlbridge.to_onnxruntime(ref)  # ml_dtypes arrays: their bytes relabelled, zero-copy
    assert out.data_type() == f"tensor({ORT_NAME[dtype]})"
    assert out.data_ptr() == ref.ctypes.data
    back = dlbridge.to_numpy(out)
    assert back.dtype == ref.dtype
    assert back.ctypes.data == ref.ctypes.data
    np.testing.assert_array_equal(bits(back), bits(ref))


def test_jax_both_ways() -> None:
    need("jax")
    ref = reference("float32", (4, 6))
    src = jax_cpu(ref)
    out = dlbridge.to_onnxruntime(src, readonly="drop")  # JAX arrays are read-only; ONNX Runtime arrays cannot be
    assert out.data_type() == "tensor(float)"
    assert out.data_ptr() == src.unsafe_buffer_pointer()
    np.testing.assert_array_equal(out.numpy(), ref)
    value = ort_value(ref)  # 64-byte aligned: XLA shares it
    back = dlbridge.to_jax(value)
    assert back.dtype == np.float32
    assert back.unsafe_buffer_pointer() == value.data_ptr()
    np.testing.assert_array_equal(np.asarray(back), ref)


def test_writes_through_the_source_show_in_the_result() -> None:
    src = torch.zeros(2, 3, device="cpu")
    out = dlbridge.to_onnxruntime(src)
    src[1, 2] = 7.5
    assert out.numpy()[1, 2] == 7.5  # OrtValue.numpy() is a view of its own buffer


def test_strided_sources_are_copied_densely_with_the_right_values() -> None:
    base = torch.arange(12.0, device="cpu").reshape(3, 4)
    for src in (base.t(), base[:, ::2], base.flip(0)):
        out = dlbridge.to_onnxruntime(src)
        np.testing.assert_array_equal(out.numpy(), src.numpy())
        assert out.data_ptr() != base.data_ptr()  # ORT takes only dense row-major memory: a copy
    with pytest.raises(dlbridge.LayoutError, match="dense copy"):
        dlbridge.to_onnxruntime(base.t(), copy=False)


def test_zero_dim_and_empty() -> None:
    scalar = torch.tensor(2.5, device="cpu")
    out = dlbridge.to_onnxruntime(scalar)
    assert out.shape() == [] and out.numpy() == 2.5 and out.data_ptr() == scalar.data_ptr()
    empty = dlbridge.to_onnxruntime(torch.zeros(0, 3, device="cpu"))
    assert empty.shape() == [0, 3]


def test_complex_is_refused_and_view_shares_its_bits() -> None:
    src = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64, device="cpu")
    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r'onnxruntime cannot hold complex64.*fallback="view"'):
        dlbridge.to_onnxruntime(src)
    out = dlbridge.to_onnxruntime(src, fallback="view")
    assert out.data_type() == "tensor(uint64)"
    assert out.data_ptr() == src.data_ptr()
    np.testing.assert_array_equal(out.numpy(), src.numpy().view(np.uint64))


def test_read_only_numpy_is_refused_unless_copied() -> None:
    src = np.arange(4.0)
    src.flags.writeable = False
    with pytest.raises(dlbridge.ReadOnlyError, match="copy=True"):
        dlbridge.to_onnxruntime(src)
    out = dlbridge.to_onnxruntime(src, copy=True)
    assert out.data_ptr() != src.ctypes.data
    np.testing.assert_array_equal(out.numpy(), src)


def test_copy_true_gives_new_memory_with_the_same_bits() -> None:
    ref = reference("bfloat16", (2, 3))
    src = ort_value(ref)
    out = dlbridge.to_onnxruntime(src, copy=True)
    assert out.data_type() == "tensor(bfloat16)"
    assert out.data_ptr() != src.data_ptr()
    np.testing.assert_array_equal(torch_bits(torch.from_dlpack(out)), bits(ref))


def test_convert_names_and_inspect() -> None:
    src = torch.ones(2, dtype=torch.bfloat16, device="cpu")
    assert dlbridge.convert(src, "ort").data_type() == "tensor(bfloat16)"
    assert dlbridge.convert(src, ort).data_type() == "tensor(bfloat16)"
    kind = "float8_e5m2" if "float8_e5m2" not in CAPS.cannot_export else "bfloat16"
    info = dlbridge.inspect(ort_value(reference(kind, (3,))))
    assert (info.dtype, info.shape, info.versioned) == (kind, (3,), False)  # legacy capsules only


def test_sparse_ortvalue_is_refused_naming_what_to_pass() -> None:
    values, indices = np.array([1.0, 2.0], dtype=np.float32), np.array([0, 2], dtype=np.int64)
    sparse = ort.SparseTensor.sparse_coo_from_numpy([3], values, indices, ort.OrtDevice.make("cpu", 0))
    src = ort.OrtValue.ort_value_from_sparse_tensor(sparse)
    with pytest.raises(dlbridge.ProducerError, match=r"not a dense tensor \(sparse_tensor\(float\)\).*values/indices"):
        dlbridge.to_torch(src)


def test_upcast_of_a_float8_kind_it_lacks_gives_float32_values() -> None:
    ml_dtypes = need("ml_dtypes")
    if not hasattr(ml_dtypes, "float8_e4m3"):
        pytest.skip("ml_dtypes < 0.5 has no float8_e4m3")
    src = aligned_copy(np.array([[0.5, -2.0, 3.0]], dtype=np.float32).astype(ml_dtypes.float8_e4m3))
    with pytest.raises(dlbridge.UnsupportedDtypeError, match="onnxruntime cannot hold float8_e4m3"):
        dlbridge.to_onnxruntime(src)
    out = dlbridge.to_onnxruntime(src, fallback="upcast")
    assert out.data_type() == "tensor(float)" and out.shape() == [1, 3]
    np.testing.assert_array_equal(out.numpy(), [[0.5, -2.0, 3.0]])
