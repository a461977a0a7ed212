"""DLPack's C exchange API (dlpack.h 1.3): a type's ``__dlpack_c_exchange_api__``, and its stream query.

Exports through the exchange API are the compiled route's only (``dlbridge/_csrc``): the managed
tensor it makes needs a capsule whose destructor frees it unless a consumer took it, and only a C
destructor runs no Python bytecode while the capsule dies (a Python one, through ctypes, would drop
an exception raised there, a Ctrl-C, printed as "Exception ignored"). The Python route exports those
producers through their own ``__dlpack__`` (``dlbridge._route._replay._export``).
"""

from __future__ import annotations

import ctypes
from typing import Any

from .._errors import CapsuleError
from ._abi import SUPPORTED_MAJOR, CapsuleType, _get_name, _get_pointer
from ._read import _null

__all__ = ["is_exchange_api", "current_work_stream"]


# DLPack's C exchange API (dlpack.h 1.3, DLPackExchangeAPI): a type's __dlpack_c_exchange_api__
# capsule holds a table of C functions (the compiled route calls managed_tensor_from_py_object_no_sync).
class _ExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("prev_api", ctypes.c_void_p),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


_EXCHANGE_NAME = b"dlpack_exchange_api"
_CurrentWorkStream = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
_stream_queries: dict[int, Any] = {}


def is_exchange_api(obj: object) -> bool:
    """Whether ``obj`` is a DLPack C exchange API capsule (a type's ``__dlpack_c_exchange_api__``)."""
    return type(obj) is CapsuleType and _get_name(obj) == _EXCHANGE_NAME


def _table(api_capsule: object) -> _ExchangeAPI:
    table = _ExchangeAPI.from_address(_get_pointer(api_capsule, _EXCHANGE_NAME) or _null(_EXCHANGE_NAME))
    if table.major != SUPPORTED_MAJOR:
        raise CapsuleError(f"DLPack exchange API version {table.major}.{table.minor} is not one dlbridge reads")
    return table


def current_work_stream(api_capsule: object, device: tuple[int, int]) -> int | None:
    """The framework's current work stream on ``device``, through its DLPack C exchange API
    (``current_work_stream``: the stream it would launch work on, as a handle; 0 for CUDA's legacy
    default stream); None where the table has no such function. The same stream as the framework's
    Python stream query, without building a stream object: for torch, ``torch.cuda.current_stream
    (device).cuda_stream`` (apache/tvm-ffi tests/python/test_current_work_stream_gpu.py checks that
    they agree)."""
    query = _stream_queries.get(id(api_capsule))
    if query is None:
        table = _table(api_capsule)
        function = _CurrentWorkStream(table.current_work_stream) if table.current_work_stream else None
        query = _stream_queries[id(api_capsule)] = (function, api_capsule)  # holds the capsule: ids stay unique
    if query[0] is None:
        return None
    out = ctypes.c_void_p()
    if query[0](device[0], device[1], ctypes.byref(out)) != 0:
        raise CapsuleError(f"the DLPack exchange API could not say its current stream on device {device}")
    return out.value or 0
