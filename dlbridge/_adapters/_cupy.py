from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from .._capsule._edit import relabel
from .._capsule._probe import probe
from .._dtypes import BY_NAME
from .._errors import UnsupportedDtypeError
from ._base import Adapter, Prober, export_capsule
from ._fast import FastExport, FastRoute, GpuExport
from ._numpy import numpy_dtype, raw_bits


class CupyProber(Prober):
    """The report's, tests' and benchmarks' CuPy helpers (GPU arrays only)."""

    adapter: CupyAdapter

    def dtype_for(self, name: str) -> Any:
        return numpy_dtype(name)

    def make_array(self, ref: Any, device: str) -> Any:
        if device != "cuda":
            raise ValueError(f"CuPy arrays live on the GPU only, not {device}")
        cp = self.mod
        with cp.cuda.Device(0):
            raw = cp.asarray(raw_bits(ref))  # bf16: CuPy 14 views the bits as ml_dtypes' bfloat16
            return raw.view(ref.dtype) if raw.dtype != ref.dtype else raw

    def transpose(self, arr: Any) -> Any:
        return arr.T

    def host_bytes(self, arr: Any) -> Any:
        import numpy as np

        with arr.device:
            a = self.mod.ascontiguousarray(arr).reshape(-1)
            return a.view(f"u{a.dtype.itemsize}").get().view(np.uint8)

    def to_host(self, arr: Any) -> Any:
        return arr.get()

    def gpu_name(self) -> str | None:
        if not self.adapter.has_cuda():
            return None
        name = self.mod.cuda.runtime.getDeviceProperties(0)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)


class CupyAdapter(FastRoute, Adapter):
    device_codes = frozenset({2, 13})
    display = "CuPy"
    prober_class = CupyProber
    # cupy-cuda12x and friends are found through importlib.metadata.packages_distributions().
    distributions = ("cupy",)
    extra = "cupy"
    producer_devices = ("cuda",)

    def fast_export(self, cls: type) -> FastExport | None:
        return None  # CuPy arrays live on the GPU and the route replays CPU memory only: never exported there

    def fast_gpu_export(self, cls: type) -> GpuExport | None:
        # Its own ndarray (not a subclass, which may override __dlpack__): every state exports, and the
        # dtypes it cannot export are refused by CuPy (a decline: the pipeline says why). Handed the
        # consumer's stream, CuPy makes it wait itself, recording its event on the *current* device's
        # stream (cupy/_core/core.pyx __dlpack__): the route takes arrays on the current device only.
        if cls is not self.array_class():
            return None
        kind = 0 if self.caps.versioned_capsules else 3  # CuPy < 14's __dlpack__ takes no max_version
        return GpuExport(
            (),
            "__dlpack_device__",
            0,
            kind,
            current_device=self.mod.cuda.runtime.getDevice,
            relabels=self._float_relabels,
        )

    @property
    def _float_relabels(self) -> dict[Any, tuple[None, int]] | None:
        """The dtypes CuPy labels kDLFloat of their width (exports_as_float: e5m2, kind 'f'), and the dtype
        triple their capsule gets (what export() does: the array's own dtype says which one)."""
        found = {numpy_dtype(name): (None, d.code | d.bits << 8 | d.lanes << 16)
                 for name in self.caps.exports_as_float if (d := BY_NAME.get(name)) is not None}  # fmt: skip
        return found or None

    def fast_stream_query(self) -> Any:
        cuda = self.mod.cuda
        # get_current_stream(device_id): no device switch (CuPy >= 11); its .ptr is the handle
        return (cuda.get_current_stream, "ptr") if int(self.version.split(".")[0]) >= 11 else None

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        # CuPy views any NumPy dtype (float8 from ml_dtypes included) but exports only its own and
        # bfloat16 (CuPy 14): refused here with the fix, before CuPy's BufferError (capability row).
        cannot = self.caps.cannot_export
        name = getattr(obj.dtype, "name", "")
        if cannot and name in cannot:
            bits = f"x.view(cupy.uint{obj.dtype.itemsize * 8})" + (
                ", or x.view(cupy.uint8)" if obj.dtype.itemsize > 1 else ""
            )
            raise UnsupportedDtypeError(
                f"CuPy {self.version} cannot export {name} arrays through DLPack (it holds them only as a view "
                f"of other bits); hand over its bits: {bits}"
            )
        capsule = export_capsule(obj, stream=stream, max_version=max_version)
        true = BY_NAME.get(name)
        if true is not None and true.code != 2:
            # CuPy labels a capsule by the dtype's NumPy kind (dlpack.pyx v14.2.0 lines 75-97): ml_dtypes gives
            # float8_e5m2 kind 'f', so its capsule says kDLFloat with 8 bits, which no consumer reads right
            # (capability row exports_as_float). The array's own dtype says which one: relabelled, zero-copy.
            raw = probe(capsule)
            if raw is not None and (raw[8], raw[9], raw[10]) == (2, true.bits, true.lanes):
                relabel(capsule, true)
        return capsule

    def has_cuda(self) -> bool:
        try:
            return bool(self.mod.cuda.runtime.getDeviceCount() > 0)
        except MemoryError:
            raise
        except Exception:  # no driver, no device, or CuPy not importable
            return False

    def current_stream(self, device: tuple[int, int]) -> int | None:
        cuda = self.mod.cuda
        try:
            ptr = cuda.get_current_stream(device[1]).ptr  # no device switch (CuPy >= 11)
        except TypeError:
            with cuda.Device(device[1]):
                ptr = cuda.get_current_stream().ptr
        # CUDA: 0 is the legacy default stream, spelled 1 in DLPack (the per-thread default is
        # already 2). ROCm (HIP) spells the default stream 0.
        return (ptr or 1) if device[0] != 10 else ptr

    def on_device(self, device: tuple[int, int]) -> AbstractContextManager[Any]:
        # CuPy's __dlpack__ records its event on the *current* device's stream.
        cuda = self.mod.cuda
        if cuda.runtime.getDevice() == device[1]:
            return nullcontext()
        switch: AbstractContextManager[Any] = cuda.Device(device[1])
        return switch

    def view(self, arr: Any, dtype: str) -> Any:
        return arr.view(numpy_dtype(dtype))

    def data_ptr(self, arr: Any) -> int:
        return int(arr.data.ptr)

    def fast_view_address(self) -> tuple[tuple[str, bool], ...]:
        return (("data", False), ("ptr", False))  # data_ptr's path, read in C by the route's view record

    # CuPy allocates on the current device: every helper that makes an array enters the source's.
    def copy(self, arr: Any) -> Any:
        with arr.device:
            return arr.copy()

    def contiguous(self, arr: Any) -> Any:
        with arr.device:
            return self.mod.ascontiguousarray(arr)

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        if device[0] == 1:
            return arr.get()
        with self.mod.cuda.Device(device[1]):
            return self.mod.asarray(arr)

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        with self.mod.cuda.Device(device[1]):
            return self.mod.asarray(host)

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        cp = self.mod
        with u16.device:
            return (u16.astype(cp.uint32) << 16).view(cp.float32)

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        cp = self.mod
        with u8.device:
            return cp.asarray(table, dtype=cp.float32)[u8]

    def parse_device(self, device: Any) -> str | tuple[int, int] | None:
        if not type(device).__module__.startswith("cupy") or not isinstance(getattr(device, "id", None), int):
            return None
        return (2, int(device.id))
