"""The arrays each adapter builds (copies, views, uploads, upcasts, Warp's byte_offset fix) keep their
memory alive for every consumer they are exported to, after every Python reference to them is gone.

A consumer holds what the producer's capsule holds: ONNX Runtime's capsule holds its C OrtValue (not
the Python wrapper; see tests/test_onnxruntime_lifetime.py), Warp's holds the Python ``warp.array``
(warp/_src/dlpack.py ``to_dlpack``: ``Py_IncRef(wp_array)``), NumPy's the ndarray (numpy dlpack.c
``array_dlpack``). An array whose memory hangs off an attribute the capsule cannot see is a
use-after-free. Each test builds one array one way, exports it to torch and NumPy through dlbridge,
drops it, and reads the consumers in a child where glibc poisons the memory it frees.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS, ALL_ADAPTERS, Adapter
from dlbridge._dtypes import decode_table
from dlbridge._options import Readonly
from tests.conftest import need
from tests.ctypes_producer import CtypesArray

torch = need("torch")
ml_dtypes = need("ml_dtypes")

# glibc fills each block it frees with 0xA5 (MALLOC_PERTURB_; its per-thread cache, which skips that, off).
FREED = {"MALLOC_PERTURB_": "165", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}
pytestmark = pytest.mark.isolated(env=FREED, imports=("paddle", "tensorflow"))

CPU = ("numpy", "torch", "jax", "tensorflow", "paddle", "mlx", "array_api_strict", "onnxruntime", "warp")
REF = np.arange(1024, dtype=np.float32) * 3 + 1
U8 = (np.arange(1024) % 120).astype(np.uint8)
U16 = (REF.view(np.uint32) >> 16).astype(np.uint16)
Built = tuple[Any, np.ndarray]  # (the array, the values it must hold)


def _adapter(name: str) -> Adapter:
    adapter = ALL_ADAPTERS[name]  # with pyarrow, which dlbridge reads from only
    need(adapter.module)
    return adapter


def _survives(build: Callable[[], Built], adapter: Adapter) -> None:
    """``build()``'s array exported to torch and NumPy, then dropped (the only reference is here)."""
    array, want = build()
    ptr = adapter.data_ptr(array)
    # torch arrays cannot be read-only: read-only memory (JAX's) is shared as readonly="drop" asks
    readonly: Readonly = "drop" if adapter.is_readonly(array) else "keep"
    outs: list[Any] = [dlbridge.to_torch(array, readonly=readonly), dlbridge.to_numpy(array)]
    del array
    gc.collect()
    for out in outs:
        got = out.numpy() if isinstance(out, torch.Tensor) else out
        address = out.data_ptr() if isinstance(out, torch.Tensor) else out.ctypes.data
        assert address == ptr, f"{type(out).__name__}: not the array's memory"
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # freed memory reads 0xA5


def _builders(adapter: Adapter) -> dict[str, Callable[[], Built]]:
    made = adapter.prober.make_array
    found: dict[str, Callable[[], Built]] = {
        "make_array": lambda: (made(REF.copy(), "cpu"), REF),
        "copy": lambda: (adapter.copy(made(REF.copy(), "cpu")), REF),
    }
    if adapter.name in ADAPTERS:  # consumers: the arrays the conversion itself builds
        caps = adapter.capabilities()
        found["view"] = lambda: (adapter.view(made(REF.copy(), "cpu"), "int32"), REF.view(np.int32))
        found["lookup_f32"] = lambda: (
            adapter.lookup_f32(decode_table("float8_e4m3fn"), made(U8.copy(), "cpu")),  # type: ignore[arg-type]
            U8.view(ml_dtypes.float8_e4m3fn).astype(np.float32),
        )
        if "uint16" in caps.imports:  # the upcast's wire (Paddle has no uint16: it never gets one)
            found["bf16_bits_to_f32"] = lambda: (
                adapter.bf16_bits_to_f32(made(U16.copy(), "cpu")),
                (U16.astype(np.uint32) << 16).view(np.float32),
            )
        found["from_host"] = lambda: (adapter.from_host(REF.copy(), (1, 0)), REF)
    return found


CASES = [(name, way) for name in (*CPU, "pyarrow") for way in ("make_array", "copy", "view", "lookup_f32",
                                                                 "bf16_bits_to_f32", "from_host")]  # fmt: skip


@pytest.mark.parametrize(("name", "way"), CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_built_arrays_keep_their_memory(name: str, way: str) -> None:
    adapter = _adapter(name)
    build = _builders(adapter).get(way)
    if build is None:
        pytest.skip(f"dlbridge builds no {name} arrays by {way}")
    try:
        _survives(build, adapter)
    except NotImplementedError as err:  # from_host: torch imports CPU data itself
        pytest.skip(str(err))


def test_warp_byte_offset_fix_keeps_the_import_alive() -> None:
    # warp.from_dlpack drops byte_offset; dlbridge re-points a new warp.array and hangs the import off it
    # (a Python attribute, which is enough here: Warp's capsule holds the Python array).
    wp = need("warp")
    wp.config.log_level = wp.LOG_WARNING
    raw = np.arange(1026, dtype=np.float32) * 3 + 1

    def imported() -> Any:
        src = CtypesArray.from_bytes(raw.tobytes(), "float32", (1024,), byte_offset=8)
        out = dlbridge.to_warp(src)
        assert out.ptr == src.data_ptr
        return out

    _survives(lambda: (imported(), raw[2:]), ADAPTERS["warp"])
    # Warp's own view of it holds its parent (warp.array.view: a._ref = self)
    _survives(lambda: (imported().view(wp.int32), raw[2:].view(np.int32)), ADAPTERS["warp"])
