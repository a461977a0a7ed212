"""NVIDIA Warp: ``warp.array`` in and out through ``__dlpack__`` / ``warp.from_dlpack``.

Warp exports legacy capsules only (``array.__dlpack__(stream=None)`` takes no ``max_version``),
with ``strides`` NULL for a contiguous array: read as C order. Arrays of vector and matrix
dtypes (``wp.vec3``, ``wp.mat22``) export as their scalar type with the vector's shape appended
(4 ``vec3`` -> float32 (4, 3)). ``from_dlpack`` takes 1 to 4 dimensions, any strides, and
ignores the capsule's ``byte_offset`` (``warp/_src/dlpack.py`` ``_unpack_array`` passes
``dlt.data`` as the pointer); this adapter refuses the dimensions and corrects the offset
(probe 2026-11-25, warp-lang 1.19.0).
"""

from __future__ import annotations

import ctypes
from functools import cached_property
from typing import Any

from .._capabilities import Capabilities
from .._capsule._probe import _probe_py
from .._capsule._read import read
from .._errors import LayoutError
from ._base import Adapter, Prober
from ._fast import FastExport, FastRoute

_MAX_DIMS = 4  # warp.types.ARRAY_MAX_DIMS


def _export(obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
    return obj.__dlpack__(stream=stream)  # no max_version: always a legacy capsule


class WarpProber(Prober):
    """The report's, tests' and benchmarks' helpers for Warp."""

    adapter: WarpAdapter

    def gpu_name(self) -> str | None:
        try:
            return str(self.mod.get_cuda_device(0).name) if self.adapter.has_cuda() else None
        except MemoryError:
            raise
        except Exception:
            return None

    def make_array(self, ref: Any, device: str) -> Any:
        return self.adapter.from_host(ref, (2, 0) if device == "cuda" else (1, 0))

    def dtype_str(self, arr: Any) -> str:
        return str(arr.dtype.__name__)

    def transpose(self, arr: Any) -> Any:
        return arr.transpose()  # a strided view over the same memory

    def host_bytes(self, arr: Any) -> Any:
        import numpy as np

        dense = self.adapter.contiguous(arr if arr.device.is_cpu else self.adapter.to_device(arr, (1, 0)))
        nbytes = dense.size * self.mod.types.type_size_in_bytes(dense.dtype)
        if not nbytes:
            return np.empty(0, dtype=np.uint8)
        return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(dense.ptr)).copy()

    def to_host(self, arr: Any) -> Any:
        from ._numpy import numpy_dtype

        return self.host_bytes(arr).view(numpy_dtype(self.dtype_str(arr))).reshape(arr.shape)


class WarpAdapter(FastRoute, Adapter):
    prober_class = WarpProber
    display = "NVIDIA Warp"
    distributions = ("warp-lang",)
    extra = "warp"
    device_codes = frozenset({1, 2})
    producer_devices = ("cpu", "cuda")
    wrap_call = "warp.array"

    @cached_property
    def mod(self) -> Any:
        wp = super().mod
        # Warp needs wp.init() before from_dlpack; its greeting is an INFO log line, silenced for the
        # init dlbridge makes (the user's own setting is left as it was).
        # wp.config.log_level where Warp has logging levels (1.19 does), else wp.config.quiet.
        key, quiet = ("log_level", wp.LOG_WARNING) if hasattr(wp, "LOG_WARNING") else ("quiet", True)
        saved = getattr(wp.config, key)
        setattr(wp.config, key, max(saved, quiet))  # wp.init() returns at once when it has run before
        try:
            wp.init()
        finally:
            setattr(wp.config, key, saved)
        return wp

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        return _export(obj, stream=stream, max_version=max_version)

    def fast_export(self, cls: type) -> FastExport | None:
        if cls is not self.array_class() or self.has_cuda():  # the route replays CPU memory only
            return None
        return (3, None, (), None, None)

    def has_cuda(self) -> bool:
        try:
            return bool(self.mod.get_cuda_device_count() > 0)
        except MemoryError:
            raise
        except Exception:
            return False

    def current_stream(self, device: tuple[int, int]) -> int | None:
        if device[0] != 2:
            return None
        return int(self.mod.get_cuda_device(device[1]).stream.cuda_stream) or 1  # as warp.from_dlpack does

    def parse_device(self, device: Any) -> str | tuple[int, int] | None:
        if not type(device).__module__.startswith("warp.") or not isinstance(getattr(device, "alias", None), str):
            return None
        return "cpu:0" if device.is_cpu else f"cuda:{device.ordinal}"  # a warp.Device

    def _device(self, device: tuple[int, int]) -> str:
        return f"cuda:{device[1]}" if device[0] == 2 else "cpu"

    # --- consuming ------------------------------------------------------------------------
    def fast_import(self, caps: Capabilities) -> tuple[int, Any, Any] | None:
        # The checked import (dimensions, byte_offset); a refusal sends the call to the pipeline.
        return (0, self._import_checked, None)

    def import_capsule(self, capsule: Any, device: tuple[int, int], caps: Capabilities) -> Any:
        return self._import_checked(capsule)

    def _import_checked(self, capsule: Any) -> Any:
        # The route's cheap probe first (ndim at 7, byte_offset at 13); anything else is read in full.
        probe = _probe_py(capsule)
        if probe is not None and 1 <= probe[7] <= _MAX_DIMS and not probe[13]:
            return self._from_dlpack(capsule)
        info = read(capsule)
        if not 1 <= len(info.shape) <= _MAX_DIMS:
            fix = "x.reshape(1) (and [0] afterwards)" if not info.shape else "a reshape to 4 dimensions or fewer"
            raise LayoutError(
                f"Warp arrays have 1 to {_MAX_DIMS} dimensions, this one has {len(info.shape)}; pass {fix}"
            )
        arr = self._from_dlpack(capsule)
        if info.byte_offset and info.size:
            # warp.from_dlpack points the array at dlt.data, leaving out byte_offset: the same
            # array at the right address, keeping the imported one (and its memory) alive: an attribute
            # is enough, as Warp's capsules hold the Python array they export (warp/_src/dlpack.py
            # to_dlpack: manager_ctx = id(wp_array), Py_IncRef(wp_array); warp-lang 1.19.0).
            fixed = self.mod.array(ptr=info.data_ptr, dtype=arr.dtype, shape=arr.shape, strides=arr.strides,
                                   device=arr.device, copy=False)  # fmt: skip
            fixed._dlbridge_base = arr
            return fixed
        return arr

    def view(self, arr: Any, dtype: str) -> Any:
        return arr.view(self.dtype_for(dtype))  # same itemsize: the same memory

    def dtype_for(self, name: str) -> Any:
        return getattr(self.mod, name)

    def data_ptr(self, arr: Any) -> int:
        return int(arr.ptr or 0)

    def copy(self, arr: Any) -> Any:
        return self.mod.clone(arr)  # dense, on the same device

    def contiguous(self, arr: Any) -> Any:
        return arr if arr.is_contiguous else self.mod.clone(arr)

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        return self.mod.clone(arr, device=self._device(device))

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        import numpy as np

        from ._numpy import raw_bits

        bits = np.array(raw_bits(host), copy=True, order="C")
        arr = self.mod.clone(self.mod.from_dlpack(bits), device=self._device(device))
        return arr if bits.dtype == host.dtype else arr.view(self.dtype_for(host.dtype.name))

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        import numpy as np

        bits = self.prober.host_bytes(u16).view(np.uint16).astype(np.uint32) << 16
        return self.from_host(bits.view(np.float32).reshape(u16.shape), self.device_of(u16))

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        import numpy as np

        values = np.asarray(table, dtype=np.float32)[self.prober.host_bytes(u8)]
        return self.from_host(values.reshape(u8.shape), self.device_of(u8))
