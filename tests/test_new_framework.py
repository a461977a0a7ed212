"""A new framework is one adapter module plus its rows: tests/toy_adapter.py adds tests/toyarray.py
(a DLPack producer and consumer over NumPy) through ``dlbridge._register.register``, and it then
converts to and from NumPy and torch like the built-in frameworks, decided by its rows. Registration
lasts for the process, so those tests run in a child pytest. An adapter that leaves out part of the
interface fails when it is made (at import of the adapter table), naming what is missing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS, Adapter, Prober, adapter_for
from tests._isolated import IN_CHILD
from tests.conftest import need

# The toy framework is NumPy's own DLPack 1.0 export and import under another name (versioned capsules,
# max_version, copy=: NumPy >= 2.1), whose imports are writable (NumPy >= 2.2; 2.1 makes every import
# read-only, and the toy would then export them READ_ONLY).
_NUMPY_DLPACK_1 = np.lib.NumpyVersion(np.__version__) >= "2.2.0"


def isolated(test: Any) -> Any:
    skip = pytest.mark.skipif(not _NUMPY_DLPACK_1, reason="the toy framework wraps NumPy >= 2.2's DLPack 1.0")
    return skip(pytest.mark.isolated(test))


@pytest.fixture(scope="module")
def to_toy() -> Any:
    if not IN_CHILD:
        return None  # the tests using it run in a child (isolated): this process registers nothing
    from dlbridge._register import register
    from tests.toy_adapter import ROWS, ToyAdapter

    return register(ToyAdapter(), ROWS)


def _ptr(arr: Any) -> int:
    return int(arr.data.ctypes.data)


@isolated
def test_numpy_and_toy_share_memory_both_ways(to_toy: Any) -> None:
    from tests.toyarray import ToyArray

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = to_toy(a)
    assert type(t) is ToyArray and t.dtype == np.float32 and t.shape == (3, 4)
    assert _ptr(t) == a.ctypes.data
    np.testing.assert_array_equal(t.data, a)
    back = dlbridge.to_numpy(t)
    assert back.dtype == np.float32 and back.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(back, a)
    assert to_toy.__name__ == "to_toy" and dlbridge.convert(a, "toy").data.ctypes.data == a.ctypes.data
    assert adapter_for(t) is ADAPTERS["toy"]


@isolated
def test_torch_and_toy_share_memory_both_ways(to_toy: Any) -> None:
    torch = need("torch")
    x = torch.arange(6, dtype=torch.int32, device="cpu")
    t = to_toy(x)
    assert t.dtype == np.int32 and _ptr(t) == x.data_ptr()
    assert t.data.tolist() == list(range(6))
    y = dlbridge.to_torch(t)
    assert y.dtype == torch.int32 and y.data_ptr() == x.data_ptr()
    assert y.tolist() == list(range(6))


@isolated
def test_the_rows_decide_what_the_toy_takes(to_toy: Any) -> None:
    torch = need("torch")
    assert "float32" in dlbridge.capabilities("toy", "1.0").imports
    x = torch.tensor([1.0, -2.0], dtype=torch.bfloat16, device="cpu")  # no row says the toy holds bf16
    with pytest.raises(dlbridge.UnsupportedDtypeError, match="bfloat16"):
        to_toy(x, fallback="raise")
    view = to_toy(x, fallback="view")  # the same bits as uint16, zero-copy
    assert view.dtype == np.uint16 and _ptr(view) == x.data_ptr()
    assert view.data.tolist() == x.view(torch.uint16).tolist()
    up = to_toy(x, fallback="upcast")  # a float32 copy, through the adapter's bf16_bits_to_f32
    assert up.dtype == np.float32 and up.data.tolist() == [1.0, -2.0]


@isolated
def test_register_refuses_taken_names_and_foreign_rows(to_toy: Any) -> None:
    from dlbridge._register import register
    from dlbridge._rows import row
    from tests.toy_adapter import ToyAdapter

    with pytest.raises(dlbridge.OptionError, match=r"'toy', 'tests\.toyarray' already taken \(by 'toy'\)"):
        register(ToyAdapter(), ())
    other = type("Other", (ToyAdapter,), {"name": "other", "module": "other_mod", "producer_modules": ()})
    with pytest.raises(dlbridge.OptionError, match="is not a row of 'other'"):
        register(other(), [row("toy", "imports", ["float32"], source="-")])


# --- an incomplete adapter fails when it is made ----------------------------------------------------


def _adapter_class(drop: str = "", **attrs: Any) -> type[Adapter]:
    from tests.toy_adapter import ToyAdapter

    body = {k: v for k, v in vars(ToyAdapter).items() if k != drop and not k.startswith("__")}
    return type("Partial", (Adapter,), {**body, **attrs})


def test_the_toy_adapter_is_complete() -> None:
    adapter = _adapter_class()()
    assert isinstance(adapter.prober, Prober) and adapter.prober.adapter is adapter


@pytest.mark.parametrize("method", ["view", "data_ptr", "copy", "contiguous", "to_device", "lookup_f32"])
def test_an_adapter_missing_an_abstract_method_cannot_be_made(method: str) -> None:
    with pytest.raises(TypeError, match=rf"Can't instantiate abstract class Partial .*{method}"):
        _adapter_class(drop=method)()


@pytest.mark.parametrize("attribute", ["name", "module", "display", "array_type", "prober_class"])
def test_an_adapter_missing_a_required_attribute_cannot_be_made(attribute: str) -> None:
    with pytest.raises(TypeError, match=f"adapter Partial does not set {attribute}; every adapter sets"):
        _adapter_class(drop=attribute)()


def test_a_gpu_only_adapter_must_say_how_to_upload() -> None:
    with pytest.raises(TypeError, match=r"cannot live on the CPU \(device_codes \[2\]\), so it must implement "):
        _adapter_class(device_codes=frozenset({2}))()


def test_a_prober_missing_a_reader_cannot_be_made() -> None:
    from tests.toy_adapter import ToyProber

    partial = type("PartialProber", (Prober,), {"make_array": ToyProber.make_array, "host_bytes": ToyProber.host_bytes})
    adapter = _adapter_class(prober_class=partial)()
    with pytest.raises(TypeError, match=r"Can't instantiate abstract class PartialProber.*to_host"):
        adapter.prober  # noqa: B018 - made on first use
    for name in ADAPTERS:  # the built-in probers are complete
        assert isinstance(ADAPTERS[name].prober, Prober)
