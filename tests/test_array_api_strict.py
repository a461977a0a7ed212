"""array-api-strict both ways with torch, NumPy and JAX: values bit for bit, dtype, shared memory.

Its arrays wrap NumPy arrays, and both its export and its import share them; it holds only the
Array API standard's dtypes, so float16, bfloat16 and float8 are refused by name, or come as
same-width uints with ``fallback="view"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from tests._arrays import X64, bits, cpu_array, data_ptr, reference, to_host
from tests.conftest import need

XP = ADAPTERS["array_api_strict"]
PRODUCERS = ("torch", "numpy", "jax")
DTYPES = ("float32", "float64", "bool", "complex64", "complex128", "uint16", "int8", "uint64", "int64")


@pytest.fixture(autouse=True)
def xp() -> Any:
    need("ml_dtypes")
    return need("array_api_strict")


def _reference(dtype: str) -> np.ndarray:
    return reference(dtype, (3, 4)) if dtype != "complex128" else reference("complex64", (3, 4)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("producer", PRODUCERS)
def test_into_array_api_strict_is_zero_copy(producer: str, dtype: str) -> None:
    need(producer)
    ref = _reference(dtype)
    src = cpu_array(producer, ref)
    out = dlbridge.to_array_api_strict(src, copy=False)
    assert XP.prober.dtype_str(out) == dtype
    assert tuple(out.shape) == ref.shape
    np.testing.assert_array_equal(bits(to_host("array_api_strict", out)), bits(ref))
    assert data_ptr("array_api_strict", out) == data_ptr(producer, src)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("consumer", PRODUCERS)
def test_out_of_array_api_strict_is_zero_copy(consumer: str, dtype: str) -> None:
    need(consumer)
    if consumer == "jax" and dtype in X64:
        pytest.skip("JAX without x64 holds no 64-bit types (refused, see test_matrix.py)")
    ref = _reference(dtype)
    src = XP.prober.make_array(ref, "cpu")  # 64-byte aligned: XLA shares only such buffers
    out = dlbridge.convert(src, consumer)
    assert ADAPTERS[consumer].prober.dtype_str(out) == dtype
    np.testing.assert_array_equal(bits(to_host(consumer, out)), bits(ref))
    assert data_ptr(consumer, out) == data_ptr("array_api_strict", src)


def test_writes_show_both_ways(xp: Any) -> None:
    torch = need("torch")
    t = torch.zeros(4, device="cpu")
    a = dlbridge.to_array_api_strict(t)
    t[1] = 3.0
    assert float(a[1]) == 3.0
    a[2] = 5.0
    assert float(t[2]) == 5.0


def test_copy_true_is_a_new_buffer() -> None:
    torch = need("torch")
    t = torch.arange(4.0, device="cpu")
    a = dlbridge.to_array_api_strict(t, copy=True)
    assert data_ptr("array_api_strict", a) != t.data_ptr()
    np.testing.assert_array_equal(to_host("array_api_strict", a), t.numpy())


def test_strided_layouts_are_shared() -> None:
    torch = need("torch")
    t = torch.arange(12.0, device="cpu").reshape(3, 4)
    for src in (t.T, t[1:, 2:]):
        a = dlbridge.to_array_api_strict(src, copy=False)
        np.testing.assert_array_equal(to_host("array_api_strict", a), src.numpy())
        assert data_ptr("array_api_strict", a) == src.data_ptr()
    neg = np.arange(6.0)[::-1]
    a = dlbridge.to_array_api_strict(neg, copy=False)
    np.testing.assert_array_equal(to_host("array_api_strict", a), neg)
    assert data_ptr("array_api_strict", a) == neg.ctypes.data


def test_read_only_memory_stays_read_only(xp: Any) -> None:
    src = np.arange(4.0)
    src.flags.writeable = False
    a = dlbridge.to_array_api_strict(src)
    assert XP.is_readonly(a) and data_ptr("array_api_strict", a) == src.ctypes.data
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1.0
    torch = need("torch")
    with pytest.raises(dlbridge.ReadOnlyError, match="copy=True"):
        dlbridge.to_torch(a)  # torch has no read-only tensors
    assert dlbridge.to_torch(a, copy=True).data_ptr() != src.ctypes.data
    del torch


@pytest.mark.parametrize(("dtype", "uint"), [("float16", "uint16"), ("bfloat16", "uint16"), ("float8_e4m3fn", "uint8")])
def test_dtypes_outside_the_standard_are_refused_or_viewed(dtype: str, uint: str) -> None:
    torch = need("torch")
    ref = reference(dtype, (2, 3))
    src = ADAPTERS["torch"].prober.make_array(ref, "cpu")
    with pytest.raises(dlbridge.UnsupportedDtypeError, match=f'cannot hold {dtype}.*fallback="view" for a zero-copy'):
        dlbridge.to_array_api_strict(src)
    view = dlbridge.to_array_api_strict(src, fallback="view")
    assert XP.prober.dtype_str(view) == uint
    assert data_ptr("array_api_strict", view) == src.data_ptr()
    np.testing.assert_array_equal(to_host("array_api_strict", view), ref.view(uint))
    back = dlbridge.to_torch(view)  # the view remembers what its bits are
    assert back.dtype == getattr(torch, dtype) and back.data_ptr() == src.data_ptr()


def test_float16_refusal_says_why() -> None:
    with pytest.raises(dlbridge.UnsupportedDtypeError, match="The Array API standard has no float16"):
        dlbridge.to_array_api_strict(np.ones(2, np.float16))


def test_device_objects_and_names(xp: Any) -> None:
    a = xp.asarray([1.0, 2.0])
    out = dlbridge.to_numpy(a, device=a.device)
    assert out.ctypes.data == data_ptr("array_api_strict", a)
    assert isinstance(dlbridge.convert(np.ones(2), "array-api-strict"), type(a))
    assert isinstance(dlbridge.convert(np.ones(2), xp), type(a))


def test_without_array_api_strict_the_error_says_what_to_install() -> None:
    from tests.conftest import run_child

    proc = run_child(
        """
        import numpy as np, dlbridge
        try:
            dlbridge.convert(np.ones(2), "array-api-strict")
        except dlbridge.MissingFrameworkError as err:
            print("MISSING:", err)
        """,
        block=("array_api_strict",),  # as if it were not installed
    )
    assert "MISSING:" in proc.stdout and "pip install array_api_strict" in proc.stdout, proc.stdout + proc.stderr


def test_an_older_api_version_flag_still_converts(xp: Any) -> None:
    import warnings

    torch = need("torch")
    a = xp.asarray([1.0, 2.0])
    try:
        with warnings.catch_warnings():  # it may warn that 2022.12 is an old version of the standard
            warnings.simplefilter("ignore")
            xp.set_array_api_strict_flags(api_version="2022.12")
        with pytest.raises(ValueError, match="max_version"):
            a.__dlpack__(max_version=(1, 0))  # what dlbridge works around: a legacy capsule instead
        for _ in range(2):  # the pipeline, then the route
            t = dlbridge.to_torch(a)
            assert t.dtype == torch.float64 and t.data_ptr() == data_ptr("array_api_strict", a)
    finally:
        xp.reset_array_api_strict_flags()
