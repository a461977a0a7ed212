"""Stateful property: only a view dlbridge made ever comes back relabelled, always with its own dtype.

A hypothesis state machine keeps a small pool of live arrays (torch, JAX, NumPy + ml_dtypes) and
grows, shrinks and changes it the way user code does: sources with dtypes some framework cannot
hold, ``fallback="view"`` views of them (zero-copy, or copied by ``copy=True`` or by JAX on a
misaligned buffer), the caller's own plain unsigned arrays over the same bytes, slices and copies,
torch ``set_`` and NumPy ``x.shape =`` in place, frees followed by fresh arrays that may reuse the
address (or the ``id``) of what was freed, and raw capsules. After every step each live array is
converted to every framework: the dtype the result stands for (its own, or the logical dtype
dlbridge remembers for it) must be the dtype the model says the data has, with the same bits and,
where the target can share it, the same memory. ``fallback="raise"`` must give that dtype or
raise ``UnsupportedDtypeError``, never another dtype.

No layout here is one torch mis-handles (no negative strides, no crash-prone capsules), so the
machine runs in this process. 60 runs keep CI short; DLBRIDGE_HYPOTHESIS_EXAMPLES=1000 runs deep.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Any

import pytest

import dlbridge
from dlbridge._pipeline import _logical as _logical
from tests._arrays import jax_cpu, np_dtype, set_in_place
from tests.conftest import need, option_model_gap

np = need("numpy")
torch = need("torch")
jax = need("jax")
jnp = need("jax.numpy")
need("ml_dtypes")
# The machine makes read-only NumPy capsules (NumPy >= 2.1), float8 JAX exports (JAX >= 0.5.3) and
# float8_e3m4 arrays (ml_dtypes >= 0.5); older stacks are covered by the table-driven tests.
_GAP = option_model_gap() or (
    None if hasattr(need("ml_dtypes"), "float8_e3m4") else "float8_e3m4 needs ml_dtypes >= 0.5"
)
pytestmark = pytest.mark.skipif(_GAP is not None, reason=_GAP or "")
hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed")
stateful = pytest.importorskip("hypothesis.stateful")
st = hypothesis.strategies

FP4 = "float4_e2m1fn_x2"
HAS_FP4 = hasattr(torch, FP4)
# (framework, dtype) sources: torch cannot hold the first two, NumPy and JAX cannot hold torch's fp4.
SOURCES = [
    ("numpy", "float8_e4m3b11fnuz"), ("jax", "float8_e4m3b11fnuz"), ("numpy", "float8_e3m4"),
    ("jax", "float8_e3m4"), ("numpy", "bfloat16"), ("torch", "bfloat16"), ("torch", "float8_e4m3fn"),
    ("numpy", "uint8"), ("torch", "uint8"), ("jax", "uint16"),
    *([("torch", FP4)] * 3 if HAS_FP4 else []),
]  # fmt: skip
FRAMEWORKS = ("torch", "jax", "numpy")
UINT = {8: "uint8", 16: "uint16"}
WIDTH = {"bfloat16": 16, "uint16": 16}  # every other dtype here is 8 bits wide
MAX_POOL = 4

SETTINGS = hypothesis.settings(
    max_examples=int(os.environ.get("DLBRIDGE_HYPOTHESIS_EXAMPLES", "60")),
    stateful_step_count=10,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.filter_too_much],
)


@dataclass(eq=False)
class Held:
    obj: Any
    truth: str  # the dtype the data has: a view's logical dtype, else the array's own
    view: bool  # a fallback="view" result dlbridge returned (the only kind that is relabelled)
    note: str  # how it was made, for failure messages


def framework(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return "torch"
    if isinstance(x, np.ndarray):
        return "numpy"
    return "jax"


def own_dtype(x: Any) -> str:
    return str(x.dtype).removeprefix("torch.") if isinstance(x, torch.Tensor) else x.dtype.name


def raw_bytes(x: Any) -> bytes:
    if isinstance(x, torch.Tensor):
        return x.contiguous().view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(np.asarray(x)).tobytes()


def data_ptr(x: Any) -> int:
    return dlbridge.inspect(x).data_ptr


def memory(x: Any) -> tuple[int, tuple[int, ...], tuple[int, ...] | None]:
    info = dlbridge.inspect(x)
    return info.data_ptr, info.shape, info.strides


def stands_for(r: Any) -> str:
    """The dtype a conversion's result stands for: its own, or the one dlbridge remembers for it."""
    info = dlbridge.inspect(r)
    remembered = _logical.recall(r, info) if info.code == 1 else None
    return remembered or own_dtype(r)


def make(fw: str, dtype: str, n: int, seed: int, offset: int) -> Any:
    width = WIDTH.get(dtype, 8)
    raw = np.random.default_rng(seed).integers(0, 256, (n + offset) * width // 8, dtype=np.uint8)
    if fw == "torch":
        base = torch.from_numpy(raw.copy())
        if dtype == "uint8":
            return base[offset:]
        return base.view(getattr(torch, dtype))[offset:]
    arr = raw.view(np_dtype(dtype))[offset:]
    return arr if fw == "numpy" else jax_cpu(arr)


class ViewOwnership(stateful.RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pool: list[Held] = []
        self.keep: list[Any] = []  # storages an in-place set_ would otherwise free under importers

    def add(self, held: Held) -> None:
        self.pool.append(held)
        if len(self.pool) > MAX_POOL:
            del self.pool[0]

    def pick(self, i: int) -> Held:
        return self.pool[i % len(self.pool)]

    # --- rules ---------------------------------------------------------------------------------
    @stateful.rule(
        source=st.sampled_from(SOURCES),
        n=st.sampled_from([1, 8, 64, 65]),
        seed=st.integers(0, 2**16),
        offset=st.sampled_from([0, 0, 1]),
    )
    def source(self, source: tuple[str, str], n: int, seed: int, offset: int) -> None:
        fw, dtype = source
        x = make(fw, dtype, n, seed, offset)
        self.add(Held(x, own_dtype(x), False, f"{fw} {dtype}[{n}] offset {offset}"))

    @stateful.precondition(lambda self: self.pool)
    @stateful.rule(i=st.integers(0, 99), to=st.sampled_from(FRAMEWORKS), copy=st.sampled_from([None, None, True]))
    def view(self, i: int, to: str, copy: bool | None) -> None:
        h = self.pick(i)
        r, copied = convert(h.obj, to, "view", copy)
        got = own_dtype(r)
        assert raw_bytes(r) == raw_bytes(h.obj), h.note
        if copy:
            assert data_ptr(r) != data_ptr(h.obj) or dlbridge.inspect(r).size == 0, h.note
        made = got != h.truth  # a same-width unsigned view of data the target cannot hold
        if made:
            assert got == UINT[WIDTH.get(h.truth, 8)], f"{h.note} -> {to}: {got}"
        self.add(Held(r, h.truth, made, f"view of ({h.note}) in {to}, copy={copy or copied}"))

    @stateful.precondition(lambda self: self.pool)
    @stateful.rule(i=st.integers(0, 99))
    def plain_alias(self, i: int) -> None:
        """The caller's own unsigned array over the same bytes (JAX: a bitcast, which may copy)."""
        h = self.pick(i)
        x, uint = h.obj, UINT[WIDTH.get(own_dtype(h.obj), 8)]
        if isinstance(x, torch.Tensor):
            alias = x.view(getattr(torch, uint))
        elif isinstance(x, np.ndarray):
            alias = x.view(np.dtype(uint))
        else:
            alias = jax.lax.bitcast_convert_type(x, jnp.dtype(uint))
        self.add(Held(alias, uint, False, f"plain {uint} alias of ({h.note})"))

    @stateful.precondition(lambda self: self.pool)
    @stateful.rule(i=st.integers(0, 99), how=st.sampled_from(["slice", "copy", "whole"]))
    def derived(self, i: int, how: str) -> None:
        """A slice, a copy or a whole-array view of a held array: plain, whatever it came from."""
        x = self.pick(i).obj
        if how == "slice":
            d = x[1:]
        elif how == "whole":
            d = x[:]
        elif isinstance(x, torch.Tensor):
            d = x.clone()
        elif isinstance(x, np.ndarray):
            d = x.copy()
        else:
            d = jnp.array(x, copy=True)
        if d is x:  # JAX's x[:] is x itself: the same object, view or not
            return
        self.add(Held(d, own_dtype(d), False, f"{how} of ({self.pick(i).note})"))

    @stateful.precondition(lambda self: any(framework(h.obj) != "jax" for h in self.pool))
    @stateful.rule(i=st.integers(0, 99), j=st.integers(0, 99))
    def change_in_place(self, i: int, j: int) -> None:
        """torch ``set_`` onto other memory (another held tensor's if the dtype fits), NumPy ``shape=``."""
        mutable = [h for h in self.pool if framework(h.obj) != "jax"]
        h = mutable[i % len(mutable)]
        x = h.obj
        before = memory(x)
        if isinstance(x, torch.Tensor):
            same = [o.obj for o in self.pool if isinstance(o.obj, torch.Tensor) and o.obj.dtype == x.dtype]
            other = same[j % len(same)]
            if other is x:
                other = torch.full((4 * x.element_size(),), 0x41, dtype=torch.uint8, device="cpu").view(x.dtype)
            # Arrays imported from x hold x's TensorImpl, not its storage: without this, set_ frees
            # memory they still use (torch 2.13, native torch.from_dlpack alike).
            self.keep.append(x.detach())
            x.set_(other)
        else:
            if not x.flags.c_contiguous or x.size % 2:
                return
            set_in_place(x, shape=(2, x.size // 2))
        if memory(x) != before:  # a view whose memory is unchanged (set_ onto an alias) stays one
            self.pool.remove(h)
            self.add(Held(x, own_dtype(x), False, f"({h.note}) changed in place"))

    @stateful.precondition(lambda self: self.pool)
    @stateful.rule(i=st.integers(0, 99), collect=st.booleans(), n=st.sampled_from([8, 64, 65]))
    def free_and_reuse(self, i: int, collect: bool, n: int) -> None:
        """Drop a held array, then make fresh plain arrays that may land at its address or id."""
        del self.pool[i % len(self.pool)]
        if collect:
            gc.collect(0)  # the youngest generation only: a full collection costs ~0.5 s here
        self.add(Held(np.full(n, 0x41, np.uint8), "uint8", False, f"fresh numpy uint8[{n}]"))
        self.add(
            Held(torch.full((n,), 0x41, dtype=torch.uint8, device="cpu"), "uint8", False, f"fresh torch uint8[{n}]")
        )

    @stateful.precondition(lambda self: any(framework(h.obj) != "jax" for h in self.pool))
    @stateful.rule(i=st.integers(0, 99), to=st.sampled_from(FRAMEWORKS))
    def raw_capsule(self, i: int, to: str) -> None:
        """A raw capsule names no object: it never carries a remembered dtype."""
        held = [h for h in self.pool if framework(h.obj) != "jax"]
        x = held[i % len(held)].obj
        if own_dtype(x) not in ("uint8", "uint16"):
            return
        try:
            r = dlbridge.convert(x.__dlpack__(), to, copy=None)
        except dlbridge.ReadOnlyError:  # a read-only NumPy view of a JAX array, into torch
            return
        assert stands_for(r) == own_dtype(x), f"raw capsule of {own_dtype(x)} -> {to}: {stands_for(r)}"
        assert raw_bytes(r) == raw_bytes(x)
        if to != "jax" and dlbridge.inspect(r).size:  # JAX copies misaligned buffers
            assert data_ptr(r) == data_ptr(x)

    # --- the invariant -------------------------------------------------------------------------
    @stateful.invariant()
    def only_views_come_back_relabelled(self) -> None:
        for h in self.pool:
            expected_bits = raw_bytes(h.obj)
            for to in FRAMEWORKS:
                r, copied = convert(h.obj, to, "view", None)
                where = f"{h.note} -> {to}"
                assert stands_for(r) == h.truth, f"{where}: stands for {stands_for(r)}, the data is {h.truth}"
                assert raw_bytes(r) == expected_bits, where
                if to != "jax" and not copied and dlbridge.inspect(r).size:  # torch, NumPy share all here
                    assert data_ptr(r) == data_ptr(h.obj), where
                try:
                    strict, _ = convert(h.obj, to, "raise", None)
                except dlbridge.UnsupportedDtypeError:
                    assert own_dtype(r) != h.truth, f"{where}: fallback='raise' refused a dtype {to} holds"
                    assert not h.view, f"{where}: fallback='raise' refused a view that remembers {h.truth}"
                else:
                    if h.truth == "float4_e2m1fn_x2" and not h.view and own_dtype(strict) == "float4_e2m1fn":
                        # torch's fp4 pairs, repacked as the target's own fp4 (one value a byte): the same values
                        codes = bytes(c for b in expected_bits for c in (b & 0x0F, b >> 4))
                        assert raw_bytes(strict) == codes, f"{where}: fallback='raise' repacked other values"
                        del strict, r
                        continue
                    # A remembered view already carries the caller's choice of a view: where the
                    # target cannot hold its dtype, fallback="raise" gives another view, as "view" does.
                    assert stands_for(strict) == h.truth, f"{where}: fallback='raise' gave {stands_for(strict)}"
                    assert own_dtype(strict) == own_dtype(r), f"{where}: fallback='raise' gave {own_dtype(strict)}"
                    del strict
                del r


def convert(x: Any, to: str, fallback: str, copy: bool | None) -> tuple[Any, bool]:
    """``dlbridge.convert``; read-only NumPy views of JAX arrays need copy=True into torch."""
    try:
        return dlbridge.convert(x, to, fallback=fallback, copy=copy), False
    except dlbridge.ReadOnlyError:
        assert copy is not True
        return dlbridge.convert(x, to, fallback=fallback, copy=True), True


ViewOwnership.TestCase.settings = SETTINGS
test_property_only_views_come_back_relabelled = ViewOwnership.TestCase
