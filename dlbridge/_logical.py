"""The logical dtype of the views ``fallback="view"`` hands out, owned by those view objects.

A uint8 view of fp8 memory is recorded under the *object* dlbridge returned (``id(view)``,
checked against a weak reference, since ids are reused), together with a fingerprint of the
memory that object had when it was made (address, shape, strides, wire dtype). Converting that
same object onward restores the logical dtype zero-copy; nothing else ever gets it:

- another object over the same bytes (the caller's own ``x.view(np.uint8)``, a second view with
  another logical dtype, a slice, a copy, a body's result) is a plain unsigned array;
- the record dies with its object (a weakref callback), so an object that later gets the same
  ``id`` or the same address is never relabelled;
- an object whose memory changed in place (torch ``set_``/``resize_``, NumPy ``x.shape = ...``,
  ``x.dtype = ...``) no longer matches its fingerprint: the record is dropped.

A raw capsule never carries a logical dtype (it names no object), and objects that cannot be
weakly referenced are not recorded. With no live view, every check is one empty-dict test.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, NamedTuple

from ._capsule import DLPackInfo

__all__ = ["remember", "recall"]

_Memory = tuple[int, tuple[int, ...], tuple[int, ...], int]


class _Entry(NamedTuple):
    ref: weakref.ref[Any]
    logical: str
    memory: _Memory


_entries: dict[int, _Entry] = {}  # id(view) -> entry; empty when no view lives; never rebound (_convert holds it)
_lock = threading.Lock()


def _memory(info: DLPackInfo) -> _Memory:
    # Producers differ on strides for C-contiguous data (NULL vs explicit) and on strides of
    # size-1 dimensions: normalise both so the same memory gives the same fingerprint. An empty
    # array has no memory to tell apart (torch re-exports it at another address).
    if info.size == 0:
        return (0, info.shape, (), info.bits * info.lanes)
    strides = info.strides
    if strides is None:
        strides, step = (), 1
        for dim in reversed(info.shape):
            strides, step = (step, *strides), step * dim
    strides = tuple(0 if d == 1 else s for s, d in zip(strides, info.shape))
    return (info.data_ptr, info.shape, strides, info.bits * info.lanes)


# The dict and lock are bound as defaults, and ``forget`` binds ``_drop`` so: a view alive at interpreter
# exit dies after this module's globals were cleared to None, and its callback must not look them up.
def _drop(key: int, entry: _Entry, entries: dict[int, _Entry] = _entries, lock: Any = _lock) -> None:
    with lock:
        if entries.get(key) is entry:
            del entries[key]


def remember(view: Any, info: DLPackInfo, logical: str) -> bool:
    """Record that the object ``view`` (whose memory ``info`` describes; its dtype code may be the
    one before the wire relabel, only the width counts) is logically ``logical``."""
    key = id(view)
    holder: list[_Entry] = []

    def forget(_: weakref.ref[Any], drop: Any = _drop) -> None:  # runs while ``view`` dies, before its id is reused
        if holder:
            drop(key, holder[0])

    try:
        ref = weakref.ref(view, forget)
    except TypeError:
        return False
    entry = _Entry(ref, logical, _memory(info))
    holder.append(entry)
    with _lock:
        _entries[key] = entry
    return True


def recall(x: Any, info: DLPackInfo) -> str | None:
    """The logical dtype of ``x`` if it is a live view dlbridge made and still has the memory
    ``info`` describes (``info`` is read from ``x``'s own capsule); None otherwise."""
    if not _entries or info.code != 1:  # views are unsigned; a NumPy ``x.dtype = int8`` is not one
        return None
    key = id(x)
    entry = _entries.get(key)
    if entry is None or entry.ref() is not x:
        return None
    if entry.memory != _memory(info):  # changed in place since it was made: a plain array now
        _drop(key, entry)
        return None
    return entry.logical
