"""The public conversion functions: thin, typed, keyword-only wrappers over ``convert``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._adapters import ADAPTERS
from ._convert import _convert
from ._options import NOT_GIVEN, resolve_fallback

if TYPE_CHECKING:
    import cupy
    import jax
    import numpy
    import paddle
    import tensorflow
    import torch

__all__ = ["to_torch", "to_cupy", "to_jax", "to_numpy", "to_tensorflow", "to_paddle"]


def to_torch(x: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
             copy: bool | None = None, stream: int | None = None) -> torch.Tensor:  # fmt: skip
    """``x`` as a ``torch.Tensor``: same memory and true dtype where torch can hold it."""
    return _convert(x, ADAPTERS["torch"], resolve_fallback(fallback), dtype, device, copy, stream)


def to_cupy(x: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
            copy: bool | None = None, stream: int | None = None) -> cupy.ndarray:  # fmt: skip
    """``x`` as a ``cupy.ndarray``. CPU sources need ``device="cuda"`` or ``copy=True``."""
    return _convert(x, ADAPTERS["cupy"], resolve_fallback(fallback), dtype, device, copy, stream)


def to_jax(x: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
           copy: bool | None = None, stream: int | None = None) -> jax.Array:  # fmt: skip
    """``x`` as a ``jax.Array`` (zero-copy where JAX can share the buffer)."""
    return _convert(x, ADAPTERS["jax"], resolve_fallback(fallback), dtype, device, copy, stream)


def to_numpy(x: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
             copy: bool | None = None, stream: int | None = None) -> numpy.ndarray:  # fmt: skip
    """``x`` as a ``numpy.ndarray``; bf16/fp8 arrive as ml_dtypes arrays sharing the memory."""
    return _convert(x, ADAPTERS["numpy"], resolve_fallback(fallback), dtype, device, copy, stream)


def to_tensorflow(x: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
                  copy: bool | None = None, stream: int | None = None) -> tensorflow.Tensor:  # fmt: skip
    """``x`` as a ``tf.Tensor`` (zero-copy where TensorFlow can share the buffer; it takes only
    dense row-major layouts, so others are copied densely first)."""
    return _convert(x, ADAPTERS["tensorflow"], resolve_fallback(fallback), dtype, device, copy, stream)


def to_paddle(x: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
              copy: bool | None = None, stream: int | None = None) -> paddle.Tensor:  # fmt: skip
    """``x`` as a ``paddle.Tensor``: same memory and true dtype where Paddle can hold it. Raises
    MissingFrameworkError instead of importing paddle after tensorflow (that crashes the process)."""
    return _convert(x, ADAPTERS["paddle"], resolve_fallback(fallback), dtype, device, copy, stream)
