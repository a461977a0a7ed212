"""The fallback policy: one documented place for how "not given" is resolved.

Order: the call's ``fallback=`` keyword, else the innermost ``fallback_policy(...)`` block
(per thread / per async task), else ``set_default_fallback(...)``, else the environment
variable ``DLBRIDGE_FALLBACK``, else ``"raise"``.

The environment variable is read once, when a conversion first needs it (reading ``os.environ``
on every call cost more than the rest of the policy); ``set_default_fallback(None)`` reads it again.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import os
from collections.abc import Iterator
from typing import Final, Literal

from ._errors import OptionError

__all__ = ["NOT_GIVEN", "Fallback", "FALLBACKS", "resolve_fallback", "set_default_fallback",
           "get_default_fallback", "fallback_policy", "check_fallback"]  # fmt: skip

Fallback = Literal["raise", "view", "upcast"]
FALLBACKS: Final = ("raise", "view", "upcast")
ENV_VAR: Final = "DLBRIDGE_FALLBACK"


class _NotGiven(enum.Enum):
    NOT_GIVEN = "NOT_GIVEN"

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Final = _NotGiven.NOT_GIVEN

_process_default: Fallback | None = None
_env_default: Fallback | None = None  # $DLBRIDGE_FALLBACK, read on first use
_scoped: contextvars.ContextVar[Fallback | None] = contextvars.ContextVar("dlbridge_fallback", default=None)


def check_fallback(value: object, where: str = "fallback") -> Fallback:
    if value not in FALLBACKS:
        raise OptionError(f"{where}={value!r} is not a fallback; expected one of {', '.join(map(repr, FALLBACKS))}")
    return value


def get_default_fallback() -> Fallback:
    """The fallback used when a call does not pass ``fallback=``."""
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    if _process_default is not None:
        return _process_default
    return _env_default or _read_env()


def _read_env() -> Fallback:
    global _env_default
    env = os.environ.get(ENV_VAR)
    _env_default = check_fallback(env.strip().lower(), f"${ENV_VAR}") if env else "raise"
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
    return previous


@contextlib.contextmanager
def fallback_policy(mode: Fallback) -> Iterator[None]:
    """``with dlbridge.fallback_policy("view"): ...`` — a default for this thread/task only."""
    token = _scoped.set(check_fallback(mode))
    try:
        yield
    finally:
        _scoped.reset(token)


def resolve_fallback(value: object) -> Fallback:
    return get_default_fallback() if value is NOT_GIVEN or value is None else check_fallback(value)
