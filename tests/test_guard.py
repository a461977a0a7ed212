"""@dlbridge.guard on the CPU: conversion in, results back, selection, checks, messages, metadata."""

from __future__ import annotations

import inspect as pyinspect
from typing import NamedTuple

import pytest

import dlbridge
from tests.conftest import need, run_child

torch = need("torch")
np = need("numpy")

FRAMEWORKS = ("torch", "jax", "numpy")


def ptr(x: object) -> int:
    return dlbridge.inspect(x).data_ptr


def framework(x: object) -> str | None:
    return dlbridge._adapters.adapter_for(x).name if dlbridge._adapters.adapter_for(x) else None


def make(name: str, values: list[float], dtype: str = "float32") -> object:
    ref = np.asarray(values, dtype=np.float32)
    if name == "torch":
        return torch.tensor(ref).to(getattr(torch, dtype))
    if name == "jax":
        jnp = need("jax.numpy")
        return jnp.asarray(ref, dtype=getattr(jnp, dtype))
    return ref.astype(dlbridge._adapters._numpy.numpy_dtype(dtype))


def values(x: object) -> list[float]:
    return np.asarray(dlbridge.to_numpy(x, fallback="upcast")).astype(np.float32).tolist()


def fp4(n: int = 4) -> object:
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    return torch.tensor([0x12, 0x34, 0x56, 0x78][:n], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)


@pytest.fixture
def no_x64():
    jax = need("jax")
    if jax.config.jax_enable_x64:
        pytest.skip("jax_enable_x64 is on in this process")


# --- conversions in and out ----------------------------------------------------------------------


@pytest.mark.parametrize("target", FRAMEWORKS)
@pytest.mark.parametrize("source", FRAMEWORKS)
def test_body_sees_target_and_result_goes_back(source: str, target: str) -> None:
    seen = []

    @dlbridge.guard(target)
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
    x = torch.tensor([1.0, -2.0, 0.5, 3.5], dtype=torch.bfloat16)
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
    import sys; sys.modules["ml_dtypes"] = None
    import numpy as np, torch, dlbridge
    x = torch.tensor([1.0, -2.0, 0.5, 3.5], dtype=torch.bfloat16)
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
    done = run_child(_BF16_VIEW_CHILD)
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
    x = fp4()

    @dlbridge.guard("numpy")
    def body(a):
        return a.dtype.name

    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r"^body\(a=…\) under @dlbridge.guard\('numpy'\)"):
        body(x)
    with dlbridge.fallback_policy("view"):
        assert body(x) == "uint8"
    previous = dlbridge.set_default_fallback("view")
    try:
        assert body(x) == "uint8"
    finally:
        dlbridge.set_default_fallback(previous)


def test_returning_an_argument_gives_back_the_callers_object() -> None:
    jnp = need("jax.numpy")
    x = jnp.arange(4.0)

    @dlbridge.guard("numpy")
    def body(a):
        return a, a[1:]  # NumPy's view of a JAX array is read-only

    same, tail = body(x)
    assert same is x
    assert framework(tail) == "jax" and tail.tolist() == [1.0, 2.0, 3.0]


def test_copy_true_results_are_the_bodys_copies() -> None:
    x = torch.zeros(3)

    @dlbridge.guard("numpy", copy=True)
    def body(a):
        a[0] = 5.0
        return a

    out = body(x)
    assert out is not x and out.tolist() == [5.0, 0.0, 0.0]
    assert x.tolist() == [0.0, 0.0, 0.0]


def test_same_framework_arguments_and_results_pass_as_they_are() -> None:
    x = torch.ones(3)
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

    assert body(torch.ones(2)) is np.ndarray


def test_non_array_arguments_and_results_are_left_alone() -> None:
    marker = object()

    @dlbridge.guard("numpy")
    def body(a, n, s, o, *, scale=None):
        return a, n, s, o, scale, None

    out = body(torch.ones(2), 3, "text", marker, scale=2.5)
    assert isinstance(out[0], torch.Tensor)
    assert out[1:] == (3, "text", marker, 2.5, None)


# --- containers and selection -------------------------------------------------------------------


class Pair(NamedTuple):
    first: object
    second: object


def test_arrays_inside_tuples_lists_dicts_are_converted_and_come_back() -> None:
    a, b = torch.ones(2), torch.zeros(2)
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

    t = torch.ones(2)
    assert body(t, t, z=t) == (np.ndarray, torch.Tensor, torch.Tensor)
    assert body(x=t, y=t) == (np.ndarray, torch.Tensor, type(None))


def test_args_selects_keyword_only_and_varargs() -> None:
    @dlbridge.guard("numpy", args=("z", "rest", "kw"))
    def body(x, *rest, z=None, **kw):
        return type(x), [type(r) for r in rest], type(z), {k: type(v) for k, v in kw.items()}

    t = torch.ones(2)
    assert body(t, t, [t], z=t, w=t) == (torch.Tensor, [np.ndarray, list], np.ndarray, {"w": np.ndarray})


def test_args_position_counts_self_in_methods() -> None:
    class Model:
        @dlbridge.guard("numpy", args=(2,))
        def forward(self, x, y):
            return type(x), type(y)

    t = torch.ones(2)
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

    assert isinstance(body(torch.ones(2)), np.ndarray)


@pytest.mark.parametrize("returns", ["jax", "jax.numpy"])
def test_returns_names_a_framework(returns: str) -> None:
    jax = need("jax")

    @dlbridge.guard("numpy", returns=returns)
    def body(a):
        return [a, a.sum()]

    out = body(torch.tensor([1.0, 2.0]))
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

    assert framework(body(jnp.ones(2), torch.ones(2))) == "jax"
    assert framework(body(torch.ones(2), jnp.ones(2))) == "torch"
    assert framework(body(b=torch.ones(2), a=jnp.ones(2))) == "torch"  # call order


def test_no_array_argument_leaves_results_alone() -> None:
    @dlbridge.guard("torch")
    def make_array(n):
        return np.zeros(n)

    assert isinstance(make_array(3), np.ndarray)


def test_result_that_cannot_go_back_names_the_result(no_x64) -> None:
    jnp = need("jax.numpy")

    @dlbridge.guard("numpy")
    def widen(a):
        return a, a.astype(np.float64)

    with pytest.raises(
        dlbridge.UnsupportedDtypeError,
        match=r"^widen\(\) returned result\[1\]=numpy cpu float64\[2\], which could not go back: .*jax_enable_x64",
    ):
        widen(jnp.ones(2))


# --- convert=False -------------------------------------------------------------------------------


def test_convert_false_raises_before_the_body_runs(no_x64) -> None:
    calls = []

    @dlbridge.guard("jax", convert=False)
    def fused(x, y):
        calls.append(1)

    with pytest.raises(
        dlbridge.UnsupportedDtypeError,
        match=r"^fused\(y=…\) under @dlbridge.guard\('jax'\): cannot hand torch cpu float64\[3\] to jax",
    ):
        fused(torch.ones(3), torch.ones(3, dtype=torch.float64))
    assert calls == []


def test_convert_false_device_check_raises_before_the_body_runs() -> None:
    calls = []

    @dlbridge.guard("cupy", convert=False)
    def fused(x):
        calls.append(1)

    # CuPy need not be installed: the device check reads only the adapter's device table.
    with pytest.raises(
        dlbridge.DeviceMismatchError,
        match=r"^fused\(x=…\) under @dlbridge.guard\('cupy'\): received torch cpu float32\[2\]; cupy arrays live on cuda .*convert=False moves nothing.*device=\"cuda\"",
    ):
        fused(torch.ones(2))
    assert calls == []


def test_convert_false_fallback_hint_says_to_drop_convert_false() -> None:
    @dlbridge.guard("numpy", convert=False)
    def fused(x):
        raise AssertionError("the body ran")

    with pytest.raises(
        dlbridge.UnsupportedDtypeError, match=r'fallback="view".*convert=False converts nothing: drop it'
    ):
        fused(fp4())


def test_convert_false_passes_the_arguments_unconverted() -> None:
    x = torch.ones(2)

    @dlbridge.guard("numpy", convert=False, returns=None)
    def body(a):
        return a

    assert body(x) is x


def test_convert_false_with_conversion_options_is_an_option_error() -> None:
    with pytest.raises(
        dlbridge.OptionError, match=r"convert=False\) converts nothing, so fallback=, copy= would have no effect"
    ):
        dlbridge.guard("numpy", convert=False, fallback="view", copy=True)


# --- errors from the guard ---------------------------------------------------------------------


def test_unsupported_dtype_names_function_argument_dtype_device_and_fix() -> None:
    @dlbridge.guard("numpy")
    def fused(x, y):
        raise AssertionError("the body ran")

    with pytest.raises(dlbridge.UnsupportedDtypeError) as info:
        fused(torch.ones(4), y=fp4(2))
    message = str(info.value)
    assert message.startswith(
        "fused(y=…) under @dlbridge.guard('numpy'): cannot hand torch cpu float4_e2m1fn_x2[2] to numpy"
    )
    assert 'Pass fallback="view"' in message
    assert isinstance(info.value, NotImplementedError)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_device_mismatch_names_the_nested_argument() -> None:
    @dlbridge.guard("cupy")
    def fused(xs):
        raise AssertionError("the body ran")

    with pytest.raises(
        dlbridge.DeviceMismatchError,
        match=r"^fused\(xs\[1\]=…\) under @dlbridge.guard\('cupy'\): received torch cpu float32\[2\]: .*pass device=\"cuda\" or copy=True",
    ):
        fused([None, torch.ones(2)])


def test_extra_positional_arguments_are_named_after_the_star_parameter() -> None:
    @dlbridge.guard("numpy")
    def fused(x, *rest):
        raise AssertionError("the body ran")

    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r"^fused\(rest\[1\]=…\)"):
        fused(torch.ones(1), torch.ones(1), fp4(1))


def test_guard_frames_are_hidden_from_pytest_tracebacks() -> None:
    @dlbridge.guard("numpy")
    def fused(x):
        return x

    with pytest.raises(dlbridge.UnsupportedDtypeError) as info:
        fused(fp4())
    frames = []
    tb = info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    guard_frames = [f for f in frames if f.f_code.co_filename == dlbridge._guard.__file__]
    assert guard_frames, "the guard's frames should be on the traceback"
    assert all(f.f_locals.get("__tracebackhide__") is True for f in guard_frames)


def test_bad_options_fail_at_decoration() -> None:
    with pytest.raises(
        dlbridge.OptionError, match=r"unknown target framework 'tensorflow'; expected one of: cupy, jax, numpy, torch"
    ):
        dlbridge.guard("tensorflow")
    with pytest.raises(dlbridge.OptionError, match=r"fallback='copy' is not a fallback"):
        dlbridge.guard("numpy", fallback="copy")
    with pytest.raises(dlbridge.OptionError, match=r"unknown target framework 'paddle'"):
        dlbridge.guard("numpy", returns="paddle")


# --- the body's own exceptions -------------------------------------------------------------------


def test_body_exceptions_pass_through_untouched() -> None:
    boom = KeyError("mine")

    @dlbridge.guard("numpy")
    def body(a):
        raise boom

    with pytest.raises(KeyError) as info:
        body(torch.ones(2))
    assert info.value is boom
    assert not getattr(boom, "__notes__", None)
    assert info.traceback[-1].name == "body"


# --- methods and metadata ------------------------------------------------------------------------


class Layer:
    scale = 2.0

    @dlbridge.guard("numpy")
    def forward(self, x):
        """Scale x."""
        return x * self.scale

    @staticmethod
    @dlbridge.guard("numpy")
    def static_inner(x):
        return type(x), x

    @dlbridge.guard("numpy")
    @staticmethod
    def static_outer(x):
        return type(x), x

    @dlbridge.guard("numpy")
    @classmethod
    def create(cls, x):
        return cls, type(x), x


def test_methods_staticmethods_and_classmethods() -> None:
    t = torch.tensor([1.0, 2.0])
    assert Layer().forward(t).tolist() == [2.0, 4.0]
    for fn in (Layer.static_inner, Layer().static_inner, Layer.static_outer, Layer().static_outer):
        kind, back = fn(t)
        assert kind is np.ndarray and isinstance(back, torch.Tensor)
    cls, kind, back = Layer.create(t)
    assert cls is Layer and kind is np.ndarray and isinstance(back, torch.Tensor)
    assert isinstance(Layer.__dict__["static_outer"], staticmethod)
    assert isinstance(Layer.__dict__["create"], classmethod)


def test_wrapped_metadata() -> None:
    def fused(x: object, y: object = None, *, scale: float = 1.0) -> object:
        """Fuse x and y."""
        return x

    guarded = dlbridge.guard("numpy")(fused)
    assert guarded.__name__ == "fused"
    assert guarded.__qualname__ == fused.__qualname__
    assert guarded.__doc__ == "Fuse x and y."
    assert guarded.__wrapped__ is fused
    assert pyinspect.signature(guarded) == pyinspect.signature(fused)
    assert Layer.forward.__doc__ == "Scale x."
    assert str(pyinspect.signature(Layer.forward)) == "(self, x)"


def test_guard_imports_no_framework() -> None:
    done = run_child(
        """
        import sys, dlbridge
        @dlbridge.guard("cupy", args=("x",))
        def f(x): return x
        @dlbridge.guard("jax", convert=False)
        def g(x): return x
        assert g([1, 2]) == [1, 2]
        print(sorted(m for m in ("torch", "jax", "cupy", "numpy") if m in sys.modules))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_benchmark_runs(capsys) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_guard.py"
    spec = importlib.util.spec_from_file_location("bench_guard", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for _, guarded, by_hand in bench.cases():  # like for like: both sides give the same values
        g, h = guarded(), by_hand()
        g, h = (g, h) if isinstance(g, tuple) else ((g,), (h,))
        assert [type(a) for a in g] == [type(b) for b in h]
        assert all(values(a) == values(b) for a, b in zip(g, h))
    assert bench.main(["--number", "2", "--rounds", "1"]) == 0
    assert "worst ratio" in capsys.readouterr().out
