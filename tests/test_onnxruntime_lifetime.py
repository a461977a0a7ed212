"""Every OrtValue dlbridge makes owns the memory it describes, through the C object its capsules hold.

``OrtValue.ortvalue_from_numpy`` (and ``_with_onnx_type``) keeps its NumPy buffer alive through the
Python wrapper only (``OrtValue._numpy_obj``, onnxruntime_inference_collection.py), while a capsule from
``OrtValue.__dlpack__`` holds the C OrtValue (dlpack_converter.cc ``OrtDLManagedTensor.handle``), which
does not own NumPy's buffer (onnxruntime_pybind_mlvalue.cc ``CreateTensor``: "The numpy object owns the
memory"). A consumer of such an OrtValue read freed memory once the wrapper was gone. Each test makes an
OrtValue one way dlbridge makes them, exports it onward (torch, NumPy), drops every other reference
(the OrtValue, its sources), collects, reallocates blocks of the same size, and checks the consumers'
values, dtype and data pointer, and that no new allocation landed on their memory.

Run in a child (a read of freed memory may crash it) where glibc poisons what it frees, on both paths.
Against each ONNX Runtime wheel::

    PYTHONPATH=/tmp/ort-1.30.0:$PWD python -m pytest -q tests/test_onnxruntime_lifetime.py
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from tests._arrays import np_dtype, reference
from tests._isolated import IN_CHILD
from tests._route_helpers import COMPILED, route_path  # noqa: F401 - the fixture parametrized below
from tests.conftest import caps_of, need, need_supported

ort = need_supported("onnxruntime")
torch = need("torch")
need("ml_dtypes")

# glibc fills each block it frees with 0xA5 (MALLOC_PERTURB_; the per-thread cache, which skips that, off):
# a consumer left over freed memory reads 0xA5 bytes at once, whatever the allocator hands out next.
FREED = {"MALLOC_PERTURB_": "165", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test in a child with ``FREED``, on the loaded path and (where that is the compiled one) the
    pure-Python path, as ``on_both_paths`` does for the route's tests."""
    params = [pytest.param("loaded", id="loaded", marks=pytest.mark.isolated(env=FREED))]
    if COMPILED or IN_CHILD:
        pure = pytest.mark.isolated(env={**FREED, "DLBRIDGE_PURE_PYTHON": "1"})
        params.append(pytest.param("pure-python", id="pure-python", marks=pure))
    metafunc.parametrize("route_path", params)


ORT = ADAPTERS["onnxruntime"]
CAPS = caps_of("onnxruntime")
SHAPE = (32, 32)  # up to 4 KiB: a heap block the allocations below would be handed once it is freed
B11 = "float8_e4m3b11fnuz"  # ml_dtypes holds it; ONNX Runtime has no such type (always a view or an upcast)
Made = tuple[Any, np.ndarray]  # (the OrtValue, the values it must hold: a copy sharing nothing with it)


def _exportable(dtype: str) -> None:
    if dtype in CAPS.cannot_export:
        pytest.skip(f"onnxruntime {ort.__version__} cannot export {dtype} (capability row cannot_export)")


def _torch_bits(t: Any) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def _consumers(value: Any, dtype: str) -> list[tuple[str, Any, Callable[[Any], int], Callable[[Any], bytes]]]:
    """The OrtValue exported onward: dlbridge's converters, and torch's own from_dlpack where ONNX
    Runtime's capsule says the true dtype (rows exports_uint8 / cannot_export)."""
    found = [
        ("dlbridge.to_torch", dlbridge.to_torch(value), lambda t: t.data_ptr(), _torch_bits),
        ("dlbridge.to_numpy", dlbridge.to_numpy(value), lambda a: a.ctypes.data, lambda a: a.view(np.uint8).tobytes()),
    ]
    if dtype not in CAPS.exports_uint8:
        found.append(("torch.from_dlpack", torch.from_dlpack(value), lambda t: t.data_ptr(), _torch_bits))
    return found


def _churn(nbytes: int) -> list[tuple[int, Any]]:
    """New allocations of the freed block's size from NumPy, ONNX Runtime and torch, filled with 0xA5:
    where a freed buffer would be handed out again. (address, keep-alive) pairs."""
    made: list[tuple[int, Any]] = []
    # up to 64 bytes more: a buffer made 64-byte aligned by over-allocating (every 16: malloc's size classes)
    for size in [nbytes + extra for extra in range(0, 80, 16)] * 16:
        a = np.full(size, 0xA5, np.uint8)
        made.append((a.ctypes.data, a))
        v = ort.OrtValue.ortvalue_from_shape_and_type([size], np.uint8)
        v.update_inplace(a)
        made.append((v.data_ptr(), v))
        t = torch.full((size,), 0xA5, dtype=torch.uint8)
        made.append((t.data_ptr(), t))
    for size in range(16, 4 * nbytes, 16):  # a freed block merged with its neighbours, split again
        a = np.full(size, 0xA5, np.uint8)
        made.append((a.ctypes.data, a))
    return made


def _size(kept: Any) -> int:
    return int(kept.tensor_size_in_bytes()) if isinstance(kept, ort.OrtValue) else int(kept.nbytes)


def _check_survives(make: Callable[[], Made], dtype: str, onward: dict[str, str] | None = None) -> None:
    """``make()``'s OrtValue, exported onward, then dropped with its sources: the consumers still hold
    the right values, dtype (``dtype``, or ``onward``'s per consumer) and memory, and no new allocation
    is handed their memory."""
    value, want = make()
    ptr, nbytes = int(value.data_ptr()), int(value.tensor_size_in_bytes())
    assert ORT.prober.dtype_str(value) == dtype and tuple(value.shape()) == want.shape
    assert nbytes == want.nbytes > 0
    consumers = _consumers(value, dtype)
    del value
    gc.collect()
    churned = _churn(nbytes)
    landed = [hex(a) for a, kept in churned if a < ptr + nbytes and ptr < a + _size(kept)]
    expected = np.ascontiguousarray(want).view(np.uint8).tobytes()
    for name, out, address, raw in consumers:
        assert address(out) == ptr, f"{name}: not the OrtValue's memory"
        assert str(out.dtype).removeprefix("torch.") == (onward or {}).get(name, dtype), f"{name}: {out.dtype}"
        assert raw(out) == expected, f"{name}: the values changed after the OrtValue was dropped"
    assert not landed, f"memory the consumers still use was handed out again at {landed}"


# --- the adapter's builders -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bool", "int64", "float8_e4m3fn"])
def test_from_host_owns_its_memory(dtype: str) -> None:
    def make() -> Made:
        host = reference(dtype, SHAPE)
        return ORT.from_host(host, (1, 0)), host.copy()

    if dtype in CAPS.cannot_export:  # before 1.32 (float8): made all the same, never exported onward
        value, want = make()
        assert ORT.prober.dtype_str(value) == dtype and tuple(value.shape()) == want.shape
        assert ORT.prober.host_bytes(value).tobytes() == want.view(np.uint8).tobytes()
        return
    _check_survives(make, dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bool"])
def test_copy_owns_its_memory(dtype: str) -> None:
    def make() -> Made:
        host = reference(dtype, SHAPE)
        bits = host.view(f"u{host.dtype.itemsize}") if dtype == "bfloat16" else host
        onnx = {"float32": 1, "bfloat16": 16, "bool": 9}[dtype]
        source = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx)  # the caller's, over NumPy memory
        out = ORT.copy(source)
        assert out.data_ptr() != source.data_ptr()
        return out, host.copy()

    _check_survives(make, dtype)


def _ortvalue_of_torch(ref: np.ndarray) -> Any:
    """An OrtValue that owns its memory already (ONNX Runtime's import of a torch capsule): what
    ``view`` reinterprets in the pipeline. float32 and uint8 sources (every version imports them)."""
    return ort.OrtValue.from_dlpack(torch.from_numpy(ref.copy()).__dlpack__())


@pytest.mark.parametrize(("src", "dtype"), [("float32", "int32"), ("float32", "uint32"), ("uint16", "bfloat16"),
                                            ("uint8", "bool"), ("uint8", "float8_e4m3fn")])  # fmt: skip
def test_view_holds_its_source_through_the_c_object(src: str, dtype: str) -> None:
    _exportable(dtype)
    if dtype != "bool" and dtype not in CAPS.imports:
        pytest.skip(f"onnxruntime {ort.__version__} imports no {dtype} (tested below: refused)")

    def make() -> Made:
        ref = reference(dtype, SHAPE)
        source = _ortvalue_of_torch(np.ascontiguousarray(ref).view(src))
        out = ORT.view(source, dtype)
        assert out.data_ptr() == source.data_ptr()  # zero-copy
        return out, ref

    _check_survives(make, dtype)


def test_view_of_an_ortvalue_over_numpy_memory_keeps_that_memory() -> None:
    # The caller's OrtValue over NumPy memory: its wrapper holds the NumPy array, the view holds the wrapper.
    def make() -> Made:
        ref = reference("float32", SHAPE)
        source = ort.OrtValue.ortvalue_from_numpy(ref.copy())
        return ORT.view(source, "int32"), ref.view(np.int32).copy()

    _check_survives(make, "int32")


def test_view_to_a_dtype_it_cannot_import_is_refused_naming_the_upgrade() -> None:
    if "float8_e4m3fn" in CAPS.imports:
        pytest.skip(f"onnxruntime {ort.__version__} imports float8_e4m3fn (tested above)")
    ref = np.arange(6, dtype=np.uint8)
    source = _ortvalue_of_torch(ref)
    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r'float8_e4m3fn view.*"onnxruntime>=1\.32"'):
        ORT.view(source, "float8_e4m3fn")
    np.testing.assert_array_equal(source.numpy(), ref)  # the source as it was


@pytest.mark.parametrize("logical", ["bfloat16", "float8_e4m3fn"])
def test_upcasts_own_their_memory(logical: str) -> None:
    def make() -> Made:
        ref = reference(logical, SHAPE)
        bits = ref.view(f"u{ref.dtype.itemsize}")
        source = (
            _ortvalue_of_torch(bits) if logical == "float8_e4m3fn" else ort.OrtValue.ortvalue_from_numpy(bits.copy())
        )
        if logical == "bfloat16":
            return ORT.bf16_bits_to_f32(source), ref.astype(np.float32)
        from dlbridge._dtypes import decode_table

        table = decode_table(logical)
        assert table is not None
        return ORT.lookup_f32(table, source), ref.astype(np.float32)

    _check_survives(make, "float32")


# --- dlbridge.to_onnxruntime: the results of each path ---------------------------------------------


def _check_each_result(source: Callable[[], tuple[Any, np.ndarray]], convert: Callable[[Any], Any], dtype: str,
                       onward: dict[str, str] | None = None, shares: bool | None = None) -> None:  # fmt: skip
    """``convert(x)`` cold and again (the fast route may replay it the second time), for a fresh ``x,
    want = source()`` each time: each result survives ``x`` and itself (``_check_survives``); ``shares``:
    whether the results must be ``x``'s memory (True), new memory (False), or either (None)."""
    for pick in range(2):

        def make(pick: int = pick) -> Made:
            x, want = source()
            outs = [convert(x), convert(x)]
            if shares is not None:
                address = x.data_ptr() if isinstance(x, torch.Tensor) else x.ctypes.data
                assert all((o.data_ptr() == address) is shares for o in outs)
            return outs[pick], want

        _check_survives(make, dtype, onward)


def _torch_of(ref: np.ndarray) -> Any:
    if ref.dtype.type.__module__ == "ml_dtypes":
        return torch.from_numpy(ref.view(f"u{ref.dtype.itemsize}").copy()).view(getattr(torch, ref.dtype.name))
    return torch.from_numpy(ref.copy())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bool"])
def test_copy_true_results_own_their_memory(dtype: str) -> None:
    if dtype not in CAPS.imports:  # torch's bool capsule says kDLBool: refused before 1.32 (its own tests)
        pytest.skip(f"onnxruntime {ort.__version__} imports no {dtype}")

    def source() -> tuple[Any, np.ndarray]:
        ref = reference(dtype, SHAPE)
        return _torch_of(ref), ref

    _check_each_result(source, lambda x: dlbridge.to_onnxruntime(x, copy=True), dtype, shares=False)


def _b11(want: Callable[[np.ndarray], np.ndarray]) -> Callable[[], tuple[Any, np.ndarray]]:
    def source() -> tuple[Any, np.ndarray]:
        ref = reference(B11, SHAPE)  # ml_dtypes' float8_e4m3b11fnuz: ONNX Runtime has no such type
        return ref.copy(), want(ref)

    return source


def test_fallback_view_results_own_their_memory() -> None:
    # The view remembers its dtype: NumPy (ml_dtypes) gets it back, torch (which has none) the bits.
    view = _b11(lambda ref: ref.view(np.uint8))
    _check_each_result(view, lambda x: dlbridge.to_onnxruntime(x, fallback="view"), "uint8",
                       {"dlbridge.to_numpy": B11}, shares=True)  # fmt: skip


def test_fallback_upcast_results_own_their_memory() -> None:
    upcast = _b11(lambda ref: ref.astype(np.float32))
    _check_each_result(upcast, lambda x: dlbridge.to_onnxruntime(x, fallback="upcast"), "float32", shares=False)


def _transposed() -> tuple[Any, np.ndarray]:
    ref = reference("float32", SHAPE)  # ONNX Runtime takes dense row-major only: dlbridge copies it
    return torch.from_numpy(ref.T.copy()).T, ref


def _read_only() -> tuple[Any, np.ndarray]:
    ref = reference("float32", SHAPE)  # an OrtValue has no read-only state: copy=True copies it
    x = ref.copy()
    x.flags.writeable = False
    return x, ref


@pytest.mark.parametrize(("source", "copy"), [(_transposed, None), (_read_only, True)], ids=["transposed", "read-only"])
def test_copies_a_source_needs_own_their_memory(
    source: Callable[[], tuple[Any, np.ndarray]], copy: bool | None
) -> None:
    _check_each_result(source, lambda x: dlbridge.to_onnxruntime(x, copy=copy), "float32", shares=False)


@pytest.mark.parametrize("copy", [None, True])
def test_copies_from_another_device_own_their_memory(monkeypatch: pytest.MonkeyPatch, copy: bool | None) -> None:
    # A simulated CUDA tensor (tests/simcuda: not GPU evidence) brought to the host for ONNX Runtime.
    from tests.simcuda.harness import Sim, modelled_stack

    modelled_stack()
    sim = Sim(monkeypatch)
    try:

        def source() -> tuple[Any, np.ndarray]:
            ref = reference("float32", SHAPE)
            return sim.cuda_tensor(torch.from_numpy(ref.copy())), ref

        def convert(x: Any) -> Any:
            return dlbridge.to_onnxruntime(x, device="cpu", copy=copy)

        _check_each_result(source, convert, "float32", shares=False)
    finally:
        sim.close()


def test_the_copy_is_aligned_for_consumers_that_need_it() -> None:
    # ONNX Runtime's allocation is 64-byte aligned: JAX shares it rather than copying.
    jax = need("jax")
    value = ORT.from_host(reference("float32", SHAPE), (1, 0))
    assert value.data_ptr() % 64 == 0
    out = dlbridge.to_jax(value)
    assert out.unsafe_buffer_pointer() == value.data_ptr()
    np.testing.assert_array_equal(np.asarray(out), ORT.prober.to_host(value))
    assert np_dtype(str(jax.numpy.asarray(out).dtype)) == np.float32
