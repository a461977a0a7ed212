"""Which hot path runs: the compiled accelerator (``dlbridge._accel``) or pure Python.

``DLBRIDGE_PURE_PYTHON=1`` forces pure Python. Imports nothing heavy (read by ``import dlbridge``).
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["accel", "reason"]

ABI = 1  # the _accel.c interface this Python code expects (its ACCEL_ABI)


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("DLBRIDGE_PURE_PYTHON", "") not in ("", "0"):
        return None, "pure Python (DLBRIDGE_PURE_PYTHON is set)"
    try:
        from . import _accel
    except ImportError as err:
        return None, f"pure Python (no compiled module: {err})"
    if getattr(_accel, "ABI", None) != ABI:
        return None, "pure Python (the compiled module is from another version of dlbridge; rebuild: pip install -e .)"
    return _accel, f"compiled ({_accel.__file__})"


accel, reason = _load()
