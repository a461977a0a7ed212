"""dlbridge: zero-copy, dtype-safe tensor handoff between PyTorch, CuPy, JAX, NumPy,
TensorFlow and PaddlePaddle via DLPack."""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

from ._api import TO
from ._api import capabilities as capabilities
from ._api import convert as convert
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
from ._options import fallback_policy as fallback_policy
from ._options import get_default_fallback as get_default_fallback
from ._options import set_default_fallback as set_default_fallback
from ._pipeline._convert import inspect as inspect
from ._pipeline._explain import explain as explain
from ._pipeline._handoff import Handoff as Handoff
from ._shards import from_shards as from_shards
from ._shards import shards as shards
from ._types import SupportsDLPack as SupportsDLPack

globals().update(TO)  # to_<name> for every framework in the adapter table (made in _api.py)
# Types: __init__.pyi (each to_<name>'s return type, convert()'s overloads).
__all__ = [
    "__version__",
    *TO,  # to_<name> for every framework in the adapter table: to_torch, to_numpy, ...
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


if TYPE_CHECKING:
    from ._guard._decorator import guard as guard


def __getattr__(name: str) -> Any:
    # The guard (and its signature machinery) loads on first use: ~4 ms off ``import dlbridge``.
    if name == "guard":
        from ._guard._decorator import guard

        globals()["guard"] = guard
        return guard
    raise AttributeError(f"module 'dlbridge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
