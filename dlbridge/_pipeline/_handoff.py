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
from typing import Any, NamedTuple

from .._adapters import ADAPTERS, HOST, Adapter
from .._capabilities import Capabilities
from .._capsule._read import DLPackInfo, c_strides, device_name
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
from ._subbyte import FLAG_PADDED
from ._subbyte import plan as subbyte_plan

# The CPU alignment XLA and Eigen want (bytes): consumers with ``copies_unaligned`` copy buffers off it.
ALIGNMENT = 64

__all__ = ["ALIGNMENT", "Handoff", "Move", "decide", "refused", "needs_dense", "layout_message", "dense_info",
           "readonly_refusal"]  # fmt: skip


class Move(NamedTuple):
    """A copy to another device before the handoff: ``by`` who ("torch", "cupy uploads", ...)."""

    source: tuple[int, int]
    destination: tuple[int, int]
    by: str


class Handoff(NamedTuple):
    """One conversion, decided: its steps (``steps``, ``str()``), or the error it raises (``error``).

    ``shares`` says whether the result shares the source's memory. ``then`` is the record for the
    array a ``move`` or ``dense`` copy makes (what happens to it next); ``to_json()`` is the plain form.
    """

    source: str  # who exports: a framework's name, a producer's module, or "capsule"
    target: str
    given: DLPackInfo | None = None  # what the decision read (None: decided before any capsule)
    error: type[DLBridgeError] | None = None
    message: str = ""
    plan: Plan | None = None  # how the dtype reaches the consumer: native, reinterpret, view, upcast
    keep: bool = False  # the consumer gets the array itself (its own framework; autograd kept)
    move: Move | None = None
    dense: str | None = None  # who makes the dense copy the consumer needs
    versioned: bool = False  # a 'dltensor_versioned' capsule is handed over (else 'dltensor')
    drop_readonly: bool = False  # READ_ONLY cleared: the import is copied right after (copy=True)
    c_order: bool = False  # strides rewritten as plain C order (size-1 dimensions) for the consumer
    carrier: bool = False  # the consumer is handed an object with __dlpack__, not the bare capsule
    deferred: bool = False  # the consumer asks for the capsule itself, with its own stream
    writable: bool = False  # the consumer's read-only import of mutable memory made writable again
    consumer_copies: bool = False  # the consumer copies what it imports (it never shares CPU memory)
    copy: bool = False  # the result is copied after the import (copy=True)
    fp4: str | None = None  # fp4 in another layout: "pairs"/"elements" relabelled, "repack" a copy (_subbyte)
    then: Handoff | None = None
    raised: BaseException | None = None  # the error as found on the way (its cause kept), if one was
    producer_copy: str | None = None  # the producer exports a copy in the array's place: what it is

    @property
    def shares(self) -> bool:
        """Whether the result shares the source's memory (nothing copied on the way)."""
        if self.error is not None or self.copy or self.move is not None or self.dense is not None:
            return False
        if self.producer_copy is not None:  # the producer exported a copy in the array's place
            return False
        if self.fp4 is not None:
            return self.fp4 != "repack"
        if self.consumer_copies:
            return False
        return self.plan is None or self.plan.mode != "upcast"

    @property
    def native_import(self) -> bool:
        """Whether the consumer imports the capsule as its producer made it (its dtype, layout, flags
        and device): nothing refused, moved, made dense, relabelled, viewed, upcast or rewritten, so the
        consumer's own ``from_dlpack`` takes it too (what the report predicts native imports by)."""
        if self.error is not None or self.keep or self.move is not None or self.dense is not None:
            return False
        if self.fp4 is not None or self.c_order or self.drop_readonly or self.producer_copy is not None:
            return False
        return self.plan is not None and self.plan.mode == "native"

    @property
    def steps(self) -> tuple[str, ...]:
        if self.error is not None:
            return (f"refuse: {self.error.__name__}: {self.message}",)
        if self.keep:
            return (
                f"{self.target} gets the array itself" + (", copied" if self.copy else "") + " (nothing to hand over)",
            )
        steps: list[str] = []
        if self.move is not None:
            (src, dst), by = (_device(self.move.source), _device(self.move.destination)), self.move.by
            steps.append(f"{by} copies it {src} → {dst}")
        elif self.dense is not None:
            steps.append(f"{self.source} export → {self.dense} makes the dense copy {self.target} needs")
        if self.then is not None:
            return (*steps, *self.then.steps)
        if self.fp4 is not None:
            how = {"pairs": "relabelled as float4_e2m1fn_x2 pairs (the same bytes)",
                   "elements": "relabelled as one value a byte (the same bytes)",
                   "repack": "repacked on the host (a copy)"}[self.fp4]  # fmt: skip
            return (f"{self.source} export", f"fp4 {how}", f"import into {self.target}")
        what = "export" if self.producer_copy is None else f"exports {self.producer_copy}"
        steps.append(f"{self.source} {what} ({'dltensor_versioned' if self.versioned else 'dltensor'})")
        if self.drop_readonly:
            steps.append("READ_ONLY cleared for the copy made right after")
        if self.c_order:
            steps.append("strides written as C order")
        how = (
            " (deferred: it asks with its stream)"
            if self.deferred
            else (" (through a carrier)" if self.carrier else "")
        )
        plan = self.plan
        steps.append(f"import as {plan.wire if plan else '?'}{how}")
        if self.consumer_copies:
            steps[-1] += f" ({self.target} copies it)"
        if self.writable:
            steps.append("made writable again (the memory is mutable)")
        if self.copy:
            steps.append("copied (copy=True)")
        if plan is not None and plan.mode == "reinterpret":
            steps.append(f"zero-copy relabel as {plan.logical}")
        elif plan is not None and plan.mode == "view":
            steps.append(f"zero-copy {plan.wire} view (dlbridge remembers it is {plan.logical})")
        elif plan is not None and plan.mode == "upcast":
            steps.append(f"float32 copy of the {plan.logical} values")
        return tuple(steps)

    def __str__(self) -> str:
        return " → ".join(self.steps)

    def raise_error(self) -> None:
        """Raise the refusal, if the record is one (the exception found on the way, cause and all)."""
        if self.raised is not None:
            raise self.raised
        if self.error is not None:
            raise self.error(self.message)

    def to_json(self) -> dict[str, Any]:
        """The record as plain data (JSON-serialisable)."""
        info = self.given
        return {
            "source": self.source,
            "target": self.target,
            "given": None if info is None else {
                "dtype": info.dtype, "shape": list(info.shape), "device": list(info.device),
                "strides": None if info.strides is None else list(info.strides), "readonly": info.readonly,
                "versioned": info.versioned,
            },
            "error": None if self.error is None else self.error.__name__,
            "message": self.message or None,
            "mode": None if self.plan is None else self.plan.mode,
            "logical": None if self.plan is None else self.plan.logical,
            "wire": None if self.plan is None else self.plan.wire,
            "shares": self.shares,
            "producer_copy": self.producer_copy,
            "steps": list(self.steps),
            "then": None if self.then is None else self.then.to_json(),
        }  # fmt: skip


def _device(device: tuple[int, int]) -> str:
    return f"{device_name(device[0])}:{device[1]}"


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
           copy: bool | None, *, source: Adapter | None = None, raw: bool = False) -> Handoff:  # fmt: skip
    """The handoff of the capsule ``info`` describes to ``target`` (capability row ``caps``).

    ``source`` is the producer's adapter (None: a producer dlbridge has no adapter for); ``raw``: the
    caller passed the capsule itself, so no dense copy can be asked of its producer. A read-only
    ``info`` that is not versioned describes an array before its export to a consumer that reads only
    legacy capsules (a capsule read never says so: a legacy one has no flags): its producer refuses
    that export (``ReadOnlyError``, as ``_export`` raises it), unless it exports such arrays' legacy
    capsules unflagged (``Adapter.exports_readonly_legacy``).
    """
    who = info.producer or ("capsule" if raw else "?")
    if info.readonly and not info.versioned:  # a read-only array described for a legacy-only consumer
        if source is not None and source.exports_readonly_legacy:
            info = replace(info, readonly=False)  # its legacy capsule, unflagged (a legacy one has no flags)
        elif copy is not True:  # the export its producer refuses (copy=True: it exports a writable copy)
            fix = source.readonly_fix if source is not None else Adapter.readonly_fix
            return Handoff(who, target.name, info, ReadOnlyError, readonly_refusal(info.describe(), True, fix))
    # fp4 the consumer does not import as it is: another dtype (pairs), or one value a byte (a padded
    # capsule, which a consumer importing float4_e2m1fn would read as two values a byte)
    if info.code == 17 and dtype is None:  # fp4 the consumer does not import as it is (dlbridge._pipeline._subbyte)
        fp4 = _fp4(info, target, caps, fallback, copy, source, raw, who)
        if fp4 is not None:
            return fp4
    if needs_dense(info, caps):
        return _dense(info, target, caps, fallback, dtype, copy, source, raw, who)
    try:
        if dtype is None and info.code != 1 and info.dtype in caps.imports:
            plan = native_plan(info.dtype)  # the common case, without building plan_for's message prefix
        else:
            plan = plan_for(info, caps, fallback, dtype, f"to_{target.name}()")
    except (UnsupportedDtypeError, OptionError) as err:
        return Handoff(who, target.name, info, type(err), str(err))
    error = _refusal(info, target, caps, plan, copy)
    if error is not None:
        return Handoff(who, target.name, info, error[0], error[1], plan)
    producer = ADAPTERS.get(info.producer or "")
    mutable = info.versioned or (producer is not None and producer.mutable_arrays)
    strided = info.strides is not None and info.strides != c_strides(info.shape)
    return Handoff(
        who,
        target.name,
        info,
        plan=plan,
        versioned=info.versioned,
        drop_readonly=info.readonly and not caps.readonly_arrays,
        c_order=caps.row_major_only and strided,
        carrier=not caps.takes_raw_capsules,
        writable=caps.readonly_imports and not info.readonly and mutable,
        consumer_copies=_consumer_copies(info, caps),
        copy=copy is True and not caps.copies_imports,  # a consumer that copies every import made it already
    )


def _refusal(info: DLPackInfo, target: Adapter, caps: Capabilities, plan: Plan,
             copy: bool | None) -> tuple[type[DLBridgeError], str] | None:  # fmt: skip
    """The first check that refuses handing ``info`` over with ``plan``, as (error, message)."""
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
    if info.readonly and not caps.readonly_arrays and copy is not True and not caps.copies_imports:
        return ReadOnlyError, (
            f"{call}: {info.describe()} is read-only and {caps.consumer} arrays cannot be; sharing it would let "
            "writes through. Pass copy=True for a writable copy."
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
    where the other rules decide. A caller's raw capsule is never rewritten or repacked: a padded one
    the consumer would misread is refused, the others go to the dtype rules (a refusal or a view)."""
    padded = bool(info.flags & FLAG_PADDED)
    if info.dtype in caps.imports and not padded:
        return None
    if raw:
        if not padded or info.dtype not in caps.imports:
            return None
        return Handoff(who, target.name, info, LayoutError, (
            f"to_{target.name}(): {info.describe()} holds one fp4 value a byte (IS_SUBBYTE_TYPE_PADDED), which "
            f"{caps.consumer} would read as two a byte; dlbridge repacks arrays, not raw capsules: pass the array itself"
        ))  # fmt: skip
    found = subbyte_plan(info, caps, target, source, fallback, copy)
    if found is None:
        return None
    kind, error, message = found
    if error is not None:
        return Handoff(who, target.name, info, error, message)
    return Handoff(who, target.name, info, keep=kind == "same", fp4=None if kind == "same" else kind,
                   copy=copy is True)  # fmt: skip


def _consumer_copies(info: DLPackInfo, caps: Capabilities) -> bool:
    """Whether the consumer's import of ``info`` is a copy (it copies every import, or this unaligned one)."""
    if not info.size:
        return False
    unaligned = caps.copies_unaligned and info.on_host and info.data_ptr % ALIGNMENT != 0
    return caps.copies_imports or unaligned


def _dense(info: DLPackInfo, target: Adapter, caps: Capabilities, fallback: Fallback, dtype: Any,
           copy: bool | None, source: Adapter | None, raw: bool, who: str) -> Handoff:  # fmt: skip
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
    # A dense array at another address is the copy copy=True asks for (copy=None after it); only
    # re-exported at the same address (a byte_offset dropped) the caller's copy= still applies.
    moved = info.strides is not None and bool(info.size)
    then = decide(dense_info(info), target, caps, fallback, dtype, None if moved else copy, source=source)
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
