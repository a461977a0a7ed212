"""Sharded JAX arrays, JAX's side of ``dlbridge.shards`` and ``dlbridge.from_shards`` (``dlbridge/_shards.py``,
which converts the parts): each addressable shard with its index and device, and the sharded array
rebuilt from parts converted back to JAX, each on the device its index belongs to.

JAX refuses DLPack for an array that spans several devices, but each shard is a single-device array
that any framework can share zero-copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias, cast

from .._errors import DLBridgeError, LayoutError, NotAnArrayError, OptionError
from . import ADAPTERS, Adapter, adapter_for
from ._jax import JaxAdapter

__all__ = ["Index", "addressable", "placement", "assemble"]

# A shard's place in the global array: one slice per dimension (``jax.Shard.index``).
Index: TypeAlias = "tuple[slice, ...]"


def _jax() -> JaxAdapter:
    return cast(JaxAdapter, ADAPTERS["jax"])


def addressable(x: Any, target: Adapter, device: Any, what: str) -> list[tuple[Index, Any, Any]]:
    """``(index, data, where)`` for each addressable shard of the JAX array ``x``, in the order of
    ``x.addressable_shards``: its index into the global shape, its single-device array, and where its
    conversion for ``target`` puts it (``device``, or for JAX itself with no device given, its own)."""
    jax = _jax()
    if not jax.is_array(x):
        cls = type(x)
        raise NotAnArrayError(
            f"{what} takes a jax.Array (sharded or not), got {cls.__module__}.{cls.__qualname__}; "
            "other arrays have one buffer: dlbridge.convert(x, to) hands it over"
        )
    error = jax.state_error(x) if jax.sharded_over(x) <= 1 else None  # a tracer, a deleted array
    if error is not None:
        raise error
    keep_devices = device is None and target is jax
    return [(tuple(s.index), s.data, s.device if keep_devices else device) for s in x.addressable_shards]


def placement(parts: Any, sharding: Any, shape: Sequence[int] | None) -> tuple[list[tuple[Index, Any]], list[tuple[Any, int]], tuple[int, ...]]:  # fmt: skip
    """For ``from_shards``: the ``(index, array)`` pairs checked, ``(device, part number)`` for each
    addressable device of ``sharding`` (each part once, by its index), and the global shape (read off
    the indices unless ``shape`` is given)."""
    _check_sharding(sharding)
    pairs = _pairs(parts)
    shapes = [_shape_of(array, i) for i, (_, array) in enumerate(pairs)]
    global_shape = _derived_shape(pairs, shapes) if shape is None else _given_shape(shape)
    # Every part's index, resolved against the global shape: (start, stop) per dimension.
    spans = [_span(index, global_shape, part_shape, i) for i, ((index, _), part_shape) in enumerate(zip(pairs, shapes))]
    return pairs, _assign(pairs, spans, sharding, global_shape, shape is not None), global_shape


def assemble(arrays: list[Any], order: list[tuple[Any, int]], global_shape: tuple[int, ...], sharding: Any) -> Any:
    """The sharded ``jax.Array`` of ``arrays`` (JAX arrays, one per addressable device, in ``order``)."""
    dtypes = {str(a.dtype) for a in arrays}
    if len(dtypes) > 1:
        found = ", ".join(f"part {i}: {a.dtype}" for (_, i), a in zip(order, arrays))
        raise OptionError(
            f"dlbridge.from_shards: the parts have different dtypes ({found}); one array has one dtype: "
            "convert the parts to the same dtype first"
        )
    try:
        return _jax().mod.make_array_from_single_device_arrays(global_shape, sharding, arrays)
    except (DLBridgeError, MemoryError):
        raise
    except Exception as err:  # JAX's own check (a layout it disagrees with): named, not a crash
        raise OptionError(
            f"dlbridge.from_shards: jax.make_array_from_single_device_arrays refused the parts for "
            f"{_describe(sharding)}, shape {list(global_shape)}: {type(err).__name__}: {err}"
        ) from err


def _assign(pairs: list[tuple[Any, Any]], spans: list[tuple[tuple[int, int], ...]], sharding: Any,
            global_shape: tuple[int, ...], shape_given: bool) -> list[tuple[Any, int]]:  # fmt: skip
    """(device, part number) for each addressable device of ``sharding``: each part once, by its span."""
    wanted = _device_spans(sharding, global_shape)
    free: dict[tuple[tuple[int, int], ...], list[int]] = {}
    for i, span in enumerate(spans):
        free.setdefault(span, []).append(i)
    order: list[tuple[Any, int]] = []
    missing: list[str] = []
    for dev, span in wanted:
        waiting = free.get(span)
        if waiting:
            order.append((dev, waiting.pop(_nearest(waiting, pairs, dev))))
        else:
            missing.append(f"{dev.platform}:{dev.id} needs {_text(span)}")  # str(dev) varies by JAX version
    extra = [f"part {i} at {_text(spans[i])}" for waiting in free.values() for i in waiting]
    if missing or extra:
        raise OptionError(
            f"dlbridge.from_shards: the {len(pairs)} parts do not cover the {len(wanted)} addressable devices of "
            f"{_describe(sharding)} for shape {list(global_shape)} exactly once"
            + (f"; no part for: {', '.join(missing)}" if missing else "")
            + (f"; no device for: {', '.join(extra)}" if extra else "")
            + ". Pass the list dlbridge.shards(x, to) returned (one (index, array) per addressable shard, "
            "any framework), with the sharding of x"
            + ("" if shape_given else ", and shape=x.shape if the indices do not reach the ends")
        )
    return order


# --- validation -----------------------------------------------------------------------------------


def _check_sharding(sharding: Any) -> None:
    mod = _jax().mod  # from_shards makes a JAX array: JAX is needed (MissingFrameworkError otherwise)
    if not isinstance(sharding, mod.sharding.Sharding):
        cls = type(sharding)
        raise OptionError(
            f"dlbridge.from_shards(parts, sharding): sharding is a {cls.__module__}.{cls.__qualname__}, not a "
            "jax.sharding.Sharding; pass the sharding of the original array (x.sharding), or e.g. "
            "jax.sharding.NamedSharding(mesh, PartitionSpec(...))"
        )


def _pairs(parts: Any) -> list[tuple[Index, Any]]:
    if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence) or not parts:
        raise OptionError(
            f"dlbridge.from_shards(parts, sharding): parts is {_short(parts)}; pass a non-empty list of "
            "(index, array) pairs, as dlbridge.shards(x, to) returns"
        )
    pairs: list[tuple[Index, Any]] = []
    for i, pair in enumerate(parts):
        ok = isinstance(pair, (tuple, list)) and len(pair) == 2
        index = pair[0] if ok else None
        if not ok or not isinstance(index, tuple) or not all(isinstance(s, slice) for s in index):
            raise OptionError(
                f"dlbridge.from_shards(parts, sharding): part {i} is {_short(pair)}; each part is an "
                "(index, array) pair whose index is a tuple of slices (shard.index), as dlbridge.shards returns"
            )
        pairs.append((index, pair[1]))
    return pairs


def _shape_of(array: Any, i: int) -> tuple[int, ...]:
    try:
        return tuple(int(n) for n in array.shape)
    except MemoryError:
        raise
    except Exception as err:
        cls = type(array)
        raise NotAnArrayError(
            f"dlbridge.from_shards: part {i} holds a {cls.__module__}.{cls.__qualname__}, which has no shape; "
            "each part's array is an array of a framework dlbridge converts (what dlbridge.shards returned)"
        ) from err


def _derived_shape(pairs: list[tuple[Index, Any]], shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    ndim = len(shapes[0])
    dims = [0] * ndim
    for i, ((index, _), part_shape) in enumerate(zip(pairs, shapes)):
        if len(index) != ndim or len(part_shape) != ndim:
            raise LayoutError(
                f"dlbridge.from_shards: part {i} has index {_text_index(index)} and shape {list(part_shape)}, but "
                f"part 0 has {ndim} dimensions; every part has one slice per dimension of the global array"
            )
        for d, (s, n) in enumerate(zip(index, part_shape)):
            start = 0 if s.start is None else s.start
            if not isinstance(start, int) or start < 0:
                raise LayoutError(
                    f"dlbridge.from_shards: part {i}'s index {_text_index(index)} starts at {s.start!r}; with "
                    "negative or unknown starts pass shape= (the global shape)"
                )
            dims[d] = max(dims[d], start + n if s.stop is None else s.stop)
    return tuple(dims)


def _given_shape(shape: Any) -> tuple[int, ...]:
    try:
        dims = tuple(int(n) for n in shape)
    except MemoryError:
        raise
    except Exception as err:
        raise OptionError(f"dlbridge.from_shards: shape={shape!r}; pass the global shape, e.g. shape=x.shape") from err
    if any(n < 0 for n in dims):
        raise OptionError(f"dlbridge.from_shards: shape={shape!r} has a negative size; pass e.g. shape=x.shape")
    return dims


def _span(
    index: Index, global_shape: tuple[int, ...], part_shape: tuple[int, ...], i: int
) -> tuple[tuple[int, int], ...]:
    if len(index) != len(global_shape) or len(part_shape) != len(global_shape):
        raise LayoutError(
            f"dlbridge.from_shards: part {i} has index {_text_index(index)} and shape {list(part_shape)}, for a "
            f"global shape {list(global_shape)}: one slice and one size per dimension of the global array"
        )
    span = []
    for s, n, size in zip(index, global_shape, part_shape):
        start, stop, step = s.indices(n)
        if step != 1 or stop - start != size:
            raise LayoutError(
                f"dlbridge.from_shards: part {i} has shape {list(part_shape)}, but its index "
                f"{_text_index(index)} in the global shape {list(global_shape)} spans "
                f"{[len(range(*t.indices(m))) for t, m in zip(index, global_shape)]}; pass each shard's array "
                "with its own index (the pairs dlbridge.shards returned), unsliced"
            )
        span.append((start, stop))
    return tuple(span)


def _device_spans(sharding: Any, global_shape: tuple[int, ...]) -> list[tuple[Any, tuple[tuple[int, int], ...]]]:
    try:
        found = sharding.addressable_devices_indices_map(global_shape)
    except MemoryError:
        raise
    except Exception as err:
        raise OptionError(
            f"dlbridge.from_shards: {_describe(sharding)} cannot lay out shape {list(global_shape)} "
            f"({type(err).__name__}: {err}); pass the sharding the parts came from, or shape= the global shape"
        ) from err
    out = []
    for dev, index in found.items():
        if index is None:  # not on this device (JAX says None for devices holding nothing)
            continue
        full = tuple(index) + (slice(None),) * (len(global_shape) - len(index))
        out.append((dev, tuple(s.indices(n)[:2] for s, n in zip(full, global_shape))))
    return out


def _nearest(waiting: list[int], pairs: list[tuple[Index, Any]], dev: Any) -> int:
    """Which of the parts ``waiting`` for one index (a replicated one) ``dev`` takes: one already on
    that GPU where there is one (no copy), else the first. Every CPU device is the same memory."""
    if len(waiting) == 1 or getattr(dev, "platform", "cpu") == "cpu":
        return 0
    here = (2, getattr(dev, "local_hardware_id", None))  # DLPack's (kDLCUDA, id), as jax.dlpack numbers it
    for k, i in enumerate(waiting):
        part = pairs[i][1]
        source = adapter_for(part)
        try:
            if (source.device_of(part) if source is not None else part.__dlpack_device__()) == here:
                return k
        except MemoryError:
            raise
        except Exception:  # a part that cannot say where it lives: not this device's (its conversion says why)
            continue
    return 0


def _describe(sharding: Any) -> str:
    return f"{type(sharding).__name__} over {len(sharding.device_set)} devices"


def _text(span: tuple[tuple[int, int], ...]) -> str:
    return "[" + ", ".join(f"{a}:{b}" for a, b in span) + "]"


def _text_index(index: Any) -> str:
    def one(s: Any) -> str:
        if not isinstance(s, slice):
            return repr(s)
        return f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"

    return "[" + ", ".join(one(s) for s in index) + "]"


def _short(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"
