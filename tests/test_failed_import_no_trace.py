"""A raw capsule whose conversion fails is left exactly as it came.

dlbridge relabels a capsule in place for some consumers (the dtype for dtype= and fallback views,
the device for pinned/managed memory and CPU ids, READ_ONLY dropped for an import copied at once).
Those edits happen after every check that can refuse, and are undone when the consumer refuses the
capsule without consuming it. After each failure ``dlbridge.inspect(capsule)`` equals what it said
before, and a retry behaves as on a fresh capsule: above all, a read-only capsule never comes back
as a writable array.
"""

from __future__ import annotations

import gc

import pytest

import dlbridge
from tests._robust_helpers import data_ptr, np, torch
from tests.conftest import caps_of, need
from tests.ctypes_producer import FLAG_READ_ONLY, CtypesArray

jax = need("jax")
# Read-only capsules come from NumPy's DLPack 1.0 export (max_version=, READ_ONLY), NumPy >= 2.1.
pytestmark = pytest.mark.skipif(
    not caps_of("numpy").versioned_capsules,
    reason=f"read-only capsules need NumPy >= 2.1 to make them (NumPy {np.__version__})",
)


def _read_only_numpy_capsule():
    a = np.arange(8, dtype=np.uint8)
    a.flags.writeable = False
    return a, a.__dlpack__(max_version=(1, 0))


# Failures dlbridge raises itself for a read-only NumPy capsule (versioned, READ_ONLY set).
NUMPY_FAILURES = {
    "read-only into torch without copy": (lambda c: dlbridge.to_torch(c), dlbridge.ReadOnlyError),
    "read-only into torch, copy=False": (lambda c: dlbridge.to_torch(c, copy=False), dlbridge.ReadOnlyError),
    "dtype of another width": (lambda c: dlbridge.to_torch(c, copy=True, dtype="float16"), dlbridge.OptionError),
    "unknown dtype": (lambda c: dlbridge.to_torch(c, copy=True, dtype="nope"), dlbridge.OptionError),
    "dtype torch cannot hold": (
        lambda c: dlbridge.to_torch(c, dtype="float8_e4m3b11fnuz"),
        dlbridge.UnsupportedDtypeError,
    ),
    "versioned into jax": (lambda c: dlbridge.to_jax(c, dtype="float8_e4m3fn"), dlbridge.CapsuleError),
    "device it cannot reach": (lambda c: dlbridge.to_torch(c, copy=True, device="cuda"), dlbridge.DeviceMismatchError),
    "upcast under copy=False": (
        lambda c: dlbridge.to_torch(c, dtype="float8_e4m3b11fnuz", fallback="upcast", copy=False),
        dlbridge.UnsupportedDtypeError,
    ),
}


@pytest.mark.parametrize("case", NUMPY_FAILURES)
def test_failed_conversion_of_read_only_numpy_capsule_leaves_it_unchanged(case: str) -> None:
    a, capsule = _read_only_numpy_capsule()
    before = dlbridge.inspect(capsule)
    assert before.readonly and before.versioned
    call, error = NUMPY_FAILURES[case]
    with pytest.raises(error):
        call(capsule)
    assert dlbridge.inspect(capsule) == before
    again = dlbridge.to_numpy(capsule)  # the retry, as on a fresh capsule: read-only, same memory
    assert not again.flags.writeable
    assert data_ptr(again) == data_ptr(a) and again.dtype == np.uint8
    assert again.tolist() == list(range(8))


def test_every_failure_in_a_row_then_a_retry_keeps_read_only() -> None:
    a, capsule = _read_only_numpy_capsule()
    before = dlbridge.inspect(capsule)
    for call, error in NUMPY_FAILURES.values():
        with pytest.raises(error):
            call(capsule)
        assert dlbridge.inspect(capsule) == before
    t = dlbridge.to_torch(capsule, copy=True)  # torch arrays cannot be read-only: a copy
    assert t.dtype == torch.uint8 and t.tolist() == list(range(8)) and t.data_ptr() != data_ptr(a)


def test_failed_conversion_of_torch_capsule_leaves_it_unchanged() -> None:
    t = torch.arange(6, dtype=torch.float16, device="cpu")
    capsule = t.__dlpack__(max_version=(1, 0))
    before = dlbridge.inspect(capsule)
    with pytest.raises(dlbridge.CapsuleError, match="reads only legacy"):
        dlbridge.to_jax(capsule, dtype="bfloat16")
    with pytest.raises(dlbridge.DeviceMismatchError):
        dlbridge.to_numpy(capsule, dtype="bfloat16", device="cuda:0")
    with pytest.raises(dlbridge.OptionError):
        dlbridge.to_numpy(capsule, dtype="uint8")
    assert dlbridge.inspect(capsule) == before
    back = dlbridge.to_torch(capsule)
    assert back.dtype == torch.float16 and back.data_ptr() == t.data_ptr() and back.tolist() == t.tolist()


@pytest.mark.parametrize("device", [(2, 0), (13, 0)], ids=["cuda", "cuda_managed"])
def test_consumer_refusal_undoes_the_dtype_and_device_relabel(device) -> None:
    """JAX without a GPU backend refuses a CUDA capsule without consuming it, after dlbridge has
    relabelled it (dtype=, and managed -> cuda): both edits are undone."""
    if jax.devices()[0].platform != "cpu":
        pytest.skip("needs a JAX without a GPU backend (it would import the capsule)")
    p = CtypesArray.zeros(8, code=2, bits=16, shape=(4,)).with_(device=device)
    capsule = p.capsule(versioned=False)
    before = dlbridge.inspect(capsule)
    for _ in range(2):  # the retry fails the same way, on the same unchanged capsule
        with pytest.raises(dlbridge.CapsuleError, match="refused"):
            dlbridge.to_jax(capsule, dtype="bfloat16")
        assert dlbridge.inspect(capsule) == before
        assert before.dtype == "float16" and before.device == device
    del capsule
    gc.collect()
    assert p.balanced  # nobody consumed it: the producer's destructor freed it once


def test_consumer_refusal_undoes_dropping_read_only(monkeypatch) -> None:
    """No installed consumer refuses a CPU capsule without consuming it, so torch's import is made
    to raise before reading the capsule: READ_ONLY (dropped for torch's copy) and the dtype come back."""
    a, capsule = _read_only_numpy_capsule()
    before = dlbridge.inspect(capsule)
    adapter = dlbridge._adapters.ADAPTERS["torch"]
    seen = []

    def refuse(cap):
        seen.append(dlbridge.inspect(cap))  # what torch was handed: writable, relabelled
        raise RuntimeError("refused")

    monkeypatch.setitem(adapter.__dict__, "_from_dlpack", refuse)
    with pytest.raises(dlbridge.CapsuleError, match="refused"):
        dlbridge.to_torch(capsule, copy=True, dtype="float8_e4m3fn")
    assert not seen[0].readonly and seen[0].dtype == "float8_e4m3fn"  # the edits did happen
    assert dlbridge.inspect(capsule) == before
    monkeypatch.undo()
    again = dlbridge.to_numpy(capsule)
    assert not again.flags.writeable and data_ptr(again) == data_ptr(a) and again.dtype == np.uint8


def test_ctypes_read_only_capsule_survives_failures_then_imports() -> None:
    p = CtypesArray.from_bytes(bytes(range(8)), "uint8", (8,)).with_(flags=FLAG_READ_ONLY)
    capsule = p.capsule(versioned=True)
    before = dlbridge.inspect(capsule)
    for convert in (dlbridge.to_torch, dlbridge.to_jax):
        with pytest.raises(dlbridge.DLBridgeError):
            convert(capsule)
        assert dlbridge.inspect(capsule) == before
    n = dlbridge.to_numpy(capsule)
    assert not n.flags.writeable and data_ptr(n) == p.data_ptr and n.tolist() == list(range(8))
    del n, capsule
    gc.collect()
    assert p.balanced


def test_successful_conversion_of_a_capsule_consumes_it() -> None:
    """The other half: a capsule that was imported is used up, and says so."""
    _, capsule = _read_only_numpy_capsule()
    t = dlbridge.to_torch(capsule, copy=True)
    assert t.tolist() == list(range(8))
    with pytest.raises(dlbridge.CapsuleError, match="already consumed"):
        dlbridge.inspect(capsule)
