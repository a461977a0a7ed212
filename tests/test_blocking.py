"""``tests/_blocking.py``: a blocked module is missing the way an uninstalled one is — for ``import``,
for ``importlib.util.find_spec``, and for C code that looks in ``sys.modules`` before importing
(Cython's re-import fast path, which took ``sys.modules[name] = None`` for the module: CuPy 14.2 then
failed to import at all with ml_dtypes "blocked")."""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from dlbridge._adapters._support import findable
from tests._blocking import block
from tests.conftest import run_child

# PyImport_GetModule: sys.modules' entry, or NULL when there is none (what compiled code checks first).
_get_module = ctypes.pythonapi.PyImport_GetModule
_get_module.restype, _get_module.argtypes = ctypes.c_void_p, [ctypes.py_object]


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An installed package ``blockme`` (with a submodule) and a module that imports it optionally."""
    pkg = tmp_path / "blockme"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("VALUE = 1\n")
    (pkg / "sub.py").write_text("")
    (tmp_path / "uses_blockme.py").write_text("try:\n    import blockme\nexcept ImportError:\n    blockme = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = list(sys.meta_path)
    yield
    sys.meta_path[:] = before
    for name in ("blockme", "blockme.sub", "uses_blockme"):
        sys.modules.pop(name, None)


def test_a_blocked_module_is_missing_for_every_kind_of_import(package) -> None:
    import blockme  # imported before the block: dropped from sys.modules by it

    assert blockme.VALUE == 1
    block("blockme")
    with pytest.raises(ModuleNotFoundError, match="blockme"):
        importlib.import_module("blockme")
    with pytest.raises(ModuleNotFoundError, match="blockme"):  # its package is missing
        importlib.import_module("blockme.sub")
    with pytest.raises(ImportError):
        importlib.util.find_spec("blockme")
    assert not findable("blockme")  # dlbridge's own check: not installed
    assert importlib.import_module("uses_blockme").blockme is None  # `except ImportError` took it
    # Nothing in sys.modules for compiled code to pick up (with sys.modules["blockme"] = None it found
    # the None object there: Cython's import then handed None to the module as "blockme").
    assert _get_module("blockme") is None


def test_run_child_blocks_before_the_script_runs() -> None:
    proc = run_child(
        """
        import importlib.util, sys
        try:
            import ml_dtypes
        except ImportError as err:
            print("missing:", type(err).__name__)
        try:
            importlib.util.find_spec("ml_dtypes")
        except ImportError:
            print("find_spec: missing")
        import numpy as np
        print("sys.modules:", "ml_dtypes" in sys.modules, "numpy:", np.ones(1).tolist())
        """,
        block=("ml_dtypes",),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == [
        "missing: ModuleNotFoundError", "find_spec: missing", "sys.modules: False numpy: [1.0]"
    ], proc.stdout  # fmt: skip
