"""Helpers for the tests/test_trust_*.py modules: both paths in children, exception injection, and
capsules a producer may legally make but few consumers survive (a NULL deleter)."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import dlbridge
from dlbridge._accelerator import accel
from tests._isolated import IN_CHILD

DLBRIDGE_DIR = str(Path(dlbridge.__file__).resolve().parent)

# A module with ``pytestmark = ON_BOTH_PATHS`` (and ``trust_path`` imported) runs each test twice,
# each in a child pytest: on the compiled route (where it is built) and on the pure-Python one. A
# crash or a hang fails that one test, not the suite.
BOTH_PATHS = [
    pytest.param("compiled", id="compiled", marks=pytest.mark.isolated(env={"DLBRIDGE_PURE_PYTHON": None})),
    pytest.param("pure", id="pure", marks=pytest.mark.isolated(env={"DLBRIDGE_PURE_PYTHON": "1"})),
]


ON_BOTH_PATHS = pytest.mark.parametrize("trust_path", BOTH_PATHS, indirect=True)


@pytest.fixture(autouse=True)
def trust_path(request: pytest.FixtureRequest) -> str:
    """The path this child runs on (``ON_BOTH_PATHS``); skips compiled where it is not built."""
    which = str(getattr(request, "param", "loaded"))
    if IN_CHILD and which != "loaded":  # (the parent only sets the test up: the child runs it)
        if which == "compiled" and accel is None:
            pytest.skip("the compiled route is not built here")
        assert (accel is None) == (which == "pure"), f"asked for the {which} path, got accel={accel}"
    return which


_IN_DLBRIDGE: dict[Any, bool] = {}


def in_dlbridge(code: Any) -> bool:
    """Whether ``code`` is dlbridge's own (cached: called for every trace event)."""
    found = _IN_DLBRIDGE.get(code)
    if found is None:
        found = _IN_DLBRIDGE[code] = str(code.co_filename).startswith(DLBRIDGE_DIR)
    return found


@contextmanager
def unraisable() -> Iterator[list[Any]]:
    """What CPython reports as "Exception ignored in ..." (an exception in a destructor or a weakref
    callback, printed and dropped) while the block runs."""
    seen: list[Any] = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append((u.exc_type, u.exc_value, getattr(u.object, "__qualname__", u.object)))
    try:
        yield seen
    finally:
        sys.unraisablehook = old


def raise_at_event(k: int, exc: Callable[[], BaseException], only: Callable[[Any], bool] = in_dlbridge,
                   events: tuple[str, ...] = ("call", "line", "return")) -> tuple[Callable[..., Any], list[int]]:  # fmt: skip
    """A trace function raising ``exc()`` at the ``k``-th trace event (1-based) in a frame ``only``
    accepts (dlbridge's code by default), and a one-item list counting the events seen."""
    seen = [0]

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if not only(frame.f_code):
            return None  # not traced line by line (the frames it calls are asked again)
        if event in events:
            seen[0] += 1
            if seen[0] == k:
                raise exc()
        return tracer

    return tracer, seen


def run_traced(op: Callable[[], Any], tracer: Callable[..., Any]) -> BaseException | None:
    """``op()`` under the trace function ``tracer``: what it raised (None: it returned)."""
    sys.settrace(tracer)
    try:
        op()
    except BaseException as err:  # what reached the caller: the callers check it
        return err
    finally:
        sys.settrace(None)
    return None


def inject_everywhere(op: Callable[[], Any], exc: Callable[[], BaseException], *, limit: int = 20000,
                      only: Callable[[Any], bool] = in_dlbridge, check: Callable[[], None] | None = None) -> int:  # fmt: skip
    """Run ``op`` once per trace event of dlbridge's code it passes, raising ``exc()`` at that event;
    each time the exception must reach the caller unchanged (not printed and dropped by CPython) and
    ``check()`` must hold afterwards. Returns how many events were injected at."""
    import gc

    k = 0
    while True:
        k += 1
        assert k <= limit, f"more than {limit} trace events: the operation does not end"
        tracer, seen = raise_at_event(k, exc, only)
        with unraisable() as dropped:
            caught = run_traced(op, tracer)
            gc.collect()
        assert not dropped, f"event {k}: CPython dropped {dropped} (an exception raised where it cannot propagate)"
        if seen[0] < k:  # fewer events than k: nothing was raised, the operation ran to its end
            assert caught is None, f"event {k}: nothing injected, yet {caught!r}"
            return k - 1
        wanted = type(exc())
        assert type(caught) is wanted, f"event {k}: injected {wanted.__name__}, the caller got {caught!r}"
        if check is not None:
            check()


def null_deleter(capsule: Any) -> Any:
    """Write NULL into an unconsumed capsule's deleter (DLPack allows a producer to pass none) and return it."""
    from tests.ctypes_producer import DLManagedTensor, DLManagedTensorVersioned

    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi)
    )
    name = get_name(capsule)
    struct = DLManagedTensorVersioned if name == b"dltensor_versioned" else DLManagedTensor
    ctypes.c_void_p.from_address(get_pointer(capsule, name) + struct.deleter.offset).value = None
    return capsule


def child_env(pure: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DLBRIDGE_PURE_PYTHON", None)
    if pure:
        env["DLBRIDGE_PURE_PYTHON"] = "1"
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env
