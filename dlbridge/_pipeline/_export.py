"""The producer side of a conversion: asking a framework (or any DLPack producer) for its capsule.

``export`` is the one place a producer is asked for a capsule, with what a failure means: a
read-only array (``ReadOnlyError``, or a copy when ``copy=True``), a state the adapter resolves or
names (``Adapter.export_failed``), or the producer's own error, named. The producer is asked once:
an export the fast route made and saw fail is handed in (``failed``) and not asked again. Where a
copy is right to share in the array's place, ``export`` returns its ``StandIn``: the copy is made
only when the conversion runs (``capsule_of``), and described without being made (``described``).
``inspect`` describes an array through the same export, without consuming anything.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._adapters import Adapter, adapter_for, export_capsule, producer_error, producer_name
from .._adapters._support import StandIn, _arguments_refused
from .._capsule._abi import FLAG_READ_ONLY
from .._capsule._read import CapsuleType, DLPackInfo, read
from .._errors import CapsuleError, DLBridgeError, NotAnArrayError, ReadOnlyError
from ._devices import check_device, device_of, handshake, on_device
from ._handoff import readonly_refusal

__all__ = ["MAX_VERSION", "export", "inspect", "capsule_of", "described", "StandIn"]

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
    wire = handshake(None, source, None, device)  # described only: no synchronisation
    with on_device(source, device):
        capsule = export(x, source, wire.stream, MAX_VERSION)
    return check_device(read(capsule, producer_name(x)), device)


def export(x: Any, source: Adapter | None, stream: int | None, max_version: tuple[int, int] | None,
           copy: bool | None = None, target: Adapter | None = None, dtype: Any = None,
           failed: BaseException | None = None) -> Any:  # fmt: skip
    """The producer's capsule, or the ``StandIn`` of a copy to share in its place. ``target`` None:
    only described (``inspect``). ``failed``: the error the producer's export already raised (the
    fast route's), handled as if raised here. Raises ``AsIs`` when the target should get ``x`` itself
    (see ``Adapter.export_failed``)."""
    if failed is not None and _retried(failed, source):
        failed = None  # the producer's export asks again, another way (a legacy capsule): as it does
    try:
        if failed is not None:
            raise failed
        if source is not None:
            capsule = source.export(x, stream=stream, max_version=max_version)
        else:
            capsule = export_capsule(x, stream=stream, max_version=max_version)
    except (DLBridgeError, MemoryError):
        raise  # from dlbridge inside the producer (or a refusing adapter): already says what to do
    except BufferError as err:
        if "readonly" in str(err).lower() or "read-only" in str(err).lower():
            if copy is True:  # a legacy-only consumer: a writable copy, exported in its place
                return _readonly_copy(x, source, stream, max_version, err)
            fix = source.readonly_fix if source is not None else Adapter.readonly_fix
            raise ReadOnlyError(readonly_refusal(type(x).__name__, max_version is None, fix)) from err
        capsule = export_failed(x, source, err, stream, max_version, copy, target, dtype)
    except Exception as err:
        capsule = export_failed(x, source, err, stream, max_version, copy, target, dtype)
    if type(capsule) is not CapsuleType and type(capsule) is not StandIn:
        raise CapsuleError(f"{type(x).__name__}.__dlpack__() returned {type(capsule).__name__}, not a capsule")
    return capsule


def _retried(err: BaseException, source: Adapter | None) -> bool:
    """Whether the export (``export_capsule``, the adapter's) asks the producer again after its
    ``__dlpack__(max_version=...)`` raised ``err``: a producer before DLPack 1.0 (its arguments refused)."""
    if isinstance(err, TypeError) and _arguments_refused(err):
        return True
    return source is not None and isinstance(err, Exception) and source.export_retries(err)


def export_failed(x: Any, source: Adapter | None, err: Exception, stream: int | None,
                   max_version: tuple[int, int] | None, copy: bool | None, target: Adapter | None,
                   dtype: Any) -> Any:  # fmt: skip
    """A failed export: a resolved stand-in (its capsule, or its ``StandIn``), ``AsIs``, or an error naming the fix."""
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


def _readonly_copy(x: Any, source: Adapter | None, stream: int | None, max_version: tuple[int, int] | None,
                   cause: BaseException) -> StandIn:  # fmt: skip
    """A read-only array for a consumer that reads only legacy capsules (which cannot say read-only),
    with copy=True: a writable copy, exported in its place as any array is (``export``)."""

    def make() -> Any:
        try:
            if source is not None:  # the framework's own copy, exported the adapter's way (ml_dtypes, fp4, ...)
                return capsule_of(export(source.exportable_copy(x), source, stream, max_version))
            return x.__dlpack__(stream=stream, copy=True)
        except MemoryError:
            raise
        except Exception as err:
            raise ReadOnlyError(
                f"{type(x).__name__} is read-only and its producer cannot export a copy: {err}"
            ) from cause

    def describe() -> Any:  # the array's own memory, in the kind of capsule the copy's will be
        empty = source.empty_copy(x) if source is not None else None
        if empty is not None:  # no capsule of x's memory says the copy (Adapter.empty_copy): none, its dtype
            standin.shape = empty[1]
            return _capsule_or_description(export(empty[0], source, stream, max_version))
        try:
            if source is None:
                raise ReadOnlyError("no writable alias")
            return _capsule_or_description(export(source.writable(x), source, stream, max_version))
        except ReadOnlyError:  # no writable alias (a producer dlbridge has no adapter for, pyarrow): the
            standin.versioned = max_version is not None  # kind that says read-only, read as the copy's kind
            return _capsule_or_description(export(x, source, stream, MAX_VERSION))

    standin = StandIn(make, describe, "a writable copy (the array is read-only)")
    return standin


def _capsule_or_description(made: Any) -> Any:
    return made.describe() if type(made) is StandIn else made


def capsule_of(made: Any) -> Any:
    """What ``export`` returned, as a capsule: a ``StandIn``'s copy made and exported."""
    return made.make() if type(made) is StandIn else made


def described(made: Any, producer: str | None) -> DLPackInfo:
    """What ``export`` returned, described without making any copy: a ``StandIn``'s capsule as the
    copy's will say it (C order, no offset, writable), read off memory that exists already; a
    capsule, as it is."""
    if type(made) is not StandIn:
        return read(made, producer)
    info = read(made.describe(), producer)
    shape = info.shape if made.shape is None else made.shape
    kind = info.versioned if made.versioned is None else made.versioned
    # data_ptr 0: a new allocation, whose address is not known before it is made
    return replace(
        info,
        shape=shape,
        strides=None,
        byte_offset=0,
        data_ptr=0,
        readonly=False,
        versioned=kind,
        version=(info.version or MAX_VERSION) if kind else None,
        flags=info.flags & ~FLAG_READ_ONLY,
    )
