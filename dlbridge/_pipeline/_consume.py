"""The consumer side of a handoff: the capsule's edits the record asks for, the import, and what
finishes the result (made writable, copied, relabelled, remembered as a view, upcast)."""

from __future__ import annotations

from typing import Any

from .._adapters import Adapter
from .._capabilities import Capabilities
from .._capsule._edit import restore, rewrite, set_c_strides
from .._capsule._read import DLPackInfo, c_strides
from .._dtypes import BY_NAME, decode_table
from .._errors import CapsuleError, LayoutError
from . import _logical
from ._export import inspect
from ._handoff import Handoff
from ._plan import Plan
from ._sizes import check_copy_size, copied, size_text

__all__ = ["import_capsule", "ready", "imported", "finish"]


def import_capsule(capsule: Any, info: DLPackInfo, target: Adapter, caps: Capabilities, record: Handoff,
            copy: bool | None, device_to: tuple[int, int] | None = None) -> Any:  # fmt: skip
    saved = ready(capsule, info, record, device_to)
    try:
        result = target.import_capsule(capsule, info.device, caps)
    except BaseException as err:
        if saved is not None:
            restore(capsule, saved)  # whatever stopped the import, a capsule nobody took is left as it came
        if isinstance(err, MemoryError) or not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit ...
            raise
        raise CapsuleError(
            f"to_{target.name}(): {caps.consumer} {caps.version} refused {info.describe()} "
            f"as {record.plan.wire if record.plan else '?'}: {type(err).__name__}: {err}"
        ) from err
    return imported(result, info, record, target, caps, copy)


def ready(capsule: Any, info: DLPackInfo, record: Handoff, device_to: tuple[int, int] | None = None) -> Any:
    """The capsule's edits the record asks for (after every check that can refuse: the record's);
    returns what ``restore`` undoes if the consumer refuses too, so a capsule nobody consumed (a
    caller's raw capsule) is left exactly as it came."""
    plan = record.plan
    assert plan is not None
    wire = BY_NAME[plan.wire] if plan.wire != info.dtype else None
    writable = record.drop_readonly
    saved = rewrite(capsule, wire, device_to, writable) if wire is not None or device_to or writable else None
    if record.c_order:
        set_c_strides(capsule, info.shape)  # C order up to size-1 dimensions, said literally
    return saved


def imported(result: Any, info: DLPackInfo, record: Handoff, target: Adapter, caps: Capabilities,
              copy: bool | None) -> Any:  # fmt: skip
    """What the consumer imported, made writable, checked for a copy, and finished (``record.plan``)."""
    plan = record.plan
    assert plan is not None
    if record.writable:
        # NumPy < 2.2 makes every import read-only; NumPy 2.2+ only READ_ONLY capsules (and legacy
        # ones, which cannot say): a versioned capsule, or a known mutable producer, comes back writable.
        result = target.writable(result)
    # The consumer may copy on its own (JAX does for misaligned CPU buffers).
    if copy is False and info.size and target.data_ptr(result) != info.data_ptr:
        raise LayoutError(
            f"to_{target.name}(): {caps.consumer} copied {info.describe()} on import (address "
            f"{info.data_ptr:#x} is not aligned the way it needs); copy=False forbids that. Pass copy=None."
        )
    if plan.mode == "native":
        return copied(result, target, info) if record.copy else result
    if record.copy and plan.mode != "upcast":  # copy first: a view remembers the copy's memory
        return finish(copied(result, target, info), plan, target, None)
    if plan.mode == "view" and (info.strides not in (None, c_strides(info.shape)) or
                                (info.size and target.data_ptr(result) != info.data_ptr)):  # fmt: skip
        return finish(result, plan, target, None)  # not plainly the capsule's memory (JAX copied it)
    return finish(result, plan, target, info)


def finish(result: Any, plan: Plan, target: Adapter, info: DLPackInfo | None) -> Any:
    """Turn what the target imported (``plan.wire``) into what the caller gets (``plan.logical``).

    ``info`` describes ``result``'s memory (None: inspect it). An upcast returns a fresh copy.
    A view's logical dtype is recorded for ``result`` itself, the object the caller is handed.
    """
    if plan.mode == "reinterpret":
        return target.view(result, plan.logical)
    if plan.mode == "view":
        _logical.remember(result, info if info is not None else inspect(result), plan.logical)
    elif plan.mode == "upcast":
        return _upcast(result, plan, target, info if info is not None else inspect(result))
    return result


def _upcast(result: Any, plan: Plan, target: Adapter, info: DLPackInfo) -> Any:
    """The float32 copy of ``result`` (``plan.wire`` bits of ``plan.logical``), refused from its
    size before anything is allocated: a broadcast of a few bytes can describe terabytes."""
    what = 'the float32 copy fallback="upcast" makes'
    check_copy_size(info, target.name, what, info.size * 4)
    try:
        if plan.logical == "bfloat16":
            return target.bf16_bits_to_f32(result)
        return target.lookup_f32(decode_table(plan.logical), result)  # type: ignore[arg-type]
    except (MemoryError, RuntimeError) as err:  # torch reports a failed allocation as RuntimeError
        if isinstance(err, RuntimeError) and "alloc" not in str(err) and "out of memory" not in str(err):
            raise
        raise LayoutError(
            f"to_{target.name}(): {what} of {info.describe()} ({size_text(info.size * 4)}) did not fit in "
            f'memory ({type(err).__name__}: {err}). Pass a smaller array, or fallback="view" for a zero-copy '
            f"{plan.wire} view"
        ) from err


# --- layouts ------------------------------------------------------------------------------------
