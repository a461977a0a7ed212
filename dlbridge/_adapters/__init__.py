"""The adapter table: one adapter per framework, looked up by name, module or array.

The frameworks are the registry's (``dlbridge._rows``: one ``Framework`` entry each). An adapter is made
from its entry when first needed — a conversion into or out of its framework, an array of its framework
once that is loaded, the report — and kept for the process; ``import dlbridge`` makes none. The name and
module lookups here are derived from the registry and rebuilt when it changes (``register``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .._errors import DLBridgeError, OptionError, ProducerError
from .._rows import REGISTRY, Framework, Row
from ._base import Adapter, AsIs, Prober, export_capsule

__all__ = [
    "HOST",
    "Adapter",
    "Prober",
    "ADAPTERS",
    "ALL_ADAPTERS",
    "AsIs",
    "register",
    "adapter_named",
    "adapter_for",
    "producer_error",
    "producer_name",
    "symbolic_error",
    "export_capsule",
]

_made: dict[str, Adapter] = {}  # name -> its adapter, once made (names are never reused)


def _adapter(name: str) -> Adapter:
    adapter = _made.get(name)
    if adapter is None:
        adapter = _made.setdefault(name, _make(REGISTRY.entries[name]))  # another thread's, if it won
    return adapter


def _make(framework: Framework) -> Adapter:
    """The adapter for a registry entry: its class imported (the framework is not) and made."""
    where, _, name = framework.adapter.partition(":")
    cls = getattr(importlib.import_module(where), name, None)
    if not (isinstance(cls, type) and issubclass(cls, Adapter)):
        raise OptionError(f"{framework.name!r}: adapter={framework.adapter!r} is not an Adapter subclass "
                          "(dlbridge._adapters.Adapter), named as 'package.module:Class'")  # fmt: skip
    return cls(framework)


class _Table(Mapping[str, Adapter]):
    """The registry's adapters by name, in its order, each made when first looked up: those dlbridge
    converts into (``ADAPTERS``), or every framework (``ALL_ADAPTERS``: also those it only reads from)."""

    def __init__(self, targets_only: bool) -> None:
        self._targets_only = targets_only

    def _has(self, framework: Framework | None) -> bool:
        return framework is not None and (framework.target or not self._targets_only)

    def __getitem__(self, name: str) -> Adapter:
        if not self._has(REGISTRY.entries.get(name)):
            raise KeyError(name)
        return _adapter(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._has(REGISTRY.entries.get(name))

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, framework in REGISTRY.entries.items() if self._has(framework)])

    def __len__(self) -> int:
        return sum(1 for framework in REGISTRY.entries.values() if self._has(framework))

    def __repr__(self) -> str:
        return f"<dlbridge adapters: {', '.join(self)}>"


ADAPTERS: Mapping[str, Adapter] = _Table(targets_only=True)
ALL_ADAPTERS: Mapping[str, Adapter] = _Table(targets_only=False)
# The CPU framework any CPU capsule can land in (staging for copies, the report's reference arrays);
# made on first use (``__getattr__``).
HOST: Adapter


def register(framework: Framework, rows: Iterable[Row]) -> Adapter:
    """Add a framework to the registry for the rest of the process: its entry (a ``dlbridge._rows.Framework``
    naming its adapter class) and its capability rows (made with ``dlbridge._rows.row``, consumer
    ``framework.name``). ``convert(x, "<name>")`` then reaches it, and its arrays are recognised as
    sources. Its adapter is made now, so that an incomplete one fails here, naming what it lacks; it is
    returned. OptionError if a name is taken or a row is not the framework's."""
    adapter = _make(framework)
    REGISTRY.register(framework, rows)
    _made[framework.name] = adapter
    return adapter


# --- lookups derived from the registry (rebuilt when it changes) ------------------------------------

_NAMES: dict[str, str] = {}  # name, module, alias, module alias -> the framework's name (targets)
_BY_MODULE: dict[str, str] = {}  # top-level module of its arrays -> the framework's name (all)
_derived: list[int] = [-1]  # the registry generation the lookups were derived at


def _lookups() -> None:
    if _derived[0] == REGISTRY.generation:
        return
    entries = REGISTRY.entries
    names = {n: f.name for f in entries.values() if f.target for n in (f.name, f.module, *f.aliases)}
    names.update({n: f.name for f in entries.values() if f.target for n in f.module_aliases})
    by_module: dict[str, str] = {}
    for f in entries.values():
        for module in f.producer_modules:
            by_module.setdefault(module, f.name)
    _NAMES.clear()
    _NAMES.update(names)
    _BY_MODULE.clear()
    _BY_MODULE.update(by_module)
    _NOT_ARRAYS.clear()  # types found to be no framework's array may be the new one's
    _derived[0] = REGISTRY.generation


def adapter_named(to: object) -> Adapter:
    """The adapter for a target given as a name ("torch", "pytorch", "np") or a module."""
    _lookups()
    key = to.__name__ if isinstance(to, ModuleType) else to
    name = _NAMES.get(key) if isinstance(key, str) else None
    if name is None:
        valid = ", ".join(sorted(ADAPTERS))
        raise OptionError(f"unknown target framework {to!r}; expected one of: {valid} (a name or the module)")
    return _adapter(name)


# Types already recognised (a class's bases never change, so a hit stays true), and types found
# to be no framework's array, with len(sys.modules) at the time: a miss is trusted only until
# more modules load (the framework may come later, or register a virtual subclass on import) or the
# registry changes. Both bounded, for processes that mint classes.
_BY_TYPE: dict[type, Adapter] = {}
_NOT_ARRAYS: dict[type, int] = {}


def adapter_for(obj: object) -> Adapter | None:
    """The adapter whose arrays ``obj`` is, judged by type via sys.modules (imports no framework)."""
    cls = type(obj)
    adapter = _BY_TYPE.get(cls)
    if adapter is not None:
        return adapter
    loaded = len(sys.modules)
    if _NOT_ARRAYS.get(cls) == loaded and _derived[0] == REGISTRY.generation:
        return None
    return _classify(obj, cls, loaded)


def _classify(obj: object, cls: type, loaded: int) -> Adapter | None:
    _lookups()
    found = None
    for framework in REGISTRY.entries.values():  # by class hierarchy: subclasses defined anywhere count
        module = sys.modules.get(framework.array_type[0])
        base = getattr(module, framework.array_type[1], None) if module is not None else None
        if isinstance(base, type) and _subclass(cls, base):
            found = _adapter(framework.name)
            break
    if found is None:  # by module: arrays that are instances only virtually (JAX's tracers)
        by_module = _by_module(cls)
        if by_module is not None and by_module.is_array(obj):
            found = by_module
    if found is None:
        if len(_NOT_ARRAYS) >= 256:
            _NOT_ARRAYS.clear()
        _NOT_ARRAYS[cls] = loaded
        return None
    found = found.for_type(cls)
    if len(_BY_TYPE) >= 256:
        _BY_TYPE.clear()
    _BY_TYPE[cls] = found
    return found


def _subclass(cls: type, base: type) -> bool:
    try:
        return issubclass(cls, base)
    except TypeError:  # a metaclass whose __subclasscheck__ refuses the question
        return False


def _by_module(cls: type) -> Adapter | None:
    """The adapter of the framework whose module ``cls`` comes from, by its top-level name."""
    _lookups()
    module = cls.__module__
    name = _BY_MODULE.get(module.partition(".")[0]) if isinstance(module, str) else None
    return _adapter(name) if name is not None else None


def producer_error(x: object, err: BaseException, call: str) -> DLBridgeError:
    """The error for a producer whose ``call`` (``__dlpack__``, ``__dlpack_device__``) raised
    ``err``: one naming the fix when its adapter knows the state, else a generic one."""
    adapter = adapter_for(x)
    try:
        known = adapter.state_error(x) if adapter is not None else None
    except MemoryError:
        raise
    except Exception:  # an object too broken to ask: the producer's own error is reported
        known = None
    if known is None:
        known = symbolic_error(type(x))
    if known is not None:
        return known
    return ProducerError(f"{type(x).__name__}.{call}() failed: {type(err).__name__}: {err}")


def symbolic_error(cls: type) -> DLBridgeError | None:
    """For a placeholder a framework traces with (no data, often no ``__dlpack__``): what to do."""
    adapter = _by_module(cls)
    return adapter.symbolic_error(cls) if adapter is not None else None


def producer_name(obj: object) -> str | None:
    """A framework name for known arrays, else the producer's top-level module name."""
    adapter = adapter_for(obj)
    if adapter is not None:
        return adapter.name
    module = type(obj).__module__
    top = module.partition(".")[0] if isinstance(module, str) else None
    return None if top == "builtins" else top


if not TYPE_CHECKING:  # (to the checker HOST is the module attribute declared above)

    def __getattr__(name: str) -> Any:
        if name == "HOST":
            host = globals()["HOST"] = _adapter(next(n for n, f in REGISTRY.entries.items() if f.host))
            return host
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
