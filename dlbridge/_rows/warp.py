"""Capability rows: NVIDIA Warp (warp.from_dlpack). Each row names its source (see dlbridge._capabilities)."""

from __future__ import annotations

from ._common import INTS, Framework, Row, Support, row

_PROBE = "probe 2026-11-25 (warp-lang 1.19.0, torch 2.13.0)"

# probed: warp-lang 1.19.0 (latest stack)
SUPPORT = Support(extra=("warp-lang>=1.19", "numpy>=1.26"), probed=("1.19", "1.19"))

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="warp",
    module="warp",
    array_type=("warp", "array"),
    adapter="dlbridge._adapters._warp:WarpAdapter",
    aliases=("wp", "warp-lang"),
    producer_modules=("warp",),
)

ROWS: tuple[Row, ...] = (
    row(
        "warp",
        "imports",
        INTS | {"float16", "float32", "float64", "bfloat16", "bool"},
        "1.19",
        source=f"warp/_src/dlpack.py dtype_from_dlpack; {_PROBE}: shared zero-copy (first version checked)",
    ),
    # complex: absent ("Warp does not support complex types"); float8: absent ("Unknown DLPack
    # datatype (10, 8)"), and Warp has no float8 dtype to view bytes as (warp/_src/dlpack.py).
    row(
        "warp", "raw_capsules", source="warp/_src/dlpack.py from_dlpack: 'legacy behaviour, assume source is a capsule'"
    ),
    # versioned_capsules: absent. _from_dlpack checks PyCapsule_IsValid(capsule, "dltensor") only,
    # and array.__dlpack__(stream=None) takes no max_version.
    row(
        "warp",
        "negative_strides",
        since="1.19",
        source=f"warp/_src/dlpack.py _unpack_array keeps the capsule's strides (in bytes, signed); {_PROBE}: "
        "numpy a[::-1] reads back reversed, same address",
    ),
    row(
        "warp",
        "ndim",
        ndim=(1, 4),
        source="warp/_src/types.py ARRAY_MAX_DIMS = 4 (array.__init__ line 3568: 'the maximum number of "
        f"dimensions is 4'); {_PROBE}, repeated 2026-11-27: warp.from_dlpack of a 5-d NumPy capsule raises that "
        "RuntimeError, of a 0-d one IndexError ('list assignment index out of range')",
    ),
    # readonly_arrays: absent (warp arrays have no read-only state). compact_only: absent (transposed,
    # sliced and broadcast strides shared, probe as above).
)
