"""Sharded JAX arrays: each addressable shard handed over on its own, and the sharded array rebuilt.

JAX refuses DLPack for an array that spans several devices, but each shard is a single-device array
that any framework can share zero-copy. ``shards`` hands them over with their indices;
``from_shards`` puts (possibly converted) parts back on their devices and rebuilds the ``jax.Array``.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast, overload

from ._adapters import ADAPTERS, adapter_for, adapter_named
from ._adapters._jax import JaxAdapter
from ._api import convert
from ._errors import DLBridgeError, LayoutError, NotAnArrayError, OptionError
from ._options import NOT_GIVEN
from ._pipeline._devices import device_of

if TYPE_CHECKING:
    import cupy
    import jax
    import numpy
    import paddle
    import tensorflow
    import torch

    from ._types import DeviceLike, DTypeLike, FallbackOption

__all__ = ["shards", "from_shards", "Index"]

# A shard's place in the global array: one slice per dimension (``jax.Shard.index``).
Index: TypeAlias = "tuple[slice, ...]"

_JAX = cast(JaxAdapter, ADAPTERS["jax"])


def _jax_array(x: Any, what: str) -> None:
    """Raise unless ``x`` is a concrete JAX array (a tracer or deleted array: the adapter's error)."""
    if not _JAX.is_array(x):
        cls = type(x)
        raise NotAnArrayError(
            f"{what} takes a jax.Array (sharded or not), got {cls.__module__}.{cls.__qualname__}; "
            "other arrays have one buffer: dlbridge.convert(x, to) hands it over"
        )
    error = _JAX.state_error(x) if _JAX.sharded_over(x) <= 1 else None  # a tracer, a deleted array
    if error is not None:
        raise error


@overload
def shards(x: jax.Array | Any, to: Literal["torch", "pytorch"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ...) -> list[tuple[Index, torch.Tensor]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["cupy"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ...) -> list[tuple[Index, cupy.ndarray]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["jax", "jax.numpy"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ...) -> list[tuple[Index, jax.Array]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["numpy", "np"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ...) -> list[tuple[Index, numpy.ndarray[Any, Any]]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["tensorflow", "tf"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ...) -> list[tuple[Index, tensorflow.Tensor]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["paddle"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ...) -> list[tuple[Index, paddle.Tensor]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: str | ModuleType, /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ...) -> list[tuple[Index, Any]]: ...  # fmt: skip
def shards(x: jax.Array | Any, to: str | ModuleType, /, *, fallback: FallbackOption = NOT_GIVEN,
           dtype: DTypeLike | None = None, device: DeviceLike | None = None,
           copy: bool | None = None) -> list[tuple[Index, Any]]:  # fmt: skip
    """Each addressable shard of the JAX array ``x`` handed to framework ``to``, as ``(index, array)``.

    ``index`` is the shard's ``shard.index``: one slice per dimension into ``x``'s global shape.
    The list is in the order of ``x.addressable_shards`` (one entry per device: a replicated
    dimension gives several entries with the same index, each over its own device's buffer).
    Each shard converts as ``dlbridge.convert(shard.data, to, ...)`` with these options: zero-copy
    where the target can hold it. For ``to="jax"`` each shard stays on its own device unless
    ``device=`` is given. A single-device array gives one entry covering all of it. Only this
    process's (addressable) shards are listed. ``dlbridge.from_shards`` rebuilds the sharded array.

    Raises NotAnArrayError when ``x`` is not a ``jax.Array`` (other arrays: ``dlbridge.convert``).
    """
    target = adapter_named(to)  # an unknown target is an OptionError before anything else
    _jax_array(x, "dlbridge.shards(x, to)")
    keep_devices = device is None and target is _JAX
    parts: list[tuple[Index, Any]] = []
    for shard in x.addressable_shards:
        where = shard.device if keep_devices else device
        part = convert(shard.data, target.name, fallback=fallback, dtype=dtype, device=where, copy=copy)
        parts.append((tuple(shard.index), part))
    return parts


def from_shards(parts: Sequence[tuple[Index, Any]], sharding: jax.sharding.Sharding, /, *,
                shape: Sequence[int] | None = None, copy: bool | None = None) -> jax.Array:  # fmt: skip
    """The sharded ``jax.Array`` made of ``parts``, the ``(index, array)`` pairs ``dlbridge.shards``
    returns (their arrays may be of any framework by now), laid out by ``sharding``.

    Each part is converted to JAX on the device whose index (``sharding.addressable_devices_indices_map``)
    it carries: zero-copy where JAX can share it (64-byte aligned CPU memory; ``copy=False`` refuses a
    copy, ``copy=True`` always copies, e.g. for read-only NumPy parts, which JAX cannot import).
    Parts with the same index (a replicated dimension) go to that index's devices in order (on GPUs,
    each to the device it is already on, where one is). The global
    shape is read off the indices (the largest stop per dimension) unless ``shape=`` is given (needed
    where this process does not hold the last shard of a dimension).

    Raises OptionError when the parts do not cover the sharding's addressable devices exactly once
    or disagree in dtype, LayoutError when a part's shape is not its index's.
    """
    _check_sharding(sharding)
    pairs = _pairs(parts)
    shapes = [_shape_of(array, i) for i, (_, array) in enumerate(pairs)]
    global_shape = _derived_shape(pairs, shapes) if shape is None else _given_shape(shape)
    # Every part's index, resolved against the global shape: (start, stop) per dimension.
    spans = [_span(index, global_shape, part_shape, i) for i, ((index, _), part_shape) in enumerate(zip(pairs, shapes))]
    order = _assign(pairs, spans, sharding, global_shape, shape is not None)
    arrays: list[Any] = [None] * len(order)
    for slot, (dev, i) in enumerate(order):
        arrays[slot] = convert(pairs[i][1], "jax", device=dev, copy=copy)
    dtypes = {str(a.dtype) for a in arrays}
    if len(dtypes) > 1:
        found = ", ".join(f"part {i}: {a.dtype}" for (_, i), a in zip(order, arrays))
        raise OptionError(
            f"dlbridge.from_shards: the parts have different dtypes ({found}); one array has one dtype: "
            "convert the parts to the same dtype first"
        )
    try:
        result: jax.Array = _JAX.mod.make_array_from_single_device_arrays(global_shape, sharding, arrays)
    except (DLBridgeError, MemoryError):
        raise
    except Exception as err:  # JAX's own check (a layout it disagrees with): named, not a crash
        raise OptionError(
            f"dlbridge.from_shards: jax.make_array_from_single_device_arrays refused the parts for "
            f"{_describe(sharding)}, shape {list(global_shape)}: {type(err).__name__}: {err}"
        ) from err
    return result


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
    mod = _JAX.mod  # from_shards makes a JAX array: JAX is needed (MissingFrameworkError otherwise)
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
        try:
            if device_of(pairs[i][1], adapter_for(pairs[i][1])) == here:
                return k
        except DLBridgeError:
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
