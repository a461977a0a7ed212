"""One export per conversion: a producer's ``__dlpack__`` runs once, on success and on failure paths,
whichever path dlbridge takes (the fast route, the pipeline, a dense copy through the host), compiled
and pure Python (each test runs on both: ``on_both_paths``).

``Counted`` is a producer dlbridge has no adapter for, wrapping a real NumPy or torch array and
counting every ``__dlpack__`` call (its side effects); JAX's own ``__dlpack__`` is counted the same way
(a Python method, patched) for the fast route's cases, which take only frameworks' own array types.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._options import Readonly
from tests._arrays import jax_cpu
from tests._route_helpers import on_both_paths, route_path  # noqa: F401 - route_path: on_both_paths's fixture
from tests.conftest import need

pytest_generate_tests = on_both_paths


class Counted:
    """A DLPack producer of no known framework, over a real array; ``exports``: its ``__dlpack__`` calls."""

    def __init__(self, inner: Any, raises: BaseException | None = None) -> None:
        self.inner, self.raises, self.exports = inner, raises, 0

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.exports += 1  # the side effect that must run once
        if self.raises is not None:
            raise self.raises
        try:
            return self.inner.__dlpack__(**kwargs)
        except TypeError:  # an array before DLPack 1.0 inside (NumPy < 2.1): a legacy capsule, as 1.0 allows
            return self.inner.__dlpack__(**{k: v for k, v in kwargs.items() if k == "stream"})

    def __dlpack_device__(self) -> Any:
        return self.inner.__dlpack_device__()


def _targets() -> list[str]:
    from dlbridge._report._cases import installed_frameworks

    return [t for t in ("numpy", "torch", "jax", "warp", "onnxruntime", "tensorflow") if t in installed_frameworks()]


def _run(x: Any, target: str, **options: Any) -> type[BaseException] | None:
    try:
        dlbridge.convert(x, target, **options)
    except dlbridge.DLBridgeError as err:
        return type(err)
    return None


# --- failure paths -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", _targets())
def test_a_dlpack_that_raises_type_error_runs_once(target: str) -> None:
    # A TypeError from inside __dlpack__ is the producer's own failure, not "max_version unknown"
    # (which a producer before DLPack 1.0 says by naming it): asking again would run it twice.
    need(target)
    x = Counted(np.zeros(3, np.float32), TypeError("the producer's own failure"))
    assert _run(x, target) is dlbridge.ProducerError
    assert x.exports == 1
    assert dlbridge.explain(x, target).error is dlbridge.ProducerError


def test_a_producer_before_dlpack_1_is_asked_again_without_max_version() -> None:
    calls: list[dict[str, Any]] = []

    class Legacy:  # __dlpack__(stream=None) only: the protocol's other way, still taken
        def __init__(self) -> None:
            self.inner = np.arange(3, dtype=np.float32)

        def __dlpack__(self, stream: Any = None) -> Any:
            calls.append({"stream": stream})
            return self.inner.__dlpack__()

        def __dlpack_device__(self) -> Any:
            return (1, 0)

    x = Legacy()
    out = dlbridge.to_numpy(x)
    assert out.tolist() == [0.0, 1.0, 2.0] and out.ctypes.data == x.inner.ctypes.data
    assert len(calls) == 1  # a bare call: binding max_version failed before __dlpack__ ran


@pytest.mark.parametrize("ndim", [0, 5])
def test_warp_refuses_its_dimensions_before_the_import_with_one_export(ndim: int) -> None:
    need("warp")
    for inner in (np.zeros((2,) * ndim, np.float32), need("torch").zeros((2,) * ndim, device="cpu")):
        x = Counted(inner)
        assert dlbridge.explain(x, "warp").error is dlbridge.LayoutError
        assert x.exports == 1  # explain exports once too
        x.exports = 0
        with pytest.raises(dlbridge.LayoutError, match=rf"1 to 4 dimensions, and .* has {ndim}"):
            dlbridge.to_warp(x)
        assert x.exports == 1


@pytest.mark.parametrize("target", _targets())
def test_a_generic_producer_needing_a_dense_copy_is_exported_once(target: str) -> None:
    need(target)
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    for inner in (base[:, ::-1], base.T, base[::2]):
        x = Counted(inner)
        record = dlbridge.explain(x, target)
        assert x.exports == 1
        x.exports = 0
        out = dlbridge.convert(x, target)
        assert x.exports == 1, (inner.strides, record)
        np.testing.assert_array_equal(np.asarray(dlbridge.to_numpy(out)), inner)


@pytest.fixture
def jax_exports(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts JAX's own ``__dlpack__`` calls (a Python method of its array type)."""
    need("jax")
    cls = type(jax_cpu(np.zeros(1, np.float32)))
    real, count = cls.__dlpack__, [0]

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__dlpack__", counted)
    yield count


def _warm(target: str) -> None:
    need("jax")
    for _ in range(2):  # the fast route learns JAX's arrays and the target's state
        dlbridge.convert(jax_cpu(np.zeros(4, np.float32)), target, readonly="drop")


@pytest.mark.parametrize("target", ["numpy", "torch", "jax"])
def test_a_jax_export_that_fails_on_the_fast_route_is_not_asked_again(target: str, jax_exports: list[int]) -> None:
    jnp = need("jax").numpy
    need(target)
    _warm(target)
    x = jax_cpu(np.zeros(4, np.int8), jnp.int4)  # XLA: "type S4 has no DLPack equivalent"
    for _ in range(2):
        jax_exports[0] = 0
        assert _run(x, target) is dlbridge.ProducerError
        assert jax_exports[0] == 1
    assert dlbridge.explain(x, target).error is dlbridge.ProducerError


def test_a_capsule_warp_refuses_on_the_fast_route_is_decided_once(jax_exports: list[int]) -> None:
    need("jax")
    need("warp")
    _warm("warp")
    for shape in ((), (1,) * 5):
        jax_exports[0] = 0
        with pytest.raises(dlbridge.LayoutError, match="1 to 4 dimensions"):
            dlbridge.to_warp(jax_cpu(np.zeros(shape, np.float32)))
        assert jax_exports[0] == 1


# --- success paths -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", _targets())
def test_success_paths_export_once(target: str) -> None:
    need(target)
    torch = need("torch")
    sources = [
        np.arange(6, dtype=np.float32),
        np.float32(2.0) * np.ones((2, 3), np.float32),
        torch.arange(6.0, device="cpu"),
    ]
    for inner in sources:
        for copy in (None, True):
            x = Counted(inner)
            out = dlbridge.convert(x, target, copy=copy)
            assert x.exports == 1, (type(inner), copy)
            np.testing.assert_array_equal(np.asarray(dlbridge.to_numpy(out)), np.asarray(inner))


def test_success_paths_of_frameworks_export_once(jax_exports: list[int]) -> None:
    need("jax")
    for target in ("numpy", "torch", "jax"):
        need(target)
        caps = dlbridge.capabilities(target)
        # JAX arrays are read-only: a consumer that cannot hold them so shares them as readonly="drop" asks
        readonly: Readonly = "keep" if caps.readonly_arrays or caps.readonly_imports else "drop"
        for _ in range(3):  # cold, then on the fast route
            jax_exports[0] = 0
            dlbridge.convert(jax_cpu(np.arange(4, dtype=np.float32)), target, readonly=readonly)
            assert jax_exports[0] == 1, target


# The route learns NumPy's Producer before ml_dtypes is loaded (no relabels), then meets a bfloat16 array:
# its export (NumPy's own __dlpack__) fails where the adapter's (the same bytes as uint16, relabelled)
# does not. A fresh process: ml_dtypes must not be loaded when the route learns.
_STALE_PRODUCER = """
import sys, numpy as np, dlbridge
for _ in range(3):
    dlbridge.to_torch(np.ones(4, np.float32))
if "ml_dtypes" in sys.modules:
    sys.exit(3)
import ml_dtypes
x = np.arange(4).astype(ml_dtypes.bfloat16)
t = dlbridge.to_torch(x)
assert str(t.dtype) == "torch.bfloat16" and t.data_ptr() == x.ctypes.data, t
assert t.float().tolist() == [0.0, 1.0, 2.0, 3.0], t
"""


def test_an_export_failed_by_a_producer_learned_before_ml_dtypes_goes_through_the_adapter() -> None:
    need("torch")
    need("ml_dtypes")
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _STALE_PRODUCER], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    if done.returncode == 3:
        pytest.skip("ml_dtypes is loaded with dlbridge, numpy and torch here: the route never learns without it")
    assert done.returncode == 0, done.stderr[-3000:]
