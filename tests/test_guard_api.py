"""@dlbridge.guard on the CPU: errors and their wording, convert=False, the body's own exceptions,
methods, metadata, tracebacks, framework-free import and the benchmark's smoke run."""

from __future__ import annotations

import inspect as pyinspect

import pytest

import dlbridge
from tests._arrays import jax_cpu
from tests._guard_helpers import chalf, np, require_no_x64, torch, values
from tests.conftest import run_child

# --- convert=False -------------------------------------------------------------------------------


def test_convert_false_raises_before_the_body_runs() -> None:
    require_no_x64()
    calls = []

    @dlbridge.guard("jax", convert=False)
    def fused(x, y):
        calls.append(1)

    with pytest.raises(
        dlbridge.UnsupportedDtypeError,
        match=r"^fused\(y=…\) under @dlbridge.guard\('jax'\): cannot hand torch cpu float64\[3\] to jax",
    ):
        fused(torch.ones(3, device="cpu"), torch.ones(3, dtype=torch.float64, device="cpu"))
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
        fused(torch.ones(2, device="cpu"))
    assert calls == []


def test_convert_false_fallback_hint_says_to_drop_convert_false() -> None:
    @dlbridge.guard("numpy", convert=False)
    def fused(x):
        raise AssertionError("the body ran")

    with pytest.raises(
        dlbridge.UnsupportedDtypeError, match=r'fallback="view".*convert=False converts nothing: drop it'
    ):
        fused(chalf())


def test_convert_false_passes_the_arguments_unconverted() -> None:
    x = torch.ones(2, device="cpu")

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
        fused(torch.ones(4, device="cpu"), y=chalf(2))
    message = str(info.value)
    assert message.startswith("fused(y=…) under @dlbridge.guard('numpy'): cannot hand torch cpu complex32[2] to numpy")
    assert 'Pass fallback="view"' in message
    assert isinstance(info.value, NotImplementedError)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_device_mismatch_names_the_nested_argument(cupy_counted_installed: None) -> None:
    @dlbridge.guard("cupy")
    def fused(xs):
        raise AssertionError("the body ran")

    with pytest.raises(
        dlbridge.DeviceMismatchError,
        match=r"^fused\(xs\[1\]=…\) under @dlbridge.guard\('cupy'\): received torch cpu float32\[2\]: .*pass device=\"cuda\" or copy=True",
    ):
        fused([None, torch.ones(2, device="cpu")])


def test_extra_positional_arguments_are_named_after_the_star_parameter() -> None:
    @dlbridge.guard("numpy")
    def fused(x, *rest):
        raise AssertionError("the body ran")

    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r"^fused\(rest\[1\]=…\)"):
        fused(torch.ones(1, device="cpu"), torch.ones(1, device="cpu"), chalf(1))


def test_guard_frames_are_hidden_from_pytest_tracebacks() -> None:
    @dlbridge.guard("numpy")
    def fused(x):
        return x

    with pytest.raises(dlbridge.UnsupportedDtypeError) as info:
        fused(chalf())
    frames = []
    tb = info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    guard_frames = [
        f
        for f in frames
        if f.f_code.co_filename in (dlbridge._guard._decorator.__file__, dlbridge._guard._call.__file__)
    ]
    assert guard_frames, "the guard's frames should be on the traceback"
    assert all(f.f_locals.get("__tracebackhide__") is True for f in guard_frames)


def test_bad_options_fail_at_decoration() -> None:
    with pytest.raises(
        dlbridge.OptionError,
        match=r"unknown target framework 'mxnet'; expected one of: array_api_strict, cupy, jax, mlx, numpy, "
        r"onnxruntime, paddle, tensorflow, torch, warp",
    ):
        dlbridge.guard("mxnet")
    with pytest.raises(dlbridge.OptionError, match=r"fallback='copy' is not a fallback"):
        dlbridge.guard("numpy", fallback="copy")
    with pytest.raises(dlbridge.OptionError, match=r"unknown target framework 'mxnet'"):
        dlbridge.guard("numpy", returns="mxnet")


# --- the body's own exceptions -------------------------------------------------------------------


def test_body_exceptions_pass_through_untouched() -> None:
    boom = KeyError("mine")

    @dlbridge.guard("numpy")
    def body(a):
        raise boom

    with pytest.raises(KeyError) as info:
        body(torch.ones(2, device="cpu"))
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
    t = torch.tensor([1.0, 2.0], device="cpu")
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
    with torch.device("cpu"):  # a CPU benchmark: its tensors on the CPU whatever torch's default device is
        for _, guarded, by_hand in bench.cases():  # like for like: both sides give the same values
            g, h = guarded(), by_hand()
            g, h = (g, h) if isinstance(g, tuple) else ((g,), (h,))
            assert [type(a) for a in g] == [type(b) for b in h]
            assert all(values(a) == values(b) for a, b in zip(g, h))
        assert bench.main(["--number", "2", "--rounds", "1"]) == 0
    assert "worst ratio" in capsys.readouterr().out


# --- how the decorator is used: clear errors at decoration time -------------------------------------


def test_bare_guard_without_a_target_says_how_to_write_it() -> None:
    def body(x):
        return x

    with pytest.raises(
        dlbridge.OptionError,
        match=r'^@dlbridge.guard was applied to .*body\(\) without a target framework; .*@dlbridge.guard\("torch"\) '
        r"\(one of [a-z_, ]+, or the module\)",
    ):
        dlbridge.guard(body)


def test_guard_with_a_number_as_target_says_how_to_write_it() -> None:
    with pytest.raises(
        dlbridge.OptionError, match=r'^dlbridge.guard\(5\): the first argument is not a framework.*guard\("torch"\)'
    ):
        dlbridge.guard(5)


def test_guard_decorating_a_non_callable_is_an_option_error() -> None:
    with pytest.raises(dlbridge.OptionError, match=r"decorates a function .*received builtins.int"):
        dlbridge.guard("torch")(5)


def test_guard_fallback_given_an_array_is_an_option_error_naming_the_valid_values() -> None:
    with pytest.raises(
        dlbridge.OptionError,
        match=r"^fallback= received a numpy.ndarray, not a fallback name; expected one of 'raise', 'view', 'upcast'$",
    ):
        dlbridge.guard("torch", fallback=np.zeros(3))


def test_guard_returns_given_an_array_is_an_option_error() -> None:
    with pytest.raises(
        dlbridge.OptionError, match=r"returns=\.\.\.\) received numpy cpu float64\[2\]; expected a framework"
    ):
        dlbridge.guard("torch", returns=np.zeros(2))


def test_guard_copy_given_an_array_is_an_option_error() -> None:
    with pytest.raises(
        dlbridge.OptionError, match=r"guard\(copy=numpy cpu float64\[2\]\); expected True, False or None"
    ):
        dlbridge.guard("torch", copy=np.zeros(2))


# --- args= -----------------------------------------------------------------------------------------


def test_args_selecting_a_list_of_numbers_raises_not_an_array() -> None:
    @dlbridge.guard("torch", args=("xs",))
    def body(xs):
        raise AssertionError("the body ran")

    with pytest.raises(
        dlbridge.NotAnArrayError,
        match=r"^body\(xs=…\): args= selects it for conversion to PyTorch, but it is a list holding no array",
    ):
        body([1, 2.5])


def test_args_selecting_a_mixed_or_empty_container_converts_its_arrays_and_leaves_the_rest() -> None:
    @dlbridge.guard("torch", args=("xs",))
    def body(xs):
        return [type(v).__name__ for v in xs]

    assert body([np.ones(2), None, 7]) == ["Tensor", "NoneType", "int"]
    assert body([[np.ones(2)], 3]) == ["list", "int"]
    assert body([]) == []


def test_args_results_go_to_the_first_selected_parameters_framework_in_signature_order() -> None:
    jnp = pytest.importorskip("jax.numpy")

    @dlbridge.guard("numpy", args=("x", "y"))
    def body(x, y):
        return x + y

    # y is given first in the call, x comes first in the signature: results follow x.
    out = body(y=jax_cpu(jnp.ones(2)), x=torch.ones(2, device="cpu"))
    assert isinstance(out, torch.Tensor) and out.tolist() == [2.0, 2.0]
