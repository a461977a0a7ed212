"""What @dlbridge.guard costs on top of the conversions it performs (CPU: torch tensors -> NumPy body).

    PYTHONPATH=. python benchmarks/bench_guard.py [--number N] [--rounds R]

For each case it times the guarded call and the same work written by hand (dlbridge.to_numpy on
each argument, the body, dlbridge.to_torch on the result) and prints guarded / by-hand; the
budget is <= 1.2. Best of many alternating short blocks; absolute times vary by machine.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import dlbridge


# Bodies return new array objects (cheap views), so the guard has to convert them back; a body
# that returns an argument itself gets the caller's own object back with no conversion at all.
def body1(x: np.ndarray) -> np.ndarray:
    return x[...]


def body2(x: np.ndarray, y: np.ndarray, *, scale: float = 1.0) -> np.ndarray:
    return x[...]


def body_tuple(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x[...], y[...]


def identity(x: np.ndarray) -> np.ndarray:
    return x


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
    gi = dlbridge.guard("numpy")(identity)
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
        ("returns its argument", lambda: gi(x), lambda: to_torch(identity(to_numpy(x)))),
    ]  # fmt: skip


def timed(guarded: Callable[[], Any], by_hand: Callable[[], Any], number: int, rounds: int) -> tuple[float, float]:
    """Best per-call time (us) of each, measured in alternating short blocks.

    Alternating blocks and taking the minimum keep other processes' load (CI has 2 cores) from
    landing on one side only; the minimum is the cost without interference.
    """
    g, h = [], []
    for _ in range(rounds):
        g.append(timeit.timeit(guarded, number=number))
        h.append(timeit.timeit(by_hand, number=number))
    return min(g) / number * 1e6, min(h) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200, help="calls per timed block")
    parser.add_argument("--rounds", type=int, default=60, help="alternating blocks per case")
    opts = parser.parse_args(argv)
    print(f"torch {torch.__version__}, numpy {np.__version__}, dlbridge {dlbridge.__version__}")
    print(f"{'case':28s} {'guarded':>10s} {'by hand':>10s} {'ratio':>7s}")
    worst = 0.0
    for name, guarded, by_hand in cases():
        last = name == "returns its argument"  # not a like-for-like case: kept out of the worst ratio
        guarded(), by_hand()  # warm caches (adapters, capability rows)
        g, h = timed(guarded, by_hand, opts.number, opts.rounds)
        worst = worst if last else max(worst, g / h)
        print(f"{name:28s} {g:8.2f}us {h:8.2f}us {g / h:7.3f}")
    print(f"worst ratio {worst:.3f} (budget 1.2; the last case skips the conversion back)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
