"""TensorFlow dtypes DLPack cannot carry as TensorFlow exports them: strings, variants and resource
handles (``to_dlpack`` aborts the process on them), quantized and sub-byte types (it raises), and
float8 (it raises; dlbridge shares the tensor's bytes through NumPy, relabelled).

Every test is isolated (a child pytest): before the fix the opaque dtypes killed the process.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dlbridge
from tests.conftest import need

pytestmark = pytest.mark.isolated

TARGETS = ("numpy", "torch", "jax", "tensorflow")
FP8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz")


def _opaque(kind: str) -> Any:
    tf = need("tensorflow")
    if kind == "string":
        return tf.constant(["a", "bc"])
    if kind == "variant":  # a TensorList
        return tf.raw_ops.TensorListReserve(
            element_shape=tf.constant([], tf.int32), num_elements=2, element_dtype=tf.float32
        )
    return tf.Variable([1.0]).handle  # resource


def _need_targets() -> None:
    for name in ("tensorflow", "torch", "jax"):
        need(name)


@pytest.mark.parametrize("kind", ["string", "variant", "resource"])
def test_opaque_tensors_are_refused_before_export(kind: str) -> None:
    _need_targets()
    x = _opaque(kind)
    for _ in range(2):  # the second call may take the fast route: refused there too
        for to in TARGETS:
            with pytest.raises(
                dlbridge.ProducerError, match=rf"TensorFlow {kind} tensor .*DLPack carries only.* Pass "
            ):
                dlbridge.convert(x, to)
        with pytest.raises(dlbridge.ProducerError, match=rf"TensorFlow {kind} tensor"):
            dlbridge.inspect(x)


def test_opaque_tensor_after_the_route_is_learned() -> None:
    """A float32 tensor teaches the fast route EagerTensor; a string tensor of that type after it."""
    tf = need("tensorflow")
    for _ in range(3):
        assert dlbridge.to_numpy(tf.constant([1.0, 2.0])).tolist() == [1.0, 2.0]
    with pytest.raises(dlbridge.ProducerError, match="string tensor"):
        dlbridge.to_numpy(tf.constant(["a", "b"]))


def test_string_message_names_what_to_pass() -> None:
    x = _opaque("string")
    with pytest.raises(dlbridge.ProducerError) as info:
        dlbridge.to_numpy(x)
    assert "x.numpy()" in str(info.value) and "tf.strings.to_number" in str(info.value)


def test_guard_passes_string_arguments_and_results_through() -> None:
    tf = need("tensorflow")
    need("torch")
    seen: list[Any] = []

    @dlbridge.guard("torch")
    def body(x: Any, labels: Any) -> Any:
        seen.append((type(x).__module__.partition(".")[0], labels))
        return x * 2, labels

    labels = tf.constant(["cat", "dog"])
    out, back = body(tf.constant([1.0, 2.0]), labels)
    assert seen[0][0] == "torch" and seen[0][1] is labels  # passed unchanged, as non-array values are
    assert back is labels
    assert out.numpy().tolist() == [2.0, 4.0] and out.dtype == tf.float32  # back in TF


def test_guard_with_args_naming_a_string_tensor_says_so() -> None:
    tf = need("tensorflow")
    need("torch")

    @dlbridge.guard("torch", args=("labels",))
    def body(x: Any, labels: Any) -> Any:
        return x

    with pytest.raises(dlbridge.NotAnArrayError, match=r"body\(labels=…\).*dtype string.*leave it out of args="):
        body(1, tf.constant(["a"]))


@pytest.mark.parametrize("kind", ["qint8", "quint8", "qint16", "quint16", "qint32"])
def test_quantized_tensors_name_bitcast(kind: str) -> None:
    tf = need("tensorflow")
    x = tf.quantization.quantize(tf.constant([0.0, 1.0, 2.0]), 0.0, 3.0, getattr(tf, kind)).output
    with pytest.raises(dlbridge.ProducerError, match=rf"TensorFlow {kind} tensor.*tf\.bitcast\(x, tf\.\w+\)"):
        dlbridge.to_numpy(x)


@pytest.mark.parametrize("kind", ["int4", "uint4", "int2", "uint2", "float4_e2m1fn"])
def test_sub_byte_tensors_say_what_to_do(kind: str) -> None:
    tf = need("tensorflow")
    ml_dtypes = need("ml_dtypes")
    x = tf.constant(np.zeros(3, dtype=getattr(ml_dtypes, kind)))
    with pytest.raises(dlbridge.ProducerError, match=rf"TensorFlow {kind} tensor.*(tf\.cast|x\.numpy\(\))"):
        dlbridge.to_numpy(x)


@pytest.mark.parametrize("dtype", FP8)
def test_float8_tensors_export_zero_copy_with_their_dtype(dtype: str) -> None:
    tf = need("tensorflow")
    ml_dtypes = need("ml_dtypes")
    torch = need("torch")
    need("jax")
    ref = (np.arange(12, dtype=np.float32).reshape(3, 4) / 8).astype(getattr(ml_dtypes, dtype))
    t = tf.constant(ref)
    # np.asarray(t) is the tensor's own buffer (writes through it show in t; probe 2026-11-25).
    address = np.asarray(t).ctypes.data
    assert dlbridge.inspect(t).dtype == dtype and dlbridge.inspect(t).data_ptr == address
    for _ in range(3):  # the pipeline, then the fast route
        n = dlbridge.to_numpy(t)
        assert n.dtype == ref.dtype and n.ctypes.data == address
        np.testing.assert_array_equal(n.view(np.uint8), ref.view(np.uint8))
        if hasattr(torch, dtype):
            p = dlbridge.to_torch(t)
            assert p.dtype == getattr(torch, dtype) and p.data_ptr() == address
            np.testing.assert_array_equal(p.view(torch.uint8).numpy(), ref.view(np.uint8))
        else:  # torch has no float8_e4m3b11fnuz: the fallback policy, as for any source
            with pytest.raises(dlbridge.UnsupportedDtypeError, match=f"cannot hold {dtype}"):
                dlbridge.to_torch(t)
        j = dlbridge.to_jax(t)
        assert str(j.dtype) == dtype and j.unsafe_buffer_pointer() == address
        np.testing.assert_array_equal(np.asarray(j).view(np.uint8), ref.view(np.uint8))
    assert not n.flags.writeable  # TF tensors are immutable: NumPy gets them read-only, as other dtypes
    if hasattr(torch, dtype):  # the same memory: a write through the torch result shows in the tensor
        p.view(torch.uint8)[0, 1] = int(ref.view(np.uint8)[2, 3])
        assert t.numpy().view(np.uint8)[0, 1] == ref.view(np.uint8)[2, 3]


def test_float8_into_tensorflow_goes_by_the_fallback() -> None:
    tf = need("tensorflow")
    ml_dtypes = need("ml_dtypes")
    t = tf.constant(np.array([0.5, -1.0], dtype=ml_dtypes.float8_e4m3fn))
    with pytest.raises(dlbridge.UnsupportedDtypeError, match="tensorflow cannot hold float8_e4m3fn"):
        dlbridge.to_tensorflow(t)
    u = dlbridge.to_tensorflow(t, fallback="view")
    assert u.dtype == tf.uint8 and dlbridge.inspect(u).data_ptr == np.asarray(t).ctypes.data
    assert dlbridge.to_numpy(u).dtype == ml_dtypes.float8_e4m3fn  # the view remembers
    f = dlbridge.to_tensorflow(t, fallback="upcast")
    assert f.dtype == tf.float32 and f.numpy().tolist() == [0.5, -1.0]


def test_a_remembered_view_passes_a_convert_false_guard_into_a_consumer_that_cannot_hold_it() -> None:
    """guard(convert=False) checks as a conversion would: a view goes on as another view, no error."""
    tf = need("tensorflow")
    ml_dtypes = need("ml_dtypes")
    need("torch")
    b11 = np.array([0.5, -1.0], dtype=ml_dtypes.float8_e4m3b11fnuz)
    u = dlbridge.to_tensorflow(b11, fallback="view")  # a TF uint8 tensor that remembers float8_e4m3b11fnuz
    assert u.dtype == tf.uint8

    @dlbridge.guard("torch", convert=False)
    def body(x: Any) -> Any:
        return x

    assert body(u) is u
    with pytest.raises(dlbridge.UnsupportedDtypeError, match="cannot hold float8_e4m3b11fnuz"):
        body(b11)  # not a view: the caller chose nothing, so the check refuses
