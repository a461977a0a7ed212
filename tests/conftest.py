"""Shared fixtures: framework import-or-skip, the CUDA capability check, array factories."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import pytest


def need(name: str):
    """Import a framework or skip the test with the reason."""
    return pytest.importorskip(name, reason=f"{name} is not installed")


def caps_of(name: str):
    """The capability table's row for the installed ``name`` (skips the test when it is missing):
    tests that depend on a version ask it rather than assume today's versions."""
    from dlbridge._capabilities import capabilities

    return capabilities(name, need(name).__version__)


def option_model_gap() -> str | None:
    """Why the option-space models (guard, options) do not describe the installed stack, if they do not:
    they model read-only NumPy arrays as DLPack 1.0 exports (NumPy >= 2.1) and JAX float8 as
    exportable (JAX >= 0.5.3). Those versions are covered by the table-driven tests instead."""
    if not caps_of("numpy").versioned_capsules:
        return f"the option model assumes NumPy >= 2.1 (read-only exports); NumPy {caps_of('numpy').version} is older"
    if caps_of("jax").cannot_export:
        return f"the option model assumes JAX >= 0.5.3 (float8 exports); JAX {caps_of('jax').version} is older"
    return None


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


def run_child_pytest(test_file: str, flag: str, expect_passed: int, tmp_path=None, timeout: float = 900) -> None:
    """Run ``test_file``'s ``-k property`` tests in a child pytest with ``flag=1`` set (they hand
    consumers layouts that abort the process when something regresses: a crash fails one test).

    ``$DLBRIDGE_FALLBACK`` is dropped (no fallback= means "raise"); hypothesis keeps its files in
    ``tmp_path`` when given, so failure patches stay out of the checkout.
    """
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_FALLBACK"}
    env[flag] = "1"
    if tmp_path is not None:
        env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "property", test_file],
        capture_output=True, text=True, env=env, timeout=timeout,
    )  # fmt: skip
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"child exited {proc.returncode} (negative: killed by a signal):\n{tail}"
    assert f"{expect_passed} passed" in proc.stdout, tail
