# The static types of ``dlbridge``. At run time dlbridge/__init__.py takes to_<name> from dlbridge/_api.py,
# which makes one per adapter in ADAPTERS; here each has its return type, and convert() an overload per
# framework name and alias (tests/test_api_registry.py checks that none is missing).

from types import ModuleType
from typing import Any, Literal, overload

import array_api_strict
import cupy
import jax
import mlx.core
import numpy
import onnxruntime
import paddle
import tensorflow
import torch
import warp

from ._api import capabilities as capabilities
from ._api import register_numpy_dtypes as register_numpy_dtypes
from ._capsule._read import DLPackInfo as DLPackInfo
from ._errors import CapsuleError as CapsuleError
from ._errors import DeviceMismatchError as DeviceMismatchError
from ._errors import DLBridgeError as DLBridgeError
from ._errors import LayoutError as LayoutError
from ._errors import MissingFrameworkError as MissingFrameworkError
from ._errors import NotAnArrayError as NotAnArrayError
from ._errors import OptionError as OptionError
from ._errors import ProducerError as ProducerError
from ._errors import ReadOnlyError as ReadOnlyError
from ._errors import UnsupportedDtypeError as UnsupportedDtypeError
from ._guard._decorator import guard as guard
from ._options import fallback_policy as fallback_policy
from ._options import get_default_fallback as get_default_fallback
from ._options import set_default_fallback as set_default_fallback
from ._pipeline._convert import inspect as inspect
from ._pipeline._explain import explain as explain
from ._pipeline._handoff import Handoff as Handoff
from ._shards import from_shards as from_shards
from ._shards import shards as shards
from ._types import DeviceLike, DTypeLike, FallbackOption
from ._types import SupportsDLPack as SupportsDLPack

__all__: list[str]
__version__: str

def to_torch(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
             device: DeviceLike | None = ..., copy: bool | None = ..., stream: int | None = ...) -> torch.Tensor: ...  # fmt: skip
def to_cupy(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
            device: DeviceLike | None = ..., copy: bool | None = ..., stream: int | None = ...) -> cupy.ndarray: ...  # fmt: skip
def to_jax(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
           device: DeviceLike | None = ..., copy: bool | None = ..., stream: int | None = ...) -> jax.Array: ...  # fmt: skip
def to_numpy(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
             device: DeviceLike | None = ..., copy: bool | None = ...,
             stream: int | None = ...) -> numpy.ndarray[Any, Any]: ...  # fmt: skip
def to_tensorflow(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
                  device: DeviceLike | None = ..., copy: bool | None = ...,
                  stream: int | None = ...) -> tensorflow.Tensor: ...  # fmt: skip
def to_paddle(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
              device: DeviceLike | None = ..., copy: bool | None = ..., stream: int | None = ...) -> paddle.Tensor: ...  # fmt: skip
def to_mlx(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
           device: DeviceLike | None = ..., copy: bool | None = ..., stream: int | None = ...) -> mlx.core.array: ...  # fmt: skip
def to_array_api_strict(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
                        device: DeviceLike | None = ..., copy: bool | None = ...,
                        stream: int | None = ...) -> array_api_strict._array_object.Array: ...  # fmt: skip
def to_onnxruntime(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
                   device: DeviceLike | None = ..., copy: bool | None = ...,
                   stream: int | None = ...) -> onnxruntime.OrtValue: ...  # fmt: skip
def to_warp(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = ..., dtype: DTypeLike | None = ...,
            device: DeviceLike | None = ..., copy: bool | None = ..., stream: int | None = ...) -> warp.array[Any]: ...  # fmt: skip

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
def convert(x: SupportsDLPack | Any, to: Literal["paddle", "paddlepaddle"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> paddle.Tensor: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["mlx", "mlx.core"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> mlx.core.array: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["array_api_strict", "array-api-strict"], /, *,
            fallback: FallbackOption = ..., dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
            copy: bool | None = ..., stream: int | None = ...) -> array_api_strict._array_object.Array: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["onnxruntime", "ort"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> onnxruntime.OrtValue: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["warp", "wp", "warp-lang"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> warp.array[Any]: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: str | ModuleType, /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...) -> Any: ...  # fmt: skip
