"""Copies that cannot fit, and layout errors that say what the caller can do.

A broadcast of a few bytes can describe terabytes; a dense copy of it (JAX cannot share stride-0
memory; ``copy=True``) is refused with a ``LayoutError`` naming the size *before* anything is
allocated, and an allocation that still fails is reported the same way, never as a bare
MemoryError / torch RuntimeError. A layout error says why the copy was not made on each path.
"""

from __future__ import annotations

import sys

import pytest

import dlbridge
from tests._robust_helpers import np, torch
from tests.conftest import caps_of, need, run_child

need("jax")

HUGE = (1 << 20, 1 << 20)  # float32: 4 TiB dense


def _writable_broadcast(shape):
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, (0,) * len(shape), writeable=True)


CASES = {
    "numpy broadcast to jax": lambda: dlbridge.to_jax(_writable_broadcast(HUGE)),
    "torch expand to jax": lambda: dlbridge.to_jax(torch.zeros(1, device="cpu").expand(*HUGE)),
    "torch expand to jax, copy=True": lambda: dlbridge.to_jax(torch.zeros(1, device="cpu").expand(*HUGE), copy=True),
    "read-only broadcast to torch, copy=True": lambda: dlbridge.to_torch(
        np.broadcast_to(np.zeros(1, np.float32), HUGE), copy=True
    ),
    "broadcast to numpy, copy=True": lambda: dlbridge.to_numpy(_writable_broadcast(HUGE), copy=True),
}


@pytest.mark.parametrize("case", CASES)
def test_absurd_dense_copy_is_refused_before_allocating(case: str) -> None:
    if "read-only" in case and not caps_of("numpy").versioned_capsules:
        pytest.skip("NumPy < 2.1 cannot export a read-only array (its copy is the producer's own)")
    with pytest.raises(dlbridge.LayoutError) as err:
        CASES[case]()
    message = str(err.value)
    assert "float32[1048576, 1048576]" in message and "strides [0, 0]" in message
    assert "would take 4.0 TiB, more than this machine's" in message
    assert "Pass a smaller array (a broadcast counts at its full size)" in message
    assert err.value.__cause__ is None  # decided from the size, not from a failed allocation


def _fp8_broadcast(n: int):
    ml_dtypes = need("ml_dtypes")
    one = np.zeros(1, dtype=ml_dtypes.float8_e4m3b11fnuz)  # torch cannot hold it: upcast
    return np.lib.stride_tricks.as_strided(one, (n,), (0,), writeable=True)


UPCASTS = {
    "numpy fp8 broadcast to torch": lambda: dlbridge.to_torch(_fp8_broadcast(1 << 40), fallback="upcast"),
    "read-only fp8 broadcast to torch, copy=True": lambda: dlbridge.to_torch(
        np.broadcast_to(_fp8_broadcast(1), (1 << 40,)), fallback="upcast", copy=True
    ),
    "torch uint8 expand as fp8 to torch": lambda: dlbridge.to_torch(
        torch.zeros(1, dtype=torch.uint8, device="cpu").expand(1 << 40), dtype="float8_e4m3b11fnuz", fallback="upcast"
    ),
}


@pytest.mark.parametrize("case", UPCASTS)
def test_absurd_upcast_is_refused_before_allocating(case: str) -> None:
    """fallback="upcast" makes a float32 copy (4 bytes an element) of what may be a broadcast of one byte."""
    if "read-only" in case and not caps_of("numpy").versioned_capsules:
        pytest.skip("NumPy < 2.1 cannot export a read-only array (its copy is the producer's own)")
    with pytest.raises(dlbridge.LayoutError) as err:
        UPCASTS[case]()
    message = str(err.value)
    assert 'the float32 copy fallback="upcast" makes of' in message and "[1099511627776]" in message
    assert "strides [0]" in message and "would take 4.0 TiB, more than this machine's" in message
    assert err.value.__cause__ is None  # decided from the size, not from a failed allocation


def test_small_broadcast_upcasts() -> None:
    out = dlbridge.to_torch(np.broadcast_to(_fp8_broadcast(1), (3,)), fallback="upcast", copy=True)
    assert out.dtype == torch.float32 and out.tolist() == [0.0, 0.0, 0.0]


def test_small_broadcast_still_converts_as_a_copy() -> None:
    b = np.broadcast_to(np.arange(3, dtype=np.float32), (2, 3))
    j = dlbridge.to_jax(b, copy=True)
    assert j.dtype == np.float32 and j.tolist() == [[0.0, 1.0, 2.0]] * 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/statm are Linux's")
def test_allocation_that_fails_anyway_is_a_layout_error() -> None:
    """An 8 GiB copy under an address-space limit: below this machine's memory, so the allocation
    is tried, fails, and comes back as LayoutError with the allocator's error as its cause."""
    proc = run_child(
        """
        import os, resource, numpy as np, torch, jax, dlbridge
        dlbridge.to_jax(np.zeros(4, np.float32))  # JAX's backend up before the limit
        shape = (1 << 16, 1 << 15)
        w = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, (0, 0), writeable=True)
        vm = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
        calls = {"jax": lambda: dlbridge.to_jax(w), "torch": lambda: dlbridge.to_torch(w, copy=True),
                 "numpy": lambda: dlbridge.to_numpy(w, copy=True)}
        for name, call in calls.items():
            try:
                call()
                print(name, "no error")
            except dlbridge.LayoutError as e:
                assert "(8.0 GiB) did not fit in memory" in str(e), e
                print(name, "LayoutError from", type(e.__cause__).__name__)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jax LayoutError from MemoryError" in proc.stdout, proc.stdout
    assert "torch LayoutError from RuntimeError" in proc.stdout, proc.stdout  # torch's CPU allocator
    assert "numpy LayoutError from MemoryError" in proc.stdout, proc.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/statm are Linux's")
def test_upcast_that_fails_to_allocate_anyway_is_a_layout_error() -> None:
    """An 8 GiB float32 upcast under an address-space limit: tried, failed, reported as LayoutError."""
    need("ml_dtypes")
    proc = run_child(
        """
        import os, resource, numpy as np, torch, ml_dtypes, dlbridge
        one = np.zeros(1, dtype=ml_dtypes.float8_e4m3b11fnuz)
        w = np.lib.stride_tricks.as_strided(one, (1 << 31,), (0,), writeable=True)
        vm = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            dlbridge.to_torch(w, fallback="upcast")
            print("torch no error")
        except dlbridge.LayoutError as e:
            assert "(8.0 GiB) did not fit in memory" in str(e) and 'fallback="view"' in str(e), e
            print("torch LayoutError from", type(e.__cause__).__name__)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "torch LayoutError from RuntimeError" in proc.stdout, proc.stdout  # torch's CPU allocator


# --- what a layout error tells the caller, per path ----------------------------------------------


def test_raw_capsule_layout_error_does_not_blame_copy_false() -> None:
    a = np.arange(6.0)[::-1]
    capsule = a.__dlpack__()
    with pytest.raises(dlbridge.LayoutError) as err:
        dlbridge.to_torch(capsule)  # no copy= passed
    message = str(err.value)
    assert "copy=False" not in message
    assert "strides [-1]; it needs a dense copy, which dlbridge cannot make from a raw capsule" in message
    assert "Pass the array itself (not its capsule)" in message
    t = dlbridge.to_torch(a)  # what the message proposes works
    assert t.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0] and t.dtype == torch.float64


def test_array_layout_error_under_copy_false_names_copy_false() -> None:
    t = torch.arange(12.0, device="cpu").reshape(3, 4)[:, 1:]
    with pytest.raises(
        dlbridge.LayoutError, match=r"strides \[4, 1\]; it needs a dense copy, which copy=False forbids"
    ):
        dlbridge.to_jax(t, copy=False)


def test_layout_error_without_strides_names_the_byte_offset() -> None:
    from tests.ctypes_producer import CtypesArray

    p = CtypesArray.from_bytes(bytes(20), "float32", (4,), byte_offset=4)
    with pytest.raises(dlbridge.LayoutError, match=r"cpu float32\[4\] with byte_offset 4; it needs a dense copy"):
        dlbridge.to_torch(p.capsule(versioned=True))
