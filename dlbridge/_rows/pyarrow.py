"""Apache Arrow (pyarrow ``Array`` and ``Tensor``): a source only. dlbridge reads its arrays (their states,
errors and read-only exports) and converts into no Arrow type, so these rows speak of its exports only.
Each row names its source (see dlbridge._capabilities)."""

from __future__ import annotations

from ._common import Framework, Row, Support, row

_WHEELS = "probe 2026-11-27 (pyarrow 25.0.1 and 26.0.1 wheels)"
_H100 = "dlbridge report on an NVIDIA H100, 2026-11-27 (pyarrow 25.0.1)"
VERSIONED_SINCE = "26"  # the first release whose __dlpack__ takes max_version (apache/arrow PR #50827)

SUPPORT = Support(extra=("pyarrow>=26",), probed=("25", "26"))

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives. A Tensor is
# no Array subclass: it is recognised by its module (producer_modules) and the adapter's is_array.
FRAMEWORK = Framework(
    name="pyarrow",
    module="pyarrow",
    array_type=("pyarrow", "Array"),
    adapter="dlbridge._adapters._pyarrow:PyarrowAdapter",
    producer_modules=("pyarrow",),
    target=False,
)

ROWS: tuple[Row, ...] = (
    row(
        "pyarrow",
        "exports_legacy_only",
        until=VERSIONED_SINCE,
        source="apache/arrow GH-41670, PR #50827 (pyarrow 26: __dlpack__ takes max_version and copy, versioned "
        "capsules flagged READ_ONLY; a Tensor's data from raw_data, 'instead of mutable_raw_data that is not "
        f"available on immutable tensors'); {_WHEELS}: 25.0.1's Array/Tensor.__dlpack__ raises TypeError on max_version, and an "
        f"immutable Tensor's legacy capsule has a NULL data pointer (26.0.1 refuses that export instead: "
        f"'Legacy DLPack support is not implemented for immutable tensors'); {_H100}: NULL-data capsules",
    ),
)
