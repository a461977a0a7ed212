"""The report's data: cells, what the capability table predicted for them, and the JSON form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ATTEMPTS", "Attempt", "Cell", "Report", "RESULTS", "MODES"]

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

    @classmethod
    def from_worker(cls, data: dict[str, Any]) -> Attempt:
        return cls(data["status"], data.get("error"), bool(data.get("clean")), data.get("mode"),
                   data.get("zero_copy"), bool(data.get("export_failed")))  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {"result": self.status, "error": self.error, "mode": self.mode, "zero_copy": self.zero_copy}


@dataclass
class Cell:
    producer: str
    producer_device: str
    consumer: str
    dtype: str
    attempts: dict[str, Attempt] = field(default_factory=dict)
    predicted: str | None = None  # what the capability table says native does: "ok", "error", "crash"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.producer, self.producer_device, self.consumer, self.dtype)

    @property
    def label(self) -> str:
        return f"{self.producer}:{self.producer_device} → {self.consumer} {self.dtype}"

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
        if self.predicted is None or self.native.export_failed:
            return None  # the table describes consumers; a producer that cannot export says nothing
        seen = self.native.status
        if (self.predicted == "ok") == (seen == "ok") and (self.predicted == "crash") == (seen == "crash"):
            return None
        said = {"ok": "imports it", "error": "does not import it", "crash": "crashes on it"}[self.predicted]
        if seen == "ok":
            found = "from_dlpack returned the right values"
        elif seen == "crash":
            found = f"from_dlpack crashed the process ({self.native.error})"
        elif seen == "wrong":
            found = f"from_dlpack returned a wrong result ({self.native.error})"
        else:
            found = f"from_dlpack raised {self.native.error}"
        return f"table: {self.consumer} {said}; probe: {found}"

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
            "zero_copy": d.zero_copy,
            "view": v.as_dict(),
            "table_predicts": self.predicted,
            "table_disagrees": self.disagreement(),
        }


@dataclass
class Report:
    meta: dict[str, Any]  # date, machine, python, gpu, command, elapsed, partial, ...
    versions: dict[str, str]
    cells: list[Cell]
    not_made: list[dict[str, str]]  # producer, producer_device, dtype, why
    caps: dict[str, Any] = field(default_factory=dict)

    def disagreements(self) -> list[tuple[Cell, str]]:
        return [(c, why) for c in self.cells if (why := c.disagreement()) is not None]

    def dlbridge_failures(self) -> list[tuple[Cell, str, Attempt]]:
        """dlbridge attempts that crashed, were wrong, or failed without a dlbridge error."""
        bad = []
        for cell in self.cells:
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
            "not_made": self.not_made,
            "table_disagrees": [{"cell": c.label, "why": why} for c, why in self.disagreements()],
        }


def predict(cell: Cell, caps: dict[str, Any], device_codes: dict[str, int]) -> str | None:
    """What the capability table says the consumer's own from_dlpack does with this cell."""
    c = caps.get(cell.consumer)
    if c is None:
        return None
    if device_codes[cell.producer_device] not in c["device_codes"]:
        return "error"  # the consumer cannot live on the producer's device
    if cell.dtype in c["imports"]:
        return "ok"
    return "crash" if c["crashes_on_reject"] else "error"
