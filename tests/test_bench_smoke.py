"""The benchmark runs end to end (quick mode, in a child process) and its output parses.

No timing assertions: CI machines are too noisy. What is checked is the shape of the output
and the facts the benchmark reports that do not depend on speed (the plan, zero-copy, skips).
"""

from __future__ import annotations

import importlib.util
import json
import math
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
    stdout, data = run_bench(
        tmp_path, "--no-import", "--path", "pure", "--only", "numpy->torch,torch->numpy,torch->cupy"
    )
    assert "native µs" in stdout and "dlbridge µs" in stdout and "ratio" in stdout
    assert {"date", "machine", "versions", "command", "rows", "cuda", "accelerator", "paths"} <= set(data)
    assert {r["path"] for r in data["rows"]} == {"pure"}
    rows = {(r["producer"], r["consumer"], r["device"], r["dtype"]): r for r in data["rows"]}
    for pair in (("numpy", "torch"), ("torch", "numpy")):
        for dtype in ("float32", "bfloat16", "float8_e4m3fn"):
            row = rows[(*pair, "cpu", dtype)]
            assert not row["skipped"], row
            assert row["native_us"] > 0 and row["dlbridge_us"] > 0 and row["ratio"] > 0
            assert row["zero_copy_dlbridge"] is True, row  # pointer check, not speed
            assert row["target"] == 2.3  # pure Python, a NumPy/torch pair
    # bf16 -> NumPy is a reinterpret, timed against NumPy importing the same bytes as uint16.
    bf16 = rows[("torch", "numpy", "cpu", "bfloat16")]
    assert (bf16["mode"], bf16["baseline"]) == ("reinterpret", "uint16")
    assert rows[("torch", "numpy", "cpu", "float8_e4m3fn")]["baseline"] == "uint8"
    # CUDA rows exist; without CUDA they are skipped with the reason, and say so on stdout.
    cuda_rows = [r for r in data["rows"] if r["device"] == "cuda"]
    assert cuda_rows
    assert set(data["cuda"]) == {"torch", "cupy"}  # only the frameworks of the rows asked for
    if data["cuda"]["torch"] != "available" or data["cuda"]["cupy"] != "available":
        assert all(r["skipped"] for r in cuda_rows)
        assert f"{'torch->cupy':<22} cuda (all dtypes, sizes) skipped:" in stdout


def test_both_paths_in_one_run(tmp_path: Path) -> None:
    """Default path in this process, pure Python in a child; each row says which path timed it."""
    need("torch")
    need("numpy")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _cases import accelerator
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    stdout, data = run_bench(tmp_path, "--no-import", "--path", "both", "--only", "numpy->torch float32,torch->torch")
    assert "compiled accelerator" in stdout and "pure Python" in stdout
    assert set(data["paths"]) == {"compiled", "pure"}
    by_path: dict[str, list[dict]] = {"compiled": [], "pure": []}
    for r in data["rows"]:
        by_path[r["path"]].append(r)
    keys = {p: [(r["producer"], r["consumer"], r["dtype"], r["nbytes"]) for r in rows] for p, rows in by_path.items()}
    assert keys["compiled"] == keys["pure"] and ("torch", "torch", "float32", 1024) in keys["pure"]
    pure = {(r["producer"], r["consumer"], r["dtype"]): r for r in by_path["pure"]}
    assert pure[("numpy", "torch", "float32")]["ratio"] > 0 and pure[("torch", "torch", "float32")]["ratio"] > 0
    compiled_built, reason = accelerator()
    if not compiled_built and not reason.startswith("pure Python (DLBRIDGE_PURE_PYTHON"):
        # No accelerator in this build: the compiled half says so instead of repeating the pure one.
        assert all(r["skipped"].startswith("no compiled accelerator") for r in by_path["compiled"])
        assert "no accelerator in this build" in stdout
        pytest.skip(f"compiled half not measured here: {reason}")
    compiled = {(r["producer"], r["consumer"], r["dtype"]): r for r in by_path["compiled"]}
    assert compiled[("numpy", "torch", "float32")]["ratio"] > 0
    assert compiled[("numpy", "torch", "float32")]["target"] == 1.05


def test_tensorflow_and_paddle_rows_are_zero_copy(tmp_path: Path) -> None:
    """One process with both: the benchmark imports paddle first (the other order crashes)."""
    for name in ("tensorflow", "paddle", "torch", "ml_dtypes"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed")
    _, data = run_bench(tmp_path, "--no-import", "--path", "pure", "--only",
                        "torch->tensorflow,paddle->numpy,tensorflow->torch")  # fmt: skip
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
    need("torch")  # the import section times torch's import too
    stdout, data = run_bench(tmp_path, "--only", "no-such-pair")
    assert "python -c pass" in stdout and "with bytecode caches" in stdout
    assert data["rows"] == []
    imports = data["imports"]
    assert imports["import_dlbridge_ms"] > 0 and imports["import_dlbridge_bytecode_ms"] > 0
    assert imports["python_pass_wall_ms"] > 0 and len(imports["import_dlbridge_runs_ms"]) == 3
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


def _plot_input(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A run in bench.py's own JSON format: rows built with its ``Row`` and ``asdict``, as it writes them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from dataclasses import asdict

        from _cases import KIB, MIB, Row
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    rows = [
        Row("numpy", "torch", "cpu", "float32", KIB, "native", "float32", 2.5, 10.9, 4.4, 1.05, False, True, True),
        Row("numpy", "torch", "cpu", "float32", 16 * MIB, "native", "float32", 2.4, 2.5, 1.04, 1.05, True, True, True),
        Row("torch", "numpy", "cpu", "bfloat16", KIB, "reinterpret", "uint16", 4.5, 3.0, 0.66, 1.0, True, True, False),
        Row("jax", "torch", "cpu", "float32", KIB, "native", "float32", 8.8, 16.8, 1.95, 1.0, False, True, True),
        Row("jax", "torch", "cpu", "float32", KIB, "native", "float32", 8.8, 10.1, 1.15, 1.3, True, True, True,
            path="pure"),
        Row("tensorflow", "torch", "cpu", "float8_e4m3fn", KIB, skipped="tensorflow cannot make float8_e4m3fn"),
        Row("torch", "cupy", "cuda", "float32", KIB, skipped="torch: no CUDA device"),
    ]  # fmt: skip
    data = {"date": "2026-11-23 14:47:28", "machine": "Linux x86_64, 2 CPUs (test)", "rounds": 21,
            "versions": {"python": "3.11.7", "dlbridge": "0.1.0", "torch": "2.13.0+cpu", "cupy": "not installed"},
            "command": "benchmarks/bench.py --only cpu --json run.json", "cuda": {}, "imports": {},
            "paths": {"compiled": "in this process: compiled", "pure": "child process: pure Python"},
            "rows": [asdict(r) for r in rows]}  # fmt: skip
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    return path, data["rows"]


def test_plot_draws_a_bar_per_timed_row_and_path_and_the_native_line(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    run, rows = _plot_input(tmp_path)
    out = tmp_path / "ratios.svg"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plot.py"), str(run), str(out),
                           "--note", "a loaded machine"], capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    svg = ET.parse(out).getroot()  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    assert svg.get("width") == "800"
    bars = [e for e in svg.iter(f"{ns}rect") if e.get("class") == "bar"]
    timed = [r for r in rows if not r["skipped"]]
    assert len(bars) == len(timed) == 5
    # Bars in row order, the pure Python bar under the compiled one of the same row; each tooltip
    # names its row and path, and a hollow bar (white fill) marks the copied row.
    tips = [b.find(f"{ns}title").text for b in bars]  # type: ignore[union-attr]
    assert [t.split(":")[0] for t in tips] == [
        "numpy→torch f32 1 KiB (compiled accelerator)", "numpy→torch f32 16 MiB (compiled accelerator)",
        "torch→numpy bf16 1 KiB (compiled accelerator)", "jax→torch f32 1 KiB (compiled accelerator)",
        "jax→torch f32 1 KiB (pure Python)"]  # fmt: skip
    assert [b.get("data-path") for b in bars] == ["compiled"] * 4 + ["pure"]
    assert bars[4].get("stroke") != bars[3].get("stroke")  # one colour per path
    assert float(bars[4].get("y")) > float(bars[3].get("y"))  # type: ignore[arg-type]
    assert [b.get("fill") for b in bars].count("#ffffff") == 1 and bars[2].get("fill") == "#ffffff"
    # Bars grow from the 1.0 line on a log scale: right when slower than native, left when faster.
    (native,) = [e for e in svg.iter(f"{ns}line") if e.get("class") == "native"]
    assert native.get("x1") == native.get("x2")
    one = float(native.get("x1"))  # type: ignore[arg-type]
    xs = [float(b.get("x")) for b in bars]  # type: ignore[arg-type]
    widths = [float(b.get("width")) for b in bars]  # type: ignore[arg-type]
    assert xs[0] == xs[1] == xs[3] == xs[4] == pytest.approx(one, abs=0.11)  # ratios 4.4, 1.04, 1.95, 1.15
    assert xs[2] + widths[2] == pytest.approx(one, abs=0.11)  # ratio 0.66
    assert widths[1] < widths[4] < widths[2] < widths[3] < widths[0]
    assert widths[0] / widths[3] == pytest.approx(math.log(4.4) / math.log(1.95), rel=0.02)
    assert len([e for e in svg.iter(f"{ns}line") if e.get("class") == "target"]) == 5
    text = " ".join(t.text or "" for t in svg.iter(f"{ns}text"))
    assert "2026-11-23 14:47:28" in text and "Linux x86_64, 2 CPUs (test)" in text and "torch 2.13.0+cpu" in text
    assert "cupy" not in text  # "not installed" frameworks are left out of the title
    assert "5 bars (compiled accelerator 4, pure Python 1), 2 rows skipped" in text and "a loaded machine" in text
    assert "compiled: in this process: compiled" in text


def test_plot_rejects_a_file_that_is_not_a_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plot.py"), str(bad), str(tmp_path / "x.svg")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 2 and "expected the JSON of benchmarks/bench.py --json" in proc.stderr
    assert not (tmp_path / "x.svg").exists()


def test_first_call_section_has_a_source_for_every_cpu_framework() -> None:
    """The default run times the first conversion into each CPU framework; each needs a source."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _cases import CPU_FRAMEWORKS
        from _timing import _SOURCES
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert set(CPU_FRAMEWORKS) <= set(_SOURCES)
    for target, setup in _SOURCES.items():
        assert f"import {target}" not in setup, target  # the source must not pre-import the target


def test_rows_into_jax_wait_for_each_result(tmp_path: Path) -> None:
    """JAX returns from an import that copies before the copy is made: its rows time each call with the
    result waited for, on both sides (else a copy's dispatch is timed, and the copies pile up in memory)."""
    need("jax")
    need("torch")
    _, data = run_bench(tmp_path, "--no-import", "--path", "pure", "--only", "numpy->jax float32,numpy->torch float32")
    rows = {(r["consumer"], r["nbytes"]): r for r in data["rows"] if r["device"] == "cpu" and not r["skipped"]}
    assert {c for c, _ in rows} == {"jax", "torch"}, rows
    for (consumer, _), row in rows.items():
        assert ("results waited for" in row["notes"]) == (consumer == "jax"), row


def test_summary_tables_each_pair_and_kind_of_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/summary.py: one line per pair and kind of row, with the ratio range and the rows that met
    their target, from the run's own rows."""
    need("torch")
    need("ml_dtypes")
    _, data = run_bench(tmp_path, "--no-import", "--path", "pure", "--only", "torch->numpy")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import summary
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert summary.main([str(tmp_path / "bench.json"), "--path", "pure"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| torch → numpy")]
    assert [line.split("|")[2].strip() for line in lines] == ["bf16/fp8", "native"], lines
    for line in lines:
        kind = line.split("|")[2].strip()
        rows = [r for r in data["rows"] if r["device"] == "cpu" and not r["skipped"] and summary.kind_of(r) == kind]
        ratios = sorted(r["ratio"] for r in rows)
        assert f"{ratios[0]:.2f}{summary.DASH}{ratios[-1]:.2f}" in line, (line, ratios)
        assert f"| {sum(bool(r['met']) for r in rows)}/{len(rows)} |" in line, (line, rows)


def test_the_floor_benchmark_builds_and_compares_three_handoffs(tmp_path: Path) -> None:
    """benchmarks/bench_floor.py builds its floor (benchmarks/floor.c) with the C compiler, checks that each of
    the three handoffs gives the array's memory, values and dtype, and writes their medians and ratios."""
    _need_exchange_api()
    out_json = tmp_path / "floor.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_floor.py"), "--rounds", "3", "--json", str(out_json)],
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dlbridge - floor" in proc.stdout, proc.stdout
    data = json.loads(out_json.read_text())
    assert set(data["us"]) == {"native", "dlbridge", "floor"} and all(v > 0 for v in data["us"].values())
    assert set(data["ratios"]) == {"dlbridge", "floor"} and data["rounds"] == 3


def test_the_floor_refuses_what_it_was_not_set_up_for() -> None:
    """The floor checks nothing but its argument's type: anything but the set-up class's own arrays is a
    TypeError, not a crash; a setup it cannot use is refused and the earlier one kept (run in a child)."""
    _need_exchange_api()
    code = (
        "import sys, tempfile; sys.path.insert(0, sys.argv[1] + '/benchmarks')\n"
        "import numpy as np, torch, bench_floor\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        "    floor = bench_floor.build_floor(d)\n"
        "    for setup in (False, True):\n"
        "        if setup:\n"
        "            floor.setup(np.ndarray.__dict__['__dlpack__'], torch.Tensor.__dlpack_c_exchange_api__)\n"
        "        for bad in ([1.0], np.ma.masked_array([1.0]), torch.ones(2)) if setup else (np.ones(2),):\n"
        "            try:\n"
        "                floor.to_torch(bad)\n"
        "            except TypeError:\n"
        "                print('refused')\n"
        "    try:\n"
        "        floor.setup(np.ndarray.__dict__['__dlpack__'], object())\n"
        "    except (TypeError, ValueError):\n"
        "        print('kept', floor.to_torch(np.arange(3.0)).tolist())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["refused"] * 4 + ["kept", "[0.0,", "1.0,", "2.0]"], proc.stdout


def _need_exchange_api() -> None:
    """torch with its DLPack C exchange API, and what the floor is built with: a C compiler, CPython's headers."""
    import shutil
    import sysconfig

    torch, np = need("torch"), need("numpy")
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip(f"torch {torch.__version__} has no DLPack C exchange API (the floor imports through it)")
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        pytest.skip(f"NumPy {np.__version__} exports no versioned capsule, which torch's exchange API imports")
    if not (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler to build benchmarks/floor.c")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("no Python.h to build benchmarks/floor.c against")
