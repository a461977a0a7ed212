"""TensorFlow: eager ``tf.Tensor`` in and out through ``tf.experimental.dlpack``.

TensorFlow's importer takes only a bare 'dltensor' capsule and only dense row-major layouts
(tensorflow/c/eager/dlpack.cc); its exporter ignores ``max_version`` and streams (it waits for
the tensor on the host). Tensors gained ``__dlpack__`` late, so export and device queries go
through ``tf.experimental.dlpack`` and ``Tensor.device``, which every version with DLPack has.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from .._capabilities import Capabilities
from .._capsule._read import DLPackInfo, data_address, memory_of, read
from .._dtypes import BY_NAME
from .._errors import DLBridgeError, ProducerError
from ._base import Adapter, Prober
from ._fast import FastExport, FastRoute

# TF imports a CPU buffer at any address without copying, but its kernels CHECK that data is
# aligned to EIGEN_MAX_ALIGN_BYTES and abort the process otherwise ("Check failed: IsAligned()",
# tensorflow/core/framework/tensor.cc; tf.cast of a numpy a[1:17] import, probe 2026-11-23,
# tensorflow 2.21.0). Misaligned CPU data is therefore copied to an aligned buffer first.
_ALIGN = 64

# Tensors of these dtypes hold no flat buffer (strings, TensorList variants, resource handles):
# tf.experimental.dlpack.to_dlpack aborts the process on them ("Check failed:
# DataTypeCanUseMemcpy(dtype())", Tensor::tensor_data in tensorflow/core/framework/tensor.cc;
# probe 2026-11-25, tensorflow 2.21.0), so they are refused before it is called.
_OPAQUE = ("string", "variant", "resource")
# to_dlpack raises "DT_QINT8 is not supported by dlpack" for these (tensorflow/c/eager/dlpack.cc
# has no code for them; probe 2026-11-25, tensorflow 2.21.0). tf.bitcast takes the quantized ones
# (same buffer, probe 2026-11-25); tf.cast takes int4/uint4, not int2/uint2/float4_e2m1fn.
_QUANTIZED = {"qint8": "int8", "quint8": "uint8", "qint16": "int16", "quint16": "uint16", "qint32": "int32"}
_NO_CODE = {"int4": "tf.cast(x, tf.int8)", "uint4": "tf.cast(x, tf.uint8)", "int2": None, "uint2": None,
            "float4_e2m1fn": None}  # fmt: skip


def _aligned_copy(info: DLPackInfo) -> Any:
    """A capsule of a fresh, 64-byte aligned NumPy copy of a dense CPU capsule's bytes."""
    np, memmove, host, numpy_dtype = _copy_tools or _load_copy_tools()
    dtype = numpy_dtype(info.dtype)
    nbytes = info.size * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    address = raw.ctypes.data
    start = -address % _ALIGN
    memmove(address + start, info.data_ptr, nbytes)  # dense row-major: one span
    dense = raw[start : start + nbytes].view(dtype).reshape(info.shape)
    return host.export(dense, stream=None, max_version=None)  # relabels bf16 (ml_dtypes)


_copy_tools: tuple[Any, ...] = ()


def _load_copy_tools() -> tuple[Any, ...]:
    """NumPy, ``ctypes.memmove``, the table's NumPy adapter (its ml_dtypes relabels and registry state are
    cached) and its dtype lookup: imported when the first copy is made, not with TensorFlow's adapter."""
    global _copy_tools
    import ctypes

    import numpy as np

    from . import HOST
    from ._numpy import numpy_dtype

    _copy_tools = (np, ctypes.memmove, HOST, numpy_dtype)
    return _copy_tools


class TensorflowProber(Prober):
    """The report's, tests' and benchmarks' TensorFlow helpers."""

    adapter: TensorflowAdapter

    def dtype_for(self, name: str) -> Any:
        tf = self.mod  # float8 kinds live in tf.dtypes.experimental
        found = getattr(tf, name, None) or getattr(tf.dtypes.experimental, name, None)
        if not isinstance(found, tf.dtypes.DType):
            raise TypeError(f"tensorflow {self.adapter.version} has no {name}")
        return found

    def gpu_name(self) -> str | None:
        try:
            gpus = self.mod.config.list_physical_devices("GPU")
            return str(self.mod.config.experimental.get_device_details(gpus[0])["device_name"]) if gpus else None
        except MemoryError:
            raise
        except Exception:
            return None

    def make_array(self, ref: Any, device: str) -> Any:
        # tf.constant takes ml_dtypes arrays (bf16, fp8) as they are: TF's NumPy types are ml_dtypes'.
        with self.mod.device("/GPU:0" if device == "cuda" else "/CPU:0"):
            return self.mod.constant(ref)

    def dtype_str(self, arr: Any) -> str:
        return str(arr.dtype.name)

    def to_host(self, arr: Any) -> Any:
        import numpy as np

        return np.array(arr.numpy(), copy=True)

    def host_bytes(self, arr: Any) -> Any:
        import numpy as np

        return np.ascontiguousarray(self.to_host(arr)).reshape(-1).view(np.uint8)


class TensorflowAdapter(FastRoute, Adapter):
    device_codes = frozenset({1, 2})
    no_sync_stream = None  # EagerTensor.__dlpack__ raises on any stream but None
    honours_stream = False  # from_dlpack takes no stream: TF reads on its own
    display = "TensorFlow"
    prober_class = TensorflowProber
    distributions = ("tensorflow", "tensorflow-cpu")
    extra = "tensorflow"
    producer_devices = ("cpu", "cuda")

    @cached_property
    def _dlpack(self) -> Any:
        return self.mod.experimental.dlpack

    def device_of(self, obj: Any) -> tuple[int, int]:
        if hasattr(type(obj), "__dlpack_device__"):  # TF 2.x since tensors got the protocol
            return super().device_of(obj)
        # ".../device:GPU:1" (older TF): what TFE_DlpackDevice reads.
        kind, _, index = obj.device.rpartition("device:")[2].partition(":")
        return (2 if kind == "GPU" else 1, int(index or 0))

    def symbolic_error(self, cls: type) -> DLBridgeError | None:
        if not (cls.__module__.startswith(f"{self.module}.") and "Symbolic" in cls.__name__):
            return None
        # tf.function traces with SymbolicTensor, which has no __dlpack__ (probe 2026-11-23, TF 2.21).
        return ProducerError(
            f"a symbolic TensorFlow tensor ({cls.__name__}, inside tf.function or a graph) has no data to "
            "share; call it outside tf.function, or inside tf.py_function / tf.numpy_function, which run "
            "on concrete values"
        )

    def has_cuda(self) -> bool:
        try:
            return bool(self.mod.config.list_physical_devices("GPU"))
        except MemoryError:
            raise
        except Exception:
            return False

    def _tf_device(self, device: tuple[int, int]) -> str:
        return f"/GPU:{device[1]}" if device[0] == 2 else "/CPU:0"

    # --- producing ------------------------------------------------------------------------
    @cached_property
    def _special(self) -> dict[int, str]:
        """id(TF dtype) -> its name, for the dtypes to_dlpack cannot take: opaque ones (it aborts)
        and float8 (it raises; dlbridge exports their bytes). Keyed by id: TF's DType objects are
        interned module-level singletons (``t.dtype is tf.string``), and DType.__hash__ costs
        ~0.2 us a call, a fifth of a conversion (probe 2026-11-25, tensorflow 2.21.0)."""
        tf = self.mod
        names = (*_OPAQUE, *(n for n in BY_NAME if n.startswith("float8_")))
        found = ((n, getattr(tf, n, None) or getattr(tf.dtypes.experimental, n, None)) for n in names)
        return {id(d): n for n, d in found if isinstance(d, tf.dtypes.DType)}

    def opaque(self, obj: Any) -> bool:
        special = self._special.get(id(getattr(obj, "dtype", None)))
        return special is not None and special in _OPAQUE

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        # Always a legacy capsule; the data is ready on return (to_dlpack's documented contract).
        special = self._special.get(id(obj.dtype))
        if special is None:
            return self._dlpack.to_dlpack(obj)
        if special in _OPAQUE:
            raise self._opaque_error(obj, special)
        return self._export_float8(obj, special)

    def _opaque_error(self, obj: Any, name: str) -> ProducerError:
        what = {
            "string": "holds variable-length byte strings, not fixed-size numbers",
            "variant": "holds TensorFlow objects (tensor lists, datasets, optionals), not numbers",
            "resource": "is a handle to a TensorFlow resource (a variable, a table), not data",
        }[name]
        fix = {
            "string": "x.numpy() for a NumPy array of bytes objects (a copy), or tf.strings.to_number(x) for numbers",
            "variant": "the tensors it holds (e.g. tf.raw_ops.TensorListStack for a tensor list)",
            "resource": "the variable's value (v.value() or tf.raw_ops.ReadVariableOp)",
        }[name]
        return ProducerError(
            f"a TensorFlow {name} tensor ({list(obj.shape)}) {what}: DLPack carries only arrays of numbers "
            f"(TensorFlow would abort the process exporting it). Pass {fix}"
        )

    def _export_float8(self, obj: Any, name: str) -> Any:
        # to_dlpack has no float8 codes and tf.bitcast takes no float8 (probe 2026-11-25, tensorflow
        # 2.21.0: 'Value for attr T of float8_e4m3fn is not in the list of allowed values'). On the
        # CPU, np.asarray(x) is an ml_dtypes array over the tensor's own buffer (EagerTensor.__array__
        # -> _numpy(); same address, writes show in the tensor, it holds the buffer alive; probe
        # 2026-11-25): exported the NumPy adapter's way (its bytes as uint8, relabelled float8).
        if self.device_of(obj)[0] != 1:
            raise ProducerError(
                f"TensorFlow cannot export a {name} tensor on {obj.device} through DLPack (to_dlpack has no float8 "
                "codes, and tf.bitcast takes no float8). Copy it to the CPU first (with tf.device('/CPU:0'): "
                "tf.identity(x)), whose float8 tensors dlbridge shares zero-copy"
            )
        from . import HOST  # the table's NumPy adapter (its ml_dtypes relabels and registry state are cached)

        # A 0-d tensor's __array__ gives a scalar copy; tf.reshape keeps the buffer (probe 2026-11-25).
        scalar = obj.shape.rank == 0
        host = HOST.mod.asarray(self.mod.reshape(obj, [1]) if scalar else obj)
        return HOST.export(host.reshape(()) if scalar else host, stream=None, max_version=None)

    def state_error(self, obj: Any) -> DLBridgeError | None:
        name = getattr(getattr(obj, "dtype", None), "name", None)
        if name in _QUANTIZED:
            plain = _QUANTIZED[name]
            return ProducerError(
                f"a TensorFlow {name} tensor ({list(obj.shape)}): TensorFlow's DLPack export has no quantized "
                f"dtypes. Pass tf.bitcast(x, tf.{plain}) for its {plain} values (same memory; the scale and zero "
                "point stay yours to apply), or tf.quantization.dequantize(x, min_range, max_range) for float32"
            )
        if name in _NO_CODE:
            fix = _NO_CODE[name]
            way = f"pass {fix} (a copy)" if fix else "x.numpy() gives its values as an ml_dtypes NumPy array (a copy)"
            return ProducerError(
                f"a TensorFlow {name} tensor ({list(obj.shape)}): DLPack has no {name} dtype and TensorFlow's "
                f"export refuses it; {way}"
            )
        return None

    # --- consuming ------------------------------------------------------------------------
    def from_dlpack(self) -> Any:
        """tf.experimental.dlpack.from_dlpack, also taking objects with ``__dlpack__`` (it takes
        only capsules): what a user would write natively."""
        imp = self._dlpack.from_dlpack

        def from_dlpack(x: Any) -> Any:
            return imp(x.__dlpack__() if hasattr(x, "__dlpack__") else x)

        return from_dlpack

    def fast_export(self, cls: type) -> FastExport | None:
        # Concrete eager tensors only (symbolic ones have no data), exported as export() does.
        if cls.__name__ != "EagerTensor" or not cls.__module__.startswith("tensorflow."):
            return None
        if self.has_cuda():  # the route replays CPU memory only (see JAX's)
            return None
        return (2, self._export_fast, (), None, None)

    @cached_property
    def _export_fast(self) -> Any:
        """export() as a one-argument function (the fast route's export step), one call deep."""
        to_dlpack, special, export = self._dlpack.to_dlpack, self._special, self.export

        def export_one(obj: Any) -> Any:
            if id(obj.dtype) in special:
                return export(obj, stream=None, max_version=None)
            return to_dlpack(obj)

        return export_one

    def fast_import(self, caps: Capabilities) -> tuple[int, Any, Any] | None:
        return (0, self._dlpack.from_dlpack, None)  # aligned CPU data only: import_alignment

    def import_alignment(self, caps: Capabilities) -> int:
        return _ALIGN

    def fast_unaligned_import(self, caps: Capabilities) -> Any:
        return lambda capsule: self.import_capsule(capsule, (1, 0), caps)  # (host memory: an aligned copy)

    def import_capsule(self, capsule: Any, device: tuple[int, int], caps: Capabilities) -> Any:
        if device[0] == 1:
            info = read(capsule)
            if info.data_ptr % _ALIGN and info.size:
                capsule = _aligned_copy(info)  # the caller's capsule is left unconsumed (freed)
        return self._dlpack.from_dlpack(capsule)

    def view(self, arr: Any, dtype: str) -> Any:
        # tf.bitcast shares the buffer for same-width types (probe 2026-11-23, tensorflow 2.21.0);
        # it takes no float8 or bool, so TF holds nothing beyond what it imports.
        return self.mod.bitcast(arr, getattr(self.mod, dtype))

    def data_ptr(self, arr: Any) -> int:
        # TF has no public data pointer: read it off an exported capsule, freed unconsumed.
        return data_address(self._export_fast(arr))

    def view_memory(self, arr: Any) -> tuple[int, tuple[int, ...]]:
        return memory_of(self._export_fast(arr))  # (the address and shape from one export)

    def copy(self, arr: Any) -> Any:
        # tf.identity forwards the same buffer on one device; DeepCopy always allocates.
        with self.mod.device(self._tf_device(self.device_of(arr))):
            return self.mod.raw_ops.DeepCopy(x=arr)

    def contiguous(self, arr: Any) -> Any:
        return arr  # TF tensors are always dense row-major

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        if self.device_of(arr) == device:
            return self.copy(arr)
        with self.mod.device(self._tf_device(device)):
            return self.mod.identity(arr)  # across devices identity is a copy

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        with self.mod.device(self._tf_device(device)):
            return self.mod.constant(host)

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        tf = self.mod
        return tf.bitcast(tf.bitwise.left_shift(tf.cast(u16, tf.uint32), 16), tf.float32)

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        tf = self.mod
        return tf.gather(tf.constant(table, dtype=tf.float32), tf.cast(u8, tf.int32))

    def is_readonly(self, arr: Any) -> bool:
        return True  # tf.Tensor is immutable (its legacy capsules still say writable)
