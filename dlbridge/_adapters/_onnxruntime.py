"""ONNX Runtime: ``onnxruntime.OrtValue`` in and out through ``__dlpack__`` / ``OrtValue.from_dlpack``.

The public OrtValue gained DLPack in ONNX Runtime 1.26 (``__dlpack__``, ``__dlpack_device__``, the
class method ``from_dlpack``; microsoft/onnxruntime PR #27980). Its ``__dlpack__`` takes no
``max_version`` and makes legacy capsules only; ``from_dlpack`` takes a bare 'dltensor' capsule and
refuses every layout but dense row-major ("ORT only supports contiguous tensor",
onnxruntime/core/dlpack/dlpack_converter.cc). Until 1.31.x its converter labels a bool OrtValue's
capsule uint8 (relabelled here, zero-copy) and cannot export or import float8 (refused here, naming
the upgrade). OrtValues are always dense and have no read-only state and no array operations:
copies and reinterpretations go through NumPy over their bytes (probe 2026-11-25, onnxruntime 1.32.0).
"""

from __future__ import annotations

import ctypes
from typing import Any

from .._capabilities import Capabilities, imports_from
from .._capsule._edit import relabel
from .._capsule._read import read
from .._dtypes import BY_NAME
from .._errors import DLBridgeError, ProducerError, UnsupportedDtypeError
from ._base import Adapter, Prober
from ._fast import FastExport, FastRoute

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


def _dtype_of(obj: Any) -> str | None:
    """dlbridge's name for an OrtValue's element type; None where it has none dlbridge knows (or none
    at all: a sequence or map, which its export then refuses, see ``state_error``)."""
    try:
        return _BY_ORT_NAME.get(str(obj.data_type()))
    except MemoryError:
        raise
    except Exception:
        return None


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
        self._check_host(arr)
        return self.adapter._bytes(arr).copy()

    def _check_host(self, arr: Any) -> None:
        """Refuse to read an OrtValue whose memory is not the host's: the CPU build's from_dlpack takes a
        kDLCUDA capsule and makes an OrtValue that says "cuda" (see the rows), whose address ctypes must
        never read (the report's probe of one killed the process, H100 run 2026-11-27)."""
        where = str(arr.device_name()).lower()
        if where != "cpu":
            build = self.mod.get_device()  # "CPU" for the CPU build (onnxruntime_pybind_state.cc get_device)
            raise ValueError(f"the OrtValue says it is on {where} ({self.adapter.display} {self.adapter.version}, "
                             f"{build} build): its memory is not the host's, so it is not read")  # fmt: skip

    def to_host(self, arr: Any) -> Any:
        from ._numpy import numpy_dtype

        return self.host_bytes(arr).view(numpy_dtype(self.dtype_str(arr))).reshape(tuple(arr.shape()))


class OnnxruntimeAdapter(FastRoute, Adapter):
    prober_class = OnnxruntimeProber
    display = "ONNX Runtime"
    distributions = ("onnxruntime", "onnxruntime-gpu")
    extra = "onnxruntime"
    # The CPU build only: CUDA OrtValues (onnxruntime-gpu) are not probed; they arrive by copy.
    device_codes = frozenset({1})
    no_sync_stream = None
    wrap_call = "onnxruntime.OrtValue.ortvalue_from_numpy"

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        caps = self.caps
        if not (caps.cannot_export or caps.exports_uint8):  # 1.32 and newer: its capsules say the truth
            return _export(obj, stream=stream, max_version=max_version)
        name = _dtype_of(obj)
        if name in caps.cannot_export:  # before 1.32: "Unexpected data type of 17" (capability row)
            raise UnsupportedDtypeError(
                f"ONNX Runtime {self.version} cannot export {name} OrtValues through DLPack (its converter knows "
                f'no float8 before 1.32); upgrade it (pip install -U "onnxruntime>=1.32"), or hand over its bits: '
                "the NumPy uint8 array it was made from (ortvalue_from_numpy_with_onnx_type shares it), with "
                f'dtype="{name}" to relabel them zero-copy'
            )
        capsule = _export(obj, stream=stream, max_version=max_version)
        if name in caps.exports_uint8:  # before 1.32 a bool OrtValue's capsule says uint8: relabelled, zero-copy
            true, said = BY_NAME[name], read(capsule)
            if (said.code, said.bits, said.lanes) == (1, true.bits, true.lanes):
                relabel(capsule, true)
        return capsule

    def _route_export(self, obj: Any) -> Any:
        return self.export(obj, stream=None, max_version=None)

    def fast_export(self, cls: type) -> FastExport | None:
        if cls is not self.array_class():
            return None
        if self.caps.cannot_export or self.caps.exports_uint8:
            # Before 1.32 its own capsules mislabel bool: the route exports through export() (kind 2), which
            # relabels them, and never replays OrtValue.__dlpack__'s capsule as it is.
            return (2, self._route_export, (), None, None)
        return (3, None, (), None, None)

    def hint(self, dtype: str) -> str | None:
        since = imports_from(self.name, self.version, dtype)
        if since is None:
            return None
        return f'ONNX Runtime imports {dtype} from {since} on: pip install -U "onnxruntime>={since}".'

    def state_error(self, obj: Any) -> DLBridgeError | None:
        if not hasattr(type(obj), "__dlpack__"):  # before 1.26 (its rows): the public OrtValue has no DLPack
            return ProducerError(
                f"ONNX Runtime {self.version}'s OrtValue has no DLPack export (OrtValue.__dlpack__ is in 1.26 and "
                'newer): upgrade it (pip install -U "onnxruntime>=1.26"), or pass x.numpy() (a NumPy array over its '
                "memory)"
            )
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
