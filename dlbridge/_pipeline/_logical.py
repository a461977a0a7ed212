"""The logical dtype of the views ``fallback="view"`` hands out, owned by those view objects.

A uint8 view of fp8 memory is recorded under the *object* dlbridge returned (``id(view)``,
checked against a weak reference, since ids are reused), together with a fingerprint of the
memory that object had when it was made (address, shape, strides, wire dtype). Converting that
same object onward restores the logical dtype zero-copy; nothing else ever gets it:

- another object over the same bytes (the caller's own ``x.view(np.uint8)``, a second view with
  another logical dtype, a slice, a copy, a body's result) is a plain unsigned array;
- the record dies with its object (its weak reference is dead, so it matches no object, and it is
  swept at the next view conversion): an object that later gets the same ``id`` or the same
  address is never relabelled;
- an object whose memory changed in place (torch ``set_``/``resize_``, NumPy ``x.shape = ...``,
  ``x.dtype = ...``) no longer matches its fingerprint: the record is dropped.

A raw capsule never carries a logical dtype (it names no object), and objects that cannot be
weakly referenced are not recorded. With no view recorded, every check is one empty-dict test.

The registry's layout (C code may add records the same way)::

    _entries: dict[int, _View]   # id(view) -> a weak reference to the view, with its record
    _View(view, _dead.append)    # a weakref.ref subclass; set .key = id(view),
                                 # .logical = "float8_e4m3fn" (a dtype name), .memory = _memory(info):
                                 # (data address, shape, strides with size-1 dims as 0, bits * lanes)
    _dead: list[_View]           # references whose view died, not yet swept

Nothing of dlbridge's runs while a view dies: its reference's callback is ``_dead.append``, a
builtin (no Python bytecode, so no signal handler can raise inside it, where CPython would print
the exception and drop it: a lost KeyboardInterrupt; it is also safe at interpreter exit). The dead
references are swept at the next ``remember`` or ``recall`` with ``_remove_dead_weakref`` (CPython
``Modules/_weakref.c``, the primitive ``WeakValueDictionary`` uses since bpo-28427), which removes
a key only while its value is a dead reference, in one step: a newer record under a reused id is
never removed. There is no lock: every change to the registry is one operation on a dict or a list,
atomic under the GIL and, in free-threaded CPython, under the dict's or list's own lock; an exception
raised between two of them (a signal handler, a trace function) leaves a consistent registry (at
worst a dead record, which matches nothing and is swept later).
"""

from __future__ import annotations

import weakref
from _weakref import _remove_dead_weakref  # type: ignore[attr-defined]  # (CPython, not in typeshed)
from collections.abc import Callable
from typing import Any

from .._accelerator import accel
from .._capsule._read import DLPackInfo

__all__ = ["remember", "remembering", "holds", "recall", "live"]

_Memory = tuple[int, tuple[int, ...], tuple[int, ...], int]


class _View(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a view dlbridge handed out, carrying its record."""

    __slots__ = ("key", "logical", "memory")
    key: int
    logical: str
    memory: _Memory | None


_entries: dict[int, _View] = {}  # id(view) -> its record; never rebound (_convert and the route hold it)
_dead: list[_View] = []  # the references whose view died (appended by the builtin callback)
_forget = _dead.append  # the callback: a builtin bound method, no bytecode runs while a view dies
_scan_at = [64]  # a full scan for dead records once the registry reaches this size (see _sweep)


def _memory(info: DLPackInfo) -> _Memory:
    return _fingerprint(info.data_ptr, info.shape, info.strides, info.bits * info.lanes)


def _fingerprint(data_ptr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None, bits: int) -> _Memory:
    # Producers differ on strides for C-contiguous data (NULL vs explicit) and on strides of
    # size-1 dimensions: normalise both so the same memory gives the same fingerprint. An empty
    # array has no memory to tell apart (torch re-exports it at another address).
    if 0 in shape:
        return (0, shape, (), bits)
    if strides is None:
        strides, step = (), 1
        for dim in reversed(shape):
            strides, step = (step, *strides), step * dim
    strides = tuple(0 if d == 1 else s for s, d in zip(strides, shape))
    return (data_ptr, shape, strides, bits)


def _sweep(full: bool = False) -> None:
    """Drop the records of views that died. Each step is one atomic operation; one interrupted
    between the pop and the removal leaves a dead record behind, which the full scan drops (``full``,
    or once the registry has doubled since the last one: dead records never outnumber live ones for long)."""
    while _dead:
        try:
            ref = _dead.pop()
        except IndexError:  # another thread took the last one
            break
        _remove_dead_weakref(_entries, ref.key)
    if full or len(_entries) >= _scan_at[0]:
        for key, ref in list(_entries.items()):
            if ref() is None:
                _remove_dead_weakref(_entries, key)
        _scan_at[0] = max(64, 2 * len(_entries))


# What the compiled twin of ``remembering`` reads (dlbridge/_csrc/views.c), in this order.
_REGISTRY = (_entries, _View, _forget, _dead, _scan_at, _sweep, _remove_dead_weakref)


def remember(view: Any, info: DLPackInfo, logical: str) -> bool:
    """Record that the object ``view`` (whose memory ``info`` describes; its dtype code may be the
    one before the wire relabel, only the width counts) is logically ``logical``."""
    return _record(view, _memory(info), logical)


def _record(view: Any, memory: _Memory, logical: str) -> bool:
    if _dead or len(_entries) >= _scan_at[0]:
        _sweep()
    try:
        ref = _View(view, _forget)
    except TypeError:
        return False
    ref.key, ref.logical, ref.memory = id(view), logical, memory
    _entries[ref.key] = ref  # the record is complete before anyone can find it
    return True


def remembering(memory_of: Callable[[Any], tuple[int, tuple[int, ...]]], logical: str, bits: int,
                address: tuple[tuple[str, bool], ...] | None = None) -> Callable[[Any], Any]:  # fmt: skip
    """The fast route's last step for a view it replays (``Replay.finish``): record ``logical`` for the
    array the consumer imported, whose memory is dense C order (the route replays only such capsules)
    and is found by ``memory_of`` (the target adapter's ``view_memory``: its address and shape). The
    same record the pipeline makes (``remember``), without reading a capsule. Where the compiled module
    is built and the adapter gives its address as an attribute path (``address``:
    ``FastRoute.fast_view_address``), its C twin ``Remember`` (``dlbridge/_csrc/views.c``) makes the same
    record with no Python frame."""
    if accel is not None and address is not None:
        return accel.Remember(address, logical, bits, _REGISTRY)  # type: ignore[no-any-return]

    def finish(view: Any) -> Any:
        data_ptr, shape = memory_of(view)
        _record(view, _fingerprint(data_ptr, shape, None, bits), logical)
        return view

    return finish


def holds(x: Any) -> bool:
    """Whether ``x`` itself is a live view with a record: the question to ask before reading ``x``'s capsule
    for ``recall``. A record under ``id(x)`` whose view died (not yet swept: ids are reused) is not ``x``'s."""
    ref = _entries.get(id(x))
    return ref is not None and ref() is x


def recall(x: Any, info: DLPackInfo) -> str | None:
    """The logical dtype of ``x`` if it is a live view dlbridge made and still has the memory
    ``info`` describes (``info`` is read from ``x``'s own capsule); None otherwise."""
    if _dead:
        _sweep()
    if not _entries or info.code != 1:  # views are unsigned; a NumPy ``x.dtype = int8`` is not one
        return None
    key = id(x)
    ref = _entries.get(key)
    if ref is None or ref() is not x:
        return None
    memory = ref.memory
    if memory is None or memory != _memory(info):  # changed in place since it was made: a plain array now
        ref.memory = None  # void first: matches nothing from here on, whatever happens next
        _entries.pop(key, None)  # x is alive, so ``key`` is x's own record: nothing newer to remove
        return None
    return ref.logical


def live() -> int:
    """How many views have a record (every dead one swept first)."""
    _sweep(full=True)
    return len(_entries)
