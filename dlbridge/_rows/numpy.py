"""Capability rows: NumPy (np.from_dlpack). Each row names its source (see dlbridge._capabilities)."""

from __future__ import annotations

from .._dtypes import FLOAT8
from ._common import CORE, ML_DTYPES_05, ML_DTYPES_FP4, NEW_FP8, Framework, Row, Support, row

# probed: the version matrix: 1.26.4, 2.1.3, 2.4.6, 2.5.5; 2.5.2 on the H100 run
SUPPORT = Support(extra=("numpy>=1.26", "ml_dtypes>=0.4"), probed=("1.26", "2.5"))

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="numpy",
    module="numpy",
    array_type=("numpy", "ndarray"),
    adapter="dlbridge._adapters._numpy:NumpyAdapter",
    aliases=("np",),
    producer_modules=("numpy",),
    host=True,
)

ROWS: tuple[Row, ...] = (
    row("numpy", "imports", CORE, "1.22", source="NumPy 1.22 notes: np.from_dlpack"),
    row("numpy", "imports", {"bool"}, "1.25", source="NumPy 1.25 notes: bool in DLPack"),
    row(
        "numpy",
        "holds",
        FLOAT8 - NEW_FP8 | {"bfloat16"},
        requires="ml_dtypes",
        source="ml_dtypes README: bfloat16 and float8 NumPy dtypes (float8_e4m3b11fnuz, e4m3fn(uz), e5m2(fnuz))",
    ),
    row(
        "numpy",
        "holds",
        NEW_FP8,
        requires=ML_DTYPES_05,
        source="ml_dtypes CHANGELOG 0.5.0: float8_e3m4, "
        "float8_e4m3, float8_e8m0fnu; probe 2026-11-23 (ml_dtypes 0.4.1 has none of them)",
    ),
    row(
        "numpy",
        "holds",
        {"float4_e2m1fn"},
        requires=ML_DTYPES_FP4,
        source="ml_dtypes CHANGELOG 0.5.0/0.5.1: float4_e2m1fn (sign bit fixed in 0.5.1), one value a byte; "
        "probe 2026-11-25 (numpy 2.4.6, ml_dtypes 0.6.0: itemsize 1, codes 0-15 decode as the OCP MX E2M1 values); "
        "NumPy cannot export it (dlbridge repacks it, see dlbridge._pipeline._subbyte)",
    ),
    row(
        "numpy",
        "cannot_export",
        {"float4_e2m1fn"},
        source="numpy/_core/src/multiarray/dlpack.c refuses dtypes other than ints, floats and complex; probe "
        "2026-11-25 (numpy 2.4.6, ml_dtypes 0.6.0: 'DLPack only supports signed/unsigned integers, float and complex "
        "dtypes'); dlbridge exports ml_dtypes' full-width kinds as relabelled uints, and fp4 (one value a byte, "
        "not DLPack's packed default) through dlbridge._pipeline._subbyte",
    ),
    row(
        "numpy",
        "cannot_export",
        {"bool"},
        until="1.25",
        source="NumPy 1.25 notes: bool in DLPack; probe 2026-11-27 (.ci/edges, numpy 1.24.4: a bool array's "
        "__dlpack__ raises BufferError 'DLPack only supports signed/unsigned integers, float and complex dtypes'; "
        "1.25.0 exports it)",
    ),
    row("numpy", "versioned_capsules", since="2.1", source="NumPy 2.1.0 release notes: DLPack 1.0 (max_version)"),
    row(
        "numpy",
        "readonly_arrays",
        since="2.1",
        source="NumPy 2.1.0 release notes: from_dlpack honours DLPack 1.0's READ_ONLY flag",
    ),
    row(
        "numpy",
        "readonly_imports",
        since="1.22",
        until="2.2",
        source="numpy/_core/src/multiarray/dlpack.c: arrays from from_dlpack were created read-only until NumPy 2.2 "
        "(2.2.0 notes); probe 2026-11-23 (numpy 1.26.4, 2.1.3 read-only; 2.2.6 writable)",
    ),
    row(
        "numpy", "negative_strides", source="NumPy arrays hold negative strides; np.from_dlpack copies strides as given"
    ),
    row(
        "numpy",
        "dtype_registry",
        since="2.5",
        source="numpy PR #31256: np.dtypes.register_dlpack_dtype((code, bits), dtype) in numpy/dtypes.py (NumPy 2.5); "
        "probe 2026-11-25 (numpy 2.5.5: registered ml_dtypes kinds export and import natively, zero-copy)",
    ),
)
