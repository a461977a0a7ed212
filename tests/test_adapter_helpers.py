"""What the report, tests and benchmarks ask of each adapter: making arrays with exact bits, reading
them back, naming dtypes and devices. Parametrized over the registry; frameworks not installed skip."""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS, HOST
from dlbridge._adapters._base import Adapter
from dlbridge._dtypes import ALIASES, BY_NAME, canonical, lookup
from dlbridge._pipeline._devices import parse_device
from dlbridge._report import _cases
from tests._arrays import DTYPES, bits, reference
from tests.conftest import need

CPU = [name for name, a in ADAPTERS.items() if "cpu" in a.producer_devices]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CPU)
def test_make_array_keeps_dtype_and_bits_and_reads_back(name: str, dtype: str) -> None:
    need(ADAPTERS[name].module)
    need("ml_dtypes")
    adapter = ADAPTERS[name]
    ref = reference(dtype, (3, 4))
    try:
        arr = adapter.prober.make_array(ref, "cpu")
    except Exception as err:  # a framework that cannot hold the dtype says so by raising
        pytest.skip(f"{name} cannot make {dtype}: {err}")
    if adapter.prober.dtype_str(arr) != dtype:  # JAX without x64 (int64), paddle (uint16 is its bfloat16)
        pytest.skip(f"{name} makes {adapter.prober.dtype_str(arr)} when asked for {dtype}")
    assert adapter.prober.dtype_str(arr) == dtype
    assert adapter.device_of(arr) == (1, 0)
    try:
        info = dlbridge.inspect(arr)
    except (dlbridge.ProducerError, dlbridge.UnsupportedDtypeError) as err:  # TF and JAX < 0.5.3: float8
        assert "not supported" in str(err) or "cannot export" in str(err)
        pytest.skip(f"{name} makes {dtype} but cannot export it: {err}")
    assert info.dtype == dtype
    np.testing.assert_array_equal(adapter.prober.host_bytes(arr), np.ascontiguousarray(ref).view(np.uint8).reshape(-1))
    host = adapter.prober.to_host(arr)
    assert host.dtype == ref.dtype
    np.testing.assert_array_equal(bits(host), bits(ref))


def test_host_adapter_is_unique_and_cpu() -> None:
    assert [a for a in ADAPTERS.values() if a.framework.host] == [HOST]
    assert 1 in HOST.device_codes


def test_every_adapter_names_its_display_distribution_and_extra() -> None:
    for adapter in ADAPTERS.values():
        assert adapter.display and adapter.distributions and adapter.extra and adapter.producer_devices, adapter


@pytest.mark.parametrize("name", CPU)
def test_parse_device_reads_the_framework_device_object(name: str) -> None:
    need(ADAPTERS[name].module)
    arr = ADAPTERS[name].prober.make_array(reference("float32", (2,)), "cpu")
    dev = getattr(arr, "device", None)
    if dev is None or isinstance(dev, str) or callable(dev):
        pytest.skip(f"{name} arrays have no device object")
    assert parse_device(dev, (2, 0)) == (1, 0)


def test_device_of_reads_a_none_device_id_as_zero() -> None:
    class NoneId:  # a producer that says (kDLCPU, None), as some do
        def __dlpack_device__(self):
            return (1, None)

    assert Adapter.device_of(ADAPTERS["numpy"], NoneId()) == (1, 0)  # the base class's


def test_dtype_aliases_and_framework_dtype_objects_are_one_set_of_names() -> None:
    assert canonical("bf16") == "bfloat16" and canonical("e4m3fn") == "float8_e4m3fn" and canonical("f32") == "float32"
    assert all(ALIASES[k] in BY_NAME for k in ALIASES)
    assert lookup("bf16") == lookup("bfloat16") == BY_NAME["bfloat16"]
    assert lookup("somemodule.bfloat16") == BY_NAME["bfloat16"]
    assert lookup("bf17") is None and lookup(float) is None
    for name in CPU:
        adapter = ADAPTERS[name]
        if adapter.loaded() or need(adapter.module):
            for dtype in ("bfloat16", "float8_e4m3fn"):
                if dtype in adapter.capabilities().holds:  # a framework without the dtype has no object for it
                    assert lookup(adapter.prober.dtype_for(dtype)) == BY_NAME[dtype], name


def test_api_dtype_accepts_short_names() -> None:
    need("ml_dtypes")
    raw = np.arange(6, dtype=np.uint16)
    out = dlbridge.to_numpy(raw, dtype="bf16")
    assert out.dtype.name == "bfloat16"
    assert out.__array_interface__["data"][0] == raw.__array_interface__["data"][0]
    np.testing.assert_array_equal(out.view(np.uint16), raw)


def _fake(name: str, module: str, unsafe_after: tuple[str, ...] = ()) -> Adapter:
    # The host's adapter under another name: only its names and unsafe_after are read.
    cls = type(name.title(), (type(HOST),), {"unsafe_after": unsafe_after})
    return cls(HOST.framework._replace(name=name, module=module))


def test_import_order_imports_a_framework_before_the_modules_it_must_not_follow(monkeypatch) -> None:
    # "late" crashes on import once "early" is loaded: the report's worker must import "late" first.
    fakes = [
        _fake("early", "early_mod"),
        _fake("late", "late_mod", unsafe_after=("early_mod",)),
        _fake("plain", "plain_mod"),
    ]
    monkeypatch.setattr(_cases, "REPORTED", {a.name: a for a in fakes})
    assert _cases.import_order(["early", "plain", "late"]) == ["plain", "late", "early"]
    assert _cases.import_order(["plain", "early"]) == ["plain", "early"]  # no constraint: the order given
