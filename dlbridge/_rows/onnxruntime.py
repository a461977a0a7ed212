"""Capability rows: ONNX Runtime (onnxruntime.OrtValue.from_dlpack). Each row names its source (see dlbridge._capabilities).

The public ``OrtValue`` has ``__dlpack__``, ``__dlpack_device__`` and ``from_dlpack`` since 1.26.0
(microsoft/onnxruntime PR #27980; the 1.25.1 wheel has none of them). Until 1.31.x its DLPack
converter knows no bool and no float8 (onnxruntime/core/dlpack/dlpack_converter.cc: "Currently bool
is same as uint8"); 1.32.0 reads and writes kDLBool and the float8 codes.
"""

from __future__ import annotations

from ._common import INTS, Framework, Row, Support, row

_PROBE = "probe 2026-11-25 (onnxruntime 1.32.0, torch 2.13.0)"
# tests/test_onnxruntime_versions.py runs against each of these wheels put first on PYTHONPATH.
_WHEELS = "probe 2026-11-27 (onnxruntime 1.25.1, 1.26.0, 1.30.0, 1.31.1, 1.32.0 CPU wheels; torch 2.13.0)"
_GPU = "dlbridge report on an NVIDIA H100, 2026-11-27 (onnxruntime 1.30.0 CPU build, torch 2.11.0+cu130)"
DLPACK_SINCE = "1.26"  # the first release whose public OrtValue speaks DLPack
DTYPES_FIXED = "1.32"  # the first release with kDLBool and the float8 codes, both ways
FP8 = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"})

SUPPORT = Support(extra=("onnxruntime>=1.26",), probed=("1.26", "1.32"))

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
        INTS | {"float16", "float32", "float64", "bfloat16"},
        DLPACK_SINCE,
        source="microsoft/onnxruntime PR #27980 (OrtValue.__dlpack__, __dlpack_device__, from_dlpack on the public "
        f"class, first released in 1.26.0); dlpack_converter.cc GetOrtValueDataType; {_WHEELS}: shared zero-copy; "
        f"{_GPU}: torch, JAX and NumPy float32/float16/bfloat16/uint16/int64 imported",
    ),
    row(
        "onnxruntime",
        "imports",
        FP8 | {"bool"},
        DTYPES_FIXED,
        source="onnxruntime 1.32.0 onnxruntime/capi/onnxruntime_inference_collection.py OrtValue.from_dlpack "
        "docstring (lines 1558-1575: 'Boolean tensors must use kDLBool ... including float8'); 1.31.1 (lines "
        "1551-1594) and older refuse kDLBool and the float8 codes in GetOrtValueDataType ('Unsupported code'); "
        f"{_WHEELS}: torch's bool and float8 shared zero-copy from 1.32.0 on",
    ),
    row(
        "onnxruntime",
        "exports_uint8",
        {"bool"},
        DLPACK_SINCE,
        DTYPES_FIXED,
        source="onnxruntime/core/dlpack/dlpack_converter.cc GetDlpackDataType ('Currently bool is same as uint8 on "
        f"both code and bits': kDLUInt, 8); {_WHEELS}: a bool OrtValue's capsule says (1, 8, 1) up to 1.31.1, "
        f"(6, 8, 1) in 1.32.0; {_GPU}: torch, JAX and NumPy got uint8",
    ),
    row(
        "onnxruntime",
        "cannot_export",
        FP8,
        DLPACK_SINCE,
        DTYPES_FIXED,
        source="dlpack_converter.cc GetDlpackDataType line 75 ('Unexpected data type of 17'; 1.26.0: 'tensor type 24 "
        f"is not supported' for float8_e8m0fnu); {_WHEELS}; {_GPU}: the five float8 kinds refused",
    ),
    # complex64/complex128: absent. from_dlpack raises "Unsupported DLPack data type: code 5"
    # (its docstring: complex and float6 are not supported); the rejected capsule is left intact.
    row(
        "onnxruntime",
        "raw_capsules",
        since=DLPACK_SINCE,
        source="OrtValue.from_dlpack docstring: 'or a raw DLPack PyCapsule'",
    ),
    row(
        "onnxruntime",
        "detects_bool_sources",
        since=DLPACK_SINCE,
        until=DTYPES_FIXED,
        source="onnxruntime 1.31.1 onnxruntime_inference_collection.py OrtValue.from_dlpack lines 1575-1594: "
        "is_bool from the source's data_type() or dtype name, passed as C.OrtValue.from_dlpack(capsule, "
        f"is_bool_tensor); {_GPU}: an OrtValue's bool into OrtValue.from_dlpack kept bool",
    ),
    row(
        "onnxruntime",
        "exports_legacy_only",
        since=DLPACK_SINCE,
        source="OrtValue.__dlpack__(self, *, stream=None) (onnxruntime_inference_collection.py): no max_version, "
        f"'dltensor' capsules only; {_WHEELS}",
    ),
    # versioned_capsules: absent. from_dlpack refuses 'dltensor_versioned' ("expected a valid DLPack
    # capsule named 'dltensor'").
    row(
        "onnxruntime",
        "row_major_only",
        source="dlpack_converter.cc DlpackToOrtValue: 'IsContiguousTensor(dlpack->dl_tensor) was false. ORT only "
        f"supports contiguous tensor' (transposed, sliced and negative strides); {_PROBE}",
    ),
    # readonly_arrays: absent. An OrtValue has no read-only state (update_inplace writes any of them).
    # GPU capsules: the CPU build (onnxruntime.get_device() == "CPU", no "CUDAExecutionProvider" in
    # get_available_providers(); onnxruntime_pybind_state.cc) takes a kDLCUDA capsule and makes an OrtValue
    # that says "cuda" (GetOrtDevice maps kDLCUDA to OrtDevice::GPU whatever the build; probe 2026-11-27,
    # onnxruntime 1.30.0 and 1.32.0, and the H100 run above). dlbridge hands ONNX Runtime CPU memory only
    # (OnnxruntimeAdapter.device_codes): GPU sources are copied to the host, or refused with
    # DeviceMismatchError (copy=False, a raw capsule) before ONNX Runtime sees them.
)
