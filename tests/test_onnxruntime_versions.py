"""ONNX Runtime by version: what the installed ``onnxruntime`` does is what its capability rows say,
and dlbridge hands every consumer the true dtype (values, dtype and data pointer) on both paths.

The rows change at 1.26 (the public OrtValue gains DLPack) and 1.32 (kDLBool and the float8 codes).
Run this module against each wheel, put first on PYTHONPATH over the latest venv::

    pip install --no-deps --target /tmp/ort-1.30.0 onnxruntime==1.30.0
    PYTHONPATH=/tmp/ort-1.30.0:$PWD python -m pytest -q tests/test_onnxruntime_versions.py

(probed 2026-11-27 with 1.25.1, 1.26.0, 1.30.0, 1.31.1 and 1.32.0; the stock venv has 1.32.0).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from dlbridge._adapters._numpy import aligned_copy
from dlbridge._capabilities import capabilities, floor, parse_version
from dlbridge._capsule._probe import probe
from tests._arrays import bits, reference, torch_bits
from tests._route_helpers import on_both_paths, route_path  # noqa: F401 - the fixture on_both_paths parametrizes
from tests.conftest import need
from tests.ctypes_producer import CtypesArray

ort = need("onnxruntime")
torch = need("torch")
need("ml_dtypes")

VERSION = ort.__version__
CAPS = capabilities("onnxruntime", VERSION)
ONNX = {"bool": 9, "float8_e4m3fn": 17, "float8_e5m2": 19}
FP8 = ("float8_e4m3fn", "float8_e5m2")

pytest_generate_tests = on_both_paths


def _ortvalue(ref: np.ndarray):
    """An OrtValue over a 64-byte aligned copy of ``ref`` (JAX shares only aligned buffers)."""
    host = aligned_copy(ref)
    if ref.dtype.type.__module__ == "ml_dtypes":
        value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(host.view(np.uint8), ONNX[ref.dtype.name])
    else:
        value = ort.OrtValue.ortvalue_from_numpy(host)
    return value, host


def _address(out) -> int:
    if isinstance(out, np.ndarray):
        return int(out.ctypes.data)
    if isinstance(out, torch.Tensor):
        return int(out.data_ptr())
    return int(out.unsafe_buffer_pointer())  # jax


def _below_floor() -> bool:
    return parse_version(VERSION) < parse_version(floor("onnxruntime") or "0")


def test_below_the_floor_ortvalues_are_refused_naming_the_upgrade() -> None:
    if not _below_floor():
        pytest.skip(f"onnxruntime {VERSION} is at or above dlbridge's floor {floor('onnxruntime')}")
    value = ort.OrtValue.ortvalue_from_numpy(np.arange(4.0))
    with pytest.raises(dlbridge.ProducerError, match=r'no DLPack export.*"onnxruntime>=1\.26".*x\.numpy\(\)'):
        dlbridge.to_torch(value)
    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r'imports float32 from 1\.26 on.*"onnxruntime>=1\.26"'):
        dlbridge.to_onnxruntime(torch.arange(4.0, device="cpu"))


@pytest.fixture
def supported() -> None:
    if _below_floor():
        pytest.skip(f"onnxruntime {VERSION} is below dlbridge's floor {floor('onnxruntime')} (tested above)")


@pytest.mark.usefixtures("supported")
def test_the_rows_at_this_version_say_what_its_capsules_say() -> None:
    value, _ = _ortvalue(reference("bool", (3, 4)))
    raw = probe(value.__dlpack__())
    assert raw is not None
    assert (raw[8], raw[9], raw[10]) == ((1, 8, 1) if "bool" in CAPS.exports_uint8 else (6, 8, 1))
    fp8, _ = _ortvalue(reference("float8_e4m3fn", (2, 3)))
    if "float8_e4m3fn" in CAPS.cannot_export:
        with pytest.raises(RuntimeError, match="Unexpected data type"):
            fp8.__dlpack__()
    else:
        raw = probe(fp8.__dlpack__())
        assert raw is not None and (raw[8], raw[9], raw[10]) == (10, 8, 1)
    t = torch.ones(3, dtype=torch.bool, device="cpu")
    if "bool" in CAPS.imports:
        assert ort.OrtValue.from_dlpack(t.__dlpack__()).data_type() == "tensor(bool)"
    else:
        with pytest.raises(RuntimeError):
            ort.OrtValue.from_dlpack(t.__dlpack__())
    # ONNX Runtime's own from_dlpack(OrtValue) reads bool off the source (detects_bool_sources)
    assert ort.OrtValue.from_dlpack(value).data_type() == "tensor(bool)"


@pytest.mark.usefixtures("supported")
@pytest.mark.parametrize("consumer", ["torch", "numpy", "jax"])
def test_a_bool_ortvalue_reaches_every_consumer_as_bool_sharing_memory(consumer: str) -> None:
    if consumer == "jax":
        need("jax")
    ref = reference("bool", (3, 4))
    value, host = _ortvalue(ref)
    to = getattr(dlbridge, f"to_{consumer}")
    for _ in range(3):  # the first call teaches the fast route the OrtValue type; the others replay it
        out = to(value)
        assert ADAPTERS[consumer].prober.dtype_str(out) == "bool"
        assert _address(out) == value.data_ptr() == host.ctypes.data
        np.testing.assert_array_equal(np.asarray(out), ref)
    assert dlbridge.inspect(value).dtype == "bool"  # dlbridge's export: relabelled where ONNX Runtime says uint8


@pytest.mark.usefixtures("supported")
@pytest.mark.parametrize("dtype", FP8)
def test_float8_ortvalues_export_or_are_refused_naming_the_fix(dtype: str) -> None:
    ref = reference(dtype, (2, 3))
    value, host = _ortvalue(ref)
    before = host.copy()
    if dtype in CAPS.cannot_export:
        for _ in range(2):
            with pytest.raises(dlbridge.UnsupportedDtypeError, match=rf'"onnxruntime>=1\.32".*uint8.*dtype="{dtype}"'):
                dlbridge.to_torch(value)
        np.testing.assert_array_equal(host.view(np.uint8), before.view(np.uint8))  # the source as it was
        fixed = dlbridge.to_torch(host.view(np.uint8), dtype=dtype)  # the fix the message names: its bits
        assert fixed.dtype == getattr(torch, dtype) and fixed.data_ptr() == value.data_ptr()
        np.testing.assert_array_equal(torch_bits(fixed), bits(ref))
        return
    for _ in range(3):
        out = dlbridge.to_torch(value)
        assert out.dtype == getattr(torch, dtype) and out.data_ptr() == host.ctypes.data
        np.testing.assert_array_equal(torch_bits(out), bits(ref))


@pytest.mark.usefixtures("supported")
@pytest.mark.parametrize("dtype", ["bool", *FP8])
def test_bool_and_float8_into_onnxruntime_follow_the_rows(dtype: str) -> None:
    ref = reference(dtype, (2, 3))
    src = torch.from_numpy(aligned_copy(ref).view(np.uint8) if dtype != "bool" else aligned_copy(ref))
    src = src.view(getattr(torch, dtype))
    if dtype not in CAPS.imports:  # refused by dlbridge's table, naming the upgrade, before ONNX Runtime is asked
        for _ in range(2):
            with pytest.raises(dlbridge.UnsupportedDtypeError, match=rf'imports {dtype} from 1\.32 on.*"onnxruntime>=1\.32"'):  # fmt: skip
                dlbridge.to_onnxruntime(src)
        return
    for _ in range(3):
        out = dlbridge.to_onnxruntime(src)
        assert out.data_type() == ("tensor(bool)" if dtype == "bool" else f"tensor({dtype.replace('_', '')})")
        assert out.data_ptr() == src.data_ptr()
        np.testing.assert_array_equal(torch_bits(torch.from_dlpack(out)), bits(ref))


@pytest.mark.usefixtures("supported")
def test_a_gpu_capsule_is_refused_before_onnxruntime_sees_it() -> None:
    # ONNX Runtime's CPU build takes a kDLCUDA capsule and makes an OrtValue that says "cuda" (rows)
    assert ort.get_device() == "CPU" and "CUDAExecutionProvider" not in ort.get_available_providers()
    data = np.arange(6, dtype=np.float32).tobytes()
    gpu = CtypesArray.from_bytes(data, "float32", (2, 3)).with_(device=(2, 0))  # CPU bytes that claim CUDA
    assert ort.OrtValue.from_dlpack(gpu.__dlpack__()).device_name().lower() == "cuda"
    gc.collect()
    for x in (gpu, gpu.__dlpack__()):
        with pytest.raises(dlbridge.DeviceMismatchError, match="cuda"):
            dlbridge.to_onnxruntime(x)
    capsule = gpu.__dlpack__()
    with pytest.raises(dlbridge.DeviceMismatchError):
        dlbridge.to_onnxruntime(capsule, copy=False)
    assert probe(capsule) is not None  # not consumed: still a "dltensor" capsule
    del capsule, x
    gc.collect()
    assert gpu.balanced  # every export deleted once


@pytest.mark.usefixtures("supported")
def test_the_report_never_reads_an_ortvalue_that_is_not_on_the_host() -> None:
    gpu = CtypesArray.from_bytes(np.arange(6, dtype=np.float32).tobytes(), "float32", (2, 3)).with_(device=(2, 0))
    value = ort.OrtValue.from_dlpack(gpu.__dlpack__())  # says "cuda": its address is no host address to read
    prober = ADAPTERS["onnxruntime"].prober
    with pytest.raises(ValueError, match="not the host's"):
        prober.host_bytes(value)
    with pytest.raises(ValueError, match="not the host's"):
        prober.to_host(value)


@pytest.mark.usefixtures("supported")
def test_the_route_never_replays_the_raw_capsule_of_a_producer_that_mislabels(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbridge._route import _learn as _route

    adapter = ADAPTERS["onnxruntime"]
    monkeypatch.setattr(adapter, "caps", capabilities("onnxruntime", "1.30.0"))  # its rows before 1.32
    monkeypatch.setattr(adapter, "fast_export", lambda cls: (3, None, (), None, None))  # a raw replay asked for
    monkeypatch.setitem(_route._seen, ort.OrtValue, -1)  # asked again at the next conversion,
    monkeypatch.delitem(_route.producers, ort.OrtValue, raising=False)  # which takes the pipeline
    value, _ = _ortvalue(reference("float32", (2, 3)))
    dlbridge.to_torch(value)
    assert ort.OrtValue not in _route.producers  # dropped: only an export through the adapter relabels
    monkeypatch.undo()
    _route._seen.pop(ort.OrtValue, None)
    _route.producers.pop(ort.OrtValue, None)
    dlbridge.to_torch(value)
    found = _route.producers.get(ort.OrtValue)
    assert found is not None and found.kind == (2 if "bool" in CAPS.exports_uint8 else 3)
