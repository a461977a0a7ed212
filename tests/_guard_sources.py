"""Calls for test_robustness_guard.py: a printable ``GuardCall`` (the guard's options, the arguments
as ``Item``s, the body's behaviour), its strategy, and the README's model of what an array becomes
in a framework, and readers of what came back. The array sources are test_robustness_options.py's ``Spec`` (plus torch's packed
float4, which only torch holds)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from tests._arrays import np_dtype, torch_from
from tests._option_sources import B11, DTYPES, Source, Spec, bits_of, build, numpy_layout, same_or_both_nan, specs
from tests._robust_helpers import np, torch
from tests.conftest import caps_of, need

hypothesis = need("hypothesis")
st = hypothesis.strategies

FP4 = "float4_e2m1fn_x2"  # torch's packed float4: NumPy and JAX cannot hold it, nor upcast it
FRAMEWORKS = ("torch", "jax", "numpy")
# (B11, float4 and uint8 more often: a fallback="view" view and a native uint8 argument share a wire dtype)
ARRAY_DTYPES = (*DTYPES, B11, B11, "uint8", "uint8")
WRAPS = ("bare", "bare", "tuple", "list", "dict", "namedtuple", "deep")
PLAINS = ("int", "str", "none", "numbers")
BODIES = ("same", "same", "new", "new", "box", "raise", "dlraise", "plain")
BOXES = ("tuple", "list", "dict", "namedtuple")
SLOTS = 6  # body(a0=None, ..., a5=None)


class Pair(NamedTuple):
    first: Any
    second: Any


class Quad(NamedTuple):
    same: Any
    new: Any
    n: Any
    s: Any


@dataclass(frozen=True)
class Item:
    """One argument: an array (``spec``) wrapped as ``wrap`` names, or a non-array (``plain``)."""

    spec: Spec | None = None
    wrap: str = "bare"  # bare, tuple, list, dict, namedtuple, deep
    plain: str = "int"  # non-arrays: int, str, none, numbers


@dataclass(frozen=True)
class GuardCall:
    """``guard(target, args=select, returns=..., convert=..., fallback=..., copy=...)(body)`` called
    with ``items`` (slot i is parameter ``a{i}``): the first ``npos`` positionally, the rest by
    keyword (in reverse order if ``reverse``), under ``fallback_policy(policy)`` if set."""

    target: str
    items: tuple[Item, ...]
    npos: int = SLOTS
    reverse: bool = False
    select: tuple[str | int, ...] | None = None
    returns: str | None = "NOT_GIVEN"
    fallback: str | None = None  # None: not given
    policy: str | None = None
    copy: bool | None = None
    convert: bool = True
    body: str = "same"  # same, new, box, raise, dlraise, plain
    pick: int = 0  # the array item the body returns (index among the array items)
    box: str = "tuple"

    @property
    def order(self) -> list[int]:
        """The slots in call order (positional, then keywords as passed)."""
        kw = list(range(min(self.npos, len(self.items)), len(self.items)))
        return list(range(min(self.npos, len(self.items)))) + (kw[::-1] if self.reverse else kw)

    @property
    def selected(self) -> set[int]:
        if self.select is None:
            return set(range(len(self.items)))
        return {int(k[1:]) if isinstance(k, str) else k % SLOTS for k in self.select}

    @property
    def arrays(self) -> list[int]:
        return [i for i, item in enumerate(self.items) if item.spec is not None]

    @property
    def fb(self) -> str:
        """The fallback in force for the conversions (``$DLBRIDGE_FALLBACK`` is unset)."""
        return self.fallback or self.policy or "raise"


@st.composite
def array_specs(draw: Any) -> Spec:
    kind = draw(st.sampled_from(FRAMEWORKS))
    return draw(specs(kinds=(kind,), dtypes=ARRAY_DTYPES + ((FP4,) * 4 if kind == "torch" else ())))


@st.composite
def guard_calls(draw: Any) -> GuardCall:
    items = [Item(draw(array_specs()), draw(st.sampled_from(WRAPS))) for _ in range(draw(st.integers(1, 3)))]
    items += [Item(plain=draw(st.sampled_from(PLAINS))) for _ in range(draw(st.integers(0, 3)))]
    items = draw(st.permutations(items))
    n = len(items)
    select = None
    if draw(st.integers(0, 3)) == 0:
        slots = draw(st.permutations(range(n)))[: draw(st.integers(1, n))]
        select = tuple(draw(st.sampled_from([f"a{i}", i, i - SLOTS])) for i in slots)
    convert = draw(st.integers(0, 4)) > 0
    return GuardCall(
        draw(st.sampled_from(FRAMEWORKS)),
        tuple(items),
        npos=draw(st.integers(0, n)),
        reverse=draw(st.booleans()),
        select=select,
        returns=draw(st.sampled_from(["NOT_GIVEN", "NOT_GIVEN", "NOT_GIVEN", None, *FRAMEWORKS])),
        fallback=draw(st.sampled_from([None, None, "raise", "view", "view", "upcast"])) if convert else None,
        policy=draw(st.sampled_from([None, None, "raise", "view", "upcast"])),
        copy=draw(st.sampled_from([None, None, True, False])) if convert else None,
        convert=convert,
        body=draw(st.sampled_from(BODIES)),
        pick=draw(st.integers(0, 2)),
        box=draw(st.sampled_from(BOXES)),
    )


# --- building the arguments ------------------------------------------------------------------------


def make(spec: Spec) -> Source:
    """``build(spec)``, and torch float4 (built from uint8 bits in the same layout)."""
    if spec.dtype != FP4:
        return build(spec)
    full, view = numpy_layout(replace(spec, dtype="uint8"))
    t = torch_from(full).view(getattr(torch, FP4))
    t = {"contiguous": t, "transposed": t.T, "sliced": t[1:, 2:]}[spec.layout]
    return Source(spec, t, FP4, view.tobytes(order="C"), tuple(t.shape), t.data_ptr(), lambda: bits_of(t))


PATHS: dict[str, tuple[Any, ...]] = {"bare": (), "tuple": (0,), "list": (0,), "dict": ("k",), "namedtuple": (0,),
                                     "deep": (0, "k", 0)}  # fmt: skip


def wrap(how: str, x: Any) -> Any:
    return {
        "bare": lambda: x,
        "tuple": lambda: (x, 7),
        "list": lambda: [x, "s", None],
        "dict": lambda: {"k": x, "n": [1, 2]},
        "namedtuple": lambda: Pair(x, "p"),
        "deep": lambda: [{"k": (x, 3)}],
    }[how]()


def unwrap(how: str, value: Any) -> Any:
    for key in PATHS[how]:
        value = value[key]
    return value


def plain(kind: str) -> Any:
    """A fresh non-array (compared by identity)."""
    return {"int": lambda: int("1000001"), "str": lambda: "".join(["te", "xt"]), "none": lambda: None,
            "numbers": lambda: [1, 2.5, -3]}[kind]()  # fmt: skip


def label(slot: int, how: str = "bare") -> str:
    """How the guard names an argument in its messages: ``a1``, ``a1[0]``, ``a1[0]['k'][0]``."""
    return f"a{slot}" + "".join(f"[{k!r}]" for k in PATHS[how])


def boxed(how: str, same: Any, new: Any) -> Any:
    if how == "tuple":
        return (same, new, 7, None)
    if how == "list":
        return [same, new, 7, None]
    if how == "dict":
        return {"same": same, "new": new, "n": 7, "s": None}
    return Quad(same, new, 7, None)


# --- the README's model ----------------------------------------------------------------------------


def holds(framework: str, name: str) -> bool:
    """Whether ``framework`` can hold ``name``, as the capability table says for the installed version
    (today: torch all but float8_e4m3b11fnuz, NumPy with ml_dtypes and JAX all but torch's packed
    float4; no 64-bit dtypes are drawn, so JAX's x64 does not matter)."""
    return name in caps_of(framework).holds


def arrives_as(framework: str, name: str, fb: str, copy: bool | None = None) -> str | None:
    """The dtype a ``name`` array has in ``framework`` under ``fallback=fb`` (None: it raises)."""
    if holds(framework, name):
        return name
    if fb == "view":
        return "uint8" if name in (B11, FP4) else None
    if fb == "upcast" and name != FP4 and copy is not False:
        return "float32"
    return None


def copy_of(x: Any) -> Any:
    """A new array with ``x``'s dtype and values, made by ``x``'s own framework."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    if type(x).__module__.startswith("numpy"):
        return x.copy()
    jnp = need("jax.numpy")
    return jnp.array(x, copy=True)


# --- reading what came back -------------------------------------------------------------------------


def host(x: Any) -> Any:
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def check_bits(x: Any, raw: bytes, upcast_from: str | None, shape: tuple[int, ...]) -> None:
    if upcast_from is None:
        assert bits_of(x) == raw, "bits changed"
    else:
        expected = np.frombuffer(raw, dtype=np_dtype(upcast_from)).reshape(shape).astype(np.float32)
        assert same_or_both_nan(host(x), expected), f"upcast values differ from {upcast_from}'s"


def same_but(value: Any, got: Any, path: tuple[Any, ...]) -> None:
    """``got`` is ``value`` rebuilt: same container types, the same objects off ``path``."""
    if not path:
        return
    assert type(got) is type(value), f"a {type(value).__name__} arrived as a {type(got).__name__}"
    keys = list(value) if isinstance(value, dict) else list(range(len(value)))
    assert (list(got) if isinstance(got, dict) else list(range(len(got)))) == keys
    for k in keys:
        if k == path[0]:
            same_but(value[k], got[k], path[1:])
        else:
            assert got[k] is value[k], f"non-array {value[k]!r} was replaced"


def walk(ret: Any, out: Any, path: tuple[Any, ...], leaf: Callable[[Any, Any, tuple[Any, ...]], None]) -> None:
    """Compare the body's return ``ret`` with what the caller got, calling ``leaf`` on arrays."""
    cls = type(ret)
    if hasattr(cls, "__dlpack__"):
        leaf(ret, out, path)
    elif cls in (tuple, list, dict) or (isinstance(ret, tuple) and hasattr(cls, "_fields")):
        assert type(out) is cls, f"{path}: a {cls.__name__} came back as a {type(out).__name__}"
        keys = list(ret) if isinstance(ret, dict) else list(range(len(ret)))
        assert (list(out) if isinstance(out, dict) else list(range(len(out)))) == keys, f"{path}: keys changed"
        for k in keys:
            walk(ret[k], out[k], (*path, k), leaf)
    else:
        assert out is ret, f"{path}: the non-array {ret!r} was replaced by {out!r}"


def result_label(path: tuple[Any, ...]) -> str:
    return str(path[0]) + "".join(f"[{k!r}]" for k in path[1:])
