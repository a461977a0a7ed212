"""Arrays in states DLPack cannot carry as they are: torch's lazy conjugate/negative bits, autograd,
sparse/meta/quantized tensors, traced and deleted arrays, masked arrays. Each gives the right
values (a resolved copy where copy= allows it) or a ProducerError that names the fix."""

from __future__ import annotations

import gc
import sys
import warnings

import numpy as np
import pytest

import dlbridge
from tests._arrays import jax_cpu
from tests.conftest import need, run_child

torch = need("torch")
jax = need("jax")
jnp = need("jax.numpy")


def _conj() -> torch.Tensor:
    return torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64, device="cpu").conj()


def _neg() -> torch.Tensor:
    t = _conj().imag  # the imaginary part of a conjugate view: a lazy negation of [2, -4]
    assert t.is_neg() and not t.is_conj()
    return t


def _ptr(x: object) -> int:
    if isinstance(x, torch.Tensor):
        return int(x.data_ptr())
    if isinstance(x, np.ndarray):
        return int(x.ctypes.data)
    return int(x.unsafe_buffer_pointer())  # type: ignore[attr-defined]


# --- torch's lazy bits ------------------------------------------------------------------------------


@pytest.mark.parametrize("to", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("copy", [None, True])
def test_lazy_negative_and_conjugate_bits_arrive_resolved_as_a_copy(to: str, copy: bool | None) -> None:
    for src, want, dtype in (
        (_neg(), [-2.0, 4.0], "float32"),
        (_conj(), [1 - 2j, 3 + 4j], "complex64"),
    ):
        out = dlbridge.convert(src, to, copy=copy)
        assert np.asarray(out).tolist() == want, (to, copy, src)
        assert str(out.dtype).removeprefix("torch.") == dtype
        assert _ptr(out) != src.data_ptr()  # a resolved copy, not the lazy tensor's memory
        if to == "torch":
            assert not out.is_neg() and not out.is_conj()
    # The caller's tensor is untouched: still lazy, still the same values.
    src = _conj()
    dlbridge.to_numpy(src)
    assert src.is_conj() and src.tolist() == [1 - 2j, 3 + 4j]


@pytest.mark.parametrize("to", ["numpy", "torch", "jax"])
def test_lazy_bits_under_copy_false_raise_naming_the_resolve_call(to: str) -> None:
    with pytest.raises(dlbridge.ProducerError, match=r"conjugate bit.*copy=False forbids.*x\.resolve_conj\(\)"):
        dlbridge.convert(_conj(), to, copy=False)
    with pytest.raises(dlbridge.ProducerError, match=r"negative bit.*copy=False forbids.*x\.resolve_neg\(\)"):
        dlbridge.convert(_neg(), to, copy=False)
    resolved = _neg().resolve_neg()  # the named fix works, zero-copy
    out = dlbridge.convert(resolved, to, copy=False)
    assert np.asarray(out).tolist() == [-2.0, 4.0] and _ptr(out) == resolved.data_ptr()


def test_guard_body_receives_lazy_tensors_with_their_values() -> None:
    seen = []

    @dlbridge.guard("numpy")
    def double(x: np.ndarray) -> np.ndarray:
        seen.append(x.copy())
        return x * 2

    out = double(_neg())
    assert seen[-1].tolist() == [-2.0, 4.0] and seen[-1].dtype == np.float32
    assert isinstance(out, torch.Tensor) and out.tolist() == [-4.0, 8.0]
    out = double(_conj())
    assert seen[-1].tolist() == [1 - 2j, 3 + 4j] and out.tolist() == [2 - 4j, 6 + 8j]

    @dlbridge.guard("numpy", copy=False)
    def same(x: np.ndarray) -> np.ndarray:
        return x

    with pytest.raises(dlbridge.ProducerError, match=r"same\(x=.*resolve_conj"):
        same(_conj())


def test_inspect_describes_the_memory_of_a_lazy_tensor() -> None:
    for src in (_conj(), _neg(), torch.ones(3, requires_grad=True, device="cpu")):
        info = dlbridge.inspect(src)
        assert info.data_ptr == src.data_ptr() and info.shape == tuple(src.shape)
        assert info.dtype == str(src.dtype).removeprefix("torch.")


# --- autograd ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("to", ["numpy", "jax"])
def test_tensor_that_requires_grad_is_refused_naming_detach(to: str) -> None:
    for src in (torch.ones(3, requires_grad=True, device="cpu"), torch.nn.Parameter(torch.ones(3, device="cpu"))):
        for copy in (None, True, False):
            display = {"numpy": "NumPy", "jax": "JAX"}[to]  # the framework named as people write it
            match = rf"to_{to}\(\).*requires grad, and {display} cannot carry its autograd graph.*x\.detach\(\)"
            with pytest.raises(dlbridge.ProducerError, match=match):
                dlbridge.convert(src, to, copy=copy)
        out = dlbridge.convert(src.detach(), to)  # the named fix: zero-copy
        assert np.asarray(out).tolist() == [1.0, 1.0, 1.0] and _ptr(out) == src.data_ptr()


def test_torch_to_torch_keeps_the_autograd_graph() -> None:
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0], device="cpu"))
    assert dlbridge.to_torch(p) is p  # nothing to change: the tensor itself, graph and all
    assert dlbridge.to_torch(p, copy=False) is p
    copied = dlbridge.to_torch(p, copy=True)
    assert copied.data_ptr() != p.data_ptr() and copied.requires_grad and copied.grad_fn is not None
    (copied * 3).sum().backward()
    assert p.grad is not None and p.grad.tolist() == [3.0, 3.0]
    with pytest.raises(dlbridge.ProducerError, match=r"to_torch\(\).*requires grad.*dtype=.*x\.detach\(\)"):
        dlbridge.to_torch(p, dtype="int32")

    @dlbridge.guard("numpy")
    def body(x: np.ndarray) -> np.ndarray:
        return x

    with pytest.raises(dlbridge.ProducerError, match=r"body\(x=.*requires grad.*x\.detach\(\)"):
        body(p)


# --- producers that cannot export: the message names the fix -----------------------------------------


def _quantized() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch 2.13 deprecates quantized creation functions
        return torch.quantize_per_tensor(torch.ones(3, device="cpu"), 0.1, 0, torch.quint8)


def _nested() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "nested tensors are in prototype stage"
        return torch.nested.nested_tensor([torch.ones(2, device="cpu"), torch.ones(3, device="cpu")])


def _csr() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.eye(3, device="cpu").to_sparse_csr()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: torch.eye(3, device="cpu").to_sparse(), r"layout torch\.sparse_coo.*x\.to_dense\(\)"),
        (_csr, r"layout torch\.sparse_csr.*x\.to_dense\(\)"),
        (lambda: torch.empty(3, device="meta"), r"meta device .*no data"),
        (_quantized, r"quantized.*x\.dequantize\(\).*x\.int_repr\(\)"),
        (_nested, r"nested tensor.*x\.to_padded_tensor"),
    ],
    ids=["sparse_coo", "sparse_csr", "meta", "quantized", "nested"],
)
@pytest.mark.parametrize("to", ["numpy", "torch", "jax"])
def test_torch_tensor_states_name_their_fix(make, match: str, to: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(dlbridge.ProducerError, match=match) as err:
        dlbridge.convert(make(), to)
    assert isinstance(err.value, BufferError) and not isinstance(err.value, dlbridge.CapsuleError)
    assert err.value.__cause__ is not None  # torch's own refusal stays in the chain


def test_torch_func_transform_values_name_the_transform() -> None:
    def body(x: torch.Tensor) -> torch.Tensor:
        with pytest.raises(dlbridge.ProducerError, match=r"torch\.func transform.*outside the transform"):
            dlbridge.to_numpy(x)
        return x

    torch.func.vmap(body)(torch.ones(2, 3, device="cpu"))


def test_fake_tensor_is_refused_instead_of_a_null_pointer() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.ones(3, device="cpu")
    for to in ("numpy", "torch"):
        with pytest.raises(dlbridge.ProducerError, match=r"fake tensor.*torch\.compiler\.disable"):
            dlbridge.convert(fake, to)


def test_jax_tracer_inside_jit_names_pure_callback() -> None:
    caught = []

    @jax.jit
    def f(y):  # type: ignore[no-untyped-def]
        for call in (dlbridge.to_numpy, dlbridge.to_torch, dlbridge.inspect):
            with pytest.raises(dlbridge.ProducerError, match=r"JAX tracer.*outside jax\.jit.*jax\.pure_callback"):
                call(y)
            caught.append(call)
        return y

    f(jax_cpu(jnp.ones(2)))
    assert len(caught) == 3  # the body really ran under tracing


def test_deleted_jax_array_says_it_was_deleted() -> None:
    x = jax_cpu(jnp.arange(3.0))
    x.delete()
    for to in ("numpy", "torch"):
        with pytest.raises(dlbridge.ProducerError, match=r"JAX array \(float32\[3\]\) was deleted"):
            dlbridge.convert(x, to)


def test_tf_function_symbolic_tensor_names_py_function() -> None:
    need("tensorflow")
    proc = run_child(
        """
        import dlbridge
        import tensorflow as tf
        messages = []

        @tf.function
        def f(y):
            try:
                dlbridge.to_numpy(y)
            except dlbridge.ProducerError as err:
                messages.append(str(err))
            return y

        f(tf.constant([1.0]))
        assert len(messages) == 1, messages
        assert "tf.function" in messages[0] and "tf.py_function" in messages[0], messages
        # Outside tf.function the same values convert (an eager tensor).
        assert dlbridge.to_numpy(tf.constant([1.0])).tolist() == [1.0]
        print("ok")
        """,
        timeout=300,
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


def test_producer_recursing_into_dlbridge_has_a_bounded_message() -> None:
    class Loop:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

        def __dlpack__(self, **kw: object) -> object:
            return dlbridge.to_numpy(self).__dlpack__()

    with pytest.raises(dlbridge.ProducerError, match=r"Loop\.__dlpack__\(\) failed: RecursionError") as err:
        dlbridge.to_torch(Loop())
    assert len(str(err.value)) < 300, str(err.value)[:1000]


def test_unknown_producer_failure_is_a_producer_error_not_a_capsule_error() -> None:
    class Broken:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

        def __dlpack__(self, **kw: object) -> object:
            raise ValueError("no data yet")

    with pytest.raises(dlbridge.ProducerError, match=r"Broken\.__dlpack__\(\) failed: ValueError: no data yet") as err:
        dlbridge.to_numpy(Broken())
    assert not isinstance(err.value, dlbridge.CapsuleError) and isinstance(err.value.__cause__, ValueError)


# --- NumPy byte order -------------------------------------------------------------------------------

_SWAPPED = ">" if sys.byteorder == "little" else "<"


@pytest.mark.parametrize("to", ["torch", "jax"])
def test_non_native_byte_order_names_copy_true_and_astype(to: str) -> None:
    x = np.arange(4, dtype=f"{_SWAPPED}i4")
    for _ in range(2):  # the pipeline, then whatever the route learned
        with pytest.raises(dlbridge.ProducerError) as err:
            dlbridge.convert(x, to)
        message = str(err.value)
        assert f"dtype '{_SWAPPED}i4'" in message and "byte order" in message, message
        assert "Pass copy=True for a native-order copy" in message, message
        assert 'x.astype(x.dtype.newbyteorder("="))' in message, message
    with pytest.raises(dlbridge.ProducerError, match="copy=True"):
        dlbridge.inspect(x)


@pytest.mark.parametrize("dtype", ["i4", "f2", "c8", "u2"])  # JAX without x64: no 64-bit
@pytest.mark.parametrize("to", ["torch", "jax"])
def test_non_native_byte_order_with_copy_true_is_a_native_copy(to: str, dtype: str) -> None:
    x = (np.arange(6) * 3 - 5).astype(dtype if dtype[0] != "u" else "i4").astype(f"{_SWAPPED}{dtype}").reshape(2, 3)
    out = dlbridge.convert(x, to, copy=True)
    host = np.asarray(out) if to == "jax" else out.numpy()
    assert host.dtype == np.dtype(dtype) and host.dtype.isnative
    np.testing.assert_array_equal(host, x)  # equal values (NumPy compares across byte orders)


def test_non_native_byte_order_into_numpy_is_numpy_itself() -> None:
    """NumPy holds any byte order: to_numpy gives a view (as the fast route's ndarray.view() does)."""
    x = np.arange(4, dtype=f"{_SWAPPED}f4")
    for _ in range(3):
        out = dlbridge.to_numpy(x)
        assert out.dtype == x.dtype and out.ctypes.data == x.ctypes.data
    c = dlbridge.to_numpy(x, copy=True)
    assert c.ctypes.data != x.ctypes.data
    np.testing.assert_array_equal(c, x)


# --- masked arrays ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("to", ["numpy", "torch", "jax"])
def test_masked_array_is_refused_naming_filled_and_data(to: str) -> None:
    m = np.ma.masked_array(np.array([1.0, 2.0, 3.0], np.float32), mask=[False, True, False])
    with pytest.raises(
        dlbridge.ProducerError, match=r"masked array \(float32\[3\], 1 masked\).*x\.filled\(value\).*x\.data"
    ):
        dlbridge.convert(m, to)
    with pytest.raises(dlbridge.ProducerError, match="0 masked"):  # no masked entry yet: still a masked array
        dlbridge.convert(np.ma.masked_array(np.ones(2, np.float32)), to)
    out = dlbridge.convert(m.data, to)  # the named fix: the raw data, zero-copy
    assert np.asarray(out).tolist() == [1.0, 2.0, 3.0]
    if to != "jax":  # JAX copies NumPy buffers that are not 64-byte aligned (NumPy aligns to 16)
        assert _ptr(out) == m.data.ctypes.data
    assert np.asarray(dlbridge.convert(m.filled(0.0), to)).tolist() == [1.0, 0.0, 3.0]


def test_guard_refuses_a_masked_argument() -> None:
    @dlbridge.guard("torch")
    def body(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(dlbridge.ProducerError, match=r"body\(x=.*x\.filled\(value\)"):
        body(np.ma.masked_array([1.0], mask=[True]))


def test_set_on_the_source_after_export_leaves_the_import_reading_live_memory() -> None:
    """torch's capsule holds the exported tensor, not its storage: after x.set_(y) an import of x
    would read freed memory. dlbridge exports a detached alias, which holds the storage."""
    torch = need("torch")
    np = need("numpy")
    x = torch.arange(4096, dtype=torch.float32, device="cpu")
    out = dlbridge.to_numpy(x)
    assert out.ctypes.data == x.data_ptr()  # zero-copy
    x.set_(torch.zeros(2, device="cpu"))
    gc.collect()
    for _ in range(50):  # churn the allocator: freed memory would be reused and overwritten
        torch.full((4096,), 7.0, device="cpu").sum()
    np.testing.assert_array_equal(out, np.arange(4096, dtype=np.float32))
