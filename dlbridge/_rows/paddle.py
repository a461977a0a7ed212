"""Capability rows: PaddlePaddle (paddle.from_dlpack). Each row names its source (see dlbridge._capabilities)."""

from __future__ import annotations

from ._common import CORE, WIDE_UINTS, Framework, Row, Support, row

# probed: paddlepaddle 3.3.1 (latest stack)
SUPPORT = Support(extra=("paddlepaddle>=3.3",), probed=("3.3", "3.3"))

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="paddle",
    module="paddle",
    array_type=("paddle", "Tensor"),
    adapter="dlbridge._adapters._paddle:PaddleAdapter",
    aliases=("paddlepaddle",),
    producer_modules=("paddle",),
)

ROWS: tuple[Row, ...] = (
    row(
        "paddle",
        "imports",
        CORE - WIDE_UINTS,
        "2.0",
        source="Paddle 2.0 notes: paddle.utils.dlpack; paddle/fluid/framework/dlpack_tensor.cc type table",
    ),
    row(
        "paddle",
        "imports",
        {"uint32", "uint64", "bfloat16", "bool"},
        "3.3",
        source="paddle/fluid/framework/dlpack_tensor.cc; probe 2026-11-23 (paddlepaddle 3.3.1): shared "
        "zero-copy (first version checked)",
    ),
    # uint16: absent on purpose. Paddle imports DLPack uint16 as its bfloat16 (it stores bf16 as
    # uint16): different values under the same bits (probe 2026-11-23, paddlepaddle 3.3.1).
    row(
        "paddle",
        "imports",
        {"float8_e4m3fn", "float8_e5m2"},
        "3.3",
        source="Paddle PR #75205 (DLPack 1.1: fp8 codes); probe 2026-11-23 (paddlepaddle 3.3.1)",
    ),
    row("paddle", "raw_capsules", source="python/paddle/utils/dlpack.py: from_dlpack takes a PyCapsule"),
    row(
        "paddle",
        "versioned_capsules",
        since="3.3",
        source="Paddle PR #75205 (DLPack 1.1, versioned capsules, max_version); probe 2026-11-23 (paddlepaddle 3.3.1)",
    ),
    # negative_strides: absent. paddle 3.3.1 computes a 2**64-byte size for numpy's a[::-1] and
    # raises MemoryError; readonly_arrays: absent, it ignores READ_ONLY and writes through
    # (probe 2026-11-23, paddlepaddle 3.3.1). Other strides (transposed, sliced, 0) are shared.
)
