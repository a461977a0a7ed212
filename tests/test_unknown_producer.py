"""A producer dlbridge has never heard of (tests/ctypes_producer.py) into torch, JAX and NumPy.

Every dtype x layout: the result has the true dtype, the exact bits, the producer's memory
(data pointer) wherever the consumer can share it, and the producer's deleter runs exactly
once per exported capsule once the results are gone.
"""

from __future__ import annotations

import gc
import zlib

import pytest

import dlbridge
from tests._capsule_cases import expected_bytes
from tests.conftest import caps_of, need
from tests.ctypes_producer import DTYPES, CtypesArray

np = need("numpy")
ml_dtypes = need("ml_dtypes")

DTYPE_NAMES = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "complex64", "uint16", "int64"]
CONSUMERS = ["torch", "jax", "numpy"]
JAX_ALIGN = 64  # JAX (XLA:CPU) shares only 64-byte aligned buffers; it copies the others


def itemsize(name: str) -> int:
    _, bits, lanes = DTYPES[name]
    return bits * lanes // 8


def raw_bytes(name: str, n: int, seed: int) -> bytes:
    """``n`` elements of random bits (NaN patterns included: the checks compare bits)."""
    rng = np.random.default_rng(seed)
    if name == "bool":
        return rng.integers(0, 2, n, dtype=np.uint8).tobytes()
    return rng.integers(0, 256, n * itemsize(name), dtype=np.uint8).tobytes()


# name -> (elements in the buffer, shape, strides in elements or None, byte offset in elements)
LAYOUTS = {
    "contiguous": (12, (3, 4), None, 0),
    "transposed": (12, (4, 3), (1, 4), 0),
    # starts one 64-byte block in, so JAX can still share it
    "sliced": (None, (3, 4), (4, 1), None),
    # starts one row in: byte_offset is not 64-byte aligned, JAX copies
    "sliced_unaligned": (20, (3, 4), (4, 1), 4),
    "0-d": (1, (), None, 0),
    "empty": (0, (0, 4), None, 0),
}


def make(name: str, layout: str, seed: int = 0) -> CtypesArray:
    n, shape, strides, offset = LAYOUTS[layout]
    if layout == "sliced":
        offset = JAX_ALIGN // itemsize(name)
        n = offset + 12
    return CtypesArray.from_bytes(raw_bytes(name, n, seed), name, shape, strides, offset * itemsize(name))


def result_bytes(consumer: str, r) -> bytes:
    if consumer == "torch":
        torch = need("torch")
        return r.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(np.asarray(r)).tobytes()


def result_dtype(consumer: str, r) -> str:
    return str(r.dtype).removeprefix("torch.")


def result_ptr(consumer: str, r) -> int:
    if consumer == "torch":
        return r.data_ptr()
    if consumer == "jax":
        return r.unsafe_buffer_pointer()
    return r.__array_interface__["data"][0]


def converter(consumer: str):
    need(consumer)
    return getattr(dlbridge, f"to_{consumer}")


def shares(consumer: str, p: CtypesArray, info: dlbridge.DLPackInfo) -> bool:
    """Whether the consumer can hold this memory where it is (else it copies)."""
    if consumer != "jax":
        return True
    if p.data_ptr % JAX_ALIGN and not caps_of("jax").shares_unaligned:  # JAX >= 0.4.35 copies these
        return False
    return info.is_c_contiguous() or not caps_of("jax").row_major_only  # JAX < 0.8: row-major only


def jax_rejects(consumer: str, name: str) -> bool:
    if consumer != "jax" or name not in ("int64", "uint64", "float64", "complex128"):
        return False
    return not need("jax").config.jax_enable_x64  # 64-bit types are narrowed unless x64 is on


def assert_balanced(p: CtypesArray) -> None:
    if p.deleter_calls != p.exports:
        gc.collect()  # slow with torch and JAX loaded (~0.2 s): only when refcounting left a cycle
    assert p.exports >= 1
    assert p.deleter_calls == p.exports, f"{p.exports} capsules exported, {p.deleter_calls} deleter calls"


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", DTYPE_NAMES)
@pytest.mark.parametrize("consumer", CONSUMERS)
def test_unknown_producer_into(consumer: str, name: str, layout: str) -> None:
    to = converter(consumer)
    p = make(name, layout, seed=zlib.crc32(f"{name}{layout}".encode()))
    strays = CtypesArray.stray_deletes
    info = dlbridge.inspect(p)
    assert (info.dtype, info.shape, info.data_ptr, info.producer) == (name, p.fields.shape, p.data_ptr, "tests")
    if jax_rejects(consumer, name):
        with pytest.raises(dlbridge.UnsupportedDtypeError, match="jax_enable_x64"):
            to(p)
        assert_balanced(p)
        return
    if name not in caps_of(consumer).holds:  # e.g. float8 into JAX < 0.5.3
        with pytest.raises(dlbridge.UnsupportedDtypeError, match="cannot hold"):
            to(p)
        assert_balanced(p)
        return
    r = to(p)
    assert tuple(r.shape) == p.fields.shape
    assert result_dtype(consumer, r) == name
    assert result_bytes(consumer, r) == expected_bytes(p)
    if info.size and shares(consumer, p, info):
        assert result_ptr(consumer, r) == p.data_ptr, "zero-copy path did not share the producer's memory"
    elif info.size:
        assert result_ptr(consumer, r) != p.data_ptr
        with pytest.raises(dlbridge.LayoutError, match="copy=False"):
            to(p, copy=False)
    del r
    assert_balanced(p)
    assert CtypesArray.stray_deletes == strays


@pytest.mark.parametrize("consumer", ["torch", "numpy"])
def test_writes_through_shared_memory(consumer: str) -> None:
    """Sharing is real: a write by the producer is seen by the result (and back)."""
    to = converter(consumer)
    p = make("float32", "sliced")
    r = to(p)
    p.write_bytes(np.float32(42.5).tobytes(), at=p.fields.byte_offset + 5 * 4)
    assert float(r[1, 1]) == 42.5
    if not caps_of(consumer).versioned_capsules:  # NumPy < 2.1: a legacy capsule cannot say it is writable
        assert not r.flags.writeable
        return
    r[2, 3] = -1.0
    assert np.frombuffer(p.read_bytes(), np.float32)[p.fields.byte_offset // 4 + 11] == -1.0
    del r
    assert_balanced(p)


def test_non_compact_strides_into_jax_copy_through_numpy() -> None:
    """JAX needs compact strides: an unknown producer's column slice is made dense via NumPy."""
    to = converter("jax")
    p = CtypesArray.from_bytes(raw_bytes("float32", 20, 1), "float32", (5, 2), (4, 2))
    r = to(p)
    assert np.asarray(r).tobytes() == expected_bytes(p)
    with pytest.raises(dlbridge.LayoutError, match="copy=None"):
        to(p, copy=False)
    del r
    assert_balanced(p)


@pytest.mark.parametrize("consumer", ["torch", "numpy", "jax"])
def test_capsule_kind_follows_max_version(consumer: str) -> None:
    """dlbridge asks for versioned capsules only from consumers that read them (today torch and
    NumPy; NumPy < 2.1 and JAX read only legacy ones)."""
    to = converter(consumer)
    versioned = caps_of(consumer).versioned_capsules
    p = make("float32", "contiguous")
    r = to(p)
    asked = p.calls[-1].get("max_version")
    assert (asked is not None and tuple(asked) >= (1, 0)) == versioned
    assert result_bytes(consumer, r) == expected_bytes(p)
    del r
    assert_balanced(p)


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_reused_producer_many_exports(consumer: str) -> None:
    """One producer, many live results: each capsule gets its own deleter call, in any order."""
    to = converter(consumer)
    p = make("float16", "contiguous")
    results = [to(p) for _ in range(5)]
    assert p.exports == 5 and p.deleter_calls == 0
    del results[::2]
    assert p.deleter_calls == 3
    del results
    assert_balanced(p)


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("raw", [False, True], ids=["object", "raw-capsule"])
def test_pinned_host_memory_is_shared_as_cpu_memory(consumer: str, raw: bool) -> None:
    """Page-locked host memory (kDLCUDAHost, what torch says for pinned tensors) is CPU memory.

    torch and JAX refuse (or misplace) device type 3 on their own; dlbridge relabels the capsule's
    device to the CPU before the consumer reads it, so the result shares the producer's memory.
    """
    to = converter(consumer)
    p = make("bfloat16", "contiguous").with_(device=(3, 0))
    assert dlbridge.inspect(p).device_type == "cuda_host"
    r = to(p.capsule(versioned=caps_of(consumer).versioned_capsules) if raw else p)
    assert result_dtype(consumer, r) == "bfloat16"
    assert result_bytes(consumer, r) == expected_bytes(p)
    assert result_ptr(consumer, r) == p.data_ptr
    del r
    assert_balanced(p)


def test_pinned_host_memory_into_cupy_needs_a_device(cupy_counted_installed: None) -> None:
    """A GPU-only consumer cannot live in host memory: the usual device error, not a crash."""
    p = make("float32", "contiguous").with_(device=(3, 0))
    with pytest.raises(dlbridge.DeviceMismatchError, match='device="cuda"'):
        dlbridge.to_cupy(p)
    assert p.exports == p.deleter_calls == 0  # refused before anything was exported
