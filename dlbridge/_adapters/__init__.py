"""The framework table: one adapter per framework, looked up by name, module or array."""

from __future__ import annotations

import sys
from types import ModuleType

from .._errors import DLBridgeError, OptionError, ProducerError
from ._array_api_strict import ArrayApiStrictAdapter
from ._base import Adapter, AsIs, Prober, export_capsule
from ._cupy import CupyAdapter
from ._jax import JaxAdapter
from ._mlx import MlxAdapter
from ._numpy import NumpyAdapter
from ._onnxruntime import OnnxruntimeAdapter
from ._paddle import PaddleAdapter
from ._pyarrow import PyarrowAdapter
from ._tensorflow import TensorflowAdapter
from ._torch import TorchAdapter
from ._warp import WarpAdapter

__all__ = [
    "HOST",
    "Adapter",
    "Prober",
    "ADAPTERS",
    "AsIs",
    "adapter_named",
    "adapter_for",
    "producer_error",
    "producer_name",
    "symbolic_error",
    "export_capsule",
]

# paddle before tensorflow: code that imports the frameworks in this order must not crash
# (importing paddle after tensorflow does; see PaddleAdapter.unsafe_after).
ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in (
        TorchAdapter(),
        CupyAdapter(),
        JaxAdapter(),
        NumpyAdapter(),
        PaddleAdapter(),
        TensorflowAdapter(),
        MlxAdapter(),
        ArrayApiStrictAdapter(),
    )
}
ADAPTERS.update({a.name: a for a in (OnnxruntimeAdapter(), WarpAdapter())})
# Frameworks dlbridge reads arrays from but does not convert into (no to_<name>): adapter_for knows
# their arrays (states, errors, read-only exports); they are no target and not in the report.
PRODUCER_ONLY: tuple[Adapter, ...] = (PyarrowAdapter(),)
_NAMES: dict[str, Adapter] = {
    **{alias: a for a in ADAPTERS.values() for alias in (a.name, a.module, *a.aliases)},
    **{alias: a for a in ADAPTERS.values() for alias in a.module_aliases},
}
# The CPU framework any CPU capsule can land in (staging for copies, the report's reference arrays).
HOST: Adapter = next(a for a in ADAPTERS.values() if a.host)
_BY_MODULE: dict[str, Adapter] = {m: a for a in (*ADAPTERS.values(), *PRODUCER_ONLY) for m in a.producer_modules}


def adapter_named(to: object) -> Adapter:
    """The adapter for a target given as a name ("torch", "pytorch", "np") or a module."""
    key = to.__name__ if isinstance(to, ModuleType) else to
    adapter = _NAMES.get(key) if isinstance(key, str) else None
    if adapter is None:
        valid = ", ".join(sorted(ADAPTERS))
        raise OptionError(f"unknown target framework {to!r}; expected one of: {valid} (a name or the module)")
    return adapter


# Types already recognised (a class's bases never change, so a hit stays true), and types found
# to be no framework's array, with len(sys.modules) at the time: a miss is trusted only until
# more modules load (the framework may come later, or register a virtual subclass on import).
# Both bounded, for processes that mint classes.
_BY_TYPE: dict[type, Adapter] = {}
_NOT_ARRAYS: dict[type, int] = {}


def adapter_for(obj: object) -> Adapter | None:
    """The adapter whose arrays ``obj`` is, judged by type via sys.modules (imports nothing)."""
    cls = type(obj)
    adapter = _BY_TYPE.get(cls)
    if adapter is not None:
        return adapter
    loaded = len(sys.modules)
    if _NOT_ARRAYS.get(cls) == loaded:
        return None
    return _classify(obj, cls, loaded)


def _classify(obj: object, cls: type, loaded: int) -> Adapter | None:
    found = None
    for candidate in (*ADAPTERS.values(), *PRODUCER_ONLY):  # by class hierarchy: subclasses defined anywhere count
        base = candidate.array_class()
        if base is not None and _subclass(cls, base):
            found = candidate
            break
    if found is None:  # by module: arrays that are instances only virtually (JAX's tracers)
        module = cls.__module__
        by_module = _BY_MODULE.get(module.partition(".")[0]) if isinstance(module, str) else None
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
    module = cls.__module__
    adapter = _BY_MODULE.get(module.partition(".")[0]) if isinstance(module, str) else None
    return adapter.symbolic_error(cls) if adapter is not None else None


def producer_name(obj: object) -> str | None:
    """A framework name for known arrays, else the producer's top-level module name."""
    adapter = adapter_for(obj)
    if adapter is not None:
        return adapter.name
    module = type(obj).__module__
    top = module.partition(".")[0] if isinstance(module, str) else None
    return None if top == "builtins" else top
