"""What the public API looks like to a type checker; checked by ``mypy`` (see pyproject), never run.

``assert_type`` pins an inferred type; a ``# type: ignore[code]`` pins an error that must stay an
error (strict mypy reports an ignore that is no longer needed).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import torch
from typing_extensions import assert_type

import dlbridge
from dlbridge import SupportsDLPack


def convert_is_typed_like_the_to_functions(t: torch.Tensor) -> None:
    assert_type(dlbridge.convert(t, "numpy"), np.ndarray[Any, Any])
    assert_type(dlbridge.convert(t, "np"), np.ndarray[Any, Any])
    assert_type(dlbridge.convert(t, "torch"), torch.Tensor)
    assert_type(dlbridge.convert(t, "pytorch"), torch.Tensor)
    assert_type(dlbridge.convert(t, "jax"), jax.Array)
    assert_type(dlbridge.convert(t, "jax.numpy"), jax.Array)
    assert_type(dlbridge.convert(t, np), Any)  # a module: its name is not known to the checker
    assert_type(dlbridge.to_numpy(t), np.ndarray[Any, Any])
    assert_type(dlbridge.to_torch(t), torch.Tensor)
    assert_type(dlbridge.to_jax(t), jax.Array)


def options_are_checked(t: torch.Tensor) -> None:
    dlbridge.to_numpy(t, fallback="view", dtype=torch.bfloat16, device="cpu", copy=None, stream=None)
    dlbridge.to_numpy(t, fallback=None, dtype=np.float32, device=torch.device("cpu"))
    dlbridge.to_numpy(t, dtype=np.dtype("float32"), device=(1, 0))
    dlbridge.convert(t, "numpy", fallback="upcast", dtype="bfloat16")
    dlbridge.to_numpy(t, fallback="veiw")  # type: ignore[arg-type]
    dlbridge.convert(t, "numpy", fallback="veiw")  # type: ignore[call-overload]
    dlbridge.to_numpy(t, dtype=3)  # type: ignore[arg-type]
    dlbridge.to_numpy(t, copy="yes")  # type: ignore[arg-type]
    dlbridge.to_torch(t, stream="default")  # type: ignore[arg-type]
    dlbridge.to_torch(t, readonly="drop")
    dlbridge.convert(t, "torch", readonly="keep")
    dlbridge.explain(t, "torch", readonly="drop")
    dlbridge.to_torch(t, readonly="yes")  # type: ignore[arg-type]
    dlbridge.convert(t, "torch", readonly=True)  # type: ignore[call-overload]


def arrays_support_dlpack(t: torch.Tensor, n: np.ndarray[Any, Any]) -> None:
    a: SupportsDLPack = t
    b: SupportsDLPack = n
    c: SupportsDLPack = 3  # type: ignore[assignment]
    del a, b, c


def shards_are_typed_per_target(x: jax.Array) -> None:
    assert_type(dlbridge.shards(x, "torch"), list[tuple[tuple[slice, ...], torch.Tensor]])
    assert_type(dlbridge.shards(x, "numpy"), list[tuple[tuple[slice, ...], np.ndarray[Any, Any]]])
    assert_type(dlbridge.shards(x, "jax", copy=True), list[tuple[tuple[slice, ...], jax.Array]])
    assert_type(dlbridge.shards(x, np), list[tuple[tuple[slice, ...], Any]])
    parts = dlbridge.shards(x, "torch", dtype="float32")
    assert_type(dlbridge.from_shards(parts, x.sharding), jax.Array)
    assert_type(dlbridge.from_shards(parts, x.sharding, shape=x.shape, copy=False), jax.Array)
    dlbridge.from_shards(parts, x.sharding, shape=3)  # type: ignore[arg-type]
