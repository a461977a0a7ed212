"""A ``fallback="view"`` result's logical dtype belongs to that object alone, and every path honours
``fallback``.

Each test pins one way a logical dtype once reached the wrong object (a record kept per memory
description): a plain array over the same bytes, a consumer's copy on import, memory reused after
a free, ``set_`` and in-place metadata changes, two views of one memory. Derived arrays (slices,
copies) are plain unsigned arrays. Values, dtypes and data pointers are checked throughout.
"""

from __future__ import annotations

import gc

import pytest

import dlbridge
from dlbridge._pipeline import _logical as _logical
from tests._arrays import np_dtype, set_in_place
from tests.conftest import caps_of, need
from tests.ctypes_producer import CtypesArray

np = need("numpy")
torch = need("torch")
jax = need("jax")
jnp = need("jax.numpy")
ml_dtypes = need("ml_dtypes")

B11 = "float8_e4m3b11fnuz"  # ml_dtypes / JAX hold it, torch cannot
FP4 = "float4_e2m1fn_x2"  # torch's packed float4: NumPy and JAX cannot hold it


def _fp4(n: int = 8, fill: int | None = None) -> torch.Tensor:
    if not hasattr(torch, FP4):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    raw = (
        torch.arange(n, dtype=torch.uint8, device="cpu") * 17
        if fill is None
        else torch.full((n,), fill, dtype=torch.uint8, device="cpu")
    )
    return raw.view(torch.float4_e2m1fn_x2)


def _b11_numpy(n: int = 8) -> np.ndarray:
    return (np.arange(n, dtype=np.uint8) * 7).view(np_dtype(B11))


def _name(x: object) -> str:
    return str(x.dtype).removeprefix("torch.")  # type: ignore[attr-defined]


# --- the object, not its memory ----------------------------------------------------------------


def test_plain_uint8_array_over_a_live_views_memory_stays_uint8() -> None:
    src = _b11_numpy()
    v = dlbridge.to_torch(src, fallback="view")
    assert v.dtype == torch.uint8 and v.data_ptr() == src.ctypes.data
    plain = src.view(np.uint8)  # the caller's own uint8 array over the very same bytes
    n = dlbridge.to_numpy(plain)
    assert n.dtype == np.uint8 and n.ctypes.data == src.ctypes.data
    t = dlbridge.to_torch(plain)  # was refused: "torch cannot hold float8_e4m3b11fnuz"
    assert t.dtype == torch.uint8 and t.data_ptr() == src.ctypes.data
    np.testing.assert_array_equal(t.numpy(), plain)
    back = dlbridge.to_numpy(v)  # the view itself still comes back with its dtype, zero-copy
    assert _name(back) == B11 and back.ctypes.data == src.ctypes.data
    np.testing.assert_array_equal(back.view(np.uint8), plain)


def test_view_copied_by_the_consumer_on_import_keeps_its_dtype() -> None:
    if caps_of("jax").shares_unaligned:
        pytest.skip(f"JAX {jax.__version__} shares unaligned buffers instead of copying them (capability table)")
    t = _fp4(65)[1:]  # 1 byte past a 64-byte boundary: JAX copies it on import
    j = dlbridge.to_jax(t, fallback="view")
    assert j.dtype == jnp.uint8 and j.unsafe_buffer_pointer() != t.data_ptr()
    back = dlbridge.to_torch(j, readonly="drop")  # (JAX arrays are read-only)
    assert back.dtype == torch.float4_e2m1fn_x2 and back.data_ptr() == j.unsafe_buffer_pointer()
    assert back.view(torch.uint8).tolist() == t.view(torch.uint8).tolist()


def test_consumer_copy_leaves_the_source_memory_unlabelled() -> None:
    t = _fp4(65)[1:]
    j = dlbridge.to_jax(t, fallback="view")
    alias = t.view(torch.uint8)  # same address, shape and strides as the source the record once named
    out = dlbridge.to_numpy(alias)
    assert out.dtype == np.uint8 and out.ctypes.data == t.data_ptr()
    addr = t.data_ptr()
    del t, alias, out
    gc.collect()
    for _ in range(64):  # fresh arrays, some at the freed address: never relabelled
        fresh = np.full(64, 0x41, np.uint8)
        got = dlbridge.to_torch(fresh)
        assert got.dtype == torch.uint8 and got.data_ptr() == fresh.ctypes.data, f"at {addr:#x}"
        assert got.tolist() == [0x41] * 64
    assert dlbridge.to_torch(j, readonly="drop").dtype == torch.float4_e2m1fn_x2  # (JAX arrays are read-only)


def test_view_after_set_is_a_plain_array_and_its_old_memory_too() -> None:
    src = _b11_numpy()
    v = dlbridge.to_torch(src, fallback="view")
    other = torch.full((4,), 0x41, dtype=torch.uint8, device="cpu")
    v.set_(other)
    out = dlbridge.to_numpy(v)
    assert out.dtype == np.uint8 and out.ctypes.data == other.data_ptr() and out.tolist() == [0x41] * 4
    assert _logical.recall(v, dlbridge.inspect(v)) is None and id(v) not in _logical._entries  # dropped
    plain = dlbridge.to_torch(src.view(np.uint8))
    assert plain.dtype == torch.uint8 and plain.data_ptr() == src.ctypes.data


@pytest.mark.parametrize("change", ["shape", "dtype"])
def test_numpy_view_changed_in_place_is_a_plain_array(change: str) -> None:
    t = _fp4(8)
    v = dlbridge.to_numpy(t, fallback="view")
    assert v.dtype == np.uint8 and v.ctypes.data == t.data_ptr()
    if change == "shape":
        set_in_place(v, shape=(2, 4))
        out = dlbridge.to_torch(v)
        assert out.dtype == torch.uint8 and out.shape == (2, 4)
    else:
        set_in_place(v, dtype=np.int8)
        out = dlbridge.to_torch(v)
        assert out.dtype == torch.int8
    assert out.data_ptr() == t.data_ptr()
    assert out.view(torch.uint8).flatten().tolist() == t.view(torch.uint8).tolist()


def test_two_views_of_one_memory_keep_their_own_dtypes() -> None:
    if not hasattr(need("ml_dtypes"), "float8_e3m4"):
        pytest.skip("float8_e3m4 needs ml_dtypes >= 0.5")
    raw = np.arange(8, dtype=np.uint8) * 9
    a = dlbridge.to_torch(raw.view(np_dtype(B11)), fallback="view")
    b = dlbridge.to_torch(raw.view(np_dtype("float8_e3m4")), fallback="view")
    assert a.data_ptr() == b.data_ptr() == raw.ctypes.data
    na, nb = dlbridge.to_numpy(a), dlbridge.to_numpy(b)
    assert (_name(na), _name(nb)) == (B11, "float8_e3m4")
    assert na.ctypes.data == nb.ctypes.data == raw.ctypes.data
    del a, na
    gc.collect()
    nb = dlbridge.to_numpy(b)  # dropping the other view takes nothing from this one
    assert _name(nb) == "float8_e3m4" and nb.ctypes.data == raw.ctypes.data
    np.testing.assert_array_equal(nb.view(np.uint8), raw)


# --- derived arrays ------------------------------------------------------------------------------


def test_slices_and_copies_of_a_view_are_plain_unsigned_arrays() -> None:
    src = _b11_numpy()
    v = dlbridge.to_torch(src, fallback="view")
    for derived in (v[1:], v[:], v.view(torch.uint8), v.clone(), v.reshape(2, 4)):
        out = dlbridge.to_numpy(derived)
        assert out.dtype == np.uint8 and out.ctypes.data == derived.data_ptr()
    relabelled = dlbridge.to_numpy(v[1:], dtype=B11)  # dtype= names it explicitly
    assert _name(relabelled) == B11 and relabelled.ctypes.data == src.ctypes.data + 1
    np.testing.assert_array_equal(relabelled.view(np.uint8), src.view(np.uint8)[1:])


def test_a_view_made_with_copy_true_is_remembered_as_the_copy() -> None:
    src = _b11_numpy()
    v = dlbridge.to_torch(src, fallback="view", copy=True)
    assert v.data_ptr() != src.ctypes.data
    back = dlbridge.to_numpy(v)
    assert _name(back) == B11 and back.ctypes.data == v.data_ptr()
    assert dlbridge.to_torch(src.view(np.uint8)).dtype == torch.uint8


def test_a_raw_capsule_never_carries_a_remembered_dtype() -> None:
    src = _b11_numpy()
    v = dlbridge.to_torch(src, fallback="view")
    out = dlbridge.to_numpy(v.__dlpack__())
    assert out.dtype == np.uint8 and out.ctypes.data == src.ctypes.data


def test_no_record_outlives_its_view() -> None:
    gc.collect()  # records of earlier tests' views that are already garbage
    before = _logical.live()
    views = [dlbridge.to_jax(_fp4(8), fallback="view") for _ in range(5)]
    assert _logical.live() == before + 5
    del views
    gc.collect()
    assert _logical.live() == before


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "read-only"])
def test_a_dead_views_record_under_a_reused_id_is_not_the_arrays(readonly: bool, monkeypatch) -> None:
    """A view that died leaves its record until the next sweep, under an id the next object may get. The
    pipeline asks whether the record is x's own before it reads x's capsule to recall a dtype: it read it
    for any record under id(x), and NumPy < 2.1 refuses to export a read-only array, so copy=True was refused
    (ReadOnlyError) or not, depending on which id the array got."""
    from dlbridge._pipeline import _stage

    x = np.arange(12, dtype=np.float32)[1:]
    x.flags.writeable = not readonly

    class Gone:
        pass

    gone = Gone()
    ref = _logical._View(gone, _logical._forget)
    ref.key, ref.logical, ref.memory = id(x), "float8_e4m3fn", (x.ctypes.data, (11,), (1,), 32)
    del gone  # dead: its callback queued the reference for the next sweep
    assert ref() is None and not _logical.holds(x)
    inspected: list[object] = []
    real = _stage.inspect
    monkeypatch.setattr(_stage, "inspect", lambda a: inspected.append(a) or real(a))
    _logical._entries[id(x)] = ref  # x got the dead view's id before the sweep
    try:
        for convert in (dlbridge.to_numpy, dlbridge.to_torch):
            out = convert(x, copy=True)
            assert str(out.dtype).removeprefix("torch.") == "float32"
            np.testing.assert_array_equal(np.asarray(out), np.arange(1, 12, dtype=np.float32))
            assert (out.ctypes.data if isinstance(out, np.ndarray) else out.data_ptr()) != x.ctypes.data
        assert inspected == [], "x's capsule was read for a record that is not x's"
    finally:
        _logical._entries.pop(id(x), None)


# --- fallback on every path ----------------------------------------------------------------------


def _strided_fp4_producer() -> CtypesArray:
    p = CtypesArray.zeros(8, code=17, bits=4, lanes=2, shape=(4,), strides=(2,))  # every other byte
    p.write_bytes(bytes(range(0x11, 0x19)))
    return p


def test_unknown_producers_non_compact_fp4x2_into_jax_is_repacked_under_fallback_raise() -> None:
    # JAX's own fp4 (dlbridge._pipeline._subbyte): the pairs' values, one each, a copy
    if "float4_e2m1fn" not in dlbridge.capabilities("jax").holds:
        pytest.skip("this JAX holds no float4_e2m1fn (JAX >= 0.5.3 with ml_dtypes >= 0.5.1)")
    codes = [1, 1, 3, 1, 5, 1, 7, 1]  # bytes 0x11, 0x13, 0x15, 0x17: value 2i in the low nibble
    p = _strided_fp4_producer()
    for fallback in ("raise", "upcast"):
        j = dlbridge.to_jax(p, fallback=fallback)
        assert j.dtype == jnp.float4_e2m1fn and np.asarray(j).view(np.uint8).tolist() == codes
    same = dlbridge.to_jax(_fp4(8)[::2])  # strided pairs from torch: the same answer (bytes 0x00, 0x22, ...)
    assert same.dtype == jnp.float4_e2m1fn and np.asarray(same).view(np.uint8).tolist() == [0, 0, 2, 2, 4, 4, 6, 6]
    del j, same
    gc.collect()
    assert p.exports == p.deleter_calls


def test_unknown_producers_non_compact_fp4x2_into_jax_with_view_is_a_remembered_dense_copy() -> None:
    p = _strided_fp4_producer()
    j = dlbridge.to_jax(p, fallback="view")
    assert j.dtype == jnp.uint8 and j.tolist() == [0x11, 0x13, 0x15, 0x17]
    assert j.unsafe_buffer_pointer() != p.data_ptr  # a dense copy, which JAX's strided import needs
    back = dlbridge.to_torch(j, readonly="drop")  # (JAX arrays are read-only)
    assert back.dtype == torch.float4_e2m1fn_x2 and back.data_ptr() == j.unsafe_buffer_pointer()
    assert back.view(torch.uint8).tolist() == [0x11, 0x13, 0x15, 0x17]
    del j, back
    gc.collect()
    assert p.exports == p.deleter_calls


def test_a_guard_bodys_result_gets_the_views_dtype_from_the_guard_not_from_memory() -> None:
    """The guard relabels a body's unsigned result as its view argument's dtype on the way back;
    with ``returns=None`` the result is the body's own plain array, derived from the view."""
    src = _fp4(8)

    @dlbridge.guard("numpy", fallback="view")
    def tail(x: np.ndarray) -> np.ndarray:
        return x[1:]

    out = tail(src)
    assert out.dtype == torch.float4_e2m1fn_x2 and out.data_ptr() == src.data_ptr() + 1
    assert out.view(torch.uint8).tolist() == src.view(torch.uint8).tolist()[1:]

    @dlbridge.guard("numpy", fallback="view", returns=None)
    def raw_tail(x: np.ndarray) -> np.ndarray:
        return x[1:]

    r = raw_tail(src)
    assert r.dtype == np.uint8 and r.ctypes.data == src.data_ptr() + 1
    plain = dlbridge.to_torch(r)
    assert plain.dtype == torch.uint8 and plain.data_ptr() == src.data_ptr() + 1


def test_a_view_alive_at_interpreter_exit_leaves_no_message() -> None:
    """A view that dies at interpreter exit, after dlbridge's modules had their globals cleared to None
    (it lives on a module that is torn down later: one imported before dlbridge), forgets its record
    quietly: nothing printed at exit, exit status 0."""
    from tests.conftest import run_child

    proc = run_child(
        """
        import collections  # imported before dlbridge: torn down after it at exit
        import numpy as np, ml_dtypes, torch, dlbridge
        from dlbridge._pipeline import _logical as _logical
        g = (np.arange(8, dtype=np.uint8) * 7).view(ml_dtypes.float8_e4m3b11fnuz)
        collections.view = dlbridge.to_torch(g, fallback="view")
        assert collections.view.dtype == torch.uint8 and collections.view.data_ptr() == g.ctypes.data
        assert len(_logical._entries) == 1
        print("ok")
        """
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
    assert proc.stderr == "", proc.stderr
