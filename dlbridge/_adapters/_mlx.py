"""MLX: ``mlx.core.array`` in and out through ``__dlpack__`` / ``mlx.core.from_dlpack`` (CPU builds).

MLX's ``from_dlpack`` copies every CPU capsule it imports (the ``copies_imports`` row), so a
conversion into MLX is never zero-copy on the CPU and ``copy=False`` is refused before MLX copies.
It narrows float64 to float32 and complex128 to complex64 without a word; dlbridge hands it float64
as uint64 bits and views them back as float64 (the ``holds`` row), and refuses complex128.

As a producer MLX shares its buffer (a legacy capsule, whatever ``max_version`` says). Its arrays are
lazy: ``__dlpack__`` evaluates an unevaluated array itself before exporting it, so the capsule always
holds the values (probe 2026-11-25, mlx 0.32.4 cpu).
"""

from __future__ import annotations

import sys
from typing import Any

from .._capsule._read import data_address, memory_of
from .._errors import MissingFrameworkError
from ._base import Adapter, Prober
from ._fast import FastRoute

# dlbridge's dtype names that MLX spells otherwise.
_MLX_NAMES = {"bool": "bool_"}


class MlxProber(Prober):
    """The report's, tests' and benchmarks' Mlx helpers."""

    adapter: MlxAdapter

    def dtype_for(self, name: str) -> Any:
        return self.adapter.dtype_for(name)

    def make_array(self, ref: Any, device: str) -> Any:
        """From the bits: ``mx.array`` would narrow float64 NumPy data to float32."""
        import numpy as np

        from ._numpy import numpy_dtype

        if device != "cpu":
            raise ValueError(f"dlbridge uses MLX on the CPU only, not {device}")
        name = ref.dtype.name
        if not hasattr(self.mod, _MLX_NAMES.get(name, name)):
            raise TypeError(f"MLX {self.adapter.version} has no {name}")
        dense = np.ascontiguousarray(ref).reshape(ref.shape)  # ascontiguousarray makes 0-d arrays 1-d
        bits = dense.view(numpy_dtype(f"uint{ref.dtype.itemsize * 8}"))
        out = self.mod.array(bits).view(self.dtype_for(name))
        self.mod.eval(out)
        return out

    def transpose(self, arr: Any) -> Any:
        return arr.T  # strided over the same buffer (its capsule says strides (1, n))

    def host_bytes(self, arr: Any) -> Any:
        import numpy as np

        flat = self.adapter.contiguous(arr).reshape(-1).view(self.mod.uint8)  # NumPy cannot take MLX's bfloat16
        return np.array(flat, dtype=np.uint8, copy=True).reshape(-1)

    def to_host(self, arr: Any) -> Any:
        from ._numpy import numpy_dtype

        return self.host_bytes(arr).view(numpy_dtype(self.dtype_str(arr))).reshape(tuple(arr.shape))


class MlxAdapter(FastRoute, Adapter):
    device_codes = frozenset({1})
    prober_class = MlxProber
    display = "MLX"
    distributions = ("mlx",)
    extra = "mlx"
    pip_name = '"mlx[cpu]"'  # the Linux CPU build (on macOS: mlx)
    producer_devices = ("cpu",)
    wrap_call = "mlx.core.array"

    def installed_version(self) -> str:
        # The module is mlx.core; the distribution that provides it is "mlx".
        from importlib import metadata

        loaded = getattr(sys.modules.get(self.module), "__version__", None)
        if isinstance(loaded, str):
            return loaded
        try:
            return metadata.version(self.distributions[0])
        except metadata.PackageNotFoundError:
            raise MissingFrameworkError(
                f"{self.name} is not installed, so dlbridge cannot tell its version; install it "
                f'(pip install {self.pip_name}), or pass the version to ask about, e.g. capabilities("mlx", "0.32")'
            ) from None

    def hint(self, dtype: str) -> str | None:
        if dtype != "complex128":
            return None
        return (
            "MLX has no complex128 (its own from_dlpack narrows it to complex64 without a word); pass "
            "x.astype(complex64) first if single precision will do (a copy you choose)."
        )

    def dtype_for(self, name: str) -> Any:
        return getattr(self.mod, _MLX_NAMES.get(name, name))

    # --- consuming ------------------------------------------------------------------------
    def view(self, arr: Any, dtype: str) -> Any:
        return arr.view(self.dtype_for(dtype))  # same buffer (probe 2026-11-25, mlx 0.32.4)

    def data_ptr(self, arr: Any) -> int:
        # MLX has no public data pointer: read it off an exported capsule (freed unconsumed).
        return data_address(arr.__dlpack__())

    def view_memory(self, arr: Any) -> tuple[int, tuple[int, ...]]:
        return memory_of(arr.__dlpack__())  # (the address and shape from one export)

    def copy(self, arr: Any) -> Any:
        out = self.mod.array(arr)  # a new buffer (probe 2026-11-25), same dtype
        self.mod.eval(out)
        return out

    def contiguous(self, arr: Any) -> Any:
        out = self.mod.contiguous(arr)
        self.mod.eval(out)
        return out

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        return self.copy(arr)  # only the CPU

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        return self.prober.make_array(host, "cpu")

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        mx = self.mod
        out = mx.left_shift(u16.astype(mx.uint32), 16).view(mx.float32)
        mx.eval(out)
        return out

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        mx = self.mod
        out = mx.take(mx.array(table, dtype=mx.float32), u8.astype(mx.int32))
        mx.eval(out)
        return out
