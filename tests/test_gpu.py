"""The conversion matrix on CUDA: torch, CuPy and JAX, plus devices and the stream handshake.

Skipped with the reason where CUDA is absent. Crash-prone handoffs (a consumer's own
from_dlpack on a dtype it may reject) are never made here; dlbridge's own paths are.
"""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from tests._arrays import (
    DTYPES,
    LAYOUTS,
    apply_layout,
    base_shape,
    bits,
    dtype_name,
    layout_of,
    reference,
    to_host,
    torch_from,
)
from tests.conftest import need, readme_block

pytestmark = pytest.mark.gpu

GPU_FRAMEWORKS = ("torch", "cupy", "jax")
CONVERT = {"torch": dlbridge.to_torch, "cupy": dlbridge.to_cupy, "jax": dlbridge.to_jax, "numpy": dlbridge.to_numpy}


def _gpu_source(framework: str, dtype: str, layout: str):
    """A CUDA source in ``framework`` with known bits; the layout is applied *on the device*, so
    "transposed" and "sliced" really hand over strided CUDA memory (torch and CuPy)."""
    full = reference(dtype, base_shape(layout))
    expected = layout_of(full, layout)
    if framework == "torch":
        return apply_layout(torch_from(full).cuda(), layout), expected
    if framework == "cupy":
        cp = need("cupy")
        if dtype.startswith("float8_"):
            pytest.skip("CuPy cannot make float8 arrays")
        if full.dtype.type.__module__ == "ml_dtypes":
            try:  # upload the raw bits, then label them (CuPy >= 14 holds bf16)
                dense = cp.asarray(full.view(f"u{full.dtype.itemsize}")).view(full.dtype)
            except (TypeError, ValueError) as err:
                pytest.skip(f"CuPy {cp.__version__} cannot make {dtype} arrays ({err})")
        else:
            dense = cp.asarray(full)
        return apply_layout(dense, layout), expected
    if framework == "jax":
        import jax

        # JAX cannot slice or transpose without a copy: its "layouts" are fresh dense arrays.
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
    # JAX arrays are immutable, torch and CuPy have no read-only arrays: refused by default, naming
    # readonly="drop", which shares the memory writable as their own from_dlpack does
    from dlbridge._adapters import ADAPTERS

    immutable = not ADAPTERS[producer].mutable_arrays and not ADAPTERS[consumer].capabilities().readonly_arrays
    opts = {"readonly": "drop"} if immutable else {}
    if not _holds(consumer, dtype):
        with pytest.raises(dlbridge.UnsupportedDtypeError):
            CONVERT[consumer](src)
        view = CONVERT[consumer](src, fallback="view", **opts)
        assert _ptr(consumer, view) == _ptr(producer, src) or expected.size == 0
        back = dlbridge.convert(view, producer)
        np.testing.assert_array_equal(bits(to_host(producer, back)), bits(expected))
        return
    if immutable:
        with pytest.raises(dlbridge.ReadOnlyError, match='readonly="drop"'):
            CONVERT[consumer](src)
    out = CONVERT[consumer](src, **opts)
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
    for src in (torch.arange(4.0, device="cpu").to(torch.bfloat16), np.arange(4.0, dtype=np.float32)):
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


def test_inspect_every_cuda_producer(cuda) -> None:
    """inspect() exports without synchronising: -1 where DLPack allows it, None for JAX (which would
    hand -1 to XLA as a stream handle)."""
    for producer in GPU_FRAMEWORKS:
        need(producer)
        src, expected = _gpu_source(producer, "float32", "contiguous")
        info = dlbridge.inspect(src)
        assert (info.device_type, info.device_id, info.dtype, info.shape) == ("cuda", 0, "float32", expected.shape)
        assert info.data_ptr == _ptr(producer, src)


@pytest.mark.parametrize("consumer", GPU_FRAMEWORKS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn"])
def test_cpu_sources_to_cuda_with_device(cuda, consumer: str, dtype: str) -> None:
    """NumPy (ml_dtypes) and unknown-producer CPU memory, uploaded by the consumer itself: the bytes
    go across labelled with the dtype the consumer imports, and the plan is applied on the GPU."""
    need(consumer)
    from tests.ctypes_producer import CtypesArray

    full = reference(dtype, (3, 4))
    unknown = CtypesArray.from_bytes(full.tobytes(), dtype, full.shape)
    for src in (full, unknown):
        holder = consumer
        if _holds(consumer, dtype):
            out = CONVERT[consumer](src, device="cuda")
        else:
            with pytest.raises(dlbridge.UnsupportedDtypeError):
                CONVERT[consumer](src, device="cuda")
            view = CONVERT[consumer](src, device="cuda", fallback="view")
            assert dtype_name(consumer, view) == f"uint{full.dtype.itemsize * 8}"
            out, holder = dlbridge.to_torch(view), "torch"  # the view remembers its dtype on the GPU
        info = dlbridge.inspect(out)
        assert (info.device_type, info.dtype) == ("cuda", dtype)
        np.testing.assert_array_equal(bits(to_host(holder, out)), bits(full))


def test_pinned_torch_tensors_are_shared_as_cpu_memory(cuda) -> None:
    """torch reports pinned tensors as kDLCUDAHost (3); CPU consumers share them zero-copy."""
    torch = need("torch")
    t = torch.arange(12, dtype=torch.float32, device="cpu").reshape(3, 4).pin_memory()
    assert t.__dlpack_device__()[0] == 3
    n = dlbridge.to_numpy(t)
    assert n.__array_interface__["data"][0] == t.data_ptr() and n.tolist() == t.tolist()
    again = dlbridge.to_torch(t)
    assert again.data_ptr() == t.data_ptr() and again.device.type == "cpu"
    b = dlbridge.to_numpy(t.to(torch.bfloat16).pin_memory())
    assert b.dtype.name == "bfloat16" and b.astype(np.float32).tolist() == t.tolist()
    c = dlbridge.to_cupy(t, device="cuda")
    assert c.get().tolist() == t.tolist()


def test_jax_consumer_refuses_a_stream_it_would_not_read_on(cuda) -> None:
    torch = need("torch")
    need("jax")
    t = torch.ones(4, device="cuda")
    side = torch.cuda.Stream()
    with pytest.raises(dlbridge.OptionError, match="stream=None"):
        dlbridge.to_jax(t, stream=side.cuda_stream)
    assert np.asarray(dlbridge.to_jax(t, stream=-1)).tolist() == [1.0] * 4  # no synchronisation: allowed


def test_second_gpu_source_while_the_first_is_current(cuda) -> None:
    """torch refuses to export a tensor from a GPU other than the current one; dlbridge switches."""
    torch = need("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    t = torch.arange(4.0, device="cuda:1")
    assert torch.cuda.current_device() == 0
    for consumer in ("cupy", "jax", "torch"):
        need(consumer)
        out = CONVERT[consumer](t)
        info = dlbridge.inspect(out)
        assert info.device == (2, 1) and info.data_ptr == t.data_ptr()
    assert torch.cuda.current_device() == 0


def test_cupy_managed_memory_is_shared_as_cuda_memory(cuda) -> None:
    """CuPy exports managed (unified) memory as kDLCUDAManaged (13), which torch and JAX do not
    import; dlbridge relabels it as CUDA memory on its device, zero-copy."""
    cp = need("cupy")
    pool = cp.cuda.MemoryPool(cp.cuda.malloc_managed)
    previous = cp.cuda.get_allocator()
    cp.cuda.set_allocator(pool.malloc)
    try:
        m = cp.arange(12, dtype=cp.float32)
    finally:
        cp.cuda.set_allocator(previous)
    if m.__dlpack_device__()[0] != 13:
        pytest.skip(f"this CuPy exports managed memory as device type {m.__dlpack_device__()[0]}")
    for consumer in ("torch", "jax", "cupy"):
        need(consumer)
        out = CONVERT[consumer](m)
        assert _ptr(consumer, out) == m.data.ptr
        assert to_host(consumer, out).tolist() == list(range(12))


def test_cpu_uploads_read_only_remembered_and_relabelled(cuda) -> None:
    """The upload path: a read-only source (the upload copies, so no copy=True needed), a remembered
    fallback="view" source (its dtype restored once, not twice), and dtype= to a dtype NumPy cannot hold."""
    torch = need("torch")
    need("jax")
    ro = np.arange(6, dtype=np.float32)
    ro.flags.writeable = False
    for fn in (dlbridge.to_torch, dlbridge.to_jax):
        out = fn(ro, device="cuda")
        assert dlbridge.inspect(out).device_type == "cuda" and to_host(fn.__name__[3:], out).tolist() == ro.tolist()
    if hasattr(torch, "float4_e2m1fn_x2"):
        packed = np.array([0x12, 0x34], dtype=np.uint8)
        t = dlbridge.to_torch(packed, dtype="float4_e2m1fn_x2", device="cuda")
        assert t.dtype == torch.float4_e2m1fn_x2 and t.is_cuda
        assert t.view(torch.uint8).cpu().tolist() == [0x12, 0x34]
        v = dlbridge.to_numpy(torch.from_numpy(packed).view(torch.float4_e2m1fn_x2), fallback="view")
        assert v.dtype == np.uint8  # NumPy cannot hold the packed pair: a remembered view
        back = dlbridge.to_torch(v, device="cuda")
        assert back.dtype == torch.float4_e2m1fn_x2 and back.view(torch.uint8).cpu().tolist() == [0x12, 0x34]
        j = dlbridge.to_jax(v, device="cuda", fallback="view")  # JAX cannot hold it either: a view again
        assert j.dtype == np.uint8 and np.asarray(j).tolist() == [0x12, 0x34]


def test_readme_example_runs_as_written(cuda) -> None:
    """The README's CUDA example, run as written (its one refused call expected to raise)."""
    need("cupy")
    block = readme_block("gpu-example")
    refused = "dlbridge.to_cupy(f8)  "
    assert refused in block
    lines = [
        f"with pytest.raises(dlbridge.UnsupportedDtypeError):\n    {line.strip()}" if line.startswith(refused) else line
        for line in block.splitlines()
    ]
    scope: dict = {"pytest": pytest}
    exec("\n".join(lines), scope)  # the README's own code
    t, c, u, back = scope["t"], scope["c"], scope["u"], scope["back"]
    assert c.data.ptr == t.data_ptr() and str(c.dtype) == "bfloat16"
    assert scope["n"].dtype.name == "bfloat16"
    assert u.dtype == np.uint8 and back.dtype == scope["f8"].dtype and back.data_ptr() == scope["f8"].data_ptr()
    assert scope["info"].dtype == "bfloat16" and scope["info"].device_type == "cuda"
