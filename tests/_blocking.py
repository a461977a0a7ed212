"""Making modules unimportable in a process, as if they were not installed: ``block("ml_dtypes")``.

A finder first on ``sys.meta_path`` answers every import of a blocked name (or of a submodule of one)
with ``ModuleNotFoundError``, the error a module that is not installed gives: ``import ml_dtypes`` and
``importlib.util.find_spec("ml_dtypes")`` raise it, so ``try: import ml_dtypes / except ImportError``
takes its except branch, in Python and in compiled modules alike.

``sys.modules["ml_dtypes"] = None`` is not the same: CPython's ``import`` raises for it, but Cython's
import of an already-imported module reads ``sys.modules`` itself and takes the ``None`` as the module
(its re-import fast path, cython/cython#7035): CuPy 14.2's ``cupy/_util.pyx`` line 241 then fails with
``AttributeError: 'NoneType' object has no attribute 'bfloat16'`` and CuPy does not import at all
(H100 run, 2026-11-27, CuPy 14.2.0, Python 3.12.3).

Child scripts get it by ``run_child(code, block=(...))`` (``tests/conftest.py``), the report's workers
by ``$DLBRIDGE_TEST_BLOCK`` (``tests/child_hooks/sitecustomize.py``): both load this file by its path,
so the child needs neither the checkout on ``sys.path`` nor a ``tests`` package. Standard library only.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

PATH = Path(__file__).resolve()


def _covered(fullname: str, names: frozenset[str]) -> bool:
    return any(fullname == name or fullname.startswith(name + ".") for name in names)


class Blocked(importlib.abc.MetaPathFinder):
    """Finds nothing for ``names`` and their submodules, and says so as a missing module does."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        if _covered(fullname, self.names):
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked: as if not installed)", name=fullname)
        return None


def block(*names: str) -> Blocked:
    """Make ``names`` unimportable from now on in this process (imported copies are dropped from
    ``sys.modules``; modules that already hold one keep it, so block before anything imports them)."""
    finder = Blocked(names)
    for loaded in [m for m in sys.modules if _covered(m, finder.names)]:
        del sys.modules[loaded]
    sys.meta_path.insert(0, finder)
    return finder


def child_code(names: Iterable[str]) -> str:
    """Lines that block ``names`` at the start of a child script (this file loaded by its path)."""
    return (
        "import importlib.util as _u\n"
        f"_s = _u.spec_from_file_location('_dlbridge_test_blocking', {str(PATH)!r})\n"
        "_m = _u.module_from_spec(_s); _s.loader.exec_module(_m)\n"
        f"_m.block(*{tuple(names)!r})\n"
        "del _u, _s, _m\n"
    )
