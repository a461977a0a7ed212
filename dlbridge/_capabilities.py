"""What each consumer accepts, by version: one table, one source per row.

The conversion logic only *reads* this table (through :func:`capabilities`); ``dlbridge
report`` checks it against what the installed frameworks really do and lists disagreements.

Rows are facts about consumers ("imports", "holds" and the FEATURES flags) and about
producers ("exports_uint8": dtypes whose capsules a producer labels uint8). ``requires`` names
a module, optionally with a minimum version ("ml_dtypes>=0.5"), read from package metadata.

Sources: upstream release notes, changelogs, pull requests and source files; "probe
YYYY-MM-DD (versions)" is a run of ``dlbridge report``, the test suite or a one-off script on
the versions named (the version matrix in ``.ci/matrix`` reruns them).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import NamedTuple

from ._dtypes import BY_NAME, FLOAT8

__all__ = ["Row", "TABLE", "Capabilities", "capabilities", "parse_version", "FEATURES", "KINDS", "satisfied",
           "installed_version"]  # fmt: skip

_INTS = frozenset(f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64))
_CORE = _INTS | {"float16", "float32", "float64", "complex64", "complex128"}
_WIDE_UINTS = frozenset({"uint16", "uint32", "uint64"})
# Boundaries as far as probed (see the rows' sources): the first version seen without the behaviour.
JAX_FP4_UNTIL = "0.10"  # 0.9.0 imports it, 0.10.2 refuses it (0.10.0-0.10.1 not probed)
JAX_LAYOUTS_SINCE = "0.8"
JAX_COPY_FIXED = "0.4.35"  # 0.4.31 crashes, 0.4.35 does not (0.4.33-0.4.34 not probed)
_TORCH_FP8 = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"})

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
    # users can register DLPack dtypes with it at run time (NumPy's register_dlpack_dtype): the adapter's
    # capabilities() then adds the kinds registered to "imports", and it exports them itself
    "dtype_registry",
)
# Producer rows: "exports_uint8" lists dtypes whose capsules the producer labels uint8;
# "cannot_export" dtypes it holds but cannot put in a capsule at all.
PRODUCER_KINDS = ("exports_uint8", "cannot_export")
KINDS = ("imports", "holds", *FEATURES, *PRODUCER_KINDS)


class Row(NamedTuple):
    consumer: str
    what: str  # one of KINDS
    dtypes: frozenset[str]
    since: str | None  # first version with it (inclusive); None = always
    until: str | None  # first version without it (exclusive); None = still
    requires: str | None  # modules that must be installed, optionally ">=version", comma-separated (all of them)
    source: str


def _r(consumer: str, what: str, dtypes: Iterable[str] = (), since: str | None = None, until: str | None = None,
       requires: str | None = None, *, source: str) -> Row:  # fmt: skip
    return Row(consumer, what, frozenset(dtypes), since, until, requires, source)


# ml_dtypes 0.5.0 added float8_e3m4, float8_e4m3 and float8_e8m0fnu (ml_dtypes CHANGELOG 0.5.0);
# the other float8 kinds and bfloat16 are in every ml_dtypes dlbridge supports (>= 0.4).
_NEW_FP8 = frozenset({"float8_e3m4", "float8_e4m3", "float8_e8m0fnu"})
_ML_DTYPES_05 = "ml_dtypes>=0.5"
_CUPY_BF16 = "ml_dtypes,numpy>=2.1.2"  # every one of them (comma: all of)
# dtypes only ml_dtypes gives NumPy (a CuPy array can be viewed as any of them)
_ML_ONLY = FLOAT8 | {"bfloat16", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"}

TABLE: tuple[Row, ...] = (
    # --- torch -------------------------------------------------------------------------
    _r(
        "torch",
        "imports",
        _CORE - _WIDE_UINTS | {"bfloat16"},
        "1.10",
        source="torch 1.10 release notes: torch.from_dlpack; aten/src/ATen/DLConvertor.cpp: kDLBfloat since 1.9",
    ),
    _r("torch", "imports", {"bool"}, "2.2", source="aten/src/ATen/DLConvertor.cpp: kDLBool <-> torch.bool (torch 2.2)"),
    _r(
        "torch",
        "imports",
        _WIDE_UINTS,
        "2.3",
        source="torch 2.3 release notes: uint16/uint32/uint64 tensors (DLConvertor.cpp maps kDLUInt of every width)",
    ),
    _r(
        "torch",
        "imports",
        _TORCH_FP8 | {"float4_e2m1fn_x2"},
        "2.10",
        source="aten/src/ATen/DLConvertor.cpp (torch 2.10): kDLFloat8_* codes 10-14 and kDLFloat4_e2m1fn both ways; "
        "probe 2026-11-23 (torch 2.13)",
    ),
    _r("torch", "holds", {"float8_e4m3fn", "float8_e5m2"}, "2.1", source="torch 2.1 notes: float8 dtypes"),
    _r("torch", "holds", {"float8_e4m3fnuz", "float8_e5m2fnuz"}, "2.2", source="torch 2.2 notes: fnuz float8 dtypes"),
    _r("torch", "holds", {"float8_e8m0fnu"}, "2.7", source="torch 2.7 notes: float8_e8m0fnu"),
    _r(
        "torch",
        "raw_capsules",
        since="1.10",
        source="torch/utils/dlpack.py from_dlpack: 'if not hasattr(ext_tensor, \"__dlpack__\")' takes the capsule "
        "as is (both names); probe 2026-11-23 (torch 2.13)",
    ),
    _r(
        "torch",
        "versioned_capsules",
        since="2.9",
        source="torch 2.9 release notes: DLPack 1.0 (max_version, dl_device, copy; 'dltensor_versioned' capsules)",
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
    _r("cupy", "imports", {"bool"}, "12.0", source="CuPy 12 release notes: bool in DLPack (cupy/_core/dlpack.pyx)"),
    _r(
        "cupy",
        "imports",
        {"bfloat16"},
        "14.0",
        requires=_CUPY_BF16,
        source="cupy PR #9670 (bf16 via ml_dtypes, CuPy 14); cupy v14.2.0 cupy/_core/dlpack.pyx lines 22-29: "
        "ml_dtypes' bfloat16 only with NumPy >= 2.1.2, else NotImplementedError on import (lines 480-486)",
    ),
    _r(
        "cupy",
        "holds",
        {"bfloat16"},
        "14.0",
        requires=_CUPY_BF16,
        source="cupy PR #9670; cupy v14.2.0 cupy/_core/_util.pyx and dlpack.pyx lines 22-29 (NumPy >= 2.1.2)",
    ),
    _r(
        "cupy",
        "cannot_export",
        _ML_ONLY - {"bfloat16"},
        source="cupy v14.2.0 cupy/_core/core.pyx ndarray.view lines 926-990 (check_support=False: any ml_dtypes "
        "dtype) and cupy/_core/dlpack.pyx get_dlpack_dtype_code_itemsize lines 75-97 ('dtype is not supported "
        "for dlpack export' for every kind 'V' dtype but bfloat16); v13.x toDlpack: ValueError/BufferError",
    ),
    _r(
        "cupy",
        "cannot_export",
        {"bfloat16"},
        until="14.0",
        source="cupy v13.3.0 cupy/_core/dlpack.pyx toDlpack line 146 ('Unknown dtype'); v13.6.0 line 80 "
        "(BufferError): bfloat16 export by name only since CuPy 14 (v14.0.0 dlpack.pyx line 92)",
    ),
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
    _r("jax", "imports", {"bfloat16"}, "0.2.10", source="jaxlib dlpack.cc: kDLBfloat <-> BF16 (jax 0.2.10)"),
    _r(
        "jax",
        "imports",
        {"bool"},
        "0.4.24",
        source="jaxlib dlpack.cc: kDLBool <-> PRED (jaxlib 0.4.24); probe 2026-11-23 (jax 0.4.23 refuses it)",
    ),
    _r(
        "jax",
        "imports",
        FLOAT8 - _NEW_FP8,
        "0.5.3",
        source="jaxlib 0.5.3 dlpack.cc: float8 type codes; probe 2026-11-23 (jax 0.5.3, 0.7.1, 0.10.2)",
    ),
    _r(
        "jax",
        "imports",
        _NEW_FP8,
        "0.5.3",
        requires=_ML_DTYPES_05,
        source="probe 2026-11-23 (jax 0.5.3 + ml_dtypes 0.4.1: 'Unimplemented primitive type F8E8M0FNU'; "
        "ml_dtypes 0.5 defines these types)",
    ),
    _r(
        "jax",
        "imports",
        {"float4_e2m1fn"},
        "0.5.3",
        JAX_FP4_UNTIL,
        requires=_ML_DTYPES_05,
        source="probe 2026-11-23 (jax 0.5.3, 0.7.1, 0.7.2, 0.8.0, 0.9.0 import their own float4_e2m1fn; jax 0.10.2: "
        "'PjRt CPU buffers only support default layout')",
    ),
    _r(
        "jax",
        "exports_uint8",
        {"bool"},
        until="0.4.24",
        source="probe 2026-11-23 (jax 0.4.23: a bool array's capsule says uint8; jaxlib dlpack.cc maps PRED to "
        "kDLBool since 0.4.24)",
    ),
    _r(
        "jax",
        "cannot_export",
        FLOAT8,
        until="0.5.3",
        source="probe 2026-11-23 (jax 0.4.30): __dlpack__ raises 'XLA type F8E4M3FN has no DLPack equivalent'",
    ),
    _r(
        "jax",
        "raw_capsules",
        until="0.7.2",
        source="JAX 0.7.2 changelog: from_dlpack no longer accepts DLPack capsules",
    ),
    _r(
        "jax",
        "raw_capsules_deprecated",
        since="0.4.35",
        source="jax/_src/dlpack.py (0.4.35): DeprecationWarning 'Calling from_dlpack with a DLPack tensor is "
        "deprecated'; probe 2026-11-23 (jax 0.4.30, 0.4.31 silent; 0.4.35, 0.7.1 warn)",
    ),
    _r(
        "jax",
        "row_major_only",
        until=JAX_LAYOUTS_SINCE,
        source="probe 2026-11-23: jax 0.4.30-0.7.1 refuse transposed raw capsules ('non-default layout'), "
        "jax 0.7.1 imports torch's .t() with wrong values, 0.7.2 refuses it; jax 0.8.0 and 0.10.2 import it right",
    ),
    _r(
        "jax",
        "copy_crashes_unaligned",
        until=JAX_COPY_FIXED,
        source="probe 2026-11-23 (jax 0.4.23, 0.4.30, 0.4.31; not 0.4.35): jnp.array(x, copy=True) segfaults for x "
        "imported from an unaligned float32 (1, 4) buffer (address % 64 == 4)",
    ),
    _r(
        "jax",
        "shares_unaligned",
        until=JAX_COPY_FIXED,
        source="probe 2026-11-23: jax 0.4.30 and 0.4.31 share an unaligned float32 (1, 4) buffer; 0.4.35 and 0.7.1 "
        "copy it ('DLPack buffer is not aligned ... Creating a copy', jaxlib dlpack.cc)",
    ),
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
        FLOAT8 - _NEW_FP8 | {"bfloat16"},
        requires="ml_dtypes",
        source="ml_dtypes README: bfloat16 and float8 NumPy dtypes (float8_e4m3b11fnuz, e4m3fn(uz), e5m2(fnuz))",
    ),
    _r(
        "numpy",
        "holds",
        _NEW_FP8,
        requires=_ML_DTYPES_05,
        source="ml_dtypes CHANGELOG 0.5.0: float8_e3m4, "
        "float8_e4m3, float8_e8m0fnu; probe 2026-11-23 (ml_dtypes 0.4.1 has none of them)",
    ),
    _r("numpy", "versioned_capsules", since="2.1", source="NumPy 2.1.0 release notes: DLPack 1.0 (max_version)"),
    _r(
        "numpy",
        "readonly_arrays",
        since="2.1",
        source="NumPy 2.1.0 release notes: from_dlpack honours DLPack 1.0's READ_ONLY flag",
    ),
    _r(
        "numpy",
        "readonly_imports",
        since="1.22",
        until="2.2",
        source="numpy/_core/src/multiarray/dlpack.c: arrays from from_dlpack were created read-only until NumPy 2.2 "
        "(2.2.0 notes); probe 2026-11-23 (numpy 1.26.4, 2.1.3 read-only; 2.2.6 writable)",
    ),
    _r(
        "numpy", "negative_strides", source="NumPy arrays hold negative strides; np.from_dlpack copies strides as given"
    ),
    _r(
        "numpy",
        "dtype_registry",
        since="2.5",
        source="numpy PR #31256: np.dtypes.register_dlpack_dtype((code, bits), dtype) in numpy/dtypes.py (NumPy 2.5); "
        "probe 2026-11-25 (numpy 2.5.5: registered ml_dtypes kinds export and import natively, zero-copy)",
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
        "row_major_only",
        source="tensorflow/c/eager/dlpack.cc IsValidStrideCompactRowMajorData: 'Invalid strides array "
        "from DLPack' for transposed, sliced, broadcast or negative strides; probe 2026-11-23 (tensorflow 2.21.0)",
    ),
    _r("tensorflow", "readonly_arrays", source="tf.Tensor is immutable (no in-place writes through its API)"),
    # cannot_export: none. TF's own export has no float8 codes (tensorflow/c/eager/dlpack.cc; probe
    # 2026-11-23, tensorflow 2.21.0: 'DT_FLOAT8_E4M3FN is not supported by dlpack'), but dlbridge's
    # exports CPU float8 tensors' bytes relabelled, as NumPy's ml_dtypes arrays (TensorflowAdapter.
    # export; probe 2026-11-25, tensorflow 2.21.0: zero-copy); on the GPU the adapter refuses them.
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
    readonly_arrays: bool
    negative_strides: bool
    offset_needs_strides: bool
    row_major_only: bool
    raw_capsules_deprecated: bool
    readonly_imports: bool
    copy_crashes_unaligned: bool
    shares_unaligned: bool
    dtype_registry: bool
    exports_uint8: frozenset[str]  # as a producer: dtypes its capsules label uint8
    cannot_export: frozenset[str]  # as a producer: dtypes its __dlpack__ refuses

    @property
    def takes_raw_capsules(self) -> bool:
        """Whether dlbridge hands it bare capsules (taken, and without a deprecation warning)."""
        return self.raw_capsules and not self.raw_capsules_deprecated


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


def installed_version(module: str) -> str | None:
    """The version of ``module`` without importing it (its ``__version__`` if loaded, else metadata)."""
    loaded = sys.modules.get(module)
    if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
        return str(loaded.__version__)
    from importlib import metadata  # only here: importing it costs more than all of dlbridge

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return None


@cache
def satisfied(requirement: str) -> bool:
    """Whether a ``requires`` entry holds here: "ml_dtypes", "ml_dtypes>=0.5", or several of them
    separated by commas (all must hold: "ml_dtypes,numpy>=2.1.2")."""
    if "," in requirement:
        return all(satisfied(part.strip()) for part in requirement.split(","))
    module, _, minimum = requirement.partition(">=")
    if not _importable(module):
        return False
    if not minimum:
        return True
    found = installed_version(module)
    return found is not None and parse_version(found) >= parse_version(minimum)


def _applies(row: Row, version: tuple[int, ...]) -> bool:
    if row.since is not None and version < parse_version(row.since):
        return False
    if row.until is not None and version >= parse_version(row.until):
        return False
    return row.requires is None or satisfied(row.requires)


@lru_cache(maxsize=64)
def capabilities(consumer: str, version: str) -> Capabilities:
    """What ``consumer`` at ``version`` accepts, read off TABLE (cached)."""
    v = parse_version(version)
    rows = [r for r in TABLE if r.consumer == consumer and _applies(r, v)]
    imports = frozenset().union(*(r.dtypes for r in rows if r.what == "imports"))
    holds = imports.union(*(r.dtypes for r in rows if r.what == "holds"))
    flags: dict[str, object] = {f: any(r.what == f for r in rows) for f in FEATURES}
    flags.update({k: frozenset().union(*(r.dtypes for r in rows if r.what == k)) for k in PRODUCER_KINDS})
    return Capabilities(consumer, version, imports, holds, **flags)  # type: ignore[arg-type]


def missing_requirements(consumer: str, version: str, dtype: str) -> list[str]:
    """Requirements ("ml_dtypes", "ml_dtypes>=0.5") whose installation would let ``consumer`` hold ``dtype``."""
    v = parse_version(version)
    return sorted(
        {
            part.strip()
            for r in TABLE
            if r.consumer == consumer and r.what in ("imports", "holds") and dtype in r.dtypes and r.requires
            and not satisfied(r.requires) and _applies(r._replace(requires=None), v)
            for part in r.requires.split(",") if not satisfied(part.strip())
        }
    )  # fmt: skip


assert all(d in BY_NAME for r in TABLE for d in r.dtypes), "TABLE names an unknown dtype"
