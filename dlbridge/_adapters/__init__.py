"""The framework table: one adapter per framework, looked up by name, module or array."""

from __future__ import annotations

from types import ModuleType

from .._errors import OptionError
from ._base import Adapter, export_capsule
from ._cupy import CupyAdapter
from ._jax import JaxAdapter
from ._numpy import NumpyAdapter
from ._paddle import PaddleAdapter
from ._tensorflow import TensorflowAdapter
from ._torch import TorchAdapter

__all__ = ["Adapter", "ADAPTERS", "adapter_named", "adapter_for", "producer_name", "export_capsule"]

# paddle before tensorflow: code that imports the frameworks in this order must not crash
# (importing paddle after tensorflow does; see PaddleAdapter.unsafe_after).
ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in (TorchAdapter(), CupyAdapter(), JaxAdapter(), NumpyAdapter(), PaddleAdapter(), TensorflowAdapter())
}
_NAMES: dict[str, Adapter] = {
    **{alias: a for a in ADAPTERS.values() for alias in (a.name, a.module, *a.aliases)},
    "jax.numpy": ADAPTERS["jax"],
}
_BY_MODULE: dict[str, Adapter] = {m: a for a in ADAPTERS.values() for m in a.producer_modules}


def adapter_named(to: object) -> Adapter:
    """The adapter for a target given as a name ("torch", "pytorch", "np") or a module."""
    key = to.__name__ if isinstance(to, ModuleType) else to
    adapter = _NAMES.get(key) if isinstance(key, str) else None
    if adapter is None:
        valid = ", ".join(sorted(ADAPTERS))
        raise OptionError(f"unknown target framework {to!r}; expected one of: {valid} (a name or the module)")
    return adapter


# Types already recognised (a class's bases never change, so a hit stays true). Misses are not
# cached: the framework may not be loaded yet. Bounded, for processes that mint classes.
_BY_TYPE: dict[type, Adapter] = {}


def adapter_for(obj: object) -> Adapter | None:
    """The adapter whose arrays ``obj`` is, judged by type via sys.modules (imports nothing)."""
    cls = type(obj)
    adapter = _BY_TYPE.get(cls)
    if adapter is not None:
        return adapter
    module = cls.__module__
    adapter = _BY_MODULE.get(module.partition(".")[0]) if isinstance(module, str) else None
    if adapter is not None and adapter.is_array(obj):
        if len(_BY_TYPE) >= 256:
            _BY_TYPE.clear()
        _BY_TYPE[cls] = adapter
        return adapter
    return None


def producer_name(obj: object) -> str | None:
    """A framework name for known arrays, else the producer's top-level module name."""
    adapter = adapter_for(obj)
    if adapter is not None:
        return adapter.name
    module = type(obj).__module__
    top = module.partition(".")[0] if isinstance(module, str) else None
    return None if top == "builtins" else top
