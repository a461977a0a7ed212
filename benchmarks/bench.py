"""dlbridge handoff benchmark: each consumer's own ``from_dlpack`` against dlbridge, pair by pair.

    python benchmarks/bench.py [--quick] [--json PATH] [--only TEXT]

For every producer -> consumer pair and dtype it prints the native cost (the consumer's own
``from_dlpack`` on the producer's object), the dlbridge cost (``dlbridge.to_<consumer>``), their
ratio, dlbridge's plan (native / reinterpret / view) and whether each path was zero-copy (the
result's data pointer equals the source's). Both sides are timed in one process, interleaved
round by round (the order alternates), and each figure is the median over the rounds; the ratio
is the median of the per-round ratios, so drift on a busy machine cancels out.

Baselines: where the consumer cannot import the dtype itself (bf16 -> NumPy, fp8 -> CuPy), or
the producer cannot export it (ml_dtypes arrays in NumPy), the native side converts a
same-width unsigned array instead (uint16 for bf16, uint8 for fp8): that is what a user would
otherwise do by hand, and what the target "<= 1.25x the native same-width unsigned path" means.

CUDA pairs (torch, CuPy, JAX; 1 KiB and 1 GiB) are written here and run only where CUDA
exists; elsewhere each is listed as skipped with the reason. On GPU rows the consumer's
allocator counter is read around one dlbridge call ("alloc" column, bytes; 0 = nothing new
allocated on the device).

The import section runs fresh interpreters: ``import dlbridge`` alone, and the first and second
conversion into each framework (the first pays that framework's import once).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
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
    ROOT,
    TARGET_IMPORT_MS,
    Row,
    _available,
    _mod,
    cpu_rows,
    cuda_reason,
    gpu_rows,
)
from _timing import import_figures, run_row  # noqa: E402

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


# --- output ----------------------------------------------------------------------------------


def _size(nbytes: int) -> str:
    for unit, div in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= div:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


def _yn(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "NO")


HEADER = (
    f"{'pair':<15} {'dev':<4} {'dtype':<13} {'size':>7} {'mode':<11} {'baseline':<13} "
    f"{'native µs':>9} {'dlbridge µs':>11} {'ratio':>6} {'target':>6} {'met':>4} {'zc nat':>6} {'zc dlb':>6} {'alloc':>6}"
)


def format_row(r: Row) -> str:
    pair = f"{r.producer}->{r.consumer}"
    head = f"{pair:<15} {r.device:<4} {r.dtype:<13} {_size(r.nbytes):>7} "
    if r.skipped:
        return head + f"skipped: {r.skipped}"
    alloc = "-" if r.alloc_bytes is None else str(r.alloc_bytes)
    line = (
        head + f"{r.mode:<11} {r.baseline:<13} {r.native_us:>9.2f} {r.dlbridge_us:>11.2f} {r.ratio:>6.2f} "
        f"{r.target:>6.2f} {_yn(r.met):>4} {_yn(r.zero_copy_native):>6} {_yn(r.zero_copy_dlbridge):>6} {alloc:>6}"
    )
    return line + (f"  ({'; '.join(r.notes)})" if r.notes else "")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("dlbridge", "torch", "jax", "jaxlib", "numpy", "ml_dtypes", "cupy"):
        try:
            out[name] = str(_mod(name).__version__)
        except Exception:
            out[name] = "not installed"
    from importlib.metadata import PackageNotFoundError, version

    from dlbridge._adapters import ADAPTERS

    for name in ("tensorflow", "paddle"):  # read from metadata: importing TF costs seconds
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few short rounds (a smoke run, not figures)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure to PATH as JSON")
    parser.add_argument("--only", metavar="TEXT[,TEXT]", help="only rows whose 'producer->consumer dtype device' "
                        "contains one of the comma-separated TEXTs")  # fmt: skip
    parser.add_argument("--rounds", type=int, help="interleaved rounds per row (default 21, --quick 3)")
    parser.add_argument("--no-import", action="store_true", help="skip the fresh-interpreter import section")
    parser.add_argument("--first-call", metavar="NAME[,NAME]", help="targets whose first conversion is timed in a "
                        f"fresh interpreter (default: {','.join(CPU_FRAMEWORKS)}; --quick: numpy)")  # fmt: skip
    args = parser.parse_args(argv)
    first = args.first_call or ("numpy" if args.quick else ",".join(CPU_FRAMEWORKS))
    unknown = set(first.split(",")) - set(CPU_FRAMEWORKS)
    if unknown:
        parser.error(f"--first-call: unknown {', '.join(sorted(unknown))}; expected {', '.join(CPU_FRAMEWORKS)}")
    rounds = args.rounds or (3 if args.quick else 21)
    budget_ms = 2.0 if args.quick else 10.0

    print(f"dlbridge benchmark  {time.strftime('%Y-%m-%d %H:%M:%S')}  {machine()}")
    info = versions()
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"{rounds} interleaved rounds per row, ~{budget_ms:g} ms per batch; figures are medians\n")

    rows = cpu_rows(args.quick) + gpu_rows(args.quick)
    if args.only:
        wanted = [w for w in args.only.split(",") if w]
        rows = [r for r in rows if any(w in f"{r.producer}->{r.consumer} {r.dtype} {r.device}" for w in wanted)]
    used = {name for r in rows for name in (r.producer, r.consumer)}
    for name in IMPORT_FIRST:
        if name in used:
            _available(name)  # imports it (if it can), before any row imports tensorflow
    on_gpu = {name for r in rows if r.device == "cuda" for name in (r.producer, r.consumer)}
    cuda_why = {name: cuda_reason(name) for name in GPU_FRAMEWORKS if name in on_gpu}
    print(HEADER)
    skipped_pairs: set[tuple[str, str]] = set()
    for row in rows:
        if row.device == "cpu" and (_available(row.producer) or _available(row.consumer)):
            row.skipped = _available(row.producer) or _available(row.consumer) or ""
        elif row.device == "cuda" and (cuda_why[row.producer] or cuda_why[row.consumer]):
            row.skipped = cuda_why[row.producer] or cuda_why[row.consumer] or ""
            if (row.producer, row.consumer) not in skipped_pairs:  # one line per pair that cannot run here
                skipped_pairs.add((row.producer, row.consumer))
                print(f"{row.producer + '->' + row.consumer:<15} cuda (all dtypes, sizes) skipped: {row.skipped}")
            continue
        else:
            run_row(row, rounds, budget_ms)
            gc.collect()
        print(format_row(row), flush=True)

    figures: dict[str, Any] = {}
    if not args.no_import:
        figures = import_figures(3 if args.quick else 11, tuple(first.split(",")))
        ms = figures["import_dlbridge_ms"]
        mark = "met" if ms <= TARGET_IMPORT_MS else "MISSED"
        print(f"\nimport dlbridge (fresh interpreter, median of {len(figures['import_dlbridge_runs_ms'])}): "
              f"{ms:.1f} ms (target <= {TARGET_IMPORT_MS:g} ms: {mark}); frameworks imported: "
              f"{', '.join(figures['frameworks_loaded_by_import']) or 'none'}")  # fmt: skip
        for target, f in figures["first_call"].items():
            pre = " (already imported by the source)" if f["already_imported_by_source"] else ""
            print(f"first to_{target}(): {f['first_ms']:.1f} ms{pre}; second: {f['second_us']:.1f} µs; "
                  f"import {target} alone: {f['import_alone_ms']:.1f} ms")  # fmt: skip

    timed = [r for r in rows if r.ratio is not None]
    missed = [r for r in timed if not r.met]
    print(f"\n{len(timed)} rows timed, {sum(bool(r.skipped) for r in rows)} skipped, {len(missed)} above target")
    if args.json:
        payload = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": machine(),
            "versions": info,
            "command": " ".join([os.path.relpath(sys.argv[0]) if sys.argv else "bench.py", *(argv or sys.argv[1:])]),
            "rounds": rounds,
            "cuda": {k: v or "available" for k, v in cuda_why.items()},
            "rows": [asdict(r) for r in rows],
            "imports": figures,
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
