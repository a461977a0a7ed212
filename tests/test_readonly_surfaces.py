"""The read-only rule where it is shown rather than applied: ``dlbridge explain --readonly``, the
report's refusal reasons and legend, and the benchmark's JAX rows (timed with ``readonly="drop"``,
zero-copy as JAX's own ``from_dlpack`` consumers share it).

The rule itself (``_handoff.decide``) and its routes are tested in tests/test_readonly_policy.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dlbridge
from dlbridge._report._markdown import _producers_only, _reason
from dlbridge._report._model import Attempt, Cell, Report
from tests._arrays import jax_cpu
from tests.conftest import need

ROOT = Path(__file__).resolve().parent.parent
BOTH_FIXES = 'copy=True or readonly="drop"'


def _explain_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "dlbridge", "explain", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def test_cli_explain_takes_readonly() -> None:
    need("torch")
    need("jax")
    keep = _explain_cli("jax", "float32", "torch", "--json")
    assert keep.returncode == 0, keep.stderr
    record = json.loads(keep.stdout)
    assert record["error"] == "ReadOnlyError" and record["shares"] is False
    assert 'readonly="drop"' in record["message"] and "copy=True" in record["message"]
    drop = _explain_cli("jax", "float32", "torch", "--readonly", "drop", "--json")
    assert drop.returncode == 0, drop.stderr
    record = json.loads(drop.stdout)
    assert record["error"] is None and record["shares"] is True
    assert any('readonly="drop"' in step for step in record["steps"]), record["steps"]
    bad = _explain_cli("jax", "float32", "torch", "--readonly", "maybe")
    assert bad.returncode == 2 and "--readonly" in bad.stderr


def _refused_cell(producer: str) -> tuple[Cell, Report]:
    """A report cell holding the ReadOnlyError dlbridge really raises for a JAX array into torch."""
    need("torch")
    need("jax")
    with pytest.raises(dlbridge.ReadOnlyError) as raised:
        dlbridge.to_torch(jax_cpu([0, 1, 2, 3], "float32"))
    attempt = Attempt(status="error", error=f"ReadOnlyError: {raised.value}", clean=True)
    cell = Cell(producer, "cpu", "torch", "float32", attempts={"dlbridge": attempt})
    report = Report(meta={"readonly_sources": [f"{producer}:cpu"]}, versions={}, cells=[cell], not_made=[],
                    caps={"torch": {"version": "2.13.0"}})  # fmt: skip
    return cell, report


def test_the_report_names_both_fixes_as_dlbridge_does() -> None:
    cell, report = _refused_cell("jax")
    assert _reason(cell, report) == (
        f"ReadOnlyError: jax's arrays are read-only and torch 2.13.0 arrays cannot be (pass {BOTH_FIXES})"
    )
    legend = "\n".join(_producers_only(report))
    assert "Every array of jax on cpu is read-only (its framework's arrays are immutable" in legend
    assert '`copy=True` converts, `readonly="drop"` shares' in legend
    # a message that names only copy=True (an older dlbridge's JSON re-rendered) is not credited with both
    cell.attempts["dlbridge"] = Attempt(status="error", error="ReadOnlyError: ... Pass copy=True.", clean=True)
    assert _reason(cell, report).endswith("(pass copy=True)")


def test_the_benchmark_times_jax_rows_zero_copy_with_readonly_drop(tmp_path: Path) -> None:
    need("torch")
    need("jax")
    out_json = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--quick", "--rounds", "2", "--json", str(out_json),
         "--no-import", "--path", "pure", "--only", "jax->torch float32,torch->jax float32"],
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {(r["producer"], r["consumer"]): r for r in json.loads(out_json.read_text())["rows"] if r["device"] == "cpu"}
    jax_torch = rows[("jax", "torch")]
    assert not jax_torch["skipped"] and jax_torch["zero_copy_dlbridge"] is True, jax_torch
    assert jax_torch["readonly"] == "drop" and 'readonly="drop"' in jax_torch["notes"]
    torch_jax = rows[("torch", "jax")]  # torch's arrays are writable: timed as the default call
    assert not torch_jax["skipped"] and torch_jax["readonly"] == "keep", torch_jax
