"""The handoff record: what dlbridge does with one array for one consumer, decided in one place.

``decide`` is a pure function from what is known about a capsule (its ``DLPackInfo``: dtype, layout,
flags, device, producer), the consumer's capability row and the options, to a ``Handoff``: the steps
the conversion takes, or the error it raises. Nothing here touches memory. The pipeline (``_convert``)
runs the record it gets, ``dlbridge.explain`` returns it without running it, the fast route replays the
records it can (``_route``), the guard checks arguments with it and the report predicts with it.

The rules, each in one place: the layout a consumer can share (``needs_dense``), the dtype plan
(``_plan.plan_for``), the capsule kind, read-only memory, what the consumer's import leaves to do.
Devices are decided before anything is exported (``_devices``, ``_moves.plan_move``): a record with a
``move`` says which copy brings the memory where the consumer can use it, and ``then`` what happens to
the moved array, as ``dense`` does for a dense copy.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._adapters import ADAPTERS, HOST, Adapter
from .._adapters._fast import FastRoute
from .._capabilities import Capabilities
from .._capsule._read import DLPackInfo, c_strides
from .._dtypes import BY_NAME, lookup
from .._errors import (
    CapsuleError,
    DLBridgeError,
    LayoutError,
    OptionError,
    ReadOnlyError,
    UnsupportedDtypeError,
)
from .._options import Fallback
from ._plan import Plan, native_plan, plan_for
from ._record import Admission, Handoff, Move
from ._refusals import null_deleter_refusal, raw_fp4_refusal
from ._subbyte import FLAG_PADDED
from ._subbyte import plan as subbyte_plan

# The CPU alignment XLA and Eigen want (bytes): consumers with ``copies_unaligned`` copy buffers off it.
ALIGNMENT = 64

__all__ = ["ALIGNMENT", "Admission", "COPIED", "Handoff", "Move", "decide", "refused", "needs_dense", "layout_message",
           "dense_info", "readonly_refusal"]  # fmt: skip


def refused(source: str, target: str, err: DLBridgeError, given: DLPackInfo | None = None) -> Handoff:
    """The record of a refusal found on the way (a producer's error, a bad option)."""
    return Handoff(source, target, given, type(err), str(err), raised=err)


def readonly_refusal(what: str, legacy: bool, fix: str) -> str:
    """Why a read-only array is not exported (``ReadOnlyError``): its capsule would be a legacy one
    (``legacy``: the consumer reads no other), which cannot say read-only, or its producer cannot mark
    a capsule read-only (NumPy < 2.1). ``fix``: the producer adapter's ``readonly_fix``. Raised by the
    export when the producer refuses (``_export``), and decided for a read-only array described with
    a legacy capsule (``decide``)."""
    why = (
        "the consumer reads only legacy capsules, which cannot say so"
        if legacy
        else "its producer cannot mark a DLPack capsule read-only"  # e.g. NumPy < 2.1
    )
    return f"{what} is read-only and {why}; {fix}"


def decide(info: DLPackInfo, target: Adapter, caps: Capabilities, fallback: Fallback, dtype: Any,
           copy: bool | None, *, source: Adapter | None = None, raw: bool = False,
           readonly: str = "keep") -> Handoff:  # fmt: skip
    """The handoff of the capsule ``info`` describes to ``target`` (capability row ``caps``).

    ``source`` is the producer's adapter (None: a producer dlbridge has no adapter for); ``raw``: the
    caller passed the capsule itself, so no dense copy can be asked of its producer; ``readonly``: what
    becomes of read-only memory (the rule: ``_import_record``).

    A read-only ``info`` that is not versioned, with a ``source``, describes an array before its export
    to a consumer that reads only legacy capsules (a capsule read never says so: a legacy one has no
    flags): its producer refuses that export (``ReadOnlyError``, as ``_export`` raises it; no
    ``readonly=`` shares what is never exported), unless it exports such arrays' legacy capsules
    unflagged (``Adapter.exports_readonly_legacy``: JAX). Without a ``source`` (the fast route's
    ``_decide``) it describes such an exported capsule, of read-only memory.
    """
    who = info.producer or ("capsule" if raw else "?")
    if not info.has_deleter and caps.aborts_on_null_deleter:  # before any other rule: it must never see it
        return Handoff(who, target.name, info, CapsuleError, null_deleter_refusal(info, target, caps))
    if info.readonly and not info.versioned and source is not None:  # described for a legacy-only consumer
        if source.exports_readonly_legacy:
            if not source.mutable_arrays:  # its legacy capsule is unflagged; its arrays read-only all the same
                info = replace(info, readonly=False)
        elif copy is not True:  # the export its producer refuses (copy=True: it exports a writable copy)
            message = readonly_refusal(info.describe(), True, source.readonly_fix)
            return Handoff(who, target.name, info, ReadOnlyError, message)
    dtype = _asked_dtype(info, dtype)
    if info.code == 17 and dtype is None:  # fp4 the consumer does not import as it is (dlbridge._pipeline._subbyte)
        fp4 = _fp4(info, target, caps, fallback, copy, source, raw, who)
        if fp4 is not None:
            return fp4
    if needs_dense(info, caps):
        return _dense(info, target, caps, fallback, dtype, copy, source, raw, who, readonly)
    try:
        if dtype is None and info.code != 1 and info.dtype in caps.imports:
            plan = native_plan(info.dtype)  # the common case, without building plan_for's message prefix
        else:
            plan = plan_for(info, caps, fallback, dtype, f"to_{target.name}()")
    except (UnsupportedDtypeError, OptionError) as err:
        return Handoff(who, target.name, info, type(err), str(err))
    return _import_record(info, target, caps, plan, copy, source, who, readonly)


def _import_record(info: DLPackInfo, target: Adapter, caps: Capabilities, plan: Plan, copy: bool | None,
                   source: Adapter | None, who: str, readonly: str) -> Handoff:  # fmt: skip
    """The import of ``info`` with ``plan``: refused (``_refusal``), or its steps and admission.

    Read-only memory, the one rule: an array is read-only where its capsule says so (READ_ONLY) or its
    producer's arrays are immutable whatever their capsules say (``Adapter.mutable_arrays`` False: JAX,
    whose capsules before 0.12 carry no flag, and Arrow). A consumer with read-only arrays (NumPy) gets
    it read-only; one without (torch, CuPy, Paddle, ...) gets ``ReadOnlyError`` unless ``copy=True``
    (a writable copy) or ``readonly="drop"`` (the same memory, writable, READ_ONLY cleared: the caller
    does not write to it). ``readonly=COPIED``: a copy the pipeline made, handed over writable.
    """
    immutable = source is not None and not source.mutable_arrays
    shared_ro = (info.readonly or immutable) and readonly != COPIED  # memory the caller's array shares, read-only
    holds_readonly = caps.readonly_arrays or caps.readonly_imports  # its import of read-only memory is read-only
    # (an upcast hands over a float32 copy it makes: the read-only memory never reaches the caller)
    kept = shared_ro and not holds_readonly and readonly == "keep" and plan.mode != "upcast"
    why = _readonly_why(source, immutable) if kept else None
    error = _refusal(info, target, caps, plan, copy, why)
    if error is not None:
        return Handoff(who, target.name, info, error[0], error[1], plan)
    producer = ADAPTERS.get(info.producer or "")
    # Mutable memory: a versioned capsule (it says READ_ONLY where it is not), a known mutable producer's,
    # or a copy made for this conversion (COPIED: nobody else holds it, whoever its producer is).
    mutable = info.versioned or (producer is not None and producer.mutable_arrays) or readonly == COPIED
    strided = info.strides is not None and info.strides != c_strides(info.shape)
    consumer_copies = _consumer_copies(info, caps)
    drop_readonly = (shared_ro or info.readonly) and not holds_readonly
    record = Handoff(
        who,
        target.name,
        info,
        plan=plan,
        versioned=info.versioned,
        drop_readonly=drop_readonly,
        shared_readonly=drop_readonly and shared_ro and readonly == "drop" and copy is not True and not consumer_copies,
        c_order=caps.row_major_only and strided,
        carrier=not caps.takes_raw_capsules,
        writable=caps.readonly_imports and not shared_ro and not info.readonly and mutable,
        consumer_copies=consumer_copies,
        copy=copy is True and not caps.copies_imports,  # a consumer that copies every import made it already
    )
    # Replayed: dense C order, nothing made writable or copied after the import, READ_ONLY cleared only as
    # readonly="drop" asks or for a consumer that copies every import (the stored route clears it too:
    # Admission.clear_readonly; copies_imports, not this capsule's alignment: every admitted capsule is copied).
    clear = record.shared_readonly or (drop_readonly and consumer_copies and caps.copies_imports)
    if strided or record.writable or (drop_readonly and not clear) or record.copy:
        return record
    if plan.mode not in _REPLAYED or not isinstance(target, FastRoute):  # a consumer without the route's part
        return record
    return record._replace(admits=_admission(info, target, caps, plan, shared_ro, clear))


# readonly= inside the pipeline: the array is a copy it made (a device move, a dense copy), nobody else's.
COPIED = "copied"


def _readonly_why(source: Adapter | None, immutable: bool) -> str:
    """What says the memory is read-only, for the refusal: its capsule, or its producer's immutable arrays."""
    if immutable and source is not None:
        return f" ({source.display} arrays are immutable)"
    return ""


def _asked_dtype(info: DLPackInfo, dtype: Any) -> Any:
    """``dtype=`` as ``decide`` reads it: None where it names an fp4 capsule's own dtype (nothing to relabel).

    fp4 the consumer does not import as it is (another dtype: pairs; or one value a byte, a padded capsule
    a consumer importing float4_e2m1fn would read as two values a byte) is then ``_fp4``'s to hand over."""
    if info.code == 17 and dtype is not None and lookup(dtype) == BY_NAME.get(info.dtype):
        return None
    return dtype


KIND_LEGACY, KIND_VERSIONED = 1, 2  # Admission.kinds (capsules.c: the same bits)

# The plans a stored route replays: the capsule as it is, or relabelled zero-copy (same width), as the
# target's own dtype or as the same-width unsigned view whose logical dtype is recorded (fallback="view").
_REPLAYED = ("native", "reinterpret", "view")


def _admission(info: DLPackInfo, target: FastRoute, caps: Capabilities, plan: Plan, shared_ro: bool,
               clear: bool) -> Admission:  # fmt: skip
    """The capsules that get the same record as ``info`` (dense C order, writable or read-only, with or
    without an offset, either capsule kind), by the rules above: a READ_ONLY capsule differs only where
    the consumer has no read-only arrays (``drop_readonly``, ``_refusal``), unless ``info`` is read-only
    memory itself (``shared_ro``: the route's key says so, its capsule's flag or its producer's), an offset
    only where it needs strides for one (``needs_dense``), a versioned capsule only where it reads legacy
    ones alone (``_refusal``); below the consumer's import alignment its import is another one (the
    adapter's ``import_alignment``: it copies through the host), so a record holds for the capsules on
    ``info``'s side of that line only (``misaligned``). ``clear``: READ_ONLY is cleared before the import
    (``readonly="drop"``, or for a consumer that copies every import)."""
    wire, (device_type, device_id) = BY_NAME[plan.wire], info.device
    align = target.import_alignment(caps)
    return Admission(
        wire=wire.code | wire.bits << 8 | wire.lanes << 16,
        triple=info.code | info.bits << 8 | info.lanes << 16,
        device_type=device_type,
        device_id=device_id,
        kinds=KIND_LEGACY | (KIND_VERSIONED if caps.versioned_capsules else 0),
        readonly_ok=caps.readonly_arrays or shared_ro,
        offset_ok=not caps.offset_needs_strides,
        align=align,
        clear_readonly=clear,
        misaligned=bool(info.size) and info.data_ptr % align != 0,  # (empty: aligned, as the route reads it)
    )


def _refusal(info: DLPackInfo, target: Adapter, caps: Capabilities, plan: Plan, copy: bool | None,
             readonly_why: str | None) -> tuple[type[DLBridgeError], str] | None:  # fmt: skip
    """The first check that refuses handing ``info`` over with ``plan``, as (error, message).
    ``readonly_why``: read-only memory the consumer cannot hold, which readonly="keep" keeps (what says
    so, for the message); None: none."""
    call = f"to_{target.name}()"
    if not caps.min_ndim <= info.ndim <= caps.max_ndim:  # (the capability row's "ndim")
        fix = "x.reshape(1) (and [0] afterwards)" if info.ndim < caps.min_ndim else "a reshape to fewer dimensions"
        return LayoutError, (f"{call}: {caps.consumer} {caps.version} arrays have {caps.min_ndim} to {caps.max_ndim} "
                             f"dimensions, and {info.describe()} has {info.ndim}; pass {fix}")  # fmt: skip
    if plan.mode == "upcast" and copy is False:
        return UnsupportedDtypeError, (
            f'{call}: {caps.consumer} cannot hold {plan.logical}, and fallback="upcast" makes a float32 copy of '
            f'{info.describe()}, which copy=False forbids; pass fallback="view" for a zero-copy {plan.wire} view, '
            "or copy=None"
        )
    if copy is False and caps.copies_imports and info.size:  # refused before the consumer copies anything
        return LayoutError, (
            f"{call}: {caps.consumer} {caps.version} copies every {info.device_type} array it imports, so it "
            f"cannot share {info.describe()}; copy=False forbids that copy. Pass copy=None (one copy)."
        )
    if copy is False and _consumer_copies(info, caps):
        return LayoutError, (
            f"{call}: {caps.consumer} copies {info.describe()} on import (address {info.data_ptr:#x} is not aligned "
            f"to the {ALIGNMENT} bytes it needs); copy=False forbids that. Pass copy=None."
        )
    if info.versioned and not caps.versioned_capsules:
        return CapsuleError, (
            f"{call}: {caps.consumer} {caps.version} reads only legacy 'dltensor' capsules, and {info.describe()} "
            "came as 'dltensor_versioned' (a raw capsule, or a producer that ignored max_version=None); pass the "
            "array itself, from a producer that can export a legacy capsule"
        )
    if readonly_why is not None and copy is not True and not caps.copies_imports:
        return ReadOnlyError, (
            f"{call}: {info.describe()} is read-only{readonly_why} and {caps.consumer} arrays cannot be; pass "
            'copy=True for a writable copy, or readonly="drop" to share the memory as an array you must not write to'
        )
    if plan.wire not in caps.imports:  # the invariant that keeps crash-prone consumers alive
        return UnsupportedDtypeError, f"{call}: internal plan {plan} would hand {caps.consumer} a dtype it rejects"
    return None


def _fp4(
    info: DLPackInfo,
    target: Adapter,
    caps: Capabilities,
    fallback: Fallback,
    copy: bool | None,
    source: Adapter | None,
    raw: bool,
    who: str,
) -> Handoff | None:
    """fp4 in another layout than the consumer imports: another dtype (pairs), or one value a byte (a
    padded capsule, which a consumer importing float4_e2m1fn would read as two values a byte); None
    where the other rules decide. A caller's raw capsule is relabelled where the bytes agree without
    touching its shape (one value a byte to NumPy: zero-copy, restored if refused), never repacked or
    reshaped: otherwise refused, naming the fix (pass the array)."""
    padded = bool(info.flags & FLAG_PADDED)
    if info.dtype in caps.imports and not padded:
        return None
    found = subbyte_plan(info, caps, target, source, fallback, copy)
    if found is None:
        return None
    kind, error, message = found
    if error is not None and not (raw and copy is False):  # (an odd count: no array would do either)
        return Handoff(who, target.name, info, error, message)
    if raw and kind != "elements":  # a caller's capsule is relabelled (restored if refused), never repacked
        return Handoff(who, target.name, info, LayoutError, raw_fp4_refusal(info, target, caps, kind))
    return Handoff(who, target.name, info, keep=kind == "same", fp4=None if kind == "same" else kind,
                   copy=copy is True)  # fmt: skip


def _consumer_copies(info: DLPackInfo, caps: Capabilities) -> bool:
    """Whether the consumer's import of ``info`` is a copy (it copies every import, or this unaligned one)."""
    if not info.size:
        return False
    unaligned = caps.copies_unaligned and info.on_host and info.data_ptr % ALIGNMENT != 0
    return caps.copies_imports or unaligned


def _dense(info: DLPackInfo, target: Adapter, caps: Capabilities, fallback: Fallback, dtype: Any,
           copy: bool | None, source: Adapter | None, raw: bool, who: str, readonly: str) -> Handoff:  # fmt: skip
    """A layout the consumer cannot share: a dense copy first (refused where it cannot be made)."""
    if raw:
        why = (
            ", which dlbridge cannot make from a raw capsule. Pass the array itself (not its capsule), so "
            "dlbridge can ask its producer for a dense copy."
        )
        return Handoff(who, target.name, info, LayoutError, layout_message(info, caps, target, why))
    if copy is False:
        why = ", which copy=False forbids. Pass copy=None."
        return Handoff(who, target.name, info, LayoutError, layout_message(info, caps, target, why))
    try:  # the dtype first: an unsupported one is refused before any copy is made
        plan = plan_for(info, caps, fallback, dtype, f"to_{target.name}()")
    except (UnsupportedDtypeError, OptionError) as err:
        return Handoff(who, target.name, info, type(err), str(err))
    if source is None and not info.on_host:
        return Handoff(who, target.name, info, LayoutError, (
            f"to_{target.name}(): {info.describe()} from an unknown producer has strides "
            f"{list(info.strides or ())} that {target.name} cannot share, and dlbridge knows no way to make it "
            f"dense on {info.device_type}"
        ))  # fmt: skip
    by = source.name if source is not None else f"{HOST.name} (through the host)"
    # A dense array at another address is the copy copy=True asks for (copy=None after it), and the
    # pipeline's own (readonly=COPIED); only re-exported at the same address (a byte_offset dropped) the
    # caller's copy= and readonly= still apply.
    moved = info.strides is not None and bool(info.size)
    then = decide(dense_info(info), target, caps, fallback, dtype, None if moved else copy, source=source,
                  readonly=COPIED if moved else readonly)  # fmt: skip
    return Handoff(who, target.name, info, plan=plan, dense=by, then=then)


def dense_info(info: DLPackInfo) -> DLPackInfo:
    """What the capsule of a dense copy of ``info``'s array says (C order, no offset, writable)."""
    return replace(info, strides=None, byte_offset=0, readonly=False)


def needs_dense(info: DLPackInfo, caps: Capabilities) -> bool:
    """Whether the consumer needs a dense copy of this layout (the one rule for layouts)."""
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


def layout_message(info: DLPackInfo, caps: Capabilities, target: Adapter, why: str) -> str:
    """What the target cannot share, and ``why`` the dense copy it needs is not made."""
    layout = f"strides {list(info.strides)}" if info.strides is not None else f"byte_offset {info.byte_offset}"
    return (
        f"to_{target.name}(): {caps.consumer} {caps.version} cannot share {info.describe()} with {layout}; "
        f"it needs a dense copy{why}"
    )
