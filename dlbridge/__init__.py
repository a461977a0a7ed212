"""dlbridge: zero-copy, dtype-safe tensor handoff between PyTorch, CuPy, JAX, NumPy,
TensorFlow and PaddlePaddle via DLPack."""

__version__ = "0.1.0"

from ._api import capabilities as capabilities
from ._api import convert as convert
from ._api import register_numpy_dtypes as register_numpy_dtypes
from ._api import to_array_api_strict as to_array_api_strict
from ._api import to_cupy as to_cupy
from ._api import to_jax as to_jax
from ._api import to_mlx as to_mlx
from ._api import to_numpy as to_numpy
from ._api import to_onnxruntime as to_onnxruntime
from ._api import to_paddle as to_paddle
from ._api import to_tensorflow as to_tensorflow
from ._api import to_torch as to_torch
from ._api import to_warp as to_warp
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

# Loaded on first use (``__getattr__``): the pipeline, the guard and typing are most of dlbridge's import time.
TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from ._capsule._read import DLPackInfo as DLPackInfo
    from ._guard._decorator import guard as guard
    from ._pipeline._convert import inspect as inspect
    from ._pipeline._explain import explain as explain
    from ._pipeline._handoff import Handoff as Handoff
    from ._shards import from_shards as from_shards
    from ._shards import shards as shards
    from ._types import SupportsDLPack as SupportsDLPack

__all__ = [
    "__version__",
    "to_torch",
    "to_cupy",
    "to_jax",
    "to_numpy",
    "to_paddle",
    "to_tensorflow",
    "to_mlx",
    "to_array_api_strict",
    "to_onnxruntime",
    "to_warp",
    "convert",
    "shards",
    "from_shards",
    "inspect",
    "explain",
    "Handoff",
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
]

_LAZY = {
    "guard": "._guard._decorator",
    "inspect": "._pipeline._convert",
    "explain": "._pipeline._explain",
    "Handoff": "._pipeline._handoff",
    "DLPackInfo": "._capsule._read",
    "shards": "._shards",
    "from_shards": "._shards",
    "SupportsDLPack": "._types",
}

if not TYPE_CHECKING:  # (to the checker these names are the imports above; a typo stays an error)

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'dlbridge' has no attribute {name!r}")
        from importlib import import_module

        found = globals()[name] = getattr(import_module(module, __name__), name)
        return found


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
