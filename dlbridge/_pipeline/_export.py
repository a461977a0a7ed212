"""The producer side of a conversion: asking a framework (or any DLPack producer) for its capsule.

``export`` is the one place a producer is asked for a capsule, with what a failure means: a
read-only array (``ReadOnlyError``, or the producer's copy when ``copy=True``), a state the
adapter resolves or names (``Adapter.export_failed``), or the producer's own error, named.
``inspect`` describes an array through the same export, without consuming anything.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from .._adapters import Adapter, adapter_for, export_capsule, producer_error, producer_name
from .._capsule._read import GPU_CODES, CapsuleType, DLPackInfo, read
from .._errors import CapsuleError, DLBridgeError, NotAnArrayError, ReadOnlyError
from ._devices import check_device, device_of
from ._handoff import readonly_refusal

__all__ = ["MAX_VERSION", "export", "inspect"]

MAX_VERSION = (1, 3)  # newest DLPack struct layout dlbridge reads (major 1)


def inspect(x: Any) -> DLPackInfo:
    """Describe ``x`` (an object with ``__dlpack__``, or a raw capsule) without consuming anything."""
    if type(x) is CapsuleType:
        return read(x)
    source = adapter_for(x)
    if source is None and not hasattr(type(x), "__dlpack__"):
        raise NotAnArrayError(
            f"dlbridge.inspect needs an object with __dlpack__ or a DLPack capsule, got {type(x).__name__}"
        )
    device = device_of(x, source)
    # No synchronisation: nothing reads the data (-1 in DLPack; JAX needs None, see its adapter).
    stream = (-1 if source is None else source.no_sync_stream) if device[0] in GPU_CODES else None
    with source.on_device(device) if source is not None and device[0] in GPU_CODES else nullcontext():
        capsule = export(x, source, stream, MAX_VERSION)
    return check_device(read(capsule, producer_name(x)), device)


def export(x: Any, source: Adapter | None, stream: int | None, max_version: tuple[int, int] | None,
            copy: bool | None = None, target: Adapter | None = None, dtype: Any = None) -> Any:  # fmt: skip
    """The producer's capsule. ``target`` None: only described (``inspect``). Raises ``AsIs``
    when the target should get ``x`` itself (see ``Adapter.export_failed``)."""
    try:
        if source is not None:
            capsule = source.export(x, stream=stream, max_version=max_version)
        else:
            capsule = export_capsule(x, stream=stream, max_version=max_version)
    except (DLBridgeError, MemoryError):
        raise  # from dlbridge inside the producer (or a refusing adapter): already says what to do
    except BufferError as err:
        if "readonly" in str(err).lower() or "read-only" in str(err).lower():
            if copy is True:  # a legacy-only consumer: let the producer make a writable copy
                return export_copy(x, source, stream, max_version, err)
            fix = source.readonly_fix if source is not None else Adapter.readonly_fix
            raise ReadOnlyError(readonly_refusal(type(x).__name__, max_version is None, fix)) from err
        capsule = export_failed(x, source, err, stream, max_version, copy, target, dtype)
    except Exception as err:
        capsule = export_failed(x, source, err, stream, max_version, copy, target, dtype)
    if type(capsule) is not CapsuleType:
        raise CapsuleError(f"{type(x).__name__}.__dlpack__() returned {type(capsule).__name__}, not a capsule")
    return capsule


def export_failed(x: Any, source: Adapter | None, err: Exception, stream: int | None,
                   max_version: tuple[int, int] | None, copy: bool | None, target: Adapter | None,
                   dtype: Any) -> Any:  # fmt: skip
    """A failed export: a resolved stand-in's capsule, ``AsIs``, or an error naming the fix."""
    if source is not None:
        try:
            capsule = source.export_failed(
                x, stream=stream, max_version=max_version, copy=copy, target=target, dtype=dtype
            )
        except DLBridgeError as known:
            if known.__cause__ is None:
                known.__cause__ = err
            raise
        if capsule is not None:
            return capsule
    raise producer_error(x, err, "__dlpack__") from err


def export_copy(x: Any, source: Adapter | None, stream: int | None, max_version: tuple[int, int] | None,
                 cause: BaseException) -> Any:  # fmt: skip
    try:
        if source is not None:  # the framework's own copy, exported the adapter's way (ml_dtypes, ...)
            return source.export(source.copy(x), stream=stream, max_version=max_version)
        return x.__dlpack__(stream=stream, copy=True)
    except MemoryError:
        raise
    except Exception as err:
        raise ReadOnlyError(f"{type(x).__name__} is read-only and its producer cannot export a copy: {err}") from cause
