"""ONNX Runtime: ``onnxruntime.OrtValue`` in and out through ``__dlpack__`` / ``OrtValue.from_dlpack``.

OrtValue gained DLPack in ONNX Runtime 1.31 (``__dlpack__``, ``__dlpack_device__``, the class
method ``from_dlpack``). Its ``__dlpack__`` takes no ``max_version`` and makes legacy capsules
only; ``from_dlpack`` takes a bare 'dltensor' capsule and refuses every layout but dense
row-major ("ORT only supports contiguous tensor", onnxruntime/core/dlpack/dlpack_converter.cc).
OrtValues are always dense and have no read-only state and no array operations: copies and
reinterpretations go through NumPy over their bytes (probe 2026-11-25, onnxruntime 1.32.0).
"""

from __future__ import annotations

import ctypes
from typing import Any

from .._capabilities import Capabilities
from .._errors import DLBridgeError, ProducerError
from ._base import Adapter, FastExport, Prober

# ONNX TensorProto.DataType numbers and OrtValue.data_type() names of the dtypes dlbridge knows
# (onnx/onnx.proto; onnxruntime/python/onnxruntime_pybind_mlvalue.cc).
_ONNX_TYPES: dict[str, tuple[int, str]] = {
    "float32": (1, "float"), "uint8": (2, "uint8"), "int8": (3, "int8"), "uint16": (4, "uint16"),
    "int16": (5, "int16"), "int32": (6, "int32"), "int64": (7, "int64"), "bool": (9, "bool"),
    "float16": (10, "float16"), "float64": (11, "double"), "uint32": (12, "uint32"), "uint64": (13, "uint64"),
    "complex64": (14, "complex64"), "complex128": (15, "complex128"), "bfloat16": (16, "bfloat16"),
    "float8_e4m3fn": (17, "float8e4m3fn"), "float8_e4m3fnuz": (18, "float8e4m3fnuz"),
    "float8_e5m2": (19, "float8e5m2"), "float8_e5m2fnuz": (20, "float8e5m2fnuz"),
    "float8_e8m0fnu": (24, "float8e8m0"),
}  # fmt: skip
_BY_ORT_NAME = {f"tensor({ort})": name for name, (_, ort) in _ONNX_TYPES.items()}


def _export(obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
    # OrtValue.__dlpack__(*, stream=None) takes no max_version: always a legacy capsule.
    return obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)


class OnnxruntimeProber(Prober):
    """The report's, tests' and benchmarks' helpers for Onnxruntime."""

    adapter: OnnxruntimeAdapter

    def make_array(self, ref: Any, device: str) -> Any:
        if device != "cpu":
            raise NotImplementedError("dlbridge makes CPU OrtValues only")
        return self.adapter.from_host(ref, (1, 0))

    def dtype_for(self, name: str) -> Any:
        from ._numpy import numpy_dtype

        return numpy_dtype(name)  # ONNX Runtime has no dtype objects: its OrtValues are made from NumPy

    def shape_of(self, arr: Any) -> tuple[int, ...]:
        return tuple(arr.shape())

    def dtype_str(self, arr: Any) -> str:
        kind = str(arr.data_type())
        return _BY_ORT_NAME.get(kind, kind)

    def host_bytes(self, arr: Any) -> Any:
        return self.adapter._bytes(arr).copy()

    def to_host(self, arr: Any) -> Any:
        from ._numpy import numpy_dtype

        return self.host_bytes(arr).view(numpy_dtype(self.dtype_str(arr))).reshape(tuple(arr.shape()))


class OnnxruntimeAdapter(Adapter):
    name = "onnxruntime"
    module = "onnxruntime"
    aliases = ("ort",)
    prober_class = OnnxruntimeProber
    display = "ONNX Runtime"
    distributions = ("onnxruntime", "onnxruntime-gpu")
    extra = "onnxruntime"
    array_type = ("onnxruntime", "OrtValue")
    producer_modules = ("onnxruntime",)
    # The CPU build only: CUDA OrtValues (onnxruntime-gpu) are not probed; they arrive by copy.
    device_codes = frozenset({1})
    no_sync_stream = None
    wrap_call = "onnxruntime.OrtValue.ortvalue_from_numpy"

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        return _export(obj, stream=stream, max_version=max_version)

    def fast_export(self, cls: type) -> FastExport | None:
        return (3, None, (), None, None) if cls is self.array_class() else None

    def state_error(self, obj: Any) -> DLBridgeError | None:
        try:
            tensor = bool(obj.is_tensor()) and not bool(obj.is_sparse_tensor())
        except MemoryError:
            raise
        except Exception:
            return None
        if tensor:
            return None
        return ProducerError(
            f"an OrtValue that is not a dense tensor ({obj.data_type()}): DLPack carries dense arrays only. "
            "Pass its dense tensors (a sequence's items, or a sparse tensor's values/indices), each an OrtValue"
        )

    def from_dlpack(self) -> Any:
        return self.mod.OrtValue.from_dlpack

    def fast_import(self, caps: Capabilities) -> tuple[int, Any, Any] | None:
        # OrtValue.from_dlpack(capsule) is OrtValue(C.OrtValue.from_dlpack(capsule)) after a hasattr
        # test (onnxruntime_inference_collection.py): the same two calls, one Python frame fewer.
        native = getattr(getattr(self.mod.capi, "onnxruntime_pybind11_state", None), "OrtValue", None)
        c_import = getattr(native, "from_dlpack", None)
        if c_import is None:
            return super().fast_import(caps)
        wrap = self.mod.OrtValue

        def import_capsule(capsule: Any) -> Any:
            return wrap(c_import(capsule))

        return (0, import_capsule, None)

    # --- arrays over NumPy memory (OrtValues have no operations of their own) ---------------------
    def _wrap(self, host: Any) -> Any:
        """An OrtValue over the C-contiguous NumPy array ``host`` (kept alive by it), with
        ``host``'s logical dtype (ml_dtypes kinds through their ONNX type number)."""
        name = host.dtype.name
        if host.dtype.type.__module__ == "ml_dtypes":
            bits = host.view(f"u{host.dtype.itemsize}")
            return self.mod.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, _ONNX_TYPES[name][0])
        return self.mod.OrtValue.ortvalue_from_numpy(host)

    def _bytes(self, arr: Any) -> Any:
        """A NumPy uint8 view of ``arr``'s bytes (an OrtValue is always dense, C order)."""
        import numpy as np

        nbytes = int(arr.tensor_size_in_bytes())
        if not nbytes:
            return np.empty(0, dtype=np.uint8)
        return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(int(arr.data_ptr())))

    def view(self, arr: Any, dtype: str) -> Any:
        from ._numpy import numpy_dtype

        # The OrtValue keeps NumPy's view alive, and NumPy's view keeps arr alive (.base chain).
        host = self._bytes(arr).view(numpy_dtype(dtype)).reshape(tuple(arr.shape()))
        holder = self._wrap(host)
        holder._dlbridge_base = arr
        return holder

    def data_ptr(self, arr: Any) -> int:
        return int(arr.data_ptr())

    def copy(self, arr: Any) -> Any:
        from ._numpy import aligned_copy

        return self._wrap(aligned_copy(self.prober.to_host(arr)))  # 64-byte aligned: JAX shares it

    def contiguous(self, arr: Any) -> Any:
        return arr  # OrtValues are always dense row-major

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        return self.copy(arr)  # CPU only (device_codes)

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        from ._numpy import aligned_copy

        return self._wrap(aligned_copy(host))

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        import numpy as np

        bits = self._bytes(u16).view(np.uint16).astype(np.uint32) << 16
        return self._wrap(bits.view(np.float32).reshape(tuple(u16.shape())))

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        import numpy as np

        values = np.asarray(table, dtype=np.float32)[self._bytes(u8)]
        return self._wrap(values.reshape(tuple(u8.shape())))
