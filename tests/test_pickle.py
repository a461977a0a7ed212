"""The public functions pickle and copy by reference, as module functions do, on both paths: where the
accelerator is built the compiled ``Route`` standing in for each ``to_<name>`` reduces to its name, and
pickle finds it again in ``dlbridge``; multiprocessing (a spawned pool pickles the function it runs) and
``functools.partial`` rely on it. Each path runs in a child process."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import dlbridge
from dlbridge import _accelerator
from tests.conftest import need

ROOT = Path(dlbridge.__file__).resolve().parent.parent

PICKLES = """
import copy, functools, multiprocessing, pickle
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import dlbridge

print(type(dlbridge.to_numpy).__name__)
for name in dlbridge.__all__:
    if name.startswith("to_"):
        f = getattr(dlbridge, name)
        assert pickle.loads(pickle.dumps(f)) is f, name
        assert copy.deepcopy(f) is f and copy.copy(f) is f, name
view = pickle.loads(pickle.dumps(functools.partial(dlbridge.to_numpy, fallback="view")))
assert view.func is dlbridge.to_numpy and view.keywords == {"fallback": "view"}
assert pickle.loads(pickle.dumps(dlbridge._options.NOT_GIVEN)) is dlbridge._options.NOT_GIVEN
x = np.arange(6, dtype=np.float32).reshape(2, 3)
with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
    for got in (pool.submit(dlbridge.to_numpy, x).result(timeout=300), pool.submit(view, x).result(timeout=300)):
        assert got.dtype == np.float32 and got.shape == (2, 3) and (got == x).all()
print("ok")
"""


@pytest.mark.parametrize("path", ["compiled", "pure-python"])
def test_public_functions_pickle_and_copy_by_reference(path: str) -> None:
    """``pickle``, ``functools.partial``, ``copy.deepcopy`` and a spawned process pool (which pickles the
    function it runs) all take ``dlbridge.to_numpy`` as the name it is, on the compiled path (a ``Route``)
    and on the pure-Python one (a function)."""
    need("numpy")
    if path == "compiled" and _accelerator.accel is None:
        pytest.skip(f"the accelerator is not in use here: {_accelerator.reason}")
    env = {k: v for k, v in os.environ.items() if k not in ("DLBRIDGE_PURE_PYTHON", "DLBRIDGE_FALLBACK")}
    if path == "pure-python":
        env["DLBRIDGE_PURE_PYTHON"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run([sys.executable, "-c", PICKLES], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Route" if path == "compiled" else "function", "ok"]


def test_a_pickled_function_names_its_public_module() -> None:
    # By reference, as pickle writes a module-level function: the module and the name, nothing of the route.
    data = pickle.dumps(dlbridge.to_torch, protocol=4)
    assert b"dlbridge" in data and b"to_torch" in data and b"_accel" not in data and len(data) < 64
