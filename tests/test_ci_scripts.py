"""The CI scripts' own plumbing, checked without installing anything: ``.ci/edges.py --plan`` looks up
every framework with capability rows (its distribution, module, floor and boundaries) as a run does,
and ``.ci/matrix`` parses. A lookup that fails there fails the whole CI run after the version matrix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dlbridge._capabilities import table

ROOT = Path(__file__).resolve().parent.parent


def test_edges_plans_every_framework_with_rows() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "edges.py"), "--plan", "--supported"],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    planned = {line.split()[0] for line in done.stdout.splitlines() if "floor" in line and "boundaries" in line}
    skipped = {line.split()[1].rstrip(":") for line in done.stdout.splitlines() if line.startswith("=== ")}
    with_rows = {row.consumer for row in table()}
    assert with_rows <= planned | skipped, (with_rows - planned - skipped, done.stdout)
    assert "pyarrow" in planned  # a producer-only framework with rows of its own


def test_the_matrix_script_parses() -> None:
    done = subprocess.run(["bash", "-n", str(ROOT / ".ci" / "matrix")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
