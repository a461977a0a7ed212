"""What each consumer accepts, by version: one table, one source per row.

The conversion logic only *reads* this table (through :func:`capabilities`); ``dlbridge
report`` checks it against what the installed frameworks really do and lists disagreements.

Sources: "FACTS §N" is ../shared/DLPACK_FACTS.md of this project (itself citing upstream
code, release notes and runs); "probe YYYY-MM-DD" is a run of ``dlbridge report`` or of the
test suite on the versions named.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import NamedTuple

from ._dtypes import BY_NAME, FLOAT8

__all__ = ["Row", "TABLE", "Capabilities", "capabilities", "parse_version", "FEATURES"]

_INTS = frozenset(f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64))
_CORE = _INTS | {"float16", "float32", "float64", "complex64", "complex128"}
_WIDE_UINTS = frozenset({"uint16", "uint32", "uint64"})
_TORCH_FP8 = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"})

# Feature flags (no dtypes): what a consumer does with capsules and layouts.
FEATURES = (
    "crashes_on_reject",  # a capsule it rejects kills the process (double free)
    "raw_capsules",  # its from_dlpack takes a bare PyCapsule
    "versioned_capsules",  # it reads "dltensor_versioned"
    "compact_only",  # it refuses strides that are not a permutation of a dense layout
    "c_order_only",  # it refuses every layout but dense row-major (C order)
    "readonly_arrays",  # it can give back a read-only array for a READ_ONLY capsule
    "negative_strides",  # it imports negative strides correctly
    "offset_needs_strides",  # it refuses a non-zero byte_offset when strides is NULL (legal DLPack)
)


class Row(NamedTuple):
    consumer: str
    what: str  # "imports", "holds" or one of FEATURES
    dtypes: frozenset[str]
    since: str | None  # first version with it (inclusive); None = always
    until: str | None  # first version without it (exclusive); None = still
    requires: str | None  # a module that must be importable (e.g. ml_dtypes)
    source: str


def _r(consumer: str, what: str, dtypes: Iterable[str] = (), since: str | None = None, until: str | None = None,
       requires: str | None = None, *, source: str) -> Row:  # fmt: skip
    return Row(consumer, what, frozenset(dtypes), since, until, requires, source)


TABLE: tuple[Row, ...] = (
    # --- torch -------------------------------------------------------------------------
    _r(
        "torch",
        "imports",
        _CORE - _WIDE_UINTS | {"bfloat16"},
        "1.10",
        source="torch 1.10 notes: torch.from_dlpack; bf16 since 1.9 (FACTS §3)",
    ),
    _r("torch", "imports", {"bool"}, "2.2", source="FACTS §3: bool since torch 2.2"),
    _r("torch", "imports", _WIDE_UINTS, "2.3", source="FACTS §3 [inferred]: uint16/32/64 since 2.3"),
    _r(
        "torch",
        "imports",
        _TORCH_FP8 | {"float4_e2m1fn_x2"},
        "2.10",
        source="FACTS §3: fp8 codes 10-14 and fp4x2 both ways since 2.10",
    ),
    _r("torch", "holds", {"float8_e4m3fn", "float8_e5m2"}, "2.1", source="torch 2.1 notes: float8 dtypes"),
    _r("torch", "holds", {"float8_e4m3fnuz", "float8_e5m2fnuz"}, "2.2", source="torch 2.2 notes: fnuz float8 dtypes"),
    _r("torch", "holds", {"float8_e8m0fnu"}, "2.7", source="torch 2.7 notes: float8_e8m0fnu"),
    _r(
        "torch",
        "raw_capsules",
        since="1.10",
        source="FACTS §3: torch.from_dlpack still accepts raw capsules (both names)",
    ),
    _r(
        "torch",
        "versioned_capsules",
        since="2.9",
        source="FACTS §3: DLPack 1.0 keywords + versioned capsules since 2.9",
    ),
    _r(
        "torch",
        "offset_needs_strides",
        source="probe 2026-11-22 (torch 2.13): 'Expected zero byte_offset' for NULL strides; NumPy 2.4 and JAX 0.10 import it",
    ),
    # negative_strides: absent on purpose. torch 2.13 aborts the process
    # ("Storage size calculation overflowed") on numpy's a[::-1] capsule (probe 2026-11-22).
    # --- cupy --------------------------------------------------------------------------
    _r("cupy", "imports", _CORE, "9.0", source="CuPy 9 notes: cupy.from_dlpack"),
    _r("cupy", "imports", {"bool"}, "12.0", source="FACTS §3: bool since CuPy 12"),
    _r(
        "cupy",
        "imports",
        {"bfloat16"},
        "14.0",
        requires="ml_dtypes",
        source="cupy PR #9670 (bf16 via ml_dtypes, CuPy 14)",
    ),
    _r("cupy", "holds", {"bfloat16"}, "14.0", requires="ml_dtypes", source="cupy PR #9670"),
    _r(
        "cupy",
        "crashes_on_reject",
        until="13.4",
        source="cupy#8801: rejected capsule is freed twice; fixed by #8683/#8722 in 13.4.0",
    ),
    _r("cupy", "raw_capsules", source="cupy/_core/dlpack.pyx: from_dlpack accepts a PyCapsule"),
    _r("cupy", "versioned_capsules", since="13.4", source="CuPy 13.4 notes: DLPack 1.0 (#8683)"),
    _r(
        "cupy",
        "negative_strides",
        source="CuPy arrays hold negative strides; dlpack.pyx copies strides as given [inferred]",
    ),
    # --- jax ---------------------------------------------------------------------------
    _r("jax", "imports", _CORE, "0.2", source="jax.dlpack.from_dlpack (jaxlib dlpack.cc type table)"),
    _r("jax", "imports", {"bfloat16"}, "0.2.10", source="FACTS §3: bf16 since 0.2.10"),
    _r("jax", "imports", {"bool"}, "0.4.24", source="FACTS §3: bool since 0.4.24"),
    _r("jax", "imports", FLOAT8, "0.5.3", source="FACTS §3: fp8 since jaxlib 0.5.3; probe 2026-11-22 (jax 0.10.2)"),
    _r("jax", "raw_capsules", until="0.7.2", source="FACTS §3: raw capsules removed in 0.7.2"),
    _r(
        "jax",
        "compact_only",
        source="jaxlib dlpack.cc: 'Only DLPack tensors with trivial (compact) striding'; probe 2026-11-22",
    ),
    _r("jax", "readonly_arrays", source="jax.Array is immutable"),
    # --- numpy -------------------------------------------------------------------------
    _r("numpy", "imports", _CORE, "1.22", source="NumPy 1.22 notes: np.from_dlpack"),
    _r("numpy", "imports", {"bool"}, "1.25", source="NumPy 1.25 notes: bool in DLPack"),
    _r(
        "numpy",
        "holds",
        FLOAT8 | {"bfloat16"},
        requires="ml_dtypes",
        source="ml_dtypes: bfloat16 and float8 NumPy dtypes (FACTS §3)",
    ),
    _r("numpy", "versioned_capsules", since="2.1", source="FACTS §3: DLPack 1.0 since NumPy 2.1"),
    _r("numpy", "readonly_arrays", since="2.1", source="NumPy 2.1: READ_ONLY flag honoured on import"),
    _r(
        "numpy", "negative_strides", source="NumPy arrays hold negative strides; np.from_dlpack copies strides as given"
    ),
    # --- tensorflow (tf.experimental.dlpack.from_dlpack; rows checked by tests/test_tensorflow.py) ---
    _r(
        "tensorflow",
        "imports",
        _CORE,
        "2.2",
        source="TF 2.2 notes: tf.experimental.dlpack; tensorflow/c/eager/dlpack.cc type table",
    ),
    _r(
        "tensorflow",
        "imports",
        {"bfloat16", "bool"},
        "2.21",
        source="tensorflow/c/eager/dlpack.cc (kDLBfloat, kDLBool); probe 2026-11-23 (tensorflow 2.21.0): "
        "shared zero-copy (first version checked)",
    ),
    # fp8: absent. dlpack.cc has no codes 7-17 ("Unsupported Type Codes: 10"), and tf.bitcast
    # does not take tf.dtypes.experimental.float8_* (probe 2026-11-23, tensorflow 2.21.0).
    _r(
        "tensorflow",
        "raw_capsules",
        source="tensorflow/python/dlpack/dlpack.py: from_dlpack takes only a 'dltensor' PyCapsule",
    ),
    # versioned_capsules: absent. TFE_FromDlpackCapsule reads 'dltensor' only, and
    # EagerTensor.__dlpack__ ignores max_version (tensorflow/python/framework/ops.py).
    _r(
        "tensorflow",
        "c_order_only",
        source="tensorflow/c/eager/dlpack.cc IsValidStrideCompactRowMajorData: 'Invalid strides array "
        "from DLPack' for transposed, sliced, broadcast or negative strides; probe 2026-11-23 (tensorflow 2.21.0)",
    ),
    _r("tensorflow", "readonly_arrays", source="tf.Tensor is immutable (no in-place writes through its API)"),
    # --- paddle (paddle.from_dlpack; rows checked by tests/test_paddle.py) ------------------------
    _r(
        "paddle",
        "imports",
        _CORE - _WIDE_UINTS,
        "2.0",
        source="Paddle 2.0 notes: paddle.utils.dlpack; paddle/fluid/framework/dlpack_tensor.cc type table",
    ),
    _r(
        "paddle",
        "imports",
        {"uint32", "uint64", "bfloat16", "bool"},
        "3.3",
        source="paddle/fluid/framework/dlpack_tensor.cc; probe 2026-11-23 (paddlepaddle 3.3.1): shared "
        "zero-copy (first version checked)",
    ),
    # uint16: absent on purpose. Paddle imports DLPack uint16 as its bfloat16 (it stores bf16 as
    # uint16): different values under the same bits (probe 2026-11-23, paddlepaddle 3.3.1).
    _r(
        "paddle",
        "imports",
        {"float8_e4m3fn", "float8_e5m2"},
        "3.3",
        source="Paddle PR #75205 (DLPack 1.1: fp8 codes); probe 2026-11-23 (paddlepaddle 3.3.1)",
    ),
    _r("paddle", "raw_capsules", source="python/paddle/utils/dlpack.py: from_dlpack takes a PyCapsule"),
    _r(
        "paddle",
        "versioned_capsules",
        since="3.3",
        source="Paddle PR #75205 (DLPack 1.1, versioned capsules, max_version); probe 2026-11-23 (paddlepaddle 3.3.1)",
    ),
    # negative_strides: absent. paddle 3.3.1 computes a 2**64-byte size for numpy's a[::-1] and
    # raises MemoryError; readonly_arrays: absent, it ignores READ_ONLY and writes through
    # (probe 2026-11-23, paddlepaddle 3.3.1). Other strides (transposed, sliced, 0) are shared.
)

CONSUMERS = tuple(dict.fromkeys(row.consumer for row in TABLE))


class Capabilities(NamedTuple):
    consumer: str
    version: str
    imports: frozenset[str]
    holds: frozenset[str]  # imports plus what it can hold after a zero-copy reinterpret
    crashes_on_reject: bool
    raw_capsules: bool
    versioned_capsules: bool
    compact_only: bool
    c_order_only: bool
    readonly_arrays: bool
    negative_strides: bool
    offset_needs_strides: bool


# A pre-release sorts before its release: a row "since 2.6" must not claim 2.6.0rc1 or a 2.6 nightly.
_VERSION = re.compile(r"(\d+(?:\.\d+)*)(?:[-_.]?(dev|a|alpha|b|beta|c|rc|pre|preview)[-_.]?(\d*))?", re.IGNORECASE)
_PRE = {"dev": -4, "a": -3, "alpha": -3, "b": -2, "beta": -2, "c": -1, "rc": -1, "pre": -1, "preview": -1}


def parse_version(text: str) -> tuple[int, ...]:
    """A comparable key for a version string (PEP 440 order for the forms frameworks publish).

    The release without trailing zeros, then (0, 0) for a release or (negative phase, number) for a
    pre-release: '2.6.0' -> (2, 6, 0, 0), '2.6.0rc1' -> (2, 6, -1, 1), '2.6.0.dev20250101' ->
    (2, 6, -4, 20250101), so every pre-release sorts below its release. A local version ('+cpu',
    '+gitabc') and a post-release suffix are ignored: '2.13.0+cpu' and '2.13' give the same key.
    """
    match = _VERSION.match(text.strip().removeprefix("v"))
    if match is None:
        return ()
    release = [int(p) for p in match.group(1).split(".")]
    while release and release[-1] == 0:
        release.pop()
    if match.group(2) is None:
        return (*release, 0, 0)
    return (*release, _PRE[match.group(2).lower()], int(match.group(3) or 0))


@cache
def _importable(module: str) -> bool:
    if module in sys.modules:  # None there means "blocked" (import raises ImportError)
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def _applies(row: Row, version: tuple[int, ...]) -> bool:
    if row.since is not None and version < parse_version(row.since):
        return False
    if row.until is not None and version >= parse_version(row.until):
        return False
    return row.requires is None or _importable(row.requires)


@lru_cache(maxsize=64)
def capabilities(consumer: str, version: str) -> Capabilities:
    """What ``consumer`` at ``version`` accepts, read off TABLE (cached)."""
    v = parse_version(version)
    rows = [r for r in TABLE if r.consumer == consumer and _applies(r, v)]
    imports = frozenset().union(*(r.dtypes for r in rows if r.what == "imports"))
    holds = imports.union(*(r.dtypes for r in rows if r.what == "holds"))
    flags = {f: any(r.what == f for r in rows) for f in FEATURES}
    return Capabilities(consumer, version, imports, holds, **flags)


def missing_requirements(consumer: str, version: str, dtype: str) -> list[str]:
    """Modules whose installation would let ``consumer`` at ``version`` hold ``dtype``."""
    v = parse_version(version)
    return sorted(
        {
            r.requires
            for r in TABLE
            if r.consumer == consumer and r.what in ("imports", "holds") and dtype in r.dtypes and r.requires
            and not _importable(r.requires) and _applies(r._replace(requires=None), v)
        }
    )  # fmt: skip


def sources(consumer: str, dtype: str | None = None) -> list[Row]:
    """Rows about ``consumer`` (and ``dtype``), for messages and the report."""
    return [r for r in TABLE if r.consumer == consumer and (dtype is None or dtype in r.dtypes)]


assert all(d in BY_NAME for r in TABLE for d in r.dtypes), "TABLE names an unknown dtype"
