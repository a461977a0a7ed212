"""A picture of the matrix: a self-contained SVG colour grid (no plotting dependency).

One row per producer → consumer pair, one column per dtype; each cell is split in two, the
consumer's own ``from_dlpack`` on the left and ``dlbridge.convert`` on the right. Hovering a
cell (in a browser) shows the same text as the Markdown table.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from ._cases import BASE_DTYPES, short_dtype
from ._markdown import cell_text
from ._model import Attempt, Cell, Report

__all__ = ["render_svg", "OUTCOMES"]

# outcome -> (fill, legend label); the order is the legend's.
OUTCOMES: dict[str, tuple[str, str]] = {
    "shared": ("#1b7f3b", "converts, right values, memory shared"),
    "copied": ("#8fd19e", "converts, right values, copied"),
    "refused": ("#3b6fd4", "refused on purpose: a clear dlbridge error (safe)"),
    "error": ("#f0a030", "raises an error (not dlbridge's)"),
    "wrong": ("#d7263d", "wrong dtype or values, silently"),
    "crash": ("#5b1a6e", "crashes the process"),
    "none": ("#e6e6e6", "the producer cannot make this dtype"),
}
_CELL_W, _CELL_H, _GAP = 18, 18, 1  # one half-cell; the gap between its halves
_LABEL_W, _HEAD_H, _TOP = 150, 40, 64
_FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"


def outcome(a: Attempt, *, dlbridge: bool) -> str:
    """The colour class of one attempt."""
    if a.status == "crash":
        return "crash"
    if a.status == "wrong":
        return "wrong"
    if a.status == "error":
        return "refused" if dlbridge and a.clean else "error"
    return "copied" if a.zero_copy is False else "shared"


def _rect(x: float, y: float, w: float, h: float, fill: str, title: str = "") -> str:
    tip = f"<title>{escape(title)}</title>" if title else ""
    return (
        f"<rect x='{x}' y='{y}' width='{w}' height='{h}' fill='{fill}' stroke='#ffffff' stroke-width='1'>{tip}</rect>"
    )


def _text(x: float, y: float, text: str, size: int = 11, anchor: str = "start", weight: str = "normal",
          rotate: bool = False) -> str:  # fmt: skip
    turn = f" transform='rotate(-40 {x} {y})'" if rotate else ""
    return (f"<text x='{x}' y='{y}' font-size='{size}' text-anchor='{anchor}' font-weight='{weight}' "
            f"{_FONT}{turn}>{escape(text)}</text>")  # fmt: skip


def render_svg(report: Report) -> str:
    dtypes: list[str] = report.meta["dtypes"]
    rows = list(dict.fromkeys((c.producer, c.producer_device, c.consumer) for c in report.cells))
    col_w = 2 * _CELL_W + _GAP + 10
    split = next((i for i, d in enumerate(dtypes) if d not in BASE_DTYPES), len(dtypes))
    # Labels are right-aligned at x0: wide enough for the longest one (~6.5 px a character at 11 px).
    x0 = max(_LABEL_W, 16 + max((len(f"{p}:{d} → {c}") for p, d, c in rows), default=0) * 6.5)

    def col_x(i: int) -> float:
        return x0 + i * col_w + (12 if i >= split else 0)  # a gap before the other fp8 formats

    grid_w = col_x(len(dtypes) - 1) + col_w
    grid_top = _TOP + _HEAD_H
    body = _heading(report, dtypes, col_x, col_w, split, grid_top)
    y = _grid(report, dtypes, rows, col_x, x0, grid_top, body)
    height = _legend(y, body)
    width = max(grid_w + 16, 460)
    head = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
            f"viewBox='0 0 {width:.0f} {height:.0f}'>")  # fmt: skip
    return (
        "\n".join([head, f"<rect width='{width:.0f}' height='{height:.0f}' fill='#ffffff'/>", *body, "</svg>"]) + "\n"
    )


def _heading(report: Report, dtypes: list[str], col_x: Callable[[int], float], col_w: float, split: int,
             grid_top: float) -> list[str]:  # fmt: skip
    """The title, the stack's versions, and the dtype column labels."""
    body: list[str] = []
    m = report.meta
    body.append(_text(8, 20, "dlbridge compatibility matrix", 16, weight="bold"))
    stack = ", ".join(f"{k} {v}" for k, v in report.versions.items() if k not in ("python", "dlbridge"))
    body.append(_text(8, 38, f"dlbridge {m.get('dlbridge', '')} · Python {m.get('python', '')} · {stack}", 10))
    body.append(_text(8, 54, "each cell: left = the consumer's own from_dlpack, right = dlbridge.convert", 10))
    for i, d in enumerate(dtypes):
        x = col_x(i) + col_w / 2 - 2
        body.append(_text(x, grid_top - 6, short_dtype(d), 11, rotate=True))
    if split < len(dtypes):
        body.append(_text(col_x(split), _TOP + 4, "other fp8 formats", 10, weight="bold"))
    return body


def _grid(report: Report, dtypes: list[str], rows: list[tuple[str, str, str]], col_x: Callable[[int], float],
          x0: float, grid_top: float, body: list[str]) -> float:  # fmt: skip
    """One labelled row of split cells per producer → consumer pair, appended to ``body``; the y below it."""
    cells = {(c.producer, c.producer_device, c.consumer, c.dtype): c for c in report.cells}
    made = {(c.producer, c.producer_device, c.dtype) for c in report.cells}
    y = grid_top
    device = None
    for producer, dev, consumer in rows:
        if dev != device and device is not None:
            y += 8  # a gap between producer devices
        device = dev
        body.append(_text(x0 - 8, y + _CELL_H - 5, f"{producer}:{dev} → {consumer}", 11, anchor="end"))
        for i, d in enumerate(dtypes):
            x = col_x(i)
            cell: Cell | None = cells.get((producer, dev, consumer, d))
            if cell is None:
                if (producer, dev, d) not in made:
                    fill = OUTCOMES["none"][0]
                    body.append(_rect(x, y, 2 * _CELL_W + _GAP, _CELL_H, fill, f"{producer} cannot make {d}"))
                continue
            tip = f"{cell.label}: {cell_text(cell)}"
            body.append(_rect(x, y, _CELL_W, _CELL_H, OUTCOMES[outcome(cell.native, dlbridge=False)][0], tip))
            body.append(_rect(x + _CELL_W + _GAP, y, _CELL_W, _CELL_H,
                              OUTCOMES[outcome(cell.dlbridge, dlbridge=True)][0], tip))  # fmt: skip
        y += _CELL_H + 2
    return y


def _legend(y: float, body: list[str]) -> float:
    """The colour legend and a sample split cell below ``y``, appended to ``body``; the picture's height."""
    y += 16
    lx = 8
    body.append(_text(lx, y, "legend", 11, weight="bold"))
    y += 8
    for fill, label in OUTCOMES.values():
        body.append(_rect(lx, y, 14, 12, fill))
        body.append(_text(lx + 20, y + 10, label, 11))
        y += 17
    sample_y = y + 4
    body.append(_rect(lx, sample_y, _CELL_W, _CELL_H, OUTCOMES["error"][0]))
    body.append(_rect(lx + _CELL_W + _GAP, sample_y, _CELL_W, _CELL_H, OUTCOMES["shared"][0]))
    body.append(_text(lx + 2 * _CELL_W + _GAP + 8, sample_y + 13,
                      "e.g. native raises, dlbridge converts sharing memory", 11))  # fmt: skip
    return sample_y + _CELL_H + 12
