"""Reading DLPack capsules with ctypes, without consuming them (``_capsule_edit`` writes them).

Capsules are told apart by their *names* (``dltensor``, ``dltensor_versioned``, ``used_...``),
never by guessing from struct bytes. Inspecting never renames a capsule, so ownership stays
with whoever holds it: if nobody consumes it, the producer's capsule destructor runs the
deleter exactly once.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Any, NoReturn

from .._dtypes import BY_TRIPLE, dtype_name
from .._errors import CapsuleError

__all__ = ["DLPackInfo", "CapsuleType", "read", "c_strides", "GPU_CODES", "DEVICE_ALIASES", "DEVICE_CODES",
           "alias_device", "device_name"]  # fmt: skip


LEGACY = b"dltensor"
VERSIONED = b"dltensor_versioned"
USED = (b"used_dltensor", b"used_dltensor_versioned")
SUPPORTED_MAJOR = 1
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
# Sanity bound on ndim: DLPack sets none, but no real array has more than a few dozen.
MAX_NDIM = 64

# Private prototypes: never touch ctypes.pythonapi.X.argtypes, that object is shared with
# every other library in the process. PYFUNCTYPE raises any Python error the call sets.
_api = ctypes.pythonapi
_get_name: Callable[[object], bytes | None] = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", _api)
)
_get_pointer: Callable[[object, bytes | None], int | None] = ctypes.PYFUNCTYPE(
    ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p
)(("PyCapsule_GetPointer", _api))
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api)
)
_TYPE_PROBE_NAME = b"dlbridge.type_probe"  # must outlive the probe capsule: module constant
# types.CapsuleType only exists from 3.13; a capsule made here (no destructor) gives the type
# without importing a module that happens to export one.
CapsuleType: type = type(_new_capsule(1, _TYPE_PROBE_NAME, None))


_DEVICE_NAMES = {
    1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
    10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi",
    15: "webgpu", 16: "hexagon", 17: "maia", 18: "trn",
}  # fmt: skip
DEVICE_CODES = {v: k for k, v in _DEVICE_NAMES.items()}
# Device memory a CUDA/ROCm stream orders (the DLPack stream handshake applies).
GPU_CODES = frozenset({2, 10, 13})
# Memory that another device type can address as it is: page-locked host memory (torch's pinned
# tensors) is plain CPU memory, CUDA managed memory is plain CUDA memory on its device. A consumer
# that lacks the first type is handed the capsule relabelled as the second.
DEVICE_ALIASES = {3: 1, 11: 1, 13: 2}


def alias_device(device: tuple[int, int]) -> tuple[int, int]:
    """The device ``device``'s memory can be described as (itself when there is no alias)."""
    alias = DEVICE_ALIASES.get(device[0])
    if alias is None:
        return device
    return (1, 0) if alias == 1 else (alias, device[1])


def device_name(device_type: int) -> str:
    return _DEVICE_NAMES.get(device_type, f"device_type_{device_type}")


# Offsets in the versioned struct (x86-64 / any LP64): its flags, and the DLTensor (48 bytes) after them.
_OFF_VERSIONED_FLAGS, _OFF_VERSIONED_TENSOR = 24, 32


class _Head(ctypes.Structure):
    # The DLTensor without its pointers' targets: one from_address read gets every scalar.
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


# _Head's layout for struct (native alignment, as the C compiler lays it out).
_HEAD_STRUCT = struct.Struct("@PiiiBBHPPQ")
_HeadBytes = ctypes.c_char * _HEAD_STRUCT.size
assert _HEAD_STRUCT.size == ctypes.sizeof(_Head) == 48


class _VersionedHead(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class DLPackInfo:
    """What a DLPack capsule says about its tensor, read without consuming it."""

    dtype: str
    code: int
    bits: int
    lanes: int
    device_type: str
    device_id: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    byte_offset: int
    data_ptr: int
    readonly: bool
    versioned: bool
    version: tuple[int, int] | None
    producer: str | None
    flags: int = 0
    device_code: int = 1

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        """Bytes per element, rounded up (packed sub-byte types report 1)."""
        return max(1, (self.bits * self.lanes + 7) // 8)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def device(self) -> tuple[int, int]:
        """``(device_type, device_id)`` as ``__dlpack_device__`` returns it."""
        return (self.device_code, self.device_id)

    @property
    def on_host(self) -> bool:
        """Whether the memory is the host's (kDLCPU), as the capsule says (or the pipeline relabelled it)."""
        return self.device_code == 1

    @property
    def is_copied(self) -> bool:
        return bool(self.flags & FLAG_IS_COPIED)

    def is_compact(self) -> bool:
        """True when the strides describe a dense buffer (C order or a permutation of it)."""
        if self.strides is None or self.size == 0:
            return True
        dims = sorted((s, d) for s, d in zip(self.strides, self.shape) if d != 1)
        expected = 1
        for stride, dim in dims:
            if stride != expected:
                return False
            expected *= dim
        return True

    def has_negative_strides(self) -> bool:
        # A size-1 dimension's stride is never followed (NumPy's a[::-1] of one element has -itemsize;
        # ascontiguousarray keeps it): counting it would send such arrays round the copy path forever.
        if self.strides is None or self.size == 0:
            return False
        return any(s < 0 for s, d in zip(self.strides, self.shape) if d > 1)

    def is_c_contiguous(self) -> bool:
        if self.strides is None or self.size == 0:
            return True
        expected = 1
        for stride, dim in zip(reversed(self.strides), reversed(self.shape)):
            if dim != 1 and stride != expected:
                return False
            expected *= dim
        return True

    def describe(self) -> str:
        """Short human form for messages: ``torch cpu bfloat16[3, 4]``."""
        dev = self.device_type if self.device_type == "cpu" else f"{self.device_type}:{self.device_id}"
        who = f"{self.producer} " if self.producer else ""
        return f"{who}{dev} {self.dtype}{list(self.shape)}"


def _tensor_address(capsule: object) -> int:
    """Address of the capsule's DLTensor (for the in-place writers); raises CapsuleError."""
    if type(capsule) is not CapsuleType:
        raise CapsuleError(f"expected a DLPack capsule, got {type(capsule).__name__}")
    name = _get_name(capsule)
    if name == LEGACY:
        return _get_pointer(capsule, LEGACY) or _null(name)
    if name == VERSIONED:
        address = _get_pointer(capsule, VERSIONED) or _null(name)
        head = _VersionedHead.from_address(address)
        if head.major != SUPPORTED_MAJOR:
            _unsupported_major(head.major, head.minor)
        return address + _OFF_VERSIONED_TENSOR
    _bad_name(name)


def _null(name: bytes) -> NoReturn:
    raise CapsuleError(f"DLPack capsule {name.decode()!r} holds a NULL pointer")


# One (struct, bytes type) per ndim: a ctypes bytes view at the address and one unpack give the
# int64 tuple directly, ~2x cheaper than tuple((c_int64 * n).from_address(p)[:]).
_INT64_READERS: dict[int, tuple[Any, Any]] = {}


def _int64_reader(ndim: int) -> tuple[Any, Any]:
    unpacker = struct.Struct(f"@{ndim}q")
    reader = _INT64_READERS[ndim] = (unpacker.unpack_from, ctypes.c_char * unpacker.size)
    return reader


# The versioned header and the DLTensor that follows it, in one unpack.
_VERSIONED_STRUCT = struct.Struct("@IIPPQ" + _HEAD_STRUCT.format.lstrip("@"))
_VersionedBytes = ctypes.c_char * _VERSIONED_STRUCT.size
assert _VERSIONED_STRUCT.size == _OFF_VERSIONED_TENSOR + _HEAD_STRUCT.size

# read() builds DLPackInfo without the frozen dataclass __init__, which pays one object.__setattr__
# per field (16): installing __dict__ at once gives the same object (equal, hashable, frozen)
# several times faster. tests/test_inspect.py checks it against one built by the dataclass.
_object_new, _object_setattr = object.__new__, object.__setattr__
_u32 = ctypes.c_uint32


def read(capsule: object, producer: str | None = None) -> DLPackInfo:
    """Read a capsule's tensor description. Never consumes it; raises CapsuleError when malformed.

    The hot path of every conversion: two C-API calls (name, pointer), one struct unpack for the
    header, one per shape/strides array, and a range check; everything else is for errors.
    """
    if type(capsule) is not CapsuleType:
        raise CapsuleError(f"expected a DLPack capsule, got {type(capsule).__name__}")
    name = _get_name(capsule)
    if name == VERSIONED:
        address = _get_pointer(capsule, VERSIONED) or _null(name)
        # DLPack: a consumer must not read past the version of a major it does not know (the
        # struct may be shorter): check it alone first.
        if _u32.from_address(address).value != SUPPORTED_MAJOR:
            head = _VersionedHead.from_address(address)
            _unsupported_major(head.major, head.minor)
        major, minor, _, _, flags, data, device_type, device_id, ndim, code, bits, lanes, shape_at, strides_at, \
            byte_offset = _VERSIONED_STRUCT.unpack_from(_VersionedBytes.from_address(address))  # fmt: skip
        version = (major, minor)
    elif name == LEGACY:
        address = _get_pointer(capsule, LEGACY) or _null(name)
        data, device_type, device_id, ndim, code, bits, lanes, shape_at, strides_at, byte_offset = (
            _HEAD_STRUCT.unpack_from(_HeadBytes.from_address(address))
        )
        flags, version = 0, None
    else:
        _bad_name(name)
    if not 0 <= ndim <= MAX_NDIM:
        raise CapsuleError(f"DLPack capsule has ndim={ndim}; expected 0..{MAX_NDIM}")
    if ndim:
        if not shape_at:
            raise CapsuleError(f"DLPack capsule has ndim={ndim} but a NULL shape pointer")
        unpack, raw = _INT64_READERS.get(ndim) or _int64_reader(ndim)
        shape = unpack(raw.from_address(shape_at))
        if min(shape) < 0:
            raise CapsuleError(f"DLPack capsule has a negative dimension in shape {list(shape)}")
        strides = unpack(raw.from_address(strides_at)) if strides_at else None
    else:
        shape, strides = (), None
    if bits == 0 or lanes == 0:
        raise CapsuleError(f"DLPack capsule has dtype bits={bits}, lanes={lanes}; both must be >= 1")
    return _checked_info(code, bits, lanes, device_type, device_id, shape, strides, byte_offset, data, flags,
                         version, producer)  # fmt: skip


def _checked_info(code: int, bits: int, lanes: int, device_type: int, device_id: int, shape: tuple[int, ...],
                  strides: tuple[int, ...] | None, byte_offset: int, data: int, flags: int,
                  version: tuple[int, int] | None, producer: str | None) -> DLPackInfo:  # fmt: skip
    """``read``'s second half: the DLPackInfo for a header's fields, refused when a non-empty tensor
    has no data or reaches outside the address space. One call, no allocation but the info's own."""
    info = _object_new(DLPackInfo)  # __dict__ installed at once: see _object_new above
    _object_setattr(
        info,
        "__dict__",
        {
            "dtype": BY_TRIPLE.get((code, bits, lanes)) or dtype_name(code, bits, lanes),
            "code": code,
            "bits": bits,
            "lanes": lanes,
            "device_type": _DEVICE_NAMES.get(device_type) or device_name(device_type),
            "device_id": device_id,
            "shape": shape,
            "strides": strides,
            "byte_offset": byte_offset,
            "data_ptr": data + byte_offset,
            "readonly": bool(flags & FLAG_READ_ONLY),
            "versioned": version is not None,
            "version": version,
            "producer": producer,
            "flags": flags,
            "device_code": device_type,
        },
    )
    size = prod(shape)
    if size:
        if not data:
            raise CapsuleError(f"DLPack capsule for {info.describe()} has a NULL data pointer")
        if strides is None or strides == c_strides(shape):  # C order, the common case: the span is the size
            end = data + byte_offset + size * ((bits * lanes + 7) // 8)
            if end > 1 << 64 or end - data - byte_offset >= 1 << 63:
                _check_reach(info)  # raises, with the full message
        else:
            _check_reach(info)
    return info


def _unsupported_major(major: int, minor: int) -> NoReturn:
    raise CapsuleError(
        f"DLPack capsule has version {major}.{minor}; dlbridge reads major "
        f"version {SUPPORTED_MAJOR}. Ask the producer for max_version=(1, 0)."
    )


def _bad_name(name: bytes | None) -> NoReturn:
    if name is not None and name in USED:
        raise CapsuleError(
            f"DLPack capsule {name.decode()!r} was already consumed; a capsule can be imported "
            "once. Call __dlpack__() again on the source array for a new one."
        )
    shown = name.decode(errors="replace") if name is not None else None
    raise CapsuleError(f"not a DLPack capsule: its name is {shown!r}, expected 'dltensor' or 'dltensor_versioned'")


@lru_cache(maxsize=256)
def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape`` (cached: shapes repeat)."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def _check_reach(info: DLPackInfo) -> None:
    """Refuse strides/shapes whose elements lie outside the 64-bit address space.

    DLPack carries no buffer size, so strides that stay inside the address space but leave the
    producer's allocation cannot be detected by anyone. These can, and torch aborts the process
    on them ("Storage size calculation overflowed") while NumPy silently wraps them.
    """
    strides, dense = info.strides, c_strides(info.shape)
    if strides is None or strides == dense:  # C order, the common case: the span is the byte size
        strides, low, high = dense, 0, info.size * info.itemsize
    else:
        low = sum(s * (d - 1) for s, d in zip(strides, info.shape) if s < 0) * info.itemsize
        high = sum(s * (d - 1) for s, d in zip(strides, info.shape) if s > 0) * info.itemsize + info.itemsize
    if high - low >= 1 << 63 or info.data_ptr + low < 0 or info.data_ptr + high > 1 << 64:
        raise CapsuleError(
            f"DLPack capsule for {info.describe()} has strides {list(strides)} that, with shape "
            f"{list(info.shape)}, reach bytes {low:+#x}..{high:+#x} from its first element at "
            f"{info.data_ptr:#x}: outside the 64-bit address space. The producer's capsule is malformed."
        )
