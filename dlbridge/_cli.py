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


_REPORT_HELP = """\
Probe every producer x consumer x dtype of the installed frameworks, each attempt in a child
process (a crash costs one cell, not the run), and write the compatibility matrix: what each
consumer's own from_dlpack does, what dlbridge does, and what fallback="view" gives."""
_DOCTOR_HELP = """\
Installed versions (from package metadata) and the hazards the capability table knows for
them. Imports no framework and probes nothing: fast, safe on a broken stack."""


def _parser(prog: str) -> argparse.ArgumentParser:
    from . import __version__
    from ._adapters import ADAPTERS

    names = ", ".join(a.display or a.name for a in ADAPTERS.values())
    parser = argparse.ArgumentParser(
        prog=prog, description=f"dlbridge {__version__}: zero-copy, dtype-safe DLPack handoffs between {names}."
    )
    parser.add_argument("--version", action="version", version=f"dlbridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{report,doctor}")
    fmt = argparse.RawDescriptionHelpFormatter
    rep = sub.add_parser("report", help="probe the installed stack in child processes; write the matrix",
                         description=_REPORT_HELP, formatter_class=fmt)  # fmt: skip
    rep.add_argument("--out", metavar="PATH", help="write the Markdown matrix here (default: standard output)")
    rep.add_argument("--json", metavar="PATH", help="also write the cells as JSON here")
    rep.add_argument("--svg", metavar="PATH", help="also write a picture of the matrix (a self-contained SVG) here")
    rep.add_argument("--frameworks", metavar="LIST",
                     help=f"comma-separated, from: {', '.join(ADAPTERS)} (default: every installed one)")  # fmt: skip
    rep.add_argument(
        "--devices", metavar="LIST", help="comma-separated, from: cpu, cuda (default: every available one)"
    )
    rep.add_argument("--dtypes", metavar="LIST",
                     help="comma-separated dtype names or short names (bf16, e4m3fn, ...; default: the standard set "
                          "plus every other fp8 kind and fp4 form some producer makes)")  # fmt: skip
    rep.add_argument(
        "--jobs",
        type=int,
        default=min(4, os.cpu_count() or 1),
        metavar="N",
        help="worker processes (default: %(default)s)",
    )
    rep.add_argument(
        "--timeout", type=float, default=60.0, metavar="S", help="seconds one attempt may take (default: %(default)s)"
    )
    rep.add_argument("--strict", action="store_true",
                     help="exit 1 when the capability table disagrees with the probe or dlbridge itself fails")  # fmt: skip
    sub.add_parser("doctor", help="installed versions and their known hazards (imports no framework; < 2 s)",
                   description=_DOCTOR_HELP, formatter_class=fmt)  # fmt: skip
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
    from ._adapters import ADAPTERS
    from ._dtypes import ALIASES, BY_NAME
    from ._report._cases import DEVICES, FRAMEWORKS, install_hint, installed_frameworks

    installed = installed_frameworks()
    aliases = {alias: a.name for a in ADAPTERS.values() for alias in (a.module, *a.aliases)}
    frameworks = _names(args.frameworks, FRAMEWORKS, "framework", aliases)
    missing = [f for f in frameworks or () if f not in installed]
    if missing:
        raise UsageError(
            f"{', '.join(missing)} not installed here (installed frameworks: {', '.join(installed) or 'none'}); "
            f"install with {install_hint(missing)}"
        )
    if not (frameworks or installed):
        raise UsageError(
            f"none of {', '.join(FRAMEWORKS)} is installed, so there is nothing to probe; install the frameworks "
            f"you use, e.g. {install_hint(FRAMEWORKS[:1])} (extras: {', '.join(a.extra for a in ADAPTERS.values())})"
        )
    devices = _names(args.devices, DEVICES, "device", {"gpu": "cuda"}) or list(DEVICES)
    dtypes = _names(args.dtypes, list(BY_NAME), "dtype", ALIASES)
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
        if devices == ["cuda"] and not report.meta["cuda_producers"]:
            why = "no framework sees a CUDA device here"
        else:
            why = "no producer can make any of them:\n" + "\n".join(
                f"  {r['producer']}:{r['producer_device']} {r['dtype']}: {r['why']}" for r in report.not_made
            )
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
    if args.svg:
        from ._report._svg import render_svg

        Path(args.svg).write_text(render_svg(report), encoding="utf-8")
    disagree, failures = report.disagreements(), report.dlbridge_failures()
    crashes = sum(c.native.status == "crash" for c in report.cells)
    where = f"wrote {args.out}" if args.out else "done"
    print(f"dlbridge report: {where}: {len(report.cells)} cells (+{len(report.layout_cells)} layout cells) in {report.meta['elapsed_s']} s, {crashes} native "
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
