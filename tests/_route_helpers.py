"""Helpers for the fast-route tests: both paths for every test, what a conversion gave (to compare
the route with the pipeline), a count of the route's declines, and 64-byte aligned NumPy arrays (JAX
shares only those)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from dlbridge import _accelerator
from dlbridge._adapters import ADAPTERS, adapter_for
from dlbridge._options import NOT_GIVEN, resolve_fallback
from dlbridge._pipeline._convert import _convert
from dlbridge._route import _replay as _route
from tests._isolated import IN_CHILD

COMPILED = _accelerator.accel is not None
PURE_PYTHON = pytest.mark.isolated(env={"DLBRIDGE_PURE_PYTHON": "1"})


def on_both_paths(metafunc: pytest.Metafunc) -> None:
    """``pytest_generate_tests`` of the fast-route modules: every test runs as ``[loaded]`` on the path
    this process loaded and, where that is the compiled module, as ``[pure-python]`` in a child
    (``isolated``) with $DLBRIDGE_PURE_PYTHON set, so both paths are covered, test by test."""
    if "route_path" not in metafunc.fixturenames:
        return
    params = [pytest.param("loaded", id="loaded")]
    if COMPILED or IN_CHILD:  # in the child the pure-Python cases it was asked to run must exist
        params.append(pytest.param("pure-python", id="pure-python", marks=PURE_PYTHON))
    metafunc.parametrize("route_path", params)


@pytest.fixture(autouse=True)
def route_path(request: pytest.FixtureRequest) -> str:
    """Which path the test runs on ("loaded" or "pure-python"): set by ``on_both_paths``."""
    return str(request.param)


def aligned(a: np.ndarray, align: int = 64, offset: int = 0) -> np.ndarray:
    """A C-ordered copy of ``a`` whose data sits ``offset`` bytes past an ``align``-byte boundary."""
    raw = np.empty(a.nbytes + align + offset, np.uint8)
    start = (-raw.ctypes.data) % align + offset
    out = raw[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def ptr(arr: Any) -> int | None:
    source = adapter_for(arr)
    try:
        return int(source.data_ptr(arr)) if source is not None else None
    except Exception:
        return None


def outcome(call: Callable[[], Any], x: Any) -> tuple[Any, ...]:
    """What a conversion of ``x`` gave, comparable across calls: the error (class, message), or the
    result's type, dtype, shape, bytes, whether it is ``x`` itself and whether it shares x's memory."""
    try:
        r = call()
    except Exception as err:
        return ("error", type(err).__name__, str(err))
    adapter = adapter_for(r)
    assert adapter is not None, type(r)
    host = adapter.prober.to_host(r)
    same = ptr(r) is not None and ptr(r) == ptr(x) and host.size > 0
    return ("ok", type(r), adapter.prober.dtype_str(r), host.shape, np.ascontiguousarray(host).tobytes(), r is x, same)


def pipeline(x: Any, to: str, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None, copy: Any = None,
             stream: Any = None, readonly: Any = "keep") -> Any:  # fmt: skip
    """The full pipeline, without the route."""
    return _convert(x, ADAPTERS[to], resolve_fallback(fallback), dtype, device, copy, stream, readonly=readonly)


@contextmanager
def counting_declines() -> Iterator[Counter[str]]:
    """Count the calls that reach each target's pipeline: the first call of a kind, and every one the
    route declines. Both routes decline to ``_route._pipeline``, which calls ``_route._convert`` (the
    pipeline itself) by name: wrapped here, for the compiled and the Python route alike."""
    counts: Counter[str] = Counter()
    pipeline = _route._convert

    def counted(x: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        counts[target.name] += 1
        return pipeline(x, target, *args, **kwargs)

    _route._convert = counted  # type: ignore[assignment]
    try:
        yield counts
    finally:
        _route._convert = pipeline


class PipelineCount:
    """Counts the pipeline's conversions (``_convert.run_stages``): 0 on a replay."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from dlbridge._pipeline import _convert as convert_module

        self.calls = 0
        real = convert_module.run_stages

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(convert_module, "run_stages", counted)
