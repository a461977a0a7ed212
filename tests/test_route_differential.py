"""Differential property test of the fast route: the compiled route (``accel.convert``), the Python
route (``_route._convert_py``), the public ``dlbridge.to_<name>`` and the full pipeline
(``_convert._convert`` after ``resolve_fallback``) give the same outcome for the same call, whatever
the route learned before.

A case is a source (framework, dtype, layout, read-only, torch's autograd/conjugate/negative state,
or a ``fallback="view"`` result dlbridge made), a consumer, the options (``fallback=`` among the
valid names, None, not given and values that are not fallbacks; now and then ``copy=`` or ``dtype=``,
which the route declines) and a call history:

- ``cold``: the route has learned nothing (its caches are emptied);
- ``warm``: the same conversion was made once before on the same path;
- ``other``: other producer types and dtypes were converted into the consumer first;
- ``import``: ``other`` and ``warm``, then a module was imported (the route asks producer types again);
- ``refallback``: the same conversion was made before with ``fallback="view"``, then ``"upcast"``.

The pipeline decides every call from scratch: it is the reference. The outcome is the error (class and
message), or the result's type, dtype, shape, raw bytes, whether it is the source itself, whether it
shares the source's memory and whether it is read-only.

The properties run in a child pytest (``isolated``): arbitrary layouts and dtypes reach the consumers.
The TensorFlow and Paddle variant imports Paddle before TensorFlow (``need``) in that child.
``DLBRIDGE_HYPOTHESIS_EXAMPLES=5000`` runs deep (the TensorFlow and Paddle property takes half as many).
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import count
from math import prod
from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge import _options
from dlbridge._accelerator import accel
from dlbridge._adapters import ADAPTERS, adapter_for
from dlbridge._errors import DLBridgeError
from dlbridge._options import NOT_GIVEN, resolve_fallback
from dlbridge._pipeline._convert import _convert
from dlbridge._route import _learn
from dlbridge._route import _replay as _route
from tests._route_helpers import ptr
from tests.conftest import need

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed")
st = hypothesis.strategies
ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")

# A case takes about 10 ms: 100 examples (50 for TensorFlow and Paddle) keep the file at a few seconds
# past the child's imports; DLBRIDGE_HYPOTHESIS_EXAMPLES=5000 for a deep run.
SETTINGS = hypothesis.settings(
    max_examples=int(os.environ.get("DLBRIDGE_HYPOTHESIS_EXAMPLES", "100")),
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.filter_too_much],
)
isolated = pytest.mark.isolated

PATHS = ("compiled", "pure", "public")  # each compared with the pipeline
HISTORIES = ("cold", "warm", "other", "import", "refallback")


class Fallback(str):
    """A ``str`` subclass: equal to a fallback name, but not one of dlbridge's own strings."""


# fallback= values: the names, the defaults, and values that are not fallbacks.
FALLBACKS: tuple[Any, ...] = (
    "raise", "view", "upcast", None, NOT_GIVEN, 3, b"view", "VIEW", Fallback("view"), Fallback("raise"),
)  # fmt: skip

# --- sources --------------------------------------------------------------------------------------

# The ml_dtypes kinds the installed ml_dtypes has (0.4 lacks the newer float8, float6, float4 and 2-bit kinds).
ML = tuple(name for name in (
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float8_e3m4", "float8_e4m3", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
    "int2", "uint2", "int4", "uint4") if hasattr(ml_dtypes, name))  # fmt: skip
PLAIN = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
         "float64", "complex64", "complex128")  # fmt: skip
NUMPY_ONLY = ("object", ">i4", ">f4", ">c8", "datetime64[s]", "timedelta64[ms]", "U2", "V4")
TORCH_DTYPES = (*PLAIN, "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                "float8_e8m0fnu")  # fmt: skip
JAX_DTYPES = tuple(d for d in (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "float32", "complex64", "bfloat16",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz", "int4", "uint4",
) if d in PLAIN or d in ML)  # fmt: skip
TF_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "int64", "float16", "float32", "float64",
             "complex64", "bfloat16", "float8_e4m3fn", "float8_e5m2")  # fmt: skip
PADDLE_DTYPES = ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
                 "bfloat16", "float8_e4m3fn", "float8_e5m2")  # fmt: skip

LAYOUTS = {
    "numpy": ("dense", "0-d", "empty", "transposed", "sliced", "reversed", "broadcast"),
    "torch": ("dense", "0-d", "empty", "transposed", "sliced", "broadcast"),
    "jax": ("dense", "0-d", "empty"),  # JAX arrays are always dense
    "tensorflow": ("dense", "0-d", "empty"),
    "paddle": ("dense", "0-d", "empty", "transposed", "sliced"),
}
SHAPES = {"dense": (3, 4), "0-d": (), "empty": (0, 3), "transposed": (4, 3), "sliced": (4, 6),
          "reversed": (3, 4), "broadcast": (1, 4)}  # fmt: skip


@dataclass(frozen=True)
class Source:
    framework: str
    dtype: str
    layout: str = "dense"
    readonly: bool = False  # NumPy: flags.writeable = False
    state: str = "plain"  # torch: "grad" (requires_grad), "conj" (.conj() of complex), "neg" (_neg_view)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in (("readonly", self.readonly), ("state", self.state))
                        if v not in (False, "plain"))  # fmt: skip
        return f"Source({self.framework!r}, {self.dtype!r}, {self.layout!r}{extra})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # how hypothesis prints a falsifying example
        p.text(repr(self))


@dataclass(frozen=True)
class ViewSource:
    """A ``fallback="view"`` result of the pipeline: an unsigned array dlbridge remembers as ``dtype``."""

    of: str  # the framework the view was handed from
    to: str  # the framework the view lives in
    dtype: str
    layout: str = "dense"  # the layout of the array it was made from


# Every fallback="view" result the installed stack makes (source framework, dtype -> consumer).
VIEWS = (
    ViewSource("numpy", "torch", "float8_e4m3b11fnuz"), ViewSource("numpy", "torch", "float8_e3m4"),
    ViewSource("numpy", "torch", "float8_e4m3"), ViewSource("jax", "torch", "float8_e4m3b11fnuz"),
    ViewSource("torch", "numpy", "complex32"), ViewSource("torch", "torch", "complex32"),
    ViewSource("torch", "jax", "complex32"), ViewSource("torch", "numpy", "float4_e2m1fn_x2"),
    ViewSource("torch", "jax", "float4_e2m1fn_x2"),
)  # fmt: skip


def np_dtype(name: str) -> np.dtype:
    if name in ML:
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct-ish values of ``dtype`` (NaN, -0.0 and inf where floats can hold them), C order."""
    n = prod(shape)
    i = np.arange(n)
    if dtype == "object":
        return np.array([("a", k) if k % 3 else k for k in range(n)] + [None], dtype=object)[:n].reshape(shape)
    if dtype.startswith(("datetime64", "timedelta64")):
        return (i * 1000 - 7).astype(dtype).reshape(shape)
    if dtype == "U2":
        return np.array([chr(97 + k % 26) * 2 for k in range(n)], dtype="U2").reshape(shape)
    if dtype == "V4":
        return (i.astype(np.uint64) * 2654435761 % 2**32).astype("<u4").view("V4").reshape(shape)
    dt = np_dtype(dtype)
    if dt.kind == "b":
        return (i % 3 == 0).reshape(shape)
    if dt.kind in "iu" or dtype in ("int2", "uint2", "int4", "uint4"):
        signed = dt.kind == "i" or dtype in ("int2", "int4")
        small = dtype in ("int2", "uint2", "int4", "uint4")
        raw = (i % 2 - signed) if dtype in ("int2", "uint2") else (i * 37 % (8 if small else 100))
        return raw.astype(np.int64).astype(dt).reshape(shape)
    special = np.array([0.5, -0.0, np.nan, np.inf, -1.5, 2.0, 0.25, -np.inf, 3.0, -6.0, 1.0, 0.0], np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = special[i % len(special)].astype(np.complex128 if dt.kind == "c" else np.float64)
        if dt.kind == "c":
            base.imag = special[(i + 5) % len(special)]
        return base.astype(dt).reshape(shape)


def _numpy_layout(a: np.ndarray, layout: str) -> np.ndarray:
    if layout == "transposed":
        return a.T
    if layout == "sliced":
        return a[1:, 2:]  # a byte offset and non-C strides
    if layout == "reversed":
        return a[::-1]
    if layout == "broadcast":
        return np.broadcast_to(a, (3, 4))  # stride 0 (read-only in NumPy)
    return a


def make(src: Source | ViewSource) -> Any:
    """A fresh source array for ``src`` (the same values every call)."""
    if isinstance(src, ViewSource):
        if src.dtype in ("complex32", "float4_e2m1fn_x2"):  # torch dtypes NumPy has no counterpart of
            torch = need("torch")
            shape = SHAPES[src.layout]
            bits = (torch.arange(max(prod(shape), 1) * 4, dtype=torch.int64, device="cpu") % 251).to(torch.uint8)[
                : prod(shape) * 4
            ]
            wide = bits.view(torch.uint32) if src.dtype == "complex32" else bits[: prod(shape)]
            base = wide.view(getattr(torch, src.dtype)).reshape(shape)
            base = {"transposed": lambda t: t.T, "sliced": lambda t: t[1:, 2:]}.get(src.layout, lambda t: t)(base)
        else:
            base = make(Source(src.of, src.dtype, src.layout))
        return _convert(base, ADAPTERS[src.to], "view", None, None, None, None)
    ref = values(src.dtype, SHAPES[src.layout])
    fw = src.framework
    if fw == "numpy":
        x = _numpy_layout(ref if ref.dtype.hasobject else ADAPTERS["numpy"].prober.make_array(ref, "cpu"), src.layout)
        if src.readonly and x.flags.writeable:
            x.flags.writeable = False
        return x
    adapter = ADAPTERS[fw]
    need(adapter.module)
    x = adapter.prober.make_array(ref, "cpu")
    if fw == "torch":
        torch = adapter.mod
        x = {"transposed": lambda t: t.T, "sliced": lambda t: t[1:, 2:], "broadcast": lambda t: t.expand(3, 4)}.get(
            src.layout, lambda t: t
        )(x)
        if src.state == "grad":
            x = x.detach().requires_grad_()
        elif src.state == "conj":
            x = x.conj()
        elif src.state == "neg":
            x = torch._neg_view(x)
    elif fw == "paddle":
        if src.layout == "transposed":
            x = x.transpose([1, 0])
        elif src.layout == "sliced":
            x = x[1:, 2:]
    return x


# --- the four calls -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    fallback: Any = NOT_GIVEN
    dtype: Any = None
    copy: Any = None
    policy: tuple[str, str] | None = None  # ("block", mode): inside fallback_policy(mode); ("default", mode)

    def __repr__(self) -> str:
        parts = [] if self.fallback is NOT_GIVEN else [f"fallback={self.fallback!r}"]
        if isinstance(self.fallback, Fallback):
            parts = [f"fallback=Fallback({str(self.fallback)!r})"]
        parts += [f"{k}={v!r}" for k, v in (("dtype", self.dtype), ("copy", self.copy), ("policy", self.policy))
                  if v is not None]  # fmt: skip
        return f"Options({', '.join(parts)})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # Fallback("view") is not printed as "view"
        p.text(repr(self))


@contextmanager
def policy(opt: Options) -> Iterator[None]:
    """The default fallback the call sees: a ``fallback_policy`` block or ``set_default_fallback``."""
    if opt.policy is None:
        yield
    elif opt.policy[0] == "block":
        with dlbridge.fallback_policy(opt.policy[1]):
            yield
    else:
        previous = dlbridge.set_default_fallback(opt.policy[1])
        try:
            yield
        finally:
            dlbridge.set_default_fallback(previous)


def call(path: str, to: str, x: Any, opt: Options) -> Any:
    with policy(opt):
        return _call(path, to, x, opt)


def _call(path: str, to: str, x: Any, opt: Options) -> Any:
    spec = _route.SPECS[to]
    if path == "compiled":
        return accel.convert(spec, x, opt.fallback, opt.dtype, None, opt.copy, None)
    if path == "pure":
        return _route._convert_py(spec, x, opt.fallback, opt.dtype, None, opt.copy, None)
    if path == "public":
        kwargs = {k: v for k, v in (("dtype", opt.dtype), ("copy", opt.copy)) if v is not None}
        if opt.fallback is not NOT_GIVEN:
            kwargs["fallback"] = opt.fallback
        return getattr(dlbridge, f"to_{to}")(x, **kwargs)
    assert path == "pipeline", path
    return _convert(x, ADAPTERS[to], resolve_fallback(opt.fallback), opt.dtype, None, opt.copy, None)


def outcome(run: Callable[[], Any], x: Any) -> tuple[Any, ...]:
    """What a conversion of ``x`` gave: ("error", class, message), or ("ok", type, dtype, shape,
    bytes, the source itself, shares the source's memory, read-only)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = run()
    except Exception as err:
        return ("error", type(err).__name__, str(err))
    adapter = adapter_for(r)
    if adapter is None:
        return ("ok", type(r).__name__, "not an array")
    shape = tuple(int(d) for d in r.shape)
    try:
        host = adapter.prober.to_host(r)
        data: Any = repr(host.tolist()) if host.dtype.hasobject else np.ascontiguousarray(host).tobytes()
    except Exception:  # a dtype NumPy has no counterpart of (torch's float4_e2m1fn_x2): the raw bytes
        try:
            data = bytes(adapter.prober.host_bytes(r))
        except Exception as err:
            data = f"unreadable ({type(err).__name__})"
    shared = prod(shape) > 0 and ptr(r) is not None and ptr(r) == ptr(x)
    dtype = adapter.prober.dtype_str(r)
    if isinstance(r, np.ndarray):
        dtype += f" ({r.dtype.str})"  # the byte order and unit too: '>i4', '<M8[s]'
    return ("ok", type(r).__name__, dtype, shape, data, r is x, shared,
            bool(adapter.is_readonly(r)))  # fmt: skip


def short(o: tuple[Any, ...]) -> tuple[Any, ...]:
    """An outcome as a failure message shows it (the bytes left out)."""
    if o[0] == "error" or len(o) < 5:
        return o
    data = o[4] if len(o[4]) <= 32 else f"<{len(o[4])} bytes, hash {hash(o[4]):x}>"
    return (*o[:4], data, *o[5:])


# --- the route's memory ---------------------------------------------------------------------------

_modules = count()


def forget() -> None:
    """Empty what the route learned (producer types, each consumer's routes) and forget that a
    ``fallback_policy`` block was ever used: the next call is cold."""
    _options._blocks_used = False
    _options._refresh_cell()
    _learn.producers.clear()
    _learn._seen.clear()
    for spec in _learn.SPECS.values():  # the spec holds one state, replaced whole: a fresh one
        spec[0] = _learn.new_state(spec[0].target)


def import_a_module() -> None:
    """A module import, as the route sees it (the count of sys.modules changes)."""
    name = f"_dlbridge_differential_{next(_modules)}"
    sys.modules[name] = types.ModuleType(name)


def others(src: Source | ViewSource, frameworks: tuple[str, ...]) -> list[Source]:
    """Conversions made before the case under ``other``: another dtype of the same producer, other
    producer types, a float and an int of each."""
    fw = src.of if isinstance(src, ViewSource) else src.framework
    made = [Source(fw, "float32"), Source(fw, "int32")]
    made += [Source(f, "float32") for f in frameworks if f != fw]
    return made


def history(kind: str, path: str, to: str, x: Any, opt: Options, frameworks: tuple[str, ...],
            src: Source | ViewSource) -> None:  # fmt: skip
    forget()
    if kind in ("other", "import"):
        for other in others(src, frameworks):
            y = make(other)
            for fb in ("raise", opt.fallback):
                outcome(partial(call, path, to, y, Options(fb, policy=opt.policy)), y)
    if kind in ("warm", "import"):
        outcome(partial(call, path, to, x, opt), x)
    if kind == "import":
        import_a_module()
    if kind == "refallback":
        for fb in ("view", "upcast"):
            outcome(partial(call, path, to, x, Options(fb, opt.dtype, opt.copy, opt.policy)), x)


def differences(src: Source | ViewSource, to: str, opt: Options, kind: str, frameworks: tuple[str, ...],
                paths: tuple[str, ...] = PATHS) -> list[str]:  # fmt: skip
    """Where a path's outcome differs from the pipeline's, after ``kind``'s history on that path."""
    x = make(src)
    expected = outcome(partial(call, "pipeline", to, x, opt), x)
    found = []
    for path in paths:
        if path == "compiled" and accel is None:
            continue
        x = make(src)  # a fresh source: nothing the history did to it counts
        history(kind, path, to, x, opt, frameworks, src)
        got = outcome(partial(call, path, to, x, opt), x)
        if got != expected:
            found.append(f"{path} after {kind}: {short(got)} != pipeline {short(expected)}")
    return found


# --- strategies -----------------------------------------------------------------------------------


@st.composite
def sources(draw: Any, frameworks: tuple[str, ...]) -> Source | ViewSource:
    fw = draw(st.sampled_from(frameworks))
    if draw(st.integers(0, 7)) == 0:
        views = [v for v in VIEWS if v.to in frameworks and v.of in frameworks]
        if views:
            view = draw(st.sampled_from(views))
            need(ADAPTERS[view.of].module)
            need(ADAPTERS[view.to].module)
            try:  # a view this stack cannot make (ml_dtypes 0.4 has no float8_e3m4; JAX < 0.5.3 exports no fp8)
                make(view)
            except (AttributeError, TypeError, DLBridgeError):
                hypothesis.assume(False)
            return view
    need(ADAPTERS[fw].module)
    if fw == "numpy":
        dtype = draw(st.sampled_from(PLAIN + ML + NUMPY_ONLY))
    else:
        dtype = draw(st.sampled_from({"torch": TORCH_DTYPES, "jax": JAX_DTYPES, "tensorflow": TF_DTYPES,
                                      "paddle": PADDLE_DTYPES}[fw]))  # fmt: skip
    layout = draw(st.sampled_from(LAYOUTS[fw]))
    readonly = fw == "numpy" and draw(st.booleans())
    state = "plain"
    if fw == "torch":  # requires_grad needs a float dtype; .conj() of a real tensor is the tensor itself
        floating, complex_ = dtype.startswith(("float", "bfloat", "complex")), dtype.startswith("complex")
        state = draw(st.sampled_from(("plain", "plain", "neg") + ("grad",) * floating + ("conj",) * complex_))
    return Source(fw, dtype, layout, readonly, state)


@st.composite
def options(draw: Any) -> Options:
    extra = [{}] * 8 + [{"copy": True}, {"copy": False}, {"dtype": "uint8"}, {"dtype": "bfloat16"}]
    policies = [None] * 6 + [(how, mode) for how in ("block", "default") for mode in ("raise", "view", "upcast")]
    return Options(
        draw(st.sampled_from(FALLBACKS)), **draw(st.sampled_from(extra)), policy=draw(st.sampled_from(policies))
    )


def _check(src: Source | ViewSource, to: str, opt: Options, kind: str, frameworks: tuple[str, ...]) -> None:
    need(ADAPTERS[to].module)
    found = differences(src, to, opt, kind, frameworks)
    assert not found, f"{src!r} -> {to} {opt!r}:\n" + "\n".join(found)


IN_PROCESS = ("numpy", "torch", "jax")
TF_PADDLE = ("paddle", "tensorflow")
ALL = (*IN_PROCESS, *TF_PADDLE)  # need() imports paddle before tensorflow (the other way round crashes)


@pytest.fixture(scope="module")
def in_process() -> None:
    """The frameworks imported before hypothesis draws (an import inside a strategy is external state)."""
    for name in IN_PROCESS:
        need(name)


@pytest.fixture(scope="module")
def all_frameworks() -> None:
    for name in ALL:
        need(name)


@isolated
@SETTINGS
@hypothesis.given(
    src=sources(IN_PROCESS),
    to=st.sampled_from(IN_PROCESS),
    opt=options(),
    kind=st.sampled_from(HISTORIES),
)
def test_property_route_equals_pipeline(
    in_process: None, src: Source | ViewSource, to: str, opt: Options, kind: str
) -> None:
    _check(src, to, opt, kind, IN_PROCESS)


@isolated
@hypothesis.settings(SETTINGS, max_examples=max(1, SETTINGS.max_examples // 2))
@hypothesis.given(src=sources(ALL), to=st.sampled_from(ALL), opt=options(), kind=st.sampled_from(HISTORIES))
def test_property_tensorflow_paddle(
    all_frameworks: None, src: Source | ViewSource, to: str, opt: Options, kind: str
) -> None:
    hypothesis.assume(
        to in TF_PADDLE or getattr(src, "framework", None) in TF_PADDLE or getattr(src, "to", None) in TF_PADDLE
    )
    _check(src, to, opt, kind, ALL)


# --- the disagreements found, one plain test each -------------------------------------------------


def _all_paths_agree(src: Source | ViewSource, to: str, opt: Options) -> None:
    need(ADAPTERS[to].module)
    found = [d for kind in HISTORIES for d in differences(src, to, opt, kind, IN_PROCESS)]
    assert not found, f"{src!r} -> {to} {opt!r}:\n" + "\n".join(found)


# NumPy cannot export these through DLPack (the pipeline refuses most with ProducerError, and hands
# byte-swapped arrays to NumPy as views); the route returned x.view() for all once it had learned ndarray.
UNEXPORTABLE = ("object", ">i4", ">f4", ">c8", "datetime64[s]", "timedelta64[ms]", "U2", "V4",
                *(d for d in ("int2", "uint2", "int4", "uint4", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn")
                  if d in ML))  # fmt: skip


@pytest.mark.parametrize("dtype", UNEXPORTABLE)
def test_numpy_to_numpy_of_a_dtype_dlpack_cannot_carry(dtype: str) -> None:
    """to_numpy(x) gives what the pipeline gives also after another ndarray passed."""
    _all_paths_agree(Source("numpy", dtype), "numpy", Options("raise"))
    _all_paths_agree(Source("numpy", dtype, "reversed", readonly=True), "numpy", Options())


@pytest.mark.parametrize("to", ["numpy", "torch", "jax"])
def test_a_read_only_byte_swapped_array_with_copy_true(to: str) -> None:
    """copy=True of a read-only big-endian array: NumPy's own copy into NumPy, a native-order copy into the
    others, on every path and NumPy version (NumPy < 2.1 refuses to export a read-only array, and any
    byte-swapped one: the copy it exported in the array's place was byte-swapped too, refused with
    ReadOnlyError while explain foresaw ProducerError)."""
    _all_paths_agree(Source("numpy", ">f4", readonly=True), to, Options(copy=True))
    need(ADAPTERS[to].module)
    x = np.arange(6, dtype=">f4")
    x.flags.writeable = False
    record = dlbridge.explain(x, to, copy=True)
    out = dlbridge.convert(x, to, copy=True)
    assert record.error is None and not record.shares, record
    host = ADAPTERS[to].prober.to_host(out)
    # NumPy keeps the array's own dtype (its copy is big-endian still); the others get a native-order copy
    assert host.dtype == (np.dtype(">f4") if to == "numpy" else np.float32), host.dtype
    assert host.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert out.flags.writeable if to == "numpy" else True
    field = np.zeros(4, np.dtype([("a", "u1"), ("b", "f4")]))["b"]  # strides not a multiple of the itemsize
    field[:] = [1, 2, 3, 4]
    field.flags.writeable = False
    record, out = dlbridge.explain(field, to, copy=True), dlbridge.convert(field, to, copy=True)
    assert record.error is None and ADAPTERS[to].prober.to_host(out).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert ADAPTERS[to].data_ptr(out) != x.ctypes.data


def test_numpy_to_numpy_of_an_object_array_public() -> None:
    """The reproducer, through the public function only."""
    forget()
    dlbridge.to_numpy(np.zeros(3, np.float32))  # the route learns ndarray
    with pytest.raises(dlbridge.ProducerError, match="DLPack only supports"):
        dlbridge.to_numpy(np.zeros(3, object))


@pytest.mark.parametrize("to", ["numpy", "torch"])
@pytest.mark.parametrize("name", ["view", "raise"])
def test_fallback_given_as_a_str_subclass(to: str, name: str) -> None:
    """fallback=Fallback("view") is refused (OptionError) by the pipeline: cold, warm, on every path."""
    _all_paths_agree(Source("numpy", "float32"), to, Options(Fallback(name)))
    _all_paths_agree(Source("torch", "bfloat16"), to, Options(Fallback(name)))


def test_fallback_given_as_a_str_subclass_public() -> None:
    """The reproducer, through the public function only."""
    forget()
    x = np.zeros(3, np.float32)
    dlbridge.to_numpy(x, fallback="view")  # the route becomes ready for NumPy
    with pytest.raises(dlbridge.OptionError, match="is not a fallback"):
        dlbridge.to_numpy(x, fallback=Fallback("view"))
