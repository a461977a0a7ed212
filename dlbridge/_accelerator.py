"""The optional compiled accelerator: ``dlbridge._accel`` where it was built and matches this source.

``accel`` is that module, or None where dlbridge runs in pure Python; ``reason`` says which and why
(``dlbridge doctor`` prints it). ``DLBRIDGE_PURE_PYTHON`` set to anything but "" or "0" forces pure Python.
Both paths give the same results; the compiled one is only faster.

``import dlbridge`` imports this module, so it imports nothing heavy (no framework, no ctypes, no typing).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["ABI", "ENV_VAR", "accel", "reason"]

# The interface of dlbridge/_csrc/ this source expects (its ABI constant): bump both together, so that a
# module compiled from older C sources is not used with a newer caller.
ABI = 8
ENV_VAR = "DLBRIDGE_PURE_PYTHON"


def _load() -> tuple[ModuleType | None, str]:
    forced = os.environ.get(ENV_VAR, "")
    if forced not in ("", "0"):
        return None, f"pure Python ({ENV_VAR}={forced})"
    try:
        import dlbridge._accel as module  # type: ignore[import-not-found]  # compiled, without a stub
    except ImportError as exc:  # not built: no C compiler or no Python headers at install time
        return None, f"pure Python (no compiled module: {exc})"
    found = getattr(module, "ABI", None)
    if found != ABI:
        return None, (
            f"pure Python (stale compiled module {module.__file__}: ABI {found}, this source expects {ABI}; "
            "rebuild it with `pip install -e .`, or `pip install .` for a non-editable install)"
        )
    return module, f"compiled ({module.__file__})"


accel, reason = _load()
