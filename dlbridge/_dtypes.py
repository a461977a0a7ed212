"""DLPack dtype codes and the names dlbridge uses for them.

A dtype is named by a string ("bfloat16", "float8_e4m3fn", ...) so that no framework has to
be imported to talk about it. ``(code, bits, lanes)`` is what a capsule carries.
"""

from __future__ import annotations

import math
from functools import cache
from typing import NamedTuple

__all__ = ["DType", "BY_NAME", "ALIASES", "dtype_name", "canonical", "short_name", "lookup", "unsigned_of_width",
           "decode_table"]  # fmt: skip


class DType(NamedTuple):
    code: int
    bits: int
    lanes: int = 1

    @property
    def width(self) -> int:
        """Bits one element occupies (all lanes)."""
        return self.bits * self.lanes


# DLDataTypeCode (dlpack.h).  Codes 7-17 since DLPack 1.1.
_CODE_PREFIX = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}

BY_NAME: dict[str, DType] = {
    **{f"int{b}": DType(0, b) for b in (8, 16, 32, 64)},
    **{f"uint{b}": DType(1, b) for b in (8, 16, 32, 64)},
    "float16": DType(2, 16),
    "float32": DType(2, 32),
    "float64": DType(2, 64),
    "bfloat16": DType(4, 16),
    "complex64": DType(5, 64),
    "complex128": DType(5, 128),
    "bool": DType(6, 8),
    "float8_e3m4": DType(7, 8),
    "float8_e4m3": DType(8, 8),
    "float8_e4m3b11fnuz": DType(9, 8),
    "float8_e4m3fn": DType(10, 8),
    "float8_e4m3fnuz": DType(11, 8),
    "float8_e5m2": DType(12, 8),
    "float8_e5m2fnuz": DType(13, 8),
    "float8_e8m0fnu": DType(14, 8),
    "float6_e2m3fn": DType(15, 6),
    "float6_e3m2fn": DType(16, 6),
    "float4_e2m1fn": DType(17, 4),
    # A packed pair of fp4 values as some producers export it: code 17, bits 4, lanes 2 (non-standard but real).
    "float4_e2m1fn_x2": DType(17, 4, 2),
}
# (code, bits, lanes) -> name; a DType hashes and compares as its plain tuple.
BY_TRIPLE: dict[tuple[int, int, int], str] = {(v.code, v.bits, v.lanes): k for k, v in BY_NAME.items()}

FLOAT8 = frozenset(n for n in BY_NAME if n.startswith("float8_"))


def dtype_name(code: int, bits: int, lanes: int = 1) -> str:
    """Name of a DLPack dtype; unknown combinations get a descriptive name, never an error."""
    name = BY_TRIPLE.get((code, bits, lanes))
    if name is not None:
        return name
    base = BY_TRIPLE.get(DType(code, bits, 1))
    if base is not None:
        return f"{base}x{lanes}"
    prefix = _CODE_PREFIX.get(code)
    if prefix is not None and lanes == 1:
        return f"{prefix}{bits}"
    return f"dlpack(code={code}, bits={bits}, lanes={lanes})"


def short_name(name: str) -> str:
    """The short form of a dtype name: float32 -> f32, float8_e4m3fn -> e4m3fn, complex64 -> c64."""
    if name.startswith("float8_"):
        return name.removeprefix("float8_")
    for long, short in (("bfloat", "bf"), ("float", "f"), ("complex", "c"), ("uint", "u"), ("int", "i")):
        if name.startswith(long):
            return short + name.removeprefix(long)
    return name


# Short names (the report's column labels), accepted wherever a dtype is named.
ALIASES: dict[str, str] = {short_name(n): n for n in BY_NAME if short_name(n) != n}


def canonical(name: str) -> str | None:
    """dlbridge's name for a dtype name or alias ("bf16" -> "bfloat16"), or None."""
    if name in BY_NAME:
        return name
    return ALIASES.get(name)


def lookup(name: object) -> DType | None:
    """The DType for a name or alias ("bf16"), or a framework's dtype object; None if unknown."""
    if isinstance(name, str):
        text = name
    else:
        # Most dtype objects have ``.name``; others print as "module.name" or are classes.
        attr = getattr(name, "name", None)
        text = attr if isinstance(attr, str) else (getattr(name, "__name__", None) or str(name))
    found = BY_NAME.get(text)
    if found is None:
        full = canonical(text.rpartition(".")[2])  # "module.bfloat16", "bf16"
        found = BY_NAME.get(full) if full is not None else None
    if found is None and not isinstance(name, str) and text != str(name):
        return lookup(str(name))  # a ``.name`` in another spelling ("BFLOAT16"): its printed form
    return found


def unsigned_of_width(width: int) -> str | None:
    """The unsigned integer dtype of the same width (the "view" fallback), if one exists."""
    return f"uint{width}" if width in (8, 16, 32, 64) else None


# --- decoding tables for fallback="upcast" -----------------------------------------------
# (exponent bits, mantissa bits, bias, style): "ieee" has inf and NaNs like IEEE 754;
# "fn" has no inf and one NaN per sign (all bits set); "fnuz" has no inf, no -0, and
# 0x80 is the single NaN; "e8m0" is an unsigned power of two with 0xFF as NaN.
_FORMATS = {
    "float8_e3m4": (3, 4, 3, "ieee"),
    "float8_e4m3": (4, 3, 7, "ieee"),
    "float8_e4m3b11fnuz": (4, 3, 11, "fnuz"),
    "float8_e4m3fn": (4, 3, 7, "fn"),
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),
    "float8_e5m2": (5, 2, 15, "ieee"),
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
    "float8_e8m0fnu": (8, 0, 127, "e8m0"),
}


def _decode(byte: int, ebits: int, mbits: int, bias: int, style: str) -> float:
    if style == "e8m0":
        return math.nan if byte == 0xFF else math.ldexp(1.0, byte - bias)
    if style == "fnuz" and byte == 0x80:
        return math.nan
    sign = -1.0 if byte >> (ebits + mbits) & 1 else 1.0
    exp = (byte >> mbits) & ((1 << ebits) - 1)
    man = byte & ((1 << mbits) - 1)
    top = (1 << ebits) - 1
    if style == "ieee" and exp == top:
        return sign * math.inf if man == 0 else math.nan
    if style == "fn" and exp == top and man == (1 << mbits) - 1:
        return math.nan
    if exp == 0:
        return sign * math.ldexp(man, 1 - bias - mbits)
    return sign * math.ldexp((1 << mbits) + man, exp - bias - mbits)


@cache
def decode_table(name: str) -> tuple[float, ...] | None:
    """The 256 float values of an 8-bit float format, indexed by its bit pattern."""
    fmt = _FORMATS.get(name)
    if fmt is None:
        return None
    return tuple(_decode(b, *fmt) for b in range(256))
