"""NumPy >= 2.5's DLPack dtype registry (np.dtypes.register_dlpack_dtype): where the user has
registered ml_dtypes' kinds, dlbridge lets NumPy export and import them itself, with the same results
(values, dtype, shared memory) as the relabelled uints it uses otherwise.

Registration is global and permanent for a process, so every registering case runs in a child
interpreter (run_child); the parent suite never registers anything. These tests run in the version
matrix's newest stack (NumPy 2.5); elsewhere they skip, saying why.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import need, run_child


def _numpy_with_registry():
    np = need("numpy")
    if not hasattr(getattr(np, "dtypes", None), "register_dlpack_dtype"):
        pytest.skip(f"NumPy {np.__version__} has no DLPack dtype registry (np.dtypes.register_dlpack_dtype, NumPy 2.5)")
    need("ml_dtypes")
    return np


# In the child: convert each bfloat16/float8 kind JAX holds NumPy -> JAX, JAX -> NumPy and NumPy -> NumPy;
# record (direction, kind, result dtype, bytes, memory shared). REGISTER_FIRST: register before any
# conversion (the fast routes are built over NumPy's own export and import); else convert, register,
# convert again (routes built before the registration keep relabelling).
_CHILD = """
import json, sys
import numpy as np, ml_dtypes, jax, jax.numpy as jnp
import dlbridge
from dlbridge._adapters import ADAPTERS
from dlbridge._adapters._numpy import aligned_copy

numpy_adapter = ADAPTERS["numpy"]
kinds = sorted(set(numpy_adapter._registrable) & dlbridge.capabilities("jax").holds)

def ptr(a):
    return a.unsafe_buffer_pointer() if isinstance(a, jax.Array) else a.__array_interface__["data"][0]

def rounds():
    out = []
    for kind in kinds:
        dtype = np.dtype(getattr(ml_dtypes, kind))
        x = aligned_copy(np.arange(-4, 12).reshape(4, 4).astype(np.float32).astype(dtype))
        for _ in range(3):  # the pipeline, then the warm route
            j = dlbridge.to_jax(x)
            y = dlbridge.to_numpy(j)
            z = dlbridge.to_numpy(x)
        for name, src, res in (("numpy->jax", x, j), ("jax->numpy", j, y), ("numpy->numpy", x, z)):
            out.append([name, kind, str(res.dtype), np.asarray(res).tobytes().hex(), ptr(res) == ptr(src)])
    return out

before = [] if sys.argv[1] == "first" else rounds()
assert not numpy_adapter.registered_dtypes(), "registered before register_numpy_dtypes()"
assert not set(kinds) & numpy_adapter.capabilities().imports
registered = dlbridge.register_numpy_dtypes()
after = rounds()
cpu = jax.devices("cpu")[0]
native = [str(np.from_dlpack(jax.device_put(jnp.zeros(2, k), cpu)).dtype) for k in kinds]  # NumPy itself imports them now
print(json.dumps({"kinds": kinds, "registered": registered, "before": before, "after": after, "native": native,
                  "imports": sorted(set(kinds) & numpy_adapter.capabilities().imports)}))
"""


def _child(order: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, order], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(result: dict) -> None:
    kinds = result["kinds"]
    assert "bfloat16" in kinds and any(k.startswith("float8_") for k in kinds), kinds
    assert set(kinds) <= set(result["registered"])
    assert result["native"] == kinds  # np.from_dlpack imports every kind natively after registration
    assert result["imports"] == kinds  # and the NumPy capability row says so
    for direction, kind, dtype, _, shared in result["after"]:
        assert dtype == kind, (direction, kind, dtype)
        assert shared, f"{direction} {kind}: copied"


def test_registered_and_unregistered_numpy_give_the_same_arrays():
    _numpy_with_registry()
    need("jax")
    result = _child("later")
    _check(result)
    assert result["before"] == result["after"]  # values, dtype and sharing: the same either way


def test_registered_before_any_conversion():
    _numpy_with_registry()
    need("jax")
    first, later = _child("first"), _child("later")
    _check(first)
    assert first["after"] == later["before"]  # routes built over NumPy's own export/import: same arrays


def test_register_numpy_dtypes_leaves_other_registrations_alone():
    _numpy_with_registry()
    proc = run_child(
        """
        import numpy as np, ml_dtypes, dlbridge
        from dlbridge._adapters import ADAPTERS
        bf16 = np.dtype(ml_dtypes.bfloat16)
        np.dtypes.register_dlpack_dtype((5, 16), bf16)  # someone else's choice of (code, bits)
        registered = dlbridge.register_numpy_dtypes()
        assert "bfloat16" not in registered and "float8_e5m2" in registered, registered
        assert dlbridge.register_numpy_dtypes() == registered  # idempotent
        assert "bfloat16" not in ADAPTERS["numpy"].capabilities().imports
        x = np.arange(6, dtype=np.float32).astype(bf16)
        y = dlbridge.to_numpy(x)
        assert y.dtype == bf16 and y.__array_interface__["data"][0] == x.__array_interface__["data"][0]
        print("ok")
        """
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.stdout + proc.stderr)[-4000:]


def test_register_numpy_dtypes_needs_numpy_2_5():
    np = need("numpy")
    if hasattr(getattr(np, "dtypes", None), "register_dlpack_dtype"):
        pytest.skip(f"NumPy {np.__version__} has the DLPack dtype registry")
    import dlbridge

    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r"register_dlpack_dtype is new in NumPy 2\.5"):
        dlbridge.register_numpy_dtypes()


def test_report_strict_agrees_with_numpy_2_5(tmp_path):
    _numpy_with_registry()
    proc = subprocess.run(
        [sys.executable, "-m", "dlbridge", "report", "--strict", "--out", str(tmp_path / "m.md")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "0 table disagreements" in proc.stdout + proc.stderr
