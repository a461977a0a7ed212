"""The capability table's rows, one module per framework (its consumer and producer facts).

Adding a framework adds one module here with its ``ROWS`` and ``SUPPORT``, listed in ``MODULES`` below.
"""

from __future__ import annotations

from . import array_api_strict, cupy, jax, mlx, numpy, onnxruntime, paddle, pyarrow, tensorflow, torch, warp
from ._common import FEATURES, KINDS, PRODUCER_KINDS, Row, Support, row

__all__ = ["FEATURES", "KINDS", "PRODUCER_KINDS", "Row", "Support", "row", "TABLE", "SUPPORT"]

MODULES = (torch, cupy, jax, numpy, tensorflow, paddle, mlx, array_api_strict, onnxruntime, warp, pyarrow)
TABLE: tuple[Row, ...] = tuple(r for module in MODULES for r in module.ROWS)
# framework name (its module's) -> its floors (pyproject's extra) and the releases its rows were probed on
SUPPORT: dict[str, Support] = {module.__name__.rpartition(".")[2]: module.SUPPORT for module in MODULES}
