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
otherwise do by hand, and what issue 5's "<= 1.25x the native same-width unsigned path" means.

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
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

# JAX grabs 75% of GPU memory on first use by default; the 1 GiB rows need room for torch/CuPy.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

CPU_FRAMEWORKS = ("torch", "jax", "numpy")
GPU_FRAMEWORKS = ("torch", "cupy", "jax")
DTYPES = ("float32", "bfloat16", "float8_e4m3fn")
UINT_OF = {"float32": "uint32", "bfloat16": "uint16", "float8_e4m3fn": "uint8"}
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float8_e4m3fn": 1, "uint32": 4, "uint16": 2, "uint8": 1}
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
# Issue 5's targets (dlbridge / native, medians of one run).
TARGET_NATIVE, TARGET_RAW_CAPSULE, TARGET_VIEW, TARGET_IMPORT_MS = 1.10, 0.70, 1.25, 50.0
RAW_CAPSULE_CONSUMERS = ("torch", "cupy")  # where dlbridge hands over a ready capsule


@dataclass
class Row:
    producer: str
    consumer: str
    device: str
    dtype: str
    nbytes: int
    mode: str = ""  # dlbridge's plan
    baseline: str = ""  # the dtype the native side converts
    native_us: float | None = None
    dlbridge_us: float | None = None
    ratio: float | None = None
    target: float | None = None
    met: bool | None = None
    zero_copy_native: bool | None = None
    zero_copy_dlbridge: bool | None = None
    alloc_bytes: int | None = None  # consumer allocator delta around one dlbridge call (GPU)
    rounds: int = 0
    calls_per_round: int = 0
    skipped: str = ""
    notes: list[str] = field(default_factory=list)


# --- frameworks -------------------------------------------------------------------------------


def _mod(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def _available(name: str) -> str | None:
    """None when ``name`` imports, else why not."""
    try:
        _mod(name)
    except Exception as err:  # any failure means "not here"
        return f"{name} not importable ({type(err).__name__}: {err})"
    return None


def cuda_reason(name: str) -> str | None:
    """None when ``name`` can use a CUDA device here, else why not."""
    missing = _available(name)
    if missing:
        return missing
    try:
        if name == "torch":
            ok = _mod("torch").cuda.is_available()
        elif name == "cupy":
            ok = _mod("cupy").cuda.runtime.getDeviceCount() > 0
        else:
            ok = bool(_mod("jax").devices("gpu"))
    except Exception as err:
        return f"{name}: no CUDA device ({type(err).__name__}: {str(err).splitlines()[0][:80]})"
    return None if ok else f"{name}: no CUDA device"


def native_import(consumer: str) -> Callable[[Any], Any]:
    if consumer == "jax":
        return _mod("jax.numpy").from_dlpack
    return _mod(consumer).from_dlpack


def data_ptr(x: Any) -> int:
    top = type(x).__module__.partition(".")[0]
    if top == "torch":
        return int(x.data_ptr())
    if top == "numpy":
        return int(x.__array_interface__["data"][0])
    if top in ("jax", "jaxlib"):
        return int(x.unsafe_buffer_pointer())
    if top in ("cupy", "cupy_backends"):
        return int(x.data.ptr)
    raise TypeError(f"no data pointer for {type(x)}")


def dtype_label(x: Any) -> str:
    return str(getattr(x.dtype, "name", x.dtype)).replace("torch.", "")


def _aligned_numpy(n_bytes: int) -> Any:
    # JAX copies CPU buffers that are not 64-byte aligned; align so the zero-copy path is measured.
    np = _mod("numpy")
    raw = np.empty(n_bytes + 64, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start : start + n_bytes]


def make_source(producer: str, dtype: str, nbytes: int, device: str) -> tuple[Any, Any]:
    """(array of ``dtype``, same-width unsigned array) from ``producer`` on ``device``."""
    n = nbytes // ITEMSIZE[dtype]
    uint = UINT_OF[dtype]
    if producer == "torch":
        torch = _mod("torch")
        dev = "cuda" if device == "cuda" else "cpu"
        x = (torch.arange(n, device=dev, dtype=torch.float32) % 8).to(getattr(torch, dtype))
        return x, x.view(getattr(torch, uint))
    if producer == "numpy":
        np = _mod("numpy")
        ml = _mod("ml_dtypes")
        np_dtype = np.dtype(getattr(ml, dtype)) if dtype != "float32" else np.dtype(np.float32)
        x = _aligned_numpy(nbytes).view(np_dtype)
        x[...] = (np.arange(n, dtype=np.float32) % 8).astype(np_dtype)
        return x, x.view(uint)
    if producer == "jax":
        jax = _mod("jax")
        jnp = jax.numpy
        dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
        x = jax.device_put((jnp.arange(n, dtype=jnp.float32) % 8).astype(getattr(jnp, dtype)), dev)
        u = jax.lax.bitcast_convert_type(x, getattr(jnp, uint))  # a copy; only its cost matters
        return x.block_until_ready(), u.block_until_ready()
    if producer == "cupy":
        cp = _mod("cupy")
        if dtype == "float32":
            x = cp.arange(n, dtype=cp.float32) % 8
        else:
            ml = _mod("ml_dtypes")  # CuPy 14 holds bf16 via ml_dtypes; no CuPy holds fp8
            x = (cp.arange(n, dtype=cp.float32) % 8).astype(getattr(ml, dtype))
        return x, x.view(uint)
    raise ValueError(producer)


def alloc_counter(consumer: str) -> Callable[[], int] | None:
    """The consumer's device allocator counter (bytes in use), or None where it has none."""
    if consumer == "torch":
        return _mod("torch").cuda.memory_allocated
    if consumer == "cupy":
        return _mod("cupy").get_default_memory_pool().used_bytes
    if consumer == "jax":
        dev = _mod("jax").devices("gpu")[0]
        return lambda: int((dev.memory_stats() or {}).get("bytes_in_use", 0))
    return None


def synchronize(device: str) -> None:
    if device == "cuda" and "torch" in sys.modules:
        sys.modules["torch"].cuda.synchronize()


# --- timing ------------------------------------------------------------------------------------


def _batch_us(fn: Callable[[], Any], calls: int) -> float:
    clock = time.perf_counter_ns
    t0 = clock()
    for _ in range(calls):
        fn()
    return (clock() - t0) / calls / 1e3


def interleaved(native: Callable[[], Any], ours: Callable[[], Any], rounds: int,
                budget_ms: float) -> tuple[float, float, float, int]:  # fmt: skip
    """Medians (native µs, dlbridge µs, ratio) over ``rounds`` alternating batches."""
    for fn in (native, ours):  # warm caches and first-use imports
        fn()
        fn()
    probe = max(_batch_us(native, 20), _batch_us(ours, 20), 0.05)
    calls = max(10, int(budget_ms * 1e3 / probe))
    nat, dlb, ratios = [], [], []
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for i in range(rounds):
            if i % 2:
                b = _batch_us(ours, calls)
                a = _batch_us(native, calls)
            else:
                a = _batch_us(native, calls)
                b = _batch_us(ours, calls)
            nat.append(a)
            dlb.append(b)
            ratios.append(b / a)
            gc.collect()
    finally:
        if gc_was_on:
            gc.enable()
    return statistics.median(nat), statistics.median(dlb), statistics.median(ratios), calls


# --- one row ----------------------------------------------------------------------------------


def target_for(row: Row) -> float:
    if row.mode in ("reinterpret", "view") or row.baseline != row.dtype:
        return TARGET_VIEW
    if row.device == "cuda" and row.consumer in RAW_CAPSULE_CONSUMERS:
        return TARGET_RAW_CAPSULE
    return TARGET_NATIVE


def run_row(row: Row, rounds: int, budget_ms: float) -> Row:
    import dlbridge
    from dlbridge._adapters import ADAPTERS
    from dlbridge._convert import plan_for
    from dlbridge._options import Fallback

    try:
        x, u = make_source(row.producer, row.dtype, row.nbytes, row.device)
    except Exception as err:  # a producer that cannot make this dtype
        row.skipped = f"{row.producer} cannot make {row.dtype}: {type(err).__name__}: {err}"[:160]
        return row
    fallback: Fallback = "raise" if row.dtype == "float32" else "view"
    convert = getattr(dlbridge, f"to_{row.consumer}")
    ours = (lambda: convert(x)) if fallback == "raise" else (lambda: convert(x, fallback="view"))
    try:
        row.mode = plan_for(dlbridge.inspect(x), ADAPTERS[row.consumer].capabilities(), fallback).mode
        result = ours()
    except Exception as err:
        row.skipped = f"dlbridge refused: {type(err).__name__}: {err}"[:160]
        return row
    synchronize(row.device)
    row.zero_copy_dlbridge = data_ptr(result) == data_ptr(x)
    if dtype_label(result) != row.dtype and row.mode != "view":
        row.notes.append(f"result dtype {dtype_label(result)}")
    del result
    imp = native_import(row.consumer)
    src = x
    if row.mode == "native":
        try:
            imp(x)
        except Exception:  # e.g. NumPy cannot export ml_dtypes arrays
            src = u
    else:
        src = u
    row.baseline = dtype_label(src)
    try:
        native_result = imp(src)
    except Exception as err:
        row.skipped = f"native {row.consumer}.from_dlpack({row.baseline}) failed: {type(err).__name__}: {err}"[:160]
        return row
    synchronize(row.device)
    row.zero_copy_native = data_ptr(native_result) == data_ptr(src)
    del native_result
    if row.device == "cuda":
        counter = alloc_counter(row.consumer)
        if counter is not None:
            before = counter()
            held = ours()
            synchronize(row.device)
            row.alloc_bytes = counter() - before
            del held
    native_us, ours_us, ratio, calls = interleaved(lambda: imp(src), ours, rounds, budget_ms)
    row.native_us, row.dlbridge_us, row.ratio = native_us, ours_us, ratio
    row.rounds, row.calls_per_round = rounds, calls
    row.target = target_for(row)
    row.met = ratio <= row.target
    return row


def cpu_rows(quick: bool) -> list[Row]:
    rows = []
    for producer in CPU_FRAMEWORKS:
        for consumer in CPU_FRAMEWORKS:
            if producer == consumer:
                continue
            for dtype in DTYPES:
                rows.append(Row(producer, consumer, "cpu", dtype, KIB))
            if not quick:  # the cost does not grow with size
                rows.append(Row(producer, consumer, "cpu", "float32", 16 * MIB))
    return rows


def gpu_rows(quick: bool) -> list[Row]:
    rows = []
    sizes = (KIB,) if quick else (KIB, GIB)
    for producer in GPU_FRAMEWORKS:
        for consumer in GPU_FRAMEWORKS:
            if producer == consumer:
                continue
            for dtype in DTYPES:
                for nbytes in sizes:
                    rows.append(Row(producer, consumer, "cuda", dtype, nbytes))
    return rows


# --- imports (fresh interpreters) ----------------------------------------------------------------

_IMPORT_DLBRIDGE = """
import sys, time
t = time.perf_counter()
import dlbridge
ms = (time.perf_counter() - t) * 1e3
loaded = [m for m in ("torch", "jax", "numpy", "cupy", "ml_dtypes") if m in sys.modules]
print(ms, ",".join(loaded))
"""

_FIRST_CALL = """
import sys, time
{setup}
import dlbridge
had = {target!r} in sys.modules
t = time.perf_counter(); dlbridge.to_{target}(x); first = time.perf_counter() - t
t = time.perf_counter(); dlbridge.to_{target}(x); second = time.perf_counter() - t
print(first * 1e3, second * 1e6, had)
"""

_IMPORT_ONLY = """
import time
t = time.perf_counter()
import {module}
print((time.perf_counter() - t) * 1e3)
"""

_SOURCES = {  # a small float32 source from a framework other than the target
    "torch": "import numpy as np; x = np.ones(256, dtype=np.float32)",
    "jax": "import numpy as np; x = np.ones(256, dtype=np.float32)",
    "numpy": "import torch; x = torch.ones(256)",
}


def _child(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if out.returncode:
        raise RuntimeError(f"child failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return out.stdout.split()


def import_figures(runs: int, targets: tuple[str, ...] = CPU_FRAMEWORKS) -> dict[str, Any]:
    times: list[float] = []
    loaded: set[str] = set()
    for _ in range(runs):
        ms, *mods = _child(_IMPORT_DLBRIDGE)
        times.append(float(ms))
        loaded.update(m for m in (mods[0].split(",") if mods else []) if m)
    figures: dict[str, Any] = {
        "import_dlbridge_ms": statistics.median(times),
        "import_dlbridge_runs_ms": times,
        "frameworks_loaded_by_import": sorted(loaded),
        "first_call": {},
    }
    for target in targets:
        if _available(target):
            continue
        first, second, had = _child(_FIRST_CALL.format(setup=_SOURCES[target], target=target))
        module = "jax.numpy" if target == "jax" else target
        alone = float(_child(_IMPORT_ONLY.format(module=module))[0])
        figures["first_call"][target] = {
            "first_ms": float(first),
            "second_us": float(second),
            "import_alone_ms": alone,
            "already_imported_by_source": had == "True",
        }
    return figures


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
