"""TensorFlow and PaddlePaddle, both ways: producers x consumers x dtypes x layouts, checking
values bit for bit, dtype and memory sharing; their quirks (layouts TF refuses, Paddle's uint16,
Paddle's device tuple, importing paddle after tensorflow).

Importing tensorflow before paddle crashes the process (tensorflow 2.21.0, paddlepaddle 3.3.1),
and pytest's order of files is not ours to promise (``-k``, explicit file lists, plugins). So the
framework tests are ``isolated(imports=("paddle", "tensorflow"))``: one child pytest runs them and
imports paddle first; each reports its own outcome. The parent imports neither.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

import dlbridge
from tests._arrays import apply_layout, base_shape, bits, jax_cpu, layout_of, reference, torch_from
from tests.conftest import need, run_child

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("paddle", "tensorflow")}
# In a child that imports paddle first: the other order crashes the process.
in_a_child = pytest.mark.isolated(imports=("paddle", "tensorflow"))

NEW = ("tensorflow", "paddle")
OTHERS = ("torch", "numpy", "jax")
DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "complex64", "uint16", "int64")
LAYOUTS = ("contiguous", "transposed", "sliced", "0-d", "empty")
FP8 = ("float8_e4m3fn", "float8_e5m2")
CONVERT = {
    "torch": dlbridge.to_torch,
    "numpy": dlbridge.to_numpy,
    "jax": dlbridge.to_jax,
    "tensorflow": dlbridge.to_tensorflow,
    "paddle": dlbridge.to_paddle,
}


def _need(name: str) -> Any:
    if name == "tensorflow":
        tf = need("tensorflow")
        return tf
    return need(name)


# --- the frameworks' own APIs (what a user sees), for sources and read-back -------------------


def make_source(framework: str, dtype: str, layout: str) -> tuple[Any, np.ndarray]:
    """(source in ``framework``, NumPy array with the same logical values)."""
    full = reference(dtype, base_shape(layout))
    expected = layout_of(full, layout)
    if framework == "numpy":
        return layout_of(full.copy(), layout), expected
    if framework == "torch":
        return apply_layout(torch_from(full), layout), expected
    if framework == "jax":
        return jax_cpu(expected), expected  # JAX cannot make strided views
    if framework == "tensorflow":
        import tensorflow as tf

        return tf.constant(np.array(expected, copy=True)), expected  # TF tensors are always dense
    if framework == "paddle":
        import paddle

        if dtype == "uint16":
            pytest.skip("paddle has no uint16 (it reads NumPy uint16 as its bfloat16)")
        if full.dtype.type.__module__ == "ml_dtypes":  # bf16 via uint16 (paddle's bf16), fp8 via a view
            t = paddle.to_tensor(full.view(f"u{full.dtype.itemsize}").copy())
            t = t if dtype == "bfloat16" else t.view(getattr(paddle, dtype))
        else:
            t = paddle.to_tensor(full.copy())
        if layout == "transposed":
            t = paddle.transpose(t, [1, 0])
        elif layout == "sliced":
            t = t[1:, 2:]
        return t, expected
    raise ValueError(framework)


def aligned_source(framework: str, dtype: str) -> tuple[Any, np.ndarray]:
    """A dense (3, 4) source whose data is 64-byte aligned (TF shares only such data)."""
    src, expected = make_source(framework, dtype, "contiguous")
    if framework == "torch":
        src = src.clone()  # torch's allocator aligns to 64 bytes; torch_from wraps NumPy memory
    elif framework == "numpy":
        raw = np.empty(src.nbytes + 64, np.uint8)
        start = -raw.ctypes.data % 64
        src = raw[start : start + src.nbytes].view(src.dtype).reshape(src.shape)
        src[...] = expected
    assert ptr(framework, src) % 64 == 0
    return src, expected


def host(framework: str, arr: Any) -> np.ndarray:
    """A NumPy copy of ``arr`` with its logical dtype, read through the framework's own API."""
    from tests._arrays import np_dtype, to_host

    if framework == "tensorflow":
        return np.array(arr.numpy(), copy=True)  # TF's bf16/fp8 NumPy types are ml_dtypes'
    if framework == "paddle":
        import paddle

        dtype = dtype_of("paddle", arr)
        if not arr.size:
            return np.zeros(tuple(arr.shape), np_dtype(dtype))
        # .numpy() gives bf16 as uint16 and fp8 as int8: read the raw bytes instead.
        # clone: paddle's .contiguous() rewrites the tensor itself in place.
        raw = arr.clone().contiguous().reshape([-1]).view(paddle.uint8).numpy()
        return raw.view(np_dtype(dtype)).reshape(tuple(arr.shape))
    return to_host(framework, arr)


def ptr(framework: str, arr: Any) -> int:
    from tests._arrays import data_ptr

    if framework == "tensorflow":
        import tensorflow as tf

        from dlbridge._capsule._read import read

        return read(tf.experimental.dlpack.to_dlpack(arr)).data_ptr  # TF exposes no pointer
    if framework == "paddle":
        return int(arr.data_ptr())
    return data_ptr(framework, arr)


def dtype_of(framework: str, arr: Any) -> str:
    from tests._arrays import dtype_name

    if framework == "tensorflow":
        return str(arr.dtype.name)
    if framework == "paddle":
        return str(arr.dtype).removeprefix("paddle.")
    return dtype_name(framework, arr)


# --- the matrix ------------------------------------------------------------------------------

PAIRS = [(p, c) for p in (*OTHERS, *NEW) for c in NEW] + [(p, c) for p in NEW for c in OTHERS]


def _expect_refusal(producer: str, consumer: str, dtype: str) -> str | None:
    if consumer == "tensorflow" and dtype in FP8:
        return "tensorflow cannot hold float8"
    if consumer == "paddle" and dtype == "uint16":
        return "paddle cannot hold uint16"
    return None


@in_a_child
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("producer", "consumer"), PAIRS, ids=[f"{p}-{c}" for p, c in PAIRS])
def test_cell(producer: str, consumer: str, dtype: str, layout: str) -> None:
    _need(producer)
    _need(consumer)
    if "jax" in (producer, consumer) and dtype == "int64":
        import jax

        if not jax.config.jax_enable_x64:
            pytest.skip("JAX without x64 has no int64 (refused, see test_matrix.py)")
    src, expected = make_source(producer, dtype, layout)
    info = dlbridge.inspect(src)
    assert info.dtype == dtype
    refusal = _expect_refusal(producer, consumer, dtype)
    if refusal:
        with pytest.raises(dlbridge.UnsupportedDtypeError, match=refusal):
            CONVERT[consumer](src)
        return

    # JAX arrays are read-only (immutable): a consumer without read-only arrays (torch, Paddle) is refused
    # by default and shares them with readonly="drop"; the others hold them read-only either way.
    readonly = "drop" if producer == "jax" else "keep"
    if producer == "jax" and consumer in ("torch", "paddle"):
        with pytest.raises(dlbridge.ReadOnlyError, match=r'JAX arrays are immutable.*readonly="drop"'):
            CONVERT[consumer](src)
    out = CONVERT[consumer](src, readonly=readonly)

    assert dtype_of(consumer, out) == dtype
    assert tuple(out.shape) == expected.shape
    np.testing.assert_array_equal(bits(host(consumer, out)), bits(expected))
    if expected.size == 0:
        return
    shared = ptr(consumer, out) == info.data_ptr
    dense = info.strides is None or _row_major(info.shape, info.strides)
    if consumer == "tensorflow":
        aligned = info.data_ptr % 64 == 0
        assert shared == (dense and aligned), (info.strides, info.data_ptr % 64, "TF shares dense aligned data")
    elif consumer == "jax":
        assert shared == (info.is_compact() and info.data_ptr % 64 == 0)
    else:
        assert shared, "expected a zero-copy handoff"


def _row_major(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """What TF shares: dense C order, strides of size-1 dims ignored, any empty array."""
    if 0 in shape:
        return True
    expected = 1
    for n, stride in zip(reversed(shape), reversed(strides)):
        if n != 1 and stride != expected:
            return False
        expected *= n
    return True


# --- fallbacks, layouts and quirks -------------------------------------------------------------


@in_a_child
@pytest.mark.parametrize("dtype", FP8)
def test_float8_to_tensorflow_view_is_zero_copy_and_comes_back_as_float8(dtype: str) -> None:
    torch = need("torch")
    tf = need("tensorflow")
    src, expected = aligned_source("torch", dtype)
    view = dlbridge.to_tensorflow(src, fallback="view")
    assert view.dtype == tf.uint8 and ptr("tensorflow", view) == src.data_ptr()
    back = dlbridge.to_torch(view)
    assert back.dtype == getattr(torch, dtype) and back.data_ptr() == src.data_ptr()
    arr = dlbridge.to_numpy(view)
    assert arr.dtype.name == dtype and arr.ctypes.data == src.data_ptr()
    np.testing.assert_array_equal(bits(arr), bits(expected))


@in_a_child
def test_float8_to_tensorflow_upcast_gives_equal_float32_values() -> None:
    need("torch")
    need("tensorflow")
    src, expected = make_source("torch", "float8_e4m3fn", "contiguous")
    out = dlbridge.to_tensorflow(src, fallback="upcast")
    assert out.dtype.name == "float32"
    np.testing.assert_array_equal(out.numpy(), expected.astype(np.float32))


@in_a_child
def test_float8_paddle_cannot_hold_goes_by_fallback() -> None:
    """e4m3fnuz: paddle has no such dtype; view = zero-copy uint8, upcast = equal float32 values."""
    torch = need("torch")
    need("paddle")
    src = torch.tensor([1.0, -2.0, 0.5], device="cpu").to(torch.float8_e4m3fnuz)
    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r'paddle cannot hold float8_e4m3fnuz.*fallback="view"'):
        dlbridge.to_paddle(src)
    view = dlbridge.to_paddle(src, fallback="view")
    assert dtype_of("paddle", view) == "uint8" and view.data_ptr() == src.data_ptr()
    assert dlbridge.to_torch(view).dtype == torch.float8_e4m3fnuz
    up = dlbridge.to_paddle(src, fallback="upcast")
    assert dtype_of("paddle", up) == "float32" and up.numpy().tolist() == [1.0, -2.0, 0.5]


@in_a_child
def test_transposed_source_to_tensorflow_copy_false_raises_layout_error() -> None:
    need("tensorflow")
    src, _ = make_source("numpy", "float32", "transposed")
    with pytest.raises(dlbridge.LayoutError, match=r"tensorflow .* cannot share .* strides"):
        dlbridge.to_tensorflow(src, copy=False)


@in_a_child
@pytest.mark.parametrize("dtype", ["uint8", "bfloat16", "complex128", "bool"])
def test_misaligned_cpu_data_reaches_tensorflow_as_an_aligned_copy(dtype: str) -> None:
    """TF would share it, then abort the process in its first op ("Check failed: IsAligned()")."""
    from tests._arrays import np_dtype

    tf = need("tensorflow")
    itemsize = np_dtype(dtype).itemsize
    raw = np.empty(32 * itemsize + 128, np.uint8)
    start = -raw.ctypes.data % 64 + itemsize  # one element past a 64-byte boundary
    a = raw[start : start + 32 * itemsize].view(np_dtype(dtype))
    a[...] = reference(dtype, (32,))
    assert a.ctypes.data % 64
    out = dlbridge.to_tensorflow(a)
    assert ptr("tensorflow", out) % 64 == 0 and ptr("tensorflow", out) != a.ctypes.data
    np.testing.assert_array_equal(bits(host("tensorflow", out)), bits(a))
    tf.reverse(out, [0])  # an op on the import: aborts the process if it were misaligned
    with pytest.raises(dlbridge.LayoutError, match="not aligned"):
        dlbridge.to_tensorflow(a, copy=False)


@in_a_child
@pytest.mark.parametrize("consumer", NEW)
def test_negative_strides_are_copied_densely(consumer: str) -> None:
    """TF refuses them; paddle 3.3.1 computes a 2**64-byte size (MemoryError): both get a copy."""
    _need(consumer)
    a = np.arange(6.0)[::-1]
    out = dlbridge.to_paddle(a) if consumer == "paddle" else dlbridge.to_tensorflow(a)
    np.testing.assert_array_equal(host(consumer, out), a)
    assert ptr(consumer, out) != dlbridge.inspect(a).data_ptr


@in_a_child
@pytest.mark.parametrize("producer", ("numpy", "torch"))
@pytest.mark.parametrize("consumer", NEW)
def test_writes_are_visible_through_zero_copy(producer: str, consumer: str) -> None:
    _need(producer)
    _need(consumer)
    src, _ = aligned_source(producer, "float32")
    out = CONVERT[consumer](src)
    src[0, 0] = 5.5
    assert float(host(consumer, out)[0, 0]) == 5.5


@in_a_child
def test_readonly_numpy_to_paddle_is_refused_or_copied() -> None:
    """paddle ignores DLPack's READ_ONLY flag and writes through (paddlepaddle 3.3.1)."""
    need("paddle")
    a = np.arange(4.0)
    a.flags.writeable = False
    with pytest.raises(dlbridge.ReadOnlyError, match="copy=True"):
        dlbridge.to_paddle(a)
    out = dlbridge.to_paddle(a, copy=True)
    out[0] = 9.0
    assert a[0] == 0.0 and out.data_ptr() != a.ctypes.data


@in_a_child
def test_readonly_numpy_to_tensorflow_copy_true_works() -> None:
    need("tensorflow")
    a = np.arange(4.0)
    a.flags.writeable = False
    out = dlbridge.to_tensorflow(a, copy=True)
    np.testing.assert_array_equal(out.numpy(), a)
    assert ptr("tensorflow", out) != a.ctypes.data


@in_a_child
def test_paddle_cpu_device_tuple_with_none_id_is_read_as_cpu_0() -> None:
    paddle = need("paddle")
    t = paddle.to_tensor([1.0, 2.0])
    assert t.__dlpack_device__()[1] is None  # the quirk this pins (paddlepaddle 3.3.1)
    assert dlbridge.inspect(t).device == (1, 0)
    out = dlbridge.to_numpy(t)
    assert out.ctypes.data == t.data_ptr()


@in_a_child
def test_dense_copy_of_a_strided_paddle_tensor_leaves_it_a_view() -> None:
    """paddle's Tensor.contiguous() rewrites the tensor itself in place; dlbridge must not."""
    paddle = need("paddle")
    need("tensorflow")
    x = paddle.arange(12, dtype="float32").reshape([3, 4])
    t = paddle.transpose(x, [1, 0])
    out = dlbridge.to_tensorflow(t)  # TF takes only C order: a dense copy is exported
    assert t.data_ptr() == x.data_ptr() and not t.is_contiguous()
    np.testing.assert_array_equal(out.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).T)


@in_a_child
def test_paddle_tensor_that_requires_grad_is_refused_naming_detach_and_kept_by_paddle() -> None:
    paddle = need("paddle")
    t = paddle.to_tensor([1.0, 2.0], stop_gradient=False)
    with pytest.raises(dlbridge.ProducerError, match=r"stop_gradient=False.*x\.detach\(\)"):
        dlbridge.to_numpy(t)
    assert not t.stop_gradient
    out = dlbridge.to_numpy(t.detach())
    assert out.ctypes.data == t.data_ptr()
    np.testing.assert_array_equal(out, [1.0, 2.0])
    assert dlbridge.to_paddle(t) is t  # paddle -> paddle: the graph is kept


@in_a_child
def test_tensorflow_float8_source_reaches_paddle_zero_copy() -> None:
    """TF's own export refuses float8; dlbridge shares its bytes relabelled (more in test_tensorflow_dtypes.py)."""
    tf = need("tensorflow")
    paddle = need("paddle")
    ref = reference("float8_e4m3fn", (3,))
    t = tf.constant(ref)
    out = dlbridge.to_paddle(t)
    assert out.dtype == paddle.float8_e4m3fn and out.data_ptr() == np.asarray(t).ctypes.data
    np.testing.assert_array_equal(bits(host("paddle", out)), bits(ref))


@in_a_child
def test_paddle_uint16_refusal_says_why_and_what_to_pass() -> None:
    paddle = need("paddle")
    src = np.array([1, 2, 40000], dtype=np.uint16)
    with pytest.raises(dlbridge.UnsupportedDtypeError) as info:
        dlbridge.to_paddle(src)
    message = str(info.value)
    assert "reads uint16 data as its own bfloat16" in message
    assert 'dtype="bfloat16"' in message and 'dtype="int16"' in message and "int32" in message
    # What the message offers works: same memory, relabelled.
    as_bf16 = dlbridge.to_paddle(src, dtype="bfloat16")
    assert as_bf16.dtype == paddle.bfloat16 and as_bf16.data_ptr() == src.ctypes.data
    as_i16 = dlbridge.to_paddle(src, dtype="int16")
    assert as_i16.data_ptr() == src.ctypes.data and as_i16.numpy().tolist() == [1, 2, 40000 - 65536]
    assert dlbridge.to_paddle(src.astype(np.int32)).numpy().tolist() == [1, 2, 40000]


@in_a_child
@pytest.mark.parametrize("to", ["tensorflow", "tf", "paddle", "paddlepaddle", "module"])
def test_convert_accepts_names_aliases_and_modules(to: str) -> None:
    need("torch")
    target = "tensorflow" if to in ("tensorflow", "tf") else "paddle"
    mod = _need(target)
    src, expected = aligned_source("torch", "bfloat16")
    out = dlbridge.convert(src, mod if to == "module" else to)
    assert dtype_of(target, out) == "bfloat16" and ptr(target, out) == src.data_ptr()
    np.testing.assert_array_equal(bits(host(target, out)), bits(expected))


@in_a_child
@pytest.mark.parametrize("framework", NEW)
def test_guard_converts_arguments_to_the_framework(framework: str) -> None:
    need("torch")
    _need(framework)
    seen = []

    @dlbridge.guard(framework)
    def body(a: Any) -> Any:
        seen.append(dtype_of(framework, a))
        return a

    src, _ = aligned_source("torch", "bfloat16")
    out = body(src)
    assert seen == ["bfloat16"]
    assert out.data_ptr() == src.data_ptr() and out.dtype == src.dtype  # back as torch, same memory


@in_a_child
@pytest.mark.parametrize("framework", NEW)
def test_adapter_report_hooks_round_trip_exact_bits(framework: str) -> None:
    """make_array / dtype_str / host_bytes / to_host: what the report and benchmarks build on."""
    from dlbridge._adapters import ADAPTERS

    _need(framework)
    adapter = ADAPTERS[framework]
    for dtype in ("float32", "bfloat16", "bool", "complex64", "int64", *(FP8 if framework == "paddle" else ())):
        ref = reference(dtype, (2, 3))
        arr = adapter.prober.make_array(ref, "cpu")
        assert adapter.prober.dtype_str(arr) == dtype
        np.testing.assert_array_equal(adapter.prober.host_bytes(arr), bits(ref).reshape(-1).view(np.uint8))
        np.testing.assert_array_equal(bits(adapter.prober.to_host(arr)), bits(ref))
        assert adapter.device_of(arr) == (1, 0)
        assert adapter.data_ptr(arr) == ptr(framework, arr)
        copied = adapter.copy(arr)
        assert adapter.data_ptr(copied) != adapter.data_ptr(arr)
        np.testing.assert_array_equal(adapter.prober.host_bytes(copied), adapter.prober.host_bytes(arr))
    assert adapter.prober.gpu_name() is None or isinstance(adapter.prober.gpu_name(), str)


# --- run in the parent -----------------------------------------------------------------------


def test_to_paddle_after_tensorflow_refuses_instead_of_crashing() -> None:
    if not (HAVE["tensorflow"] and HAVE["paddle"]):
        pytest.skip("needs tensorflow and paddle")
    proc = run_child(
        """
        import sys, numpy as np
        import tensorflow, dlbridge
        try:
            dlbridge.to_paddle(np.arange(3.0))
        except dlbridge.MissingFrameworkError as err:
            print("refused:", err)
        print("paddle imported:", "paddle" in sys.modules)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused: dlbridge needs paddle" in proc.stdout and "import paddle before tensorflow" in proc.stdout
    assert "paddle imported: False" in proc.stdout


def test_registry_lists_paddle_before_tensorflow() -> None:
    """Code importing the frameworks in registry order (report workers, doctor) must not crash."""
    from dlbridge._adapters import ADAPTERS

    names = list(ADAPTERS)
    assert names.index("paddle") < names.index("tensorflow")
    assert ADAPTERS["paddle"].unsafe_after == ("tensorflow",)
