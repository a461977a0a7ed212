"""The benchmark runs end to end (quick mode, in a child process) and its output parses.

No timing assertions: CI machines are too noisy. What is checked is the shape of the output
and the facts the benchmark reports that do not depend on speed (the plan, zero-copy, skips).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import need

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "bench.py"


def run_bench(tmp_path: Path, *args: str) -> tuple[str, dict]:
    out_json = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--rounds", "2", "--json", str(out_json), *args],
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, json.loads(out_json.read_text())


def test_quick_run_parses(tmp_path: Path) -> None:
    need("torch")
    need("numpy")
    need("ml_dtypes")
    stdout, data = run_bench(tmp_path, "--no-import", "--only", "numpy->torch,torch->numpy,torch->cupy")
    assert "native µs" in stdout and "dlbridge µs" in stdout and "ratio" in stdout
    assert {"date", "machine", "versions", "command", "rows", "cuda"} <= set(data)
    rows = {(r["producer"], r["consumer"], r["device"], r["dtype"]): r for r in data["rows"]}
    for pair in (("numpy", "torch"), ("torch", "numpy")):
        for dtype in ("float32", "bfloat16", "float8_e4m3fn"):
            row = rows[(*pair, "cpu", dtype)]
            assert not row["skipped"], row
            assert row["native_us"] > 0 and row["dlbridge_us"] > 0 and row["ratio"] > 0
            assert row["zero_copy_dlbridge"] is True, row  # pointer check, not speed
            assert row["target"] in (1.10, 1.25)
    # bf16 -> NumPy is a reinterpret, timed against NumPy importing the same bytes as uint16.
    bf16 = rows[("torch", "numpy", "cpu", "bfloat16")]
    assert (bf16["mode"], bf16["baseline"], bf16["target"]) == ("reinterpret", "uint16", 1.25)
    assert rows[("torch", "numpy", "cpu", "float8_e4m3fn")]["baseline"] == "uint8"
    # CUDA rows exist; without CUDA they are skipped with the reason, and say so on stdout.
    cuda_rows = [r for r in data["rows"] if r["device"] == "cuda"]
    assert cuda_rows
    assert set(data["cuda"]) == {"torch", "cupy"}  # only the frameworks of the rows asked for
    if data["cuda"]["torch"] != "available" or data["cuda"]["cupy"] != "available":
        assert all(r["skipped"] for r in cuda_rows)
        assert "torch->cupy     cuda (all dtypes, sizes) skipped:" in stdout


def test_tensorflow_and_paddle_rows_are_zero_copy(tmp_path: Path) -> None:
    """One process with both: the benchmark imports paddle first (the other order crashes)."""
    for name in ("tensorflow", "paddle", "torch", "ml_dtypes"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed")
    _, data = run_bench(tmp_path, "--no-import", "--only", "torch->tensorflow,paddle->numpy,tensorflow->torch")
    rows = {(r["producer"], r["consumer"], r["dtype"]): r for r in data["rows"] if r["device"] == "cpu"}
    assert data["versions"]["tensorflow"] != "not installed" and data["versions"]["paddle"] != "not installed"
    for pair in (("torch", "tensorflow"), ("paddle", "numpy"), ("tensorflow", "torch")):
        row = rows[(*pair, "float32")]
        assert not row["skipped"] and row["zero_copy_dlbridge"] is True, row
    assert rows[("torch", "tensorflow", "float8_e4m3fn")]["mode"] == "view"
    assert rows[("paddle", "numpy", "bfloat16")]["mode"] == "reinterpret"
    assert "float8" in rows[("tensorflow", "torch", "float8_e4m3fn")]["skipped"]  # TF cannot make or export it


def test_import_section_parses(tmp_path: Path) -> None:
    need("numpy")
    stdout, data = run_bench(tmp_path, "--only", "no-such-pair")
    assert data["rows"] == []
    imports = data["imports"]
    assert imports["import_dlbridge_ms"] > 0
    assert imports["frameworks_loaded_by_import"] == []
    assert "import dlbridge (fresh interpreter" in stdout
    assert set(imports["first_call"]) == {"numpy"}  # --quick times only the cheap one
    fig = imports["first_call"]["numpy"]
    assert fig["first_ms"] > 0 and fig["second_us"] > 0 and fig["import_alone_ms"] > 0, fig
    assert "first to_numpy():" in stdout


@pytest.mark.parametrize("bad", [["--rounds", "x"], ["--nope"], ["--first-call", "mxnet"]])
def test_bad_arguments_exit_nonzero(bad: list[str]) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), *bad], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr
