"""Capability rows: Apache Arrow (pyarrow), a producer only. Each row names its source (see dlbridge._capabilities).

dlbridge reads ``pyarrow.Array`` and ``pyarrow.Tensor`` and converts into no Arrow type, so these
rows speak of its exports only.
"""

from __future__ import annotations

from ._common import Row, Support, row

_WHEELS = "probe 2026-11-27 (pyarrow 25.0.1 and 26.0.1 wheels)"
_H100 = "dlbridge report on an NVIDIA H100, 2026-11-27 (pyarrow 25.0.1)"
VERSIONED_SINCE = "26"  # the first release whose __dlpack__ takes max_version (apache/arrow PR #50827)

SUPPORT = Support(extra=("pyarrow>=26",), probed=("25", "26"))

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
