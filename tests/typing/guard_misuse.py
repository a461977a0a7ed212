"""Checked by ``mypy --strict`` in tests/test_guard_typing.py, never imported: misuses mypy must report."""

from __future__ import annotations

import dlbridge


def body(x: int) -> int:
    return x


dlbridge.guard(body)  # E: a bare @dlbridge.guard
dlbridge.guard("numpy", fallback="veiw")  # E: not a fallback
dlbridge.guard(5)  # E: not a framework
