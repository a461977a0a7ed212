"""Copies too large for this machine: refused from their size, before anything is allocated.

A broadcast of a few bytes (stride 0) can describe terabytes; its dense copy would fail to
allocate, or worse, succeed under overcommit and swap the machine to a halt.
"""

from __future__ import annotations

import os
from typing import Any

from .._adapters import Adapter
from .._capsule._read import DLPackInfo
from .._errors import LayoutError

__all__ = ["check_copy_size", "copied", "size_text"]


def check_copy_size(info: DLPackInfo, target: str, what: str, nbytes: int | None = None) -> None:
    """Raise LayoutError when ``what`` (a CPU copy of ``info``, ``nbytes`` large: by default
    ``info.nbytes``) exceeds this machine's memory."""
    if nbytes is None:
        nbytes = info.nbytes
    if not info.on_host or nbytes < 1 << 30:
        return
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX: only a MemoryError will tell
        return
    if nbytes > memory:
        raise LayoutError(
            f"to_{target}(): {what} of {info.describe()} (strides {list(info.strides or ())}) would take "
            f"{size_text(nbytes)}, more than this machine's {size_text(memory)} of memory. Pass a smaller "
            "array (a broadcast counts at its full size)."
        )


def copied(result: Any, target: Adapter, info: DLPackInfo) -> Any:
    """``target.copy(result)`` for copy=True, with a too-large copy reported as a dlbridge error."""
    check_copy_size(info, target.name, "the copy copy=True asks for")
    try:
        return target.copy(result)
    except (MemoryError, RuntimeError) as err:  # torch reports a failed CPU allocation as RuntimeError
        if isinstance(err, RuntimeError) and "alloc" not in str(err):
            raise
        raise LayoutError(
            f"to_{target.name}(): the copy copy=True asks for of {info.describe()} ({size_text(info.nbytes)}) "
            f"did not fit in memory ({type(err).__name__}: {err}). Pass a smaller array."
        ) from err


def size_text(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} bytes"
    amount, units = nbytes / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while amount >= 1024 and len(units) > 1:
        amount, units = amount / 1024, units[1:]
    return f"{amount:.1f} {units[0]}"
