"""Sources and result readers for test_robustness_options.py: a printable ``Spec`` built into a
``Source`` (arrays of every kind the option-space properties use), and framework-neutral reads
of a result (bytes, dtype, framework, device, writability)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any

import dlbridge
from tests._arrays import jax_cpu, np_dtype, torch_from
from tests._capsule_cases import expected_bytes
from tests._robust_helpers import np, torch
from tests.conftest import caps_of, need
from tests.ctypes_producer import FLAG_READ_ONLY, CtypesArray

jax = need("jax")
jnp = need("jax.numpy")
hypothesis = need("hypothesis")
st = hypothesis.strategies

B11 = "float8_e4m3b11fnuz"  # JAX and ml_dtypes hold it, torch cannot: the fallback cases
DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "complex64", "uint16",
          "int8", "uint8", B11)  # fmt: skip
CPU_DEVICES = (None, "cpu", (1, 0))


# --- reading results ------------------------------------------------------------------------------


def bits_of(x: Any) -> bytes:
    """C-order bytes of any CPU array (torch, JAX, NumPy), bf16/fp8 included."""
    if isinstance(x, torch.Tensor):  # a fresh dense copy: contiguous() keeps odd strides of size-1 dims
        return (
            torch.empty(x.shape, dtype=x.dtype, device="cpu").copy_(x).reshape(-1).view(torch.uint8).numpy().tobytes()
        )
    return np.ascontiguousarray(np.asarray(x)).tobytes()


def dtype_of(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return str(x.dtype).removeprefix("torch.")
    return str(np.dtype(x.dtype).name)


def framework_of(x: Any) -> str | None:
    if isinstance(x, torch.Tensor):
        return "torch"
    if isinstance(x, jax.Array):
        return "jax"
    if isinstance(x, np.ndarray):
        return "numpy"
    return None


def on_cpu(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return x.device.type == "cpu"
    if isinstance(x, jax.Array):
        return all(d.platform == "cpu" for d in x.devices())
    return True


def writable(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return True  # torch has no read-only tensors
    if isinstance(x, np.ndarray):
        return bool(x.flags.writeable)
    return False  # jax.Array is immutable


def scribble(x: Any) -> None:
    """Overwrite every byte ``x`` spans (a result the caller owns) with 0x5A."""
    if isinstance(x, torch.Tensor):
        size = x.element_size()
        low, nbytes = x.data_ptr(), size + size * sum((d - 1) * s for d, s in zip(x.shape, x.stride()))
    else:
        low, high = np.lib.array_utils.byte_bounds(x)
        nbytes = high - low
    ctypes.memset(low, 0x5A, nbytes)


def same_or_both_nan(got: Any, expected: Any) -> bool:
    got, expected = np.asarray(got, dtype=np.float32), np.asarray(expected, dtype=np.float32)
    same = got.view(np.uint32) == expected.view(np.uint32)
    return bool(np.all(same | (np.isnan(got) & np.isnan(expected))))


# --- sources: a printable Spec, built into a Source inside the test ------------------------------


@dataclass(frozen=True)
class Spec:
    """A source to build. ``kind``: numpy, torch, jax, ctypes, or view (a uint8 torch view made by
    ``fallback="view"`` of ``base``, which holds float8_e4m3b11fnuz)."""

    kind: str
    dtype: str = B11
    layout: str = "contiguous"  # contiguous, transposed, sliced, negative
    rows: int = 2
    cols: int = 3
    flip: int = 0  # negative: 0 both axes, 1 columns only, 2 rows only
    seed: int = 0
    readonly: bool = False  # numpy and ctypes (JAX sources are read-only always)
    lead: int = 0  # ctypes: elements before the first one (a byte_offset off JAX's 64-byte alignment)
    null_strides: bool = False  # ctypes, contiguous: NULL strides (C order, legal before DLPack 1.2)
    device: tuple[int, int] = (1, 0)  # ctypes: (3, 0) is pinned host memory
    base: Spec | None = None  # view


@dataclass(eq=False)
class Source:
    spec: Spec
    obj: Any
    logical: str  # the dtype the data has (a view's remembered one)
    raw: bytes  # its logical C-order bytes
    shape: tuple[int, ...]
    ptr: int  # address of the first element
    read: Callable[[], bytes]  # the bytes it holds now
    readonly: bool = False
    negative: bool = False  # a negative stride over a dimension longer than 1
    producer: CtypesArray | None = None
    keep: list[Any] = field(default_factory=list)  # what a view's memory belongs to


def numpy_layout(spec: Spec) -> tuple[Any, Any]:
    """(a fresh C-contiguous array of random bits, the view of it ``spec.layout`` names)."""
    dt, rows, cols = np_dtype(spec.dtype), spec.rows, spec.cols
    full_shape = {"contiguous": (rows, cols), "transposed": (cols, rows), "sliced": (rows + 1, cols + 2),
                  "negative": (rows, cols)}[spec.layout]  # fmt: skip
    rng = np.random.default_rng(spec.seed)
    raw = rng.integers(0, 2 if spec.dtype == "bool" else 256, prod(full_shape) * dt.itemsize)
    full = raw.astype(np.uint8).view(dt).reshape(full_shape)
    if spec.layout == "transposed":
        return full, full.T
    if spec.layout == "sliced":
        return full, full[1:, 2:]
    if spec.layout == "negative":
        row_step, col_step = (1 if spec.flip == 1 else -1), (1 if spec.flip == 2 else -1)
        return full, full[::row_step, ::col_step]
    return full, full


def address(a: Any) -> int:
    return int(a.__array_interface__["data"][0])


def build(spec: Spec) -> Source:
    if spec.kind == "jax" and spec.dtype in caps_of("jax").cannot_export:
        spec = replace(spec, kind="numpy")  # JAX < 0.5.3 cannot export float8: the same bits from NumPy
    if spec.kind == "view":
        assert spec.base is not None and spec.base.dtype == B11
        base = build(spec.base)
        v = dlbridge.to_torch(base.obj, fallback="view", copy=True if base.readonly else None)
        assert v.dtype == torch.uint8 and bits_of(v) == base.raw, spec
        return Source(spec, v, B11, base.raw, tuple(v.shape), v.data_ptr(), lambda: bits_of(v),
                      producer=base.producer, keep=[base])  # fmt: skip
    full, view = numpy_layout(spec)
    raw, shape, name = np.ascontiguousarray(view).tobytes(), tuple(view.shape), spec.dtype
    negative = any(s < 0 and d > 1 for s, d in zip(view.strides, view.shape))
    if spec.kind == "numpy":
        view.flags.writeable = not spec.readonly
        return Source(spec, view, name, raw, shape, address(view), lambda: np.ascontiguousarray(view).tobytes(),
                      readonly=spec.readonly, negative=negative)  # fmt: skip
    if spec.kind == "torch":
        t = torch_from(full)
        t = {"contiguous": t, "transposed": t.T, "sliced": t[1:, 2:]}[spec.layout]
        return Source(spec, t, name, raw, shape, t.data_ptr(), lambda: bits_of(t))
    if spec.kind == "jax":  # JAX arrays are dense: its "layouts" are fresh arrays; read-only (immutable), always
        j = jax_cpu(np.ascontiguousarray(view))
        return Source(spec, j, name, raw, shape, j.unsafe_buffer_pointer(), lambda: bits_of(j), readonly=True)
    assert spec.kind == "ctypes", spec
    itemsize = view.dtype.itemsize
    strides = None if spec.null_strides else tuple(s // itemsize for s in view.strides)
    offset = spec.lead * itemsize + address(view) - address(full)
    p = CtypesArray.from_bytes(bytes(spec.lead * itemsize) + full.tobytes(), "uint8" if name == B11 else name,
                               shape, strides, offset)  # fmt: skip
    p.with_(device=spec.device, flags=FLAG_READ_ONLY if spec.readonly else 0)
    if name == B11:
        p.with_(code=9)  # kDLFloat8_e4m3b11fnuz
    assert expected_bytes(p) == raw
    return Source(spec, p, name, raw, shape, p.data_ptr, lambda: expected_bytes(p), readonly=spec.readonly,
                  negative=negative, producer=p)  # fmt: skip


@st.composite
def specs(draw: Any, kinds: tuple[str, ...] = ("numpy", "numpy", "torch", "jax", "ctypes", "ctypes", "view"),
          dtypes: tuple[str, ...] = DTYPES, null_strides: bool = True) -> Spec:  # fmt: skip
    kind = draw(st.sampled_from(kinds))
    if kind == "view":  # (explicit strides: torch refuses NULL strides with a byte_offset, see KNOWN_CALLS)
        return Spec("view", base=draw(specs(kinds=("numpy", "jax", "ctypes"), dtypes=(B11,), null_strides=False)))
    name = draw(st.sampled_from([d for d in dtypes if not (kind == "torch" and d == B11)]))
    layouts = {"torch": ["contiguous", "transposed", "sliced"], "jax": ["contiguous"]}.get(
        kind, ["contiguous", "transposed", "sliced", "negative"]
    )
    layout = draw(st.sampled_from(layouts))
    spec = Spec(kind, name, layout, draw(st.integers(1, 4)), draw(st.integers(1, 5)), draw(st.integers(0, 2)),
                draw(st.integers(0, 2**32 - 1)))  # fmt: skip
    if kind == "numpy":
        return replace(spec, readonly=draw(st.booleans()))
    if kind == "ctypes":
        return replace(spec, readonly=draw(st.booleans()), lead=draw(st.integers(0, 3)),
                       null_strides=layout == "contiguous" and null_strides and draw(st.booleans()),
                       device=draw(st.sampled_from([(1, 0), (3, 0)])))  # fmt: skip
    return spec
