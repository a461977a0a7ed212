"""A KeyboardInterrupt raised anywhere in a conversion reaches its caller, on both paths.

CPython prints and drops an exception raised inside a weakref callback or a capsule destructor
("Exception ignored in ..."), so a Ctrl-C landing there is lost. dlbridge runs no Python bytecode in
either: a view's record is dropped by a builtin callback (``dlbridge._pipeline._logical``) and an
exported capsule is freed by a C destructor (the producer's own, or the compiled route's).

Two ways to land an interrupt everywhere: deterministically, an exception raised by a trace function
at every trace event of dlbridge's code a conversion passes, followed by a second one at the first
dlbridge function entered after it (a destructor run while the first unwinds); and a storm of
SIGALRM handlers raising KeyboardInterrupt whenever the conversion is on the stack. Each run, in a
child per path: every interrupt raised reaches the caller, CPython drops none.
"""

from __future__ import annotations

import gc
import inspect
import signal
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest

import dlbridge
from dlbridge._accelerator import accel
from tests._trust_helpers import ON_BOTH_PATHS, in_dlbridge, run_traced, trust_path, unraisable  # noqa: F401 (a fixture)
from tests.conftest import need

pytestmark = ON_BOTH_PATHS


def _ops() -> dict[str, Callable[[], Any]]:
    """The conversions the interrupts land in: each makes and drops what it converts."""
    torch, ml = need("torch"), need("ml_dtypes")
    fp8 = np.arange(64, dtype=np.uint8).view(ml.float8_e4m3b11fnuz)  # torch has no such dtype: a view
    bf16 = torch.arange(64, dtype=torch.float32, device="cpu").to(torch.bfloat16)
    kept = dlbridge.to_torch(fp8, fallback="view")

    def fp8_view() -> None:
        v = dlbridge.to_torch(fp8, fallback="view")
        assert v.dtype == torch.uint8
        del v  # its record goes with it

    def fp8_view_pipeline() -> None:
        v = dlbridge.to_torch(fp8, fallback="view", device="cpu")  # device=: the full pipeline
        del v

    def view_onward() -> None:
        out = dlbridge.to_numpy(kept)  # the remembered dtype, recalled
        assert out.dtype == fp8.dtype
        del out

    def bf16_to_numpy() -> None:
        out = dlbridge.to_numpy(bf16)
        assert out.dtype.name == "bfloat16"
        del out

    def bf16_to_numpy_pipeline() -> None:
        out = dlbridge.to_numpy(bf16, device="cpu")
        del out

    return {f.__name__: f for f in (fp8_view, fp8_view_pipeline, view_onward, bf16_to_numpy, bf16_to_numpy_pipeline)}


def _where(frame: Any) -> str:
    return str(getattr(frame.f_code, "co_qualname", frame.f_code.co_name))


class _Injected(KeyboardInterrupt):
    """The interrupt the trace function raises (a KeyboardInterrupt, told apart from a real Ctrl-C)."""


# Generator frames are not injected into: a generator dropped before its end (``next(x for ...)``)
# is closed in its destructor, which CPython 3.11 traces ('call', 'return') although no bytecode of
# it runs there (the frame unwinds without an eval-breaker check, so no signal handler can run in it;
# 3.12+ does not resume it at all): a trace-injected exception there would be an artifact.
_GENERATORS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


class _Run(NamedTuple):
    seen: int  # trace events in dlbridge's code up to the first injection (or all of them)
    after: int  # dlbridge functions entered after the first injection, up to the second
    raised: int  # interrupts injected
    reached: int  # interrupts that reached the caller (the one it got and its contexts)
    got: type | None  # what the caller got
    dropped: list[Any]  # what CPython printed and dropped


def _run_injected(op: Callable[[], Any], k: int, j: int) -> _Run:
    """``op`` with an interrupt at the ``k``-th trace event of dlbridge's code, and a second one at the
    ``j``-th dlbridge function entered after it, while the first unwinds or while what it left behind
    is freed (a destructor or a weakref callback would be one)."""
    seen, after, raised = [0], [0], [0]

    def second(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and in_dlbridge(frame.f_code):
            after[0] += 1
            if after[0] == j:
                raised[0] += 1
                raise _Injected(f"second, in {_where(frame)}")  # profiling stops here

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if not in_dlbridge(frame.f_code):
            return None
        if frame.f_code.co_flags & _GENERATORS:
            return tracer  # see _GENERATORS
        seen[0] += 1
        if seen[0] == k:
            raised[0] += 1
            sys.setprofile(second)
            raise _Injected(f"first, at event {k} in {_where(frame)}")  # tracing stops here
        return tracer

    with unraisable() as dropped:
        caught = run_traced(op, tracer)
        got, reached = type(caught) if caught is not None else None, _chain(caught)
        caught = None  # what the interrupted conversion left (its frames, a capsule) is freed here
        sys.setprofile(None)
    return _Run(seen[0], after[0], raised[0], reached, got, dropped)


def _chain(err: BaseException | None) -> int:
    """How many interrupts ``err`` carries (itself and its contexts)."""
    n = 0
    while err is not None:
        n += isinstance(err, KeyboardInterrupt)
        err = err.__context__
    return n


@pytest.mark.parametrize("name", ["fp8_view", "fp8_view_pipeline", "view_onward", "bf16_to_numpy",
                                  "bf16_to_numpy_pipeline"])  # fmt: skip
def test_an_interrupt_at_every_event_reaches_the_caller(name: str) -> None:
    op = _ops()[name]
    op(), op()  # warm: the route learns it (the *_pipeline ones never take it)
    k = 0
    while True:
        k += 1
        assert k < 50_000, "the operation does not end"
        j = 0
        while True:
            j += 1
            run = _run_injected(op, k, j)
            where = f"{name}, event {k}, then call {j}"
            assert not run.dropped, f"{where}: CPython dropped {run.dropped}"
            if run.seen < k:
                break
            assert run.got is _Injected, f"{where}: injected {run.raised}, the caller got {run.got}"
            assert run.reached == run.raised, f"{where}: {run.raised} injected, {run.reached} reached the caller"
            if run.after < j:
                break
        if run.seen < k:
            assert run.got is None and run.raised == 0, f"{name}: nothing injected at event {k}, yet {run.got}"
            break
    gc.collect()
    if accel is None or name.endswith("_pipeline"):  # (the compiled route may run no Python at all)
        assert k > 10, f"{name}: only {k - 1} trace events in dlbridge's code"
    op()  # still converts after all that


def _storm(op: Callable[[], Any], runs: int, interval: float, landed: int) -> tuple[int, int, list[Any]]:
    """``op`` ``runs`` times under SIGALRM every ``interval`` seconds, and on (up to ten times ``runs``)
    until ``landed`` interrupts landed, whose handler raises KeyboardInterrupt whenever ``op`` or any
    of dlbridge's code is on the stack (a destructor run while the caller drops what an interrupted
    ``op`` left is one). How many land depends on the machine's load and on how much of ``op`` is
    bytecode (a signal is handled at the next check between bytecodes, which may come after ``op``
    returned): running on until enough did keeps the count above chance. Returns (raised, reached the
    caller, dropped). The handler blocks SIGALRM before it counts (a second handler run inside the
    first would raise in its place, uncounted); one that raises leaves it blocked until the caller
    unblocks it before the next run, one that does not unblocks it before it returns. (Left blocked,
    a signal that landed between runs kept every later one pending through ``op`` and delivered it
    in the caller's unblocking call: once ``op`` took longer than ``interval``, on a loaded machine,
    no interrupt landed in it any more.)"""
    code, alarm = op.__code__, {signal.SIGALRM}
    raised = [0]

    def handler(signum: int, frame: Any) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, alarm)
        f = frame
        while f is not None:
            if f.f_code is code or in_dlbridge(f.f_code):
                raised[0] += 1
                raise KeyboardInterrupt("storm")
            f = f.f_back
        signal.pthread_sigmask(signal.SIG_UNBLOCK, alarm)

    reached = 0
    previous = signal.signal(signal.SIGALRM, handler)
    try:
        with unraisable() as dropped:
            signal.setitimer(signal.ITIMER_REAL, interval, interval)
            try:
                for run in range(10 * runs):
                    if run >= runs and raised[0] >= landed:
                        break
                    try:
                        signal.pthread_sigmask(signal.SIG_UNBLOCK, alarm)
                        op()
                    except KeyboardInterrupt as err:
                        reached += _chain(err)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0, 0)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, alarm)
            gc.collect()
    finally:
        signal.signal(signal.SIGALRM, previous)
    return raised[0], reached, dropped


@pytest.mark.parametrize("name", ["fp8_view", "fp8_view_pipeline", "view_onward", "bf16_to_numpy"])
def test_a_timer_storm_loses_no_interrupt(name: str) -> None:
    op = _ops()[name]
    op(), op()
    raised, reached, dropped = _storm(op, 3000, 0.0002, landed=50)
    assert not dropped, f"{name}: CPython dropped {len(dropped)} interrupts, e.g. {dropped[:3]}"
    assert reached == raised, f"{name}: {raised} interrupts raised, {reached} reached the caller"
    # (the compiled route runs bf16 -> NumPy in C: interrupts land only in op's own bytecode then)
    assert raised > 10, f"{name}: only {raised} interrupts landed"
    op()
