"""array-api-strict: the Array API standard's reference namespace, ``array_api_strict.Array``.

Its arrays wrap NumPy arrays. ``__dlpack__`` exports the wrapped NumPy buffer (DLPack 1.0:
``max_version``, ``dl_device``, ``copy``; versioned capsules) and ``from_dlpack`` is
``numpy.from_dlpack`` plus a check that the dtype is one of the standard's, so both directions are
zero-copy (probe 2026-11-25, array-api-strict 2.6.1, numpy 2.4.6). It has no float16, bfloat16 or
float8 and no bitcast: those come in refused, or as same-width uints with ``fallback="view"``.

Its namespace has no data pointer, view or ``ascontiguousarray``; the helpers below go through
``numpy.from_dlpack``, which shares the wrapped buffer.
"""

from __future__ import annotations

from typing import Any

from .._capsule._carriers import Carrier
from ._base import Adapter, Prober, export_capsule
from ._fast import FastRoute


class ArrayApiStrictProber(Prober):
    """The report's, tests' and benchmarks' ArrayApiStrict helpers."""

    adapter: ArrayApiStrictAdapter

    def make_array(self, ref: Any, device: str) -> Any:
        if device != "cpu":
            raise ValueError(f"array-api-strict arrays live on the CPU only, not {device}")
        from ._numpy import aligned_copy

        return self.mod.asarray(aligned_copy(ref))  # refuses dtypes outside the standard

    def dtype_for(self, name: str) -> Any:
        return getattr(self.mod, name)

    def transpose(self, arr: Any) -> Any:
        return self.mod.permute_dims(arr, (1, 0))  # a strided view of the same buffer

    def make_readonly(self, arr: Any) -> Any:
        view = self.adapter._np(arr).view()
        view.flags.writeable = False
        return self.mod.from_dlpack(view)  # its versioned capsules say READ_ONLY

    def host_bytes(self, arr: Any) -> Any:
        import numpy as np

        return np.ascontiguousarray(self.adapter._np(arr)).reshape(-1).view(np.uint8).copy()

    def to_host(self, arr: Any) -> Any:
        return self.adapter._np(arr).copy()


class ArrayApiStrictAdapter(FastRoute, Adapter):
    device_codes = frozenset({1})
    prober_class = ArrayApiStrictProber
    display = "array-api-strict"
    distributions = ("array-api-strict",)
    extra = "array-api-strict"
    producer_devices = ("cpu",)
    no_sync_stream = None  # CPU only: the standard allows only stream=None there
    wrap_call = "array_api_strict.asarray"

    def _np(self, arr: Any) -> Any:
        """The NumPy array over ``arr``'s buffer (zero-copy; read-only where ``arr`` is)."""
        import numpy as np

        try:
            return np.from_dlpack(arr)
        except ValueError:  # set to an API version before 2023.12: no max_version (see export)
            return np.from_dlpack(Carrier(self.export(arr, stream=None, max_version=None), (1, 0)))

    def hint(self, dtype: str) -> str | None:
        return "The Array API standard has no float16, so array-api-strict refuses it." if dtype == "float16" else None

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        try:
            return export_capsule(obj, stream=stream, max_version=max_version)
        except ValueError:
            if max_version is None:
                raise
            # Set to an Array API version before 2023.12 (set_array_api_strict_flags), its __dlpack__
            # refuses max_version with ValueError (probe 2026-11-25, array-api-strict 2.6.1): a legacy capsule.
            return export_capsule(obj, stream=stream, max_version=None)

    def export_retries(self, err: Exception) -> bool:
        return isinstance(err, ValueError)  # export() asks again for a legacy capsule

    def parse_device(self, device: Any) -> str | tuple[int, int] | None:
        # Its devices (CPU_DEVICE and the test devices "device1", "device2") all hold NumPy memory.
        return "cpu:0" if type(device).__module__.startswith(f"{self.module}.") else None

    # --- consuming ------------------------------------------------------------------------
    def view(self, arr: Any, dtype: str) -> Any:
        from ._numpy import numpy_dtype

        return self.mod.from_dlpack(self._np(arr).view(numpy_dtype(dtype)))

    def data_ptr(self, arr: Any) -> int:
        return int(self._np(arr).__array_interface__["data"][0])

    def copy(self, arr: Any) -> Any:
        return self.mod.asarray(arr, copy=True)

    def contiguous(self, arr: Any) -> Any:
        import numpy as np

        host = self._np(arr)
        return arr if host.flags.c_contiguous else self.mod.asarray(np.ascontiguousarray(host))

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        return self.copy(arr)  # only the CPU

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        return self.mod.asarray(host)

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        import numpy as np

        return self.mod.asarray((self._np(u16).astype(np.uint32) << 16).view(np.float32))

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        import numpy as np

        return self.mod.asarray(np.asarray(table, dtype=np.float32)[self._np(u8)])

    def is_readonly(self, arr: Any) -> bool:
        return not self._np(arr).flags.writeable
