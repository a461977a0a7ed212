"""The public conversion functions: thin, typed, keyword-only wrappers over the pipeline."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, overload

from ._accelerator import accel
from ._adapters import adapter_named
from ._capabilities import Capabilities
from ._capabilities import capabilities as _table
from ._options import NOT_GIVEN
from ._route import SPECS
from ._route import convert as _route

if TYPE_CHECKING:
    import cupy
    import jax
    import numpy
    import onnxruntime
    import paddle
    import tensorflow
    import torch
    import warp

    from ._types import DeviceLike, DTypeLike, FallbackOption, SupportsDLPack

_TORCH, _CUPY, _JAX, _NUMPY = SPECS["torch"], SPECS["cupy"], SPECS["jax"], SPECS["numpy"]
_TENSORFLOW, _PADDLE = SPECS["tensorflow"], SPECS["paddle"]
_ONNXRUNTIME, _WARP = SPECS["onnxruntime"], SPECS["warp"]

__all__ = ["to_torch", "to_cupy", "to_jax", "to_numpy", "to_tensorflow", "to_paddle", "convert", "capabilities",
           "to_onnxruntime", "to_warp"]  # fmt: skip

# ``x`` is typed ``SupportsDLPack | Any``: any DLPack array, but also a raw capsule or a producer older
# than DLPack 1.0 (``__dlpack__(stream=)`` only); anything else raises NotAnArrayError at run time.


def to_torch(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
             dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
             stream: int | None = None) -> torch.Tensor:  # fmt: skip
    """``x`` as a ``torch.Tensor``: same memory and true dtype where torch can hold it."""
    result: torch.Tensor = _route(_TORCH, x, fallback, dtype, device, copy, stream)
    return result


def to_cupy(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
            dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
            stream: int | None = None) -> cupy.ndarray:  # fmt: skip
    """``x`` as a ``cupy.ndarray``. CPU sources need ``device="cuda"`` or ``copy=True``."""
    result: cupy.ndarray = _route(_CUPY, x, fallback, dtype, device, copy, stream)
    return result


def to_jax(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
           dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
           stream: int | None = None) -> jax.Array:  # fmt: skip
    """``x`` as a ``jax.Array`` (zero-copy where JAX can share the buffer)."""
    result: jax.Array = _route(_JAX, x, fallback, dtype, device, copy, stream)
    return result


def to_numpy(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
             dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
             stream: int | None = None) -> numpy.ndarray[Any, Any]:  # fmt: skip
    """``x`` as a ``numpy.ndarray``; bf16/fp8 arrive as ml_dtypes arrays sharing the memory."""
    result: numpy.ndarray[Any, Any] = _route(_NUMPY, x, fallback, dtype, device, copy, stream)
    return result


def to_tensorflow(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
                  dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
                  stream: int | None = None) -> tensorflow.Tensor:  # fmt: skip
    """``x`` as a ``tf.Tensor`` (zero-copy where TensorFlow can share the buffer; it takes only
    dense row-major layouts, so others are copied densely first)."""
    result: tensorflow.Tensor = _route(_TENSORFLOW, x, fallback, dtype, device, copy, stream)
    return result


def to_paddle(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
              dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
              stream: int | None = None) -> paddle.Tensor:  # fmt: skip
    """``x`` as a ``paddle.Tensor``: same memory and true dtype where Paddle can hold it. Raises
    MissingFrameworkError instead of importing paddle after tensorflow (that crashes the process)."""
    result: paddle.Tensor = _route(_PADDLE, x, fallback, dtype, device, copy, stream)
    return result


def to_onnxruntime(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
                   dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
                   stream: int | None = None) -> onnxruntime.OrtValue:  # fmt: skip
    """``x`` as an ``onnxruntime.OrtValue`` (zero-copy where ONNX Runtime can share the buffer; it
    takes only dense row-major layouts, so others are copied densely first)."""
    result: onnxruntime.OrtValue = _route(_ONNXRUNTIME, x, fallback, dtype, device, copy, stream)
    return result


def to_warp(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
            dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
            stream: int | None = None) -> warp.array[Any]:  # fmt: skip
    """``x`` as a ``warp.array`` of 1 to 4 dimensions, sharing the memory where Warp can hold the dtype."""
    result: warp.array[Any] = _route(_WARP, x, fallback, dtype, device, copy, stream)
    return result


# ``convert(x, "numpy")`` is typed like ``to_numpy(x)``: one overload per framework name and alias.
@overload
def convert(x: SupportsDLPack | Any, to: Literal["torch", "pytorch"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> torch.Tensor: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["cupy"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> cupy.ndarray: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["jax", "jax.numpy"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> jax.Array: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["numpy", "np"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> numpy.ndarray[Any, Any]: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["tensorflow", "tf"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> tensorflow.Tensor: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["paddle"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> paddle.Tensor: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["onnxruntime", "ort"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> onnxruntime.OrtValue: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["warp", "wp"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> warp.array[Any]: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: str | ModuleType, /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> Any: ...  # fmt: skip
def convert(x: SupportsDLPack | Any, to: str | ModuleType, /, *, fallback: FallbackOption = NOT_GIVEN,
            dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
            stream: int | None = None) -> Any:  # fmt: skip
    """Hand ``x`` to framework ``to`` (a name such as ``"torch"`` or the module).

    Zero-copy whenever the target can hold the data where it is; see the README for the
    fallback policy. ``copy=False`` forbids any copy, ``copy=True`` always copies.
    """
    return _route(SPECS[adapter_named(to).name], x, fallback, dtype, device, copy, stream)


def capabilities(consumer: str, version: str | None = None) -> Capabilities:
    """What ``consumer`` accepts at ``version``, read off the capability table.

    ``version`` defaults to the installed one, read from the package metadata (the framework is
    not imported); MissingFrameworkError if it is not installed.
    """
    if version is None:
        adapter = adapter_named(consumer)
        return _table(adapter.name, adapter.installed_version())
    return _table(consumer, version)


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


# Compiled: each to_<framework> becomes a callable that enters the fast route without a Python
# frame; its name, docstring and signature stay those of the function above (``__wrapped__``).
if accel is not None:
    for _name, _spec in (("to_torch", _TORCH), ("to_cupy", _CUPY), ("to_jax", _JAX), ("to_numpy", _NUMPY),
                         ("to_tensorflow", _TENSORFLOW), ("to_paddle", _PADDLE),
                         ("to_onnxruntime", _ONNXRUNTIME), ("to_warp", _WARP)):  # fmt: skip
        globals()[_name] = accel.Route(_spec, globals()[_name])
    del _name, _spec
