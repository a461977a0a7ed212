"""The `dlbridge` command line: names, exit codes, `python -m dlbridge`, and `dlbridge doctor`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from dlbridge._cli import main
from dlbridge._report._cases import installed_frameworks
from dlbridge._report._doctor import hazards, installed_versions

ROOT = Path(__file__).resolve().parents[1]


def _python(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.parametrize(
    ("option", "bad", "valid"),
    [
        ("--frameworks", "mxnet", "valid frameworks: torch, cupy, jax, numpy, paddle, tensorflow"),
        ("--devices", "tpu", "valid devices: cpu, cuda"),
        ("--dtypes", "float32,bfloat17", "bfloat16"),
    ],
)
def test_unknown_names_list_the_valid_ones(capsys, option, bad, valid):
    assert main(["report", option, bad]) == 2
    err = capsys.readouterr().err
    assert f"unknown {option[2:-1]} {bad.split(',')[-1]!r}" in err and valid in err


def test_a_framework_that_is_not_installed_is_refused(capsys):
    missing = [f for f in ("cupy", "jax", "torch") if f not in installed_frameworks()]
    if not missing:
        pytest.skip("every framework is installed here")
    assert main(["report", "--frameworks", missing[0]]) == 2
    assert f"{missing[0]} not installed here; installed frameworks: " in capsys.readouterr().err


def test_aliases_and_short_dtype_names_are_accepted(tmp_path, capsys):
    out = tmp_path / "m.md"
    assert main(["report", "--frameworks", "np", "--dtypes", "f32,bf16", "--devices", "cpu", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| numpy:cpu → numpy |" in text and "| f32 | bf16 |" in text
    err = capsys.readouterr().err
    assert "\r[" not in err  # no progress bar when stderr is not a terminal
    assert "wrote" in err


def test_report_without_out_prints_markdown(capsys):
    assert main(["report", "--frameworks", "numpy", "--dtypes", "float32"]) == 0
    assert capsys.readouterr().out.startswith("# dlbridge compatibility matrix")


def test_unknown_subcommand_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_python_dash_m_dlbridge():
    done = _python("-m", "dlbridge", "--help")
    assert done.returncode == 0 and "report" in done.stdout and "doctor" in done.stdout


def test_doctor_is_fast_imports_no_framework_and_lists_versions():
    code = (
        "import sys, time; t = time.perf_counter(); from dlbridge._cli import main; rc = main(['doctor']); "
        "print('ELAPSED', time.perf_counter() - t, rc); "
        "print('LOADED', [m for m in ('torch', 'jax', 'cupy', 'numpy', 'ml_dtypes') if m in sys.modules])"
    )
    start = time.perf_counter()
    done = _python("-c", code)
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    elapsed = float(next(ln for ln in lines if ln.startswith("ELAPSED")).split()[1])
    assert elapsed < 2.0 and wall < 5.0, (elapsed, wall)  # wall includes interpreter start-up
    assert lines[-1] == "LOADED []"
    for name in ("numpy", "torch", "jax"):
        if name in installed_frameworks():
            assert f"{name}" in done.stdout and metadata.version(name) in done.stdout


def test_doctor_hazards_come_from_the_table():
    old = hazards({"cupy": "13.3.0"})
    assert any(h.startswith("CuPy 13.3.0 crashes the process on a capsule it rejects") for h in old)
    assert not any("crashes" in h for h in hazards({"cupy": "13.4.0"}))
    assert any("negative strides" in h and "aborting" in h for h in hazards({"torch": "2.13.0"}))
    x64 = [h for h in hazards({"jax": "0.10.2"}) if "64-bit" in h]
    assert x64 if os.environ.get("JAX_ENABLE_X64", "").lower() not in ("1", "true", "yes") else not x64


def test_installed_versions_match_metadata():
    versions = installed_versions()
    import dlbridge

    assert versions["dlbridge"] == dlbridge.__version__
    for name in installed_frameworks():
        assert versions[name] == metadata.version(name) or name == "cupy"
