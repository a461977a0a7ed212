"""One read-only rule for every JAX version (``_handoff.decide``), and ``readonly=``.

A read-only source is an array whose capsule says READ_ONLY, or whose producer's arrays are immutable
whatever their capsules say (JAX: before 0.12 its capsules carry no flag). Into a consumer without
read-only arrays (torch, ONNX Runtime, Warp, ...) it raises ReadOnlyError naming both fixes, unless
``copy=True`` (a writable copy) or ``readonly="drop"`` (the same memory as a writable array, which the
caller does not write); NumPy gets it read-only either way. The fast routes replay
``readonly="drop"`` warm: the route key carries the choice, the Producer says JAX arrays are read-only.

Every test runs on the path this process loaded and, where that is the compiled one, again on pure
Python (``on_both_paths``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._route import _replay as _route
from tests._arrays import jax_cpu
from tests._route_helpers import (  # noqa: F401 - route_path: the fixture on_both_paths parametrizes
    counting_declines,
    on_both_paths,
    route_path,
)
from tests.conftest import caps_of, need
from tests.ctypes_producer import FLAG_READ_ONLY, CtypesArray

pytest_generate_tests = on_both_paths

BOTH_FIXES = (
    r'pass copy=True for a writable copy, or readonly="drop" to share the memory as an array you must not write to'
)
JAX_REFUSED = (
    r"jax cpu float32\[16\] is read-only \(JAX arrays are immutable\) and torch arrays cannot be; " + BOTH_FIXES
)


def _jax_array() -> Any:
    need("jax")
    return jax_cpu(np.arange(16, dtype=np.float32))


def _jax_ptr(x: Any) -> int:
    return int(x.unsafe_buffer_pointer())


def test_jax_into_torch_is_refused_by_default_naming_both_fixes() -> None:
    need("torch")
    x = _jax_array()
    for _ in range(3):  # warm: the route declines to the pipeline, which refuses every time
        with pytest.raises(dlbridge.ReadOnlyError, match=JAX_REFUSED):
            dlbridge.to_torch(x)
        with pytest.raises(dlbridge.ReadOnlyError, match=JAX_REFUSED):
            dlbridge.convert(x, "torch", readonly="keep")
    np.testing.assert_array_equal(np.asarray(x), np.arange(16, dtype=np.float32))  # the source as it was


def test_readonly_drop_is_a_zero_copy_alias_replayed_warm() -> None:
    torch = need("torch")
    x = _jax_array()
    jax_caps = caps_of("jax")
    if jax_caps.cannot_export or jax_caps.exports_uint8:  # _adapters/_jax.py _plain_export
        pytest.skip(
            f"JAX {jax_caps.version}'s own export needs correcting (cannot_export / exports_uint8 rows): "
            "its arrays never take the fast route, so there is no warm replay to check"
        )
    dlbridge.to_torch(x, readonly="drop")  # the first call decides (the pipeline), and the route learns
    with counting_declines() as slow:
        for _ in range(3):
            t = dlbridge.to_torch(x, readonly="drop")
            assert t.dtype == torch.float32 and t.data_ptr() == _jax_ptr(x)
            np.testing.assert_array_equal(t.numpy(), np.arange(16, dtype=np.float32))
    assert slow["torch"] == 0, f'the route declined readonly="drop" {slow["torch"]} of 3 times'
    producer = _route._producers[type(x)]
    assert producer.readonly  # the route learns from the producer that its arrays are read-only
    replays = [r for r in _route.SPECS["torch"][0].routes.values() if r is not None and r.clear_readonly]
    assert replays and all(r.readonly_ok for r in replays)


def test_copy_true_gives_a_writable_copy() -> None:
    need("torch")
    x = _jax_array()
    for _ in range(2):
        t = dlbridge.to_torch(x, copy=True)
        assert t.data_ptr() != _jax_ptr(x)
        t[0] = 100.0  # the copy is the caller's
        assert float(x[0]) == 0.0


def test_numpy_gets_jax_arrays_read_only_either_way() -> None:
    x = _jax_array()
    for readonly in ("keep", "drop"):
        for _ in range(2):
            n = dlbridge.to_numpy(x, readonly=readonly)
            assert n.ctypes.data == _jax_ptr(x) and not n.flags.writeable, readonly
    copied = dlbridge.to_numpy(x, copy=True)
    assert copied.ctypes.data != _jax_ptr(x) and copied.flags.writeable


def test_explain_agrees_with_the_conversion_for_each_choice() -> None:
    need("torch")
    x = _jax_array()
    keep = dlbridge.explain(x, "torch")
    assert keep.error is dlbridge.ReadOnlyError and not keep.shares
    with pytest.raises(dlbridge.ReadOnlyError) as refused:
        dlbridge.to_torch(x)
    assert keep.message == str(refused.value)
    drop = dlbridge.explain(x, "torch", readonly="drop")
    assert drop.error is None and drop.shares and drop.shared_readonly
    assert any('readonly="drop"' in step for step in drop.steps), drop.steps
    assert dlbridge.to_torch(x, readonly="drop").data_ptr() == _jax_ptr(x)
    copied = dlbridge.explain(x, "torch", copy=True)
    assert copied.error is None and not copied.shares and "copied (copy=True)" in copied.steps
    assert dlbridge.to_torch(x, copy=True).data_ptr() != _jax_ptr(x)


def test_a_numpy_read_only_array_into_torch_keeps_its_behaviour_plus_the_keyword() -> None:
    torch = need("torch")
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False
    if not caps_of("numpy").versioned_capsules:  # NumPy < 2.1 cannot mark a capsule read-only: it refuses
        with pytest.raises(dlbridge.ReadOnlyError, match="copy=True"):
            dlbridge.to_torch(a, readonly="drop")
        return
    for _ in range(2):
        with pytest.raises(dlbridge.ReadOnlyError, match=r"numpy cpu float32\[6\] is read-only and torch arrays "
                                                        r"cannot be; " + BOTH_FIXES):  # fmt: skip
            dlbridge.to_torch(a)
    t = dlbridge.to_torch(a, readonly="drop")
    assert t.dtype == torch.float32 and t.data_ptr() == a.ctypes.data
    assert dlbridge.explain(a, "torch", readonly="drop").shares
    assert dlbridge.to_torch(a, copy=True).data_ptr() != a.ctypes.data
    assert not dlbridge.to_numpy(a, readonly="drop").flags.writeable  # NumPy keeps it read-only


def test_a_read_only_capsule_of_an_unknown_producer() -> None:
    """A producer dlbridge has no adapter for (a ctypes one), its capsule flagged READ_ONLY, as JAX 0.12
    flags its own: refused into torch naming both fixes; readonly="drop" shares it; NumPy read-only."""
    torch = need("torch")
    p = CtypesArray.from_bytes(np.arange(4, dtype=np.float32).tobytes(), "float32", (4,)).with_(flags=FLAG_READ_ONLY)
    with pytest.raises(dlbridge.ReadOnlyError, match=r"is read-only and torch arrays cannot be; " + BOTH_FIXES):
        dlbridge.to_torch(p)
    t = dlbridge.to_torch(p, readonly="drop")
    assert t.dtype == torch.float32 and t.data_ptr() == p.data_ptr
    np.testing.assert_array_equal(t.numpy(), np.arange(4, dtype=np.float32))
    if not caps_of("numpy").versioned_capsules:  # NumPy < 2.1 reads legacy capsules only, which cannot say
        with pytest.raises(dlbridge.ReadOnlyError, match="copy=True"):  # read-only: the producer refuses
            dlbridge.to_numpy(p, readonly="drop")
        return
    n = dlbridge.to_numpy(p, readonly="drop")
    assert n.ctypes.data == p.data_ptr and not n.flags.writeable


@pytest.mark.parametrize("target", ["onnxruntime", "warp"])
def test_legacy_only_consumers_take_jax_arrays_with_either_fix(target: str) -> None:
    """They read only legacy capsules, which cannot say read-only: JAX exports its arrays' legacy capsules
    (unflagged), so the same two fixes apply; a producer that refuses that export (NumPy) needs copy=True."""
    need(target)
    x = _jax_array()
    adapter = dlbridge._adapters.ADAPTERS[target]
    with pytest.raises(dlbridge.ReadOnlyError, match=r"JAX arrays are immutable.*" + BOTH_FIXES):
        dlbridge.convert(x, target)
    shared = dlbridge.convert(x, target, readonly="drop")
    assert adapter.data_ptr(shared) == _jax_ptr(x)
    assert adapter.data_ptr(dlbridge.convert(x, target, copy=True)) != _jax_ptr(x)
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    for readonly in ("keep", "drop"):  # NumPy will not export a read-only array's legacy capsule
        with pytest.raises(dlbridge.ReadOnlyError, match="copy=True"):
            dlbridge.convert(a, target, readonly=readonly)
    assert adapter.data_ptr(dlbridge.convert(a, target, copy=True)) != a.ctypes.data


@pytest.mark.parametrize("bad", ["yes", "Keep", None, 1, True, np.array(["keep"])], ids=repr)
def test_a_bad_readonly_is_an_option_error_naming_the_choices(bad: Any) -> None:
    x = np.arange(3, dtype=np.float32)
    said = r'readonly=.* is not a read-only choice; expected "keep" .* or "drop"'
    for _ in range(2):
        with pytest.raises(dlbridge.OptionError, match=said):
            dlbridge.to_numpy(x, readonly=bad)
        with pytest.raises(dlbridge.OptionError, match=said):
            dlbridge.convert(x, "numpy", readonly=bad)
    assert dlbridge.explain(x, "numpy", readonly=bad).error is dlbridge.OptionError
    with pytest.raises(dlbridge.OptionError, match=said):
        dlbridge.guard("numpy", readonly=bad)


def test_the_guard_forwards_readonly() -> None:
    torch = need("torch")
    need("jax")
    x = jax_cpu(np.arange(4, dtype=np.float32))

    @dlbridge.guard("torch")
    def keep(t: Any) -> Any:
        return t

    @dlbridge.guard("torch", readonly="drop")
    def drop(t: Any) -> Any:
        assert isinstance(t, torch.Tensor) and t.data_ptr() == _jax_ptr(x)
        return t * 2

    with pytest.raises(dlbridge.ReadOnlyError, match=r"JAX arrays are immutable.*" + BOTH_FIXES):
        keep(x)
    np.testing.assert_array_equal(np.asarray(drop(x)), [0, 2, 4, 6])
    with pytest.raises(dlbridge.OptionError, match=r"convert=False\) converts nothing, so readonly="):
        dlbridge.guard("torch", convert=False, readonly="drop")

    @dlbridge.guard("jax")
    def jax_result(t: Any) -> Any:
        return t + 1

    @dlbridge.guard("jax", readonly="drop")
    def jax_result_shared(t: Any) -> Any:
        return t + 1

    back = jax_result(torch.zeros(4, device="cpu"))  # a JAX result back to torch: copied (results need only values)
    assert isinstance(back, torch.Tensor) and back.tolist() == [1.0] * 4
    assert jax_result_shared(torch.zeros(4, device="cpu")).tolist() == [1.0] * 4


@pytest.mark.parametrize("consumer", ["torch", "cupy", "paddle"])
def test_a_jax_capsule_into_a_consumer_row_without_read_only_arrays(consumer: str) -> None:
    """The decision itself, on this JAX's own capsule (legacy and unflagged before 0.12, versioned and
    READ_ONLY from 0.12), for a consumer's capability row read off the table (the consumer need not be
    installed): refused naming both fixes; shared writable with readonly="drop"; a writable copy with
    copy=True."""
    from dlbridge._adapters import ADAPTERS
    from dlbridge._capabilities import capabilities
    from dlbridge._capsule._read import read
    from dlbridge._pipeline._handoff import decide

    x = _jax_array()
    caps = capabilities(consumer, {"torch": "2.13.0", "cupy": "14.0.0", "paddle": "3.3.1"}[consumer])
    assert not caps.readonly_arrays and caps.versioned_capsules
    info = read(x.__dlpack__(max_version=(1, 3)), "jax")
    target, jax = ADAPTERS[consumer], ADAPTERS["jax"]
    keep = decide(info, target, caps, "raise", None, None, source=jax)
    assert keep.error is dlbridge.ReadOnlyError and "(JAX arrays are immutable)" in keep.message
    assert keep.message.endswith(BOTH_FIXES), keep.message
    drop = decide(info, target, caps, "raise", None, None, source=jax, readonly="drop")
    assert drop.error is None and drop.shares and drop.drop_readonly and drop.shared_readonly
    copied = decide(info, target, caps, "raise", None, True, source=jax)
    assert copied.error is None and not copied.shares and copied.copy


def test_read_only_memory_into_a_consumer_that_copies_every_import_is_replayed_warm() -> None:
    """MLX copies every CPU import (its ``copies_imports`` row): read-only memory reaches it with READ_ONLY
    cleared for that copy, under either ``readonly=``, and the stored route replays it (was: the pipeline on
    every call). The result is MLX's own memory holding the values; the source is untouched."""
    need("mlx")
    from dlbridge._adapters import ADAPTERS

    mlx = ADAPTERS["mlx"]
    x = _jax_array()
    expected = np.arange(16, dtype=np.float32)
    for readonly in ("keep", "drop"):
        dlbridge.to_mlx(x, readonly=readonly)  # the first call of its kind decides (the pipeline), the route learns
        with counting_declines() as slow:
            for _ in range(3):
                m = dlbridge.to_mlx(x, readonly=readonly)
                assert str(m.dtype) == "mlx.core.float32" and mlx.data_ptr(m) != _jax_ptr(x)
                np.testing.assert_array_equal(np.asarray(m), expected)
        assert slow["mlx"] == 0, f"readonly={readonly!r}: the route declined {slow['mlx']} of 3 times"
        assert (
            dlbridge.explain(x, "mlx", readonly=readonly).steps[1] == "READ_ONLY cleared for the copy made right after"
        )
    replays = [r for r in _route.SPECS["mlx"][0].routes.values() if r is not None and r.clear_readonly]
    assert replays and all(r.readonly_ok for r in replays)
    np.testing.assert_array_equal(np.asarray(x), expected)


@pytest.mark.parametrize("dtype", ["float32", "float8_e4m3fn"])
def test_a_consumer_refusal_puts_back_what_the_route_cleared_and_relabelled(
    dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored route clears READ_ONLY for MLX's copy (and relabels float8 as its uint8 view): where MLX
    refuses the capsule without taking it, both come back before the capsule is handed to the pipeline,
    which converts it (no second export) as it would a fresh one; the source stays read-only."""
    need("mlx")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.arange(16, dtype=np.float32 if dtype == "float32" else ml_dtypes.float8_e4m3fn)
    x.flags.writeable = False
    fallback = "view" if dtype != "float32" else None
    for _ in range(3):
        dlbridge.to_mlx(x, fallback=fallback)  # learned, then replayed: the route stored
    spec = _route.SPECS["mlx"]
    state = spec[0]
    assert any(r is not None and r.clear_readonly for r in state.routes.values())
    seen: list[Any] = []

    def refuse(capsule: Any) -> Any:
        seen.append(dlbridge.inspect(capsule))  # what MLX was handed: READ_ONLY cleared, the wire dtype
        raise RuntimeError("refused")

    handed: list[Any] = []
    pipeline = _route._convert

    def convert(x: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(dlbridge.inspect(args[5]) if len(args) > 5 and args[5] is not None else None)
        return pipeline(x, target, *args, **kwargs)

    spec[0] = _route.State(**{**{f: getattr(state, f) for f in state._fields}, "importer": refuse})
    monkeypatch.setattr(_route, "_convert", convert)
    try:
        out = dlbridge.to_mlx(x, fallback=fallback)
    finally:
        spec[0] = state
    wire = "float32" if dtype == "float32" else "uint8"
    assert len(seen) == 1 and not seen[0].readonly and seen[0].dtype == wire, seen
    assert len(handed) == 1 and handed[0] is not None, "the refused capsule was not handed to the pipeline"
    assert handed[0].readonly and handed[0].dtype == dtype and handed[0].data_ptr == x.ctypes.data, handed[0]
    np.testing.assert_array_equal(np.asarray(out).view(np.uint8), x.view(np.uint8))
    assert not x.flags.writeable
