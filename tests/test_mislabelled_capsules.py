"""Capsules whose dtype label is not the data's: kDLFloat with 8 bits (what a producer that labels by
NumPy kind makes of ml_dtypes' float8_e5m2) is refused by the capsule layer for every consumer, on
both paths and on the fast route; and ml_dtypes' kinds, which decide what such producers write, are
the ones the capability rows assume.

(CuPy is such a producer: tests/test_simcuda_fp8.py checks that dlbridge relabels its exports.)
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import dlbridge
from dlbridge._capabilities import capabilities
from dlbridge._capsule._probe import probe
from dlbridge._dtypes import BY_NAME, FLOAT8
from dlbridge._errors import CapsuleError
from dlbridge._route import _replay as _route
from dlbridge._rows import cupy as cupy_rows
from dlbridge._rows._common import ML_ONLY
from tests._route_helpers import on_both_paths, route_path  # noqa: F401 - the fixture on_both_paths parametrizes
from tests.conftest import need
from tests.ctypes_producer import CtypesArray

pytest_generate_tests = on_both_paths

AMBIGUOUS = "kDLFloat with 8 bits"
BITS = bytes(range(0, 240, 10))  # 24 float8 bit patterns


def _float8_capsule_source() -> CtypesArray:
    """A producer whose capsule says (kDLFloat, 8 bits): as CuPy labels an ml_dtypes float8_e5m2 array."""
    arr = CtypesArray.from_bytes(BITS, "uint8", (4, 6))
    return arr.with_(code=2, bits=8)


@pytest.mark.parametrize("target", ["numpy", "torch", "jax", "onnxruntime"])
@pytest.mark.parametrize("fallback", ["raise", "view", "upcast"])
def test_a_kdlfloat8_capsule_is_refused_for_every_consumer(target: str, fallback: str) -> None:
    need(target)
    src = _float8_capsule_source()
    for x in (src, src.__dlpack__()):  # the array (a producer dlbridge has no adapter for), a bare capsule
        for _ in range(2):
            with pytest.raises(CapsuleError, match=AMBIGUOUS):
                dlbridge.convert(x, target, fallback=fallback)
    capsule = src.__dlpack__()
    with pytest.raises(CapsuleError, match=r"x\.view\(uint8\)"):
        dlbridge.inspect(capsule)
    assert probe(capsule) is not None  # never consumed: the producer's deleter runs once, at its end
    del capsule, x
    gc.collect()
    assert src.balanced and src.read_bytes() == BITS


def test_the_fast_route_hands_no_consumer_a_kdlfloat8_capsule() -> None:
    need("torch")
    dlbridge.to_torch(np.arange(4, dtype=np.float32))  # the route's state for torch, ready
    state = _route.SPECS["torch"][0]
    assert state.ready
    # arrays of this type replayed as a framework's own: x.__dlpack__(), handed to torch as it is
    _route._producers[CtypesArray] = _route.Producer(kind=0, handle=None, guards=(), alias=None, relabels=None)
    try:
        src = _float8_capsule_source()
        for fallback in ("raise", "view"):
            for _ in range(3):
                with pytest.raises(CapsuleError, match=AMBIGUOUS):
                    dlbridge.to_torch(src, fallback=fallback)
        seen = [r for k, r in state.routes.items() if k & 0xFFFFFFFF == 2 | 8 << 8 | 1 << 16]
        assert seen and all(r is None for r in seen)  # the route saw the label and stored no replay for it
    finally:
        _route._producers.pop(CtypesArray, None)
    gc.collect()
    assert src.balanced


def test_ml_dtypes_kinds_are_the_ones_the_cupy_rows_assume() -> None:
    """Producers that label a capsule by NumPy's dtype.kind (CuPy: 'f' -> kDLFloat of the item's width,
    cupy/_core/dlpack.pyx) write kDLFloat with 8 bits for a kind-'f' float8: the rows name those kinds
    (cupy rows' KIND_F, exports_as_float) and refuse the kind-'V' ones (cannot_export). When ml_dtypes
    changes a kind, this fails: the rows (and dlbridge's relabelling) must follow."""
    ml_dtypes = need("ml_dtypes")
    small = [n for n in BY_NAME if n in FLOAT8 or n.startswith(("float4_", "float6_"))]
    kinds = {n: np.dtype(getattr(ml_dtypes, n)).kind for n in small if hasattr(ml_dtypes, n)}
    assert kinds["float8_e5m2"] == "f"  # ml_dtypes/_src/dtypes.cc: "Treating e5m2 as the natural 'float' type"
    assert {n for n, k in kinds.items() if k == "f"} == cupy_rows.KIND_F
    assert {n for n, k in kinds.items() if k != "f"} <= {n for n, k in kinds.items() if k == "V"}
    caps = capabilities("cupy", "14.2.0")
    assert caps.exports_as_float == cupy_rows.KIND_F
    assert caps.cannot_export == ML_ONLY - {"bfloat16"} - cupy_rows.KIND_F
    assert not caps.exports_as_float & caps.cannot_export
