"""compat_matrix.md: header, legend, one table per producer device, summary, table disagreements.

``parse`` reads the file back (header fields and table rows), so tests can check that the
committed matrix is well formed and covers every consumer.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from .._adapters import ADAPTERS, HOST
from .._dtypes import BY_NAME, unsigned_of_width
from ._cases import BASE_DTYPES, FRAMEWORKS, REPORTED, short_dtype
from ._doctor import COMPANIONS, installed_versions
from ._model import Attempt, Cell, Report

__all__ = ["render", "parse", "cell_text", "REFUSED"]

TITLE = "# dlbridge compatibility matrix"
EXOTIC = frozenset(n for n in BY_NAME if n.startswith("float8_")) - set(BASE_DTYPES)  # their own table
EXOTIC_SUFFIX = ": other fp8 formats"
_ARROW = " → "
REFUSED = "🛡 refused"
LEGEND = f"""\
Each cell is one producer array handed to one consumer: `native → dlbridge`.

- **native** is the consumer's own `from_dlpack` on the producer's array. **dlbridge** is
  `dlbridge.convert(x, consumer)` with the default `fallback="raise"`; `/ view(uintN)` says
  what `fallback="view"` gives when the default refuses.
- `✓` alone: both paths give the right dtype and bit-identical values, sharing memory.
- `✓` right dtype and values · `✗ Error` raised that exception · `✗ export` the *producer's*
  `__dlpack__` refused (the exception is in the JSON) · `💥 SIGNAL` the process died (probed in
  a child process) · `≠ …` a wrong result (other dtype or values) · `copied`: right values, not shared.
- dlbridge modes: `native` imported as is; `reinterpret` imported as a same-width unsigned
  integer and viewed as the true dtype (zero-copy); `view(uintN)` the unsigned view itself;
  `upcast` a float32 copy; `copy` moved to the consumer's device.
- `{REFUSED}`: dlbridge refused on purpose with a clear error saying what to pass (no crash,
  no silent change): a safe outcome, not a conversion.
- `—`: the producer cannot make this dtype (the summary says why). {HOST.display} sources of bf16/fp8 are
  {HOST.dtype_addon} arrays.
- Values are compared as bit patterns against the source; memory sharing as data pointers.
  Sources are 4x6 arrays at 64-byte aligned addresses (some consumers copy CPU buffers that are not).
- Layouts: f32 sources that are a transposed view (strided) or a read-only view (READ_ONLY capsule),
  where the producer makes them; `🔒` a read-only result. Every producer's capsule dtype is also
  checked against its export rows; both feed "Table disagrees"."""


def _short_error(a: Attempt) -> str:
    text = (a.error or "").split(":")[0].split(" (")[0].strip()
    return text or "error"


def _width_uint(dtype: str) -> str:
    d = BY_NAME.get(dtype)
    return (unsigned_of_width(d.width) or "uint?") if d else "uint?"


def _attempt_text(a: Attempt, dtype: str, *, native: bool) -> str:
    if a.status == "crash":
        return f"💥 {(a.error or 'crash').split(' ')[0]}"
    if a.status == "wrong":
        got = (a.error or "").removeprefix("dtype ").split(",")[0] if (a.error or "").startswith("dtype") else "values"
        return f"≠ {got}"
    if a.status == "error":
        if not native and a.clean:
            return REFUSED
        return "✗ export" if a.export_failed else f"✗ {_short_error(a)}"
    copied = " copied" if a.zero_copy is False and a.mode in ("native", "reinterpret", "view") else ""
    copied += " 🔒" if a.readonly else ""
    if native:
        return "✓" + copied
    mode = f"view({_width_uint(dtype)})" if a.mode == "view" else (a.mode or "?")
    return f"✓ {mode}{copied}"


def cell_text(cell: Cell) -> str:
    n, d, v = cell.native, cell.dlbridge, cell.view
    view_failed = v.status in ("crash", "wrong") or (v.status == "error" and not v.clean)
    plain = not (n.readonly or d.readonly)
    if (
        n.status == "ok"
        and n.zero_copy
        and d.status == "ok"
        and d.mode == "native"
        and d.zero_copy
        and not view_failed
        and plain
    ):
        return "✓"
    text = f"{_attempt_text(n, cell.dtype, native=True)}{_ARROW}{_attempt_text(d, cell.dtype, native=False)}"
    if (d.status == "error" and v.status == "ok") or view_failed:
        text += f" / view: {_attempt_text(v, cell.dtype, native=False)}".replace("view: ✓ view(", "view(")
    return text


# --- rendering -----------------------------------------------------------------------------------


def _header(report: Report) -> list[str]:
    m = report.meta
    cuda = bool(m.get("cuda_producers"))
    if cuda:
        run = "CUDA and CPU"
    elif "cuda" not in m.get("devices", ["cuda"]):
        run = "CPU only (--devices cpu); the CUDA matrix is pending a run with --devices cuda"
    else:
        run = "CPU only: no CUDA device here; the CUDA matrix is pending a run on a GPU machine"
    rows = [("run", run), ("date", m["date"]), ("machine", m["machine"])]
    gpu = (m.get("gpu_driver") or f"{m.get('gpu') or 'unknown'} (driver: nvidia-smi not found)") if cuda else None
    rows.append(("GPU (name, driver)", gpu or "none detected"))
    rows.append(("Python", m["python"]))
    installed = installed_versions()
    failed = m.get("import_failed") or {}
    for name in (*FRAMEWORKS, *COMPANIONS):
        probed = report.versions.get(name)
        if name in failed:
            probed = f"{installed.get(name) or '?'} (not probed: importing it failed: {failed[name]})"
        rows.append((name, probed or (f"{installed[name]} (not probed)" if installed.get(name) else "not installed")))
    rows.append(("dlbridge", m["dlbridge"]))
    notes = m.get("support")
    if notes is not None:  # below a floor, or outside the releases the rows were probed on
        rows.append(("supported versions", "; ".join(notes) if notes else "every framework probed is at or above "
                     "dlbridge's floor and inside the releases its capability rows were probed on"))  # fmt: skip
    rows.append(("command", f"`{m['command']}`"))
    took = f"{m['elapsed_s']} s, {m['jobs']} worker processes"
    if m.get("partial"):
        took += f" — INTERRUPTED: {m['cells_done']} of {m['cells_planned']} cells"
    rows.append(("took", took))
    out = [TITLE, "", "Generated by `dlbridge report`; do not edit by hand, regenerate it with the command below.", ""]
    if not cuda:
        gpu = ", ".join(a.display for a in ADAPTERS.values() if "cuda" in a.producer_devices)
        why = ("CUDA was left out (--devices cpu)" if "cuda" not in report.meta.get("devices", ["cuda"])
               else "No CUDA device was available")  # fmt: skip
        out += [f"> **CPU-only run.** {why}, so only CPU producers were probed. "
                f"The CUDA matrix ({gpu} on CUDA) is pending a run on a GPU machine.", ""]  # fmt: skip
    out += ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    return out


def _table(report: Report, device: str, dtypes: list[str]) -> list[str]:
    made = {(c.producer, c.producer_device, c.dtype) for c in report.cells}
    by_row: dict[tuple[str, str], dict[str, Cell]] = defaultdict(dict)
    for c in report.cells:
        if c.producer_device == device:
            by_row[(c.producer, c.consumer)][c.dtype] = c
    out = ["| producer → consumer | " + " | ".join(short_dtype(d) for d in dtypes) + " |"]
    out.append("|---" * (len(dtypes) + 1) + "|")
    for (producer, consumer), cells in by_row.items():
        if not any(d in cells for d in dtypes):
            continue
        texts = [
            cell_text(cells[d]) if d in cells else ("—" if (producer, device, d) not in made else "") for d in dtypes
        ]
        out.append(f"| {producer}:{device}{_ARROW}{consumer} | " + " | ".join(texts) + " |")
    return [*out, ""]


def _tables(report: Report) -> list[str]:
    """Per producer device: the core dtypes, then (when probed) the other fp8 formats in their own table."""
    dtypes: list[str] = report.meta["dtypes"]
    core = [d for d in dtypes if d in BASE_DTYPES or d not in EXOTIC]
    exotic = [d for d in dtypes if d not in core]
    out: list[str] = []
    for device in dict.fromkeys(c.producer_device for c in report.cells):
        if core:
            out += [f"## Producers on {device}", "", *_table(report, device, core)]
        if exotic:
            out += [f"## Producers on {device}{EXOTIC_SUFFIX}", "", *_table(report, device, exotic)]
    key = ", ".join(f"{short_dtype(d)} = {d}" for d in dtypes if short_dtype(d) != d)
    return [*out, f"Columns: {key}.", ""]


_LAYOUT_COLUMNS = {"transposed": "transposed", "readonly": "read-only"}


def _layouts(report: Report) -> list[str]:
    """Per producer device: producer → consumer rows, one column per layout (f32 sources)."""
    if not report.layout_cells and not report.exports:
        return []
    out = ["## Layouts and read-only sources", ""]
    columns = [k for k in _LAYOUT_COLUMNS if any(c.layout == k for c in report.layout_cells)]
    for device in dict.fromkeys(c.producer_device for c in report.layout_cells):
        by_row: dict[tuple[str, str], dict[str, Cell]] = defaultdict(dict)
        for c in report.layout_cells:
            if c.producer_device == device:
                by_row[(c.producer, c.consumer)][c.layout] = c
        out += [f"Producers on {device}:", ""]
        out.append("| producer → consumer | " + " | ".join(_LAYOUT_COLUMNS[k] for k in columns) + " |")
        out.append("|---" * (len(columns) + 1) + "|")
        for (producer, consumer), cells in by_row.items():
            texts = [cell_text(cells[k]) if k in cells else "—" for k in columns]
            out.append(f"| {producer}:{device}{_ARROW}{consumer} | " + " | ".join(texts) + " |")
        out.append("")
    refused = sum(e.raw.startswith("refused") for e in report.exports)
    out += [f"Producer exports: {len(report.exports)} producer x dtype capsules read ({refused} refused by the "
            "producer's own `__dlpack__`) and checked against the table's `exports_uint8` and `cannot_export` "
            "rows.", ""]  # fmt: skip
    return out


def _reason(cell: Cell, report: Report) -> str:
    err = cell.dlbridge.error or ""
    kind = err.split(":")[0]
    version = report.caps.get(cell.consumer, {}).get("version", "")
    if kind == "DeviceMismatchError":
        return f"{kind}: {cell.consumer} cannot use {cell.producer_device} memory without a copy (pass device= or copy=True)"
    if kind == "UnsupportedDtypeError":
        return f"{kind}: {cell.consumer} {version} cannot hold these dtypes"
    if kind == "ReadOnlyError":
        fix = 'copy=True or readonly="drop"' if 'readonly="drop"' in err else "copy=True"  # (as dlbridge's message)
        return f"{kind}: {cell.producer}'s arrays are read-only and {cell.consumer} {version} arrays cannot be (pass {fix})"
    return err[:160]


def _summary(report: Report) -> list[str]:
    cells = report.cells
    m = report.meta
    native = Counter(c.native.status for c in cells)
    export = sum(c.native.export_failed for c in cells)
    modes = Counter(c.dlbridge.mode for c in cells if c.dlbridge.status == "ok")
    dl = Counter(c.dlbridge.status for c in cells)
    refused = sum(c.dlbridge.status == "error" and c.dlbridge.clean for c in cells)
    fixed = [c for c in cells if c.native.status != "ok" and c.dlbridge.status == "ok"]
    saved = [c for c in cells if c.native.status == "crash" and c.dlbridge.status != "crash"]
    caught = [c for c in cells if c.native.status == "wrong" and c.dlbridge.status != "wrong"]
    out = [
        "## Summary",
        "",
        f"- {len(cells)} cells (producer x consumer x dtype), each tried 3 ways: {3 * len(cells)} attempts "
        f"in {m['elapsed_s']} s with {m['jobs']} worker processes.",
        f"- **Broken natively: {len(cells) - native['ok']}** — {native['error']} raised "
        f"({export} because the producer refused to export), {native['crash']} crashed the process, "
        f"{native['wrong']} gave a wrong result.",
        f"- **Crashes: {native['crash']} native, {dl['crash']} through dlbridge.**",
        f"- dlbridge (default fallback): {dl['ok']} converted ("
        + ", ".join(f"{k} {v}" for k, v in sorted(modes.items()))
        + f"), {refused} refused with a dlbridge error.",
        f"- **Fixed by dlbridge: {len(fixed)}** cells broken natively that dlbridge converts correctly; "
        f"{len(saved)} native crashes and {len(caught)} wrong results replaced by a conversion or a clear error.",
    ]
    groups: dict[str, list[Cell]] = defaultdict(list)
    for c in cells:
        if c.dlbridge.status == "error" and c.dlbridge.clean:
            groups[_reason(c, report)].append(c)
    out += ["", '**Still unsupported, and why** (dlbridge refuses; `fallback="view"` helps where noted):', ""]
    for reason, group in sorted(groups.items()):
        pairs = sorted({f"{c.producer}:{c.producer_device}{_ARROW}{c.consumer}" for c in group})
        dts = ", ".join(dict.fromkeys(short_dtype(c.dtype) for c in group))
        views = sum(c.view.status == "ok" for c in group)
        out.append(f'- {reason} — {dts} ({", ".join(pairs)}); fallback="view" works for {views} of {len(group)}.')
        out.append(f"  dlbridge says: “{(group[0].dlbridge.error or '').partition(': ')[2]}”")
    if not groups:
        out.append("- nothing: every cell converts.")
    if report.not_made:
        made: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))  # producer -> why -> dtypes
        for row in report.not_made:
            made[f"{row['producer']}:{row['producer_device']}"][row["why"]].append(short_dtype(row["dtype"]))
        out += ["", "**Not probed: the producer cannot make these** — " + "; ".join(
            f"{k}: " + ", ".join(f"{', '.join(dts)} ({why})" for why, dts in whys.items()) for k, whys in made.items()
        ) + "."]  # fmt: skip
    bad = report.dlbridge_failures()
    out += ["", "**dlbridge failures** (crash, wrong result, or an error that is not a dlbridge error):", ""]
    out += [f"- {c.label} ({name}): {a.status} — {a.error}" for c, name, a in bad] or ["- none."]
    return [*out, ""]


def _disagreements(report: Report) -> list[str]:
    found = report.disagreements()
    out = ["## Table disagrees", "",
           "Cells where the capability table (`dlbridge._capabilities.table()`, adjusted for runtime settings such "
           "as a framework's 64-bit mode) predicted a different native outcome than the probe saw (for layout "
           "cells also a different read-only result or dlbridge outcome), and producer capsules whose dtype the "
           "export rows did not predict. Cells where the producer itself refused to export are not compared.",
           ""]  # fmt: skip
    out += [f"- {c.label}: {why}" for c, why in found] or ["- none: every probed cell matched the table."]
    return [*out, ""]


def _producers_only(report: Report) -> list[str]:
    """Legend lines for rows of frameworks dlbridge reads from but converts into none, and for
    producers whose every array is read-only."""
    out = []
    only = list(dict.fromkeys(c.producer for c in report.cells if c.producer not in ADAPTERS))
    if only:
        names = ", ".join(REPORTED[p].display or p for p in only)
        out.append(f"- {names}: a producer only (dlbridge reads its arrays and converts into none): rows, no column.")
    readonly = [k.replace(":", " on ") for k in report.meta.get("readonly_sources", ())]
    if readonly:
        out.append(f"- Every array of {', '.join(readonly)} is read-only (its framework's arrays are immutable, "
                   "whatever their capsules say, or its capsules are flagged READ_ONLY): its cells are judged as "
                   "read-only sources, and consumers whose arrays cannot be read-only get `ReadOnlyError` from "
                   'dlbridge (`🛡 refused`; `copy=True` converts, `readonly="drop"` shares).')  # fmt: skip
    return out


def render(report: Report) -> str:
    lines = [
        *_header(report),
        "## Legend",
        "",
        LEGEND,
        *_producers_only(report),
        "",
        *_tables(report),
        *_layouts(report),
        *_summary(report),
        *_disagreements(report),
    ]
    return "\n".join(lines).rstrip() + "\n"


# --- parsing -------------------------------------------------------------------------------------


def parse(text: str) -> dict[str, Any]:
    """Header fields and table rows of a rendered matrix; raises ValueError when malformed."""
    lines = text.splitlines()
    if not lines or lines[0] != TITLE:
        raise ValueError(f"not a dlbridge matrix: the first line is {lines[0] if lines else ''!r}")
    header: dict[str, str] = {}
    tables: dict[str, list[dict[str, Any]]] = {}
    current: list[str] | None = None
    device = None
    for line in lines:
        if line.startswith("## Producers on "):
            device, current = line.removeprefix("## Producers on ").strip(), None  # "cpu", "cpu: other fp8 ..."
            tables[device] = []
        elif line.startswith("## "):
            device = None
        elif line.startswith("| ") and device is None and not tables:
            key, _, value = line.strip("| ").partition(" | ")
            header[key.strip()] = value.strip()
        elif line.startswith("| producer → consumer |") and device is not None:
            current = [c.strip() for c in line.strip("|").split("|")][1:]
        elif line.startswith("| ") and device is not None and current is not None:
            cols = [c.strip() for c in line.strip().strip("|").split("|")]
            pair, texts = cols[0], cols[1:]
            if _ARROW not in pair or len(texts) != len(current):
                raise ValueError(f"malformed row in the {device} table: {line!r}")
            producer, consumer = pair.split(_ARROW)
            tables[device].append({"producer": producer, "consumer": consumer, "cells": dict(zip(current, texts))})
    if not tables:
        raise ValueError("no producer tables found")
    return {"header": header, "tables": tables}
