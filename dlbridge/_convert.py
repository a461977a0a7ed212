"""The conversion pipeline: export once, read the capsule, decide, import, check.

Every decision comes from the capsule (dtype code, bits, lanes, device, strides, flags) and
the target's row in the capability table, never from framework-specific attributes, so any
DLPack producer is covered. A capsule the target would reject is never handed to it.

Asking the producer for its capsule is ``_export``'s; moving memory to another device, ``_moves``'.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from . import _logical, _subbyte
from ._adapters import (
    ADAPTERS,
    HOST,
    Adapter,
    AsIs,
    adapter_for,
    adapter_named,
    producer_name,
    symbolic_error,
)
from ._capabilities import Capabilities
from ._capsule import (
    DEVICE_ALIASES,
    GPU_CODES,
    CapsuleType,
    DeferredCarrier,
    DLPackInfo,
    alias_device,
    c_strides,
    device_name,
    read,
    relabel_device,
    restore,
    rewrite,
    set_c_strides,
)
from ._devices import check_device, device_of, host_device, parse_device, stream_for
from ._dtypes import BY_NAME, decode_table, unsigned_of_width
from ._errors import (
    CapsuleError,
    DeviceMismatchError,
    DLBridgeError,
    LayoutError,
    NotAnArrayError,
    OptionError,
    ReadOnlyError,
    UnsupportedDtypeError,
)
from ._export import MAX_VERSION, export, inspect
from ._logical import _entries as _views  # mutated in place, never rebound
from ._moves import cross_device
from ._options import NOT_GIVEN, Fallback, resolve_fallback
from ._plan import Plan, native_plan, plan_for, recalled_fallback
from ._sizes import check_copy_size, copied, size_text

__all__ = ["convert", "inspect", "MAX_VERSION"]


# --- the pipeline -----------------------------------------------------------------------------


def convert(x: Any, to: Any, /, *, fallback: Any = NOT_GIVEN, dtype: Any = None, device: Any = None,
            copy: bool | None = None, stream: int | None = None) -> Any:  # fmt: skip
    """Hand ``x`` to framework ``to`` (a name such as ``"torch"`` or the module).

    Zero-copy whenever the target can hold the data where it is; see the README for the
    fallback policy. ``copy=False`` forbids any copy, ``copy=True`` always copies.
    """
    target = adapter_named(to)
    return _convert(x, target, resolve_fallback(fallback), dtype, device, copy, stream)


def _convert(x: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any, copy: bool | None,
             stream: int | None) -> Any:  # fmt: skip
    # The hot path of every conversion: kept flat (few calls) on purpose; see BENCHMARKS.md.
    if copy is not None and copy is not True and copy is not False:
        raise OptionError(f"copy={copy!r}; expected True, False or None")
    cls = type(x)
    if cls is CapsuleType:
        return _from_capsule(x, target, fallback, dtype, device, copy, stream)
    source = adapter_for(x)
    if source is None and not hasattr(cls, "__dlpack__"):
        raise symbolic_error(cls) or NotAnArrayError(
            f"to_{target.name}() needs an array that supports DLPack (__dlpack__), got {cls.__module__}."
            f"{cls.__qualname__}; wrap Python data with your framework first (e.g. {HOST.wrap_call})"
        )
    if dtype is None and _views and id(x) in _views:  # x may be a view dlbridge made (none: one dict test)
        dtype = _logical.recall(x, inspect(x))  # its own memory (the export below may be a copy)
        fallback = recalled_fallback(fallback) if dtype is not None else fallback
    src_dev = device_of(x, source)
    # Pinned host memory is CPU memory to a CPU consumer, managed memory CUDA memory to a CUDA one:
    # shared as such, the capsule's device relabelled (DEVICE_ALIASES).
    home = alias_device(src_dev) if src_dev[0] in DEVICE_ALIASES and src_dev[0] not in target.device_codes else src_dev
    if home[1] and home[0] == 1:
        home = (1, 0)  # every CPU id names the host's memory
    dst_dev = home if device is None else parse_device(device, home)
    if device is None and copy and home[0] not in target.device_codes:
        dst_dev = target.home_device  # copy=True: the target's home device
    if dst_dev != home or home[0] not in target.device_codes:
        if dst_dev[0] != 1 or home[0] != 1 or 1 not in target.device_codes:
            return cross_device(x, source, target, home, dst_dev, fallback, dtype, device, copy, stream)
        home = host_device(target, dst_dev, device)  # JAX's CPU device N: the same memory, labelled N
    caps = target.capabilities()
    if stream is None and target.asks_producer_stream and src_dev[0] in GPU_CODES:
        return _deferred(x, source, target, caps, fallback, dtype, copy, src_dev, home)
    try:  # (free unless raised) AsIs: the target gets x itself, e.g. torch -> torch keeping autograd
        if src_dev[0] in GPU_CODES:
            wire_stream = _gpu_stream(stream, source, target, src_dev)
            with source.on_device(src_dev) if source is not None else nullcontext():
                capsule = export(x, source, wire_stream, MAX_VERSION if caps.versioned_capsules else None, copy,
                                  target, dtype)  # fmt: skip
        else:
            if stream is not None:
                raise OptionError(
                    f"stream={stream!r} on {device_name(src_dev[0])}: only stream=None is valid off the GPU"
                )
            if source is target and not caps.readonly_arrays and dtype is None and copy is not True:
                shared = target.readonly_alias(x)  # NumPy < 2.1 cannot export a read-only array to itself
                if shared is not None:
                    return shared
            capsule = export(x, source, None, MAX_VERSION if caps.versioned_capsules else None, copy, target, dtype)
    except AsIs as kept:
        return kept.value
    info = read(capsule, source.name if source is not None else producer_name(x))
    if info.device_code != home[0] or info.device_id != home[1]:
        check_device(info, src_dev)  # raises unless the capsule is on the claimed device (or its alias)
        relabel_device(capsule, home)  # our own export: relabelled as the memory the target can use
        info = replace(info, device_type=device_name(home[0]), device_code=home[0], device_id=home[1])
    if info.code == 17 and dtype is None and info.dtype not in caps.imports:  # fp4 in another layout
        converted = _subbyte.convert(x, capsule, info, source, target, caps, fallback, copy)
        if converted is not NotImplemented:  # NotImplemented: not for _subbyte, the capsule untouched
            return converted
    if _needs_layout_copy(info, caps):
        del capsule  # unconsumed: the producer's destructor frees it
        return _layout_copy(x, source, info, target, caps, fallback, dtype, copy, stream)
    return _import(capsule, info, target, caps, fallback, dtype, copy)


def _layout_copy(x: Any, source: Adapter | None, info: DLPackInfo, target: Adapter, caps: Capabilities,
                 fallback: Fallback, dtype: Any, copy: bool | None, stream: int | None) -> Any:  # fmt: skip
    """``x`` (described by ``info``) converted through a dense copy, the layout ``target`` needs."""
    if copy is False:
        raise LayoutError(_layout_message(info, caps, target, ", which copy=False forbids. Pass copy=None."))
    # Decide the dtype first: an unsupported one raises before any copy is made, and the dense
    # copy (a new object, which a view's memory does not follow) is told what the data is.
    plan_for(info, caps, fallback, dtype, f"to_{target.name}()")
    dense, relabelled = _dense_source(x, source, info, target)
    if dtype is None:
        dtype = relabelled
    # A dense array at another address is already the copy copy=True asks for, and the target
    # may copy it once more (JAX, misaligned) without harm: copy=None. At the same address
    # (only re-exported, e.g. NumPy dropping a byte_offset) the caller's copy= still applies.
    moved = info.size and adapter_for(dense).data_ptr(dense) != info.data_ptr  # type: ignore[union-attr]
    return _convert(dense, target, fallback, dtype, None, None if moved else copy, stream)


class _NeedsDense(Exception):  # a signal from inside a consumer's from_dlpack, caught in _deferred
    pass


def _deferred(x: Any, source: Adapter | None, target: Adapter, caps: Capabilities, fallback: Fallback,
              dtype: Any, copy: bool | None, src_dev: tuple[int, int], home: tuple[int, int]) -> Any:  # fmt: skip
    """A GPU source handed to a consumer that asks the producer for a stream itself (JAX): the
    consumer gets a ``DeferredCarrier``, and the export, with every check of the pipeline, happens
    when it calls ``__dlpack__(stream=S)``, with its own ``S`` (one export, the right stream)."""
    state: dict[str, Any] = {}

    def export_when_asked(stream: Any) -> Any:
        with source.on_device(src_dev) if source is not None else nullcontext():
            capsule = export(x, source, stream, MAX_VERSION if caps.versioned_capsules else None, copy, target, dtype)
        info = read(capsule, source.name if source is not None else producer_name(x))
        if info.device_code != home[0] or info.device_id != home[1]:
            check_device(info, src_dev)
            relabel_device(capsule, home)
            info = replace(info, device_type=device_name(home[0]), device_code=home[0], device_id=home[1])
        state["info"] = info
        if _needs_layout_copy(info, caps):
            raise _NeedsDense
        state["plan"] = _ready(capsule, info, target, caps, fallback, dtype, copy)[0]
        return capsule

    try:
        result = target._from_dlpack(DeferredCarrier(export_when_asked, home))
    except AsIs as kept:
        return kept.value
    except _NeedsDense:
        return _layout_copy(x, source, state["info"], target, caps, fallback, dtype, copy, None)
    except DLBridgeError:
        raise
    except Exception as err:
        info = state.get("info")
        if info is None:  # the consumer failed before it asked for the capsule: it cannot use the device
            raise DeviceMismatchError(
                f"to_{target.name}(): the source says it is on {device_name(src_dev[0])}:{src_dev[1]}, which "
                f"{target.name} cannot use in this process ({type(err).__name__}: {err})"
            ) from err
        raise CapsuleError(
            f"to_{target.name}(): {caps.consumer} {caps.version} refused {info.describe()}: {type(err).__name__}: {err}"
        ) from err
    return _imported(result, state["info"], state["plan"], target, caps, copy)


def _gpu_stream(stream: int | None, source: Adapter | None, target: Adapter, device: tuple[int, int]) -> int | None:
    """The stream= a GPU producer is given: the consumer's current stream, or the caller's."""
    if stream is not None and stream != -1 and not target.honours_stream:
        raise OptionError(
            f"stream={stream!r}: {target.name} imports on a stream of its own choosing, so the producer would "
            f"synchronise with a stream {target.name} does not read on; pass stream=None (dlbridge then "
            f"synchronises with {target.name}'s stream) or stream=-1 (no synchronisation)"
        )
    wire = stream_for(stream, target, device)
    return source.no_sync_stream if wire == -1 and source is not None else wire


def _from_capsule(capsule: Any, target: Adapter, fallback: Fallback, dtype: Any, device: Any,
                  copy: bool | None, stream: int | None) -> Any:  # fmt: skip
    info = read(capsule)
    alias = alias_device(info.device)  # pinned / managed memory: see _convert
    usable = alias != info.device and info.device_code not in target.device_codes and alias[0] in target.device_codes
    device_to = None  # the caller's capsule is relabelled only right before the import (and restored)
    if usable and parse_device(device, alias) == alias:
        device_to = alias
    elif info.device_code == 1 and (info.device_id or device is not None) and 1 in target.device_codes:
        wanted = parse_device(device, (1, 0))  # every CPU id names the host's memory: see _convert
        if wanted[0] == 1 and wanted != info.device:
            device_to = host_device(target, wanted, device)
    if device_to is not None:
        info = replace(info, device_type=device_name(device_to[0]), device_code=device_to[0], device_id=device_to[1])
    if parse_device(device, info.device) != info.device or info.device_code not in target.device_codes:
        target.check_installed()
        raise DeviceMismatchError(
            f"to_{target.name}(): a raw capsule on {info.device_type} cannot be moved; pass the array "
            "itself (not its capsule) so dlbridge can ask its producer for a copy"
        )
    caps = target.capabilities()
    if _needs_layout_copy(info, caps):
        raise LayoutError(
            _layout_message(info, caps, target, ", which dlbridge cannot make from a raw capsule")
            + ". Pass the array itself (not its capsule), so dlbridge can ask its producer for a dense copy."
        )
    return _import(capsule, info, target, caps, fallback, dtype, copy, device_to)


def _import(capsule: Any, info: DLPackInfo, target: Adapter, caps: Capabilities, fallback: Fallback,
            dtype: Any, copy: bool | None, device_to: tuple[int, int] | None = None) -> Any:  # fmt: skip
    plan, saved = _ready(capsule, info, target, caps, fallback, dtype, copy, device_to)
    try:
        result = target.import_capsule(capsule, info.device, caps)
    except BaseException as err:
        if saved is not None:
            restore(capsule, saved)
        if not isinstance(err, Exception):  # KeyboardInterrupt ...
            raise
        raise CapsuleError(
            f"to_{target.name}(): {caps.consumer} {caps.version} refused {info.describe()} "
            f"as {plan.wire}: {type(err).__name__}: {err}"
        ) from err
    return _imported(result, info, plan, target, caps, copy)


def _ready(capsule: Any, info: DLPackInfo, target: Adapter, caps: Capabilities, fallback: Fallback, dtype: Any,
           copy: bool | None, device_to: tuple[int, int] | None = None) -> tuple[Plan, Any]:  # fmt: skip
    """Every check that can refuse, then the capsule's edits: (the plan, what ``restore`` undoes)."""
    if dtype is None and info.code != 1 and info.dtype in caps.imports:
        plan = native_plan(info.dtype)  # the common case, without building plan_for's message prefix
    else:
        plan = plan_for(info, caps, fallback, dtype, f"to_{target.name}()")
    if plan.mode == "upcast" and copy is False:
        raise UnsupportedDtypeError(
            f'to_{target.name}(): {caps.consumer} cannot hold {plan.logical}, and fallback="upcast" makes a '
            f'float32 copy of {info.describe()}, which copy=False forbids; pass fallback="view" for a zero-copy '
            f"{plan.wire} view, or copy=None"
        )
    if info.versioned and not caps.versioned_capsules:
        raise CapsuleError(
            f"to_{target.name}(): {caps.consumer} {caps.version} reads only legacy 'dltensor' capsules, and "
            f"{info.describe()} came as 'dltensor_versioned' (a raw capsule, or a producer that ignored "
            "max_version=None); pass the array itself, from a producer that can export a legacy capsule"
        )
    writable = info.readonly and not caps.readonly_arrays
    if writable and copy is not True:
        raise ReadOnlyError(
            f"to_{target.name}(): {info.describe()} is read-only and {caps.consumer} arrays cannot be; "
            "sharing it would let writes through. Pass copy=True for a writable copy."
        )
    if plan.wire not in caps.imports:  # the invariant that keeps crash-prone consumers alive
        raise UnsupportedDtypeError(
            f"to_{target.name}(): internal plan {plan} would hand {caps.consumer} a dtype it rejects"
        )
    # Edits last, after every check that can refuse, and undone if the consumer refuses too: a
    # capsule nobody consumed (a caller's raw capsule) is left exactly as it came. READ_ONLY is
    # dropped only for an import copied right after it, so nobody writes the original.
    wire = BY_NAME[plan.wire] if plan.wire != info.dtype else None
    saved = rewrite(capsule, wire, device_to, writable) if wire is not None or device_to or writable else None
    if caps.row_major_only and info.strides is not None and info.strides != c_strides(info.shape):
        set_c_strides(capsule, info.shape)  # C order up to size-1 dimensions, said literally
    return plan, saved


def _imported(result: Any, info: DLPackInfo, plan: Plan, target: Adapter, caps: Capabilities,
              copy: bool | None) -> Any:  # fmt: skip
    """What the consumer imported, made writable, checked for a copy, and finished (``plan``)."""
    if caps.readonly_imports and not info.readonly:
        # NumPy < 2.2 makes every import read-only; NumPy 2.2+ only READ_ONLY capsules (and legacy
        # ones, which cannot say): a versioned capsule, or a known mutable producer, comes back writable.
        producer = ADAPTERS.get(info.producer or "")
        if info.versioned or (producer is not None and producer.mutable_arrays):
            result = target.writable(result)
    # The consumer may copy on its own (JAX does for misaligned CPU buffers).
    if copy is False and info.size and target.data_ptr(result) != info.data_ptr:
        raise LayoutError(
            f"to_{target.name}(): {caps.consumer} copied {info.describe()} on import (address "
            f"{info.data_ptr:#x} is not aligned the way it needs); copy=False forbids that. Pass copy=None."
        )
    if plan.mode == "native":
        return copied(result, target, info) if copy is True else result
    if copy is True and plan.mode != "upcast":  # copy first: a view remembers the copy's memory
        return _finish(copied(result, target, info), plan, target, None)
    if plan.mode == "view" and (info.strides not in (None, c_strides(info.shape)) or
                                (info.size and target.data_ptr(result) != info.data_ptr)):  # fmt: skip
        return _finish(result, plan, target, None)  # not plainly the capsule's memory (JAX copied it)
    return _finish(result, plan, target, info)


def _finish(result: Any, plan: Plan, target: Adapter, info: DLPackInfo | None) -> Any:
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


def _needs_layout_copy(info: DLPackInfo, caps: Capabilities) -> bool:
    strides = info.strides
    if strides is None:  # C order; some consumers then refuse a byte_offset (a dense re-export has none)
        return info.byte_offset != 0 and caps.offset_needs_strides
    if strides == c_strides(info.shape):
        return False  # dense C order (the common case): no negative strides, compact
    if caps.row_major_only:  # transposed layouts: refused or misread (see the capability row)
        return not info.is_c_contiguous()
    if info.has_negative_strides() and not caps.negative_strides:
        return True
    return caps.compact_only and not info.is_compact()


def _layout_message(info: DLPackInfo, caps: Capabilities, target: Adapter, why: str) -> str:
    """What the target cannot share, and ``why`` the dense copy it needs is not made."""
    layout = f"strides {list(info.strides)}" if info.strides is not None else f"byte_offset {info.byte_offset}"
    return (
        f"to_{target.name}(): {caps.consumer} {caps.version} cannot share {info.describe()} with {layout}; "
        f"it needs a dense copy{why}"
    )


def _writable(dense: Any, info: DLPackInfo) -> Any:
    """A host copy the host framework may have imported read-only (NumPy < 2.2 does so for every
    capsule): writable again when the target's own (versioned) capsule said the memory is."""
    return HOST.writable(dense) if info.versioned and not info.readonly else dense


def _dense_source(x: Any, source: Adapter | None, info: DLPackInfo, target: Adapter) -> tuple[Any, str | None]:
    """A dense copy of ``x``, and the dtype its bits have when the copy's own dtype differs."""
    check_copy_size(info, target.name, f"the dense copy {target.name} needs")
    try:
        if source is not None:
            return source.contiguous(x), None
        if info.device_code == 1:  # through the host: as raw unsigned bits where it cannot hold the dtype
            caps = HOST.capabilities()
            if info.dtype in caps.imports or info.dtype in caps.holds:
                dense = HOST.contiguous(_convert(x, HOST, "raise", None, None, None, None))
                return _writable(dense, info), None
            bits = unsigned_of_width(info.bits * info.lanes)
            host = _convert(x, HOST, "raise", bits, None, None, None)
            return _writable(HOST.contiguous(host), info), info.dtype if info.dtype in BY_NAME else None
    except MemoryError as err:
        raise LayoutError(
            f"to_{target.name}(): the dense copy {target.name} needs of {info.describe()} "
            f"({size_text(info.nbytes)}) did not fit in memory (MemoryError: {err}). Pass a smaller array."
        ) from err
    raise LayoutError(
        f"to_{target.name}(): {info.describe()} from an unknown producer has strides {list(info.strides or ())} "
        f"that {target.name} cannot share, and dlbridge knows no way to make it dense on {info.device_type}"
    )
