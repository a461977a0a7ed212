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
from .._capsule import DLPackInfo, read
from .._errors import DLBridgeError, ProducerError
from ._base import Adapter, FastExport

# TF imports a CPU buffer at any address without copying, but its kernels CHECK that data is
# aligned to EIGEN_MAX_ALIGN_BYTES and abort the process otherwise ("Check failed: IsAligned()",
# tensorflow/core/framework/tensor.cc; tf.cast of a numpy a[1:17] import, probe 2026-11-23,
# tensorflow 2.21.0). Misaligned CPU data is therefore copied to an aligned buffer first.
_ALIGN = 64


def _aligned_copy(info: DLPackInfo) -> Any:
    """A capsule of a fresh, 64-byte aligned NumPy copy of a dense CPU capsule's bytes."""
    import ctypes

    import numpy as np

    from ._numpy import NumpyAdapter, numpy_dtype

    dtype = numpy_dtype(info.dtype)
    nbytes = info.size * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGN
    dense = raw[start : start + nbytes].view(dtype).reshape(info.shape)
    ctypes.memmove(dense.ctypes.data, info.data_ptr, nbytes)  # dense row-major: one span
    return NumpyAdapter().export(dense, stream=None, max_version=None)  # relabels bf16 (ml_dtypes)


class TensorflowAdapter(Adapter):
    name = "tensorflow"
    module = "tensorflow"
    aliases = ("tf",)
    array_type = ("tensorflow", "Tensor")
    producer_modules = ("tensorflow",)
    device_codes = frozenset({1, 2})
    no_sync_stream = None  # EagerTensor.__dlpack__ raises on any stream but None
    honours_stream = False  # from_dlpack takes no stream: TF reads on its own
    display = "TensorFlow"
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
        except Exception:
            return False

    def dtype_for(self, name: str) -> Any:
        tf = self.mod  # float8 kinds live in tf.dtypes.experimental
        found = getattr(tf, name, None) or getattr(tf.dtypes.experimental, name, None)
        if not isinstance(found, tf.dtypes.DType):
            raise TypeError(f"tensorflow {self.version} has no {name}")
        return found

    def gpu_name(self) -> str | None:
        try:
            gpus = self.mod.config.list_physical_devices("GPU")
            return str(self.mod.config.experimental.get_device_details(gpus[0])["device_name"]) if gpus else None
        except Exception:
            return None

    def _tf_device(self, device: tuple[int, int]) -> str:
        return f"/GPU:{device[1]}" if device[0] == 2 else "/CPU:0"

    # --- producing ------------------------------------------------------------------------
    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        # Always a legacy capsule; the data is ready on return (to_dlpack's documented contract).
        return self._dlpack.to_dlpack(obj)

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
        return (2, self._dlpack.to_dlpack, (), None, None)

    def fast_import(self, caps: Capabilities) -> tuple[int, Any, Any] | None:
        return (0, self._dlpack.from_dlpack, None)  # aligned CPU data only: import_alignment

    def import_alignment(self, caps: Capabilities) -> int:
        return _ALIGN

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
        return read(self._dlpack.to_dlpack(arr)).data_ptr

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

    # --- report, tests and benchmarks ---------------------------------------------------------
    def make_array(self, ref: Any, device: str) -> Any:
        # tf.constant takes ml_dtypes arrays (bf16, fp8) as they are: TF's NumPy types are ml_dtypes'.
        with self.mod.device("/GPU:0" if device == "cuda" else "/CPU:0"):
            return self.mod.constant(ref)

    def dtype_str(self, arr: Any) -> str:
        return str(arr.dtype.name)

    def to_host(self, arr: Any) -> Any:
        import numpy as np

        return np.array(arr.numpy(), copy=True)

    def is_readonly(self, arr: Any) -> bool:
        return True  # tf.Tensor is immutable (its legacy capsules still say writable)

    def host_bytes(self, arr: Any) -> Any:
        import numpy as np

        return np.ascontiguousarray(self.to_host(arr)).reshape(-1).view(np.uint8)
