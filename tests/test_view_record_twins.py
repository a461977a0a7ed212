"""The view record the compiled route makes (``Remember``, dlbridge/_csrc/views.c) is the record its Python
twin makes (``_logical.remembering``'s closure): the same key, logical dtype and memory fingerprint for
every shape, nothing recorded for an object that cannot be weakly referenced, errors propagated, and the
dead records swept the same way. Real torch tensors (the route's view records for torch, CuPy and JAX
read the address the same way: ``FastRoute.fast_view_address``)."""

from __future__ import annotations

import gc

import pytest

from dlbridge._accelerator import accel
from dlbridge._adapters import adapter_named
from dlbridge._pipeline import _logical
from tests.conftest import need

torch = need("torch")
pytestmark = pytest.mark.skipif(accel is None, reason="the compiled module is not built")

SHAPES = [(4, 4), (1, 5), (5, 1), (0, 3), (), (2, 1, 3), (7,)]


def _finishes() -> tuple[object, object]:
    target = adapter_named("torch")
    python = _logical.remembering(target.view_memory, "float8_e4m3fn", 8)
    compiled = _logical.remembering(target.view_memory, "float8_e4m3fn", 8, target.fast_view_address())
    assert type(compiled) is accel.Remember and type(python) is not accel.Remember
    return python, compiled


def _record_of(view: object) -> tuple[int, str, object]:
    ref = _logical._entries[id(view)]
    assert ref() is view
    return ref.key, ref.logical, ref.memory


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_compiled_record_is_the_python_record(shape) -> None:
    python, compiled = _finishes()
    view = torch.zeros(shape, dtype=torch.uint8, device="cpu")
    assert python(view) is view
    made_by_python = _record_of(view)
    del _logical._entries[id(view)]
    assert compiled(view) is view
    assert _record_of(view) == made_by_python
    assert made_by_python[0] == id(view) and made_by_python[1] == "float8_e4m3fn"
    del _logical._entries[id(view)]


def test_the_fingerprint_is_dense_c_order_in_elements() -> None:
    # (the route replays dense C-order capsules only: the memory the capsule reader describes for them)
    python, compiled = _finishes()
    view = torch.zeros((3, 4), dtype=torch.uint8, device="cpu")
    python(view)
    expected = _record_of(view)
    compiled(view)
    assert _record_of(view) == expected
    assert expected[2] == (view.data_ptr(), (3, 4), (4, 1), 8)
    del _logical._entries[id(view)]


class _NoWeakref:
    __slots__ = ("shape",)

    def __init__(self) -> None:
        self.shape = (2,)

    def data_ptr(self) -> int:
        return 0x1000


class _Failing:
    shape = (2,)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def data_ptr(self) -> int:
        raise self.error


def test_an_object_without_weak_references_is_returned_unrecorded_by_both() -> None:
    before = dict(_logical._entries)
    for finish in _finishes():
        obj = _NoWeakref()
        assert finish(obj) is obj
        assert _logical._entries == before


@pytest.mark.parametrize("error", [ValueError("no address"), KeyboardInterrupt()], ids=type)
def test_an_error_reading_the_view_propagates_from_both(error) -> None:
    for finish in _finishes():
        with pytest.raises(type(error)):
            finish(_Failing(error))


def test_dead_records_are_swept_by_the_compiled_record_too() -> None:
    _, compiled = _finishes()
    _logical._sweep(full=True)
    dead_view = torch.zeros(3, dtype=torch.uint8, device="cpu")
    compiled(dead_view)
    dead_key = id(dead_view)
    del dead_view
    gc.collect()
    assert _logical._dead, "the view's weak reference callback did not run"
    alive = torch.zeros(2, dtype=torch.uint8, device="cpu")
    compiled(alive)  # the next record sweeps the dead one first
    assert not _logical._dead
    assert dead_key not in _logical._entries or _logical._entries[dead_key]() is not None
    assert _record_of(alive)[0] == id(alive)
    del _logical._entries[id(alive)]
