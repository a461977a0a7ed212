"""The view registry (``dlbridge._pipeline._logical``) survives an exception at any line, and threads.

It holds no lock (an exception between acquiring and releasing one would leave it held, and every
later view conversion would hang): each change is one atomic dict or list operation. Injected at
every trace event of the registry's code, an exception reaches the caller, nothing hangs (each run
in a child process with a timeout, on both paths) and the registry stays consistent: every record is
under its view's id, a live view keeps its dtype, a dead view's record is swept.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import dlbridge
from dlbridge._pipeline import _logical
from tests._trust_helpers import child_env
from tests.conftest import need

_CHILD = """
import gc, sys
import numpy as np, ml_dtypes, torch, dlbridge
from dlbridge._pipeline import _logical
from tests._trust_helpers import inject_everywhere

class Injected(BaseException):  # past every handler: what a signal handler or a trace function raises
    pass

fp8 = np.arange(64, dtype=np.uint8).view(ml_dtypes.float8_e4m3b11fnuz)
kept = dlbridge.to_torch(fp8, fallback="view")  # a view that lives throughout

def consistent():
    for key, record in list(_logical._entries.items()):
        view = getattr(record, "ref", record)()  # (a record is a weak reference to its view)
        assert view is None or id(view) == key, (key, view)
    assert dlbridge.to_numpy(kept).dtype == fp8.dtype  # its record survived

def op():
    v = dlbridge.to_torch(fp8, fallback="view")  # remember
    out = dlbridge.to_numpy(v)  # recall
    assert out.dtype == fp8.dtype
    v.set_(torch.zeros(4, dtype=torch.uint8, device="cpu"))  # changed in place: the record goes at the next recall
    assert dlbridge.to_numpy(v).dtype == np.uint8
    del v, out  # dies: swept at the next remember or recall

op(), op()
events = inject_everywhere(op, Injected, only=lambda code: code.co_filename == _logical.__file__, check=consistent)
assert events > 20, events
gc.collect()
assert _logical.live() == 1, _logical.live()  # kept alone: the others' records are swept
op()
print("events", events)
"""


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_an_exception_at_any_line_of_the_registry_leaves_it_consistent_and_nothing_hangs(pure: bool) -> None:
    need("torch"), need("ml_dtypes")
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD)], capture_output=True, text=True,
                              timeout=300, env=child_env(pure))  # fmt: skip
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"the child hung (a lock left held?): {str(err.stdout)[-1500:]} {str(err.stderr)[-1500:]}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "events" in proc.stdout


def test_threads_making_dropping_and_recalling_views_lose_no_record() -> None:
    """Views made, converted onward and dropped in several threads at once, with the GIL switching
    every microsecond: a live view always gets its dtype back, and no record outlives its view."""
    torch, ml = need("torch"), need("ml_dtypes")
    fp8 = np.arange(64, dtype=np.uint8).view(ml.float8_e4m3b11fnuz)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(150):
                views = [dlbridge.to_torch(fp8, fallback="view") for _ in range(4)]
                for v in views:
                    assert dlbridge.to_numpy(v).dtype == fp8.dtype
                del views
        except BaseException as err:
            errors.append(err)

    before = _logical.live()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert not errors, errors[:3]
    assert _logical.live() == before
    for key, record in _logical._entries.items():
        view = getattr(record, "ref", record)()
        assert view is None or id(view) == key
    assert torch.uint8 is dlbridge.to_torch(fp8, fallback="view").dtype


def test_a_view_alive_at_exit_prints_nothing() -> None:
    need("torch")
    need("ml_dtypes")
    code = """
        import numpy as np, ml_dtypes, torch, dlbridge
        fp8 = np.arange(64, dtype=np.uint8).view(ml_dtypes.float8_e4m3b11fnuz)
        views = [dlbridge.to_torch(fp8, fallback="view") for _ in range(3)]
        cycle = [dlbridge.to_torch(fp8, fallback="view")]
        cycle.append(cycle)  # freed by the collector at exit, if at all
    """
    for pure in (False, True):
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=120, env=child_env(pure))  # fmt: skip
        assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr[-2000:]
