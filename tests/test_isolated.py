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


CLEAN = """
import os, signal, pytest

pytestmark = pytest.mark.isolated


def _inherited():
    return sorted(k for k in os.environ if k == "PYTEST_ADDOPTS" or k.startswith("PYTEST_XDIST_"))


def test_a_starts_clean(pytestconfig):
    assert os.environ["DLBRIDGE_ISOLATED_CHILD"] == "1" and os.environ["DLBRIDGE_TEST_FLAG"] == "parent"
    assert _inherited() == [], _inherited()
    assert [p for p in ("xdist", "benchmark", "cacheprovider") if not pytestconfig.pluginmanager.is_blocked(p)] == []


def test_b_kills_its_own_process():
    os.kill(os.getpid(), signal.SIGKILL)


def test_c_a_fresh_child_starts_clean_too():
    assert _inherited() == [], _inherited()
"""


def _outer_pytest(tmp_path: Path, module: str, conftest: str = CONFTEST, **extra_env: str) -> str:
    """Run a pytest over ``module`` (as test_mod.py in ``tmp_path``) the way the suite runs: its output."""
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\nmarkers =\n    isolated: child\n")
    (tmp_path / "test_mod.py").write_text(textwrap.dedent(module))
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_ISOLATED_CHILD"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra_env)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", "test_mod.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    return proc.stdout + proc.stderr


def test_the_child_starts_clean_of_the_parents_run(tmp_path: Path) -> None:
    """Under xdist (its PYTEST_XDIST_* variables) and with PYTEST_ADDOPTS set, a child inherits neither,
    and loads no xdist, benchmark or cache plugin; a child that kills itself fails that one test, and the
    next test runs in a fresh child that starts as clean."""
    out = _outer_pytest(
        tmp_path, CLEAN, DLBRIDGE_TEST_FLAG="parent", PYTEST_ADDOPTS="-p no:doctest",
        PYTEST_XDIST_WORKER="gw3", PYTEST_XDIST_WORKER_COUNT="4", PYTEST_XDIST_TESTRUNUID="0123abcd",
    )  # fmt: skip
    assert "1 failed, 2 passed" in out, out
    assert "PASSED test_mod.py::test_a_starts_clean" in out
    assert "FAILED test_mod.py::test_b_kills_its_own_process" in out and "killed by a signal" in out
    assert "PASSED test_mod.py::test_c_a_fresh_child_starts_clean_too" in out


STARTUP_FAILS = (
    CONFTEST.replace("pytest_configure, ", "pytest_configure as isolated_configure, ")
    + """
import os


def pytest_configure(config):
    isolated_configure(config)
    if os.environ.get("DLBRIDGE_ISOLATED_CHILD") == "1":
        raise RuntimeError("this child cannot start")
"""
)


def test_a_child_that_cannot_start_is_one_failure(tmp_path: Path) -> None:
    """A child pytest that dies before any test (an INTERNALERROR at its start) is reported once, on the
    group's first test, with its output; the group's other tests say they did not run."""
    module = "import pytest\n\npytestmark = pytest.mark.isolated\n\n" + "".join(
        f"def test_{n}():\n    pass\n\n\n" for n in ("one", "two", "three")
    )
    out = _outer_pytest(tmp_path, module, STARTUP_FAILS)
    assert "1 failed, 2 skipped" in out, out
    assert "FAILED test_mod.py::test_one" in out and "this child cannot start" in out
    # the child's output once (the short summary after it may repeat the failure's first lines: pytest < 8)
    assert out.split("short test summary info")[0].count("RuntimeError: this child cannot start") == 1, out
    assert "not run: the child pytest exited" in out and "(see test_mod.py::test_one)" in out, out
