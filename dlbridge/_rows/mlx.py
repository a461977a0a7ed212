"""Capability rows: MLX (mlx.core.from_dlpack). Each row names its source (see dlbridge._capabilities).

Probed on the CPU build (``mlx[cpu]`` on Linux); MLX's Metal and CUDA builds are not covered.
"""

from __future__ import annotations

from ._common import CORE, Framework, Row, Support, row

_PROBE = "probe 2026-11-25 (mlx 0.32.4 cpu, torch 2.13, numpy 2.4.6)"

# probed: mlx 0.32.4, its Linux CPU build (latest stack)
SUPPORT = Support(extra=("mlx[cpu]>=0.32",), probed=("0.32", "0.32"))

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="mlx",
    module="mlx.core",
    array_type=("mlx.core", "array"),
    adapter="dlbridge._adapters._mlx:MlxAdapter",
    aliases=("mlx",),
    producer_modules=("mlx",),
)

ROWS: tuple[Row, ...] = (
    row(
        "mlx",
        "imports",
        CORE - {"float64", "complex128"} | {"bfloat16", "bool"},
        "0.32",
        source=f"{_PROBE}: mx.from_dlpack imports each with its dtype and values (first version checked)",
    ),
    # float64 and complex128: not "imports". mx.from_dlpack narrows them without a word (float64 ->
    # float32, complex128 -> complex64; probe above). MLX holds float64 (on its CPU stream): dlbridge
    # imports the bits as uint64 and views them as float64, so the values arrive unchanged. MLX has
    # no complex128, and no float8 (its from_dlpack refuses float8: "[convert] Cannot convert array to mlx").
    row(
        "mlx",
        "holds",
        {"float64"},
        "0.32",
        source=f"{_PROBE}: mx.array.view(mx.float64) of an imported uint64 array gives the float64 values, same buffer",
    ),
    row(
        "mlx",
        "raw_capsules",
        since="0.32",
        source=f"{_PROBE}: mx.from_dlpack takes a bare 'dltensor' or 'dltensor_versioned' capsule",
    ),
    row(
        "mlx",
        "versioned_capsules",
        since="0.32",
        source=f"{_PROBE}: mx.from_dlpack reads 'dltensor_versioned' capsules (its own __dlpack__ exports legacy "
        "ones whatever max_version says)",
    ),
    row(
        "mlx",
        "copies_imports",
        since="0.32",
        source=f"{_PROBE}: mx.from_dlpack copies every CPU capsule (64-byte and page-aligned ones too); "
        "from_dlpack(x, copy=False) raises '[convert] Cannot import a CPU array without a copy'",
    ),
    # negative_strides: absent ("Cannot convert DLPack arrays with negative strides to mlx array",
    # probe above); transposed, sliced and broadcast strides are copied right. readonly_arrays: absent
    # (MLX arrays carry no read-only flag).
)
