"""The `dlbridge` command line: names, exit codes, `python -m dlbridge`, and `dlbridge doctor`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from dlbridge._cli import main
from dlbridge._report._cases import REPORTED, installed_frameworks
from dlbridge._report._doctor import hazards, installed_versions

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "tests" / "child_hooks"  # a sitecustomize for child processes (see its docstring)


def _python(*args: str, timeout: float = 60, block: str = "") -> subprocess.CompletedProcess[str]:
    """Run Python in a child; ``block``: comma-separated modules the child (and its children) cannot import."""
    paths = [str(HOOKS)] if block else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [*paths, str(ROOT), os.environ.get("PYTHONPATH")]))}
    if block:
        env["DLBRIDGE_TEST_BLOCK"] = block
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _dist_version(name: str) -> str:
    """The installed version of a framework, from the first of its adapter's distributions found."""
    for dist in REPORTED[name].distributions:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return next(metadata.version(d) for d in metadata.packages_distributions()[REPORTED[name].module])


@pytest.mark.parametrize(
    ("option", "bad", "valid"),
    [
        ("--frameworks", "theano", "valid frameworks: " + ", ".join(REPORTED)),
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
    err = capsys.readouterr().err
    assert f"{missing[0]} not installed here (installed frameworks: " in err
    assert f'install with pip install "dlbridge[{ADAPTERS[missing[0]].extra}]"' in err


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
        f"print('LOADED', [m for m in {[a.module for a in REPORTED.values()] + ['ml_dtypes']} if m in sys.modules])"
    )
    start = time.perf_counter()
    done = _python("-c", code)
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    elapsed = float(next(ln for ln in lines if ln.startswith("ELAPSED")).split()[1])
    assert elapsed < 2.0 and wall < 5.0, (elapsed, wall)  # wall includes interpreter start-up
    assert lines[-1] == "LOADED []"
    for name in installed_frameworks():
        assert f"{name}" in done.stdout and _dist_version(name) in done.stdout


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
        assert versions[name] == _dist_version(name)


def test_version_flag_prints_the_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"dlbridge {dlbridge.__version__}"


def test_report_help_has_a_description_and_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Probe every producer x consumer x dtype" in text
    assert "(default: every installed one)" in text and "(default: 60.0)" in text and "default: standard output" in text
    assert "--svg PATH" in text and "bf16, e4m3fn" in text


def test_report_without_ml_dtypes_probes_every_other_dtype():
    # ml_dtypes only gives NumPy its bf16/fp8 dtypes: float32/float16 must still be probed, for
    # every producer, and the skipped cells must say that ml_dtypes is what is missing.
    fws = ",".join(f for f in ("torch", "numpy") if f in installed_frameworks())
    done = _python("-m", "dlbridge", "report", "--frameworks", fws, "--dtypes", "f32,f16,bf16,e4m3fn", "--jobs", "1",
                   block="ml_dtypes", timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    md = done.stdout
    assert "| ml_dtypes | not installed |" in md
    for producer in fws.split(","):
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| {producer}:cpu → numpy |"))
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert cells[0] != "—" and cells[1] != "—", row  # f32 and f16 probed
    numpy_row = next(ln for ln in md.splitlines() if ln.startswith("| numpy:cpu → numpy |"))
    assert numpy_row.count("—") == 2, numpy_row  # NumPy's bf16 and fp8: skipped ...
    skipped = md.split("**Not probed")[1].split("\n")[0]
    assert "numpy:cpu: bf16, e4m3fn (needs ml_dtypes, which is not installed (pip install ml_dtypes))" in skipped
    if "torch" in fws:  # torch makes bf16 and fp8 without ml_dtypes: probed
        assert "torch:cpu:" not in skipped
        assert "| torch:cpu → torch | ✓ | ✓ | ✓ | ✓ |" in md


def test_report_and_doctor_without_any_framework_say_what_to_install():
    done = _python("-m", "dlbridge", "report", block=",".join(a.module for a in REPORTED.values()))
    assert done.returncode == 2
    assert "is installed, so there is nothing to probe" in done.stderr
    assert all(f'"dlbridge[{a.extra}]"' in done.stderr or a.extra in done.stderr for a in REPORTED.values())
    doctor = _python("-m", "dlbridge", "doctor", block=",".join(a.module for a in REPORTED.values()))
    assert doctor.returncode == 0
    assert "no framework is installed" in doctor.stdout and 'pip install "dlbridge[' in doctor.stdout
    assert "once a framework is installed, run `dlbridge report`" in doctor.stdout


def test_report_without_numpy_probes_torch():
    # The report's reference arrays are plain bytes: a stack without NumPy is probed all the same.
    if "torch" not in installed_frameworks():
        pytest.skip("torch is not installed")
    done = _python("-W", "ignore", "-m", "dlbridge", "report", "--frameworks", "torch", "--dtypes", "f32,bf16,e4m3fn",
                   "--jobs", "1", block="numpy,ml_dtypes", timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| numpy | not installed |" in done.stdout
    assert "| torch:cpu → torch | ✓ | ✓ | ✓ |" in done.stdout, done.stdout


def test_a_registered_adapter_is_listed_by_doctor_and_the_cli():
    # Adding a framework is one adapter: doctor and the report's option checks pick it up from the registry.
    code = """
from dlbridge._adapters import register
import tests.toy_adapter as toy  # a complete adapter (every abstract method), renamed

class Newframe(toy.ToyAdapter):
    display, extra = "NewFrame", "newframe"

toy.Newframe = Newframe
register(toy.FRAMEWORK._replace(name="newframe", module="dlbridge_test_no_such_module", producer_modules=(),
                                array_type=("dlbridge_test_no_such_module", "Array"),
                                adapter="tests.toy_adapter:Newframe"), ())
from dlbridge._cli import main
assert main(["doctor"]) == 0
assert main(["report", "--frameworks", "newframe"]) == 2
"""
    done = _python("-c", code)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^  newframe +not installed$", done.stdout, re.M), done.stdout
    assert "newframe not installed here" in done.stderr and 'pip install "dlbridge[newframe]"' in done.stderr


def test_doctor_names_an_import_order_hazard_from_the_adapter(monkeypatch):
    # An adapter whose framework crashes when imported after another module (unsafe_after) gets a hazard line.
    host = next(a for a in ADAPTERS.values() if a.framework.host)
    monkeypatch.setattr(host, "unsafe_after", ("json",), raising=False)  # json: a module that is always there
    lines = hazards({host.name: "2.0.0"})
    assert f"{host.display} 2.0.0 crashes the process when imported after json: import it first" in " ".join(lines)
    monkeypatch.setattr(host, "unsafe_after", ("dlbridge_test_no_such_module",), raising=False)
    assert not any("imported after" in h for h in hazards({host.name: "2.0.0"}))
