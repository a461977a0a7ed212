"""Reading DLPack capsules with ctypes, without consuming them (``_edit`` writes them).

Capsules are told apart by their *names* (``dltensor``, ``dltensor_versioned``, ``used_...``),
never by guessing from struct bytes. Inspecting never renames a capsule, so ownership stays
with whoever holds it: if nobody consumes it, the producer's capsule destructor runs the
deleter exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import NoReturn

from .._dtypes import BY_TRIPLE, dtype_name
from .._errors import CapsuleError
from ._abi import (
    _DEVICE_NAMES,
    DEVICE_ALIASES,
    DEVICE_CODES,
    FLAG_IS_COPIED,
    FLAG_PADDED,
    FLAG_READ_ONLY,
    GPU_CODES,
    LEGACY,
    MAX_NDIM,
    PADDED_CONTEXT,
    SUPPORTED_MAJOR,
    USED,
    VERSIONED,
    CapsuleType,
    _get_context,
    _get_name,
    _get_pointer,
    alias_device,
    device_name,
)
from ._layout import VERSIONED_TENSOR, DLTensor, VersionedHeader
from ._probe import DATA_AT, LAYOUT_AT, OFFSET_AT, OTHER, SHAPE_AT, probe, tensor_at

__all__ = ["DLPackInfo", "CapsuleType", "read", "data_address", "memory_of", "c_strides", "GPU_CODES", "DEVICE_ALIASES",
           "DEVICE_CODES", "alias_device", "device_name"]  # fmt: skip


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
    # False: the capsule's deleter is NULL (DLPack allows it: the producer keeps the memory alive
    # by other means), which some consumers do not survive (capability row "aborts_on_null_deleter")
    has_deleter: bool = True

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


def tensor_address(capsule: object) -> int:
    """Address of an unconsumed capsule's DLTensor (for the writers in ``_edit``); raises CapsuleError."""
    address = tensor_at(capsule)
    if address is not None:
        return address
    if type(capsule) is not CapsuleType:
        raise CapsuleError(f"expected a DLPack capsule, got {type(capsule).__name__}")
    name = _get_name(capsule)
    if name == LEGACY:
        return _get_pointer(capsule, LEGACY) or _null(name)
    if name == VERSIONED:
        address = _get_pointer(capsule, VERSIONED) or _null(name)
        head = VersionedHeader.from_address(address)
        if head.major != SUPPORTED_MAJOR:
            _unsupported_major(head.major, head.minor)
        return address + VERSIONED_TENSOR
    _bad_name(name)


def data_address(capsule: object) -> int:
    """The address of an unconsumed capsule's first element (``read(capsule).data_ptr``), read with the
    probe alone where its layout is one the route replays (no DLPackInfo made); otherwise ``read`` gives it,
    or says what is wrong with the capsule."""
    return memory_of(capsule)[0]


def memory_of(capsule: object) -> tuple[int, tuple[int, ...]]:
    """(``data_address``, shape) of an unconsumed capsule, from one read."""
    facts = probe(capsule)
    if facts is not None and facts[LAYOUT_AT] != OTHER:
        return facts[DATA_AT] + facts[OFFSET_AT], facts[SHAPE_AT]
    info = read(capsule)
    return info.data_ptr, info.shape


def _null(name: bytes) -> NoReturn:
    raise CapsuleError(f"DLPack capsule {name.decode()!r} holds a NULL pointer")


# read() builds DLPackInfo without the frozen dataclass __init__, which pays one object.__setattr__
# per field (16): installing __dict__ at once gives the same object (equal, hashable, frozen)
# several times faster. tests/test_inspect.py checks it against one built by the dataclass.
_object_new, _object_setattr = object.__new__, object.__setattr__


def read(capsule: object, producer: str | None = None) -> DLPackInfo:
    """Read a capsule's tensor description. Never consumes it; raises CapsuleError when malformed.

    The fields come from the one capsule reader (``_probe.probe``, compiled where built); a capsule it
    does not describe is diagnosed here, with a message saying what is wrong with it.
    """
    facts = probe(capsule)
    if facts is None:
        _diagnose(capsule)
    versioned, major, minor, flags, data, device_type, device_id, ndim, code, bits, lanes, shape, strides, \
        byte_offset, _, has_deleter = facts  # fmt: skip
    if ndim and min(shape) < 0:
        raise CapsuleError(f"DLPack capsule has a negative dimension in shape {list(shape)}")
    if bits == 0 or lanes == 0:
        raise CapsuleError(f"DLPack capsule has dtype bits={bits}, lanes={lanes}; both must be >= 1")
    if bits < 8 and not versioned and _get_context(capsule) == PADDED_CONTEXT:  # see _edit.mark_padded
        flags |= FLAG_PADDED
    return _checked_info(code, bits, lanes, device_type, device_id, shape, strides, byte_offset, data, flags,
                         (major, minor) if versioned else None, producer, has_deleter)  # fmt: skip


def _diagnose(capsule: object) -> NoReturn:
    """Why the capsule reader does not describe ``capsule``: raises the CapsuleError that says so."""
    if type(capsule) is not CapsuleType:
        raise CapsuleError(f"expected a DLPack capsule, got {type(capsule).__name__}")
    name = _get_name(capsule)
    if name != VERSIONED and name != LEGACY:
        _bad_name(name)
    address = _get_pointer(capsule, name) or _null(name)
    if name == VERSIONED:
        head = VersionedHeader.from_address(address)
        if head.major != SUPPORTED_MAJOR:
            _unsupported_major(head.major, head.minor)
        address += VERSIONED_TENSOR
    tensor = DLTensor.from_address(address)
    if not 0 <= tensor.ndim <= MAX_NDIM:
        raise CapsuleError(f"DLPack capsule has ndim={tensor.ndim}; expected 0..{MAX_NDIM}")
    if tensor.ndim and not tensor.shape:
        raise CapsuleError(f"DLPack capsule has ndim={tensor.ndim} but a NULL shape pointer")
    raise CapsuleError(  # _probe._address_space: the Python reader's buffer does not reach the capsule's memory
        f"DLPack capsule's tensor lies at {address:#x}, outside what the Python capsule reader can address "
        f"(it reads a 64-bit address space); use dlbridge's compiled accelerator on this platform"
    )


def _checked_info(code: int, bits: int, lanes: int, device_type: int, device_id: int, shape: tuple[int, ...],
                  strides: tuple[int, ...] | None, byte_offset: int, data: int, flags: int,
                  version: tuple[int, int] | None, producer: str | None, has_deleter: bool = True) -> DLPackInfo:  # fmt: skip
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
            "has_deleter": has_deleter,
        },
    )
    if code == 2 and bits == 8:  # kDLFloat, 8 bits: refused for every consumer, the fast routes' included
        _ambiguous_float8(info)
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


def _ambiguous_float8(info: DLPackInfo) -> NoReturn:
    # DLPack 1.1 (dlpack.h DLDataTypeCode) gives each 8-bit float format a code of its own: kDLFloat
    # with 8 bits names none of them, and consumers refuse or misread it. A producer that labels a dtype
    # by its kind alone makes it (dlbridge's rows: "exports_as_float"); that producer's adapter relabels
    # its own exports, so only a bare capsule (or an unknown producer's) gets here.
    raise CapsuleError(
        f"DLPack capsule for {info.describe()} says kDLFloat with 8 bits, a dtype DLPack does not define: each "
        "8-bit float format has a code of its own (kDLFloat8_e4m3fn = 10, kDLFloat8_e5m2 = 12, ...; DLPack 1.1), "
        "so which one it holds cannot be told. Pass the array itself rather than its capsule (dlbridge relabels "
        "the exports of producers it knows), or hand over its bits: x.view(uint8)"
    )


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
