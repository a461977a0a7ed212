"""What keeps exported memory alive on the route. torch's export holds the exported tensor, not its storage:
after ``x.set_(y)`` the memory an import of x reads would be freed (probe, torch 2.13 CPU: ``np.from_dlpack(x)``
then ``x.set_(y)`` and a few allocations segfault the process). The pipeline and the Python route export the
alias ``x.data``, a tensor of its own over the same storage; the compiled route exports x through torch's
exchange API and holds ``x.untyped_storage()`` with the tensor until the consumer frees it
(``TorchAdapter.export_keeps``). These tests hold both paths to the same results, in a child process each: the
values after ``set_`` with the old memory unmapped and reused, the memory shared, the route replayed (the
pipeline not asked), and the storage released when the consumer's array goes (no leak), into NumPy and JAX.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import dlbridge
from tests._route_helpers import (  # noqa: F401 - route_path: the fixture on_both_paths parametrizes
    counting_declines,
    on_both_paths,
    ptr,
    route_path,
)
from tests.conftest import caps_of, need

pytest_generate_tests = on_both_paths

N = 1 << 22  # 16 MiB of float32: the allocator maps it on its own and unmaps it when freed


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _to_host(target: str, out) -> np.ndarray:
    return np.asarray(out) if target == "jax" else out


@pytest.mark.isolated()
@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_an_import_reads_its_memory_after_set_(target: str) -> None:
    torch = need("torch")
    need(target)
    if caps_of(target).readonly_imports:
        pytest.skip(f"{target} imports read-only: the pipeline converts into it every time")
    convert = getattr(dlbridge, f"to_{target}")
    convert(torch.ones(8, device="cpu"))  # learnt
    expected = np.arange(N, dtype=np.float32)
    kept = []
    with counting_declines() as declined:
        for _ in range(3):
            x = torch.arange(N, dtype=torch.float32, device="cpu")
            out = convert(x)
            assert ptr(out) == x.data_ptr(), "not the tensor's memory"
            assert str(out.dtype) == "float32", out.dtype
            x.set_(torch.zeros(3, device="cpu"))  # x lets go of its storage: only the export holds it now
            kept.append(out)
    assert declined[target] == 0, f"the route declined: {dict(declined)}"
    gc.collect()
    churn = [torch.full((N,), 7.0, device="cpu") for _ in range(6)]  # freed memory would be mapped again and written
    for out in kept:
        host = _to_host(target, out)
        assert host.dtype == expected.dtype and np.array_equal(host, expected)
    del churn


@pytest.mark.isolated()
@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_the_storage_goes_with_the_consumers_array(target: str) -> None:
    torch = need("torch")
    need(target)
    convert = getattr(dlbridge, f"to_{target}")
    convert(torch.ones(8, device="cpu"))  # learnt
    for _ in range(3):  # the allocator and JAX settle
        out = convert(torch.ones(N, device="cpu"))
        del out
    gc.collect()
    before = _rss()
    for _ in range(40):  # 640 MiB if nothing were freed
        x = torch.ones(N, device="cpu")
        out = convert(x)
        x.set_(torch.zeros(3, device="cpu"))
        assert float(_to_host(target, out)[-1]) == 1.0
        del out, x
    gc.collect()
    grown = (_rss() - before) / 2**20
    assert grown < 160, f"{grown:.0f} MiB kept after 40 conversions of 16 MiB whose arrays are gone"


@pytest.mark.isolated()
def test_an_export_the_route_hands_over_keeps_its_memory() -> None:
    """A transposed tensor: the compiled route exports it (the storage held with it), declines (not dense C
    order) and hands that export to the pipeline, which imports it as it is: the tensor's memory, its values
    and dtype, the tensor left as it was, and the import still right after ``set_`` and reuse. (torch exports a
    tensor that is not contiguous through a view of its own, which holds the storage too: this checks the
    handed-over export and its release, not what holds the memory.)"""
    torch = need("torch")
    dlbridge.to_numpy(torch.ones(8, device="cpu"))  # learnt
    side = 1 << 11  # 16 MiB of float32
    expected = np.arange(side * side, dtype=np.float32).reshape(side, side).T
    kept = []
    for _ in range(2):
        x = torch.arange(side * side, dtype=torch.float32, device="cpu").reshape(side, side).t()
        with counting_declines() as declined:
            out = dlbridge.to_numpy(x)
        assert declined["numpy"] == 1, f"not declined by the route: {dict(declined)}"
        assert ptr(out) == x.data_ptr() and out.dtype == np.float32 and out.shape == (side, side)
        assert np.array_equal(x.numpy(), expected), "the source changed"
        x.set_(torch.zeros(3, device="cpu"))
        kept.append(out)
    gc.collect()
    churn = [torch.full((side * side,), 7.0, device="cpu") for _ in range(6)]
    for out in kept:
        assert np.array_equal(out, expected)
    del churn
