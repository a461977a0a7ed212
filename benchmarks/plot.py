"""A picture of one benchmark run: dlbridge ÷ native per producer → consumer pair, as an SVG.

    python benchmarks/plot.py RUN.json OUT.svg [--note TEXT]

Reads the JSON that ``python benchmarks/bench.py --json RUN.json`` writes and draws one horizontal
bar per timed row ("numpy→torch f32 1 KiB"), drawn from the dashed line at 1.0 (native speed) to the
ratio dlbridge µs ÷ native µs on a log scale (right: slower), a tick marks the row's target,
and the colour says whether dlbridge's result shared the source's memory. The title names the run
(date, machine, versions, command). Plain string building: no plotting dependency.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from html import escape
from typing import Any

WIDTH = 800
_LABEL_W, _VALUE_W, _RIGHT = 190, 52, 14  # label column, the ratio after a bar, right margin
_BAR_H, _ROW_H, _PAIR_GAP = 12, 16, 6  # a bar, its row, the extra space between pairs
_FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"
SHARED, COPIED = "#2f6fb3", "#e08a1e"  # dlbridge's result shares the source's memory / does not
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
    ]


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
    items = [("rect", SHARED, "zero-copy (result shares the source's memory)"), ("rect", COPIED, "copied"),
             ("tick", "#111111", "target")]  # fmt: skip
    lx = 8.0
    for kind, colour, label in items:
        if kind == "rect":
            body.append(f"<rect x='{lx}' y='{legend_y - 9}' width='12' height='10' fill='{colour}'/>")
        else:
            body.append(_line(lx + 6, legend_y - 11, lx + 6, legend_y + 3, colour, 2))
        body.append(_text(lx + 16, legend_y, label, 10))
        lx += 16 + 5.6 * len(label) + 18
    top = legend_y + 22
    axis_y = top - 6

    y = top
    bars: list[str] = []
    prev_pair: tuple[str, str] | None = None
    for r in rows:
        pair = (r["producer"], r["consumer"])
        if prev_pair is not None and pair != prev_pair:
            bars.append(_line(8, y + _PAIR_GAP / 2 - 1, WIDTH - _RIGHT, y + _PAIR_GAP / 2 - 1, "#dddddd"))
            y += _PAIR_GAP
        prev_pair = pair
        shared = r.get("zero_copy_dlbridge") is True
        colour = SHARED if shared else COPIED
        end = x(r["ratio"])  # bars grow from 1.0: right = slower than native, left = faster
        bx, bw = min(end, x(1.0)), max(abs(end - x(1.0)), 1.0)
        tip = (f"{row_label(r)}: native {r['native_us']:.2f} µs, dlbridge {r['dlbridge_us']:.2f} µs, "
               f"ratio {r['ratio']:.2f}, target {r.get('target') or '-'}, mode {r.get('mode', '')}, "
               f"{'zero-copy' if shared else 'copied'}")  # fmt: skip
        bars.append(_text(x0 - 6, y + _BAR_H - 2, row_label(r), 10, anchor="end"))
        bars.append(f"<rect class='bar' x='{bx:.1f}' y='{y:.1f}' width='{bw:.1f}' height='{_BAR_H}' "
                    f"fill='{colour}'><title>{escape(tip)}</title></rect>")  # fmt: skip
        if r.get("target"):
            tx = x(r["target"])
            bars.append(_line(tx, y - 2, tx, y + _BAR_H + 2, "#111111", 2, cls="target"))
        mark = "" if r.get("met") is not False else " ✗"
        bars.append(_text(max(end, x(r.get("target") or 1.0), x(1.0)) + 5, y + _BAR_H - 2,
                          f"{r['ratio']:.2f}{TIMES}{mark}", 10))  # fmt: skip
        y += _ROW_H
    bottom = y + 2

    grid = []
    for t in _TICKS:
        if lo <= t <= hi:
            grid.append(_line(x(t), axis_y, x(t), bottom, "#eeeeee"))
            grid.append(_text(x(t), axis_y - 3, f"{t:g}{TIMES}", 10, anchor="middle", fill="#666666"))
    grid.append(_line(x(1.0), axis_y, x(1.0), bottom, "#c0392b", 1.5, cls="native", dash="4 2"))
    foot_y = bottom + 16
    notes = [f"{len(rows)} rows timed, {skipped} skipped; ✗ = above target; bar length on a log scale; "
             f"bars start at 1{TIMES} (dashed) = the consumer's own from_dlpack"]  # fmt: skip
    if not rows:
        notes.insert(0, "no timed rows in this run")
    foot = [_text(8, foot_y + 13 * i, n, 10, fill="#444444") for i, n in enumerate(notes)]
    height = foot_y + 13 * len(notes)
    return "\n".join([
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height:.0f}' "
        f"viewBox='0 0 {WIDTH} {height:.0f}'>",
        f"<rect width='{WIDTH}' height='{height:.0f}' fill='#ffffff'/>",
        *body, *grid, *bars, *foot, "</svg>", "",
    ])  # fmt: skip


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
