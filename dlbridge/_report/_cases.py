"""What the report probes: frameworks, devices, dtypes, and how to build a source per cell.

Everything framework-specific comes from the adapter registry: which frameworks exist, where
they make arrays, how to make one and read it back. The names and defaults here are plain
data the parent process reads without importing any framework; the functions below them run
in the worker process only. Reference arrays are plain bytes built without any framework, so
every producer is checked against the same bits and a stack without NumPy is still probed.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from .._adapters import ADAPTERS, ALL_ADAPTERS, HOST, Adapter
from .._adapters._support import findable
from .._dtypes import BY_NAME, FLOAT8, decode_table, short_name

__all__ = ["FRAMEWORKS", "CONSUMERS", "REPORTED", "DEVICES", "BASE_DTYPES", "installed_frameworks", "short_dtype", "import_order",
           "install_hint", "Ref", "reference", "upcast_bits", "make_source", "native_import", "gpu_info",
           "LAYOUTS", "LAYOUT_DTYPE", "layout_ref", "SUBBYTE_DTYPES", "fp4_codes"]  # fmt: skip

# Every framework the report probes, in the registry's order: the frameworks dlbridge converts into and
# those it only reads arrays from (producers only: rows of the matrix, never columns). A live view:
# frameworks registered later are found too.
REPORTED: Mapping[str, Adapter] = ALL_ADAPTERS
FRAMEWORKS: tuple[str, ...] = tuple(REPORTED)
CONSUMERS: tuple[str, ...] = tuple(ADAPTERS)
DEVICES = ("cpu", "cuda")
DEVICE_CODE = {"cpu": 1, "cuda": 2}
BASE_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "complex64", "uint16", "int64")
# The fp8 kinds beyond the base list that a default run adds when some producer can make them.
EXTRA_FP8 = tuple(n for n in BY_NAME if n in FLOAT8 and n not in BASE_DTYPES)
# fp4 as single values (NumPy's ml_dtypes, JAX) and as pairs (torch's float4_e2m1fn_x2): the same
# 24 values, so every form's result is checked against them (dlbridge converts between the forms).
SUBBYTE_DTYPES = ("float4_e2m1fn", "float4_e2m1fn_x2")
CANDIDATE_DTYPES = BASE_DTYPES + EXTRA_FP8 + SUBBYTE_DTYPES
_SHAPE = (4, 6)
# Layout cells: a few non-dense sources, one dtype, handed to every consumer (checks the layout and
# read-only rows of the table). "dense" is every other cell.
LAYOUTS = ("transposed", "readonly")
LAYOUT_DTYPE = "float32"

short_dtype = short_name  # column labels: float32 -> f32, float8_e4m3fn -> e4m3fn


def installed_frameworks() -> list[str]:
    """Frameworks importable here, found without importing them."""
    return [name for name in FRAMEWORKS if findable(REPORTED[name].module)]


def install_hint(names: tuple[str, ...] | list[str] = FRAMEWORKS) -> str:
    """How to install frameworks: 'pip install "dlbridge[<extra>]"' for each (its adapter's extra)."""
    return " or ".join(f'pip install "dlbridge[{REPORTED[n].extra or n}]"' for n in names)


def import_order(names: list[str]) -> list[str]:
    """``names`` in an order that imports each framework before any module its adapter says would
    make importing it crash the process (``Adapter.unsafe_after``); otherwise the given order."""
    pending, order = list(names), []
    while pending:
        for name in pending:
            # ``name`` must wait while another pending framework has to be imported before it.
            blocked = any(REPORTED[name].module.partition(".")[0] in REPORTED[other].unsafe_after
                          for other in pending if other != name)  # fmt: skip
            if not blocked:
                break
        else:  # a cycle no order can satisfy: keep the given order
            name = pending[0]
        pending.remove(name)
        order.append(name)
    return order


# --- worker side: sources and results ----------------------------------------------------------


class Ref(NamedTuple):
    """A reference array as plain bytes: built without any framework, so that every installed
    producer is probed (NumPy and ml_dtypes are not needed to make or to check a cell)."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes  # the elements' bytes, C order, native byte order


def _encode_fp(values: list[float], dtype: str) -> bytes:
    """Bytes of ``values`` (exactly representable) in a floating dtype dlbridge knows."""
    fmt = {"float16": "e", "float32": "f", "float64": "d"}.get(dtype)
    if fmt is not None:
        return struct.pack(f"={len(values)}{fmt}", *values)
    if dtype == "bfloat16":  # the top half of float32 (exact for these values)
        return b"".join(struct.pack("=H", struct.unpack("=I", struct.pack("=f", v))[0] >> 16) for v in values)
    table = decode_table(dtype)
    if table is None:
        raise TypeError(f"the report has no reference values for {dtype}")
    code: dict[float, int] = {}
    for byte, value in enumerate(table):  # ascending: +0.0 wins over -0.0
        code.setdefault(value, byte)
    return bytes(code[v] for v in values)


def reference(dtype: str) -> Ref:
    """Known, finite, mostly distinct values of ``dtype`` (small halves and integers are exact in
    every float format here, fp8 included), shaped 4x6."""
    n = _SHAPE[0] * _SHAPE[1]
    k = range(n)
    d = BY_NAME[dtype]
    if dtype == "bool":
        return Ref(dtype, _SHAPE, bytes(int((i * 7) % 3 == 0) for i in k))
    if dtype in SUBBYTE_DTYPES:  # every fp4 code (value 2i in the low nibble of a pair)
        fp4 = [(i * 5) % 16 for i in k]
        if dtype == "float4_e2m1fn":
            return Ref(dtype, _SHAPE, bytes(fp4))
        packed = bytes(lo | hi << 4 for lo, hi in zip(fp4[0::2], fp4[1::2]))
        return Ref(dtype, (_SHAPE[0], _SHAPE[1] // 2), packed)
    if d.code in (0, 1):  # ints: two's complement of the value, wrapped to the width
        size = d.bits // 8
        return Ref(dtype, _SHAPE, b"".join((((i * 2654435761) % 30011) % (1 << d.bits)).to_bytes(size, sys.byteorder) for i in k))  # fmt: skip
    halves = [((i * 5) % 17 - 8) / 2 for i in k]
    if dtype.startswith("complex"):
        part = "float32" if d.bits == 64 else "float64"
        pairs = [x for re, im in zip(halves, reversed(halves)) for x in (re, im)]
        return Ref(dtype, _SHAPE, _encode_fp(pairs, part))
    if dtype == "float8_e8m0fnu":  # only positive powers of two
        return Ref(dtype, _SHAPE, _encode_fp([2.0 ** (i % 9 - 4) for i in k], dtype))
    if dtype.endswith("fnuz"):  # fnuz formats have no -0.0
        halves = [1.0 if v == 0 else v for v in halves]
    return Ref(dtype, _SHAPE, _encode_fp(halves, dtype))


def fp4_codes(dtype: str, shape: tuple[int, ...], data: bytes) -> tuple[tuple[int, ...], bytes]:
    """fp4 data of either form (one value a byte, or pairs) as (values' shape, one code a byte)."""
    if dtype == "float4_e2m1fn_x2":
        codes = bytes(c for b in data for c in (b & 0x0F, b >> 4))
        return (*shape[:-1], shape[-1] * 2) if shape else (2,), codes
    return tuple(shape), bytes(b & 0x0F for b in data)


def upcast_bits(ref: Ref) -> bytes:
    """What fallback="upcast" must give for ``ref``: float32 bytes of the same values."""
    if ref.dtype == "bfloat16":
        halves = struct.unpack(f"={len(ref.data) // 2}H", ref.data)
        return struct.pack(f"={len(halves)}I", *(h << 16 for h in halves))
    table = decode_table(ref.dtype)
    if table is None:
        raise TypeError(f"no upcast for {ref.dtype}")
    return struct.pack(f"={len(ref.data)}f", *(table[b] for b in ref.data))


def layout_ref(ref: Ref, layout: str) -> Ref:
    """What a source of ``layout`` made from ``ref`` holds: the transpose's values in C order."""
    if layout != "transposed":
        return ref
    rows, cols = ref.shape
    size = len(ref.data) // (rows * cols)
    items = [ref.data[k * size : (k + 1) * size] for k in range(rows * cols)]
    return Ref(ref.dtype, (cols, rows), b"".join(items[i * cols + j] for j in range(cols) for i in range(rows)))


def make_source(framework: str, device: str, ref: Ref, layout: str = "dense") -> Any:
    """The source array for one cell; raises (any exception) when the framework cannot make it.
    ``layout`` "transposed" or "readonly": a view of the dense source made by the adapter."""
    adapter = REPORTED[framework]
    src = adapter.prober.make_from_bits(ref.data, ref.dtype, ref.shape, device)
    if src is None:  # the framework builds its arrays from the host framework's (NumPy's)
        host = HOST.mod.frombuffer(ref.data, dtype="u1").view(HOST.prober.dtype_for(ref.dtype)).reshape(ref.shape)
        src = adapter.prober.make_array(host, device)
    if layout == "dense":
        return src
    view = adapter.prober.transpose(src) if layout == "transposed" else adapter.prober.make_readonly(src)
    if view is None:
        raise TypeError(f"{adapter.display} has no {layout} arrays")
    return view


def native_import(consumer: str, src: Any) -> Any:
    """The consumer's own ``from_dlpack`` on the producer's array."""
    return ADAPTERS[consumer].from_dlpack()(src)


def cuda_producers(frameworks: list[str]) -> list[str]:
    """Which of ``frameworks`` see a CUDA device here (imports them: worker only)."""
    return [name for name in frameworks if REPORTED[name].has_cuda()]


def gpu_info(frameworks: list[str]) -> str | None:
    """The GPU's name as the first framework that can tell reports it (worker only)."""
    for name in frameworks:
        try:
            found = REPORTED[name].prober.gpu_name()
        except Exception:
            continue
        if found:
            return found
    return None
