"""Capability rows: TensorFlow (tf.experimental.dlpack.from_dlpack). Each row names its source (see dlbridge._capabilities)."""

from __future__ import annotations

from ._common import CORE, Framework, Row, Support, row

# probed: tensorflow-cpu 2.21.0 (latest stack)
SUPPORT = Support(extra=("tensorflow>=2.21", "ml_dtypes>=0.5.1"), probed=("2.21", "2.21"))

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="tensorflow",
    module="tensorflow",
    array_type=("tensorflow", "Tensor"),
    adapter="dlbridge._adapters._tensorflow:TensorflowAdapter",
    aliases=("tf",),
    producer_modules=("tensorflow",),
)

ROWS: tuple[Row, ...] = (
    row(
        "tensorflow",
        "copies_unaligned",
        source="tensorflow/core/framework/tensor.cc CHECKs that CPU data is aligned to EIGEN_MAX_ALIGN_BYTES (abort: "
        "'Check failed: IsAligned()', tf.cast of a numpy a[1:17] import, probe 2026-11-23, tensorflow 2.21.0): "
        "dlbridge copies unaligned CPU data to a 64-byte aligned buffer first (TensorflowAdapter.import_capsule)",
    ),
    row(
        "tensorflow",
        "imports",
        CORE,
        "2.2",
        source="TF 2.2 notes: tf.experimental.dlpack; tensorflow/c/eager/dlpack.cc type table",
    ),
    row(
        "tensorflow",
        "imports",
        {"bfloat16", "bool"},
        "2.21",
        source="tensorflow/c/eager/dlpack.cc (kDLBfloat, kDLBool); probe 2026-11-23 (tensorflow 2.21.0): "
        "shared zero-copy (first version checked)",
    ),
    # fp8: absent. dlpack.cc has no codes 7-17 ("Unsupported Type Codes: 10"), and tf.bitcast
    # does not take tf.dtypes.experimental.float8_* (probe 2026-11-23, tensorflow 2.21.0).
    row(
        "tensorflow",
        "raw_capsules",
        source="tensorflow/python/dlpack/dlpack.py: from_dlpack takes only a 'dltensor' PyCapsule",
    ),
    # versioned_capsules: absent. TFE_FromDlpackCapsule reads 'dltensor' only, and
    # EagerTensor.__dlpack__ ignores max_version (tensorflow/python/framework/ops.py).
    row(
        "tensorflow",
        "row_major_only",
        source="tensorflow/c/eager/dlpack.cc IsValidStrideCompactRowMajorData: 'Invalid strides array "
        "from DLPack' for transposed, sliced, broadcast or negative strides; probe 2026-11-23 (tensorflow 2.21.0)",
    ),
    row("tensorflow", "readonly_arrays", source="tf.Tensor is immutable (no in-place writes through its API)"),
    row(
        "tensorflow",
        "cannot_export",
        {"float4_e2m1fn"},
        source="probe 2026-11-25 (tensorflow 2.21.0): a float4_e2m1fn tensor's __dlpack__ raises "
        "'DT_FLOAT4_E2M1FN is not supported by dlpack' (tensorflow/c/eager/dlpack.cc has no fp4 code)",
    ),
    # float8: not in cannot_export. TF's own export has no float8 codes (tensorflow/c/eager/dlpack.cc; probe
    # 2026-11-23, tensorflow 2.21.0: 'DT_FLOAT8_E4M3FN is not supported by dlpack'), but dlbridge's
    # exports CPU float8 tensors' bytes relabelled, as NumPy's ml_dtypes arrays (TensorflowAdapter.
    # export; probe 2026-11-25, tensorflow 2.21.0: zero-copy); on the GPU the adapter refuses them.
)
