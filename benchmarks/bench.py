"""dlbridge handoff benchmark: each consumer's own ``from_dlpack`` against dlbridge, pair by pair.

    python benchmarks/bench.py [--quick] [--path compiled|pure|both] [--json PATH] [--only TEXT]

For every producer -> consumer pair and dtype it prints the native cost (the consumer's own
``from_dlpack`` on the producer's object), the dlbridge cost (``dlbridge.to_<consumer>``), their
ratio, dlbridge's plan (native / reinterpret / view) and whether each path was zero-copy (the
result's data pointer equals the source's). Both sides are timed in one process, interleaved
round by round (the order alternates), and each figure is the median over the rounds; the ratio
is the median of the per-round ratios, so drift on a busy machine cancels out.

Two paths, one table: dlbridge as imported here (its compiled accelerator where one is built)
is timed in this process, and dlbridge forced to pure Python (``DLBRIDGE_PURE_PYTHON=1``) in a
child process running the same rows; each row of the JSON carries its ``path``. Where no
accelerator is built the compiled columns say so. Targets per row and path: ``_cases.py``.

Baselines: where the consumer cannot import the dtype itself (bf16 -> NumPy, fp8 -> CuPy), or
the producer cannot export it (ml_dtypes arrays in NumPy), the native side converts a
same-width unsigned array instead (uint16 for bf16, uint8 for fp8): that is what a user would
otherwise do by hand.

CUDA pairs (torch, CuPy, JAX; 1 KiB and 1 GiB) are written here and run only where CUDA
exists; elsewhere each is listed as skipped with the reason. On GPU rows the consumer's
allocator counter is read around one dlbridge call ("alloc" column, bytes; 0 = nothing new
allocated on the device).

The import section runs fresh interpreters: ``import dlbridge`` alone (as this environment runs
it, and with bytecode caches), ``python -c pass`` for the interpreter's own start, and the first
and second conversion into each framework (the first pays that framework's import once).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any

# JAX grabs 75% of GPU memory on first use by default; the 1 GiB rows need room for torch/CuPy.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # loaded by path rather than run as a script: the helpers live beside it
    sys.path.insert(0, HERE)

from _cases import (  # noqa: E402 - needs HERE on sys.path
    CPU_FRAMEWORKS,
    GIB,
    GPU_FRAMEWORKS,
    IMPORT_FIRST,
    KIB,
    MIB,
    PATHS,
    ROOT,
    TARGET_IMPORT_MS,
    Row,
    _available,
    _mod,
    accelerator,
    cpu_rows,
    cuda_reason,
    gpu_rows,
)
from _timing import import_figures, run_row  # noqa: E402

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


# --- timing the rows --------------------------------------------------------------------------

_PURE_ENV = "DLBRIDGE_PURE_PYTHON"


def _forced_pure() -> bool:
    return os.environ.get(_PURE_ENV, "") not in ("", "0")


def select_rows(quick: bool, only: str | None) -> list[Row]:
    rows = cpu_rows(quick) + gpu_rows(quick)
    if only:
        wanted = [w for w in only.split(",") if w]
        rows = [r for r in rows if any(w in f"{r.producer}->{r.consumer} {r.dtype} {r.device}" for w in wanted)]
    return rows


def time_rows(rows: list[Row], path: str, rounds: int, budget_ms: float) -> dict[str, str | None]:
    """Times ``rows`` in this process (marking each with ``path``); returns the CUDA reason per framework."""
    used = {name for r in rows for name in (r.producer, r.consumer)}
    for name in IMPORT_FIRST:
        if name in used:
            _available(name)  # imports it (if it can), before any row imports tensorflow
    on_gpu = {name for r in rows if r.device == "cuda" for name in (r.producer, r.consumer)}
    cuda_why = {name: cuda_reason(name) for name in GPU_FRAMEWORKS if name in on_gpu}
    progress = sys.stderr.isatty()
    for row in rows:
        row.path = path
        if row.device == "cpu" and (_available(row.producer) or _available(row.consumer)):
            row.skipped = _available(row.producer) or _available(row.consumer) or ""
        elif row.device == "cuda" and (cuda_why[row.producer] or cuda_why[row.consumer]):
            row.skipped = cuda_why[row.producer] or cuda_why[row.consumer] or ""
        else:
            run_row(row, rounds, budget_ms)
            gc.collect()
        if progress:
            ratio = f"{row.ratio:.2f}" if row.ratio is not None else "skipped"
            print(f"  {path}: {row.producer}->{row.consumer} {row.device} {row.dtype} {_size(row.nbytes)}: {ratio}",
                  file=sys.stderr, flush=True)  # fmt: skip
    return cuda_why


def time_in_child(path: str, args: argparse.Namespace, rounds: int) -> tuple[list[Row], str, dict[str, str | None]]:
    """The same rows timed on ``path`` in a child process (the accelerator is chosen at import)."""
    env = dict(os.environ)
    if path == "pure":
        env[_PURE_ENV] = "1"
    else:
        env.pop(_PURE_ENV, None)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--path", path, "--rounds", str(rounds), "--child-json", out]
        cmd += ["--quick"] if args.quick else []
        cmd += ["--only", args.only] if args.only else []
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, timeout=3600)
        if proc.returncode:
            raise SystemExit(f"bench.py: the {path} half failed in its child process (exit {proc.returncode})")
        with open(out) as f:
            data = json.load(f)
    rows = [Row(**r) for r in data["rows"]]
    return rows, data["accelerator"], data["cuda"]


def not_measured(rows: list[Row], path: str, why: str) -> list[Row]:
    for row in rows:
        row.path, row.skipped = path, why
    return rows


# --- output ----------------------------------------------------------------------------------


def _size(nbytes: int) -> str:
    for unit, div in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= div:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


def _yn(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "NO")


_HEAD_W = 22 + 1 + 4 + 1 + 13 + 1 + 7 + 1 + 11 + 1 + 13  # pair .. baseline
_SPAN = f"{'native µs':>9} {'dlbridge µs':>11} {'ratio':>6} {'target':>6} {'met':>4}"
_SPAN_W = len(_SPAN)
HEADER = (
    f"{'':<{_HEAD_W}} | {'compiled accelerator':<{_SPAN_W}} | {'pure Python':<{_SPAN_W}} |\n"
    f"{'pair':<22} {'dev':<4} {'dtype':<13} {'size':>7} {'mode':<11} {'baseline':<13} | {_SPAN} | {_SPAN} | "
    f"{'zc nat':>6} {'zc dlb':>6} {'alloc':>6}"
)


def _span(r: Row | None, missing: str) -> str:
    if r is None or r.ratio is None:
        return f"{missing:^{_SPAN_W}}"
    target = "-" if r.target is None else f"{r.target:.2f}"
    return f"{r.native_us:>9.2f} {r.dlbridge_us:>11.2f} {r.ratio:>6.2f} {target:>6} {_yn(r.met):>4}"


def _both(values: list[bool | None]) -> str:
    seen = list(dict.fromkeys(_yn(v) for v in values if v is not None))
    return "/".join(seen) or "-"


_NO_ACCEL = "no compiled accelerator"


def _missing(r: Row | None) -> str:
    if r is None:
        return "not run"
    return "no accelerator in this build" if r.skipped.startswith(_NO_ACCEL) else "skipped"


def format_line(by_path: dict[str, Row]) -> str:
    """One table line for one pair/dtype/size: both paths side by side."""
    first = next(iter(by_path.values()))
    pair = f"{first.producer}->{first.consumer}"
    head = f"{pair:<22} {first.device:<4} {first.dtype:<13} {_size(first.nbytes):>7} "
    timed = [r for r in by_path.values() if r.ratio is not None]
    reasons = list(dict.fromkeys(r.skipped for r in by_path.values() if r.skipped))
    if not timed:
        return head + f"skipped: {'; '.join(reasons)}"
    ref = timed[0]
    spans = [_span(by_path.get(p), _missing(by_path.get(p))) for p in PATHS]
    allocs = list(dict.fromkeys("-" if r.alloc_bytes is None else str(r.alloc_bytes) for r in timed))
    line = (
        head + f"{ref.mode:<11} {ref.baseline:<13} | " + " | ".join(spans) + " | "
        f"{_both([r.zero_copy_native for r in timed]):>6} {_both([r.zero_copy_dlbridge for r in timed]):>6} "
        f"{'/'.join(allocs):>6}"
    )
    notes = [f"{r.path}: {n}" for r in timed for n in r.notes]
    notes += [f"{r.path} skipped: {r.skipped}" for r in by_path.values() if r.skipped and r.path != "compiled"]
    return line + (f"  ({'; '.join(notes)})" if notes else "")


def print_table(rows: list[Row], cuda_why: dict[str, str | None]) -> None:
    grouped: dict[tuple[str, str, str, str, int], dict[str, Row]] = {}
    for r in rows:
        grouped.setdefault((r.producer, r.consumer, r.device, r.dtype, r.nbytes), {})[r.path] = r
    print(HEADER)
    skipped_pairs: set[tuple[str, str]] = set()
    for (producer, consumer, device, *_), by_path in grouped.items():
        why = (cuda_why.get(producer) or cuda_why.get(consumer)) if device == "cuda" else None
        if why and all(r.skipped for r in by_path.values()):
            if (producer, consumer) not in skipped_pairs:  # one line per pair that cannot run here
                skipped_pairs.add((producer, consumer))
                print(f"{producer + '->' + consumer:<22} cuda (all dtypes, sizes) skipped: {why}")
            continue
        print(format_line(by_path))


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("dlbridge", "torch", "jax", "jaxlib", "numpy", "ml_dtypes", "cupy"):
        try:
            out[name] = str(_mod(name).__version__)
        except Exception:
            out[name] = "not installed"
    from importlib.metadata import PackageNotFoundError, version

    from dlbridge._adapters import ADAPTERS

    for name in ("tensorflow", "paddle", "onnxruntime", "warp", "mlx", "array_api_strict"):  # from metadata: no imports
        out[name] = "not installed"
        for dist in ADAPTERS[name].distributions:
            try:
                out[name] = version(dist)
                break
            except PackageNotFoundError:
                continue
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu})"


def print_imports(figures: dict[str, Any]) -> None:
    def verdict(ms: float) -> str:
        return f"target <= {TARGET_IMPORT_MS:g} ms: {'met' if ms <= TARGET_IMPORT_MS else 'MISSED'}"

    n = len(figures["import_dlbridge_runs_ms"])
    how = (
        "compiling from source: PYTHONDONTWRITEBYTECODE is set"
        if figures["import_dlbridge_compiles"]
        else "as run here"
    )
    print(f"\nimport dlbridge (fresh interpreters, medians of {n}; frameworks imported: "
          f"{', '.join(figures['frameworks_loaded_by_import']) or 'none'})\n"
          f"  {how}: {figures['import_dlbridge_ms']:.1f} ms ({verdict(figures['import_dlbridge_ms'])})\n"
          f"  with bytecode caches (as installed): {figures['import_dlbridge_bytecode_ms']:.1f} ms "
          f"({verdict(figures['import_dlbridge_bytecode_ms'])})\n"
          f"  interpreter start, for scale (python -c pass, wall): {figures['python_pass_wall_ms']:.1f} ms")  # fmt: skip
    for target, f in figures["first_call"].items():
        pre = " (already imported by the source)" if f["already_imported_by_source"] else ""
        print(f"first to_{target}(): {f['first_ms']:.1f} ms{pre}; second: {f['second_us']:.1f} µs; "
              f"import {target} alone: {f['import_alone_ms']:.1f} ms")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few short rounds (a smoke run, not figures)")
    parser.add_argument("--path", choices=(*PATHS, "both"), default="both",
                        help="dlbridge with its compiled accelerator, forced to pure Python, or both (default)")  # fmt: skip
    parser.add_argument("--json", metavar="PATH", help="also write every figure to PATH as JSON")
    parser.add_argument("--only", metavar="TEXT[,TEXT]", help="only rows whose 'producer->consumer dtype device' "
                        "contains one of the comma-separated TEXTs")  # fmt: skip
    parser.add_argument("--rounds", type=int, help="interleaved rounds per row (default 21, --quick 3)")
    parser.add_argument("--no-import", action="store_true", help="skip the fresh-interpreter import section")
    parser.add_argument("--first-call", metavar="NAME[,NAME]", help="targets whose first conversion is timed in a "
                        f"fresh interpreter (default: {','.join(CPU_FRAMEWORKS)}; --quick: numpy)")  # fmt: skip
    parser.add_argument("--child-json", help=argparse.SUPPRESS)  # one path's rows, for the parent to merge
    args = parser.parse_args(argv)
    first = args.first_call or ("numpy" if args.quick else ",".join(CPU_FRAMEWORKS))
    unknown = set(first.split(",")) - set(CPU_FRAMEWORKS)
    if unknown:
        parser.error(f"--first-call: unknown {', '.join(sorted(unknown))}; expected {', '.join(CPU_FRAMEWORKS)}")
    rounds = args.rounds or (3 if args.quick else 21)
    budget_ms = 2.0 if args.quick else 10.0
    compiled_here, reason = accelerator()
    here = "compiled" if compiled_here else "pure"

    if args.child_json:
        mine = select_rows(args.quick, args.only)
        found = time_rows(mine, here, rounds, budget_ms)
        with open(args.child_json, "w") as f:
            json.dump({"accelerator": reason, "cuda": found, "rows": [asdict(r) for r in mine]}, f)
        return 0

    print(f"dlbridge benchmark  {time.strftime('%Y-%m-%d %H:%M:%S')}  {machine()}")
    info = versions()
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"accelerator (this process): {reason}")
    print(f"{rounds} interleaved rounds per row, ~{budget_ms:g} ms per batch; figures are medians")

    rows: list[Row] = []
    cuda_why: dict[str, str | None] = {}
    paths: dict[str, str] = {}
    for path in PATHS if args.path == "both" else (args.path,):
        if path == here:
            how = "in this process"
            rows += (part := select_rows(args.quick, args.only))
            cuda_why.update(time_rows(part, path, rounds, budget_ms))
            paths[path] = f"{how}: {reason}"
        elif path == "compiled" and not _forced_pure():
            why = f"{_NO_ACCEL}: {reason}"
            rows += not_measured(select_rows(args.quick, args.only), path, why)
            paths[path] = why
        else:
            how = f"child process, {_PURE_ENV}={'1' if path == 'pure' else 'unset'}"
            part, child_reason, child_cuda = time_in_child(path, args, rounds)
            if path == "compiled" and not child_reason.startswith("compiled"):
                part = not_measured(part, path, f"{_NO_ACCEL}: {child_reason}")
            rows += part
            cuda_why.update(child_cuda)
            paths[path] = f"{how}: {child_reason}"
    for path, how in paths.items():
        print(f"  {path}: {how}")
    print()
    print_table(rows, cuda_why)

    figures: dict[str, Any] = {}
    if not args.no_import:
        figures = import_figures(3 if args.quick else 11, tuple(first.split(",")))
        print_imports(figures)

    timed = [r for r in rows if r.ratio is not None]
    count = ", ".join(f"{p} {sum(r.path == p for r in timed)}" for p in paths)
    missed = ", ".join(f"{p} {sum(r.path == p and r.met is False for r in timed)}" for p in paths)
    absent = sum(r.skipped.startswith(_NO_ACCEL) for r in rows)
    skipped = sum(bool(r.skipped) for r in rows) - absent
    print(f"\n{len(timed)} rows timed ({count}), {skipped} skipped" + (f", {absent} not measured (no accelerator)"
          if absent else "") + f"; above target: {missed}")  # fmt: skip
    if args.json:
        payload = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": machine(),
            "versions": info,
            "command": " ".join([os.path.relpath(sys.argv[0]) if sys.argv else "bench.py", *(argv or sys.argv[1:])]),
            "rounds": rounds,
            "accelerator": reason,
            "paths": paths,
            "cuda": {k: v or "available" for k, v in cuda_why.items()},
            "rows": [asdict(r) for r in rows],
            "imports": figures,
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
