"""Sharded JAX arrays: each addressable shard handed over on its own, and the sharded array rebuilt.

JAX refuses DLPack for an array that spans several devices, but each shard is a single-device array
that any framework can share zero-copy. ``shards`` hands them over with their indices;
``from_shards`` puts (possibly converted) parts back on their devices and rebuilds the ``jax.Array``.
Both convert as ``convert`` does; what is JAX's (shards, devices, the rebuild) is on the JAX adapter's
side (``_adapters/_jax_shards.py``), loaded with the first call.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

from ._api import convert
from ._options import NOT_GIVEN, Readonly

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


@overload
def shards(x: jax.Array | Any, to: Literal["torch", "pytorch"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ..., readonly: Readonly = ...) -> list[tuple[Index, torch.Tensor]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["cupy"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ..., readonly: Readonly = ...) -> list[tuple[Index, cupy.ndarray]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["jax", "jax.numpy"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ..., readonly: Readonly = ...) -> list[tuple[Index, jax.Array]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["numpy", "np"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ..., readonly: Readonly = ...) -> list[tuple[Index, numpy.ndarray[Any, Any]]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["tensorflow", "tf"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ..., readonly: Readonly = ...) -> list[tuple[Index, tensorflow.Tensor]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: Literal["paddle"], /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ..., readonly: Readonly = ...) -> list[tuple[Index, paddle.Tensor]]: ...  # fmt: skip
@overload
def shards(x: jax.Array | Any, to: str | ModuleType, /, *, fallback: FallbackOption = ...,
           dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
           copy: bool | None = ..., readonly: Readonly = ...) -> list[tuple[Index, Any]]: ...  # fmt: skip
def shards(x: jax.Array | Any, to: str | ModuleType, /, *, fallback: FallbackOption = NOT_GIVEN,
           dtype: DTypeLike | None = None, device: DeviceLike | None = None,
           copy: bool | None = None, readonly: Readonly = "keep") -> list[tuple[Index, Any]]:  # fmt: skip
    """Each addressable shard of the JAX array ``x`` handed to framework ``to``, as ``(index, array)``.

    ``index`` is the shard's ``shard.index``: one slice per dimension into ``x``'s global shape.
    The list is in the order of ``x.addressable_shards`` (one entry per device: a replicated
    dimension gives several entries with the same index, each over its own device's buffer).
    Each shard converts as ``dlbridge.convert(shard.data, to, ...)`` with these options: zero-copy
    where the target can hold it (shards are JAX arrays, read-only: a target without read-only arrays,
    torch, needs ``copy=True`` or ``readonly="drop"``, as ``convert`` says). For ``to="jax"`` each shard stays on its own device unless
    ``device=`` is given. A single-device array gives one entry covering all of it. Only this
    process's (addressable) shards are listed. ``dlbridge.from_shards`` rebuilds the sharded array.

    Raises NotAnArrayError when ``x`` is not a ``jax.Array`` (other arrays: ``dlbridge.convert``).
    """
    from ._adapters import adapter_named
    from ._adapters._jax_shards import addressable

    target = adapter_named(to)  # an unknown target is an OptionError before anything else
    return [
        (index, convert(data, target.name, fallback=fallback, dtype=dtype, device=where, copy=copy, readonly=readonly))
        for index, data, where in addressable(x, target, device, "dlbridge.shards(x, to)")
    ]


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
    from ._adapters._jax_shards import assemble, placement

    pairs, order, global_shape = placement(parts, sharding, shape)
    arrays = [convert(pairs[i][1], "jax", device=dev, copy=copy) for dev, i in order]
    result: jax.Array = assemble(arrays, order, global_shape, sharding)
    return result
