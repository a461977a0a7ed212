"""A CPU proxy for the GPU cost of a conversion: the Python calls one warm CUDA conversion makes, counted
with ``sys.setprofile`` against simulated CUDA (tests/simcuda: not GPU evidence, no timing).

    python benchmarks/bench_gpu_calls.py [--pairs torch->cupy,...] [--json PATH]

For each CUDA pair and case (float32, bfloat16, bool, fp8 and bf16 through ``fallback="view"``) it converts
a simulated CUDA array a few times (warm), then counts, during one more conversion, the Python functions
entered (``call`` events) by where they live: dlbridge's own (``dlbridge/``), the frameworks' Python
(torch, JAX, and the stand-ins that play CuPy and the CUDA side), and whether torch's Python
``Tensor.__dlpack__`` ran; and the same for the consumer's own ``from_dlpack`` on the same source (the
native handoff, or on the same-width unsigned view where the consumer cannot hold the dtype). On a GPU
the Python a conversion runs is most of its host cost: the targets are no dlbridge frame on the compiled
path, and no ``Tensor.__dlpack__`` where torch's DLPack C exchange API exists.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAIRS = ("torch->cupy", "cupy->torch", "jax->torch", "jax->cupy", "torch->jax", "cupy->jax", "cupy->cupy")
CASES = ("float32", "bfloat16", "bool", "float8_e4m3fn view", "bfloat16 view")
_SIM = str(ROOT / "tests" / "simcuda")
_DLBRIDGE = str(ROOT / "dlbridge")


def _where(filename: str) -> str:
    if filename.startswith(_DLBRIDGE):
        return "dlbridge"
    if filename.startswith(_SIM):
        return "stand-in"
    for name in ("torch", "jax", "jaxlib", "numpy", "ml_dtypes"):
        if f"/{name}/" in filename:
            return name
    return "other"


def count_calls(fn: Callable[[], Any]) -> tuple[Counter[str], bool]:
    """Python functions entered during ``fn()``, by place; and whether torch's Tensor.__dlpack__ ran."""
    places: Counter[str] = Counter()
    dunder = [False]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            places[_where(code.co_filename)] += 1
            if code.co_name == "__dlpack__" and "/torch/" in code.co_filename:
                dunder[0] = True

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return places, dunder[0]


def _source(sim: Any, producer: str, dtype: str) -> Any:
    import ml_dtypes
    import numpy as np
    import torch

    from tests.simcuda import exact

    ref = torch.arange(8).to(getattr(torch, dtype))
    if producer == "torch":
        return exact.cuda_tensor(ref.clone())
    bits = ref.view(torch.uint8 if ref.element_size() == 1 else torch.uint16) if dtype != "float32" else None
    values = ref.numpy() if bits is None and dtype != "bool" else (
        ref.numpy() if dtype == "bool" else bits.numpy().view(getattr(ml_dtypes, dtype)))  # fmt: skip
    if producer == "cupy":
        return sim.cp.asarray(np.asarray(values))
    import jax.numpy as jnp

    gpu = sim.gpu or sim.jax()
    return gpu.claim(jnp.asarray(values), gpu.devices[0])


def _native(sim: Any, producer: str, target: str, x: Any, view: bool) -> Callable[[], Any]:
    """The consumer's own from_dlpack on ``x`` (on its same-width unsigned bits for a view case)."""
    import torch

    source = x
    if view:
        width = {1: "uint8", 2: "uint16"}[x.element_size() if producer == "torch" else x.dtype.itemsize]
        if producer == "torch":
            from tests.simcuda import exact

            source = exact.cuda_tensor(x.view(getattr(torch, width)))
        elif producer == "jax":
            source = sim.gpu.claim(x.view(width), sim.gpu.devices[0])
        else:
            source = x.view(width)
    if target == "torch":
        return lambda: torch.from_dlpack(source)
    if target == "cupy":
        return lambda: sim.cp.from_dlpack(source)
    import jax

    return lambda: jax.dlpack.from_dlpack(source)


def measure(pair: str, case: str) -> dict[str, Any]:
    import pytest

    import dlbridge
    from dlbridge._adapters import ADAPTERS
    from tests.simcuda import exact
    from tests.simcuda.harness import Sim

    producer, target = pair.split("->")
    dtype, _, mode = case.partition(" ")
    view = mode == "view"
    with pytest.MonkeyPatch.context() as mp:
        sim = Sim(mp)
        try:
            sim.cupy("13.3.0" if view else "14.2.0")  # CuPy 13.3 holds no bfloat16: the view's consumer
            sim.torch()
            exact.install(mp)
            if "jax" in pair:
                sim.jax()
            try:
                x = _source(sim, producer, dtype)
            except (ValueError, TypeError) as err:
                return {"pair": pair, "case": case, "skipped": f"{producer} cannot make it: {err}"[:160]}
            to = getattr(dlbridge, f"to_{target}")
            options: dict[str, Any] = {"fallback": "view"} if view else {}
            if not ADAPTERS[producer].mutable_arrays:  # JAX: zero-copy, as native from_dlpack (bench.py's rows too)
                options["readonly"] = "drop"
            try:
                for _ in range(4):
                    to(x, **options)
            except dlbridge.DLBridgeError as err:
                return {"pair": pair, "case": case, "skipped": f"{type(err).__name__}: {err}"[:160]}
            ours, our_dunder = count_calls(lambda: to(x, **options))
            theirs, their_dunder = count_calls(_native(sim, producer, target, x, view))
        finally:
            sim.close()
    return {"pair": pair, "case": case, "dlbridge": dict(ours), "native": dict(theirs),
            "torch_dlpack": our_dunder, "native_torch_dlpack": their_dunder}  # fmt: skip


def _row(r: dict[str, Any]) -> str:
    if "skipped" in r:
        return f"{r['pair']:12s} {r['case']:20s} skipped: {r['skipped']}"
    ours, theirs = r["dlbridge"], r["native"]
    return (f"{r['pair']:12s} {r['case']:20s} {ours.get('dlbridge', 0):9d} {sum(ours.values()):9d} "
            f"{'yes' if r['torch_dlpack'] else 'no':>7s} | {sum(theirs.values()):9d} "
            f"{'yes' if r['native_torch_dlpack'] else 'no':>7s}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=",".join(PAIRS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from dlbridge._accelerator import reason
    from tests.simcuda.harness import modelled_stack

    with contextlib.suppress(BaseException):
        modelled_stack()
    rows = [measure(pair, case) for pair in args.pairs.split(",") for case in CASES]
    print(f"simulated CUDA (tests/simcuda; not GPU evidence); accelerator: {reason}; "
          f"DLBRIDGE_PURE_PYTHON={os.environ.get('DLBRIDGE_PURE_PYTHON', '')!r}")  # fmt: skip
    print(
        "Python functions entered by one warm conversion (dlbridge's own / all) and whether torch's Python "
        "Tensor.__dlpack__ ran; then the same for the consumer's own from_dlpack"
    )
    print(f"{'pair':12s} {'case':20s} {'dlbridge':>9s} {'all':>9s} {'dunder':>7s} | {'native':>9s} {'dunder':>7s}")
    for r in rows:
        print(_row(r))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
