"""The public conversion functions: thin, keyword-only wrappers over the pipeline.

``to_<name>`` is made here for every adapter in ``ADAPTERS`` (``_to``); their static types, and
``convert``'s per-framework overloads, are in ``dlbridge/__init__.pyi``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._accelerator import accel
from ._adapters import ADAPTERS, Adapter, adapter_named
from ._capabilities import Capabilities, parse_version
from ._capabilities import capabilities as _table
from ._errors import OptionError
from ._options import NOT_GIVEN
from ._route import (
    _replay as _route,  # _route.convert: the Python route, or the compiled one (the same steps) where built
)
from ._route._replay import SPECS

if TYPE_CHECKING:
    from ._types import DeviceLike, DTypeLike, FallbackOption, SupportsDLPack

# ``x`` is typed ``SupportsDLPack | Any``: any DLPack array, but also a raw capsule or a producer older
# than DLPack 1.0 (``__dlpack__(stream=)`` only); anything else raises NotAnArrayError at run time.


def _to(adapter: Adapter) -> Callable[..., Any]:
    """The public ``to_<adapter.name>``: a function of its own (name, docstring, signature, module
    ``dlbridge``) that calls the fast route with the adapter's spec, as a hand-written one would."""
    spec = SPECS[adapter.name]

    def to(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
           dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
           stream: int | None = None) -> Any:  # fmt: skip
        return _route.convert(spec, x, fallback, dtype, device, copy, stream)

    returns = ".".join(adapter.array_type)
    to.__name__ = to.__qualname__ = f"to_{adapter.name}"
    to.__module__ = "dlbridge"
    doc = f"``x`` as a ``{returns}``: the same memory and true dtype where {adapter.display} can hold them."
    to.__doc__ = f"{doc} {adapter.to_doc}" if adapter.to_doc else doc
    to.__annotations__ = {**to.__annotations__, "return": returns}
    # Compiled: a callable that enters the fast route without a Python frame; its name, docstring
    # and signature stay those of ``to`` (``__wrapped__``).
    return accel.Route(spec, to) if accel is not None else to


TO: dict[str, Callable[..., Any]] = {f"to_{name}": _to(adapter) for name, adapter in ADAPTERS.items()}
globals().update(TO)
__all__ = [*TO, "convert", "capabilities", "register_numpy_dtypes"]


def convert(x: SupportsDLPack | Any, to: str | ModuleType, /, *, fallback: FallbackOption = NOT_GIVEN,
            dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
            stream: int | None = None) -> Any:  # fmt: skip
    """Hand ``x`` to framework ``to`` (a name such as ``"torch"`` or the module).

    Zero-copy whenever the target can hold the data where it is; see the README for the
    fallback policy. ``copy=False`` forbids any copy, ``copy=True`` always copies.
    """
    return _route.convert(SPECS[adapter_named(to).name], x, fallback, dtype, device, copy, stream)


def capabilities(consumer: str, version: str | None = None) -> Capabilities:
    """What ``consumer`` accepts at ``version``, read off the capability table.

    ``consumer`` is a framework's name (or an alias, "pytorch", "np") or its module; ``version`` a
    version string ("2.13.0"), defaulting to the installed one, read from the package metadata (the
    framework is not imported); MissingFrameworkError if it is not installed. OptionError for a
    consumer dlbridge does not know or a version that is not a version string.
    """
    adapter = adapter_named(consumer)
    if version is None:
        return _table(adapter.name, adapter.installed_version())
    if not isinstance(version, str) or not parse_version(version):
        kind = type(version).__name__
        what = "not a version number" if isinstance(version, str) else f"a{'n' * (kind[0] in 'aeiou')} {kind}"
        raise OptionError(
            f"dlbridge.capabilities({adapter.name!r}, version={version!r}): the version is {what}; pass it as a "
            f'string, e.g. version="{_example_version(adapter)}", or leave it out for the installed one'
        )
    return _table(adapter.name, version)


def _example_version(adapter: Adapter) -> str:
    """A version of ``adapter``'s framework the table has rows for (for messages)."""
    from ._capabilities import TABLE

    since = [r.since for r in TABLE if r.consumer == adapter.name and r.since]
    return max(since, key=parse_version) if since else "1.0"


def register_numpy_dtypes() -> tuple[str, ...]:
    """Register ml_dtypes' bfloat16 and float8 kinds with NumPy's DLPack dtype registry (NumPy >= 2.5),
    so that NumPy itself (``np.from_dlpack``, ``ndarray.__dlpack__``) exports and imports them.

    Registration is global and permanent for the process, which is why dlbridge never does it on its
    own; dlbridge's results are the same either way (values, dtype, shared memory). Returns the dtype
    names NumPy now handles natively, those registered before included; a kind whose DLPack code or
    dtype is already registered otherwise is left as it is (and left out). UnsupportedDtypeError on
    NumPy < 2.5, MissingFrameworkError without ml_dtypes.
    """
    return adapter_named("numpy").register_dtypes()  # type: ignore[no-any-return, attr-defined]
