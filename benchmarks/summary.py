"""The per-pair summary of one or more runs of benchmarks/bench.py, as BENCHMARKS.md's tables are written.

    python benchmarks/summary.py RUN.json [RUN.json ...] [--path compiled|pure]

For each path, a Markdown table: per producer -> consumer pair and kind of row, the range of the ratio
(dlbridge / the consumer's own from_dlpack) over every run and size, the row's target, and how many rows
met it. Kinds: "native" (timed against the consumer importing the same dtype), "bf16/fp8" (timed against
the native import of the same-width unsigned array, where the consumer or producer cannot handle the dtype
itself) and "view" (``fallback="view"``). Rows that were not zero-copy on dlbridge's side are counted in
the "copied" column.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

DASH = "\u2013"  # an en dash, as BENCHMARKS.md writes ranges


def kind_of(row: dict[str, Any]) -> str:
    if row["mode"] == "view":
        return "view"
    return "bf16/fp8" if row["baseline"] != row["dtype"] else "native"


def table(runs: list[dict[str, Any]], path: str) -> list[str]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        for row in run["rows"]:
            if row["path"] == path and row["device"] == "cpu" and not row["skipped"] and row["ratio"] is not None:
                groups[(row["producer"], row["consumer"], kind_of(row))].append(row)
    lines = ["| pair | rows | ratio | target | met | copied |", "|---|---|---|---|---|---|"]
    for (producer, consumer, kind), rows in sorted(groups.items()):
        ratios = [r["ratio"] for r in rows]
        targets = sorted({r["target"] for r in rows if r["target"] is not None})
        target = "-" if not targets else " / ".join(f"≤ {t:.2f}" for t in targets)
        judged = [r for r in rows if r["met"] is not None]
        met = f"{sum(bool(r['met']) for r in judged)}/{len(judged)}" if judged else "-"
        copied = sum(not r["zero_copy_dlbridge"] for r in rows)
        lines.append(f"| {producer} → {consumer} | {kind} | {min(ratios):.2f}{DASH}{max(ratios):.2f} | {target} | {met} "
                     f"| {copied or ''} |")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="JSON files written by bench.py --json")
    parser.add_argument("--path", choices=("compiled", "pure"), action="append", help="default: both")
    args = parser.parse_args(argv)
    runs = []
    for name in args.runs:
        with open(name, encoding="utf-8") as f:
            runs.append(json.load(f))
    for path in args.path or ("compiled", "pure"):
        print(f"**{'Compiled accelerator' if path == 'compiled' else 'Pure Python'}** "
              f"({', '.join(r['date'] for r in runs)}):\n")  # fmt: skip
        print("\n".join(table(runs, path)), end="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
