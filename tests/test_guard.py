"""@dlbridge.guard on the CPU: conversion in, results back, containers, argument selection and
results (errors, convert=False, methods and metadata are in test_guard_api.py)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

import dlbridge
from tests._arrays import jax_cpu
from tests._guard_helpers import FRAMEWORKS, chalf, fp4, framework, make, np, ptr, require_no_x64, torch, values
from tests.conftest import caps_of, need, run_child

# --- conversions in and out ----------------------------------------------------------------------


@pytest.mark.parametrize("target", FRAMEWORKS)
@pytest.mark.parametrize("source", FRAMEWORKS)
def test_body_sees_target_and_result_goes_back(source: str, target: str) -> None:
    seen = []

    @dlbridge.guard(target, readonly="drop")  # (JAX arguments are read-only; the body only reads them)
    def double(x):
        seen.append(framework(x))
        return x + x

    x = make(source, [1.0, -2.5, 3.0])
    out = double(x)
    assert seen == [target]
    assert framework(out) == source
    assert values(out) == [2.0, -5.0, 6.0]


@pytest.mark.parametrize(("source", "target"), [("torch", "numpy"), ("numpy", "torch")])
def test_round_trip_shares_memory(source: str, target: str) -> None:
    x = make(source, [1.0, 2.0, 3.0])
    inside = []

    @dlbridge.guard(target)
    def same(a):
        inside.append(ptr(a))
        return a, a[1:]

    out, tail = same(x)
    assert inside == [ptr(x)]
    assert out is x  # an argument handed back is the caller's own object
    assert framework(tail) == source and values(tail) == [2.0, 3.0]
    assert ptr(tail) == ptr(x) + 4  # a new view comes back zero-copy


def test_bf16_round_trip_through_numpy_body() -> None:
    need("ml_dtypes")
    x = torch.tensor([1.0, -2.0, 0.5, 3.5], dtype=torch.bfloat16, device="cpu")
    inside = []

    @dlbridge.guard("numpy")
    def body(a):
        inside.append((a.dtype.name, ptr(a)))
        return a[1:], a * 2

    tail, doubled = body(x)
    assert inside == [("bfloat16", x.data_ptr())]
    assert tail.dtype == torch.bfloat16 and tail.data_ptr() == x.data_ptr() + 2
    assert tail.tolist() == [-2.0, 0.5, 3.5]
    assert doubled.dtype == torch.bfloat16
    assert doubled.tolist() == [2.0, -4.0, 1.0, 7.0]


# A child interpreter without ml_dtypes: NumPy cannot hold bf16, so fallback="view" hands the
# body a uint16 view, and results come back as bf16 (same memory, or new uint16 arrays relabelled).
_BF16_VIEW_CHILD = """
    import numpy as np, torch, dlbridge
    x = torch.tensor([1.0, -2.0, 0.5, 3.5], dtype=torch.bfloat16, device="cpu")
    seen = []

    def body(a):
        seen.append((a.dtype.name, a.__array_interface__["data"][0]))
        bits = a.astype(np.uint32) << 16
        doubled = ((bits.view(np.float32) * 2).view(np.uint32) >> 16).astype(np.uint16)
        return a, a[1:], doubled

    viewed = dlbridge.guard("numpy", fallback="view")(body)
    same, tail, doubled = viewed(x)
    assert seen == [("uint16", x.data_ptr())], seen
    assert same is x
    assert tail.dtype == torch.bfloat16 and tail.data_ptr() == x.data_ptr() + 2, tail
    assert tail.tolist() == [-2.0, 0.5, 3.5], tail
    assert doubled.dtype == torch.bfloat16 and doubled.tolist() == [2.0, -4.0, 1.0, 7.0], doubled

    # The default fallback is read at call time, not at decoration time.
    late = dlbridge.guard("numpy")(body)
    try:
        late(x)
    except dlbridge.UnsupportedDtypeError as err:
        assert 'body(a=' in str(err) and 'fallback="view"' in str(err), err
    else:
        raise AssertionError("no error without a fallback")
    seen.clear()
    with dlbridge.fallback_policy("view"):
        assert late(x)[2].tolist() == [2.0, -4.0, 1.0, 7.0]
    assert seen[0][0] == "uint16", seen

    @dlbridge.guard("numpy", fallback="view")
    def broken(a):
        raise ValueError("kernel failed")
    try:
        broken(x)
    except ValueError as err:
        assert err.args == ("kernel failed",)
        assert err.__notes__ == ['dlbridge.guard(\\'numpy\\', fallback="view"): broken() received a as a uint16 view of bfloat16'], err.__notes__
    print("ok")
"""


def test_bf16_view_fallback_through_numpy_body_without_ml_dtypes() -> None:
    done = run_child(_BF16_VIEW_CHILD, block=("ml_dtypes",))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_view_results_get_the_logical_dtype_back() -> None:
    x = fp4()
    inside = []

    @dlbridge.guard("numpy", fallback="view")
    def body(a):
        inside.append((a.dtype.name, ptr(a)))
        return a.copy(), np.arange(3, dtype=np.uint16)

    new, other = body(x)
    assert inside == [("uint8", x.data_ptr())]
    assert new.dtype == torch.float4_e2m1fn_x2 and new.data_ptr() != x.data_ptr()
    assert torch.equal(new.view(torch.uint8), x.view(torch.uint8))
    # Only the wire dtype of a view is relabelled; other results keep their dtype.
    assert other.dtype == torch.uint16


def test_process_default_fallback_applies_at_call_time() -> None:
    x = chalf()  # NumPy has no complex32

    @dlbridge.guard("numpy")
    def body(a):
        return a.dtype.name

    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r"^body\(a=…\) under @dlbridge.guard\('numpy'\)"):
        body(x)
    with dlbridge.fallback_policy("view"):
        assert body(x) == "uint32"
    previous = dlbridge.set_default_fallback("view")
    try:
        assert body(x) == "uint32"
    finally:
        dlbridge.set_default_fallback(previous)


def test_returning_an_argument_gives_back_the_callers_object() -> None:
    jnp = need("jax.numpy")
    x = jax_cpu(jnp.arange(4.0))

    @dlbridge.guard("numpy")
    def body(a):
        return a, a[1:]  # NumPy's view of a JAX array is read-only

    same, tail = body(x)
    assert same is x
    assert framework(tail) == "jax" and tail.tolist() == [1.0, 2.0, 3.0]


def test_copy_true_results_are_the_bodys_copies() -> None:
    x = torch.zeros(3, device="cpu")

    @dlbridge.guard("numpy", copy=True)
    def body(a):
        a[0] = 5.0
        return a

    out = body(x)
    assert out is not x and out.tolist() == [5.0, 0.0, 0.0]
    assert x.tolist() == [0.0, 0.0, 0.0]


def test_same_framework_arguments_and_results_pass_as_they_are() -> None:
    x = torch.ones(3, device="cpu")
    seen = []

    @dlbridge.guard("torch")
    def body(a):
        seen.append(a)
        return a

    assert body(x) is x
    assert seen[0] is x


def test_module_works_as_well_as_its_name() -> None:
    @dlbridge.guard(np)
    def body(a):
        return type(a)

    assert body(torch.ones(2, device="cpu")) is np.ndarray


def test_non_array_arguments_and_results_are_left_alone() -> None:
    marker = object()

    @dlbridge.guard("numpy")
    def body(a, n, s, o, *, scale=None):
        return a, n, s, o, scale, None

    out = body(torch.ones(2, device="cpu"), 3, "text", marker, scale=2.5)
    assert isinstance(out[0], torch.Tensor)
    assert out[1:] == (3, "text", marker, 2.5, None)


# --- containers and selection -------------------------------------------------------------------


class Pair(NamedTuple):
    first: object
    second: object


def test_arrays_inside_tuples_lists_dicts_are_converted_and_come_back() -> None:
    a, b = torch.ones(2, device="cpu"), torch.zeros(2, device="cpu")
    seen = {}

    @dlbridge.guard("numpy")
    def body(xs, mapping, pair, **extra):
        seen.update(xs=[type(v) for v in xs], mapping={k: type(v) for k, v in mapping.items()},
                    pair=type(pair), first=type(pair.first), extra=type(extra["more"][0]))  # fmt: skip
        return {"xs": xs, "pair": pair, "n": len(xs)}

    out = body([a, (b, 7)], {"k": a, "s": "str"}, Pair(b, 1), more=(a,))
    assert seen == {
        "xs": [np.ndarray, tuple],
        "mapping": {"k": np.ndarray, "s": str},
        "pair": Pair,
        "first": np.ndarray,
        "extra": np.ndarray,
    }
    assert isinstance(out["xs"], list) and isinstance(out["xs"][0], torch.Tensor)
    assert isinstance(out["xs"][1], tuple) and isinstance(out["xs"][1][0], torch.Tensor) and out["xs"][1][1] == 7
    assert isinstance(out["pair"], Pair) and isinstance(out["pair"].first, torch.Tensor)
    assert out["xs"][0].data_ptr() == a.data_ptr() and out["n"] == 2


def test_containers_without_arrays_are_the_same_objects() -> None:
    items, table = [1, 2], {"a": 1}

    @dlbridge.guard("numpy")
    def body(i, t):
        return i, t

    out = body(items, table)
    assert out[0] is items and out[1] is table


@pytest.mark.parametrize("selection", [("x",), (0,), ("x", "x"), "x"])
def test_args_selects_by_name_or_position(selection) -> None:
    @dlbridge.guard("numpy", args=selection)
    def body(x, y, *, z=None):
        return type(x), type(y), type(z)

    t = torch.ones(2, device="cpu")
    assert body(t, t, z=t) == (np.ndarray, torch.Tensor, torch.Tensor)
    assert body(x=t, y=t) == (np.ndarray, torch.Tensor, type(None))


def test_args_selects_keyword_only_and_varargs() -> None:
    @dlbridge.guard("numpy", args=("z", "rest", "kw"))
    def body(x, *rest, z=None, **kw):
        return type(x), [type(r) for r in rest], type(z), {k: type(v) for k, v in kw.items()}

    t = torch.ones(2, device="cpu")
    assert body(t, t, [t], z=t, w=t) == (torch.Tensor, [np.ndarray, list], np.ndarray, {"w": np.ndarray})


def test_args_position_counts_self_in_methods() -> None:
    class Model:
        @dlbridge.guard("numpy", args=(2,))
        def forward(self, x, y):
            return type(x), type(y)

    t = torch.ones(2, device="cpu")
    assert Model().forward(t, t) == (torch.Tensor, np.ndarray)


def test_args_unknown_name_fails_at_decoration() -> None:
    def fused(x, y):
        return x

    with pytest.raises(dlbridge.OptionError, match=r"fused\(\) has no parameter 'z'; its parameters are: x, y"):
        dlbridge.guard("numpy", args=("z",))(fused)
    with pytest.raises(dlbridge.OptionError, match=r"has no parameter 5"):
        dlbridge.guard("numpy", args=(5,))(fused)


def test_args_selecting_a_non_array_raises_with_the_argument_name() -> None:
    @dlbridge.guard("numpy", args=("x",))
    def fused(x):
        return x

    assert fused(None) is None  # an optional array left out
    with pytest.raises(dlbridge.NotAnArrayError, match=r"^fused\(x=…\): args= selects it .* it is a builtins.float"):
        fused(2.0)


# --- results -------------------------------------------------------------------------------------


def test_returns_none_leaves_results_alone() -> None:
    @dlbridge.guard("numpy", returns=None)
    def body(a):
        return a

    assert isinstance(body(torch.ones(2, device="cpu")), np.ndarray)


@pytest.mark.parametrize("returns", ["jax", "jax.numpy"])
def test_returns_names_a_framework(returns: str) -> None:
    jax = need("jax")

    @dlbridge.guard("numpy", returns=returns)
    def body(a):
        return [a, a.sum()]

    out = body(torch.tensor([1.0, 2.0], device="cpu"))
    assert all(isinstance(r, jax.Array) for r in out[:1])
    assert out[0].tolist() == [1.0, 2.0]


def test_returns_module() -> None:
    jax = need("jax")

    @dlbridge.guard("torch", returns=jax)
    def body(a):
        return a * 3

    assert body(np.ones(2, dtype=np.float32)).tolist() == [3.0, 3.0]


def test_results_follow_the_first_array_argument() -> None:
    jnp = need("jax.numpy")

    @dlbridge.guard("numpy")
    def body(a, b):
        return a + b

    assert framework(body(jax_cpu(jnp.ones(2)), torch.ones(2, device="cpu"))) == "jax"
    assert framework(body(torch.ones(2, device="cpu"), jax_cpu(jnp.ones(2)))) == "torch"
    assert framework(body(b=torch.ones(2, device="cpu"), a=jax_cpu(jnp.ones(2)))) == "torch"  # call order


def test_no_array_argument_leaves_results_alone() -> None:
    @dlbridge.guard("torch")
    def make_array(n):
        return np.zeros(n)

    assert isinstance(make_array(3), np.ndarray)


def test_result_that_cannot_go_back_names_the_result() -> None:
    require_no_x64()
    jnp = need("jax.numpy")

    @dlbridge.guard("numpy")
    def widen(a):
        return a, a.astype(np.float64)

    with pytest.raises(
        dlbridge.UnsupportedDtypeError,
        match=r"^widen\(\) returned result\[1\]=numpy cpu float64\[2\], which could not go back: .*jax_enable_x64",
    ):
        widen(jax_cpu(jnp.ones(2)))


def test_pinned_argument_results_come_back_as_cpu_tensors() -> None:
    """torch says (3, 0) for a pinned tensor (its capsule says CPU): results return to the CPU."""

    class Pinned(torch.Tensor):  # stands in for pin_memory(), which needs CUDA
        def __dlpack_device__(self):
            return (3, 0)

    Pinned.__module__ = "torch.pinned_stand_in"
    x = torch.arange(4.0, device="cpu").as_subclass(Pinned)

    @dlbridge.guard("jax")
    def double(a):
        return a * 2

    out = double(x)
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu"
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]

    @dlbridge.guard("numpy", convert=False, returns=None)
    def check(a):
        return a

    assert check(x) is x  # NumPy can use that memory: nothing to refuse


def test_a_genuine_uint8_argument_beside_a_view_keeps_new_results_uint8() -> None:
    """A uint8 result beside a float8 view that also came in as uint8 could be either: it is left as
    the body made it (uint8) rather than relabelled; without the plain argument it is restored."""
    if "float8_e4m3b11fnuz" in caps_of("jax").cannot_export:
        pytest.skip("JAX < 0.5.3 cannot export float8 through DLPack")
    y = jax_cpu([0.5, -1.0, 2.0, 0.25], dtype="float8_e4m3b11fnuz")  # torch: a uint8 view
    mask = torch.tensor([1, 2, 3, 4], dtype=torch.uint8, device="cpu")

    @dlbridge.guard("torch", fallback="view", readonly="drop")  # (y is a JAX array: read-only)
    def scaled(m, v):
        return m * 2, v.clone()

    doubled, copied = scaled(mask, y)
    assert doubled.dtype == torch.uint8 and doubled.tolist() == [2, 4, 6, 8]
    assert copied.dtype == torch.uint8  # ambiguous too: the bits stay, the dtype is the body's

    @dlbridge.guard("torch", fallback="view", readonly="drop")
    def copied_only(v):
        return v.clone()

    restored = copied_only(y)
    assert str(restored.dtype) == "float8_e4m3b11fnuz" and np.asarray(restored).tolist() == [0.5, -1.0, 2.0, 0.25]
