"""Shared fixtures: framework import-or-skip, the CUDA capability check, array factories."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest


def need(name: str):
    """Import a framework or skip the test with the reason."""
    return pytest.importorskip(name, reason=f"{name} is not installed")


def cuda_reason() -> str | None:
    """Why CUDA tests cannot run here (None when they can)."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    return None


@pytest.fixture
def cuda():
    reason = cuda_reason()
    if reason:
        pytest.skip(reason)


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter: crash-prone cases must not take the suite down."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
    )
