"""How far the compiled route's NumPy -> torch handoff is from the cheapest one possible: ``torch.from_dlpack``
(native), ``dlbridge.to_torch`` and a floor (``benchmarks/floor.c``: NumPy's ``__dlpack__`` through its C function,
the capsule's tensor taken, torch's DLPack C exchange API import; no check at all), timed in one process,
interleaved round by round (the order rotating each round), ~10 ms batches: the medians, and the best batch of
each (the least disturbed: steadier where two builds are compared run after run).

    python benchmarks/bench_floor.py [--rounds N] [--ml-dtypes] [--all] [--json PATH]

``--ml-dtypes`` imports ml_dtypes first (NumPy's bf16/fp8 kinds: the route then reads each array's dtype, to
relabel those); ``--all`` imports every framework installed first, as ``bench.py`` runs. The floor is built with
the C compiler (``cc``, or ``$CC``) against this interpreter's headers, in a temporary folder. It prints the three
times, each side's ratio to native, and ``dlbridge - floor`` (the route's own work per call, in µs).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _timing import _batch_us  # noqa: E402  (bench.py's batch: the same clock and loop)

FRAMEWORKS = ("paddle", "tensorflow", "jax", "onnxruntime", "mlx.core", "warp", "array_api_strict")  # (paddle first)


def build_floor(folder: str) -> Any:
    """``benchmarks/floor.c`` compiled and imported (module ``dlbridge_floor``)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("bench_floor: no C compiler (cc, gcc or $CC)")
    target = Path(folder) / f"dlbridge_floor{sysconfig.get_config_var('EXT_SUFFIX')}"
    include = sysconfig.get_paths()["include"]
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(ROOT / "benchmarks" / "floor.c"),
                    "-o", str(target)], check=True)  # fmt: skip
    spec = importlib.util.spec_from_file_location("dlbridge_floor", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fns: dict[str, Callable[[], Any]], rounds: int, budget_ms: float = 10.0) -> dict[str, list[float]]:
    """Each function's batch times (µs per call) over ``rounds`` rounds, each round timing every function once,
    the order rotating."""
    for fn in fns.values():
        fn()
        fn()
    calls = max(10, int(budget_ms * 1e3 / max(max(_batch_us(fn, 20) for fn in fns.values()), 0.05)))
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    gc.disable()
    try:
        for i in range(rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                times[name].append(_batch_us(fns[name], calls))
    finally:
        gc.enable()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--ml-dtypes", action="store_true", help="import ml_dtypes first")
    parser.add_argument("--all", action="store_true", help="import every framework installed first")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    loaded = []
    for name in (FRAMEWORKS if args.all else ()) + (("ml_dtypes",) if args.ml_dtypes else ()):
        try:
            __import__(name)
            loaded.append(name)
        except ImportError:
            pass
    import numpy as np
    import torch

    import dlbridge
    from dlbridge._accelerator import reason

    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if api is None:
        raise SystemExit(f"bench_floor: torch {torch.__version__} has no DLPack C exchange API")
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":  # the exchange API imports versioned tensors only
        raise SystemExit(
            f"bench_floor: NumPy {np.__version__} exports no versioned capsule (__dlpack__(max_version=): 2.1)"
        )
    with tempfile.TemporaryDirectory() as folder:
        floor = build_floor(folder)
        floor.setup(np.ndarray.__dict__["__dlpack__"], api)
        x = np.arange(256, dtype=np.float32)
        for fn in (torch.from_dlpack, dlbridge.to_torch, floor.to_torch):  # the same memory, values and dtype
            out = fn(x)
            if out.data_ptr() != x.ctypes.data or out.dtype != torch.float32 or out.numpy().tolist() != x.tolist():
                raise SystemExit(f"bench_floor: {fn} did not hand over the array's memory, values and dtype")
        times = timed({"native": lambda: torch.from_dlpack(x), "dlbridge": lambda: dlbridge.to_torch(x),
                       "floor": lambda: floor.to_torch(x)}, args.rounds)  # fmt: skip
    print(f"numpy -> torch float32 (1 KiB), {args.rounds} rounds; accelerator: {reason}; loaded first: "
          f"{', '.join(loaded) or 'nothing'}")  # fmt: skip
    figures = {}
    for label, pick in (("median", statistics.median), ("best", min)):  # best: the least disturbed batch
        us = {name: pick(values) for name, values in times.items()}
        ratios = {name: us[name] / us["native"] for name in ("dlbridge", "floor")}
        figures[label] = {"us": us, "ratios": ratios}
        print(f"  {label:6s} native {us['native']:.3f} µs   dlbridge {us['dlbridge']:.3f} µs ({ratios['dlbridge']:.3f}x)"
              f"   floor {us['floor']:.3f} µs ({ratios['floor']:.3f}x)   dlbridge - floor "
              f"{us['dlbridge'] - us['floor']:.3f} µs")  # fmt: skip
    if args.json:
        record = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "python": sys.version.split()[0],
                  "torch": torch.__version__, "numpy": np.__version__, "accelerator": reason, "loaded": loaded,
                  "rounds": args.rounds, "us": figures["median"]["us"], "ratios": figures["median"]["ratios"],
                  "best": figures["best"]}  # fmt: skip
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
