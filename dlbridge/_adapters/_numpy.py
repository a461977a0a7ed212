from __future__ import annotations

from functools import lru_cache
from typing import Any

from .._capabilities import installed_version
from .._capsule import relabel
from .._dtypes import BY_NAME
from .._errors import UnsupportedDtypeError
from ._base import Adapter, export_capsule


@lru_cache(maxsize=64)
def numpy_dtype(name: str) -> Any:
    """NumPy dtype for a dlbridge name; bf16/fp8 come from ml_dtypes (imported here only)."""
    import numpy as np

    if name in ("bfloat16",) or name.startswith("float8_"):
        import ml_dtypes

        found = getattr(ml_dtypes, name, None)
        if found is None:  # the capability table's ml_dtypes rows should have kept us from here
            raise UnsupportedDtypeError(
                f"NumPy cannot hold {name}: ml_dtypes {installed_version('ml_dtypes')} does not define it; "
                "pip install -U ml_dtypes (0.5 or newer)"
            )
        return np.dtype(found)
    return np.dtype(name)


class _Writable:
    """An imported array's memory, offered to NumPy as writable (NumPy < 2.2 marks every import
    read-only, whatever the capsule says). Holds the imported array, so the producer's memory
    stays alive as long as the result."""

    __slots__ = ("__array_interface__", "_imported")

    def __init__(self, imported: Any) -> None:
        interface = dict(imported.__array_interface__)
        interface["data"] = (interface["data"][0], False)
        self.__array_interface__ = interface
        self._imported = imported


class NumpyAdapter(Adapter):
    name = "numpy"
    module = "numpy"
    aliases = ("np",)
    array_type = ("numpy", "ndarray")
    producer_modules = ("numpy",)
    device_codes = frozenset({1})

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        dtype = obj.dtype
        logical = BY_NAME.get(dtype.name) if dtype.type.__module__ == "ml_dtypes" else None
        if logical is None or logical.width != dtype.itemsize * 8:  # ml_dtypes' fp4/fp6 are unpacked
            return export_capsule(obj, stream=None, max_version=max_version)
        # NumPy refuses to export ml_dtypes arrays; export the same bytes as uint and put the
        # true dtype back into the capsule before anyone reads it.
        capsule = export_capsule(obj.view(f"u{dtype.itemsize}"), stream=None, max_version=max_version)
        relabel(capsule, logical)
        return capsule

    def readonly_alias(self, arr: Any) -> Any | None:
        return None if arr.flags.writeable else arr.view()  # same memory, read-only, as NumPy >= 2.1 gives

    def writable(self, arr: Any) -> Any:
        """``arr`` (imported read-only by NumPy < 2.2) as a writable array over the same memory."""
        if arr.flags.writeable:
            return arr
        if arr.size == 0:
            return self.mod.empty_like(arr)  # no memory to share
        return self.mod.asarray(_Writable(arr))

    def view(self, arr: Any, dtype: str) -> Any:
        return arr.view(numpy_dtype(dtype))

    def data_ptr(self, arr: Any) -> int:
        return int(arr.__array_interface__["data"][0])

    def copy(self, arr: Any) -> Any:
        return arr.copy()

    def contiguous(self, arr: Any) -> Any:
        return self.mod.ascontiguousarray(arr)

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        return arr  # only the CPU

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        return host

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        np = self.mod
        return (u16.astype(np.uint32) << 16).view(np.float32)

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        np = self.mod
        return np.asarray(table, dtype=np.float32)[u8]
