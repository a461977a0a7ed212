"""What the per-framework row modules share: the row type, its kinds, and dtype sets."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .._dtypes import FLOAT8

INTS = frozenset(f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64))
CORE = INTS | {"float16", "float32", "float64", "complex64", "complex128"}
WIDE_UINTS = frozenset({"uint16", "uint32", "uint64"})
# Boundaries as far as probed (see the rows' sources): the first version seen without the behaviour.
JAX_FP4_UNTIL = "0.10"  # 0.9.0 imports it, 0.10.2 refuses it (0.10.0-0.10.1 not probed)
JAX_LAYOUTS_SINCE = "0.8"
JAX_COPY_FIXED = "0.4.35"  # 0.4.31 crashes, 0.4.35 does not (0.4.33-0.4.34 not probed)
TORCH_FP8 = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"})


# Feature flags (no dtypes): what a consumer does with capsules and layouts.
FEATURES = (
    "crashes_on_reject",  # a capsule it rejects kills the process (double free)
    "raw_capsules",  # its from_dlpack takes a bare PyCapsule
    "versioned_capsules",  # it reads "dltensor_versioned"
    "compact_only",  # it refuses strides that are not a permutation of a dense layout
    "readonly_arrays",  # it can give back a read-only array for a READ_ONLY capsule
    "negative_strides",  # it imports negative strides correctly
    "offset_needs_strides",  # it refuses a non-zero byte_offset when strides is NULL (legal DLPack)
    "row_major_only",  # it refuses or misreads every layout but dense row-major (transposed ones too)
    "raw_capsules_deprecated",  # it warns on a bare PyCapsule: dlbridge hands it a Carrier instead
    "readonly_imports",  # it makes every imported array read-only, whatever the capsule says
    "copy_crashes_unaligned",  # copying an array it imported from an unaligned buffer kills the process
    "shares_unaligned",  # it shares CPU buffers that are not 64-byte aligned (newer JAX copies them)
    "copies_unaligned",  # a CPU buffer not 64-byte aligned reaches it as a copy (its own, or dlbridge's first)
    # users can register DLPack dtypes with it at run time (NumPy's register_dlpack_dtype): the adapter's
    # capabilities() then adds the kinds registered to "imports", and it exports them itself
    "dtype_registry",
    "copies_imports",  # its from_dlpack always copies a CPU capsule (never shares it): copy=False is refused
)
# Producer rows: "exports_uint8" lists dtypes whose capsules the producer labels uint8;
# "cannot_export" dtypes it holds but cannot put in a capsule at all.
PRODUCER_KINDS = ("exports_uint8", "cannot_export")
# "ndim": the numbers of dimensions a consumer's arrays can have (the row's ``ndim``, inclusive).
KINDS = ("imports", "holds", *FEATURES, *PRODUCER_KINDS, "ndim")


class Row(NamedTuple):
    consumer: str
    what: str  # one of KINDS
    dtypes: frozenset[str]
    since: str | None  # first version with it (inclusive); None = always
    until: str | None  # first version without it (exclusive); None = still
    requires: str | None  # modules that must be installed, optionally ">=version", comma-separated (all of them)
    source: str
    ndim: tuple[int, int] | None = None  # "ndim" rows: (fewest, most) dimensions


def row(consumer: str, what: str, dtypes: Iterable[str] = (), since: str | None = None, until: str | None = None,
       requires: str | None = None, *, source: str, ndim: tuple[int, int] | None = None) -> Row:  # fmt: skip
    return Row(consumer, what, frozenset(dtypes), since, until, requires, source, ndim)


# ml_dtypes 0.5.0 added float8_e3m4, float8_e4m3 and float8_e8m0fnu (ml_dtypes CHANGELOG 0.5.0);
# the other float8 kinds and bfloat16 are in every ml_dtypes dlbridge supports (>= 0.4).
NEW_FP8 = frozenset({"float8_e3m4", "float8_e4m3", "float8_e8m0fnu"})
ML_DTYPES_05 = "ml_dtypes>=0.5"
# float4_e2m1fn is in ml_dtypes 0.5.0, its sign bit decoded right since 0.5.1 (ml_dtypes CHANGELOG 0.5.1)
ML_DTYPES_FP4 = "ml_dtypes>=0.5.1"
CUPY_BF16 = "ml_dtypes,numpy>=2.1.2"  # every one of them (comma: all of)
# dtypes only ml_dtypes gives NumPy (a CuPy array can be viewed as any of them)
ML_ONLY = FLOAT8 | {"bfloat16", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"}
