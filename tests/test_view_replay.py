"""fallback="view" on the fast route: a warm view conversion runs no pipeline step, and the view it hands
out carries the same record of its logical dtype the pipeline makes (so handing it back restores the dtype,
and changing it in place makes it a plain array again). On both paths, with real frameworks."""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from dlbridge._pipeline import _logical as _logical
from tests._route_helpers import PipelineCount, on_both_paths, route_path  # noqa: F401 - route_path: a fixture
from tests.conftest import need

ml_dtypes = need("ml_dtypes")
torch = need("torch")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    on_both_paths(metafunc)


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch) -> PipelineCount:
    return PipelineCount(monkeypatch)


def _numpy_fp8() -> np.ndarray:  # a dtype torch cannot hold: float8_e4m3b11fnuz
    return (np.arange(16, dtype=np.uint8) * 7).view(ml_dtypes.float8_e4m3b11fnuz).reshape(4, 4)


def test_a_warm_view_conversion_takes_the_route_and_records_the_view(pipeline) -> None:
    g = _numpy_fp8()
    dlbridge.to_torch(g, fallback="view")  # the pipeline converts it and the route learns
    for _ in range(3):
        pipeline.calls = 0
        view = dlbridge.to_torch(g, fallback="view")
        assert pipeline.calls == 0, "a warm fallback='view' conversion took the pipeline"
        assert view.dtype == torch.uint8 and tuple(view.shape) == (4, 4)
        assert view.data_ptr() == g.ctypes.data  # zero-copy
        assert view.flatten().tolist() == g.view(np.uint8).flatten().tolist()
        back = dlbridge.to_numpy(view)  # the record the route made restores the logical dtype
        assert back.dtype == g.dtype and back.ctypes.data == g.ctypes.data
        assert back.view(np.uint8).tolist() == g.view(np.uint8).tolist()


def test_jax_fp8_into_torch_view_is_replayed_and_comes_back_as_jax_fp8(pipeline) -> None:
    jax = need("jax")
    jax_caps = dlbridge.capabilities("jax")
    if "float8_e4m3b11fnuz" in jax_caps.cannot_export:
        pytest.skip(f"JAX {jax_caps.version} cannot export float8_e4m3b11fnuz through DLPack (cannot_export row)")
    x = jax.device_put(_numpy_fp8(), jax.devices("cpu")[0])  # float8_e4m3b11fnuz: JAX holds it, torch does not
    # shared as readonly="drop" asks: JAX arrays are read-only, torch tensors cannot be
    dlbridge.to_torch(x, fallback="view", readonly="drop")
    pipeline.calls = 0
    view = dlbridge.to_torch(x, fallback="view", readonly="drop")
    assert pipeline.calls == 0 and view.dtype == torch.uint8 and view.data_ptr() == x.unsafe_buffer_pointer()
    back = dlbridge.to_jax(view)
    assert back.dtype == x.dtype and back.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
    assert np.asarray(back).view(np.uint8).tolist() == np.asarray(x).view(np.uint8).tolist()


def test_a_replayed_view_changed_in_place_is_a_plain_array(pipeline) -> None:
    g = _numpy_fp8()
    dlbridge.to_torch(g, fallback="view")
    pipeline.calls = 0
    view = dlbridge.to_torch(g, fallback="view")
    assert pipeline.calls == 0  # the route's record
    other = torch.arange(16, dtype=torch.uint8, device="cpu")
    view.set_(other)  # other memory now: the record no longer matches it
    out = dlbridge.to_numpy(view)
    assert out.dtype == np.uint8 and out.ctypes.data == other.data_ptr()


def test_the_route_and_the_pipeline_make_the_same_record() -> None:
    g = _numpy_fp8()
    first = dlbridge.to_torch(g, fallback="view")  # the pipeline's record
    warm = dlbridge.to_torch(g, fallback="view")  # the route's record
    records = {k: (r.logical, r.memory) for k, r in _logical._entries.items() if r() is not None}
    assert records[id(first)] == records[id(warm)]
    assert records[id(warm)][0] == "float8_e4m3b11fnuz"
    del first, warm
