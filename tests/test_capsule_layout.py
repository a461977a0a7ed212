"""The capsule layer's two declarations and one reader: the DLPack struct layout (``_capsule/_layout.py``
against the compiled ``accel.h``), the layout class the reader gives (``_probe._probe_py`` against
``capsules.c``'s ``layout_class``, and against what ``read`` judges), and the admission a stored route
replays a record for (``_handoff.Admission``): every capsule it admits gets the same record from ``decide``.
"""

from __future__ import annotations

import ctypes
from itertools import product
from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge import _accelerator
from dlbridge._adapters import ADAPTERS
from dlbridge._capsule import _layout, _probe
from dlbridge._capsule._read import DLPackInfo, read
from dlbridge._dtypes import BY_NAME
from dlbridge._pipeline._handoff import decide
from tests.ctypes_producer import CtypesArray

ACCEL = _accelerator.accel


def test_the_python_layout_is_the_compiled_one() -> None:
    if ACCEL is None:
        pytest.skip("the compiled module is not in use")
    assert ACCEL.LAYOUT == _layout.LAYOUT
    assert _layout.TENSOR_STRUCT.size == ctypes.sizeof(_layout.DLTensor) == ACCEL.LAYOUT["DLTensor"]


def test_the_layout_check_can_fail() -> None:
    """The comparison above is not vacuous: a wrong offset in the Python declaration shows."""
    if ACCEL is None:
        pytest.skip("the compiled module is not in use")
    wrong = {**_layout.LAYOUT, "DLManagedTensorVersioned.flags": _layout.VERSIONED_FLAGS + 8}
    assert wrong != ACCEL.LAYOUT


def _case(shape: tuple[int, ...], strides: tuple[int, ...] | None, *, bits: int = 32, lanes: int = 1,
          offset: int = 0, data: bool = True, code: int = 2) -> CtypesArray:  # fmt: skip
    count = max(1, int(np.prod([max(d, 0) for d in shape], dtype=object)) if shape else 1)
    nbytes = min(count, 4096) * max(1, (bits * lanes + 7) // 8) + offset
    p = CtypesArray.zeros(nbytes, code=code, bits=bits, shape=shape)
    p.with_(strides=strides, byte_offset=offset, lanes=lanes)
    if not data:
        p.with_(data=0)
    return p


_HUGE = 1 << 40
_B31, _B32, _U8 = 1 << 31, 1 << 32, {"bits": 8, "code": 1}
LAYOUTS: list[tuple[str, dict[str, Any], int]] = [
    ("c-order", {"shape": (2, 3), "strides": None}, _probe.DENSE),
    ("c-strides", {"shape": (2, 3), "strides": (3, 1)}, _probe.DENSE),
    ("0-d", {"shape": (), "strides": None}, _probe.DENSE),
    ("transposed", {"shape": (2, 3), "strides": (1, 2)}, _probe.OTHER),
    ("size-1 stride", {"shape": (1, 3), "strides": (7, 1)}, _probe.OTHER),
    ("empty", {"shape": (0, 3), "strides": None}, _probe.EMPTY),
    ("empty-strided", {"shape": (3, 0), "strides": (0, 1)}, _probe.EMPTY),
    ("empty-odd-strides", {"shape": (3, 0), "strides": (5, 1)}, _probe.OTHER),
    ("zero bits", {"shape": (4,), "strides": None, "bits": 0}, _probe.OTHER),
    ("zero lanes", {"shape": (4,), "strides": None, "lanes": 0}, _probe.OTHER),
    ("negative dim", {"shape": (-1, 4), "strides": None}, _probe.OTHER),
    ("null data", {"shape": (4,), "strides": None, "data": False}, _probe.OTHER),
    ("null data, empty", {"shape": (0,), "strides": None, "data": False}, _probe.EMPTY),
    ("span past 2**62", {"shape": (_HUGE, _HUGE), "strides": None}, _probe.OTHER),
    ("empty, huge", {"shape": (0, _HUGE, _HUGE), "strides": None}, _probe.EMPTY),
    ("empty, huge strides", {"shape": (0, _HUGE, _HUGE), "strides": (_HUGE * _HUGE, _HUGE, 1)}, _probe.OTHER),
    ("offset", {"shape": (4,), "strides": None, "offset": 8}, _probe.DENSE),
    # around 2**31 (under it, both loops multiply without a division) and the 2**62 span limit; uint8
    ("dims 2**31, 2**30", {"shape": (_B31, _B31 >> 1), "strides": (_B31 >> 1, 1), **_U8}, _probe.DENSE),
    ("dims under 2**31", {"shape": (_B31 - 1, _B31 - 1), "strides": None, **_U8}, _probe.DENSE),
    ("span 2**62 - 2**31", {"shape": (_B31 - 1, _B31), "strides": None, **_U8}, _probe.DENSE),
    ("span 2**62", {"shape": (_B31, _B31), "strides": None, **_U8}, _probe.OTHER),
    ("span 2**62, strided", {"shape": (_B31, _B31), "strides": (_B31, 1), **_U8}, _probe.OTHER),
    # past 2**32 per dimension, a product that wraps 64 bits: where unchecked, the span wraps to 2**33 + 1 (dense),
    # the C stride to 2**33 + 1 or to 1 - 2**33 as int64 (these strides: empty)
    ("span wraps", {"shape": (_B32 + 1, _B32 + 1), "strides": None, **_U8}, _probe.OTHER),
    ("stride wraps", {"shape": (0, _B32 + 1, _B32 + 1), "strides": (2 * _B32 + 1, _B32 + 1, 1)}, _probe.OTHER),
    ("stride past 2**63", {"shape": (0, _B32 - 1, _B32 - 1), "strides": (1 - 2 * _B32, _B32 - 1, 1)}, _probe.OTHER),
]


@pytest.mark.parametrize(("case", "spec", "layout"), LAYOUTS, ids=[c[0] for c in LAYOUTS])
@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_layout_class_python_and_compiled(case: str, spec: dict[str, Any], layout: int, versioned: bool) -> None:
    p = _case(**spec)
    capsule = p.__dlpack__(max_version=(1, 3)) if versioned else p.__dlpack__()
    facts = _probe._probe_py(capsule)
    assert facts is not None and facts[_probe.LAYOUT_AT] == layout, case
    if ACCEL is not None:
        assert ACCEL.probe(capsule) == facts, case
    if layout == _probe.DENSE:  # what the route replays, the full reader takes as it is
        info = read(capsule)
        assert info.is_c_contiguous() and info.size and info.data_ptr


@pytest.mark.parametrize(("case", "spec", "layout"), LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_data_address_is_what_read_gives(case: str, spec: dict[str, Any], layout: int) -> None:
    """``data_address`` and ``memory_of`` (the adapters' data pointer and view memory of an exported capsule,
    read with the probe alone where the layout is one the route replays) are ``read(capsule).data_ptr`` (offset
    included) and its shape; a capsule ``read`` refuses is refused with the same error."""
    from dlbridge._capsule._read import data_address, memory_of

    p = _case(**spec)
    try:
        info = read(p.__dlpack__())
        expected: Any = (info.data_ptr, info.shape)
    except dlbridge.CapsuleError as err:
        expected = type(err)
    if isinstance(expected, tuple):
        at = p.base + spec.get("offset", 0) if spec.get("data", True) else 0
        assert data_address(p.__dlpack__()) == expected[0] == at
        assert memory_of(p.__dlpack__()) == expected == (at, tuple(spec["shape"]))
    else:
        for reader in (data_address, memory_of):
            with pytest.raises(expected):
                reader(p.__dlpack__())


# --- the admission: what decide() says a stored route may replay ------------------------------------


def _info(dtype: str, *, device: tuple[int, int] = (1, 0), versioned: bool, readonly: bool = False,
          offset: int = 0, data: int = 1 << 12) -> DLPackInfo:  # fmt: skip
    d = BY_NAME[dtype]
    return DLPackInfo(dtype, d.code, d.bits, d.lanes, "cpu" if device[0] == 1 else "cuda", device[1], (4, 8), None,
                      offset, data + offset, readonly, versioned, (1, 3) if versioned else None, None,
                      device_code=device[0])  # fmt: skip


def _same_action(a: Any, b: Any) -> bool:
    """Two records that make the same conversion (the sharing claim aside: an unaligned capsule that a
    consumer copies says so, with the same steps taken)."""
    return (a.error, a.plan, a.keep, a.move, a.dense, a.drop_readonly, a.c_order, a.carrier, a.writable,
            a.copy, a.fp4) == (b.error, b.plan, b.keep, b.move, b.dense, b.drop_readonly, b.c_order, b.carrier,
                               b.writable, b.copy, b.fp4)  # fmt: skip


@pytest.mark.parametrize("consumer", sorted(ADAPTERS))
def test_every_capsule_an_admission_admits_gets_the_same_record(consumer: str) -> None:
    """The admission is sound: for each consumer row and dtype, every capsule whose facts it admits
    (kind, READ_ONLY, byte_offset, alignment) gets a record from ``decide`` that makes the same
    conversion; where a fact is not admitted, the record differs or the import does (alignment)."""
    target = ADAPTERS[consumer]
    caps = target.caps if target.loaded() else None
    if caps is None:
        from dlbridge._capabilities import capabilities

        try:
            caps = capabilities(consumer, target.installed_version())
        except dlbridge.MissingFrameworkError:
            pytest.skip(f"{consumer} is not installed")
    checked = 0
    for dtype, fallback in product(("float32", "bfloat16", "float8_e4m3fn", "bool", "uint8"), ("raise", "view")):
        base = _info(dtype, versioned=caps.versioned_capsules)
        record = decide(base, target, caps, fallback, None, None)
        admits = record.admits
        if admits is None:
            continue
        checked += 1
        for versioned, readonly, offset, data in product(
            (False, True), (False, True), (0, 4, 64), (1 << 12, 1 << 12 | 8)
        ):
            kind_ok = admits.kinds & (2 if versioned else 1)
            admitted = (kind_ok and (not readonly or admits.readonly_ok) and (not offset or admits.offset_ok)
                        and (data + offset) % admits.align == 0)  # fmt: skip
            if readonly and not versioned:
                continue  # a legacy capsule cannot say read-only
            other = decide(_info(dtype, versioned=versioned, readonly=readonly, offset=offset, data=data), target,
                           caps, fallback, None, None)  # fmt: skip
            if admitted:
                assert _same_action(other, record), (consumer, dtype, versioned, readonly, offset, data, other)
    if not checked:
        pytest.skip(f"no record {consumer} replays among the dtypes checked")


def test_the_admission_check_can_fail() -> None:
    """A record whose admission admitted too much would show: a READ_ONLY capsule into torch (no
    read-only tensors) gets another record than a writable one."""
    from dlbridge._capabilities import capabilities

    torch_caps = capabilities("torch", "2.13.0")
    target = ADAPTERS["torch"]
    writable = decide(_info("float32", versioned=True), target, torch_caps, "raise", None, None)
    readonly = decide(_info("float32", versioned=True, readonly=True), target, torch_caps, "raise", None, None)
    assert writable.admits is not None and not writable.admits.readonly_ok
    assert not _same_action(writable, readonly)


def test_the_python_reader_reads_through_its_address_space_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python reader reads foreign memory through one buffer over the address space (``_address_space``):
    the fields it gives are the compiled reader's; where that buffer does not reach a capsule (as an empty one
    stands in where none can be made), the capsule is left to ``read``, which says so rather than misreading it."""
    from dlbridge._capsule import _read

    p = _case(shape=(2, 3), strides=None)
    facts = _probe._probe_py(p.__dlpack__(max_version=(1, 3)))
    assert facts is not None and facts[_probe.SHAPE_AT] == (2, 3) and facts[_probe.LAYOUT_AT] == _probe.DENSE
    if ACCEL is not None:
        assert ACCEL.probe(p.__dlpack__(max_version=(1, 3))) == facts
    monkeypatch.setattr(_probe, "_MEMORY", memoryview(b""))
    monkeypatch.setattr(_read, "probe", _probe._probe_py)
    for capsule in (p.__dlpack__(max_version=(1, 3)), p.__dlpack__()):
        assert _probe._probe_py(capsule) is None
        with pytest.raises(dlbridge.CapsuleError, match="outside what the Python capsule reader can address"):
            read(capsule)


@pytest.mark.parametrize("reach", ["buffer", "ctypes"])
@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_the_capsule_writers_write_through_the_buffer_or_ctypes(monkeypatch: pytest.MonkeyPatch, reach: str,
                                                                versioned: bool) -> None:  # fmt: skip
    """``_edit`` writes a capsule's dtype and device with one ``pack_into`` on the address-space buffer, and
    through ctypes where that buffer does not reach (an empty one stands in); either way the capsule then
    reads as written, the other fields untouched, and a versioned capsule of another major is refused."""
    from dlbridge._capsule import _edit
    from dlbridge._capsule._read import tensor_address

    if reach == "ctypes":
        monkeypatch.setattr(_edit, "_MEMORY", memoryview(bytearray()))  # as _address_space's stand-in
        monkeypatch.setattr(_probe, "_MEMORY", memoryview(bytearray()))
    p = _case(shape=(2, 3), strides=None)  # float32 (code 2, 32 bits)
    capsule = p.__dlpack__(max_version=(1, 3)) if versioned else p.__dlpack__()
    head = _layout.DLTensor.from_address(tensor_address(capsule))  # where the writes must land
    assert head.data == p.base and (head.code, head.bits, head.lanes) == (2, 32, 1)
    _edit.relabel_triple(capsule, 1 | 32 << 8 | 1 << 16)  # uint32
    _edit.relabel_device(capsule, (3, 0))  # CUDA host
    assert (head.code, head.bits, head.lanes, head.device_type, head.device_id) == (1, 32, 1, 3, 0)
    _edit.relabel(capsule, BY_NAME["int32"])
    _edit.relabel_device(capsule, (1, 0))
    assert (head.code, head.bits, head.lanes, head.device_type, head.device_id) == (0, 32, 1, 1, 0)
    assert head.data == p.base and head.ndim == 2 and head.strides is None and head.byte_offset == 0
    if reach == "buffer":  # (the Python reader reads through the same buffer: see the test above)
        info = read(capsule)
        assert (info.dtype, info.device_type, info.shape, info.data_ptr) == ("int32", "cpu", (2, 3), p.base)
    if versioned:
        other = p.with_(version=(2, 0)).__dlpack__(max_version=(1, 3))
        assert _probe.tensor_at(other) is None
        with pytest.raises(dlbridge.CapsuleError, match="major"):
            tensor_address(other)
