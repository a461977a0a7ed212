"""Dtypes a consumer cannot hold: raise / view / upcast, remembered views, dtype=, defaults."""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from tests._arrays import bits, jax_cpu, np_dtype
from tests.conftest import caps_of, need, run_child

torch = need("torch")
jnp = need("jax.numpy")
ml_dtypes = need("ml_dtypes")


def _b11(n: int = 8):
    """JAX float8_e4m3b11fnuz: torch cannot hold it, so torch is the consumer under test."""
    if "float8_e4m3b11fnuz" in caps_of("jax").cannot_export:
        pytest.skip(f"JAX {caps_of('jax').version} cannot export float8 through DLPack (0.5.3 and newer can)")
    return jax_cpu(np.arange(n, dtype=np.float32) / 4 - 1, dtype=jnp.float8_e4m3b11fnuz)


def test_raise_is_the_default_and_happens_before_the_consumer_sees_the_capsule() -> None:
    x = _b11()
    with pytest.raises(dlbridge.UnsupportedDtypeError) as err:
        dlbridge.to_torch(x)
    msg = str(err.value)
    assert "jax cpu float8_e4m3b11fnuz[8]" in msg and f"torch {torch.__version__}" in msg
    assert 'fallback="view"' in msg and 'fallback="upcast"' in msg
    assert isinstance(err.value, NotImplementedError)
    assert err.value.__cause__ is None  # torch never got the capsule, so there is nothing to chain


def test_view_shares_memory_and_keeps_the_bits() -> None:
    x = _b11()
    v = dlbridge.to_torch(x, fallback="view", readonly="drop")
    assert v.dtype == torch.uint8
    assert v.data_ptr() == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(v.numpy(), np.asarray(x).view(np.uint8))


def test_view_remembers_its_logical_dtype_onward() -> None:
    x = _b11()
    v = dlbridge.to_torch(x, fallback="view", readonly="drop")
    back = dlbridge.to_jax(v)
    assert back.dtype == jnp.float8_e4m3b11fnuz
    assert back.unsafe_buffer_pointer() == v.data_ptr()
    n = dlbridge.to_numpy(v)
    assert n.dtype == np_dtype("float8_e4m3b11fnuz") and n.ctypes.data == v.data_ptr()
    np.testing.assert_array_equal(bits(n), bits(np.asarray(x)))


def test_a_view_into_a_consumer_that_still_cannot_hold_it_is_another_remembering_view() -> None:
    """The caller chose a view when it was made: fallback="raise" (the default) does not undo that."""
    g = np.zeros(8, dtype=ml_dtypes.float8_e4m3b11fnuz)
    g.view(np.uint8)[:] = np.arange(8, dtype=np.uint8)
    u = dlbridge.to_torch(g, fallback="view")
    again = dlbridge.to_torch(u)  # torch -> torch, torch still cannot hold float8_e4m3b11fnuz
    assert again.dtype == torch.uint8 and again.data_ptr() == u.data_ptr() == g.ctypes.data
    n = dlbridge.to_numpy(again)  # ... and it remembers: NumPy (ml_dtypes) gets the real dtype
    assert n.dtype == g.dtype and n.ctypes.data == g.ctypes.data
    np.testing.assert_array_equal(bits(n), bits(g))
    # An explicit fallback still decides: a float32 copy; and a plain uint8 tensor stays plain.
    assert dlbridge.to_torch(u, fallback="upcast").dtype == torch.float32
    assert dlbridge.to_torch(u, copy=False).data_ptr() == g.ctypes.data
    assert dlbridge.to_numpy(dlbridge.to_torch(u.clone())).dtype == np.uint8


def test_a_copied_view_remembers_the_copy() -> None:
    """fallback="view" with copy=True: the returned copy (not a temporary) carries the logical dtype."""
    x = _b11()
    v = dlbridge.to_torch(x, fallback="view", copy=True)
    assert v.dtype == torch.uint8 and v.data_ptr() != x.unsafe_buffer_pointer()
    back = dlbridge.to_jax(v)
    assert back.dtype == jnp.float8_e4m3b11fnuz
    np.testing.assert_array_equal(bits(np.asarray(back)), bits(np.asarray(x)))


def test_the_record_dies_with_the_view() -> None:
    from dlbridge._pipeline import _logical as _logical

    x = _b11()
    before = _logical.live()
    v = dlbridge.to_torch(x, fallback="view", readonly="drop")
    assert _logical.live() == before + 1
    again = np.asarray(x).view(np.uint8)  # another object over the same memory: never relabelled
    assert again.ctypes.data == v.data_ptr() and dlbridge.to_numpy(again).dtype == np.uint8
    del v
    assert _logical.live() == before
    assert dlbridge.to_numpy(again).dtype == np.uint8


def test_a_plain_uint8_tensor_is_not_mistaken_for_a_view() -> None:
    u = torch.arange(8, dtype=torch.uint8, device="cpu")
    assert dlbridge.to_numpy(u).dtype == np.uint8


def test_upcast_gives_float32_with_equal_values() -> None:
    x = _b11()
    up = dlbridge.to_torch(x, fallback="upcast")
    assert up.dtype == torch.float32
    np.testing.assert_array_equal(up.numpy(), np.asarray(x).astype(np.float32))
    assert up.data_ptr() != x.unsafe_buffer_pointer()


@pytest.mark.parametrize(
    "name",
    ["float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
     "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"],
)  # fmt: skip
def test_decode_tables_match_ml_dtypes(name: str) -> None:
    from dlbridge._dtypes import decode_table

    if not hasattr(ml_dtypes, name):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name} (0.5 added it)")
    every = np.arange(256, dtype=np.uint8).view(np_dtype(name)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(decode_table(name), dtype=np.float32), every)


def test_explicit_dtype_reinterprets_zero_copy() -> None:
    u = torch.tensor([0x3F80, 0x4000, 0xC040], dtype=torch.uint16, device="cpu")
    t = dlbridge.to_torch(u, dtype="bfloat16")
    assert t.dtype == torch.bfloat16 and t.data_ptr() == u.data_ptr()
    assert t.tolist() == [1.0, 2.0, -3.0]
    n = dlbridge.to_numpy(u, dtype=ml_dtypes.bfloat16)
    assert n.dtype == np_dtype("bfloat16") and n.tolist() == [1.0, 2.0, -3.0]


def test_explicit_dtype_must_keep_the_width() -> None:
    with pytest.raises(
        dlbridge.OptionError, match=r"dtype='float32' \(32 bits\) cannot reinterpret .*uint16.* \(16 bits\)"
    ):
        dlbridge.to_torch(torch.zeros(3, dtype=torch.uint16, device="cpu"), dtype="float32")
    with pytest.raises(dlbridge.OptionError, match="not a dtype dlbridge knows"):
        dlbridge.to_torch(torch.zeros(3, device="cpu"), dtype="float33")


def test_bad_fallback_value() -> None:
    with pytest.raises(
        dlbridge.OptionError, match="fallback='copy' is not a fallback; expected one of 'raise', 'view', 'upcast'"
    ):
        dlbridge.to_torch(torch.zeros(1, device="cpu"), fallback="copy")


def test_process_default_and_context_manager() -> None:
    assert dlbridge.get_default_fallback() == "raise"
    previous = dlbridge.set_default_fallback("view")
    try:
        assert dlbridge.to_torch(_b11(), readonly="drop").dtype == torch.uint8  # (JAX arrays are read-only)
        with dlbridge.fallback_policy("upcast"):
            assert dlbridge.to_torch(_b11()).dtype == torch.float32
            assert dlbridge.to_torch(_b11(), fallback="view", readonly="drop").dtype == torch.uint8  # the call wins
        assert dlbridge.get_default_fallback() == "view"
    finally:
        dlbridge.set_default_fallback(previous)
    with pytest.raises(dlbridge.UnsupportedDtypeError):
        dlbridge.to_torch(_b11())


def test_context_manager_is_per_thread() -> None:
    import threading

    seen = []
    with dlbridge.fallback_policy("view"):
        t = threading.Thread(target=lambda: seen.append(dlbridge.get_default_fallback()))
        t.start()
        t.join()
    assert seen == ["raise"]


def test_environment_variable() -> None:
    import os

    code = "import dlbridge; print(dlbridge.get_default_fallback())"
    env = {**os.environ, "DLBRIDGE_FALLBACK": "upcast"}
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "upcast"
    env["DLBRIDGE_FALLBACK"] = "bogus"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "$DLBRIDGE_FALLBACK='bogus' is not a fallback" in bad.stderr


def test_numpy_without_ml_dtypes_needs_a_fallback() -> None:
    """Without ml_dtypes NumPy cannot hold bf16: raise (saying what to install), view, upcast."""
    proc = run_child(
        """
        import numpy as np, torch, dlbridge
        t = torch.tensor([1.0, -2.5, 3.0], dtype=torch.bfloat16, device="cpu")
        try:
            dlbridge.to_numpy(t)
        except dlbridge.UnsupportedDtypeError as e:
            assert "pip install ml_dtypes" in str(e), e
        else:
            raise SystemExit("no error")
        v = dlbridge.to_numpy(t, fallback="view")
        assert v.dtype == np.uint16 and v.ctypes.data == t.data_ptr()
        back = dlbridge.to_torch(v)
        assert back.dtype == torch.bfloat16 and back.data_ptr() == t.data_ptr()
        up = dlbridge.to_numpy(t, fallback="upcast")
        assert up.dtype == np.float32 and up.tolist() == [1.0, -2.5, 3.0], up
        print("ok")
        """,
        block=("ml_dtypes",),  # as if it were not installed
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


def test_subbyte_jax_fp4_is_not_viewed_but_repacked() -> None:
    # No uint4 to view packed fp4 as: NumPy gets its own fp4 (one value a byte), a copy (see tests/test_fp4.py).
    if not hasattr(jnp, "float4_e2m1fn"):
        pytest.skip("this JAX has no float4_e2m1fn")
    x = jax_cpu([0.5, -6.0, 1.5, 0.0], dtype=jnp.float4_e2m1fn)
    out = dlbridge.to_numpy(x, fallback="view")
    assert out.dtype == x.dtype and out.astype(np.float32).tolist() == [0.5, -6.0, 1.5, 0.0]
    with pytest.raises(dlbridge.LayoutError, match="copy=False forbids"):
        dlbridge.to_numpy(x, fallback="view", copy=False)
