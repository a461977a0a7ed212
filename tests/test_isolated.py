"""``@pytest.mark.isolated`` (tests/_isolated.py): each test reports its own outcome from the child,
and a child that dies fails the test it was running while the others still run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODULE = """
import os, pytest

pytestmark = pytest.mark.isolated

def test_a_passes():
    assert os.environ["DLBRIDGE_ISOLATED_CHILD"] == "1"  # it really ran in the child

def test_b_fails():
    assert 1 + 1 == 3, "the child's own message"

def test_c_skips():
    pytest.skip("a reason from the child")

def test_d_aborts():
    os.abort()  # as torch does on a capsule it mis-handles

def test_e_runs_after_the_crash():
    pass
"""


def test_isolated_tests_report_their_own_outcomes_and_survive_a_crash(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("from tests._isolated import pytest_pyfunc_call, pytest_runtest_logreport\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    isolated: child\n")
    (tmp_path / "test_child.py").write_text(textwrap.dedent(MODULE))
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_ISOLATED_CHILD"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", "test_child.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "2 failed, 2 passed, 1 skipped" in out, out
    assert "PASSED test_child.py::test_a_passes" in out
    assert "FAILED test_child.py::test_b_fails" in out and "the child's own message" in out
    assert "SKIPPED" in out and "a reason from the child" in out
    assert "FAILED test_child.py::test_d_aborts" in out and "killed by a signal" in out
    assert "PASSED test_child.py::test_e_runs_after_the_crash" in out  # in a fresh child
