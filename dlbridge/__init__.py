"""dlbridge: zero-copy, dtype-safe tensor handoff between PyTorch, CuPy, JAX, NumPy,
TensorFlow and PaddlePaddle via DLPack."""

__all__ = [
    "__version__",
    "to_torch",
    "to_cupy",
    "to_jax",
    "to_numpy",
    "to_tensorflow",
    "to_paddle",
    "convert",
    "shards",
    "from_shards",
    "inspect",
    "guard",
    "DLPackInfo",
    "SupportsDLPack",
    "set_default_fallback",
    "get_default_fallback",
    "fallback_policy",
    "capabilities",
    "register_numpy_dtypes",
    "DLBridgeError",
    "UnsupportedDtypeError",
    "DeviceMismatchError",
    "CapsuleError",
    "ReadOnlyError",
    "LayoutError",
    "NotAnArrayError",
    "ProducerError",
    "OptionError",
    "MissingFrameworkError",
    "to_onnxruntime",
    "to_warp",
]

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

from ._api import capabilities as capabilities
from ._api import convert as convert
from ._api import register_numpy_dtypes as register_numpy_dtypes
from ._api import to_cupy as to_cupy
from ._api import to_jax as to_jax
from ._api import to_numpy as to_numpy
from ._api import to_onnxruntime as to_onnxruntime
from ._api import to_paddle as to_paddle
from ._api import to_tensorflow as to_tensorflow
from ._api import to_torch as to_torch
from ._api import to_warp as to_warp
from ._capsule import DLPackInfo as DLPackInfo
from ._convert import inspect as inspect
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
from ._options import fallback_policy as fallback_policy
from ._options import get_default_fallback as get_default_fallback
from ._options import set_default_fallback as set_default_fallback
from ._shards import from_shards as from_shards
from ._shards import shards as shards
from ._types import SupportsDLPack as SupportsDLPack

if TYPE_CHECKING:
    from ._guard import guard as guard


def __getattr__(name: str) -> Any:
    # The guard (and its signature machinery) loads on first use: ~4 ms off ``import dlbridge``.
    if name == "guard":
        from ._guard import guard

        globals()["guard"] = guard
        return guard
    raise AttributeError(f"module 'dlbridge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
