from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ._base import Adapter
from ._numpy import numpy_dtype


class CupyAdapter(Adapter):
    name = "cupy"
    module = "cupy"
    array_type = ("cupy", "ndarray")
    producer_modules = ("cupy", "cupy_backends")
    device_codes = frozenset({2, 13})

    def has_cuda(self) -> bool:
        try:
            return bool(self.mod.cuda.runtime.getDeviceCount() > 0)
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
