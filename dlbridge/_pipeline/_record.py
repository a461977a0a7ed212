"""The handoff record (``Handoff``): what dlbridge does with one array for one consumer, as ``decide``
(``_handoff``) made it. The pipeline runs it, ``dlbridge.explain`` returns it, the fast route replays
the capsules its ``Admission`` says it holds for, the guard checks with it and the report predicts with it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._capsule._read import DLPackInfo, device_name
from .._errors import DLBridgeError
from ._plan import Plan

__all__ = ["Admission", "Handoff", "Move"]


class Move(NamedTuple):
    """A copy to another device before the handoff: ``by`` who ("torch", "cupy uploads", ...)."""

    source: tuple[int, int]
    destination: tuple[int, int]
    by: str


class Admission(NamedTuple):
    """The capsules a record holds for as it is, which the fast route may therefore replay it for: a
    dense C-order capsule (``_probe``'s layout class) with these facts. Made by ``decide`` beside the
    rules it follows; both routes only compare a capsule's facts with these fields."""

    wire: int  # the dtype triple the consumer is handed (code | bits << 8 | lanes << 16)
    triple: int  # the capsule's dtype triple
    device_type: int
    device_id: int
    kinds: int  # the capsule kinds: 1 'dltensor', 2 'dltensor_versioned', 3 both
    readonly_ok: bool  # a READ_ONLY capsule gets the same record
    offset_ok: bool  # a byte_offset (without strides) gets the same record
    align: int  # (data + byte_offset) % align == 0: the consumer's import is the one decided ...
    clear_readonly: bool = False  # READ_ONLY cleared before the import (readonly="drop", or a consumer that copies)
    misaligned: bool = False  # ... or, where True, != 0: a record decided for data below the alignment


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
    drop_readonly: bool = False  # READ_ONLY cleared: the import is copied right after (copy=True), or ...
    shared_readonly: bool = False  # ... read-only memory shared writable, as readonly="drop" asks
    c_order: bool = False  # strides rewritten as plain C order (size-1 dimensions) for the consumer
    carrier: bool = False  # the consumer is handed an object with __dlpack__, not the bare capsule
    deferred: bool = False  # the consumer asks for the capsule itself, with its own stream
    writable: bool = False  # the consumer's read-only import of mutable memory made writable again
    consumer_copies: bool = False  # the consumer copies what it imports (it never shares CPU memory)
    copy: bool = False  # the result is copied after the import (copy=True)
    fp4: str | None = None  # fp4 in another layout: "pairs"/"elements" relabelled, "repack" a copy (_subbyte)
    then: Handoff | None = None
    raised: BaseException | None = None  # the error as found on the way (its cause kept), if one was
    admits: Admission | None = None  # the capsules this record holds for (a stored route replays it)
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
        if self.error is not None and self.then is None:  # (with ``then``: explain's chain that ends refused)
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
        if self.shared_readonly:
            steps.append(
                'READ_ONLY cleared (readonly="drop"): the read-only memory is shared writable, not to be written'
            )
        elif self.drop_readonly:
            copied = self.copy or self.consumer_copies or (self.plan is not None and self.plan.mode == "upcast")
            steps.append(
                "READ_ONLY cleared "
                + ("for the copy made right after" if copied else "(dlbridge's own copy: nothing else holds it)")
            )
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
