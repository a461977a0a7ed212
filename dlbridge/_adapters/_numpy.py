from __future__ import annotations

import sys
from functools import cached_property, lru_cache
from operator import methodcaller
from typing import Any

from .._capabilities import installed_version
from .._capsule import relabel
from .._dtypes import BY_NAME
from .._errors import ProducerError, UnsupportedDtypeError
from ._base import Adapter, AsIs, FastExport, export_capsule

_ALIGN = 64


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


def raw_bits(ref: Any) -> Any:
    """A NumPy array as one any framework understands: ml_dtypes data as same-width unsigned ints."""
    return ref.view(f"u{ref.dtype.itemsize}") if ref.dtype.type.__module__ == "ml_dtypes" else ref


def aligned_copy(a: Any) -> Any:
    """A C-ordered copy of NumPy array ``a`` at a 64-byte aligned address.

    Some consumers copy CPU buffers that are not aligned the way XLA wants (64 bytes) while NumPy
    aligns its own allocations to 16 only: without this a zero-copy check would depend on chance.
    """
    import numpy as np

    buf = np.empty(a.nbytes + _ALIGN, dtype=np.uint8)
    start = -buf.ctypes.data % _ALIGN
    out = buf[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


class NumpyAdapter(Adapter):
    name = "numpy"
    module = "numpy"
    aliases = ("np",)
    array_type = ("numpy", "ndarray")
    producer_modules = ("numpy",)
    device_codes = frozenset({1})
    display = "NumPy"
    distributions = ("numpy",)
    companions = ("ml_dtypes",)  # bf16/fp8 NumPy dtypes
    extra = "numpy"
    producer_devices = ("cpu",)
    host = True
    wrap_call = "numpy.asarray"
    dtype_addon = "ml_dtypes"
    readonly_imports_note = (
        "dlbridge gives the memory of mutable producers (torch, NumPy) back writable and zero-copy, as NumPy 2.2+ does."
    )

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

    def export_failed(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None,
                      copy: bool | None, target: Adapter | None, dtype: Any) -> Any:  # fmt: skip
        if obj.dtype.isnative:
            return super().export_failed(obj, stream=stream, max_version=max_version, copy=copy, target=target,
                                         dtype=dtype)  # fmt: skip
        # DLPack has no byte order: NumPy refuses to export a non-native one ("DLPack only supports
        # native byte order", numpy/_core/src/multiarray/dlpack.c; probe 2026-11-25, numpy 2.4.6).
        if target is self and dtype is None:  # NumPy holds it: as the fast route's ndarray.view() gives
            raise AsIs(obj.copy() if copy else obj.view())
        if copy is True and target is not None:  # the copy asked for, in native order
            return self.export(obj.astype(obj.dtype.newbyteorder("=")), stream=stream, max_version=max_version)
        where = f"to_{target.name}(): " if target is not None else ""
        order = "big" if sys.byteorder == "little" else "little"
        raise ProducerError(
            f"{where}a NumPy array of dtype {obj.dtype.str!r} (shape {list(obj.shape)}) is {order}-endian, and "
            f"DLPack carries only this machine's byte order ({sys.byteorder}-endian), so its memory cannot be "
            'shared. Pass copy=True for a native-order copy, or x.astype(x.dtype.newbyteorder("=")) first'
        )

    def fast_export(self, cls: type) -> FastExport | None:
        if cls is not self.array_class():  # subclasses (matrix, memmap, masked) take the pipeline
            return None
        kind = 0 if self.caps.versioned_capsules else 3  # NumPy < 2.1: __dlpack__ takes no max_version
        return (kind, None, (), None, self._ml_relabels if "ml_dtypes" in sys.modules else None)

    @cached_property
    def _ml_relabels(self) -> dict[Any, tuple[Any, int]]:
        """ml_dtypes dtype -> (same-width uint dtype, the capsule dtype): what export() does.
        Read once ml_dtypes is imported (fast_export asks only then)."""
        np, ml = self.mod, sys.modules["ml_dtypes"]
        return {
            np.dtype(kind): (np.dtype(f"u{d.bits // 8}"), d.code | d.bits << 8 | d.lanes << 16)
            for name, d in BY_NAME.items()
            if (kind := getattr(ml, name, None)) is not None and d.lanes == 1 and np.dtype(kind).itemsize * 8 == d.bits
        }

    def fast_self_import(self) -> tuple[type, Any] | None:
        # ndarray.view(): a new array over the same memory with the same dtype and flags, as
        # numpy.from_dlpack returns for an ndarray; also for ml_dtypes arrays, which NumPy cannot export.
        return (self.mod.ndarray, self.mod.ndarray.view)

    def viewer(self, dtype: str) -> Any:
        return methodcaller("view", numpy_dtype(dtype))

    def for_type(self, cls: type) -> Adapter:
        masked = getattr(sys.modules.get("numpy.ma"), "MaskedArray", None)
        return self._masked if isinstance(masked, type) and issubclass(cls, masked) else self

    @cached_property
    def _masked(self) -> Adapter:
        return _MaskedArrays()

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

    # --- report, test and benchmark helpers ----------------------------------------------------
    def dtype_for(self, name: str) -> Any:
        """The NumPy dtype for a dlbridge dtype name (ml_dtypes for bf16/fp8, imported only then)."""
        return numpy_dtype(name)

    def make_array(self, ref: Any, device: str) -> Any:
        if device != "cpu":
            raise ValueError(f"NumPy arrays live on the CPU only, not {device}")
        return aligned_copy(ref)  # bf16/fp8: an ml_dtypes array

    def transpose(self, arr: Any) -> Any:
        return arr.T

    def make_readonly(self, arr: Any) -> Any:
        view = arr.view()
        view.flags.writeable = False
        return view

    def is_readonly(self, arr: Any) -> bool:
        return not arr.flags.writeable

    def host_bytes(self, arr: Any) -> Any:
        np = self.mod
        return np.ascontiguousarray(arr).reshape(-1).view(np.uint8).copy()

    def to_host(self, arr: Any) -> Any:
        return self.mod.array(arr, copy=True)


class _MaskedArrays(NumpyAdapter):
    """NumPy masked arrays: DLPack carries the data without the mask (NumPy's own __dlpack__ and
    every consumer drop it without a word), so they are refused, the mask named."""

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        masked = int(obj.mask.sum()) if obj.mask is not self.mod.ma.nomask else 0
        raise ProducerError(
            f"a NumPy masked array ({obj.dtype}{list(obj.shape)}, {masked} masked) would lose its mask: DLPack "
            "carries only the data, masked entries included. Pass x.filled(value) to replace the masked "
            "entries, or x.data for the raw data with the mask dropped on purpose (and x.mask separately)"
        )
