"""Shared fixtures: framework import-or-skip, the CUDA capability check, child processes.

Crash-prone tests are marked ``@pytest.mark.isolated`` (run in a child pytest, tests/_isolated.py;
``env=`` and ``imports=`` give the child an environment or an import order of its own);
``run_child`` runs a script in a fresh interpreter (import-time checks, one-off crash probes, state
a process keeps for good).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import pytest

from dlbridge._adapters._support import findable
from tests import _foreign
from tests._isolated import pytest_configure, pytest_pyfunc_call, pytest_runtest_logreport

_foreign.prepare_environment()  # DLBRIDGE_TEST_FOREIGN_DEFAULT=1: before any framework is imported

__all__ = [
    "need",
    "cuda_reason",
    "cuda",
    "run_child",
    "readme_block",
    "pytest_configure",
    "pytest_pyfunc_call",
    "pytest_runtest_logreport",
]


def need(name: str):
    """Import a framework or skip the test with the reason.

    Import order is respected the way the adapters declare it (``Adapter.unsafe_after``): before a
    module some framework must not follow, that framework is imported first where it is installed;
    a framework whose forbidden predecessor is already loaded is skipped, never imported (a crash).
    """
    import importlib.util

    from dlbridge._adapters import ADAPTERS

    for adapter in ADAPTERS.values():
        if (
            name in adapter.unsafe_after
            and adapter.module not in sys.modules
            and name not in sys.modules
            and findable(adapter.module)
        ):
            import warnings

            with warnings.catch_warnings():  # its import-time notices (paddle: "No ccache found") are not ours
                warnings.simplefilter("ignore")
                importlib.import_module(adapter.module)
        if adapter.module == name and name not in sys.modules:
            loaded = [m for m in adapter.unsafe_after if m in sys.modules]
            if loaded:
                pytest.skip(f"{name} cannot be imported after {loaded[0]} in one process (it crashes)")
    return pytest.importorskip(name, reason=f"{name} is not installed")


def need_supported(name: str):
    """``need(name)``, skipping (with the reason) where the installed version is below dlbridge's floor
    (pyproject's extra, ``dlbridge._rows`` SUPPORT): what dlbridge does there has tests of its own."""
    from dlbridge._capabilities import floor, parse_version

    mod = need(name)
    lowest = floor(name)
    if lowest is not None and parse_version(mod.__version__) < parse_version(lowest):
        pytest.skip(f"{name} {mod.__version__} is below dlbridge's floor {lowest}: tests/test_{name}_versions.py "
                    "checks what dlbridge does with it", allow_module_level=True)  # fmt: skip
    return mod


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


INSTALLED_ENV = "DLBRIDGE_TEST_INSTALLED"  # set by .ci/installed: the suite runs against the installed wheel


def installed_problem() -> str | None:
    """Where ``import dlbridge`` resolves elsewhere than to site-packages (None when it does not)."""
    import sysconfig
    from pathlib import Path

    import dlbridge

    site = Path(sysconfig.get_paths()["platlib"]).resolve()
    found = Path(dlbridge.__file__).resolve().parent
    if found != site / "dlbridge":
        return f"{INSTALLED_ENV}=1, but dlbridge was imported from {found}, not from {site / 'dlbridge'}"
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    """The installed-package run (.ci/installed) stops before any test when dlbridge is not the installed one."""
    if os.environ.get(INSTALLED_ENV) == "1" and (problem := installed_problem()):
        pytest.exit(problem, returncode=3)


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


def run_child(code: str, timeout: float = 120, block: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter: crash-prone cases must not take the suite down. ``block``:
    modules the child cannot import, as if they were not installed (``tests/_blocking.py``)."""
    from tests._blocking import child_code

    script = (child_code(block) if block else "") + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Skips are counted, not listed one by one (addopts has no -rs): one line, each reason once."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        why = str(longrepr[2]).removeprefix("Skipped: ") if isinstance(longrepr, tuple) else "skipped"
        reasons[why] = reasons.get(why, 0) + 1
    if reasons and "s" not in (terminalreporter.config.option.reportchars or ""):
        summary = "; ".join(f"{n}: {why}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
        terminalreporter.write_line(f"skipped ({summary})")


def readme_block(marker: str) -> str:
    """The code block between ``<!-- marker -->`` and ``<!-- /marker -->`` in README.md."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split(f"<!-- {marker} -->\n", 1)[1].split(f"<!-- /{marker} -->", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def cupy_counted_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where CuPy is absent, a conversion into it says "install cupy" first; tests of the device
    messages behind that check use this to reach them (nothing of CuPy is imported or imitated)."""
    from dlbridge._adapters import ADAPTERS

    monkeypatch.setattr(ADAPTERS["cupy"], "check_installed", lambda: None)
