"""What the guard asks of argument and result values: containers mapped, arrays' layouts and memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._adapters import adapter_for
from .._errors import DLBridgeError
from .._pipeline._devices import device_of

__all__ = ["CONTAINERS", "MAX_DEPTH", "map_items", "opaque", "holds_array", "unchanged", "layout", "device_or_unknown"]

CONTAINERS = (tuple, list, dict)
# How deep the guard walks tuples, lists and dicts (the Python frames each level costs stay far below
# the recursion limit); a deeper one, or one that holds itself, is refused before the body runs.
MAX_DEPTH = 100


def map_items(value: Any, convert: Callable[[Any, Any], Any]) -> Any:
    """``value`` (a tuple, namedtuple, list or dict) with ``convert`` applied to its items; same object if unchanged."""
    if isinstance(value, dict):
        items = {k: convert(v, k) for k, v in value.items()}
        changed = any(items[k] is not v for k, v in value.items())
        return items if changed else value
    out = [convert(v, i) for i, v in enumerate(value)]
    if all(a is b for a, b in zip(out, value)):
        return value
    if isinstance(value, list):
        return out
    return type(value)(*out) if hasattr(type(value), "_fields") else tuple(out)


def opaque(x: Any) -> bool:
    """Whether ``x`` is a framework's array object with no data DLPack can carry (``Adapter.opaque``)."""
    source = adapter_for(x)
    return source is not None and source.opaque(x)


def holds_array(value: Any) -> bool:
    """Whether a tuple, list or dict holds an array supporting DLPack, at any depth (each container
    looked at once: one that holds itself, or nests thousands deep, is walked without recursion)."""
    seen, stack = {id(value)}, [value]
    while stack:
        container = stack.pop()
        for v in container.values() if isinstance(container, dict) else container:
            if hasattr(type(v), "__dlpack__"):
                return True
            if isinstance(v, CONTAINERS) and id(v) not in seen:
                seen.add(id(v))
                stack.append(v)
    return False


def unchanged(r: Any, given: tuple[Any, Any, Any]) -> bool:
    """Whether the converted argument ``r`` still has the layout it was handed with, over the caller's memory."""
    return layout(r) == given[2] and _same_memory(r, given[1])


# type -> how to read an array's (shape, dtype, strides); found once per type, by attribute
_LAYOUT_READERS: dict[type, Callable[[Any], tuple[Any, Any, Any]]] = {}


def layout(x: Any) -> tuple[Any, Any, Any]:
    """What an in-place metadata change alters: shape, dtype and strides (``None`` where not exposed)."""
    read = _LAYOUT_READERS.get(type(x))
    if read is None:
        if len(_LAYOUT_READERS) >= 256:
            _LAYOUT_READERS.clear()
        read = _LAYOUT_READERS[type(x)] = _layout_reader(x)
    return read(x)


def _layout_reader(x: Any) -> Callable[[Any], tuple[Any, Any, Any]]:
    if hasattr(x, "strides"):  # NumPy, CuPy: byte strides, settable along with shape and dtype
        return lambda a: (a.shape, a.dtype, a.strides)
    if callable(getattr(x, "stride", None)):  # torch: element strides; t_(), unsqueeze_(), as_strided_()
        return lambda a: (a.shape, a.dtype, a.stride())
    return lambda a: (getattr(a, "shape", None), getattr(a, "dtype", None), None)  # immutable (JAX)


def _same_memory(a: Any, b: Any) -> bool:
    """Whether two arrays of known frameworks start at the same address (no copy between them)."""
    da, db = adapter_for(a), adapter_for(b)
    if da is None or db is None:
        return False
    try:
        return da.data_ptr(a) == db.data_ptr(b)
    except MemoryError:
        raise
    except Exception:
        return False


def device_or_unknown(x: Any) -> tuple[int, int]:
    try:
        return device_of(x)
    except DLBridgeError:
        return (0, 0)  # unknown: never equal to a real device, so results are converted
