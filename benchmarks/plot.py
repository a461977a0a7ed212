"""A picture of one benchmark run: dlbridge ÷ native per producer → consumer pair, as an SVG.

    python benchmarks/plot.py RUN.json OUT.svg [--note TEXT]

Reads the JSON that ``python benchmarks/bench.py --json RUN.json`` writes. Each timed row
("numpy→torch f32 1 KiB") gets two bars, one per path: dlbridge with its compiled accelerator
(blue) and forced to pure Python (orange), each drawn from the dashed line at 1.0 (native speed) to
the ratio dlbridge µs ÷ native µs on a log scale (right: slower). A dark tick on each bar marks
that path's target; a solid bar means dlbridge's result shared the source's memory, a hollow one
that it was copied. The title names the run (date, machine, versions, command, accelerator).
Plain string building: no plotting dependency.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from html import escape
from typing import Any

WIDTH = 800
_LABEL_W, _VALUE_W, _RIGHT = 190, 52, 14  # label column, the ratio after a bar, right margin
_BAR_H, _ROW_H, _PAIR_GAP = 7, 19, 6  # one path's bar, a row (both paths), the extra space between pairs
_FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"
PATH_COLOURS = {"compiled": "#2f6fb3", "pure": "#e08a1e"}  # light: the bar; dark: its target tick
TICK_COLOURS = {"compiled": "#0d2f57", "pure": "#6b3b00"}
PATH_LABELS = {"compiled": "compiled accelerator", "pure": "pure Python"}
_SHORT = {"float32": "f32", "bfloat16": "bf16", "float8_e4m3fn": "fp8 e4m3", "float16": "f16", "float64": "f64"}
TIMES = "\u00d7"  # the multiplication sign after a ratio
_TICKS = (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)


def size_label(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def row_label(row: dict[str, Any]) -> str:
    dev = "" if row["device"] == "cpu" else f" {row['device']}"
    dtype = _SHORT.get(row["dtype"], row["dtype"])
    return f"{row['producer']}→{row['consumer']}{dev} {dtype} {size_label(row['nbytes'])}"


def timed_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows that have a ratio (skipped rows have none)."""
    return [r for r in data["rows"] if not r.get("skipped") and r.get("ratio") is not None]


def _path(row: dict[str, Any]) -> str:
    return row.get("path") or "compiled"  # runs from before the two paths: dlbridge as it was


def grouped(rows: list[dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """Timed rows by pair/dtype/size, in run order: one entry per plotted row, {path: row}."""
    out: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["producer"], r["consumer"], r["device"], r["dtype"], r["nbytes"]), {})[_path(r)] = r
    return list(out.values())


def _text(x: float, y: float, text: str, size: int = 11, anchor: str = "start", weight: str = "normal",
          fill: str = "#222222") -> str:  # fmt: skip
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' font-weight='{weight}' "
            f"fill='{fill}' {_FONT}>{escape(text)}</text>")  # fmt: skip


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1, cls: str = "",
          dash: str = "") -> str:  # fmt: skip
    c = f" class='{cls}'" if cls else ""
    d = f" stroke-dasharray='{dash}'" if dash else ""
    return (f"<line{c} x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' stroke='{stroke}' "
            f"stroke-width='{width}'{d}/>")  # fmt: skip


def _domain(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Log-scale bounds around every ratio, every target and 1.0, with a little room each side."""
    values = [1.0] + [r["ratio"] for r in rows] + [r["target"] for r in rows if r.get("target")]
    return min(values) / 1.1, max(values) * 1.1


def _title_lines(data: dict[str, Any]) -> list[str]:
    v = dict(data.get("versions", {}))
    head = ", ".join(f"{k} {v.pop(k)}" for k in ("dlbridge", "python") if k in v)
    stack = ", ".join(f"{k} {ver}" for k, ver in v.items() if ver != "not installed")
    return [
        f"Run {data.get('date', '?')} · {data.get('machine', '?')}",
        f"{head} · {stack}",
        f"$ python {data.get('command', 'benchmarks/bench.py')}  ({data.get('rounds', '?')} interleaved rounds, medians)",
    ] + [f"{path}: {how}" for path, how in data.get("paths", {}).items()]


def render(data: dict[str, Any], note: str = "") -> str:
    """The SVG text for one run (``data`` as bench.py writes it); ``note``: one more line under the title."""
    rows = timed_rows(data)
    skipped = len(data["rows"]) - len(rows)
    lo, hi = _domain(rows) if rows else (0.5, 2.0)
    x0, x1 = _LABEL_W, WIDTH - _VALUE_W - _RIGHT

    def x(ratio: float) -> float:
        return x0 + (x1 - x0) * math.log(ratio / lo) / math.log(hi / lo)

    body = [_text(8, 20, "dlbridge ÷ native: time of one handoff, per producer → consumer (lower is faster)", 14,
                  weight="bold")]  # fmt: skip
    lines = _title_lines(data) + ([note] if note else [])
    for i, line in enumerate(lines):
        body.append(_text(8, 38 + 14 * i, line, 10, fill="#444444"))
    legend_y = 38 + 14 * len(lines) + 6
    items = [(PATH_COLOURS[p], True, PATH_LABELS[p]) for p in PATH_COLOURS]
    items += [("#777777", False, "hollow: copied (solid: zero-copy)"), ("#111111", None, "target (per path)")]
    lx = 8.0
    for colour, solid, label in items:
        if solid is None:
            body.append(_line(lx + 6, legend_y - 11, lx + 6, legend_y + 3, colour, 2))
        else:
            fill = colour if solid else "#ffffff"
            body.append(f"<rect x='{lx}' y='{legend_y - 9}' width='12' height='10' fill='{fill}' stroke='{colour}'/>")
        body.append(_text(lx + 16, legend_y, label, 10))
        lx += 16 + 5.6 * len(label) + 18
    top = legend_y + 22
    axis_y = top - 6

    y = top
    bars: list[str] = []
    prev_pair: tuple[str, str] | None = None
    for by_path in grouped(rows):
        first = next(iter(by_path.values()))
        pair = (first["producer"], first["consumer"])
        if prev_pair is not None and pair != prev_pair:
            bars.append(_line(8, y + _PAIR_GAP / 2 - 2, WIDTH - _RIGHT, y + _PAIR_GAP / 2 - 2, "#dddddd"))
            y += _PAIR_GAP
        prev_pair = pair
        bars.append(_text(x0 - 6, y + _BAR_H + 3, row_label(first), 10, anchor="end"))
        for k, path in enumerate(PATH_COLOURS):  # compiled on top, pure Python under it
            if path in by_path:
                bars.extend(_bar(by_path[path], path, y + k * (_BAR_H + 1), x))
        y += _ROW_H
    bottom = y + 2

    grid = []
    for t in _TICKS:
        if lo <= t <= hi:
            grid.append(_line(x(t), axis_y, x(t), bottom, "#eeeeee"))
            grid.append(_text(x(t), axis_y - 3, f"{t:g}{TIMES}", 10, anchor="middle", fill="#666666"))
    grid.append(_line(x(1.0), axis_y, x(1.0), bottom, "#c0392b", 1.5, cls="native", dash="4 2"))
    foot_y = bottom + 16
    per_path = ", ".join(f"{PATH_LABELS.get(p, p)} {sum(_path(r) == p for r in rows)}"
                         for p in dict.fromkeys(map(_path, rows)))  # fmt: skip
    notes = [f"{len(rows)} bars ({per_path}), {skipped} rows skipped or not measured; ✗ = above its target",
             f"log scale; bars start at 1{TIMES} (dashed) = the consumer's own from_dlpack"]  # fmt: skip
    if not rows:
        notes.insert(0, "no timed rows in this run")
    missing = {p: how for p, how in data.get("paths", {}).items() if not any(_path(r) == p for r in rows)}
    notes += [f"no {PATH_LABELS.get(p, p)} bars: {how}" for p, how in missing.items()]
    foot = [_text(8, foot_y + 13 * i, n, 10, fill="#444444") for i, n in enumerate(notes)]
    height = foot_y + 13 * len(notes)
    return "\n".join([
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height:.0f}' "
        f"viewBox='0 0 {WIDTH} {height:.0f}'>",
        f"<rect width='{WIDTH}' height='{height:.0f}' fill='#ffffff'/>",
        *body, *grid, *bars, *foot, "</svg>", "",
    ])  # fmt: skip


def _bar(r: dict[str, Any], path: str, y: float, x: Callable[[float], float]) -> list[str]:
    """One path's bar for one row: from 1.0 to the ratio, its target tick, and the ratio after it."""
    colour, dark = PATH_COLOURS.get(path, "#777777"), TICK_COLOURS.get(path, "#111111")
    shared = r.get("zero_copy_dlbridge") is True
    end = x(r["ratio"])  # bars grow from 1.0: right = slower than native, left = faster
    bx, bw = min(end, x(1.0)), max(abs(end - x(1.0)), 1.0)
    tip = (f"{row_label(r)} ({PATH_LABELS.get(path, path)}): native {r['native_us']:.2f} µs, dlbridge "
           f"{r['dlbridge_us']:.2f} µs, ratio {r['ratio']:.2f}, target {r.get('target') or '-'}, mode "
           f"{r.get('mode', '')}, {'zero-copy' if shared else 'copied'}")  # fmt: skip
    fill, stroke = (colour, 0) if shared else ("#ffffff", 1)
    out = [f"<rect class='bar' data-path='{path}' x='{bx:.1f}' y='{y:.1f}' width='{bw:.1f}' height='{_BAR_H}' "
           f"fill='{fill}' stroke='{colour}' stroke-width='{stroke}'><title>{escape(tip)}</title></rect>"]  # fmt: skip
    if r.get("target"):
        tx = x(r["target"])
        out.append(_line(tx, y - 1, tx, y + _BAR_H + 1, dark, 2, cls="target"))
    mark = "" if r.get("met") is not False else " ✗"
    out.append(_text(max(end, x(r.get("target") or 1.0), x(1.0)) + 4, y + _BAR_H - 0.5,
                     f"{r['ratio']:.2f}{TIMES}{mark}", 8, fill=dark))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="the JSON written by benchmarks/bench.py --json")
    parser.add_argument("out", help="the SVG to write")
    parser.add_argument("--note", default="", help="one more line under the title (e.g. how loaded the machine was)")
    args = parser.parse_args(argv)
    with open(args.run, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        parser.error(f"{args.run}: expected the JSON of benchmarks/bench.py --json (an object with 'rows')")
    svg = render(data, args.note)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(svg)
    print(f"wrote {args.out}: {len(timed_rows(data))} bars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
