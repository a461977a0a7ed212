"""CuPy's float8 exports against simulated CUDA (tests/simcuda/): the protocol only, never GPU evidence.

CuPy labels a capsule by the dtype's NumPy kind (cupy/_core/dlpack.pyx, v13.3.0 toDlpack lines 134-147,
v14.2.0 get_dlpack_dtype_code_itemsize lines 75-97): ml_dtypes' float8_e5m2 is kind 'f', so its
capsule says kDLFloat with 8 bits, which torch ("Unsupported kFloat bits 8"), JAX and CuPy itself
refuse (the H100 run of 2026-11-27, CuPy 14.2.0 and 13.3.0). dlbridge relabels its own export of such
an array zero-copy (the array's dtype says which format), on the pipeline and on the fast route's GPU
half, and refuses the bare capsule. CuPy's other float8 kinds (kind 'V') are refused naming the fix.
Runs in a child pytest (``isolated``), on both paths.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dlbridge
from dlbridge._capsule._probe import probe
from dlbridge._errors import CapsuleError, UnsupportedDtypeError
from tests._route_helpers import counting_declines, on_both_paths, route_path  # noqa: F401 - the fixture on_both_paths parametrizes
from tests.simcuda import SimulatedCrash
from tests.simcuda.harness import Sim, modelled_stack

pytestmark = [pytest.mark.simcuda, pytest.mark.isolated]
pytest_generate_tests = on_both_paths

torch, jax = modelled_stack()
BITS = np.array([0x00, 0x3C, 0xBC, 0x40, 0x44, 0x7B], dtype=np.uint8)  # e5m2: 0, 1, -1, 2, 4, 57344


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch):
    s = Sim(monkeypatch)
    yield s
    s.close()


def _e5m2(cp):
    return cp.asarray(BITS).view(ml_dtypes.float8_e5m2)  # CuPy's view takes any NumPy dtype (core.pyx 926-990)


@pytest.mark.parametrize("version", ["13.3.0", "14.2.0"])
def test_the_stand_in_exports_e5m2_as_kdlfloat8_as_cupy_does(sim, version):
    cp = sim.cupy(version)
    x = _e5m2(cp)
    raw = probe(x.__dlpack__())
    assert raw is not None and (raw[8], raw[9], raw[10]) == (2, 8, 1)  # kDLFloat, 8 bits: by kind 'f'
    with pytest.raises(BufferError if version == "14.2.0" else ValueError):  # kind 'V': refused by CuPy
        cp.asarray(BITS).view(ml_dtypes.float8_e4m3fn).__dlpack__()
    if version == "14.2.0":
        with pytest.raises(TypeError, match="float8 is not supported"):  # dlpack.pyx v14.2.0 line 465
            cp.from_dlpack(x)
    else:
        with pytest.raises(SimulatedCrash):  # CuPy 13.3 double-frees the capsule it rejects (cupy#8801)
            cp.from_dlpack(x)


@pytest.mark.parametrize("version", ["13.3.0", "14.2.0"])
@pytest.mark.parametrize("target", ["torch", "jax"])
def test_cupy_e5m2_reaches_consumers_relabelled_zero_copy(sim, version, target):
    cp = sim.cupy(version)
    sim.torch()
    sim.jax()
    x = _e5m2(cp)
    want = BITS.view(ml_dtypes.float8_e5m2)
    with counting_declines() as pipeline:
        for _ in range(3):  # the first call teaches the route CuPy's ndarray; the others replay its GPU half
            out = getattr(dlbridge, f"to_{target}")(x)
            _check(target, out, x, want)
    if target == "torch":  # (JAX asks the producer for a stream of its own: the pipeline's deferred export)
        assert pipeline["torch"] == 1, pipeline
    assert x.get().view(np.uint8).tolist() == BITS.tolist()  # the source as it was


def _check(target: str, out, x, want) -> None:
    if target == "torch":
        assert out.dtype == torch.float8_e5m2 and out.data_ptr() == x.data.ptr
        assert out.view(torch.uint8).cpu().numpy().tolist() == BITS.tolist()
    else:
        assert out.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8), BITS)


def test_a_bare_cupy_e5m2_capsule_is_refused_naming_the_fix(sim):
    cp = sim.cupy("14.2.0")
    sim.torch()
    x = _e5m2(cp)
    capsule = x.__dlpack__()
    with pytest.raises(CapsuleError, match=r"kDLFloat with 8 bits.*Pass the array itself"):
        dlbridge.to_torch(capsule)
    assert probe(capsule) is not None  # not consumed


@pytest.mark.parametrize("version", ["13.3.0", "14.2.0"])
def test_cupy_e5m2_into_cupy_is_refused_and_never_crashes_it(sim, version):
    cp = sim.cupy(version)
    x = _e5m2(cp)
    with pytest.raises(UnsupportedDtypeError, match='fallback="view"'):  # CuPy holds no float8 of its own
        dlbridge.to_cupy(x)
    out = dlbridge.to_cupy(x, fallback="view")
    assert out.dtype == np.uint8 and out.data.ptr == x.data.ptr
    up = dlbridge.to_cupy(x, fallback="upcast")
    assert up.dtype == np.float32 and up.get().tolist() == [0.0, 1.0, -1.0, 2.0, 4.0, 57344.0]


def test_cupy_float8_kinds_it_cannot_export_are_refused_naming_the_fix(sim):
    cp = sim.cupy("14.2.0")
    sim.torch()
    x = cp.asarray(BITS).view(ml_dtypes.float8_e4m3fn)
    with pytest.raises(UnsupportedDtypeError, match=r"cannot export float8_e4m3fn.*x\.view\(cupy\.uint8\)$"):
        dlbridge.to_torch(x)
    assert dlbridge.to_torch(x.view(np.uint8)).dtype == torch.uint8  # what the message proposes
