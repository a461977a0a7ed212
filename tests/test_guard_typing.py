"""How ``@dlbridge.guard`` is typed, pinned by running ``mypy --strict`` on tests/typing/*.py (skipped
where mypy is not installed): a guarded function takes any framework's arrays and returns ``Any``
(awaitable / generator kept), ``returns=None`` keeps the body's return type, and misuse (a bare
``@dlbridge.guard``, an unknown fallback, a number as target) is reported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parent.parent
TYPING = Path(__file__).resolve().parent / "typing"


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(name: str, cache: Path) -> subprocess.CompletedProcess[str]:
    # --no-site-packages and --follow-imports=silent: dlbridge is checked from this tree, and no
    # framework's stubs are read (seconds, not minutes); errors are reported for the file only.
    # In the installed-package run (.ci/installed) this tree has no dlbridge/: mypy reads the installed
    # one from site-packages, with the frameworks' stubs there (slower; one cache for both tests).
    where = ["--no-incremental", "--no-site-packages"] if (ROOT / "dlbridge").is_dir() else ["--cache-dir", str(cache)]
    cmd = [sys.executable, "-m", "mypy", "--strict", *where,
           "--follow-imports=silent", "--no-error-summary", "--hide-error-context", str(TYPING / name)]  # fmt: skip
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_guarded_functions_accept_any_array_and_return_any_under_mypy_strict(mypy_cache: Path) -> None:
    done = _mypy("guard_usage.py", mypy_cache)
    assert done.returncode == 0, done.stdout + done.stderr


def test_guard_misuse_is_reported_by_mypy_strict_on_each_marked_line(mypy_cache: Path) -> None:
    source = (TYPING / "guard_misuse.py").read_text().splitlines()
    expected = {i for i, line in enumerate(source, 1) if "# E:" in line}
    done = _mypy("guard_misuse.py", mypy_cache)
    reported = {int(m.group(1)) for m in re.finditer(r"guard_misuse\.py:(\d+): error:", done.stdout)}
    assert expected and reported == expected, done.stdout + done.stderr
