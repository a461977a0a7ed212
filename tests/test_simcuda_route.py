"""The fast route's GPU half against simulated CUDA (tests/simcuda/): the protocol only, never GPU evidence.

Warm conversions of a framework's own GPU arrays — exactly ``torch.Tensor`` (tests/simcuda/exact.py),
CuPy's ``ndarray``, JAX's ``ArrayImpl`` — replay without the pipeline: one export, handed the
consumer's current stream on the array's device, the consumer importing the capsule as it is (no
second handshake). Declines happen before any export. Runs in a child pytest (``isolated``).
"""

from __future__ import annotations

import contextlib
import functools

import ml_dtypes
import numpy as np
import pytest

import dlbridge
from dlbridge._errors import DLBridgeError
from tests._route_helpers import PipelineCount
from tests.simcuda import exact
from tests.simcuda.harness import Sim, modelled_stack

pytestmark = [pytest.mark.simcuda, pytest.mark.isolated]

torch, jax = modelled_stack()
jnp = jax.numpy

STREAM = 0x5A00  # the consumer's current stream in these tests (not the default stream)


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch):
    s = Sim(monkeypatch)
    s.cupy("14.2.0")
    s.torch()
    exact.install(monkeypatch)
    yield s
    s.close()


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch) -> PipelineCount:
    return PipelineCount(monkeypatch)


def _source(sim: Sim, producer: str, ref, device: int = 0):
    """(array, its data pointer) of exactly the producer's own type, on ``cuda:<device>``, holding the
    values of the CPU tensor ``ref``."""
    values = ref.numpy() if ref.dtype != torch.bfloat16 else ref.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    if producer == "torch":
        x = exact.cuda_tensor(ref.clone(), device)
        assert type(x) is torch.Tensor
        return x, x.data_ptr()
    if producer == "cupy":
        with sim.cp.cuda.Device(device):
            x = sim.cp.asarray(values)
        assert type(x) is sim.cp.ndarray
        return x, x.data.ptr
    gpu = sim.gpu or sim.jax()
    x = gpu.claim(jax.device_put(values, jax.devices("cpu")[0]), gpu.devices[device])
    assert type(x).__name__ == "ArrayImpl"
    return x, x.unsafe_buffer_pointer()


def _use_stream(sim: Sim, target: str, device: int = 0) -> None:
    """Make ``STREAM`` the consumer's current stream on ``cuda:<device>``."""
    if target == "torch":
        sim.torch_cuda.current[device] = STREAM
    else:
        with sim.cp.cuda.Device(device):
            sim.cp.cuda.Stream(ptr=STREAM).use()


def _result(out, target: str) -> tuple[str, bytes, int, int]:
    """(dtype name, bytes, data pointer, device index) of a consumer's result."""
    if target == "torch":
        plain = out.as_subclass(torch.Tensor)
        return str(plain.dtype).removeprefix("torch."), plain.view(torch.uint8).numpy().tobytes(), out.data_ptr(), \
            out.device.index  # fmt: skip
    return str(out.dtype), out.get().tobytes(), out.data.ptr, out.device.id


def _bytes(ref) -> bytes:
    return ref.view(torch.uint8).numpy().tobytes()


PAIRS = [("torch", "cupy"), ("cupy", "torch"), ("jax", "torch"), ("jax", "cupy"), ("cupy", "cupy")]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "bool"])
@pytest.mark.parametrize("producer,target", PAIRS)
def test_warm_gpu_conversions_replay_with_one_export(sim, pipeline, producer, target, dtype):
    ref = torch.arange(6, device="cpu").to(getattr(torch, dtype))
    x, ptr = _source(sim, producer, ref)
    to = getattr(dlbridge, f"to_{target}")
    if producer == "jax":  # JAX's arrays are read-only memory: shared with readonly="drop"
        to = functools.partial(to, readonly="drop")
    to(x)  # the pipeline converts it and the route learns x's type
    _use_stream(sim, target)
    for _ in range(3):
        sim.log.clear()
        pipeline.calls = 0
        out = to(x)
        assert pipeline.calls == 0, "the route declined a warm conversion"
        assert sim.log.exports(producer) == 1, sim.log
        assert sim.log.streams_handed(producer) == [STREAM], sim.log  # the consumer's current stream
        if target == "torch":  # asked through torch's DLPack C exchange API (current_work_stream), once
            assert len(sim.log.of("stream_query", "torch")) == 1, sim.log
        assert _result(out, target) == (dtype, _bytes(ref), ptr, 0)  # values, dtype, the same memory and device


def test_the_producer_is_handed_the_stream_of_the_arrays_device(sim, pipeline):
    x, ptr = _source(sim, "torch", torch.arange(4.0, device="cpu"), device=1)  # cuda:1 while cuda:0 is current
    dlbridge.to_cupy(x)
    _use_stream(sim, "cupy", device=1)
    sim.log.clear()
    pipeline.calls = 0
    out = dlbridge.to_cupy(x)
    # torch's handshake is made on the current device: the route declines before any export, and the
    # pipeline switches to cuda:1 and exports once, handing torch cupy's stream on device 1, not 0
    assert pipeline.calls == 1
    assert sim.log.streams_handed("torch") == [STREAM], sim.log
    assert [c.detail["device"] for c in sim.log.of("export", "torch")] == [1]
    assert _result(out, "cupy")[2:] == (ptr, 1)
    assert sim.state.current_device == 0  # the switch to device 1 for the export was undone
    sim.state.current_device = 1  # on the current device the route does the same handshake itself
    sim.log.clear()
    pipeline.calls = 0
    out = dlbridge.to_cupy(x)
    assert pipeline.calls == 0 and sim.log.streams_handed("torch") == [STREAM], sim.log
    assert _result(out, "cupy")[2:] == (ptr, 1)


def test_bfloat16_to_cupy_13_3_is_exported_once_and_never_crashes(sim, pipeline):
    cp = sim.cupy("13.3.0")  # crashes on a bfloat16 capsule (SimulatedCrash, a BaseException)
    x = exact.cuda_tensor(torch.arange(6, dtype=torch.float32, device="cpu").to(torch.bfloat16))
    for _ in range(3):
        sim.log.clear()
        with pytest.raises(DLBridgeError):
            dlbridge.to_cupy(x)  # fallback="raise": CuPy 13.3 cannot hold bfloat16
        assert sim.log.exports("torch") == 1, sim.log  # the route's export, handed to the pipeline
        sim.log.clear()
        # fallback="view": the uint16 bits, whose logical dtype dlbridge remembers (the pipeline's step)
        out = dlbridge.to_cupy(x, fallback="view")
        assert type(out) is cp.ndarray and out.dtype == np.uint16
        assert out.data.ptr == x.data_ptr()
        assert np.array_equal(out.get(), x.view(torch.uint16).numpy())
        assert sim.log.exports("torch") == 1, sim.log


@pytest.mark.parametrize("state", ["requires_grad", "strided"])
def test_states_the_route_cannot_replay_are_declined_before_any_export(sim, pipeline, state):
    base = torch.arange(12, dtype=torch.float32, device="cpu").reshape(3, 4)
    x = exact.cuda_tensor(base.t() if state == "strided" else base)
    if state == "requires_grad":
        x.requires_grad_(True)
    dlbridge.to_cupy(
        exact.cuda_tensor(torch.arange(4.0, device="cpu"))
    )  # the route learns torch.Tensor and CuPy's state
    for _ in range(3):
        sim.log.clear()
        pipeline.calls = 0
        with contextlib.suppress(DLBridgeError):
            dlbridge.to_cupy(x)
        assert pipeline.calls == 1  # the pipeline converts (or refuses) it, and says why
        assert sim.log.exports("torch") <= 1, sim.log  # only the pipeline's export, if any
        # the streams are the same (both on the default stream), so the route would export through the
        # exchange API (logged with exchange=True): it never did
        assert not [c for c in sim.log.of("export", "torch") if c.detail.get("exchange")], sim.log


@pytest.mark.parametrize("version", ["13.3.0", "14.2.0"])
def test_managed_memory_into_torch_is_handed_torchs_stream(sim, pipeline, version):
    # torch cannot hold kDLCUDAManaged (13) as such: the pipeline relabels it as the CUDA memory it is,
    # and CuPy is handed torch's current stream on that device (asked as CUDA, torch's own device type).
    cp = sim.cupy(version)
    x = cp.empty(4, np.float32, device=0, kind="managed")
    x._host[...] = np.arange(4)
    _use_stream(sim, "torch")
    for _ in range(2):
        sim.log.clear()
        out = dlbridge.to_torch(x)
        assert sim.log.streams_handed("cupy") == [STREAM], sim.log
        assert out.data_ptr() == x.data.ptr and out.device == torch.device("cuda", 0)


def test_jax_as_consumer_is_replayed_with_jaxs_own_stream(sim, pipeline):
    sim.jax()
    x, ptr = _source(sim, "torch", torch.arange(6.0, device="cpu"))
    dlbridge.to_jax(x)  # the pipeline converts it and the route learns
    for _ in range(3):
        sim.log.clear()
        pipeline.calls = 0
        out = dlbridge.to_jax(x)
        assert pipeline.calls == 0  # JAX asks the route's carrier for the capsule, with its stream
        consumed = sim.log.of("consume", "jax")
        assert sim.log.exports("torch") == 1, sim.log
        assert sim.log.streams_handed("torch") == [consumed[0].stream], sim.log
        assert np.array_equal(np.asarray(out), np.arange(6.0, dtype=np.float32))
        assert out.unsafe_buffer_pointer() == ptr  # the same memory


def test_cpu_arrays_still_take_the_cpu_route(sim, pipeline):
    a = np.arange(6, dtype=np.float32)
    dlbridge.to_torch(a)
    pipeline.calls = 0
    out = dlbridge.to_torch(a)
    assert pipeline.calls == 0 and out.data_ptr() == a.ctypes.data


@pytest.mark.parametrize("target", ["torch", "numpy"])
def test_cpu_jax_arrays_take_the_cpu_route_where_jax_has_a_gpu(sim, pipeline, target):
    """The route is decided per array's device: with a GPU backend in JAX, its CPU arrays still replay
    warm without the pipeline (zero-copy), and its GPU arrays of the same type are declined by the CPU
    half before any export (one export, the GPU half's)."""
    from dlbridge._adapters import ADAPTERS
    from tests.conftest import caps_of

    if target == "numpy" and caps_of("numpy").readonly_imports:
        pytest.skip("NumPy < 2.2 imports read-only: the pipeline makes every result writable, GPU or not")
    gpu = sim.jax()
    assert ADAPTERS["jax"].has_cuda()
    x = jax.device_put(np.arange(6, dtype=np.float32), jax.devices("cpu")[0])
    to = functools.partial(getattr(dlbridge, f"to_{target}"), readonly="drop")  # (read-only JAX memory)
    to(x)  # the pipeline converts it and the route learns JAX's array type
    for _ in range(3):
        pipeline.calls = 0
        out = to(x)
        assert pipeline.calls == 0, "a CPU JAX array took the pipeline"
        ptr = out.data_ptr() if target == "torch" else out.ctypes.data
        assert ptr == x.unsafe_buffer_pointer() and np.asarray(out).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    if target == "torch":
        g, gptr = _source(sim, "jax", torch.arange(6.0, device="cpu"))
        assert g.device is gpu.devices[0]
        to(g)
        _use_stream(sim, "torch")
        sim.log.clear()
        pipeline.calls = 0
        out = to(g)
        assert pipeline.calls == 0 and sim.log.exports("jax") == 1, sim.log  # the GPU half's export only
        assert sim.log.streams_handed("jax") == [STREAM], sim.log
        assert out.data_ptr() == gptr and out.device == torch.device("cuda", 0)
