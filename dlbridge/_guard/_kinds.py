"""Guarded bodies that hand back work still to run: a generator's yields and a coroutine's result are
converted when they come, as a plain body's result is when it returns."""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Protocol

__all__ = ["converted_generator", "converted_coroutine"]


class _Spec(Protocol):
    """What these read of a guarded function's settings (``_call._Spec``)."""

    def leave(self, state: Any, value: Any, where: tuple[Any, ...]) -> Any: ...
    def annotate(self, state: Any, err: BaseException) -> None: ...


class _Call(Protocol):
    """What these read of one guarded call (``_call._Call``)."""

    def value(self, value: Any, where: tuple[Any, ...], explicit: bool) -> Any: ...


def converted_generator(inner: Generator[Any, Any, Any], spec: _Spec, state: _Call) -> Generator[Any, Any, Any]:
    """``yield from inner`` with each yielded value and the return value converted back, and values
    passed to ``send`` converted like arguments; ``throw`` and ``close`` reach ``inner``."""
    __tracebackhide__ = True
    leave = spec.leave
    try:
        step, arg = inner.send, None
        while True:
            try:
                out = step(arg)
            except StopIteration as stop:
                return leave(state, stop.value, ("return",))
            except BaseException as err:
                spec.annotate(state, err)
                raise
            try:
                sent = yield leave(state, out, ("yield",))
            except GeneratorExit:
                raise
            except BaseException as err:  # thrown in by the caller: passed on to the body
                step, arg = inner.throw, err
            else:
                step, arg = inner.send, None if sent is None else state.value(sent, ("sent",), False)
    finally:
        inner.close()


async def converted_coroutine(inner: Coroutine[Any, Any, Any], spec: _Spec, state: _Call) -> Any:
    """``await inner``, its result converted back."""
    __tracebackhide__ = True
    try:
        result = await inner
    except BaseException as err:
        spec.annotate(state, err)
        raise
    return spec.leave(state, result, ("result",))
