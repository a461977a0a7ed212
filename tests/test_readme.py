"""The README's examples and commands, as written: they are the first thing a user runs."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.conftest import caps_of, need, readme_block


def test_readme_cpu_example_runs_as_written_and_shares_memory() -> None:
    need("torch")
    need("jax")
    ml_dtypes = need("ml_dtypes")
    if "float8_e4m3fn" not in caps_of("jax").imports:
        pytest.skip(f"the example hands float8 to JAX, which JAX {caps_of('jax').version} cannot import (>= 0.5.3)")
    printed = io.StringIO()
    scope: dict = {}
    # The CPU example: on the CPU whatever torch's default device is (meta under tests/_foreign.py)
    with contextlib.redirect_stdout(printed), need("torch").device("cpu"):
        exec(readme_block("cpu-example"), scope)  # the README's own code, unchanged
    t, n, f8, j, g, u, back, info = (scope[k] for k in ("t", "n", "f8", "j", "g", "u", "back", "info"))
    assert n.dtype == ml_dtypes.bfloat16 and n.ctypes.data == t.data_ptr()
    assert str(j.dtype) == "float8_e4m3fn" and j.unsafe_buffer_pointer() == f8.data_ptr()
    assert "torch cannot hold float8_e4m3b11fnuz" in printed.getvalue() and 'fallback="view"' in printed.getvalue()
    assert str(u.dtype) == "torch.uint8" and u.data_ptr() == g.ctypes.data
    assert back.dtype == g.dtype and back.ctypes.data == g.ctypes.data
    assert info.dtype == "bfloat16" and info.device_type == "cpu" and info.shape == (1024, 1024)


def test_readme_main_command_is_one_line_that_shows_progress() -> None:
    # Copied into a terminal as it is: one line, and pip's progress visible (no -q) during the
    # minutes the first install takes.
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("<!-- main-command -->\n", 1)[1].split("<!-- /main-command -->", 1)[0]
    lines = section.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python3 -m pip install "), lines
    assert " -q" not in lines[0] and "--quiet" not in lines[0], lines
    assert "python3 -m dlbridge report" in lines[0], lines
