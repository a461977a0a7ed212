"""A capsule whose deleter is NULL (DLPack allows one: the producer keeps the memory alive itself).

JAX imports one and aborts the process when the array is released (``std::bad_function_call``: the
``aborts_on_null_deleter`` row, with its source); every other consumer releases it safely. dlbridge
refuses it before a consumer with that row sees it (``CapsuleError`` naming the fix) and hands it to
the others. Each consumer gets such capsules many times over, raw and from an object's
``__dlpack__``, legacy and versioned, in a child per path: one abort fails the test.
"""

from __future__ import annotations

import gc
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from dlbridge._adapters._support import findable
from tests._trust_helpers import ON_BOTH_PATHS, child_env, trust_path  # noqa: F401 (a fixture)
from tests.conftest import need
from tests.ctypes_producer import CtypesArray, Fields

# Paddle first: it crashes when imported after TensorFlow (PaddleAdapter.unsafe_after)
CONSUMERS = ["paddle", *sorted(n for n in ADAPTERS if n != "paddle")]
REPEAT = 12  # an abort that comes 1 run in 3 is missed 12 times running with probability (2/3)**12 < 1%


def _null_deleter_array(versioned: bool | None = None) -> CtypesArray:
    """A 64-byte aligned float32[16] producer whose capsules have no deleter."""
    arr = CtypesArray(64, Fields(2, 32, 1, (16,), None, versioned=versioned, null_deleter=True))
    arr.write_bytes(np.arange(16, dtype=np.float32).tobytes())
    return arr


def _host(x: object) -> np.ndarray:
    return np.asarray(dlbridge.to_numpy(x, copy=True))


@ON_BOTH_PATHS
@pytest.mark.parametrize("name", CONSUMERS)
def test_a_capsule_without_a_deleter_never_reaches_a_consumer_that_dies_releasing_it(name: str) -> None:
    if not findable(ADAPTERS[name].module):
        pytest.skip(f"{name} is not installed")
    need(ADAPTERS[name].module)
    caps = dlbridge.capabilities(name)
    expected = np.arange(16, dtype=np.float32)
    for _ in range(REPEAT):
        for versioned in (False, True):
            arr = _null_deleter_array(versioned)
            for x in (arr.capsule(versioned), arr):  # a raw capsule, and an object handing one out
                if caps.aborts_on_null_deleter:
                    with pytest.raises(dlbridge.CapsuleError, match=r"deleter is NULL .* kills the process .* "
                                       rf"Hand it to (\w+) first, .* dlbridge\.to_{name}\(dlbridge\.to_\1\(x\)"):  # fmt: skip
                        dlbridge.convert(x, name)
                    continue
                try:
                    out = dlbridge.convert(x, name)
                except dlbridge.DLBridgeError:  # refused for another reason (a consumer without versioned capsules)
                    continue
                assert np.array_equal(_host(out).view(np.float32).reshape(-1), expected)
                del out  # released: the consumer must survive it
            assert arr.read_bytes() == expected.tobytes()  # nothing wrote into the producer's memory
    gc.collect()


@ON_BOTH_PATHS
@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_the_refusal_names_a_fix_that_works(versioned: bool) -> None:
    """The fix the refusal names, followed: the framework it names holds the producer's memory, and JAX
    gets it from there (shared; a legacy capsule's read-only NumPy import with the one copy it names).
    Where NumPy reads only legacy capsules (< 2.1), a versioned capsule is named to torch when torch is
    imported, else to NumPy with the upgrade that lets it read one."""
    jax = need("jax")
    if not dlbridge.capabilities("jax").aborts_on_null_deleter:
        pytest.skip("this JAX is not known to abort on a capsule without a deleter")
    if findable("torch"):
        need("torch")  # a framework imported already that reads versioned capsules on every NumPy
    arr = _null_deleter_array(versioned)
    capsule = arr.capsule(versioned)
    with pytest.raises(dlbridge.CapsuleError, match=r"float32\[16\] comes in a capsule whose deleter is NULL") as got:
        dlbridge.to_jax(capsule)
    found = re.search(r"Hand it to (\w+) first, which releases it safely: (.*?); or have", str(got.value))
    assert found is not None, got.value
    via, fix = found.groups()
    numpy_reads_versioned = dlbridge.capabilities("numpy").versioned_capsules
    if not versioned:
        assert via == "numpy" and fix.startswith("dlbridge.to_jax(dlbridge.to_numpy(x), copy=True) (one copy"), fix
    elif numpy_reads_versioned or not findable("torch"):
        assert via == "numpy" and fix.startswith("dlbridge.to_jax(dlbridge.to_numpy(x)) shares"), fix
        assert ("once numpy reads versioned capsules" in fix) is not numpy_reads_versioned, fix
        if not numpy_reads_versioned:
            pytest.skip(f"the fix names the NumPy upgrade it needs: {fix}")
    else:
        assert via == "torch" and fix.startswith("dlbridge.to_jax(dlbridge.to_torch(x)) shares"), fix
    for _ in range(REPEAT):
        held = dlbridge.convert(arr, via)  # releases such a capsule safely, and exports its own
        out = dlbridge.to_jax(held) if versioned else dlbridge.to_jax(held, copy=True)
        assert ADAPTERS[via].data_ptr(held) == arr.base  # it shares the producer's memory
        assert (out.unsafe_buffer_pointer() == arr.base) is versioned  # and JAX, but for a legacy capsule
        assert np.array_equal(np.asarray(out), np.arange(16, dtype=np.float32))
        del out, held
    gc.collect()
    assert jax.numpy.zeros(2).sum() == 0  # still alive


_NATIVE = """
import gc, ctypes
import jax
from tests.ctypes_producer import CtypesArray, Fields
arr = CtypesArray(64, Fields(2, 32, 1, (16,), None, versioned=False, null_deleter=True))
for _ in range({repeat}):
    out = jax.dlpack.from_dlpack(arr)  # JAX's own import, no dlbridge
    del out
    gc.collect()
print("survived")
"""


def test_the_row_still_describes_jax() -> None:
    """JAX's own from_dlpack of such a capsule, in a child: it aborts where the row says it does (a JAX
    that no longer does fails this, and the row gets its ``until``)."""
    need("jax")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_NATIVE.format(repeat=REPEAT))], capture_output=True,
                          text=True, timeout=300, env=child_env(False))  # fmt: skip
    aborts = dlbridge.capabilities("jax").aborts_on_null_deleter
    if aborts:
        assert proc.returncode != 0 and "bad_function_call" in proc.stderr, (proc.returncode, proc.stderr[-1500:])
    else:
        assert proc.returncode == 0 and "survived" in proc.stdout, proc.stderr[-1500:]
