"""The compiled accelerator's loader: compiled where it was built, pure Python otherwise, and why.

Each case runs in a fresh interpreter, because the loader decides once, at import. The cases without
a compiled module run a copy of the package that has none (or has a stale one), not a test switch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dlbridge
from dlbridge._accelerator import ABI, ENV_VAR
from tests.conftest import need

ROOT = Path(__file__).resolve().parents[1]
# The package the children import from ROOT: the checkout's, or in the installed-package run (.ci/installed,
# where ROOT has no dlbridge/) the one in site-packages.
PACKAGE = Path(dlbridge.__file__).parent
SHOW = "from dlbridge import _accelerator as a; print(a.accel is not None); print(a.reason)"
DOCTOR = "import runpy, sys; sys.argv = ['dlbridge', 'doctor']; runpy.run_module('dlbridge', run_name='__main__')"
# An editable install's finder (setuptools puts one on sys.meta_path) would find dlbridge._accel in the
# source tree for a copy of the package too; the child drops it, so the copy is all it sees.
UNEDITABLE = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path if not f.__module__.startswith('__editable__')]\n"
)
NOT_BUILT = "dlbridge._accel is not built here (`pip install -e .` compiles it where a C compiler exists)"


def _compiled() -> Path | None:
    return next((p for p in PACKAGE.glob("_accel.*") if p.suffix in (".so", ".pyd")), None)


def _run(code: str, root: Path = ROOT, pure: str | None = None) -> subprocess.CompletedProcess[str]:
    """``code`` in a child that imports dlbridge from ``root``, with $DLBRIDGE_PURE_PYTHON unset or ``pure``."""
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    env["PYTHONPATH"] = str(root)
    if pure is not None:
        env[ENV_VAR] = pure
    argv = [sys.executable, "-c", UNEDITABLE + code]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=root)
    assert done.returncode == 0, done.stderr
    return done


def _loaded(root: Path = ROOT, pure: str | None = None) -> tuple[bool, str]:
    used, reason = _run(SHOW, root, pure).stdout.splitlines()[-2:]
    return used == "True", reason


def _copy_without_accel(tmp_path: Path) -> Path:
    shutil.copytree(
        PACKAGE, tmp_path / "dlbridge", ignore=shutil.ignore_patterns("_accel.*.so", "*.pyd", "__pycache__")
    )
    return tmp_path


def test_compiled_module_is_used_by_default() -> None:
    built = _compiled()
    if built is None:
        pytest.skip(NOT_BUILT)
    assert _loaded() == (True, f"compiled ({built})")
    abi = _run("from dlbridge._accelerator import accel; print(accel.ABI)").stdout.split()[-1]
    assert abi == str(ABI)


@pytest.mark.parametrize("value", ["1", "yes"])
def test_the_environment_variable_forces_pure_python(value: str) -> None:
    assert _loaded(pure=value) == (False, f"pure Python ({ENV_VAR}={value})")


@pytest.mark.parametrize("value", ["", "0"])
def test_empty_or_zero_leaves_the_default(value: str) -> None:
    assert _loaded(pure=value) == _loaded()


def test_without_a_compiled_module_dlbridge_runs_in_pure_python(tmp_path: Path) -> None:
    root = _copy_without_accel(tmp_path)
    assert _loaded(root) == (False, "pure Python (no compiled module: No module named 'dlbridge._accel')")
    need("numpy")  # and it still converts
    code = "import dlbridge, numpy as np; a = np.arange(3); print(dlbridge.to_numpy(a).ctypes.data == a.ctypes.data)"
    assert _run(code, root).stdout.split()[-1] == "True"


@pytest.mark.parametrize(("source", "found"), [("ABI = 0\n", "0"), ("", "None")])
def test_a_stale_compiled_module_is_not_used(tmp_path: Path, source: str, found: str) -> None:
    # A module from older C sources (another ABI, or none): used with this source it could misread
    # its arguments, so the loader refuses it and says how to rebuild.
    root = _copy_without_accel(tmp_path)
    stale = root / "dlbridge" / "_accel.py"  # stands in for a .so compiled from older C sources
    stale.write_text(source, encoding="utf-8")
    used, reason = _loaded(root)
    assert not used
    assert reason == (
        f"pure Python (stale compiled module {stale}: ABI {found}, this source expects {ABI}; "
        "rebuild it with `pip install -e .`, or `pip install .` for a non-editable install)"
    )


def test_doctor_says_which_path_is_used_and_why(tmp_path: Path) -> None:
    def line(out: str) -> str:
        return next(ln for ln in out.splitlines() if ln.startswith("accelerator:"))

    assert line(_run(DOCTOR, pure="1").stdout) == f"accelerator: pure Python ({ENV_VAR}=1)"
    missing = line(_run(DOCTOR, _copy_without_accel(tmp_path)).stdout)
    assert missing == "accelerator: pure Python (no compiled module: No module named 'dlbridge._accel')"
    built = _compiled()
    if built is not None:
        assert line(_run(DOCTOR).stdout) == f"accelerator: compiled ({built})"
