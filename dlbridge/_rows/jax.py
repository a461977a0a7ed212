"""Capability rows: JAX (jax.dlpack.from_dlpack). Each row names its source (see dlbridge._capabilities)."""

from __future__ import annotations

from .._dtypes import FLOAT8
from ._common import (
    CORE,
    JAX_COPY_FIXED,
    JAX_FP4_UNTIL,
    JAX_LAYOUTS_SINCE,
    ML_DTYPES_05,
    ML_DTYPES_FP4,
    NEW_FP8,
    Framework,
    Row,
    Support,
    row,
)

# probed: the version matrix (0.4.30, 0.7.1, 0.10.2, 0.12.0) and the rows' probes; 0.11.2 on the H100 run
SUPPORT = Support(extra=("jax>=0.4.30", "numpy>=1.26", "ml_dtypes>=0.4"), probed=("0.4.30", "0.12"))

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="jax",
    module="jax",
    array_type=("jax", "Array"),
    adapter="dlbridge._adapters._jax:JaxAdapter",
    module_aliases=("jax.numpy",),
    producer_modules=("jax", "jaxlib"),
)

ROWS: tuple[Row, ...] = (
    row("jax", "imports", CORE, "0.2", source="jax.dlpack.from_dlpack (jaxlib dlpack.cc type table)"),
    row("jax", "imports", {"bfloat16"}, "0.2.10", source="jaxlib dlpack.cc: kDLBfloat <-> BF16 (jax 0.2.10)"),
    row(
        "jax",
        "imports",
        {"bool"},
        "0.4.24",
        source="jaxlib dlpack.cc: kDLBool <-> PRED (jaxlib 0.4.24); probe 2026-11-23 (jax 0.4.23 refuses it)",
    ),
    row(
        "jax",
        "imports",
        FLOAT8 - NEW_FP8,
        "0.5.3",
        source="jaxlib 0.5.3 dlpack.cc: float8 type codes; probe 2026-11-23 (jax 0.5.3, 0.7.1, 0.10.2)",
    ),
    row(
        "jax",
        "imports",
        NEW_FP8,
        "0.5.3",
        requires=ML_DTYPES_05,
        source="probe 2026-11-23 (jax 0.5.3 + ml_dtypes 0.4.1: 'Unimplemented primitive type F8E8M0FNU'; "
        "ml_dtypes 0.5 defines these types)",
    ),
    row(
        "jax",
        "imports",
        {"float4_e2m1fn"},
        "0.5.3",
        JAX_FP4_UNTIL,
        requires=ML_DTYPES_05,
        source="probe 2026-11-23 (jax 0.5.3, 0.7.1, 0.7.2, 0.8.0, 0.9.0 import their own float4_e2m1fn; jax 0.10.2: "
        "'PjRt CPU buffers only support default layout'); probe 2026-11-27 (.ci/edges, jax+jaxlib 0.9.0, 0.9.0.1, "
        "0.9.1 import it; 0.9.2 and 0.10.0 refuse it so, with ml_dtypes 0.6.0)",
    ),
    row(
        "jax",
        "holds",
        {"float4_e2m1fn"},
        "0.5.3",
        requires=ML_DTYPES_FP4,
        source="probe 2026-11-25 (jax 0.10.2, ml_dtypes 0.6.0): jax.device_put of an ml_dtypes float4_e2m1fn array "
        "keeps its values; its capsule (17, 4, 1) holds them packed two a byte, value 2i in the low nibble, C order "
        "over the whole array (dlbridge hands it over repacked or relabelled, see dlbridge._pipeline._subbyte)",
    ),
    row(
        "jax",
        "exports_uint8",
        {"bool"},
        until="0.4.24",
        source="probe 2026-11-23 (jax 0.4.23: a bool array's capsule says uint8; jaxlib dlpack.cc maps PRED to "
        "kDLBool since 0.4.24)",
    ),
    row(
        "jax",
        "cannot_export",
        FLOAT8,
        until="0.5.3",
        source="probe 2026-11-23 (jax 0.4.30): __dlpack__ raises 'XLA type F8E4M3FN has no DLPack equivalent'",
    ),
    row(
        "jax",
        "raw_capsules",
        until="0.7.2",
        source="JAX 0.7.2 changelog: from_dlpack no longer accepts DLPack capsules",
    ),
    row(
        "jax",
        "raw_capsules_deprecated",
        since="0.4.35",
        source="jax/_src/dlpack.py (0.4.35): DeprecationWarning 'Calling from_dlpack with a DLPack tensor is "
        "deprecated'; probe 2026-11-23 (jax 0.4.30, 0.4.31 silent; 0.4.35, 0.7.1 warn)",
    ),
    row(
        "jax",
        "row_major_only",
        until=JAX_LAYOUTS_SINCE,
        source="probe 2026-11-23: jax 0.4.30-0.7.1 refuse transposed raw capsules ('non-default layout'), "
        "jax 0.7.1 imports torch's .t() with wrong values, 0.7.2 refuses it; jax 0.8.0 and 0.10.2 import it right",
    ),
    row(
        "jax",
        "copy_crashes_unaligned",
        until=JAX_COPY_FIXED,
        source="probe 2026-11-23 (jax 0.4.23, 0.4.30, 0.4.31; not 0.4.35): jnp.array(x, copy=True) segfaults for x "
        "imported from an unaligned float32 (1, 4) buffer (address % 64 == 4)",
    ),
    row(
        "jax",
        "copies_unaligned",
        since=JAX_COPY_FIXED,
        source="probe 2026-11-23: jax 0.4.35 and 0.7.1 copy an unaligned float32 (1, 4) buffer ('DLPack buffer is "
        "not aligned ... Creating a copy', jaxlib dlpack.cc); probe 2026-11-25 (jax 0.10.2): an mlx buffer at an "
        "address % 64 == 8 is copied",
    ),
    row(
        "jax",
        "shares_unaligned",
        until=JAX_COPY_FIXED,
        source="probe 2026-11-23: jax 0.4.30 and 0.4.31 share an unaligned float32 (1, 4) buffer; 0.4.35 and 0.7.1 "
        "copy it ('DLPack buffer is not aligned ... Creating a copy', jaxlib dlpack.cc)",
    ),
    row(
        "jax",
        "compact_only",
        source="jaxlib dlpack.cc: 'Only DLPack tensors with trivial (compact) striding'; probe 2026-11-22",
    ),
    row("jax", "readonly_arrays", source="jax.Array is immutable"),
    row(
        "jax",
        "aborts_on_null_deleter",
        source="jaxlib/dlpack.cc (jax-ml/jax 036dff6, DLPackManagedTensorToBuffer, MakePjrtBuffer): "
        "'std::function<void()> on_delete_callback; if (dlmt->deleter) {...}' stays empty for a NULL deleter "
        "(which DLPack allows: python_spec.rst, 'the deleter can be NULL') and goes to CreateViewOfDeviceBuffer; "
        "openxla/xla xla/pjrt/cpu/cpu_device_memory.cc keeps it as an absl::AnyInvocable (CreateForeignMemory), "
        "which an empty std::function does not leave empty (absl/functional/internal/any_invocable.h: only null "
        "pointers and empty AnyInvocables are), so ~CpuDeviceMemoryForeign calls it: std::bad_function_call, "
        "terminate. Probe 2026-11-27 (jax 0.4.30, 0.7.1, 0.10.2): jax.dlpack.from_dlpack of a legacy float32[16] "
        "capsule with a NULL deleter aborts the process when the array is released; torch 2.13, numpy 2.4.6, "
        "tensorflow 2.21, paddle 3.3.1, mlx 0.32.4, array-api-strict 2.6.1, onnxruntime 1.32, warp 1.19 release it "
        "safely (tests/test_trust_deleter.py)",
    ),
)
