"""Capability rows: CuPy (cupy.from_dlpack). Each row names its source (see dlbridge._capabilities)."""

from __future__ import annotations

from ._common import CORE, CUPY_BF16, ML_ONLY, Framework, Row, Support, row

# CuPy labels a capsule by the dtype's NumPy kind alone (every version read: v13.3.0 cupy/_core/dlpack.pyx
# toDlpack lines 134-147, v13.6.0 get_dlpack_dtype_code lines 64-80, v14.2.0 get_dlpack_dtype_code_itemsize
# lines 75-97): kind 'f' is kDLFloat with bits = itemsize * 8. ml_dtypes gives float8_e5m2 kind 'f' (ml_dtypes
# v0.6.0 ml_dtypes/_src/dtypes.cc line 164, "Treating e5m2 as the natural 'float' type"; 0.4.1 and 0.5.1 the
# same) and its other float8/float6/float4 kinds 'V' (tests/test_versions.py checks the installed ml_dtypes).
KIND_F = frozenset({"float8_e5m2"})
_H100 = "dlbridge report on an NVIDIA H100, 2026-11-27 (CuPy 14.2.0 and 13.3.0, ml_dtypes 0.6.0, torch 2.11.0+cu130, JAX 0.11.2)"

SUPPORT = Support(extra=(), probed=("13.3", "14.2"))  # no extra: CuPy's wheels are per CUDA version

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="cupy",
    module="cupy",
    array_type=("cupy", "ndarray"),
    adapter="dlbridge._adapters._cupy:CupyAdapter",
    producer_modules=("cupy", "cupy_backends"),
)

ROWS: tuple[Row, ...] = (
    row("cupy", "imports", CORE, "9.0", source="CuPy 9 notes: cupy.from_dlpack"),
    row("cupy", "imports", {"bool"}, "12.0", source="CuPy 12 release notes: bool in DLPack (cupy/_core/dlpack.pyx)"),
    row(
        "cupy",
        "imports",
        {"bfloat16"},
        "14.0",
        requires=CUPY_BF16,
        source="cupy PR #9670 (bf16 via ml_dtypes, CuPy 14); cupy v14.2.0 cupy/_core/dlpack.pyx lines 22-29: "
        "ml_dtypes' bfloat16 only with NumPy >= 2.1.2, else NotImplementedError on import (lines 480-486)",
    ),
    row(
        "cupy",
        "holds",
        {"bfloat16"},
        "14.0",
        requires=CUPY_BF16,
        source="cupy PR #9670; cupy v14.2.0 cupy/_core/_util.pyx and dlpack.pyx lines 22-29 (NumPy >= 2.1.2)",
    ),
    row(
        "cupy",
        "cannot_export",
        ML_ONLY - {"bfloat16"} - KIND_F,
        source="cupy v14.2.0 cupy/_core/core.pyx ndarray.view lines 926-990 (check_support=False: any ml_dtypes "
        "dtype) and cupy/_core/dlpack.pyx get_dlpack_dtype_code_itemsize lines 75-97 ('dtype is not supported "
        f"for dlpack export' for every kind 'V' dtype but bfloat16); v13.x toDlpack: ValueError/BufferError; {_H100}",
    ),
    row(
        "cupy",
        "exports_as_float",
        KIND_F,
        requires="ml_dtypes",
        source="cupy/_core/dlpack.pyx by kind (above): an ml_dtypes float8_e5m2 view exports as kDLFloat with 8 bits, "
        f"a dtype DLPack does not define (float8_e5m2 is kDLFloat8_e5m2, code 12, since DLPack 1.1); {_H100}: the "
        "capsule says (2, 8, 1); torch 'Unsupported kFloat bits 8', JAX 'Invalid or unsupported DLPack float width: "
        "8 bits', CuPy 'float8 is not supported' (v14.2.0 dlpack.pyx line 465); dlbridge relabels it zero-copy",
    ),
    row(
        "cupy",
        "cannot_export",
        {"bfloat16"},
        until="14.0",
        source="cupy v13.3.0 cupy/_core/dlpack.pyx toDlpack line 146 ('Unknown dtype'); v13.6.0 line 80 "
        "(BufferError): bfloat16 export by name only since CuPy 14 (v14.0.0 dlpack.pyx line 92)",
    ),
    row(
        "cupy",
        "crashes_on_reject",
        until="13.4",
        source="cupy#8801: rejected capsule is freed twice; fixed by #8683/#8722 in 13.4.0",
    ),
    row("cupy", "raw_capsules", source="cupy/_core/dlpack.pyx: from_dlpack accepts a PyCapsule"),
    row("cupy", "versioned_capsules", since="13.4", source="CuPy 13.4 notes: DLPack 1.0 (#8683)"),
    row(
        "cupy",
        "negative_strides",
        source="CuPy arrays hold negative strides; dlpack.pyx copies strides as given [inferred]",
    ),
)
