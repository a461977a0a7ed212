"""``@pytest.mark.isolated``: tests that run in a child pytest, so a crash fails one test, not the suite.

The parent collects the tests as usual; the first isolated test of a module to run starts one child
pytest with every selected isolated test of that module, and each test then reports the child's outcome
for it (its failure text, its skip reason). A child that dies (a signal, a timeout) fails the test it
was running with the child's last output; the tests it had not reached run in a fresh child. Nothing
is counted by hand: the child reports per test.

The marker takes what the child needs that the parent must not have (both optional):

- ``env={"NAME": "value"}``: set in the child's environment (a value of ``None`` removes the name),
  e.g. ``env={"DLBRIDGE_PURE_PYTHON": "1"}`` to run on the pure-Python path, or ``XLA_FLAGS`` that
  JAX reads once, when its backend starts;
- ``imports=("paddle", "tensorflow")``: modules the child imports first, in this order, before it
  collects anything (frameworks that crash when imported the other way round); a module that is
  not installed is passed over, and the tests that need it skip with their own reason.

Tests are grouped per (module, env, imports): each group runs in its own child pytest, so a module
whose tests share one marker starts one child.

The child starts clean: it inherits the parent's environment but not its command line, so nothing that
stands for the parent's command line in the environment is passed on (``PYTEST_ADDOPTS``, pytest-xdist's
``PYTEST_XDIST_*``), and the child never loads the plugins that would act on a run it is only a part of
(``-p no:xdist -p no:benchmark -p no:cacheprovider``). A child that cannot start at all (an error at its
start-up, before any test) fails the group's first test with its output; the group's other tests are
reported as not run (skipped, naming that test), not as failures of their own.

The hooks are re-exported by ``tests/conftest.py``; the marker is registered in ``pyproject.toml``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHILD_ENV = "DLBRIDGE_ISOLATED_CHILD"  # set in the child: isolated tests run in-process there
REPORT_ENV = "DLBRIDGE_ISOLATED_REPORT"  # the child's per-test outcomes, one JSON line per phase
IMPORTS_ENV = "DLBRIDGE_ISOLATED_IMPORTS"  # comma-separated modules the child imports first, in order
TIMEOUT_S = 900.0
IN_CHILD = os.environ.get(CHILD_ENV) == "1"
# Not passed on to the child: options meant for the parent's run (PYTEST_ADDOPTS: "-n 14" would make each
# child start its own workers), the test running in the parent (PYTEST_CURRENT_TEST), and pytest-xdist's
# worker variables (PYTEST_XDIST_WORKER, _WORKER_COUNT, _TESTRUNUID). pytest-benchmark takes a process with
# PYTEST_XDIST_WORKER set for an xdist worker and warns that benchmarks are disabled
# (pytest_benchmark/session.py, 5.3.1, lines 76-80 and 116-120), which filterwarnings=error turns into an
# INTERNALERROR of the whole child.
NOT_INHERITED = frozenset({"PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST", "DLBRIDGE_FALLBACK", IMPORTS_ENV})
NOT_INHERITED_PREFIXES = ("PYTEST_XDIST_",)
# The child runs one group's tests in order, in its own process: no workers of its own (xdist), no
# benchmarks, no cache shared with the parent. "-p no:NAME" for a plugin that is not installed is accepted
# (pytest only records the name as blocked).
CHILD_ARGS = ("-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:benchmark", "-rN")


@dataclass
class Outcome:
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)  # "setup"/"call"/"teardown" -> report
    crash: str | None = None  # why the child did not finish this test
    not_run: str | None = None  # why this test never ran (the child failed before any test: reported once)


_outcomes: dict[str, Outcome] = {}  # nodeid -> what the child reported
Group = tuple[Path, tuple[tuple[str, str | None], ...], tuple[str, ...]]  # (module, env, imports)


def group_of(item: pytest.Item) -> Group | None:
    """The child ``item`` runs in: (its module, the markers' env, their imports); None if not isolated. An item
    may carry several ``isolated`` markers (the test's own and a parameter's, as ``on_both_paths`` adds one
    for the pure-Python path): their env and imports are merged (for a name given twice, the first marker pytest lists wins)."""
    markers = list(item.iter_markers("isolated"))
    if not markers:
        return None
    env: dict[str, str | None] = {}
    imports: list[str] = []
    for marker in markers:
        unknown = set(marker.kwargs) - {"env", "imports"}
        if marker.args or unknown:
            raise pytest.UsageError(
                f"{item.nodeid}: isolated takes only env= and imports=, got {marker.args} {unknown}"
            )
        for name, value in (marker.kwargs.get("env") or {}).items():
            env.setdefault(name, value)
        imports.extend(name for name in marker.kwargs.get("imports") or () if name not in imports)
    return item.path, tuple(sorted(env.items())), tuple(imports)


def pytest_configure(config: pytest.Config) -> None:
    """In a child: import the marker's ``imports`` first, in their order (installed ones only)."""
    if not IN_CHILD:
        return
    import importlib
    import importlib.util
    import warnings

    for name in filter(None, os.environ.get(IMPORTS_ENV, "").split(",")):
        if importlib.util.find_spec(name) is not None:
            with warnings.catch_warnings():  # import-time notices (paddle: "No ccache found") are not ours
                warnings.simplefilter("ignore")
                importlib.import_module(name)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(REPORT_ENV)
    if not IN_CHILD or not path:
        return
    entry = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome}
    if report.skipped and hasattr(report, "wasxfail"):  # an expected failure: xfail again in the parent
        entry["xfail"] = str(report.wasxfail) or "expected to fail"
    elif report.skipped and isinstance(report.longrepr, tuple):
        entry["text"] = str(report.longrepr[2]).removeprefix("Skipped: ")  # pytest.skip adds it again
    elif report.failed:
        entry["text"] = report.longreprtext
    with open(path, "a", encoding="utf-8") as f:  # line by line: a crash keeps what came before
        f.write(json.dumps(entry) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if IN_CHILD or pyfuncitem.get_closest_marker("isolated") is None:
        return None
    outcome = _outcomes.get(pyfuncitem.nodeid)
    if outcome is None:
        _run_module_in_child(pyfuncitem)
        outcome = _outcomes[pyfuncitem.nodeid]
    _report(outcome)
    return True


def _report(outcome: Outcome) -> None:
    if outcome.crash is not None:
        pytest.fail(outcome.crash, pytrace=False)
    if outcome.not_run is not None:
        raise pytest.skip.Exception(outcome.not_run, _use_item_location=True)
    for when in ("setup", "call", "teardown"):
        phase = outcome.phases.get(when)
        if phase is None:
            continue
        if phase["outcome"] == "failed":
            pytest.fail(f"in the child ({when}):\n{phase.get('text', '')}", pytrace=False)
        if phase["outcome"] == "skipped" and "xfail" in phase:
            pytest.xfail(phase["xfail"])
        if phase["outcome"] == "skipped":  # reported at the test's own location, as a skip mark is
            raise pytest.skip.Exception(phase.get("text", "skipped in the child"), _use_item_location=True)


def _child_env(group: Group) -> dict[str, str]:
    """The parent's environment without what belongs to the parent's own run (DLBRIDGE_FALLBACK: the
    child starts from the default, "raise"), with the marker's ``env``."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED and not k.startswith(NOT_INHERITED_PREFIXES)}
    for name, value in group[1]:
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    env[CHILD_ENV] = "1"
    if group[2]:
        env[IMPORTS_ENV] = ",".join(group[2])
    return env


def _run_module_in_child(item: pytest.Function) -> None:
    """Run every selected isolated test of ``item``'s group (module, env, imports) in child pytests;
    fill ``_outcomes``."""
    group = group_of(item)
    assert group is not None
    pending = [other.nodeid for other in item.session.items if group_of(other) == group]
    env = _child_env(group)
    with tempfile.TemporaryDirectory(prefix="dlbridge-isolated-") as tmp:
        env["HYPOTHESIS_STORAGE_DIRECTORY"] = tmp  # failure patches stay out of the checkout
        for attempt in range(len(pending)):
            if not pending:
                break
            report = Path(tmp) / f"report-{attempt}.jsonl"
            env[REPORT_ENV] = str(report)
            args = [sys.executable, "-m", "pytest", *CHILD_ARGS, *pending]
            try:
                proc = subprocess.run(
                    args, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, cwd=item.config.rootpath
                )
                ended = f"exited {proc.returncode}" + (" (killed by a signal)" if proc.returncode < 0 else "")
                tail = (proc.stdout + proc.stderr)[-3000:]
            except subprocess.TimeoutExpired as err:
                ended = f"ran past {TIMEOUT_S:.0f} s and was killed"
                tail = _text(err.stdout)[-2000:] + _text(err.stderr)[-2000:]
            seen = _read(report)
            pending = _settle(pending, seen, ended, tail)


def _settle(pending: list[str], seen: dict[str, Outcome], ended: str, tail: str) -> list[str]:
    """Record finished tests; blame the one the child died in; return the ones it never reached."""
    rest = []
    for nodeid in pending:
        outcome = seen.get(nodeid)
        if outcome is not None and "teardown" in outcome.phases:
            _outcomes[nodeid] = outcome
        elif outcome is not None:  # started, never finished: the child died here
            outcome.crash = f"the child pytest {ended} while running this test:\n{tail}"
            _outcomes[nodeid] = outcome
        else:
            rest.append(nodeid)
    if len(rest) == len(pending):  # nothing ran at all (its start-up or collection failed): no retry would help
        first, *others = rest
        _outcomes[first] = Outcome(crash=f"the child pytest {ended} before running any test:\n{tail}")
        for nodeid in others:
            _outcomes[nodeid] = Outcome(
                not_run=f"not run: the child pytest {ended} before running any test (see {first})"
            )
        return []
    return rest


def _read(report: Path) -> dict[str, Outcome]:
    seen: dict[str, Outcome] = {}
    if report.exists():
        for line in report.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            seen.setdefault(entry["nodeid"], Outcome()).phases[entry["when"]] = entry
    return seen


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")
