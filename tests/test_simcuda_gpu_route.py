"""The route's GPU half against simulated CUDA (tests/simcuda/): the stream handshake, per pair. Not GPU evidence.

For every CUDA pair (torch <-> CuPy, JAX -> torch / CuPy, torch / CuPy -> JAX, CuPy -> CuPy), dtype and
stream case, a warm conversion runs no pipeline function and exports exactly once; the consumer's stream
waits on the producer's work only where the two streams differ (torch's DLPack C exchange API exports
without an event where its current stream is the consumer's, and torch's Python ``__dlpack__`` is not
called then); a JAX consumer gets the capsule exported with the stream it passes. Values, dtype, data
pointer and device are checked each time, and the compiled route, the pure-Python route and the pipeline
give the same result with the same handshake (the differential test). Runs in a child pytest (``isolated``).
"""

from __future__ import annotations

from functools import partial

import ml_dtypes
import numpy as np
import pytest

import dlbridge
from dlbridge import _accelerator
from dlbridge._options import NOT_GIVEN
from dlbridge._route import _learn, _replay
from tests._route_helpers import PipelineCount
from tests.simcuda import exact
from tests.simcuda.harness import Sim, modelled_stack

pytestmark = [pytest.mark.simcuda, pytest.mark.isolated]

torch, jax = modelled_stack()
jnp = jax.numpy

STREAM = 0x5B00  # a consumer's current stream that is not the producer's
PAIRS = [("torch", "cupy"), ("cupy", "torch"), ("jax", "torch"), ("jax", "cupy"), ("cupy", "cupy"),
         ("torch", "jax"), ("cupy", "jax")]  # fmt: skip
DTYPES = ["float32", "bfloat16", "bool"]


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch):
    s = Sim(monkeypatch)
    s.cupy("14.2.0")
    s.torch()
    exact.install(monkeypatch)
    s.jax()
    yield s
    s.close()


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch) -> PipelineCount:
    return PipelineCount(monkeypatch)


def _values(ref):
    """ref's values as NumPy (ml_dtypes for bfloat16 and float8_e4m3fn)."""
    if ref.dtype == torch.bfloat16:
        return ref.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    if ref.dtype == torch.float8_e4m3fn:
        return ref.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    return ref.numpy()


def _source(sim: Sim, producer: str, ref):
    """(array of exactly the producer's own type on cuda:0 holding ref's values, its data pointer)."""
    if producer == "torch":
        x = exact.cuda_tensor(ref.clone())
        return x, x.data_ptr()
    if producer == "cupy":
        x = sim.cp.asarray(_values(ref))
        return x, x.data.ptr
    x = sim.gpu.claim(jnp.asarray(_values(ref)), sim.gpu.devices[0])
    return x, x.unsafe_buffer_pointer()


def _result(out, target: str) -> tuple[str, bytes, int, int]:
    """(dtype name, bytes, data pointer, device index) of a consumer's result."""
    if target == "torch":
        plain = out.as_subclass(torch.Tensor)
        return str(plain.dtype).removeprefix("torch."), plain.view(torch.uint8).numpy().tobytes(), out.data_ptr(), \
            out.device.index  # fmt: skip
    if target == "cupy":
        return str(out.dtype), out.get().tobytes(), out.data.ptr, out.device.id
    host = np.asarray(out)
    return str(host.dtype), host.tobytes(), out.unsafe_buffer_pointer(), 0


def _readonly(producer: str, target: str) -> str:
    """readonly= for the pair: JAX arrays are immutable, so torch and CuPy (no read-only arrays) share them
    only as readonly="drop" asks (dlbridge/_pipeline/_handoff.py ``_import_record``)."""
    return "drop" if producer == "jax" and target != "jax" else "keep"


def _use_stream(sim: Sim, target: str) -> None:
    if target == "torch":
        sim.torch_cuda.current[0] = STREAM
    elif target == "cupy":
        sim.cp.cuda.Stream(ptr=STREAM).use()


def _expected_stream(sim: Sim, target: str, streams: str) -> int | None:
    """The stream the producer must be handed (None: exported with no stream, the exchange API)."""
    if target == "jax":
        return sim.log.of("consume", "jax")[0].stream  # the stream JAX passes
    return STREAM if streams == "different" else 1  # 1: the legacy default stream, as DLPack spells it


@pytest.mark.parametrize("streams", ["same", "different"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("producer,target", PAIRS)
def test_a_warm_cuda_conversion_exports_once_and_waits_only_when_the_streams_differ(
    sim, pipeline, producer, target, dtype, streams
):
    if target == "jax" and streams == "same":
        pytest.skip("JAX reads on a stream of its own choosing: the streams always differ")
    ref = torch.arange(8).to(getattr(torch, dtype))
    x, ptr = _source(sim, producer, ref)
    convert = getattr(dlbridge, f"to_{target}")
    to = partial(convert, readonly=_readonly(producer, target))
    to(x)  # the pipeline converts it and the route learns
    if streams == "different":
        _use_stream(sim, target)
    for _ in range(3):
        sim.log.clear()
        pipeline.calls = 0
        out = to(x)
        assert pipeline.calls == 0, "the route declined a warm conversion"
        assert sim.log.exports(producer) == 1, sim.log
        wanted = _expected_stream(sim, target, streams)
        # the compiled route exports through torch's DLPack C exchange API; the Python twin through
        # torch's own __dlpack__(stream=1), which asks no wait of an equal stream
        exchange = producer == "torch" and streams == "same" and _accelerator.accel is not None
        handed = sim.log.streams_handed(producer)
        assert handed == [None if exchange else wanted], sim.log
        if exchange:  # torch's DLPack C exchange API: no Python __dlpack__, no event
            assert all(c.detail.get("exchange") for c in sim.log.of("export", "torch")), sim.log
        waits = sim.log.waits(producer)
        same = (streams == "same" or producer == target) and producer != "jax"  # one framework: one current stream
        assert waits == ([] if same else [wanted]), sim.log
        assert _result(out, target) == (dtype, _values(ref).tobytes(), ptr, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("producer,target", PAIRS)
def test_the_compiled_route_the_python_route_and_the_pipeline_agree(sim, producer, target, dtype):
    """Differential: each of the three converts the same warm array to the same result (values, dtype,
    memory, device), with one export handed the same stream."""
    ref = torch.arange(8).to(getattr(torch, dtype))
    x, ptr = _source(sim, producer, ref)
    spec = _learn.SPECS[target]
    readonly = _readonly(producer, target)
    getattr(dlbridge, f"to_{target}")(x, readonly=readonly)  # warm
    args = (x, NOT_GIVEN, None, None, None, None, readonly)
    runs = {"python": lambda: _replay._convert_py(spec, *args), "pipeline": lambda: _replay._pipeline(spec, *args)}
    if _accelerator.accel is not None:  # (without it, the other two)
        runs["compiled"] = lambda: _accelerator.accel.convert(spec, *args)
    seen = {}
    for name, run in runs.items():
        sim.log.clear()
        out = run()
        streams = sim.log.streams_handed(producer)
        assert len(streams) == 1, (name, sim.log)
        seen[name] = (_result(out, target), streams[0] is None or target == "jax" or streams[0])
    assert seen.get("compiled", seen["python"]) == seen["python"], seen
    assert seen["python"][0] == seen["pipeline"][0] == (dtype, _values(ref).tobytes(), ptr, 0), seen


@pytest.mark.parametrize("target", ["torch", "cupy"])
def test_a_cuda_jax_array_is_refused_by_default_warm_or_cold(sim, target):
    """The read-only rule on the GPU half too: JAX arrays are immutable, so the default refuses them
    every time (cold and after a readonly="drop" conversion taught the route) and leaves them as they were."""
    ref = torch.arange(8).to(torch.float32)
    x, ptr = _source(sim, "jax", ref)
    to = getattr(dlbridge, f"to_{target}")
    for _ in range(2):
        with pytest.raises(dlbridge.ReadOnlyError, match=r'JAX arrays are immutable.*readonly="drop"'):
            to(x)
        assert _result(to(x, readonly="drop"), target) == ("float32", _values(ref).tobytes(), ptr, 0)
    assert _result(x, "jax")[1:] == (_values(ref).tobytes(), ptr, 0)  # the source as it was


def test_torch_on_another_stream_is_handed_the_consumers_with_its_own_handshake(sim, pipeline):
    """torch's current stream differs from CuPy's: torch's own __dlpack__(stream=cupy's) makes CuPy's
    stream wait (one export, one wait), on the route, not the pipeline."""
    x, ptr = _source(sim, "torch", torch.arange(4.0))
    dlbridge.to_cupy(x)
    sim.torch_cuda.current[0] = 0x7700  # torch works on a side stream; CuPy on the default one
    sim.log.clear()
    pipeline.calls = 0
    out = dlbridge.to_cupy(x)
    assert pipeline.calls == 0
    assert sim.log.streams_handed("torch") == [1] and sim.log.waits("torch") == [1], sim.log
    assert _result(out, "cupy")[2:] == (ptr, 0)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "bfloat16"])
@pytest.mark.parametrize("producer", ["torch", "jax"])
def test_a_warm_view_into_cupy_is_replayed_with_its_record(sim, pipeline, producer, dtype):
    """fallback="view" on the GPU half: one export, no pipeline, the same-width unsigned view of the same
    memory, and the record that restores the dtype when the view is handed back."""
    sim.cupy("13.3.0")  # CuPy 13.3 holds neither bfloat16 nor float8: both are views
    ref = torch.arange(8).to(getattr(torch, dtype))
    x, ptr = _source(sim, producer, ref)
    options = {"readonly": "drop"} if producer == "jax" else {}  # (JAX's arrays are read-only memory)
    dlbridge.to_cupy(x, fallback="view", **options)
    for _ in range(2):
        sim.log.clear()
        pipeline.calls = 0
        view = dlbridge.to_cupy(x, fallback="view", **options)
        assert pipeline.calls == 0, "the route declined a warm view conversion"
        assert sim.log.exports(producer) == 1, sim.log
        width = ref.element_size()
        assert str(view.dtype) == f"uint{8 * width}" and view.data.ptr == ptr
        assert view.get().tobytes() == _values(ref).tobytes()
    back = dlbridge.to_torch(view)
    assert back.dtype == getattr(torch, dtype) and back.data_ptr() == ptr


@pytest.mark.parametrize("producer", ["torch", "cupy"])
def test_a_failed_export_inside_jaxs_ask_is_the_conversions_one_export(sim, monkeypatch, producer):
    """JAX asks for the capsule inside its from_dlpack, with its own stream (the deferred export). Where
    the producer's export raises there, the route hands that error to the pipeline, which reports it
    without asking the producer a second time: one export per conversion, as on every other path."""
    x, _ = _source(sim, producer, torch.arange(4.0))
    dlbridge.to_jax(x)  # warm: the route replays the next call
    asked: list[object] = []
    real = type(x).__dlpack__

    def failing(self, *args, **kwargs):
        if self is x or exact.index_of(self) is not None:  # x, or the alias torch's route exports
            asked.append(kwargs.get("stream"))
            raise BufferError("the producer cannot export this array now")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(x), "__dlpack__", failing)
    with pytest.raises(dlbridge.DLBridgeError, match="cannot export this array now") as raised:
        dlbridge.to_jax(x)
    assert len(asked) == 1, asked
    assert isinstance(raised.value, dlbridge.ProducerError), raised.value
    monkeypatch.setattr(type(x), "__dlpack__", real)
    assert dlbridge.to_jax(x).shape == (4,)  # and the route goes on replaying
