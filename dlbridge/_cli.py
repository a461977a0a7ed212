"""The ``dlbridge`` command: ``dlbridge report`` and ``dlbridge doctor`` (also ``python -m dlbridge``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._report._runner import Progress

__all__ = ["main"]

EXIT_OK, EXIT_STRICT, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A bad name on the command line; the message lists the valid ones."""


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="dlbridge: DLPack handoffs between torch, CuPy, JAX, NumPy."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{report,doctor}")
    rep = sub.add_parser("report", help="probe every producer x consumer x dtype in child processes; write the matrix")
    rep.add_argument("--out", metavar="PATH", help="write the Markdown matrix here (default: stdout)")
    rep.add_argument("--json", metavar="PATH", help="also write the cells as JSON here")
    rep.add_argument("--frameworks", metavar="LIST", help="comma-separated (default: every installed one)")
    rep.add_argument("--devices", metavar="LIST", help="cpu,cuda (default: every available one)")
    rep.add_argument(
        "--dtypes", metavar="LIST", help="comma-separated dtype names (default: the standard set + fp8 kinds)"
    )
    rep.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), metavar="N", help="worker processes")
    rep.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds one attempt may take")
    rep.add_argument("--strict", action="store_true",
                     help="exit 1 when the capability table disagrees with the probe or dlbridge itself fails")  # fmt: skip
    sub.add_parser("doctor", help="installed versions and their known hazards (imports no framework; < 2 s)")
    return parser


def _names(
    text: str | None, valid: Sequence[str], what: str, aliases: dict[str, str] | None = None
) -> list[str] | None:
    if text is None:
        return None
    out = []
    for raw in (t.strip() for t in text.split(",")):
        name = (aliases or {}).get(raw, raw)
        if name not in valid:
            raise UsageError(f"unknown {what} {raw!r}; valid {what}s: {', '.join(valid)}")
        if name not in out:
            out.append(name)
    if not out:
        raise UsageError(f"--{what}s is empty; valid {what}s: {', '.join(valid)}")
    return out


def _selection(args: argparse.Namespace) -> tuple[list[str], list[str], list[str] | None]:
    from ._dtypes import BY_NAME
    from ._report._cases import DEVICES, FRAMEWORKS, installed_frameworks, short_dtype

    installed = installed_frameworks()
    frameworks = _names(args.frameworks, FRAMEWORKS, "framework", {"pytorch": "torch", "np": "numpy"})
    missing = [f for f in frameworks or () if f not in installed]
    if missing:
        raise UsageError(
            f"{', '.join(missing)} not installed here; installed frameworks: {', '.join(installed) or 'none'}"
        )
    if not (frameworks or installed):
        raise UsageError(f"none of {', '.join(FRAMEWORKS)} is installed")
    devices = _names(args.devices, DEVICES, "device", {"gpu": "cuda"}) or list(DEVICES)
    shorts = {short_dtype(n): n for n in BY_NAME}
    dtypes = _names(args.dtypes, list(BY_NAME), "dtype", shorts)
    return frameworks or installed, devices, dtypes


def _progress_bar() -> Progress | None:
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int, label: str) -> None:
        width = 30
        filled = width * done // max(total, 1)
        line = f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label}"
        cols = 100
        with contextlib.suppress(OSError):
            cols = os.get_terminal_size(sys.stderr.fileno()).columns
        sys.stderr.write(line[: cols - 1].ljust(cols - 1))
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _report(args: argparse.Namespace, command: str) -> int:
    from ._report._markdown import render
    from ._report._runner import run_report

    frameworks, devices, dtypes = _selection(args)
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: expected 1 or more worker processes")
    try:
        report = run_report(frameworks, devices, dtypes, jobs=args.jobs, timeout=args.timeout,
                            progress=_progress_bar(), command=command)  # fmt: skip
    except KeyboardInterrupt:
        print("\ndlbridge report: interrupted before any cell ran; nothing written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RuntimeError as err:  # a worker could not even import the frameworks
        print(f"dlbridge report: {err}", file=sys.stderr)
        return EXIT_STRICT
    if not report.cells and not report.meta["partial"]:
        why = "no framework sees a CUDA device here" if devices == ["cuda"] and not report.meta["cuda_producers"] else (
            f"no producer can make {', '.join(dtypes or ())}")  # fmt: skip
        print(f"dlbridge report: nothing to probe for --frameworks {','.join(frameworks)} "
              f"--devices {','.join(devices)}: {why}", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    text = render(report)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(report.to_json(), indent=1) + "\n", encoding="utf-8")
    disagree, failures = report.disagreements(), report.dlbridge_failures()
    crashes = sum(c.native.status == "crash" for c in report.cells)
    where = f"wrote {args.out}" if args.out else "done"
    print(f"dlbridge report: {where}: {len(report.cells)} cells in {report.meta['elapsed_s']} s, {crashes} native "
          f"crashes, {len(failures)} dlbridge failures, {len(disagree)} table disagreements", file=sys.stderr)  # fmt: skip
    if report.meta["partial"]:
        print("dlbridge report: interrupted; the partial report was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.strict and (disagree or failures):
        for cell, why in disagree:
            print(f"  table disagrees: {cell.label}: {why}", file=sys.stderr)
        for cell, name, attempt in failures:
            print(f"  dlbridge failure: {cell.label} ({name}): {attempt.status}: {attempt.error}", file=sys.stderr)
        return EXIT_STRICT
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dlbridge`` console script; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    prog = "python -m dlbridge" if argv is None and sys.argv[0].endswith("__main__.py") else "dlbridge"
    args = _parser(prog).parse_args(args_list)
    try:
        if args.command == "doctor":
            from ._report._doctor import doctor_text

            print(doctor_text())
            return EXIT_OK
        return _report(args, shlex.join([*prog.split(), *args_list]))
    except UsageError as err:
        print(f"{prog} {args.command}: {err}", file=sys.stderr)
        return EXIT_USAGE
