"""dlbridge as users get it: the installed wheel, and what mypy sees of it from a user's file.

These run in the version matrix's installed-package stack (.ci/installed: the wheel installed, not editable,
the suite run outside the checkout with ``DLBRIDGE_TEST_INSTALLED=1``) and skip elsewhere. An editable
install (``pip install -e .``) hides dlbridge from mypy; ``--config-settings editable_mode=strict`` does not
(see the README's Development section).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import dlbridge
from tests.conftest import INSTALLED_ENV

pytestmark = pytest.mark.skipif(
    os.environ.get(INSTALLED_ENV) != "1",
    reason=f"checks the installed wheel: run by .ci/installed ({INSTALLED_ENV}=1)",
)

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(sysconfig.get_paths()["platlib"])


def test_dlbridge_is_the_installed_wheel_with_its_accelerator_and_type_marker() -> None:
    from dlbridge._accelerator import accel, reason

    package = SITE / "dlbridge"
    assert Path(dlbridge.__file__) == package / "__init__.py"
    assert not (ROOT / "dlbridge").exists(), "the suite's tree must not hold a dlbridge package"
    assert accel is not None and reason == f"compiled ({package / '_accel.abi3.so'})", reason
    assert (package / "py.typed").is_file()
    for sub in ("_adapters", "_report"):
        assert (package / sub / "__init__.py").is_file(), sub


USER_FILE = """\
import numpy as np

import dlbridge

x = np.zeros(3)
reveal_type(dlbridge.to_numpy(x))
reveal_type(dlbridge.convert(x, "torch"))
dlbridge.to_numpy(x, fallback="nope")
"""


def test_mypy_on_a_user_file_sees_the_installed_types(tmp_path: Path) -> None:
    # A user's project: its own file and an empty mypy config, outside the checkout and the suite's tree.
    (tmp_path / "user.py").write_text(USER_FILE, encoding="utf-8")
    (tmp_path / "mypy.ini").write_text("[mypy]\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    cmd = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "user.py"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    lines = {int(line.split(":")[1]): line for line in done.stdout.splitlines() if line.startswith("user.py:")}
    assert "Cannot find implementation" not in out and "missing library stubs" not in out, out
    assert 'Revealed type is "numpy.ndarray[' in lines.get(6, ""), out
    assert 'Revealed type is "torch._tensor.Tensor"' in lines.get(7, ""), out
    # dlbridge's signatures are checked, not Any: an unknown fallback is an error on its line, the only one.
    assert "error:" in lines.get(8, "") and '"fallback"' in lines[8], out
    assert done.returncode == 1 and out.count("error:") == 1, textwrap.indent(out, "  ")
