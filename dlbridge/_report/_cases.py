"""What the report probes: frameworks, devices, dtypes, and how to build a source per cell.

Everything framework-specific comes from the adapter registry: which frameworks exist, where
they make arrays, how to make one and read it back. The names and defaults here are plain
data the parent process reads without importing any framework; the functions below them run
in the worker process only. Reference arrays are built with the host adapter's framework (the
one any CPU capsule can land in), so every producer is checked against the same bits.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .._adapters import ADAPTERS, HOST
from .._dtypes import BY_NAME, FLOAT8, short_name

__all__ = ["FRAMEWORKS", "DEVICES", "BASE_DTYPES", "installed_frameworks", "short_dtype", "import_order",
           "install_hint", "reference", "make_source", "native_import", "gpu_info"]  # fmt: skip

FRAMEWORKS: tuple[str, ...] = tuple(ADAPTERS)
DEVICES = ("cpu", "cuda")
DEVICE_CODE = {"cpu": 1, "cuda": 2}
BASE_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "complex64", "uint16", "int64")
# The fp8 kinds beyond the base list that a default run adds when some producer can make them.
EXTRA_FP8 = tuple(n for n in BY_NAME if n in FLOAT8 and n not in BASE_DTYPES)
CANDIDATE_DTYPES = BASE_DTYPES + EXTRA_FP8
_SHAPE = (4, 6)

short_dtype = short_name  # column labels: float32 -> f32, float8_e4m3fn -> e4m3fn


def installed_frameworks() -> list[str]:
    """Frameworks importable here, found without importing them."""
    return [name for name in FRAMEWORKS if importlib.util.find_spec(ADAPTERS[name].module) is not None]


def install_hint(names: tuple[str, ...] | list[str] = FRAMEWORKS) -> str:
    """How to install frameworks: 'pip install "dlbridge[<extra>]"' for each (its adapter's extra)."""
    return " or ".join(f'pip install "dlbridge[{ADAPTERS[n].extra or n}]"' for n in names)


def import_order(names: list[str]) -> list[str]:
    """``names`` in an order that imports each framework before any module its adapter says would
    make importing it crash the process (``Adapter.unsafe_after``); otherwise the given order."""
    pending, order = list(names), []
    while pending:
        for name in pending:
            # ``name`` must wait while another pending framework has to be imported before it.
            blocked = any(ADAPTERS[name].module.partition(".")[0] in ADAPTERS[other].unsafe_after
                          for other in pending if other != name)  # fmt: skip
            if not blocked:
                break
        else:  # a cycle no order can satisfy: keep the given order
            name = pending[0]
        pending.remove(name)
        order.append(name)
    return order


# --- worker side: sources and results ----------------------------------------------------------


def reference(dtype: str) -> Any:
    """A host array (bf16/fp8 from ml_dtypes) with known, finite, mostly distinct values.

    Only bf16 and fp8 references need ml_dtypes: without it, every other dtype is still probed.
    """
    np = HOST.mod
    n = _SHAPE[0] * _SHAPE[1]
    k = np.arange(n)
    if dtype == "bool":
        return ((k * 7) % 3 == 0).reshape(_SHAPE)
    if dtype.startswith(("int", "uint")):
        return ((k * 2654435761) % 30011).astype(dtype).reshape(_SHAPE)
    target = HOST.dtype_for(dtype)
    if dtype == "float8_e8m0fnu":  # only positive powers of two
        return (2.0 ** (k % 9 - 4)).astype(np.float32).astype(target).reshape(_SHAPE)
    # Small halves and integers are exact in every float format here, fp8 included.
    halves = ((k * 5) % 17 - 8) / 2
    if dtype.startswith("complex"):
        return (halves + 1j * halves[::-1]).astype(target).reshape(_SHAPE)
    if dtype.endswith("fnuz"):  # fnuz formats have no -0.0
        halves = np.where(halves == 0, 1.0, halves)
    return halves.astype(np.float32).astype(target).reshape(_SHAPE)


def make_source(framework: str, device: str, dtype: str) -> Any:
    """The source array for one cell; raises (any exception) when it cannot be made."""
    return ADAPTERS[framework].make_array(reference(dtype), device)


def native_import(consumer: str, src: Any) -> Any:
    """The consumer's own ``from_dlpack`` on the producer's array."""
    return ADAPTERS[consumer].from_dlpack()(src)


def cuda_producers(frameworks: list[str]) -> list[str]:
    """Which of ``frameworks`` see a CUDA device here (imports them: worker only)."""
    return [name for name in frameworks if ADAPTERS[name].has_cuda()]


def gpu_info(frameworks: list[str]) -> str | None:
    """The GPU's name as the first framework that can tell reports it (worker only)."""
    for name in frameworks:
        try:
            found = ADAPTERS[name].gpu_name()
        except Exception:
            continue
        if found:
            return found
    return None
