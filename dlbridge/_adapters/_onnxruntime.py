"""ONNX Runtime: ``onnxruntime.OrtValue`` in and out through ``__dlpack__`` / ``OrtValue.from_dlpack``.

The public OrtValue gained DLPack in ONNX Runtime 1.26 (``__dlpack__``, ``__dlpack_device__``, the
class method ``from_dlpack``; microsoft/onnxruntime PR #27980). Its ``__dlpack__`` takes no
``max_version`` and makes legacy capsules only; ``from_dlpack`` takes a bare 'dltensor' capsule and
refuses every layout but dense row-major ("ORT only supports contiguous tensor",
onnxruntime/core/dlpack/dlpack_converter.cc). Until 1.31.x its converter labels a bool OrtValue's
capsule uint8 (relabelled here, zero-copy) and cannot export or import float8 (refused here, naming
the upgrade). OrtValues are always dense and have no read-only state and no array operations:
copies and reinterpretations are made over their bytes (probe 2026-11-25, onnxruntime 1.32.0), and
every OrtValue made here owns its memory through the C object its capsules hold (see ``_alloc``).
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
        self.adapter._check_host(arr)
        return self.adapter._bytes(arr).copy()

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

    # --- OrtValues that own their memory ----------------------------------------------------------
    # ortvalue_from_numpy / ortvalue_from_numpy_with_onnx_type make a C OrtValue over the NumPy buffer
    # without a reference to it ("The numpy object owns the memory and needs to be alive until the
    # corresponding OrtValue is in scope", onnxruntime_pybind_mlvalue.cc CreateTensor): only the Python
    # wrapper holds the array (OrtValue._numpy_obj, onnxruntime_inference_collection.py). Its
    # __dlpack__ capsule holds the C OrtValue only (dlpack_converter.cc OrtDLManagedTensor.handle), so a
    # consumer outlives the NumPy memory once the wrapper is dropped (probe 2026-11-27, onnxruntime
    # 1.26.0 and 1.32.0, torch 2.13.0: values overwritten). Every OrtValue made here owns its memory
    # through the C object: ONNX Runtime's own allocation (copies), or the DLPack deleter chain (views):
    # DlpackToOrtValue gives the C OrtValue a deleter that calls the capsule's (dlpack_converter.cc), and
    # OrtValueToDlpack's capsules hold that OrtValue (probe 2026-11-27, onnxruntime 1.26.0, 1.30.0,
    # 1.32.0: the source behind a from_dlpack OrtValue lives while it or a capsule it exported does,
    # and is freed after; C.OrtValue.ortvalue_from_numpy holds no reference to its array).
    def _alloc(self, shape: Any, element_type: int) -> Any:
        """A new OrtValue of ONNX ``element_type`` in memory ONNX Runtime allocates and frees itself
        (64-byte aligned, so JAX shares it: probe 2026-11-27, onnxruntime 1.26.0-1.32.0)."""
        return self.mod.OrtValue.ortvalue_from_shape_and_type([int(n) for n in shape], int(element_type))

    def _own(self, host: Any) -> Any:
        """A copy of the NumPy array ``host`` (any layout) in an OrtValue of its own, ``host``'s
        logical dtype (ml_dtypes kinds through their ONNX type number)."""
        entry = _ONNX_TYPES.get(host.dtype.name)
        if entry is None:
            raise UnsupportedDtypeError(f"ONNX Runtime has no {host.dtype.name} tensors dlbridge can make; pass one of "
                                        f"{', '.join(_ONNX_TYPES)}")  # fmt: skip
        out = self._alloc(host.shape, entry[0])
        if host.size:
            self._bytes(out).view(host.dtype).reshape(host.shape)[...] = host
        return out

    def _check_host(self, arr: Any) -> None:
        """Refuse to read an OrtValue whose memory is not the host's: the CPU build's from_dlpack takes a
        kDLCUDA capsule and makes an OrtValue that says "cuda" (see the rows), whose address ctypes must
        never read (the report's probe of one killed the process, H100 run 2026-11-27)."""
        where = str(arr.device_name()).lower()
        if where != "cpu":
            build = self.mod.get_device()  # "CPU" for the CPU build (onnxruntime_pybind_state.cc get_device)
            raise ValueError(f"the OrtValue says it is on {where} ({self.display} {self.version}, "
                             f"{build} build): its memory is not the host's, so it is not read")  # fmt: skip

    def _bytes(self, arr: Any) -> Any:
        """A NumPy uint8 view of ``arr``'s bytes (an OrtValue is always dense, C order)."""
        import numpy as np

        nbytes = int(arr.tensor_size_in_bytes())
        if not nbytes:
            return np.empty(0, dtype=np.uint8)
        return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(int(arr.data_ptr())))

    def view(self, arr: Any, dtype: str) -> Any:
        """``arr``'s memory as ``dtype`` (same width), zero-copy. The new C OrtValue is imported from a
        capsule, so its DLPack deleter holds a NumPy array whose ``base`` chain holds ``arr`` (the
        wrapper, and whatever holds its memory): every capsule it exports keeps that memory alive."""
        import numpy as np

        from ._numpy import numpy_dtype

        self._check_host(arr)
        true = BY_NAME[dtype]
        shape = tuple(arr.shape())
        as_bool = dtype == "bool" and dtype not in self.caps.imports and self.caps.detects_bool_sources
        if dtype not in self.caps.imports and not as_bool:
            raise UnsupportedDtypeError(
                f"ONNX Runtime {self.version} cannot hold a {dtype} view of an OrtValue's memory (its DLPack import "
                f"knows no {dtype}). {self.hint(dtype) or 'Pass a dtype it imports.'}"
            )
        if not int(arr.tensor_size_in_bytes()):
            return self._alloc(shape, _ONNX_TYPES[dtype][0])  # nothing to share
        wire = np.asarray(_Held(arr)).view(numpy_dtype(f"uint{true.bits}")).reshape(shape)
        capsule = wire.__dlpack__()  # NumPy's capsule holds ``wire`` (numpy/_core/src/multiarray/dlpack.c)
        # Before 1.32: a uint8 capsule, bool by the importer's flag (the detects_bool_sources row; the C
        # from_dlpack(data, is_bool_tensor=False) of 1.26-1.31, from_dlpack(data) in 1.32: probe 2026-11-27).
        if as_bool:
            return self.mod.OrtValue(self._c_class().from_dlpack(capsule, True))
        relabel(capsule, true)
        return self.mod.OrtValue(self._c_class().from_dlpack(capsule))

    def _c_class(self) -> Any:
        return self.mod.capi.onnxruntime_pybind11_state.OrtValue  # what OrtValue.from_dlpack calls

    def data_ptr(self, arr: Any) -> int:
        return int(arr.data_ptr())

    def view_memory(self, arr: Any) -> tuple[int, tuple[int, ...]]:
        return int(arr.data_ptr()), tuple(arr.shape())  # OrtValue.shape is a method

    def copy(self, arr: Any) -> Any:
        """A copy in memory ONNX Runtime owns, byte for byte, whatever its element type."""
        self._check_host(arr)
        out = self._alloc(arr.shape(), arr.element_type())
        nbytes = int(arr.tensor_size_in_bytes())
        if nbytes:
            ctypes.memmove(int(out.data_ptr()), int(arr.data_ptr()), nbytes)
        return out

    def contiguous(self, arr: Any) -> Any:
        return arr  # OrtValues are always dense row-major

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        return self.copy(arr)  # CPU only (device_codes)

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        return self._own(host)

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        import numpy as np

        out = self._alloc(u16.shape(), _ONNX_TYPES["float32"][0])
        if int(out.tensor_size_in_bytes()):
            bits = self._bytes(out).view(np.uint32)
            bits[...] = self._bytes(u16).view(np.uint16)
            bits <<= 16
        return out

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        import numpy as np

        out = self._alloc(u8.shape(), _ONNX_TYPES["float32"][0])
        if int(out.tensor_size_in_bytes()):
            np.take(np.asarray(table, dtype=np.float32), self._bytes(u8), out=self._bytes(out).view(np.float32))
        return out


class _Held:
    """An OrtValue's bytes as NumPy sees them (``__array_interface__``), holding the OrtValue: NumPy makes
    this object the ``base`` of the array it builds over them, so that array keeps the OrtValue alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, owner: Any) -> None:
        nbytes = int(owner.tensor_size_in_bytes())
        self.__array_interface__ = {"data": (int(owner.data_ptr()), False), "shape": (nbytes,), "typestr": "|u1",
                                    "version": 3}  # fmt: skip
        self.owner = owner
