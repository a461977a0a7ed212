"""pyarrow ``Array`` and ``Tensor`` as producers: read-only memory stays read-only (shared where the
consumer can hold read-only arrays, else refused without ``copy=True``, never silently writable);
nulls, bit-packed booleans, other types and chunked arrays get errors naming the fix."""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from tests.conftest import need, need_supported

pa = need_supported("pyarrow")  # pyarrow < 26, below dlbridge's floor: tests/test_pyarrow_versions.py
torch = need("torch")


def values_address(arr) -> int:
    """Where an Arrow array's first value lives (its data buffer plus the slice offset)."""
    return int(arr.buffers()[1].address) + arr.offset * arr.type.bit_width // 8


@pytest.mark.parametrize("kind", [pa.float32(), pa.float16(), pa.int64(), pa.uint16(), pa.int8()])
def test_array_to_numpy_is_shared_and_read_only(kind) -> None:
    arr = pa.array([1, 2, 3, 4], type=kind)
    info = dlbridge.inspect(arr)
    assert info.readonly and info.versioned
    out = dlbridge.to_numpy(arr)
    assert out.dtype == np.dtype(kind.to_pandas_dtype())
    assert out.ctypes.data == values_address(arr)
    assert not out.flags.writeable
    np.testing.assert_array_equal(out, [1, 2, 3, 4])


def test_sliced_array_is_shared_at_its_offset() -> None:
    arr = pa.array(np.arange(10, dtype=np.float64)).slice(3, 4)
    out = dlbridge.to_numpy(arr)
    assert out.ctypes.data == values_address(arr)
    np.testing.assert_array_equal(out, [3.0, 4.0, 5.0, 6.0])


def test_consumers_that_cannot_hold_read_only_arrays_refuse_without_copy() -> None:
    arr = pa.array([1.5, 2.5, 3.5], type=pa.float32())
    with pytest.raises(
        dlbridge.ReadOnlyError,
        match=r"read-only \(Apache Arrow arrays are immutable\) and torch arrays "
        r'cannot be.*copy=True.*readonly="drop"',
    ):
        dlbridge.to_torch(arr)
    copied = dlbridge.to_torch(arr, copy=True)
    assert copied.data_ptr() != values_address(arr)
    copied[0] = 9.0  # the copy is the caller's: the Arrow array is untouched
    np.testing.assert_array_equal(arr.to_numpy(), np.array([1.5, 2.5, 3.5], dtype=np.float32))


@pytest.mark.parametrize("target", ["onnxruntime", "warp", "jax"])
def test_legacy_only_consumers_never_get_the_memory_writable(target: str) -> None:
    # A legacy capsule cannot say READ_ONLY (pyarrow's own legacy export says writable): refused.
    need(target)
    arr = pa.array([1.0, 2.0, 3.0], type=pa.float32())
    with pytest.raises(dlbridge.ReadOnlyError, match="copy=True"):
        dlbridge.convert(arr, target)
    out = dlbridge.convert(arr, target, copy=True)
    back = dlbridge.to_numpy(out)
    assert back.ctypes.data != values_address(arr)
    np.testing.assert_array_equal(back, [1.0, 2.0, 3.0])


def test_mutable_tensor_is_read_only_unless_dropped() -> None:
    """Arrow arrays are immutable, a Tensor over writable memory (is_mutable) too: read-only in NumPy,
    refused by torch and ONNX Runtime (a legacy capsule) unless readonly="drop" shares it writable."""
    need("onnxruntime")
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pa.Tensor.from_numpy(host)
    assert tensor.is_mutable
    viewed = dlbridge.to_numpy(tensor)
    assert viewed.ctypes.data == host.ctypes.data and not viewed.flags.writeable
    for convert in (dlbridge.to_torch, dlbridge.to_onnxruntime):
        with pytest.raises(dlbridge.ReadOnlyError, match=r'Apache Arrow arrays are immutable.*readonly="drop"'):
            convert(tensor)
    out = dlbridge.to_torch(tensor, readonly="drop")
    assert out.data_ptr() == host.ctypes.data
    out[0, 0] = 7.0
    assert host[0, 0] == 7.0
    legacy = dlbridge.to_onnxruntime(tensor, readonly="drop")  # its legacy capsule, shared
    assert legacy.data_ptr() == host.ctypes.data


def test_immutable_tensor_is_refused_without_copy() -> None:
    need("onnxruntime")
    host = np.arange(4.0)
    host.flags.writeable = False
    tensor = pa.Tensor.from_numpy(host)
    with pytest.raises(dlbridge.ReadOnlyError):
        dlbridge.to_torch(tensor)
    with pytest.raises(dlbridge.ReadOnlyError):
        dlbridge.to_onnxruntime(tensor)
    np.testing.assert_array_equal(dlbridge.to_torch(tensor, copy=True).numpy(), host)


def test_column_major_tensor_into_row_major_consumer_is_copied_densely() -> None:
    need("onnxruntime")
    host = np.arange(6, dtype=np.float32).reshape(2, 3).T
    tensor = pa.Tensor.from_numpy(host)
    out = dlbridge.to_onnxruntime(tensor)
    np.testing.assert_array_equal(out.numpy(), host)
    shared = dlbridge.to_torch(tensor, readonly="drop")  # torch takes the strides: shared
    assert shared.data_ptr() == host.ctypes.data and shared.stride() == (1, 3)


def test_nulls_are_refused_naming_the_fix() -> None:
    with pytest.raises(dlbridge.ProducerError, match=r"1 null\(s\).*fill_null.*to_numpy\(zero_copy_only=False\)"):
        dlbridge.to_numpy(pa.array([1, None, 3], type=pa.int32()))


def test_bit_packed_bool_is_refused_naming_the_fix() -> None:
    with pytest.raises(dlbridge.ProducerError, match=r"packs booleans as bits.*to_numpy\(zero_copy_only=False\)"):
        dlbridge.to_torch(pa.array([True, False]))


@pytest.mark.parametrize(
    "arr", [pa.array(["a"]), pa.array([1, 2], type=pa.timestamp("s"))], ids=["string", "timestamp"]
)
def test_non_numeric_arrays_are_refused(arr) -> None:
    with pytest.raises(dlbridge.ProducerError, match="fixed-width numbers only"):
        dlbridge.to_numpy(arr)


def test_chunked_arrays_and_tables_name_what_to_pass() -> None:
    with pytest.raises(dlbridge.NotAnArrayError, match=r"ChunkedArray has no DLPack export.*combine_chunks\(\)"):
        dlbridge.to_numpy(pa.chunked_array([[1.0], [2.0]]))
    with pytest.raises(dlbridge.NotAnArrayError, match=r"table\.column\('x'\)"):
        dlbridge.to_torch(pa.table({"x": [1.0]}))
    joined = dlbridge.to_numpy(pa.chunked_array([[1.0], [2.0]]).combine_chunks())
    np.testing.assert_array_equal(joined, [1.0, 2.0])


def test_a_legacy_only_consumer_is_told_arrow_arrays_cannot_be_made_writable() -> None:
    need("jax")
    x = pa.array(np.arange(4, dtype=np.float32))
    with pytest.raises(dlbridge.ReadOnlyError, match=r"Arrow arrays are immutable") as err:
        dlbridge.to_jax(x)
    assert "make the array writeable" not in str(err.value)
    copied = dlbridge.to_jax(x, copy=True)
    assert np.asarray(copied).tolist() == [0.0, 1.0, 2.0, 3.0]
