from __future__ import annotations

import sys
from contextlib import suppress
from functools import cached_property, lru_cache
from operator import methodcaller
from typing import Any

from .._capabilities import Capabilities, installed_version
from .._capsule._edit import mark_padded, relabel
from .._capsule._read import read
from .._dtypes import BY_NAME, lookup
from .._errors import MissingFrameworkError, OptionError, ProducerError, UnsupportedDtypeError
from ._base import Adapter, AsIs, Prober, export_capsule
from ._fast import FastExport, FastRoute
from ._support import StandIn

_ALIGN = 64


def _odd_strides(arr: Any) -> bool:
    """Whether some stride is not a multiple of the itemsize (which DLPack cannot describe)."""
    size = arr.itemsize
    return bool(size) and any(s % size for s in arr.strides)


@lru_cache(maxsize=64)
def numpy_dtype(name: str) -> Any:
    """NumPy dtype for a dlbridge name; bf16/fp8 come from ml_dtypes (imported here only)."""
    import numpy as np

    if name in ("bfloat16", "float4_e2m1fn") or name.startswith("float8_"):
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


class NumpyProber(Prober):
    """The report's, tests' and benchmarks' NumPy helpers (ml_dtypes arrays for bf16/fp8)."""

    adapter: NumpyAdapter

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

    def host_bytes(self, arr: Any) -> Any:
        np = self.mod
        return np.ascontiguousarray(arr).reshape(-1).view(np.uint8).copy()

    def to_host(self, arr: Any) -> Any:
        return self.mod.array(arr, copy=True)


class NumpyAdapter(FastRoute, Adapter):
    device_codes = frozenset({1})
    display = "NumPy"
    prober_class = NumpyProber
    distributions = ("numpy",)
    companions = ("ml_dtypes",)  # bf16/fp8 NumPy dtypes
    extra = "numpy"
    producer_devices = ("cpu",)
    wrap_call = "numpy.asarray"
    dtype_addon = "ml_dtypes"
    readonly_imports_note = (
        "dlbridge gives the memory of mutable producers (torch, NumPy) back writable and zero-copy, as NumPy 2.2+ does."
    )

    # --- NumPy >= 2.5's DLPack dtype registry (np.dtypes.register_dlpack_dtype) ----------------
    # Where the user has registered an ml_dtypes kind, NumPy exports and imports it itself; dlbridge
    # then uses that instead of same-width uints relabelled (same values, dtype and memory). dlbridge
    # never registers anything itself (dlbridge.register_numpy_dtypes() does, when called).
    _native: frozenset[str] = frozenset()  # kinds found registered (the registry only grows)
    _probed = False  # every kind asked once: later registrations are seen after register_numpy_dtypes()
    _native_caps: tuple[Capabilities, frozenset[str], Capabilities] | None = None
    # caps_switch stays None: a route built before a registration keeps relabelling uints,
    # which gives the same array (values, dtype, memory) as NumPy's own import and export.

    @cached_property
    def has_dtype_registry(self) -> bool:
        # the table's dtype_registry row, and the function itself (a build without it registers nothing)
        return self.caps.dtype_registry and hasattr(getattr(self.mod, "dtypes", None), "register_dlpack_dtype")

    def registered_dtypes(self) -> frozenset[str]:
        """The ml_dtypes kinds this NumPy exports and imports natively: registered with
        ``np.dtypes.register_dlpack_dtype`` under dlbridge's own DLPack (code, bits). NumPy has no
        query for its registry: each kind is asked once by exporting an empty array; kinds found are
        kept, as registrations cannot be undone. A kind registered later, straight with NumPy, is not
        asked again (``register_numpy_dtypes()`` asks again): until then dlbridge keeps handing it over
        as same-width uints relabelled, which gives the same arrays."""
        if not self.has_dtype_registry or "ml_dtypes" not in sys.modules:  # registering needs ml_dtypes
            return frozenset()
        if not self._probed:
            for name in self._registrable:
                self._ask(name)
            self._probed = True
        return self._native

    def registered(self, name: str) -> bool:
        """Whether NumPy exports and imports the ml_dtypes kind ``name`` natively (see registered_dtypes)."""
        return name in self._native or (not self._probed and name in self.registered_dtypes())

    def _ask(self, name: str) -> bool:
        if name in self._native:
            return True
        dtype = self._registrable.get(name) if self.has_dtype_registry and "ml_dtypes" in sys.modules else None
        if dtype is None or not self._native_round_trip(name, dtype):
            return False
        self._native = self._native | {name}
        return True

    @cached_property
    def _registrable(self) -> dict[str, Any]:
        """dlbridge name -> ml_dtypes dtype, for the kinds NumPy could register (full-width ones)."""
        np, ml = self.mod, sys.modules["ml_dtypes"]
        return {
            name: np.dtype(kind)
            for name, d in BY_NAME.items()
            if (kind := getattr(ml, name, None)) is not None and d.lanes == 1 and np.dtype(kind).itemsize * 8 == d.bits
        }

    def _native_round_trip(self, name: str, dtype: Any) -> bool:
        empty = self.mod.empty(0, dtype)
        try:
            if read(empty.__dlpack__()).dtype != name:  # registered under another (code, bits): not ours
                return False
            return bool(self.mod.from_dlpack(empty).dtype is dtype)
        except (BufferError, TypeError, ValueError):  # not registered (NumPy: BufferError)
            return False

    def register_dtypes(self) -> tuple[str, ...]:
        """Register ml_dtypes' full-width kinds with NumPy's DLPack dtype registry (dlbridge.register_numpy_dtypes)."""
        register = getattr(getattr(self.mod, "dtypes", None), "register_dlpack_dtype", None)
        if register is None or not self.has_dtype_registry:
            raise UnsupportedDtypeError(
                f"NumPy {self.version} has no DLPack dtype registry (np.dtypes.register_dlpack_dtype is new in "
                "NumPy 2.5): nothing to register. dlbridge hands bfloat16 and float8 arrays to and from this NumPy "
                "as same-width integers relabelled, with the same values, dtype and memory"
            )
        try:
            import ml_dtypes  # noqa: F401  (the dtypes to register)
        except ImportError:
            raise MissingFrameworkError(
                "register_numpy_dtypes() registers ml_dtypes' dtypes: pip install ml_dtypes"
            ) from None
        for name, dtype in self._registrable.items():
            if not self._ask(name):
                d = BY_NAME[name]
                with suppress(ValueError):  # that (code, bits) or dtype is registered otherwise: left as it is
                    register((d.code, d.bits), dtype)
        self._probed = False  # ask every kind again
        return tuple(sorted(self.registered_dtypes()))

    def capabilities(self) -> Capabilities:
        caps = self.caps
        native = self.registered_dtypes() & caps.holds
        if not native:
            return caps
        cached = self._native_caps
        if cached is None or cached[0] is not caps or cached[1] != native:  # one object per registry state
            cached = self._native_caps = (caps, native, caps._replace(imports=caps.imports | native))
        return cached[2]

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        dtype = obj.dtype
        logical = BY_NAME.get(dtype.name) if dtype.type.__module__ == "ml_dtypes" else None
        if logical is None or logical.width != dtype.itemsize * 8:  # ml_dtypes' fp4/fp6 are unpacked
            return export_capsule(obj, stream=None, max_version=max_version)
        if self.registered(dtype.name):  # registered with NumPy >= 2.5: its own export
            return export_capsule(obj, stream=None, max_version=max_version)
        # NumPy refuses to export ml_dtypes arrays; export the same bytes as uint and put the
        # true dtype back into the capsule before anyone reads it.
        capsule = export_capsule(obj.view(f"u{dtype.itemsize}"), stream=None, max_version=max_version)
        relabel(capsule, logical)
        return capsule

    def export_failed(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None,
                      copy: bool | None, target: Adapter | None, dtype: Any) -> Any:  # fmt: skip
        if obj.dtype.name == "float4_e2m1fn" and obj.dtype.type.__module__ == "ml_dtypes":
            if dtype is not None and lookup(dtype) != BY_NAME["float4_e2m1fn"]:
                raise _fp4_reinterpret_error(obj, dtype, target)
            # One value a byte, which NumPy cannot export: its bytes, versioned whatever the consumer reads,
            # labelled fp4 and flagged padded (the pipeline's fp4 plan reads the flag and repacks them).
            capsule = export_capsule(obj.view(self.mod.uint8), stream=None, max_version=(1, 3))
            mark_padded(capsule, BY_NAME["float4_e2m1fn"])
            return capsule
        if obj.dtype.isnative and not _odd_strides(obj):
            return super().export_failed(obj, stream=stream, max_version=max_version, copy=copy, target=target,
                                         dtype=dtype)  # fmt: skip
        # DLPack has no byte order: NumPy refuses to export a non-native one ("DLPack only supports
        # native byte order", numpy/_core/src/multiarray/dlpack.c; probe 2026-11-25, numpy 2.4.6), nor
        # strides that are not a multiple of the itemsize, a field of a structured array ("DLPack only
        # supports strides which are a multiple of itemsize", same file; probe 2026-11-27, numpy 2.4.6).
        if target is self and dtype is None:  # NumPy holds it: as the fast route's ndarray.view() gives
            raise AsIs(obj.view(), obj.copy if copy else None)
        if copy is True and target is not None:  # the copy asked for: native order, C order
            return self._copied(obj, stream, max_version)
        if obj.dtype.isnative:  # strides DLPack cannot say
            where = f"to_{target.name}(): " if target is not None else ""
            raise ProducerError(
                f"{where}a NumPy array of dtype {obj.dtype.str!r} (shape {list(obj.shape)}) has strides "
                f"{list(obj.strides)}, not multiples of its itemsize {obj.itemsize} (a field of a structured "
                "array?), which DLPack cannot describe, so its memory cannot be shared. Pass copy=True for a "
                "dense copy, or np.ascontiguousarray(x) first"
            )
        where = f"to_{target.name}(): " if target is not None else ""
        order = "big" if sys.byteorder == "little" else "little"
        raise ProducerError(
            f"{where}a NumPy array of dtype {obj.dtype.str!r} (shape {list(obj.shape)}) is {order}-endian, and "
            f"DLPack carries only this machine's byte order ({sys.byteorder}-endian), so its memory cannot be "
            'shared. Pass copy=True for a native-order copy, or x.astype(x.dtype.newbyteorder("=")) first'
        )

    def _copied(self, obj: Any, stream: int | None, max_version: tuple[int, int] | None) -> StandIn:
        """A native-order, C-order copy exported in the array's place (made when the conversion runs)."""
        native = obj.dtype.newbyteorder("=")
        return StandIn(
            lambda: self.export(obj.astype(native, order="C"), stream=stream, max_version=max_version),
            lambda: self.export(self.mod.empty(0, native), stream=None, max_version=max_version),
            "a native-order copy" if not obj.dtype.isnative else "a dense copy (strides DLPack cannot say)",
            tuple(obj.shape),
        )

    def fast_export(self, cls: type) -> FastExport | None:
        if cls is not self.array_class():  # subclasses (matrix, memmap, masked) take the pipeline
            return None
        kind = 0 if self.caps.versioned_capsules else 3  # NumPy < 2.1: __dlpack__ takes no max_version
        if "ml_dtypes" not in sys.modules:
            return (kind, None, (), None, None)
        native = (
            self.registered_dtypes()
        )  # NumPy exports these itself (a kind registered later: relabelled, same capsule)
        relabels = {k: v for k, v in self._ml_relabels.items() if k.name not in native} if native else self._ml_relabels
        return (kind, None, (), None, relabels)

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
        return _MaskedArrays(self.framework)

    def readonly_alias(self, arr: Any) -> Any | None:
        return None if arr.flags.writeable else arr.view()  # same memory, read-only, as NumPy >= 2.1 gives

    def writable(self, arr: Any) -> Any:
        """``arr`` (imported read-only by NumPy < 2.2) as a writable array over the same memory."""
        if arr.flags.writeable:
            return arr
        if arr.size == 0:
            return self.mod.empty_like(arr)  # no memory to share
        # A user-defined dtype's (ml_dtypes', isbuiltin 2) array interface is not NumPy's to read back
        # ("<f1", "<V2"): its bits go through as same-width unsigned integers, viewed back as its own dtype.
        size = arr.dtype.itemsize
        bits = arr.view(f"u{size}") if arr.dtype.isbuiltin == 2 and size in (1, 2, 4, 8) else arr
        alias = self.mod.asarray(_Writable(bits))
        return alias if alias.dtype == arr.dtype else alias.view(arr.dtype)

    def view(self, arr: Any, dtype: str) -> Any:
        return arr.view(numpy_dtype(dtype))

    def data_ptr(self, arr: Any) -> int:
        return int(arr.__array_interface__["data"][0])

    def empty_copy(self, arr: Any) -> tuple[Any, tuple[int, ...]] | None:
        if arr.dtype.isnative and not _odd_strides(arr):
            return None
        return self.mod.empty(0, arr.dtype.newbyteorder("=")), tuple(arr.shape)

    def exportable_copy(self, arr: Any) -> Any:
        return arr.astype(arr.dtype.newbyteorder("="), order="C")  # this machine's order: the only one DLPack has

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

    def is_readonly(self, arr: Any) -> bool:
        return not arr.flags.writeable


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


def _fp4_reinterpret_error(obj: Any, dtype: Any, target: Adapter | None) -> OptionError:
    """``dtype=`` over an ml_dtypes float4_e2m1fn array: one 4-bit value a byte, no same-width dtype to
    relabel (NumPy itself refuses to export it: "DLPack only supports signed/unsigned integers, ...")."""
    where = f"to_{target.name}(): " if target is not None else ""
    found = lookup(dtype)
    named = [name for name, d in BY_NAME.items() if d == found][:1] if found is not None else []
    shown = dtype if isinstance(dtype, str) else named[0] if named else str(dtype)
    pairs = " (torch gets float4_e2m1fn_x2 pairs)" if target is not None and target.name == "torch" else ""
    return OptionError(
        f"{where}dtype={shown!r} cannot reinterpret a NumPy float4_e2m1fn array (shape {list(obj.shape)}): ml_dtypes "
        "keeps one 4-bit value in the low half of each byte, and no dtype of that width relabels such memory. Drop "
        f"dtype= to convert the values{pairs}, or pass x.view(np.uint8) for the 4-bit codes, one a byte (zero-copy)"
    )
