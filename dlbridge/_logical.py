"""Remembering the logical dtype of views made by ``fallback="view"``.

A uint16 view of bf16 memory is recorded under its exact memory description (device, data
address, shape, strides, width); converting that array onward finds the entry from the
capsule alone and restores bf16 zero-copy. The entry dies with the view object (a weakref
finalizer), so reused memory is never mislabelled. Objects that cannot be weakly referenced
are not recorded.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from ._capsule import DLPackInfo

__all__ = ["remember", "recall"]

_Key = tuple[int, int, int, tuple[int, ...], tuple[int, ...], int]
_entries: dict[_Key, list[Any]] = {}  # key -> [logical dtype, live views]
_lock = threading.Lock()


def _key(info: DLPackInfo) -> _Key:
    # Producers differ on strides for C-contiguous data (NULL vs explicit) and on strides of
    # size-1 dimensions: normalise both so the same memory gives the same key.
    strides = info.strides
    if strides is None:
        strides, step = (), 1
        for dim in reversed(info.shape):
            strides, step = (step, *strides), step * dim
    strides = tuple(0 if d == 1 else s for s, d in zip(strides, info.shape))
    return (info.device_code, info.device_id, info.data_ptr, info.shape, strides, info.bits * info.lanes)


def _forget(key: _Key) -> None:
    with _lock:
        entry = _entries.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _entries[key]


def remember(view: Any, info: DLPackInfo, logical: str) -> bool:
    """Record that ``view`` (described by ``info``) is logically ``logical``."""
    key = _key(info)
    try:
        weakref.finalize(view, _forget, key)
    except TypeError:
        return False
    with _lock:
        entry = _entries.get(key)
        if entry is None or entry[0] != logical:
            _entries[key] = [logical, 1]
        else:
            entry[1] += 1
    return True


def recall(info: DLPackInfo) -> str | None:
    """The logical dtype recorded for exactly this memory, if any."""
    if not _entries:
        return None
    entry = _entries.get(_key(info))
    return entry[0] if entry is not None else None
