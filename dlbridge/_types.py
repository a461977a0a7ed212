"""Public typing helpers: the DLPack protocol and the option types of the conversion functions.

Frameworks are imported only under ``TYPE_CHECKING``: nothing here loads one at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from ._options import Fallback, _NotGiven

if TYPE_CHECKING:
    import jax
    import numpy
    import torch

__all__ = ["SupportsDLPack", "FallbackOption", "DTypeLike", "DeviceLike"]


@runtime_checkable
class SupportsDLPack(Protocol):
    """An array that exports itself through DLPack (the Python array API's ``__dlpack__``).

    ``stream`` is the consumer's stream (an integer on CUDA/ROCm, None elsewhere), ``max_version``
    the newest DLPack version the consumer reads, ``dl_device`` and ``copy`` ask the producer to
    copy to another device (DLPack 1.0). torch tensors and NumPy arrays match it; JAX's stubs
    declare ``jax.Array.__dlpack__`` without its keywords, so to a type checker a ``jax.Array``
    does not. dlbridge's conversions take ``SupportsDLPack | Any``: also ``jax.Array``, raw
    capsules and producers older than DLPack 1.0 (``__dlpack__(stream=)`` only). At run time
    ``isinstance(x, SupportsDLPack)`` checks that both methods exist (not their signatures).
    """

    # The keywords are typed Any: producers' own stubs disagree on them (torch types ``dl_device``
    # as ``tuple[IntEnum, int]``, NumPy ``stream`` as ``None``), and each must still match.
    def __dlpack__(
        self, *, stream: Any = ..., max_version: Any = ..., dl_device: Any = ..., copy: Any = ...
    ) -> Any: ...

    def __dlpack_device__(self) -> Any: ...


SupportsDLPack.__module__ = "dlbridge"


# The ``fallback=`` keyword: a mode, or None / the default sentinel for "not given".
FallbackOption: TypeAlias = "Fallback | _NotGiven | None"

# ``dtype=``: a dtype name ("bfloat16", "float8_e4m3fn", ...) or a framework's dtype object
# (NumPy / ml_dtypes / JAX / CuPy dtypes and scalar types, ``torch.bfloat16``, ...).
DTypeLike: TypeAlias = "str | numpy.dtype[Any] | type[numpy.generic] | torch.dtype"

# ``device=``: "cpu", "cuda", "cuda:1", a DLPack ``(device_type, device_id)`` pair, or a framework's
# device object (``torch.device``, a ``jax.Device``, a CuPy ``Device``).
DeviceLike: TypeAlias = "str | tuple[int, int] | torch.device | jax.Device"
