"""Apache Arrow by version: below dlbridge's floor (pyarrow < 26, capability row ``exports_legacy_only``)
every immutable array is refused as read-only before pyarrow is asked, naming the upgrade and
``copy=True``, and ``copy=True`` gives the right values in new memory; at or above it the rows say
versioned, READ_ONLY capsules. Never a capsule with a NULL data pointer, never a writable alias.

Run against a pyarrow wheel put first on PYTHONPATH over the latest venv::

    pip install --no-deps --target /tmp/pyarrow-25.0.1 pyarrow==25.0.1
    PYTHONPATH=/tmp/pyarrow-25.0.1:$PWD python -m pytest -q tests/test_pyarrow_versions.py

(probed 2026-11-27 with 25.0.1 and 26.0.1; the stock venv has 26.0.1).
"""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ALL_ADAPTERS
from dlbridge._capabilities import capabilities
from dlbridge._capsule._probe import probe
from dlbridge._report._worker import _export_fails, run_task
from tests._route_helpers import on_both_paths, route_path  # noqa: F401 - the fixture on_both_paths parametrizes
from tests.conftest import need

pa = need("pyarrow")
CAPS = capabilities("pyarrow", pa.__version__)
ARROW = ALL_ADAPTERS["pyarrow"]
LEGACY = CAPS.exports_legacy_only  # pyarrow < 26

pytest_generate_tests = on_both_paths


def _immutable_tensor() -> pa.Tensor:
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    host.flags.writeable = False
    return pa.Tensor.from_numpy(host)


def _sources() -> list:
    return [pa.array(np.arange(4, dtype=np.float32)), _immutable_tensor()]


def test_the_row_says_what_this_pyarrow_exports() -> None:
    array = pa.array(np.arange(4, dtype=np.float32))
    if LEGACY:
        with pytest.raises(TypeError, match="max_version"):
            array.__dlpack__(max_version=(1, 0))
        raw = probe(_immutable_tensor().__dlpack__())  # the legacy capsule of immutable memory: no data at all
        assert raw is not None and raw[4] == 0
    else:
        raw = probe(array.__dlpack__(max_version=(1, 0)))
        assert raw is not None and raw[0] and raw[3] & 1  # versioned, READ_ONLY


@pytest.mark.parametrize("target", ["numpy", "torch", "jax", "onnxruntime"])
def test_immutable_arrays_are_read_only_and_copy_true_gives_the_values(target: str) -> None:
    need(target)
    for src in _sources():
        want = np.asarray(src.to_numpy()).copy()
        if LEGACY or target != "numpy":  # a consumer without read-only arrays, or capsules that cannot say so
            for _ in range(2):
                with pytest.raises(dlbridge.ReadOnlyError, match="copy=True") as err:
                    dlbridge.convert(src, target)
                if LEGACY:
                    assert 'pip install -U "pyarrow>=26"' in str(err.value)
        else:  # NumPy holds read-only arrays: shared, read-only
            out = dlbridge.to_numpy(src)
            assert out.ctypes.data == ARROW.data_ptr(src) and not out.flags.writeable
        copied = dlbridge.to_numpy(dlbridge.convert(src, target, copy=True))
        assert copied.ctypes.data != ARROW.data_ptr(src)
        np.testing.assert_array_equal(copied.reshape(want.shape), want)
        np.testing.assert_array_equal(np.asarray(src.to_numpy()), want)  # the source as it was


def test_a_mutable_tensor_is_read_only_unless_dropped_on_every_version() -> None:
    torch = need("torch")
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pa.Tensor.from_numpy(host)
    for _ in range(2):
        with pytest.raises(dlbridge.ReadOnlyError, match=r'Apache Arrow arrays are immutable.*readonly="drop"'):
            dlbridge.to_torch(tensor)
        out = dlbridge.to_torch(tensor, readonly="drop")
        assert out.dtype == torch.float32 and out.data_ptr() == host.ctypes.data
    out[0, 0] = 7.0
    assert host[0, 0] == 7.0


def test_the_adapter_finds_the_data_without_a_capsule() -> None:
    array = pa.array(np.arange(10, dtype=np.int64)).slice(3, 4)
    assert ARROW.data_ptr(array) == array.buffers()[1].address + 3 * 8
    host = np.arange(6.0).reshape(2, 3)
    host.flags.writeable = False
    assert ARROW.data_ptr(pa.Tensor.from_numpy(host)) == host.ctypes.data


def test_the_report_calls_a_null_data_capsule_the_producers_failure() -> None:
    tensor = _immutable_tensor()
    if LEGACY:  # pyarrow < 26 makes the capsule, with a NULL data pointer: the producer's failure
        assert probe(tensor.__dlpack__()) is not None
    assert _export_fails(tensor)  # (26 refuses the legacy export itself)
    need("torch")
    task = {"producer": "pyarrow", "device": "cpu", "consumer": "torch", "dtype": "float32", "readonly": True}
    for attempt in ("native", "dlbridge"):
        found = run_task({**task, "attempt": attempt})  # never raises: a prober's failure is data
        assert found["status"] in ("ok", "error"), found
        if attempt == "dlbridge":
            assert found["status"] == "error" and found["error"].startswith("ReadOnlyError") and found["clean"]
