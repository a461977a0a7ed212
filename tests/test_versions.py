"""Behaviour that differs by framework version: each test asks the capability table what the
installed stack does and checks that dlbridge gives the same result on every supported stack
(the version matrix, .ci/matrix, runs this file on the oldest, a middle and today's stack)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dlbridge
from dlbridge._capabilities import capabilities, satisfied
from tests._arrays import jax_cpu
from tests.conftest import need, run_child


def _caps(name: str):
    mod = need(name)
    return capabilities(name, mod.__version__)


# --- the table: producer rows, ml_dtypes versions, boundaries ------------------------------------


def test_requires_names_a_minimum_version() -> None:
    ml_dtypes = need("ml_dtypes")
    assert satisfied("ml_dtypes>=0.4") and not satisfied("ml_dtypes>=99")
    new = satisfied("ml_dtypes>=0.5")
    assert new == hasattr(ml_dtypes, "float8_e8m0fnu")
    assert ("float8_e8m0fnu" in capabilities("numpy", "2.4.6").holds) is new
    assert "float8_e4m3fn" in capabilities("numpy", "1.26.4").holds  # every supported ml_dtypes has it


def test_rows_at_their_boundaries() -> None:
    assert capabilities("jax", "0.4.23").exports_uint8 == {"bool"}
    assert not capabilities("jax", "0.4.24").exports_uint8
    assert "bool" in capabilities("jax", "0.4.24").imports and "bool" not in capabilities("jax", "0.4.23").imports
    old, deprecated, gone = (capabilities("jax", v) for v in ("0.4.34", "0.4.35", "0.7.2"))
    assert old.raw_capsules and not old.raw_capsules_deprecated
    assert deprecated.raw_capsules and deprecated.raw_capsules_deprecated
    assert not gone.raw_capsules
    assert (
        capabilities("jax", "0.4.30").copy_crashes_unaligned and not capabilities("jax", "0.5.3").copy_crashes_unaligned
    )
    assert capabilities("jax", "0.7.1").row_major_only and not capabilities("jax", "0.10.2").row_major_only
    assert not capabilities("jax", "0.5.2").imports & {"float4_e2m1fn", "float8_e4m3fn"}
    assert "float4_e2m1fn" not in capabilities("jax", "0.10.2").imports
    assert "float4_e2m1fn" in capabilities("jax", "0.9.0").imports or not satisfied("ml_dtypes>=0.5")
    # .ci/edges (compat_edges.md): jax+jaxlib 0.9.1 import their own float4_e2m1fn, 0.9.2 refuses it
    assert "float4_e2m1fn" in capabilities("jax", "0.9.1").imports or not satisfied("ml_dtypes>=0.5")
    assert "float4_e2m1fn" not in capabilities("jax", "0.9.2").imports
    assert capabilities("numpy", "2.1.3").readonly_imports and not capabilities("numpy", "2.2.0").readonly_imports
    assert not capabilities("numpy", "2.0.2").readonly_arrays and capabilities("numpy", "2.1.0").readonly_arrays
    # .ci/edges (compat_edges.md): numpy 1.24.4 cannot export bool, 1.25.0 can
    assert "bool" in capabilities("numpy", "1.24.4").cannot_export
    assert "bool" not in capabilities("numpy", "1.25.0").cannot_export


# --- ml_dtypes: kinds an older ml_dtypes lacks ----------------------------------------------------


def test_to_numpy_of_new_fp8_kinds_reinterprets_or_refuses_cleanly() -> None:
    torch = need("torch")
    need("ml_dtypes")
    t = torch.full((3,), 2.0, device="cpu").to(torch.float8_e8m0fnu)
    bits = t.view(torch.uint8).numpy().copy()
    if "float8_e8m0fnu" in _caps("numpy").holds:
        a = dlbridge.to_numpy(t)
        assert a.dtype.name == "float8_e8m0fnu" and a.ctypes.data == t.data_ptr()
        assert (a.view(np.uint8) == bits).all()
    else:  # ml_dtypes < 0.5: a clean refusal that says what to install, never an AttributeError
        with pytest.raises(dlbridge.UnsupportedDtypeError, match=r"ml_dtypes>=0\.5 \(pip install -U ml_dtypes\)"):
            dlbridge.to_numpy(t)
    view = dlbridge.to_numpy(t, fallback="view")  # the real dtype where NumPy holds it, else uint8
    assert view.dtype.name in ("float8_e8m0fnu", "uint8") and view.ctypes.data == t.data_ptr()
    assert (view.view(np.uint8) == bits).all()
    if "float8_e8m0fnu" not in _caps("numpy").holds:
        up = dlbridge.to_numpy(t, fallback="upcast")
        assert up.dtype == np.float32 and (up == 2.0).all()


# --- NumPy < 2.2 imports everything read-only ------------------------------------------------------


def test_to_numpy_of_writable_memory_is_writable_and_shared_on_every_numpy() -> None:
    torch = need("torch")
    t = torch.arange(6.0, device="cpu").reshape(2, 3)
    a = dlbridge.to_numpy(t)
    assert a.flags.writeable and a.ctypes.data == t.data_ptr()
    a[0, 0] = 42.0
    assert t[0, 0].item() == 42.0  # a write reaches the producer's memory
    back = dlbridge.to_torch(a)  # the round trip works on every NumPy (no ReadOnlyError before 2.2)
    assert back.data_ptr() == t.data_ptr() and back.tolist() == t.tolist()


def test_to_numpy_of_a_jax_array_is_read_only_on_every_numpy() -> None:
    jnp = need("jax.numpy")
    x = jax_cpu(jnp.arange(4.0))
    a = dlbridge.to_numpy(x)  # JAX arrays are immutable; their legacy capsules cannot say so
    assert not a.flags.writeable and a.ctypes.data == x.unsafe_buffer_pointer()


def test_to_numpy_of_a_read_only_array_stays_read_only() -> None:
    src = np.arange(4.0)
    src.flags.writeable = False
    out = dlbridge.to_numpy(src)  # NumPy >= 2.1: READ_ONLY in the capsule; older: a read-only alias
    assert not out.flags.writeable and out.ctypes.data == src.ctypes.data
    copied = dlbridge.to_numpy(src, copy=True)
    assert copied.flags.writeable and copied.ctypes.data != src.ctypes.data and copied.tolist() == src.tolist()


# --- JAX: layouts, raw capsules, its copy crash -------------------------------------------------


def _transposed_sources():
    torch = need("torch")
    yield "torch .t()", torch.arange(6.0, device="cpu").reshape(2, 3).t()
    yield "numpy .T", np.arange(6.0, dtype=np.float32).reshape(2, 3).T
    yield "torch (4, 1) with strides (1, 4)", torch.arange(4.0, device="cpu").reshape(1, 4).t()


def test_transposed_sources_reach_jax_with_right_values_on_every_jax() -> None:
    need("jax")
    caps = _caps("jax")
    for label, src in _transposed_sources():
        expected = np.asarray(src.tolist(), dtype=np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # JAX 0.4.35-0.7.1 warn on raw capsules: dlbridge must not use them
            out = dlbridge.to_jax(src)
        assert np.asarray(out).tolist() == expected.tolist(), label
        if caps.row_major_only and "(4, 1)" not in label:  # a dense copy, and copy=False says so
            with pytest.raises(dlbridge.LayoutError, match="copy=False forbids"):
                dlbridge.to_jax(src, copy=False)


def test_to_jax_copy_of_a_small_unaligned_buffer_does_not_crash() -> None:
    need("jax")
    proc = run_child(
        """
        import numpy as np, dlbridge
        buf = np.zeros(256, np.uint8)
        off = (-buf.ctypes.data) % 64 + 4  # JAX <= 0.4.30 segfaulted copying such an import
        a = buf[off:off + 16].view(np.float32).reshape(1, 4)
        a[:] = [1, 2, 3, 4]
        out = dlbridge.to_jax(a, copy=True)
        a[:] = 0
        print(np.asarray(out).tolist(), out.unsafe_buffer_pointer() != a.ctypes.data)
        """
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.split("\n")[-2] == "[[1.0, 2.0, 3.0, 4.0]] True", proc.stdout
