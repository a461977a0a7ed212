"""What @dlbridge.guard costs on top of the conversions it performs (CPU: torch tensors -> NumPy body).

    PYTHONPATH=. python benchmarks/bench_guard.py [--number N]

For each case it times the guarded call and the same work written by hand (dlbridge.to_numpy on
each argument, the body, dlbridge.to_torch on the result) and prints guarded / by-hand; the
issue's budget is <= 1.2. Medians of several repeats; absolute times vary by machine.
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import dlbridge


def body1(x: np.ndarray) -> np.ndarray:
    return x


def body2(x: np.ndarray, y: np.ndarray, *, scale: float = 1.0) -> np.ndarray:
    return x


def body_tuple(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x, y


def cases() -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    x = torch.ones(1024)
    y = torch.ones(1024)
    b = torch.ones(1024, dtype=torch.bfloat16)
    to_numpy, to_torch = dlbridge.to_numpy, dlbridge.to_torch
    g1 = dlbridge.guard("numpy")(body1)
    g2 = dlbridge.guard("numpy")(body2)
    gt = dlbridge.guard("numpy")(body_tuple)
    ga = dlbridge.guard("numpy", args=("x",))(body2)
    gn = dlbridge.guard("numpy", returns=None)(body2)
    return [
        ("1 arg f32 -> 1 result", lambda: g1(x), lambda: to_torch(body1(to_numpy(x)))),
        ("1 arg bf16 -> 1 result", lambda: g1(b), lambda: to_torch(body1(to_numpy(b)))),
        ("2 args + kw -> 1 result", lambda: g2(x, y, scale=2.0),
         lambda: to_torch(body2(to_numpy(x), to_numpy(y), scale=2.0))),
        ("2 args -> tuple of 2", lambda: gt(x, y),
         lambda: tuple(to_torch(r) for r in body_tuple(to_numpy(x), to_numpy(y)))),
        ("args=('x',) -> 1 result", lambda: ga(x, y, scale=2.0),
         lambda: to_torch(body2(to_numpy(x), y, scale=2.0))),
        ("2 args, returns=None", lambda: gn(x, y), lambda: body2(to_numpy(x), to_numpy(y))),
    ]  # fmt: skip


def median_us(fn: Callable[[], Any], number: int, repeat: int) -> float:
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=7)
    opts = parser.parse_args(argv)
    print(f"torch {torch.__version__}, numpy {np.__version__}, dlbridge {dlbridge.__version__}")
    print(f"{'case':28s} {'guarded':>10s} {'by hand':>10s} {'ratio':>7s}")
    worst = 0.0
    for name, guarded, by_hand in cases():
        guarded(), by_hand()  # warm caches (adapters, capability rows)
        # Interleave the two so drift in machine load hits both alike.
        g = min(median_us(guarded, opts.number, opts.repeat) for _ in range(2))
        h = min(median_us(by_hand, opts.number, opts.repeat) for _ in range(2))
        worst = max(worst, g / h)
        print(f"{name:28s} {g:8.2f}us {h:8.2f}us {g / h:7.3f}")
    print(f"worst ratio {worst:.3f} (budget 1.2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
