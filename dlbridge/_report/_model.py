"""The report's data: cells, what the capability table predicted for them, and the JSON form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._adapters import ADAPTERS
from .._capabilities import Capabilities
from .._capsule._read import DLPackInfo, device_name
from .._dtypes import BY_NAME, DType, dtype_name
from .._errors import ReadOnlyError
from .._pipeline._devices import home_of
from .._pipeline._handoff import COPIED, Handoff, decide
from ._cases import REPORTED

__all__ = ["ATTEMPTS", "Attempt", "Cell", "Export", "Report", "RESULTS", "MODES", "predict", "predict_layout",
           "predict_export", "caps_entry", "capabilities_of"]  # fmt: skip

ATTEMPTS = ("native", "dlbridge", "view")
RESULTS = ("ok", "error", "crash", "wrong")
MODES = ("native", "reinterpret", "view", "upcast", "copy", "raise")


@dataclass
class Attempt:
    status: str  # one of RESULTS
    error: str | None = None  # "Type: message", the reason a result is wrong, or a signal name
    clean: bool = False  # the error is a DLBridgeError (an explained refusal)
    mode: str | None = None  # what the path did (MODES); native attempts say "native"
    zero_copy: bool | None = None
    export_failed: bool = False  # the producer's own __dlpack__() raised: not the consumer's doing
    readonly: bool | None = None  # layout cells: whether the result is read-only (None: not asked)
    steps: str | None = None  # dlbridge attempts: the handoff record it ran (dlbridge.explain's str())

    @classmethod
    def from_worker(cls, data: dict[str, Any]) -> Attempt:
        return cls(data["status"], data.get("error"), bool(data.get("clean")), data.get("mode"),
                   data.get("zero_copy"), bool(data.get("export_failed")), data.get("readonly"),
                   data.get("steps"))  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {"result": self.status, "error": self.error, "mode": self.mode, "zero_copy": self.zero_copy,
                "readonly": self.readonly, "steps": self.steps}  # fmt: skip


@dataclass
class Cell:
    producer: str
    producer_device: str
    consumer: str
    dtype: str
    attempts: dict[str, Attempt] = field(default_factory=dict)
    predicted: str | None = None  # what the capability table says native does: "ok", "wrong", "error", "crash"
    layout: str = "dense"  # or one of _cases.LAYOUTS: a transposed or read-only view as the source
    predicted_readonly: bool | None = None  # layout cells: whether a native result is read-only
    predicted_dlbridge: str | None = None  # layout cells: "ok", "copy", "readonly" or "ReadOnlyError"
    readonly_source: bool = False  # a dense cell of a producer whose every array is read-only (Arrow's)

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.producer, self.producer_device, self.consumer, self.dtype, self.layout)

    @property
    def label(self) -> str:
        what = self.dtype if self.layout == "dense" else f"{self.dtype} {self.layout}"
        return f"{self.producer}:{self.producer_device} → {self.consumer} {what}"

    @property
    def complete(self) -> bool:
        return all(a in self.attempts for a in ATTEMPTS)

    @property
    def native(self) -> Attempt:
        return self.attempts["native"]

    @property
    def dlbridge(self) -> Attempt:
        return self.attempts["dlbridge"]

    @property
    def view(self) -> Attempt:
        return self.attempts["view"]

    def disagreement(self) -> str | None:
        """How the probe contradicts the capability table's prediction, or None."""
        return self._native_disagreement() or self._dlbridge_disagreement()

    def _native_disagreement(self) -> str | None:
        if self.predicted is None or self.native.export_failed:
            return None  # the table describes consumers; a producer that cannot export says nothing
        seen = self.native.status
        if self.predicted == "ok" == seen and self.predicted_readonly not in (None, self.native.readonly):
            said = "read-only" if self.predicted_readonly else "writable"
            got = "read-only" if self.native.readonly else "writable"
            return f"table: {self.consumer} makes a {said} array of it; probe: from_dlpack returned a {got} one"
        if self.predicted == "wrong":  # the producer's capsule mislabels it (producer rows): a wrong dtype
            if seen == "wrong":
                return None
        elif (self.predicted == "ok") == (seen == "ok") and (self.predicted == "crash") == (seen == "crash"):
            return None
        said = {"ok": "imports it", "error": "does not import it", "crash": "crashes on it",
                "wrong": "imports the producer's mislabelled capsule as another dtype"}[self.predicted]  # fmt: skip
        if seen == "ok":
            found = "from_dlpack returned the right values"
        elif seen == "crash":
            found = f"from_dlpack crashed the process ({self.native.error})"
        elif seen == "wrong":
            found = f"from_dlpack returned a wrong result ({self.native.error})"
        else:
            found = f"from_dlpack raised {self.native.error}"
        return f"table: {self.consumer} {said}; probe: {found}"

    def _dlbridge_disagreement(self) -> str | None:
        want, a = self.predicted_dlbridge, self.dlbridge
        if want is None:
            return None
        if want == "ReadOnlyError":
            if a.status == "error" and (a.error or "").startswith("ReadOnlyError"):
                return None
        elif a.status == "ok" and (want != "copy" or a.zero_copy is False) and (want != "readonly" or a.readonly):
            return None
        said = {"ok": "converts it", "copy": "converts it through a dense copy",
                "readonly": "converts it to a read-only array", "ReadOnlyError": "refuses it (ReadOnlyError)"}[want]  # fmt: skip
        if a.status != "ok":
            found = f"{a.status}: {a.error}"
        else:
            sharing = "shared" if a.zero_copy else "copied"
            found = f"converted ({a.mode}, {sharing}, {'read-only' if a.readonly else 'writable'})"
        return f"table: dlbridge {said} for {self.consumer}; probe: {found}"

    def as_dict(self) -> dict[str, Any]:
        n, d, v = self.native, self.dlbridge, self.view
        return {
            "producer": self.producer,
            "producer_device": self.producer_device,
            "consumer": self.consumer,
            "dtype": self.dtype,
            "native": n.status,
            "native_error": n.error,
            "native_zero_copy": n.zero_copy,
            "native_export_failed": n.export_failed,
            "dlbridge": d.status,
            "dlbridge_error": d.error,
            "dlbridge_mode": d.mode,
            "dlbridge_steps": d.steps,
            "zero_copy": d.zero_copy,
            "view": v.as_dict(),
            "table_predicts": self.predicted,
            "table_disagrees": self.disagreement(),
            **({} if self.layout == "dense" and not self.readonly_source else {
                "layout": self.layout,
                "native_readonly": n.readonly,
                "dlbridge_readonly": d.readonly,
                "table_predicts_readonly": self.predicted_readonly,
                "table_predicts_dlbridge": self.predicted_dlbridge,
            }),
        }  # fmt: skip


@dataclass
class Export:
    """What one producer's capsule says for one dtype it makes, against its producer rows."""

    producer: str
    producer_device: str
    dtype: str
    raw: str  # the dtype its own __dlpack__() capsule says, or "refused: <error>"
    adapter: str  # the same through dlbridge's export (the adapter's fixes), or "refused: <error>"
    predicted: str  # "refused" (cannot_export), the label the producer rows say its capsule has, or the dtype

    @property
    def label(self) -> str:
        return f"{self.producer}:{self.producer_device} exports {self.dtype}"

    def disagreement(self) -> str | None:
        return self._raw_disagreement() or self._adapter_disagreement()

    def _raw_disagreement(self) -> str | None:
        refused = self.raw.startswith("refused")
        if self.predicted == "refused":
            if refused:
                return None
            said = "cannot export it"
        elif self.predicted != self.dtype:  # a mislabel the rows know (exports_uint8, exports_as_float)
            if self.raw == self.predicted:
                return None
            said = f"labels its capsule {self.predicted}"
        else:  # exported as is, or (NumPy's ml_dtypes arrays) through the adapter's export
            if self.raw == self.dtype or (refused and self.adapter == self.dtype):
                return None
            said = "exports it as is"
        found = self.raw if refused else f"__dlpack__() says {self.raw}"
        return f"table: {self.producer} {said}; probe: {found} (dlbridge's export: {self.adapter})"

    def _adapter_disagreement(self) -> str | None:
        """dlbridge's own export (the adapter's) must say the true dtype, or refuse: a capsule it makes
        with another label would hand every consumer the wrong dtype."""
        if self.adapter == self.dtype or self.adapter.startswith("refused"):
            return None
        return f"dlbridge's export of {self.producer}'s {self.dtype} says {self.adapter} (its __dlpack__: {self.raw})"

    def as_dict(self) -> dict[str, Any]:
        return {"producer": self.producer, "producer_device": self.producer_device, "dtype": self.dtype,
                "raw": self.raw, "adapter": self.adapter, "table_predicts": self.predicted,
                "table_disagrees": self.disagreement()}  # fmt: skip


@dataclass
class Report:
    meta: dict[str, Any]  # date, machine, python, gpu, command, elapsed, partial, ...
    versions: dict[str, str]
    cells: list[Cell]
    not_made: list[dict[str, str]]  # producer, producer_device, dtype, why
    caps: dict[str, Any] = field(default_factory=dict)
    layout_cells: list[Cell] = field(default_factory=list)  # transposed and read-only sources
    exports: list[Export] = field(default_factory=list)  # producer x dtype: what its capsule says

    def disagreements(self) -> list[tuple[Cell | Export, str]]:
        found: list[tuple[Cell | Export, str]] = []
        items: list[Cell | Export] = [*self.cells, *self.layout_cells, *self.exports]
        for item in items:
            why = item.disagreement()
            if why is not None:
                found.append((item, why))
        return found

    def dlbridge_failures(self) -> list[tuple[Cell, str, Attempt]]:
        """dlbridge attempts that crashed, were wrong, or failed without a dlbridge error."""
        bad = []
        for cell in (*self.cells, *self.layout_cells):
            for name in ("dlbridge", "view"):
                a = cell.attempts[name]
                if a.status in ("crash", "wrong") or (a.status == "error" and not a.clean):
                    bad.append((cell, name, a))
        return bad

    def to_json(self) -> dict[str, Any]:
        return {
            "versions": self.versions,
            "meta": self.meta,
            "cells": [c.as_dict() for c in self.cells],
            "layout_cells": [c.as_dict() for c in self.layout_cells],
            "exports": [e.as_dict() for e in self.exports],
            "not_made": self.not_made,
            "table_disagrees": [{"cell": c.label, "why": why} for c, why in self.disagreements()],
        }


def caps_entry(c: Any) -> dict[str, Any]:
    """A consumer's ``Capabilities`` as JSON (made in the worker; ``capabilities_of`` reads it back)."""
    return {k: sorted(v) if isinstance(v, frozenset) else v for k, v in c._asdict().items()}


def capabilities_of(entry: dict[str, Any]) -> Capabilities:
    """The ``Capabilities`` a ``caps_entry`` was made from."""
    fields: dict[str, Any] = {k: frozenset(v) if isinstance(v, list) else v
                              for k, v in entry.items() if k in Capabilities._fields}  # fmt: skip
    return Capabilities(**fields)


def predict(cell: Cell, caps: dict[str, Any], device_codes: dict[str, int]) -> str | None:
    """What the capability table says the consumer's own from_dlpack does with this cell's dense
    capsule, as the producer rows say the producer labels it (``predict_export``): "ok" where the
    pipeline would import that label as it is (``Handoff.native_import``) and it is the true dtype,
    "wrong" where it is another (the consumer imports a mislabelled capsule; a consumer that reads
    bool off the source itself, ``detects_bool_sources``, gets it right), else "crash" where the
    consumer crashes on what it rejects, or "error". A device the consumer cannot use is "error" (the
    pipeline's device rule, ``_devices.home_of``); a dtype the producer cannot export is "error" (no
    capsule: the cell is then judged as the producer's refusal, not the consumer's). A read-only source
    of a producer that makes legacy capsules only: None (its capsule cannot say read-only, and pyarrow
    < 26's has no data: what a consumer makes of it is undefined)."""
    entry = caps.get(cell.consumer)
    if entry is None or _legacy_readonly(cell, caps):
        return None
    c = capabilities_of(entry)
    label = predict_export(cell.producer, cell.dtype, caps)
    if label == "refused":
        return "error"
    record = _decided(cell, c, device_codes, "dense", readonly=False, label=label, native=True)
    if record is None:
        return "error"  # the consumer cannot use the producer's device (the pipeline moves it first)
    if record.native_import:
        right = label == cell.dtype or (cell.dtype == "bool" and c.detects_bool_sources)
        return "ok" if right else "wrong"
    return "crash" if c.crashes_on_reject else "error"


def predict_layout(cell: Cell, caps: dict[str, Any], device_codes: dict[str, int]) -> None:
    """Fill in what the table says about a layout cell, only where a row speaks to it.

    Native: transposed, the consumer takes the strided capsule unless ``row_major_only`` (whose
    from_dlpack of an array may take another path: not predicted); read-only, ``readonly_arrays`` (or
    ``readonly_imports``) give a read-only result. dlbridge: what ``decide`` makes of the capsule
    (``_dlbridge_layout``). No row: no prediction. A dense cell of a producer whose every array is
    read-only (``Cell.readonly_source``) is judged as a read-only source of its dtype.
    """
    c = caps.get(cell.consumer)
    cell.predicted, cell.predicted_readonly, cell.predicted_dlbridge = predict(cell, caps, device_codes), None, None
    if c is not None and _legacy_readonly(cell, caps):  # dlbridge refuses it before the producer is asked
        cell.predicted_dlbridge = _dlbridge_layout(cell, capabilities_of(c), device_codes, legacy=True)
        return
    if c is None or cell.predicted != "ok":  # another device, or a dtype it does not import
        return
    readonly = c["readonly_arrays"] or c["readonly_imports"]
    if cell.layout == "transposed":
        cell.predicted = None if c["row_major_only"] else "ok"
    elif cell.layout == "readonly" or cell.readonly_source:
        cell.predicted = "ok" if readonly else None
        cell.predicted_readonly = True if readonly else None
    cell.predicted_dlbridge = _dlbridge_layout(cell, capabilities_of(c), device_codes)


def _legacy_readonly(cell: Cell, caps: dict[str, Any]) -> bool:
    """Whether the cell's source is read-only and its producer makes legacy capsules only (its rows)."""
    readonly = cell.layout == "readonly" or cell.readonly_source
    return readonly and bool(caps.get(cell.producer, {}).get("exports_legacy_only"))


def _decided(cell: Cell, caps: Capabilities, device_codes: dict[str, int], layout: str, readonly: bool,
             label: str | None = None, legacy: bool = False, native: bool = False) -> Handoff | None:  # fmt: skip
    """``decide``'s record for the cell's source (``layout``, ``readonly``) as its producer exports it
    for ``caps`` (versioned where the consumer reads versioned capsules and the producer makes them,
    not ``legacy``) on the producer's device; None where the consumer cannot use that device
    (``home_of``: the pipeline moves the memory). ``native``: what the consumer's own from_dlpack makes
    of the capsule, which knows nothing of the producer's immutable arrays (decided as for an array
    nothing else holds, ``COPIED``: only the capsule's own READ_ONLY flag counts)."""
    target = ADAPTERS[cell.consumer]
    home, usable = home_of((device_codes[cell.producer_device], 0), target)
    if not usable:
        return None
    shape, strides = ((6, 4), (1, 6)) if layout == "transposed" else ((4, 6), None)
    label = label or cell.dtype  # the dtype the producer's capsule says (its export rows)
    d, versioned = BY_NAME.get(label) or _FLOAT_LABELS[label], caps.versioned_capsules and not legacy
    info = DLPackInfo(label, d.code, d.bits, d.lanes, device_name(home[0]), home[1], shape, strides, 0, 64,
                      readonly, versioned, (1, 3) if versioned else None, cell.producer, device_code=home[0])  # fmt: skip
    return decide(info, target, caps, "raise", None, None, source=REPORTED.get(cell.producer),
                  readonly=COPIED if native else "keep")  # fmt: skip


def _dlbridge_layout(cell: Cell, caps: Capabilities, device_codes: dict[str, int], legacy: bool = False) -> str | None:
    """What ``decide`` does with the layout cell's capsule (as the producer exports it for ``caps``):
    "ok", "copy" (a dense copy first), "readonly" (shared read-only: the capsule's READ_ONLY honoured,
    or the consumer's arrays are immutable) or "ReadOnlyError". ``legacy``: the producer makes legacy
    capsules only (its rows), which a read-only array is never exported as."""
    readonly = cell.layout == "readonly" or cell.readonly_source
    record = _decided(cell, caps, device_codes, cell.layout, readonly, legacy=legacy)
    if record is None or record.error is not None:
        return "ReadOnlyError" if record is not None and record.error is ReadOnlyError else None
    if record.dense is not None:
        return "copy"
    # Read-only memory stays read-only unless READ_ONLY was dropped (a copy): where the consumer has read-only
    # arrays, makes every import read-only, or has immutable arrays only.
    holds = caps.readonly_arrays or caps.readonly_imports or not ADAPTERS[cell.consumer].mutable_arrays
    return "readonly" if readonly and not record.drop_readonly and holds else "ok"


def predict_export(producer: str, dtype: str, caps: dict[str, Any]) -> str:
    """What the producer rows say its own capsule for ``dtype`` is: "refused", the label it has
    ("uint8" for exports_uint8, "float8" for kDLFloat with 8 bits, exports_as_float) or ``dtype``."""
    c = caps.get(producer, {})
    if dtype in c.get("cannot_export", ()):
        return "refused"
    d = BY_NAME[dtype]
    if dtype in c.get("exports_uint8", ()):
        return "uint8"
    if dtype in c.get("exports_as_float", ()):
        return dtype_name(2, d.bits, d.lanes)
    return dtype


# The kDLFloat labels of producers that label by kind (exports_as_float): no dtype dlbridge names.
_FLOAT_LABELS = {dtype_name(2, bits): DType(2, bits) for bits in (4, 6, 8)}
