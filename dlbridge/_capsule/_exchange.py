"""DLPack's C exchange API (dlpack.h 1.3): exporting through a type's ``__dlpack_c_exchange_api__``."""

from __future__ import annotations

import ctypes
from typing import Any

from .._errors import CapsuleError
from ._abi import SUPPORTED_MAJOR, VERSIONED, CapsuleType, _api, _get_name, _get_pointer, _new_capsule
from ._layout import VERSIONED_DELETER
from ._read import _null

__all__ = ["is_exchange_api", "export_exchange", "current_work_stream"]


# DLPack's C exchange API (dlpack.h 1.3, DLPackExchangeAPI): a type's __dlpack_c_exchange_api__
# capsule holds a table of C functions; managed_tensor_from_py_object_no_sync exports without the
# Python-level __dlpack__ (and without stream synchronisation: CPU only here).
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
_FromPyObject = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
_CurrentWorkStream = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
_exporters: dict[int, Any] = {}
_stream_queries: dict[int, Any] = {}
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _free_unconsumed(capsule: int) -> None:
    # The capsule is being destroyed (refcount 0): touched only through its address.
    if _capsule_is_valid(capsule, VERSIONED):
        managed = _capsule_pointer(capsule, VERSIONED)
        deleter = ctypes.c_void_p.from_address(managed + VERSIONED_DELETER).value if managed else None
        if deleter:
            _Deleter(deleter)(managed)


_FREE_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_free_unconsumed)  # kept alive: module global
_FREE_UNCONSUMED = ctypes.cast(_FREE_CALLBACK, ctypes.c_void_p).value


def is_exchange_api(obj: object) -> bool:
    """Whether ``obj`` is a DLPack C exchange API capsule (a type's ``__dlpack_c_exchange_api__``)."""
    return type(obj) is CapsuleType and _get_name(obj) == _EXCHANGE_NAME


def export_exchange(api_capsule: object, obj: object) -> Any:
    """``obj`` exported through its type's DLPack C exchange API, as a 'dltensor_versioned' capsule."""
    export = _exporters.get(id(api_capsule))
    if export is None:
        table = _table(api_capsule)
        if not table.managed_tensor_from_py_object_no_sync:
            raise CapsuleError("the DLPack exchange API has no managed_tensor_from_py_object_no_sync")
        export = _exporters[id(api_capsule)] = (_FromPyObject(table.managed_tensor_from_py_object_no_sync), api_capsule)
    out = ctypes.c_void_p()
    export[0](obj, ctypes.byref(out))
    if not out.value:
        raise CapsuleError("the DLPack exchange API exported a NULL tensor")
    return _new_capsule(out.value, VERSIONED, _FREE_UNCONSUMED)


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
