"""Capability rows: ONNX Runtime (onnxruntime.OrtValue.from_dlpack). Each row names its source (see dlbridge._capabilities)."""

from __future__ import annotations

from ._common import INTS, Framework, Row, row

_PROBE = "probe 2026-11-25 (onnxruntime 1.32.0, torch 2.13.0)"

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="onnxruntime",
    module="onnxruntime",
    array_type=("onnxruntime", "OrtValue"),
    adapter="dlbridge._adapters._onnxruntime:OnnxruntimeAdapter",
    aliases=("ort",),
    producer_modules=("onnxruntime",),
)

ROWS: tuple[Row, ...] = (
    row(
        "onnxruntime",
        "imports",
        INTS | {"float16", "float32", "float64", "bfloat16", "bool"},
        "1.31",
        source="microsoft/onnxruntime PR #27980 (OrtValue.__dlpack__, __dlpack_device__, from_dlpack on the public "
        f"class); onnxruntime/core/dlpack/dlpack_converter.cc GetOrtValueDataType; {_PROBE}: shared zero-copy",
    ),
    row(
        "onnxruntime",
        "imports",
        {"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"},
        "1.31",
        source=f"dlpack_converter.cc (DLPack 1.1+ float8 codes); {_PROBE}: shared zero-copy with torch",
    ),
    # complex64/complex128: absent. from_dlpack raises "Unsupported DLPack data type: code 5"
    # (its docstring: complex and float6 are not supported); the rejected capsule is left intact.
    row(
        "onnxruntime",
        "raw_capsules",
        since="1.31",
        source="OrtValue.from_dlpack docstring: 'or a raw DLPack PyCapsule'",
    ),
    # versioned_capsules: absent. from_dlpack refuses 'dltensor_versioned' ("expected a valid DLPack
    # capsule named 'dltensor'") and OrtValue.__dlpack__ takes no max_version.
    row(
        "onnxruntime",
        "row_major_only",
        source="dlpack_converter.cc DlpackToOrtValue: 'IsContiguousTensor(dlpack->dl_tensor) was false. ORT only "
        f"supports contiguous tensor' (transposed, sliced and negative strides); {_PROBE}",
    ),
    # readonly_arrays: absent. An OrtValue has no read-only state (update_inplace writes any of them).
)
