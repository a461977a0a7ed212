"""``@pytest.mark.isolated`` (tests/_isolated.py): each test reports its own outcome from the child,
a child that dies fails the test it was running while the others still run, and ``env=`` /
``imports=`` give a group of tests the child environment it needs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFTEST = "from tests._isolated import pytest_configure, pytest_pyfunc_call, pytest_runtest_logreport\n"

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
    (tmp_path / "conftest.py").write_text(CONFTEST)
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
    assert re.search(r"SKIPPED \[1\] test_child\.py:\d+: a reason from the child", out), out  # not _isolated.py
    assert "FAILED test_child.py::test_d_aborts" in out and "killed by a signal" in out
    assert "PASSED test_child.py::test_e_runs_after_the_crash" in out  # in a fresh child


GROUPED = """
import os, sys, pytest

AT_COLLECTION = list(getattr(sys, "ORDER", []))  # what the child had imported before this module


def record(group):
    with open("pids.txt", "a") as f:
        f.write(f"{group} {os.getpid()}\\n")


@pytest.mark.isolated(env={"DLBRIDGE_TEST_FLAG": "a"}, imports=("first_mod", "second_mod"))
def test_a1():
    record("a")
    assert os.environ["DLBRIDGE_TEST_FLAG"] == "a" and AT_COLLECTION == ["first", "second"]


@pytest.mark.isolated(imports=("first_mod", "second_mod"), env={"DLBRIDGE_TEST_FLAG": "a"})
def test_a2():
    record("a")


@pytest.mark.isolated(env={"DLBRIDGE_TEST_FLAG": None}, imports=("second_mod", "first_mod", "not_installed_mod"))
def test_b():
    record("b")
    assert "DLBRIDGE_TEST_FLAG" not in os.environ and AT_COLLECTION == ["second", "first"]


@pytest.mark.isolated
def test_c():
    record("c")
    assert os.environ["DLBRIDGE_TEST_FLAG"] == "parent" and AT_COLLECTION == []


def test_d_in_the_parent():
    assert "DLBRIDGE_ISOLATED_CHILD" not in os.environ
"""


def test_isolated_env_and_imports_group_tests_per_child(tmp_path: Path) -> None:
    """``isolated(env=..., imports=...)``: each (module, env, imports) runs in its own child, with the
    environment set or removed and the modules imported first, in their order."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    isolated: child\n")
    for name, tag in (("first_mod", "first"), ("second_mod", "second")):
        (tmp_path / f"{name}.py").write_text(f"import sys\nsys.ORDER = [*getattr(sys, 'ORDER', []), {tag!r}]\n")
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent(GROUPED))
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_ISOLATED_CHILD"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tmp_path), env.get("PYTHONPATH", "")])
    env["DLBRIDGE_TEST_FLAG"] = "parent"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", "test_grouped.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "5 passed" in out and proc.returncode == 0, out
    pids: dict[str, set[str]] = {}
    for line in (tmp_path / "pids.txt").read_text().splitlines():
        group, pid = line.split()
        pids.setdefault(group, set()).add(pid)
    assert sorted(pids) == ["a", "b", "c"] and all(len(p) == 1 for p in pids.values()), pids  # one child per group
    assert len(set.union(*pids.values())) == 3, pids  # three children


def test_isolated_refuses_arguments_it_does_not_know(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    isolated: child\n")
    (tmp_path / "test_bad.py").write_text(
        "import pytest\n\n@pytest.mark.isolated(envs={'A': '1'})\ndef test_typo():\n    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_ISOLATED_CHILD"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_bad.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "isolated takes only env= and imports=" in out, out
