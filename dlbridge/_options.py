"""The conversion options dlbridge checks in one place: the fallback policy (how "not given" is
resolved) and ``readonly=`` (``check_readonly``).

Order: the call's ``fallback=`` keyword, else the innermost open ``fallback_policy(...)`` block
(per thread / per async task), else ``set_default_fallback(...)``, else the environment
variable ``DLBRIDGE_FALLBACK``, else ``"raise"``.

The environment variable is read once, when a conversion first needs it (reading ``os.environ``
on every call cost more than the rest of the policy); ``set_default_fallback(None)`` reads it again.
"""

from __future__ import annotations

import contextvars
import os

from ._errors import OptionError

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: ``import dlbridge`` stays small)
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Final, Literal, TypeAlias

__all__ = ["NOT_GIVEN", "Fallback", "FALLBACKS", "resolve_fallback", "set_default_fallback",
           "get_default_fallback", "fallback_policy", "check_fallback", "default_cell", "Readonly", "READONLY",
           "check_readonly"]  # fmt: skip

Fallback: TypeAlias = 'Literal["raise", "view", "upcast"]'
FALLBACKS: Final = ("raise", "view", "upcast")
ENV_VAR: Final = "DLBRIDGE_FALLBACK"
# readonly=: what a read-only source becomes in a consumer that has no read-only arrays (torch, CuPy, Paddle):
# "keep" refuses it (ReadOnlyError) unless copy=True; "drop" hands over the same memory as a writable array,
# which the caller takes on not to write. Consumers with read-only arrays (NumPy) get read-only ones either way.
# Index = the route key's readonly bit (dlbridge/_route/_learn.py).
Readonly: TypeAlias = 'Literal["keep", "drop"]'
READONLY: Final = ("keep", "drop")


class _NotGiven:
    """The type of ``NOT_GIVEN``, "not passed" where None is a value of its own: one instance."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_GIVEN"

    def __reduce__(self) -> str:
        return "NOT_GIVEN"  # pickled and copied as the one instance (dlbridge._options.NOT_GIVEN)


NOT_GIVEN: Final = _NotGiven()

_process_default: Fallback | None = None
_env_default: Fallback | None = None  # $DLBRIDGE_FALLBACK, read on first use
# The default as the fast route reads it (one list item, no call): the resolved default while no
# fallback_policy block was ever entered in this process, None after (then get_default_fallback
# decides: a block's scope can outlive it in contexts copied inside it, so it is never reset).
default_cell: list[Fallback | None] = [None]
_blocks_used = False


def _refresh_cell() -> None:
    default_cell[0] = None if _blocks_used else (_process_default or _env_default)


class _Scope:
    """One ``fallback_policy`` block as seen by the contexts that entered it (or copied it)."""

    __slots__ = ("mode", "open", "parent")

    def __init__(self, mode: Fallback, parent: _Scope | None) -> None:
        self.mode, self.parent, self.open = mode, parent, True


_scoped: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("dlbridge_fallback", default=None)


def check_fallback(value: object, where: str = "fallback") -> Fallback:
    # ``in`` on a non-string would call its ``__eq__`` (an array's answers elementwise, then fails).
    if type(value) is not str or value not in FALLBACKS:
        valid = ", ".join(map(repr, FALLBACKS))
        if isinstance(value, (str, int, float, type(None))):
            raise OptionError(f"{where}={value!r} is not a fallback; expected one of {valid}")
        raise OptionError(f"{where}= received a {_type_name(value)}, not a fallback name; expected one of {valid}")
    return FALLBACKS[FALLBACKS.index(value)]  # the canonical object: the fast route compares identity


def check_readonly(value: object, where: str = "readonly") -> Readonly:
    """``readonly=`` as its canonical object (the fast route compares identity); OptionError otherwise."""
    if type(value) is not str or value not in READONLY:  # (``in`` on an array would compare elementwise)
        what = repr(value) if isinstance(value, (str, int, float, type(None))) else f"a {_type_name(value)}"
        raise OptionError(
            f'{where}={what} is not a read-only choice; expected "keep" (a read-only source stays read-only: '
            'ReadOnlyError where the consumer cannot hold it, unless copy=True) or "drop" (shared as a writable '
            "array you must not write to)"
        )
    return READONLY[READONLY.index(value)]


def _type_name(value: object) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def get_default_fallback() -> Fallback:
    """The fallback used when a call does not pass ``fallback=``."""
    scope = _scoped.get()
    while scope is not None:
        if scope.open:
            return scope.mode
        scope = scope.parent  # a block closed from another context (see fallback_policy)
    if _process_default is not None:
        return _process_default
    return _env_default or _read_env()


def _read_env() -> Fallback:
    global _env_default
    env = os.environ.get(ENV_VAR)
    _env_default = check_fallback(env.strip().lower(), f"${ENV_VAR}") if env else "raise"
    if not _blocks_used:
        default_cell[0] = _process_default or _env_default
    return _env_default


def set_default_fallback(mode: Fallback | None) -> Fallback | None:
    """Set the process-wide default (``None`` returns to $DLBRIDGE_FALLBACK / "raise").

    Returns the previous process-wide setting, so it can be restored.
    """
    global _process_default, _env_default
    previous = _process_default
    _process_default = None if mode is None else check_fallback(mode)
    if mode is None:
        _env_default = None
    _refresh_cell()
    return previous


class fallback_policy:
    """``with dlbridge.fallback_policy("view"): ...`` — a default for this thread / async task only.

    The block sets the default for the code it runs, and for threads and tasks started inside it
    with a copy of the context (``asyncio`` tasks, ``contextvars.copy_context().run``), which keep
    it after the block ends. Other threads and tasks never see it.

    Generators and coroutines run in their *caller's* context, as with ``decimal.localcontext``:
    a block that stays open across a ``yield`` (or ``await`` of a bare coroutine) is in force in
    the code that drives the generator until the block closes. Close the block before yielding,
    or pass ``fallback=`` to the calls. A block closed from another thread or context than the
    one that entered it (a generator finished elsewhere) is closed everywhere it was seen: each
    of those contexts goes back to the policy in force around the block.
    """

    __slots__ = ("_entered", "_mode")

    def __init__(self, mode: Fallback) -> None:
        self._mode: Fallback = check_fallback(mode)
        self._entered: list[tuple[_Scope, contextvars.Token[_Scope | None]]] = []

    def __enter__(self) -> None:
        global _blocks_used
        if not _blocks_used:
            _blocks_used = True
            default_cell[0] = None
        parent = _scoped.get()
        while parent is not None and not parent.open:  # never chain onto closed blocks
            parent = parent.parent
        scope = _Scope(self._mode, parent)
        self._entered.append((scope, _scoped.set(scope)))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        scope, token = self._entered.pop()
        try:
            _scoped.reset(token)
        except ValueError:
            # The token belongs to another context (the block was entered in a generator that is
            # being closed from another thread or task): that context cannot be reached from
            # here, so the block is marked closed and every context holding it skips it.
            scope.open = False

    def __repr__(self) -> str:
        return f"dlbridge.fallback_policy({self._mode!r})"


def resolve_fallback(value: object) -> Fallback:
    return get_default_fallback() if value is NOT_GIVEN or value is None else check_fallback(value)
