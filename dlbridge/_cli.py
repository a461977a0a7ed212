"""The ``dlbridge`` command: ``dlbridge report``, ``dlbridge doctor`` and ``dlbridge explain`` (also ``python -m dlbridge``)."""

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
    from ._adapters import ADAPTERS, HOST
    from ._report._cases import FRAMEWORKS

    names = ", ".join(a.display or a.name for a in ADAPTERS.values())
    parser = argparse.ArgumentParser(
        prog=prog, description=f"dlbridge {__version__}: zero-copy, dtype-safe DLPack handoffs between {names}."
    )
    parser.add_argument("--version", action="version", version=f"dlbridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{report,doctor,explain}")
    fmt = argparse.RawDescriptionHelpFormatter
    rep = sub.add_parser("report", help="probe the installed stack in child processes; write the matrix",
                         description=_REPORT_HELP, formatter_class=fmt)  # fmt: skip
    rep.add_argument("--out", metavar="PATH", help="write the Markdown matrix here (default: standard output)")
    rep.add_argument("--json", metavar="PATH", help="also write the cells as JSON here")
    rep.add_argument("--svg", metavar="PATH", help="also write a picture of the matrix (a self-contained SVG) here")
    only = [n for n in FRAMEWORKS if n not in ADAPTERS]
    rep.add_argument("--frameworks", metavar="LIST",
                     help=f"comma-separated, from: {', '.join(FRAMEWORKS)} (default: every installed one)"
                          + (f"; {', '.join(only)}: a producer only (rows of the matrix, no column)" if only else ""))  # fmt: skip
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
    _explain_parser(sub.add_parser("explain", help="what dlbridge would do with one array (runs nothing)",
                                   description=_EXPLAIN_HELP.format(producer=next(iter(ADAPTERS)), consumer=HOST.name),
                                   formatter_class=fmt))  # fmt: skip
    return parser


_EXPLAIN_HELP = """\
Make a small array of DTYPE with the producer framework and print the handoff record dlbridge
decides for it (dlbridge.explain): its steps, whether the result shares memory, or the error the
conversion raises. Nothing is converted. Example: dlbridge explain {producer} bfloat16 {consumer} --fallback view"""


def _explain_parser(exp: argparse.ArgumentParser) -> None:
    from ._report._cases import FRAMEWORKS

    exp.add_argument("producer", help=f"the framework that makes the array ({', '.join(FRAMEWORKS)})")
    exp.add_argument("dtype", help="its dtype: a name or short name (bfloat16, bf16, e4m3fn, float32, ...)")
    exp.add_argument("consumer", help="the framework it is handed to")
    exp.add_argument("--layout", choices=("dense", "transposed", "readonly"), default="dense",
                     help="the source array: dense, a transposed view, or a read-only one (default: dense)")  # fmt: skip
    exp.add_argument("--device", default="cpu", help="where the producer makes it: cpu or cuda (default: cpu)")
    exp.add_argument("--fallback", choices=("raise", "view", "upcast"), help="as convert's fallback=")
    exp.add_argument("--copy", choices=("true", "false"), help="as convert's copy= (default: None)")
    exp.add_argument("--readonly", choices=("keep", "drop"), default="keep", help="as convert's readonly=")
    exp.add_argument("--json", action="store_true", help="print the record as JSON")


def _explain(args: argparse.Namespace) -> int:
    import json

    from ._adapters import ADAPTERS
    from ._dtypes import ALIASES, BY_NAME
    from ._pipeline._explain import explain
    from ._report._cases import REPORTED, import_order, installed_frameworks, make_source, reference

    aliases = {alias: a.name for a in REPORTED.values() for alias in (a.module, *a.framework.aliases)}
    producer = _one(args.producer, list(REPORTED), "framework", aliases)
    consumer = _one(args.consumer, list(ADAPTERS), "framework", aliases)
    dtype = _one(args.dtype, list(BY_NAME), "dtype", ALIASES)
    missing = [f for f in (producer, consumer) if f not in installed_frameworks()]
    if missing:
        raise UsageError(f"{', '.join(missing)} not installed here")
    for name in import_order([producer, consumer]):  # an order that cannot crash the process
        __import__(REPORTED[name].module)
    try:
        src = make_source(producer, args.device, reference(dtype), args.layout)
    except MemoryError:
        raise
    except Exception as err:
        raise UsageError(f"{producer} cannot make a {args.layout} {dtype} array on {args.device}: {err}") from None
    copy = None if args.copy is None else args.copy == "true"
    record = explain(src, consumer, fallback=args.fallback, copy=copy, readonly=args.readonly)
    if args.json:
        print(json.dumps(record.to_json(), indent=1))
    else:
        given = record.given.describe() if record.given is not None else f"{producer} {dtype}"
        print(f"{given} -> {consumer}: {'shares memory' if record.shares else 'no shared memory'}")
        for step in record.steps:
            print(f"  {step}")
    return EXIT_OK


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


def _one(text: str, valid: Sequence[str], what: str, aliases: dict[str, str]) -> str:
    names = _names(text, valid, what, aliases) or []
    if len(names) != 1:
        raise UsageError(f"expected one {what}, got {text!r}")
    return names[0]


def _selection(args: argparse.Namespace) -> tuple[list[str], list[str], list[str] | None]:
    from ._adapters import ADAPTERS
    from ._dtypes import ALIASES, BY_NAME
    from ._report._cases import DEVICES, FRAMEWORKS, REPORTED, install_hint, installed_frameworks

    installed = installed_frameworks()
    aliases = {alias: a.name for a in REPORTED.values() for alias in (a.module, *a.framework.aliases)}
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
    if not any(f in ADAPTERS for f in frameworks or installed):
        raise UsageError(f"{', '.join(frameworks or installed)}: producers only, so nothing would receive their "
                         f"arrays; add a consumer from: {', '.join(ADAPTERS)}")  # fmt: skip
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
    for note in report.meta.get("support") or ():
        print(f"dlbridge report: {note}", file=sys.stderr)
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
        if args.command == "explain":
            return _explain(args)
        return _report(args, shlex.join([*prog.split(), *args_list]))
    except UsageError as err:
        print(f"{prog} {args.command}: {err}", file=sys.stderr)
        return EXIT_USAGE
