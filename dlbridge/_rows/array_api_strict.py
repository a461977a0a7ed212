"""Capability rows: array-api-strict (array_api_strict.from_dlpack). Each row names its source (see
dlbridge._capabilities).

array-api-strict wraps NumPy arrays: its ``from_dlpack`` is ``numpy.from_dlpack`` followed by a check
that the dtype is one of the standard's (array_api_strict/_creation_functions.py, _array_object.py),
so what it shares and reads follows the installed NumPy.
"""

from __future__ import annotations

from ._common import CORE, Framework, Row, Support, row

_PROBE = "probe 2026-11-25 (array-api-strict 2.6.1, numpy 2.4.6, torch 2.13)"

# probed: array-api-strict 2.6.1 (latest stack)
SUPPORT = Support(extra=("array-api-strict>=2.6", "numpy>=2.1"), probed=("2.6", "2.6"))

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives.
FRAMEWORK = Framework(
    name="array_api_strict",
    module="array_api_strict",
    array_type=("array_api_strict._array_object", "Array"),
    adapter="dlbridge._adapters._array_api_strict:ArrayApiStrictAdapter",
    aliases=("array-api-strict",),
    producer_modules=("array_api_strict",),
)

ROWS: tuple[Row, ...] = (
    row(
        "array_api_strict",
        "imports",
        CORE - {"float16"} | {"bool"},
        "2.6",
        source=f"array_api_strict/_dtypes.py (the standard's dtypes: no float16); {_PROBE}: shared zero-copy "
        "(first version checked)",
    ),
    # float16: absent ("The array_api_strict namespace does not support the dtype 'float16'"); bfloat16
    # and float8: absent (NumPy's "Unsupported dtype in DLTensor"). It has no bitcast, so it holds
    # nothing beyond what it imports: fallback="view" gives a same-width uint view.
    row(
        "array_api_strict",
        "versioned_capsules",
        since="2.6",
        requires="numpy>=2.1",
        source=f"{_PROBE}: from_dlpack is numpy.from_dlpack, which reads 'dltensor_versioned' since NumPy 2.1",
    ),
    row(
        "array_api_strict",
        "readonly_arrays",
        since="2.6",
        requires="numpy>=2.1",
        source=f"{_PROBE}: a READ_ONLY capsule becomes an array over a read-only NumPy array (NumPy 2.1 notes)",
    ),
    row(
        "array_api_strict",
        "negative_strides",
        since="2.6",
        source=f"{_PROBE}: numpy.from_dlpack keeps the strides it is given; array-api-strict wraps the result",
    ),
)
