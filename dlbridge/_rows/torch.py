"""Capability rows: torch (torch.from_dlpack). Each row names its source (see dlbridge._capabilities)."""

from __future__ import annotations

from ._common import CORE, TORCH_FP8, WIDE_UINTS, Framework, Row, Support, row

# probed: torch 2.13 in every stack of the version matrix; 2.11.0+cu130 on the H100 run of 2026-11-27
SUPPORT = Support(extra=("torch>=2.13",), probed=("2.11", "2.13"))

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="torch",
    module="torch",
    array_type=("torch", "Tensor"),
    adapter="dlbridge._adapters._torch:TorchAdapter",
    aliases=("pytorch",),
    producer_modules=("torch",),
)

ROWS: tuple[Row, ...] = (
    row(
        "torch",
        "imports",
        CORE - WIDE_UINTS | {"bfloat16"},
        "1.10",
        source="torch 1.10 release notes: torch.from_dlpack; aten/src/ATen/DLConvertor.cpp: kDLBfloat since 1.9",
    ),
    row(
        "torch", "imports", {"bool"}, "2.2", source="aten/src/ATen/DLConvertor.cpp: kDLBool <-> torch.bool (torch 2.2)"
    ),
    row(
        "torch",
        "imports",
        WIDE_UINTS,
        "2.3",
        source="torch 2.3 release notes: uint16/uint32/uint64 tensors (DLConvertor.cpp maps kDLUInt of every width)",
    ),
    row(
        "torch",
        "imports",
        TORCH_FP8 | {"float4_e2m1fn_x2"},
        "2.10",
        source="aten/src/ATen/DLConvertor.cpp (torch 2.10): kDLFloat8_* codes 10-14 and kDLFloat4_e2m1fn both ways; "
        "probe 2026-11-23 (torch 2.13)",
    ),
    row("torch", "holds", {"float8_e4m3fn", "float8_e5m2"}, "2.1", source="torch 2.1 notes: float8 dtypes"),
    row("torch", "holds", {"float8_e4m3fnuz", "float8_e5m2fnuz"}, "2.2", source="torch 2.2 notes: fnuz float8 dtypes"),
    row("torch", "holds", {"float8_e8m0fnu"}, "2.7", source="torch 2.7 notes: float8_e8m0fnu"),
    row(
        "torch",
        "raw_capsules",
        since="1.10",
        source="torch/utils/dlpack.py from_dlpack: 'if not hasattr(ext_tensor, \"__dlpack__\")' takes the capsule "
        "as is (both names); probe 2026-11-23 (torch 2.13)",
    ),
    row(
        "torch",
        "versioned_capsules",
        since="2.9",
        source="torch 2.9 release notes: DLPack 1.0 (max_version, dl_device, copy; 'dltensor_versioned' capsules)",
    ),
    row(
        "torch",
        "offset_needs_strides",
        source="probe 2026-11-22 (torch 2.13): 'Expected zero byte_offset' for NULL strides; NumPy 2.4 and JAX 0.10 import it",
    ),
    # negative_strides: absent on purpose. torch 2.13 aborts the process
    # ("Storage size calculation overflowed") on numpy's a[::-1] capsule (probe 2026-11-22).
)
