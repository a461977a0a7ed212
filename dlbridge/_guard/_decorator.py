"""``@dlbridge.guard(to)``: call a function written for one framework with any framework's arrays.

Array arguments are converted with the same pipeline as ``convert`` (``_convert``); array
results go back to the caller's framework and device, with the logical dtype restored when
the body saw a ``fallback="view"`` unsigned view. Everything that does not depend on the call
(the target adapter, which parameters to look at, option checks) is settled at decoration
time, so a call costs the conversions plus a few attribute lookups.
"""

from __future__ import annotations

import functools
import inspect as _inspect
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from .._adapters import ADAPTERS, adapter_named
from .._errors import OptionError
from .._options import NOT_GIVEN, READONLY, Fallback, Readonly, _NotGiven, check_fallback, check_readonly
from ._call import _Spec
from ._kinds import converted_coroutine, converted_generator
from ._messages import describe, usage

_R = TypeVar("_R")
_T = TypeVar("_T")

__all__ = ["guard"]

if TYPE_CHECKING:  # only type checkers need them; building a Protocol at import costs milliseconds

    class _Decorator(Protocol):
        """What ``guard(to)`` returns: array parameters take any framework's arrays and results come
        back converted, so the guarded function is typed ``(...) -> Any`` (an ``async def`` stays
        awaitable, a generator stays a generator)."""

        @overload
        def __call__(self, fn: staticmethod[..., Any], /) -> staticmethod[..., Any]: ...
        @overload
        def __call__(self, fn: classmethod[_T, ..., Any], /) -> classmethod[_T, ..., Any]: ...
        @overload
        def __call__(
            self, fn: Callable[..., Coroutine[Any, Any, Any]], /
        ) -> Callable[..., Coroutine[Any, Any, Any]]: ...
        @overload
        def __call__(
            self, fn: Callable[..., AsyncGenerator[Any, Any]], /
        ) -> Callable[..., AsyncGenerator[Any, Any]]: ...
        @overload
        def __call__(
            self, fn: Callable[..., Generator[Any, Any, Any]], /
        ) -> Callable[..., Generator[Any, Any, Any]]: ...
        @overload
        def __call__(self, fn: Callable[..., Any], /) -> Callable[..., Any]: ...

    class _KeepResults(Protocol):
        """What ``guard(to, returns=None)`` returns: results are the body's own, so its return type stays."""

        @overload
        def __call__(self, fn: staticmethod[..., _R], /) -> staticmethod[..., _R]: ...
        @overload
        def __call__(self, fn: classmethod[_T, ..., _R], /) -> classmethod[_T, ..., _R]: ...
        @overload
        def __call__(self, fn: Callable[..., _R], /) -> Callable[..., _R]: ...


@overload
def guard(to: str | ModuleType, /, *, args: Sequence[str | int] | str | int | None = ..., returns: None,
          convert: bool = ..., fallback: Fallback | _NotGiven | None = ..., device: Any = ...,
          copy: bool | None = ..., stream: int | None = ..., readonly: Readonly = ...) -> _KeepResults: ...  # fmt: skip
@overload
def guard(to: str | ModuleType, /, *, args: Sequence[str | int] | str | int | None = ...,
          returns: str | ModuleType | _NotGiven = ..., convert: bool = ...,
          fallback: Fallback | _NotGiven | None = ..., device: Any = ..., copy: bool | None = ...,
          stream: int | None = ..., readonly: Readonly = ...) -> _Decorator: ...  # fmt: skip
def guard(to: Any, /, *, args: Any = None, returns: Any = NOT_GIVEN, convert: bool = True, fallback: Any = NOT_GIVEN,
          device: Any = None, copy: bool | None = None, stream: int | None = None, readonly: Any = "keep") -> Any:  # fmt: skip
    """Make ``fn`` receive its array arguments as ``to`` arrays (a name such as ``"cupy"`` or the module).

    - ``args``: which parameters to convert, by name or position (``self`` counts); default:
      every argument supporting DLPack, also inside tuples, lists and dict values. A selected
      parameter must hold an array, ``None``, or a tuple, list or dict holding at least one
      array (its other items are left alone; an empty one passes); else ``NotAnArrayError``.
      Containers are rebuilt with their arrays converted: one that holds itself (a cycle), or
      containers nested more than 100 levels deep, raise ``NotAnArrayError`` naming where,
      before the body runs (the same after it, for results); leave such an argument out of
      ``args=`` (it is then passed as it is), or pass ``returns=None`` for such results.
    - ``returns``: where array results go: by default the framework and device of the first
      array argument in call order (with ``args=``, of the first selected parameter holding
      one, in the signature's order; bf16 restored if the body saw a uint16 view); ``None`` leaves them alone; a framework name or module sends
      them there. A result that is an argument the body was handed, unchanged, comes back as
      the caller's own object; one whose shape, strides or dtype the body changed in place
      (``x.t_()``, ``x.shape = ...``) is converted as the body left it.
    - ``convert=False`` converts nothing: it raises ``UnsupportedDtypeError`` or
      ``DeviceMismatchError`` before the body runs if ``to`` could not take an argument.
    - ``fallback``, ``device``, ``copy``, ``stream``, ``readonly`` are passed to each conversion as in
      ``convert``; an unset ``fallback`` follows the default in force at call time. Results the
      caller's framework cannot hold read-only (a JAX result back to torch) are copied under
      ``readonly="keep"``, shared writable under ``readonly="drop"``.

    ``async def`` bodies: the awaited result is converted. Generators (and async generators):
    each yielded value and the return value are converted; values passed to ``send`` (or
    ``asend``) are converted like arguments; ``throw`` and ``close`` reach the body. A plain
    function that returns a generator or coroutine object gets it back converted the same way
    (arguments are then converted at the call, not at the first ``next``).

    Typing: the guarded function is typed ``(...) -> Any`` (awaitable or generator kept), since
    its array parameters take any framework's arrays and its results come back in the caller's
    framework; with ``returns=None`` the body's return type is kept. Parameter names and
    defaults remain visible at run time (``inspect.signature``), not to type checkers.
    """
    if not isinstance(to, (str, ModuleType)):
        raise OptionError(usage(to))
    target = adapter_named(to)
    to_label = to if isinstance(to, str) else target.name
    readonly = check_readonly(readonly)
    fallback = _checked_options(to_label, convert, fallback, device, copy, stream, readonly)
    back = _returns_target(to_label, returns)

    def decorate(fn: Any) -> Any:
        if isinstance(fn, (staticmethod, classmethod)):
            return type(fn)(decorate(fn.__func__))
        if not callable(fn):
            raise OptionError(
                f"@dlbridge.guard({to_label!r}) decorates a function (or a staticmethod/classmethod), "
                f"received {describe(fn)}"
            )
        spec = _Spec(fn, target, to_label, args, back, convert, fallback, device, copy, stream, readonly)
        return _wrap(fn, spec)

    return decorate


def _checked_options(to_label: str, convert: bool, fallback: Any, device: Any, copy: bool | None,
                     stream: int | None, readonly: Any) -> Any:  # fmt: skip
    """Refuse bad options at decoration time, not at the first call; the checked ``fallback``."""
    if fallback is not NOT_GIVEN and fallback is not None:
        fallback = check_fallback(fallback)
    if copy is not None and copy is not True and copy is not False:
        raise OptionError(f"guard(copy={describe(copy)}); expected True, False or None")
    if not convert:
        given = [n for n, v in (("fallback", fallback), ("device", device), ("copy", copy), ("stream", stream),
                                ("readonly", None if readonly is READONLY[0] else readonly))
                 if v is not NOT_GIVEN and v is not None]  # fmt: skip
        if given:
            raise OptionError(
                f"guard({to_label!r}, convert=False) converts nothing, so {', '.join(f'{g}=' for g in given)} "
                "would have no effect; drop it, or drop convert=False"
            )
    return fallback


def _returns_target(to_label: str, returns: Any) -> Any:
    """``returns=`` as the guard keeps it: None or NOT_GIVEN as given, a name or module as its adapter."""
    if returns is None or returns is NOT_GIVEN:
        return returns
    if isinstance(returns, (str, ModuleType)):
        return adapter_named(returns)
    raise OptionError(
        f"guard({to_label!r}, returns=...) received {describe(returns)}; expected a framework name "
        f"({', '.join(sorted(ADAPTERS))}), its module, or None to leave results as the body made them"
    )


def _wrap(fn: Any, spec: _Spec) -> Callable[..., Any]:
    """The wrapper for ``fn``'s kind: plain, ``async def``, generator or async generator."""
    call, enter, leave, annotate = spec.call, spec.enter, spec.leave, spec.annotate
    if _inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def agen_wrapper(*a: Any, **kw: Any) -> Any:
            __tracebackhide__ = True
            state, args, kwargs = enter(a, kw)
            inner = fn(*args, **kwargs)
            try:
                step, arg = inner.asend, None
                while True:
                    try:
                        out = await step(arg)
                    except StopAsyncIteration:
                        return
                    except BaseException as err:
                        annotate(state, err)
                        raise
                    try:
                        sent = yield leave(state, out, ("yield",))
                    except GeneratorExit:
                        raise
                    except BaseException as err:  # thrown in by the caller: passed on to the body
                        step, arg = inner.athrow, err
                    else:
                        step, arg = inner.asend, None if sent is None else state.value(sent, ("sent",), False)
            finally:
                await inner.aclose()

        return agen_wrapper

    if _inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*a: Any, **kw: Any) -> Any:
            __tracebackhide__ = True
            state, args, kwargs = enter(a, kw)
            return await converted_coroutine(fn(*args, **kwargs), spec, state)

        return async_wrapper

    if _inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen_wrapper(*a: Any, **kw: Any) -> Any:
            __tracebackhide__ = True
            state, args, kwargs = enter(a, kw)
            return (yield from converted_generator(fn(*args, **kwargs), spec, state))

        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        __tracebackhide__ = True
        return call(a, kw)

    return wrapper
