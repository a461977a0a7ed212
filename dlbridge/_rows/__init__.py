"""The capability table's rows, one module per framework (its consumer and producer facts).

Adding a framework adds one module here with its ``ROWS``, listed in ``MODULES`` below.

The versions at each row's ``since``/``until`` boundary, and the release just below it, are installed and checked
against ``dlbridge report --strict`` by ``.ci/edges``; ``compat_edges.md`` at the repository root lists which
versions were checked and what they showed.
"""

from __future__ import annotations

from . import array_api_strict, cupy, jax, mlx, numpy, onnxruntime, paddle, tensorflow, torch, warp
from ._common import FEATURES, KINDS, PRODUCER_KINDS, Row, row

__all__ = ["FEATURES", "KINDS", "PRODUCER_KINDS", "Row", "row", "TABLE"]

MODULES = (torch, cupy, jax, numpy, tensorflow, paddle, mlx, array_api_strict, onnxruntime, warp)
TABLE: tuple[Row, ...] = tuple(r for module in MODULES for r in module.ROWS)
