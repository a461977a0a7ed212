"""A DLPack producer built with ctypes only: the "framework dlbridge has never heard of".

``CtypesArray`` owns memory it allocates itself (a ctypes buffer, 64-byte aligned), exports
it through ``__dlpack__`` / ``__dlpack_device__`` as a legacy ``dltensor`` or a versioned
``dltensor_versioned`` capsule, and counts every deleter call. Any field of the exported
struct can be overridden (``with_(...)``) to make malformed capsules: wrong names, NULL
data or shape, odd ndim/dtype/device/version/strides.

Ownership follows the protocol exactly: the capsule destructor calls the deleter only while
the capsule still has the name it was created with (nobody consumed it); a consumer that
renames it to ``used_...`` calls the deleter itself. Each export is tracked by the address of
its managed struct, so a second deleter call on the same struct is *counted* (as
``double_deletes``) instead of touching freed memory.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["CtypesArray", "DTYPES", "Export", "live_exports", "UsedBy"]

# (code, bits, lanes) of the dtypes the tests use; the producer itself takes any triple.
DTYPES: dict[str, tuple[int, int, int]] = {
    "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1), "int64": (0, 64, 1),
    "uint8": (1, 8, 1), "uint16": (1, 16, 1), "uint32": (1, 32, 1), "uint64": (1, 64, 1),
    "float16": (2, 16, 1), "float32": (2, 32, 1), "float64": (2, 64, 1),
    "bfloat16": (4, 16, 1), "complex64": (5, 64, 1), "complex128": (5, 128, 1), "bool": (6, 8, 1),
    "float8_e4m3fn": (10, 8, 1), "float8_e5m2": (12, 8, 1),
}  # fmt: skip

FLAG_READ_ONLY, FLAG_IS_COPIED = 1 << 0, 1 << 1
ALIGN = 64  # JAX copies CPU buffers that are not 64-byte aligned instead of sharing them


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # CFUNCTYPE: takes the GIL if the caller has not


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


assert ctypes.sizeof(DLManagedTensor) == 64 and ctypes.sizeof(DLManagedTensorVersioned) == 80

# Private prototypes over raw addresses: the capsule destructor runs while the capsule's
# refcount is 0, so it must not be wrapped in a py_object (that would incref a dying object).
_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api)
)
_raw_name = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(("PyCapsule_GetName", _api))
_raw_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(("PyCapsule_GetPointer", _api))
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _api))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))

# Capsule names must outlive the capsules: keep one buffer per distinct name, forever.
_NAMES: dict[bytes, ctypes.Array[ctypes.c_char]] = {}


def _name_buffer(name: bytes) -> ctypes.Array[ctypes.c_char]:
    buf = _NAMES.get(name)
    if buf is None:
        buf = _NAMES.setdefault(name, ctypes.create_string_buffer(name))
    return buf


@dataclass
class Export:
    """One exported capsule's struct and everything it points to (kept alive until deleted)."""

    owner: CtypesArray
    struct: ctypes.Structure
    shape: Any
    strides: Any
    name: bytes  # the name the capsule was created with


# Reentrant: a deleter may run inside another's locked step on the same thread (a garbage collection that a
# profile or trace function's allocation starts there frees a consumer's array, which calls its deleter).
_lock = threading.RLock()
_live: dict[int, Export] = {}  # managed-struct address -> export, until its deleter runs


def live_exports() -> int:
    """Exports whose deleter has not run yet (all producers)."""
    return len(_live)


@DELETER
def _deleter(address: int | None) -> None:
    with _lock:
        export = _live.pop(address or 0, None)
    if export is None:  # a second call for the same struct: count it, touch nothing
        CtypesArray.stray_deletes += 1
        return
    export.owner._deleted()


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int | None) -> None:
    name_ptr = _raw_name(capsule)
    address = _raw_pointer(capsule, name_ptr)
    with _lock:
        export = _live.get(address or 0)
    if export is None or not export.struct.deleter:
        return  # consumed and already deleted, or no deleter to call (the producer keeps the memory)
    name = ctypes.string_at(name_ptr) if name_ptr else b""
    if name == export.name and not name.startswith(b"used_"):
        _deleter(address)  # nobody took it: the producer cleans up


_DESTRUCTOR_ADDRESS = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


@dataclass
class Fields:
    """What the next capsule will say; any field may be set to something malformed."""

    code: int
    bits: int
    lanes: int
    shape: tuple[int, ...] | None  # None: NULL shape pointer
    strides: tuple[int, ...] | None  # None: NULL strides (C-contiguous, legal before DLPack 1.2)
    byte_offset: int = 0
    device: tuple[int, int] = (1, 0)
    ndim: int | None = None  # None: len(shape)
    data: int | None = None  # None: the array's own buffer; 0: NULL
    versioned: bool | None = None  # None: versioned iff the consumer passed max_version >= (1, 0)
    version: tuple[int, int] = (1, 1)
    flags: int = 0
    name: bytes | None = None  # None: "dltensor" / "dltensor_versioned"
    claimed_device: tuple[int, int] | None = None  # what __dlpack_device__ says, if not ``device``
    null_deleter: bool = False  # a NULL deleter (DLPack allows one): the export is never freed (kept in _live)


class UsedBy:
    """Stands for another consumer that took a capsule (renamed it) and will delete it later."""

    def __init__(self, capsule: Any) -> None:
        name = _get_name(capsule)
        self.address = _get_pointer(capsule, name)
        _set_name(capsule, _name_buffer(b"used_" + name))
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            _deleter(self.address)


class CtypesArray:
    """A CPU (or pretend-device) array in a ctypes buffer, exported through DLPack."""

    stray_deletes = 0  # deleter calls for structs already deleted (double deletes), all producers

    def __init__(self, nbytes: int, fields: Fields, *, keywords: bool = True, single_use: bool = False) -> None:
        self._raw = ctypes.create_string_buffer(max(nbytes, 1) + ALIGN)
        base = ctypes.addressof(self._raw)
        self.base = base + (-base) % ALIGN  # the DLTensor's ``data``
        self.nbytes = nbytes
        self.fields = fields
        self.keywords = keywords  # False: an old producer whose __dlpack__ takes no keywords
        self.single_use = single_use
        self.exports = 0
        self.deleter_calls = 0
        self.calls: list[dict[str, Any]] = []  # the keywords each __dlpack__ call got
        self.copies: list[CtypesArray] = []  # made for copy=True exports (their counters are theirs)

    # --- construction ------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, raw: bytes, dtype_name: str, shape: tuple[int, ...], strides: tuple[int, ...] | None = None,
                   byte_offset: int = 0, **options: Any) -> CtypesArray:  # fmt: skip
        """``raw`` is the whole buffer; the first element is at ``raw[byte_offset]``."""
        code, bits, lanes = DTYPES[dtype_name]
        arr = cls(len(raw), Fields(code, bits, lanes, tuple(shape), strides, byte_offset), **options)
        ctypes.memmove(arr.base, raw, len(raw))
        return arr

    @classmethod
    def zeros(cls, nbytes: int, code: int = 1, bits: int = 8, lanes: int = 1, shape: tuple[int, ...] | None = None,
              **overrides: Any) -> CtypesArray:  # fmt: skip
        arr = cls(nbytes, Fields(code, bits, lanes, (nbytes,) if shape is None else shape, None))
        return arr.with_(**overrides)

    def with_(self, **overrides: Any) -> CtypesArray:
        """Override fields of every later capsule (``ndim=-1``, ``data=0``, ``name=b"x"`` ...)."""
        self.fields = replace(self.fields, **overrides)
        return self

    # --- what a test reads -----------------------------------------------------------------
    @property
    def data_ptr(self) -> int:
        """Address of the first element (data + byte_offset), as dlbridge.inspect reports it."""
        return self.base + self.fields.byte_offset

    def read_bytes(self) -> bytes:
        return ctypes.string_at(self.base, self.nbytes)

    def write_bytes(self, raw: bytes, at: int = 0) -> None:
        ctypes.memmove(self.base + at, raw, len(raw))

    @property
    def balanced(self) -> bool:
        return self.exports == self.deleter_calls

    def _deleted(self) -> None:
        with _lock:
            self.deleter_calls += 1

    # --- the protocol ------------------------------------------------------------------------
    def __dlpack_device__(self) -> tuple[int, int]:
        return self.fields.claimed_device or self.fields.device

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        if args or (kwargs and not self.keywords):
            raise TypeError(f"__dlpack__() takes no arguments ({len(args) + len(kwargs)} given)")
        unknown = set(kwargs) - {"stream", "max_version", "dl_device", "copy"}
        if unknown:
            raise TypeError(f"__dlpack__() got unexpected keyword {sorted(unknown)[0]!r}")
        self.calls.append(kwargs)
        if self.single_use and self.exports:
            raise BufferError("this producer exports once")
        dl_device = kwargs.get("dl_device")
        if dl_device is not None and tuple(dl_device) != self.fields.device:
            raise BufferError(f"CtypesArray cannot move its memory to device {tuple(dl_device)}")
        max_version = kwargs.get("max_version")
        versioned = self.fields.versioned
        if versioned is None:
            versioned = max_version is not None and tuple(max_version) >= (1, 0)
        if kwargs.get("copy"):
            return self._copy().capsule(versioned)
        if self.fields.flags & FLAG_READ_ONLY and not versioned:
            raise BufferError("cannot export read-only memory as a legacy capsule, which cannot say so")
        return self.capsule(versioned)

    def _copy(self) -> CtypesArray:
        """A writable copy (same layout), owned by the capsule it is exported through."""
        twin = CtypesArray(self.nbytes, replace(self.fields, flags=FLAG_IS_COPIED))
        ctypes.memmove(twin.base, self.base, self.nbytes)
        self.copies.append(twin)
        return twin

    def capsule(self, versioned: bool = False) -> Any:
        """A new capsule over this array's memory, with the current fields."""
        f = self.fields
        shape_arr = (ctypes.c_int64 * len(f.shape))(*f.shape) if f.shape is not None else None
        strides_arr = (ctypes.c_int64 * len(f.strides))(*f.strides) if f.strides is not None else None
        if versioned:
            struct: Any = DLManagedTensorVersioned(major=f.version[0], minor=f.version[1], flags=f.flags)
        else:
            struct = DLManagedTensor()
        t = struct.dl_tensor
        t.data = self.base if f.data is None else (f.data or None)
        t.device_type, t.device_id = f.device
        t.ndim = f.ndim if f.ndim is not None else len(f.shape or ())
        t.code, t.bits, t.lanes = f.code, f.bits, f.lanes
        t.shape = ctypes.addressof(shape_arr) if shape_arr is not None else None
        t.strides = ctypes.addressof(strides_arr) if strides_arr is not None else None
        t.byte_offset = f.byte_offset
        struct.deleter = DELETER() if f.null_deleter else _deleter  # DELETER(): a NULL function pointer
        address = ctypes.addressof(struct)
        name = f.name if f.name is not None else (b"dltensor_versioned" if versioned else b"dltensor")
        with _lock:
            _live[address] = Export(self, struct, shape_arr, strides_arr, name)
            self.exports += 1
        return _capsule_new(address, _name_buffer(name), _DESTRUCTOR_ADDRESS)

    def __repr__(self) -> str:
        f = self.fields
        return f"CtypesArray(code={f.code}, bits={f.bits}, lanes={f.lanes}, shape={f.shape}, strides={f.strides})"
