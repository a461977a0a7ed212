"""How benchmarks/bench.py times things: interleaved rounds of native and dlbridge calls, one
row end to end, and the import figures taken in fresh interpreters."""

from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _cases import (
    CPU_FRAMEWORKS,
    ROOT,
    Row,
    _available,
    alloc_counter,
    data_ptr,
    dtype_label,
    make_source,
    native_import,
    synchronize,
    target_for,
)

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
    # Each round ends with a collection of what the batches left; the objects alive before the rounds (every
    # framework's: ~630,000, 0.36 s a collection on a 2-core VM) are frozen out of it.
    gc.collect()
    gc.freeze()
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
        gc.unfreeze()
        if gc_was_on:
            gc.enable()
    return statistics.median(nat), statistics.median(dlb), statistics.median(ratios), calls


# --- one row ----------------------------------------------------------------------------------


def _waiting(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` that returns once its result is computed: an asynchronous consumer (JAX) returns from an
    import that copies before the copy is made, so timing the call alone times its dispatch, and a loop of
    them queues copies faster than they are made (memory grows until the queue drains)."""
    return lambda: call().block_until_ready()


def run_row(row: Row, rounds: int, budget_ms: float) -> Row:
    import dlbridge
    from dlbridge._adapters import ADAPTERS
    from dlbridge._options import Fallback
    from dlbridge._pipeline._plan import plan_for

    try:
        x, u = make_source(row.producer, row.dtype, row.nbytes, row.device)
    except Exception as err:  # a producer that cannot make this dtype
        row.skipped = f"{row.producer} cannot make {row.dtype}: {type(err).__name__}: {err}"[:160]
        return row
    fallback: Fallback = "raise" if row.dtype == "float32" else "view"
    convert = getattr(dlbridge, f"to_{row.consumer}")
    ours = (lambda: convert(x)) if fallback == "raise" else (lambda: convert(x, fallback="view"))
    if row.readonly != "keep":  # an immutable producer's arrays (JAX), shared as native from_dlpack shares them
        ro = row.readonly
        ours = (lambda: convert(x, readonly=ro)) if fallback == "raise" else (
            lambda: convert(x, fallback="view", readonly=ro))  # fmt: skip
        row.notes.append(f'readonly="{ro}"')
    try:
        row.mode = plan_for(dlbridge.inspect(x), ADAPTERS[row.consumer].capabilities(), fallback).mode
        result = ours()
    except Exception as err:
        row.skipped = f"dlbridge refused: {type(err).__name__}: {err}"[:160]
        return row
    synchronize(row.device)
    waits = hasattr(result, "block_until_ready")  # an asynchronous consumer's array (JAX): see _waiting
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
    native: Callable[[], Any] = lambda: imp(src)  # noqa: E731
    if waits:  # both sides wait for each result: the copy is timed, not its dispatch, and none piles up
        native, ours = _waiting(native), _waiting(ours)
        row.notes.append("results waited for")
    native_us, ours_us, ratio, calls = interleaved(native, ours, rounds, budget_ms)
    row.native_us, row.dlbridge_us, row.ratio = native_us, ours_us, ratio
    row.rounds, row.calls_per_round = rounds, calls
    row.target = target_for(row)
    row.met = None if row.target is None else ratio <= row.target
    return row


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
    "paddle": "import numpy as np; x = np.ones(256, dtype=np.float32)",
    "tensorflow": "import numpy as np; x = np.ones(256, dtype=np.float32)",
    "mlx": "import numpy as np; x = np.ones(256, dtype=np.float32)",
    "array_api_strict": "import numpy as np; x = np.ones(256, dtype=np.float32)",
    "onnxruntime": "import numpy as np; x = np.ones(256, dtype=np.float32)",
    "warp": "import numpy as np; x = np.ones(256, dtype=np.float32)",
}


def _env(**extra: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _child(code: str, env: dict[str, str] | None = None) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env or _env(),
                         timeout=300)  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"child failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return out.stdout.split()


def _wall_ms(code: str) -> float:
    t = time.perf_counter()
    _child(code)
    return (time.perf_counter() - t) * 1e3


def import_figures(runs: int, targets: tuple[str, ...] = CPU_FRAMEWORKS) -> dict[str, Any]:
    """``import dlbridge`` timed inside fresh interpreters (``runs`` of each kind, interleaved so load
    drift hits all alike): as this environment runs it (compiling from source where
    PYTHONDONTWRITEBYTECODE is set), with bytecode caches (as an installed package runs), and the
    wall time of ``python -c pass`` (the interpreter's own start, which no import figure includes)."""
    import tempfile

    times: list[float] = []
    cached: list[float] = []
    bare: list[float] = []
    loaded: set[str] = set()
    with tempfile.TemporaryDirectory() as cache_dir:
        with_bytecode = _env(PYTHONDONTWRITEBYTECODE=None, PYTHONPYCACHEPREFIX=cache_dir)
        _child(_IMPORT_DLBRIDGE, with_bytecode)  # writes the caches
        for _ in range(runs):
            ms, *mods = _child(_IMPORT_DLBRIDGE)
            times.append(float(ms))
            loaded.update(m for m in (mods[0].split(",") if mods else []) if m)
            cached.append(float(_child(_IMPORT_DLBRIDGE, with_bytecode)[0]))
            bare.append(_wall_ms("pass"))
    figures: dict[str, Any] = {
        "import_dlbridge_ms": statistics.median(times),
        "import_dlbridge_runs_ms": times,
        "import_dlbridge_compiles": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
        "import_dlbridge_bytecode_ms": statistics.median(cached),
        "import_dlbridge_bytecode_runs_ms": cached,
        "python_pass_wall_ms": statistics.median(bare),
        "python_pass_wall_runs_ms": bare,
        "frameworks_loaded_by_import": sorted(loaded),
        "first_call": {},
    }
    for target in targets:
        if _available(target):
            continue
        first, second, had = _child(_FIRST_CALL.format(setup=_SOURCES[target], target=target))
        module = {"jax": "jax.numpy", "mlx": "mlx.core"}.get(target, target)  # what the conversion imports
        alone = float(_child(_IMPORT_ONLY.format(module=module))[0])
        figures["first_call"][target] = {
            "first_ms": float(first),
            "second_us": float(second),
            "import_alone_ms": alone,
            "already_imported_by_source": had == "True",
        }
    return figures
