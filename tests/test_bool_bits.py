"""No untrustworthy bool bits: dlbridge never labels bytes as bool that a producer did not.

Bytes other than 0/1 read as bool make consumers compute wrong results (JAX: ``x ^ True`` is True
for a byte 2, ``x & True`` is False). ``dtype="bool"`` over non-bool memory is refused (checking
the bytes could not hold: the memory stays shared and writable), and ``fallback="view"`` makes no
uint8 view of bool memory that could come back as bool after a write.
"""

from __future__ import annotations

import pytest

import dlbridge
from dlbridge._pipeline._plan import plan_for
from tests._robust_helpers import TO, data_ptr, np, torch
from tests.conftest import need
from tests.ctypes_producer import CtypesArray

need("jax")


@pytest.mark.parametrize("consumer", list(TO))
@pytest.mark.parametrize("dtype", ["uint8", "int8", "float8_e4m3fn"])
def test_dtype_bool_over_non_bool_memory_is_refused(consumer: str, dtype: str) -> None:
    p = CtypesArray.from_bytes(bytes([0, 1, 2, 254]), dtype, (4,))
    with pytest.raises(dlbridge.OptionError, match=r'dtype="bool" cannot reinterpret .*compare instead \(x != 0\)'):
        TO[consumer](p, dtype="bool")
    assert p.balanced  # refused before anything was imported


@pytest.mark.parametrize("consumer", list(TO))
def test_dtype_bool_refused_for_raw_capsules_and_the_capsule_is_kept(consumer: str) -> None:
    a = np.array([0, 1, 2, 254], dtype=np.uint8)
    capsule = a.__dlpack__()
    before = dlbridge.inspect(capsule)
    with pytest.raises(dlbridge.OptionError, match='dtype="bool"'):
        TO[consumer](capsule, dtype="bool")
    assert dlbridge.inspect(capsule) == before


@pytest.mark.parametrize("consumer", list(TO))
def test_dtype_bool_over_bool_memory_is_the_native_import(consumer: str) -> None:
    b = CtypesArray.from_bytes(bytes([1, 0, 1]), "bool", (3,))  # 64-byte aligned: JAX shares it
    r = TO[consumer](b, dtype="bool")
    assert np.asarray(r).dtype == np.bool_ and np.asarray(r).tolist() == [True, False, True]
    assert data_ptr(r) == b.data_ptr


def test_comparing_gives_true_bools_where_the_relabel_would_not() -> None:
    """What the message proposes works, and shares nothing it should not."""
    t = dlbridge.to_torch(np.array([0, 1, 2, 254], dtype=np.uint8)) != 0
    assert t.dtype == torch.bool and t.tolist() == [False, True, True, True]
    assert (t ^ True).tolist() == [True, False, False, False]


def test_no_uint8_view_of_bool_for_a_consumer_without_bool() -> None:
    """A consumer row without bool (torch before 2.2, CuPy before 12) gets no fallback="view" of
    bool memory: a write through the uint8 view would come back as an invalid bool."""
    torch_caps = dlbridge._adapters.ADAPTERS["torch"].capabilities()
    no_bool = torch_caps._replace(imports=torch_caps.imports - {"bool"}, holds=torch_caps.holds - {"bool"})
    info = dlbridge.inspect(np.array([True, False]))
    with pytest.raises(dlbridge.UnsupportedDtypeError) as err:
        plan_for(info, no_bool, "view")
    assert 'Pass fallback="view"' not in str(err.value)  # not offered as a way out either
    assert "a uint8 view of bool memory could come back as bool" in str(err.value)
    assert plan_for(info, torch_caps, "view").mode == "native"  # torch 2.13 imports bool itself
