"""dlbridge's CUDA paths against simulated CUDA (tests/simcuda/): the protocol only, never GPU evidence.

The stand-ins copy CuPy 13.3 / 14.2, torch 2.13, JAX 0.10.2 and XLA from their sources (cited in
tests/simcuda/); the tests pin what dlbridge hands them: one export per conversion, the stream each
producer is told to wait on, the device ids, and that CuPy 13.3 never gets a capsule it crashes on
(``SimulatedCrash``). The module runs in a child pytest (``isolated``): the stand-ins patch torch, JAX
and the adapters' caches for each test and put them back, and a child keeps the parent untouched.
"""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from dlbridge._errors import DLBridgeError, UnsupportedDtypeError
from tests._arrays import jax_cpu
from tests.conftest import run_child
from tests.simcuda import SimulatedCrash
from tests.simcuda.harness import Sim, modelled_stack

pytestmark = [pytest.mark.simcuda, pytest.mark.isolated]

torch, jax = modelled_stack()
jnp = jax.numpy


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch):
    s = Sim(monkeypatch)
    yield s
    s.close()


def _floats(n: int = 6):
    return torch.arange(n, dtype=torch.float32, device="cpu")


# --- the stand-ins themselves (upstream behaviour, no dlbridge) ------------------------------------


def test_stand_ins_reproduce_upstream(sim):
    sim.torch()
    bf16 = sim.cuda_tensor(torch.ones(3, dtype=torch.bfloat16, device="cpu"))
    cp13 = sim.cupy("13.3.0")
    with pytest.raises(SimulatedCrash):
        cp13.from_dlpack(bf16)  # CuPy 13.3: the double free (cupy#8801)
    cp14 = sim.cupy("14.2.0")
    assert str(cp14.from_dlpack(bf16).dtype) == "bfloat16"
    gpu = sim.jax()
    dev = gpu.devices[0]
    streams = [dev.get_stream_for_external_ready_events() for _ in range(5)]
    assert streams[0] != streams[1] and streams[0] == streams[4]  # XLA: round robin over 4
    import ml_dtypes

    fp8 = cp14.asarray(np.arange(4, dtype=np.uint8)).view(ml_dtypes.float8_e4m3fn)  # CuPy's view allows it
    with pytest.raises(BufferError, match="not supported for dlpack export"):
        fp8.__dlpack__()


# --- CuPy 13.3 never gets a capsule it crashes on -------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool"])
@pytest.mark.parametrize("producer", ["torch", "jax"])
def test_cupy133_never_crashes(sim, producer, dtype):
    sim.cupy("13.3.0")
    ref = torch.arange(6, dtype=torch.float32, device="cpu").to(getattr(torch, dtype))
    if producer == "torch":
        x = sim.cuda_tensor(ref)
    else:
        gpu = sim.jax()
        x = gpu.claim(jax_cpu(ref.float().numpy()).astype(dtype))
    for fallback in ("raise", "view", "upcast"):
        try:
            out = dlbridge.to_cupy(x, fallback=fallback, readonly="drop")  # (JAX arrays are read-only)
        except DLBridgeError:
            assert dtype != "float32" and dtype != "bool"
            continue
        assert type(out).__module__ == "cupy"


# --- 1. JAX as consumer reads on the stream the producer waited on --------------------------------


def test_jax_consumer_producer_waits_on_the_stream_jax_reads_on(sim):
    sim.jax()
    t = sim.cuda_tensor(_floats())
    out = dlbridge.to_jax(t)
    assert np.array_equal(np.asarray(out), np.arange(6, dtype=np.float32))
    consumed = sim.log.of("consume", "jax")
    assert len(consumed) == 1
    assert sim.log.exports("torch") == 1, sim.log
    # torch was handed the stream JAX reads on, and made that stream wait
    assert sim.log.streams_handed("torch") == [consumed[0].stream], sim.log
    assert sim.log.waits("torch") == [consumed[0].stream], sim.log


def test_jax_consumer_with_no_sync_stream_asks_jax_nothing(sim):
    sim.jax()
    t = sim.cuda_tensor(_floats())
    dlbridge.to_jax(t, stream=-1)
    assert sim.log.exports("torch") == 1, sim.log
    assert sim.log.waits("torch") == [], sim.log


# --- 2. one export per CUDA conversion, for each producer type -------------------------------------


@pytest.mark.parametrize(
    "producer,target",
    [
        ("torch", "cupy"),
        ("jax", "cupy"),
        ("cupy", "torch"),
        ("cupy", "jax"),
        ("torch", "jax"),
    ],
)
def test_one_export_per_cuda_conversion(sim, producer, target):
    cp = sim.cupy("14.2.0")
    sim.torch()
    gpu = sim.jax()
    if producer == "torch":
        x = sim.cuda_tensor(_floats())
    elif producer == "jax":
        x = gpu.claim(jax_cpu(jnp.arange(6, dtype=jnp.float32)))
    else:
        x = cp.asarray(np.arange(6, dtype=np.float32))
    for _ in range(3):  # the first conversion teaches the fast route the type; later ones replay it
        sim.log.clear()
        getattr(dlbridge, f"to_{target}")(x, readonly="drop")  # (JAX arrays are read-only)
        assert sim.log.exports(producer) == 1, sim.log


# --- 4. CuPy 14 holds float8 views it cannot export -----------------------------------------------


def test_cupy14_cannot_export_float8_views(sim):
    from dlbridge._capabilities import capabilities
    from dlbridge._dtypes import FLOAT8

    cp = sim.cupy("14.2.0")
    sim.torch()
    caps = capabilities("cupy", "14.2.0")
    assert caps.cannot_export >= FLOAT8 - {"float8_e5m2"}  # e5m2 exports, mislabelled: tests/test_simcuda_fp8.py
    assert "bfloat16" not in caps.cannot_export
    import ml_dtypes

    x = cp.asarray(np.arange(4, dtype=np.uint8)).view(ml_dtypes.float8_e4m3fn)
    with pytest.raises(UnsupportedDtypeError, match="cannot export float8_e4m3fn"):
        dlbridge.to_torch(x)
    assert dlbridge.to_torch(x.view(np.uint8)).dtype == torch.uint8  # what the message proposes


# --- 6. device ordinals ---------------------------------------------------------------------------


def test_torch_device_without_index_is_the_current_device(sim):
    from dlbridge._pipeline._devices import parse_device

    sim.torch()
    sim.state.current_device = 1
    assert parse_device(torch.device("cuda"), (2, 0)) == (2, 1)  # torch: "cuda" = the current device
    assert parse_device(torch.device("cuda", 0), (2, 1)) == (2, 0)


def test_torch_device_without_index_keeps_a_cuda1_array_in_place(sim):
    cp = sim.cupy("14.2.0")
    sim.torch()
    with cp.cuda.Device(1):
        x = cp.asarray(np.arange(4, dtype=np.float32))
    sim.state.current_device = 1
    out = dlbridge.to_torch(x, device=torch.device("cuda"))
    assert out.device == torch.device("cuda", 1)
    assert out.data_ptr() == x.data.ptr  # shared, not copied to cuda:0


def test_jax_device_objects_map_by_local_hardware_id(sim):
    from dlbridge._pipeline._devices import parse_device

    gpu = sim.jax(ids=[(0, 1), (1, 0)])  # JAX's id 0 is CUDA ordinal 1
    assert parse_device(gpu.devices[0], (2, 0)) == (2, 1)
    assert parse_device(gpu.devices[1], (2, 1)) == (2, 0)
    assert parse_device(jax.devices("cpu")[0], (1, 0)) == (1, 0)


def test_jax_device_object_as_target_device(sim):
    gpu = sim.jax(ids=[(0, 1), (1, 0)])
    t = sim.cuda_tensor(_floats(), index=1)
    sim.state.current_device = 1
    out = dlbridge.to_jax(t, device=gpu.devices[0])  # the same GPU: no copy, no mismatch
    assert np.array_equal(np.asarray(out), np.arange(6, dtype=np.float32))


@pytest.mark.parametrize("version", ["13.3.0", "14.2.0"])
def test_cupy_managed_memory_on_device_1(sim, version):
    cp = sim.cupy(version)
    sim.torch()
    x = cp.empty(4, np.float32, device=1, kind="managed")
    x._host[...] = np.arange(4)
    sim.state.current_device = 1
    out = dlbridge.to_torch(x)  # CuPy < 13.4 writes device id 0 into a managed capsule
    assert out.device == torch.device("cuda", 1)
    assert out.data_ptr() == x.data.ptr


# --- 7. smaller -----------------------------------------------------------------------------------


def test_cross_device_copy_keeps_the_callers_stream(sim):
    cp = sim.cupy("14.2.0")
    sim.torch()
    x = cp.asarray(np.arange(4, dtype=np.float32))  # on cuda:0
    stream = 0x5000
    out = dlbridge.to_torch(x, device="cuda:1", stream=stream)
    assert out.device == torch.device("cuda", 1)
    assert sim.log.streams_handed("cupy")[-1] == stream, sim.log


def test_cupy_bfloat16_needs_numpy_2_1_2(monkeypatch):
    # cupy v14.2.0 cupy/_core/dlpack.pyx lines 22-29: bfloat16 only with NumPy >= 2.1.2 and ml_dtypes
    from dlbridge import _capabilities as table

    def fresh() -> None:
        table.satisfied.cache_clear()
        table._capabilities.cache_clear()  # (capabilities() reads it, keyed by the registry's generation)

    fresh()
    assert "bfloat16" in table.capabilities("cupy", "14.2.0").imports  # NumPy 2.4 and ml_dtypes here
    monkeypatch.setattr(np, "__version__", "2.1.1")
    fresh()
    try:
        caps = table.capabilities("cupy", "14.2.0")
        assert "bfloat16" not in caps.imports and "bfloat16" not in caps.holds
        assert table.missing_requirements("cupy", "14.2.0", "bfloat16") == ["numpy>=2.1.2"]
    finally:
        monkeypatch.undo()
        fresh()


# --- 3. the CPU tests on a GPU machine ------------------------------------------------------------


def test_cpu_option_model_leaves_gpu_calls_out_where_cuda_is_present():
    # A child where torch says it has CUDA: the option model must not predict "no CUDA device here".
    proc = run_child(
        """
        import torch
        torch.cuda.is_available = lambda: True
        import tests.test_robustness_options as m
        assert m.GPU_HERE and "cupy" not in m.TARGETS and "cuda" not in m.DEVICES and (2, 0) not in m.DEVICES
        print("ok")
        """
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


def test_report_tests_ask_for_cpu_cells_only():
    from pathlib import Path

    text = (Path(__file__).parent / "test_report.py").read_text(encoding="utf-8")
    call = text.split("def cpu_run", 1)[1].split("return", 1)[0]
    assert '"--devices", "cpu"' in call  # on a GPU machine CUDA cells would double every cell lookup
