"""``DLBRIDGE_TEST_FOREIGN_DEFAULT=1`` (tests/_foreign.py): an array made without placement is where it
would be on a GPU machine, so a test that assumes the CPU fails here as it would there.

The ``in_the_mode`` tests run only in that mode (the version matrix runs the suite in it once); the last
test runs them in a child pytest in that mode, so every run of the suite checks the mode itself.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlbridge
from tests import _foreign
from tests._arrays import jax_cpu
from tests.conftest import need

ROOT = Path(__file__).resolve().parents[1]
in_the_mode = pytest.mark.skipif(not _foreign.ACTIVE, reason=f"runs with {_foreign.ENV}=1 (see the last test)")


@in_the_mode
def test_in_the_mode_unplaced_jax_arrays_claim_the_gpu() -> None:
    jax = need("jax")
    x = jax.numpy.arange(4.0)
    assert x.devices() == {jax.devices("cpu")[1]}  # JAX's default device
    assert int(x.__dlpack_device__()[0]) == 2 and dlbridge.inspect(x).device == (2, 0)  # kDLCUDA, capsule too
    with pytest.raises(dlbridge.DeviceMismatchError, match="cuda:0"):
        dlbridge.to_numpy(x)
    with pytest.raises(AssertionError, match="reads device memory"):
        ctypes.string_at(x.unsafe_buffer_pointer(), 4)
    host = dlbridge.to_numpy(x, device="cpu")  # a copy to the host, as from a GPU
    assert host.tolist() == [0.0, 1.0, 2.0, 3.0] and host.ctypes.data != x.unsafe_buffer_pointer()


@in_the_mode
def test_in_the_mode_placed_jax_arrays_and_what_jax_computes_from_them_stay_cpu_arrays() -> None:
    need("jax")
    y = jax_cpu(np.arange(4, dtype=np.float32)) * 2
    assert int(y.__dlpack_device__()[0]) == 1
    out = dlbridge.to_numpy(y)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0] and out.ctypes.data == y.unsafe_buffer_pointer()
    assert ctypes.string_at(y.unsafe_buffer_pointer(), 4) == np.float32(0).tobytes()


@in_the_mode
def test_in_the_mode_unplaced_torch_tensors_have_no_data() -> None:
    torch = need("torch")
    assert torch.arange(3).device.type == "meta" and torch.from_numpy(np.ones(2)).device.type == "cpu"
    with pytest.raises(dlbridge.DLBridgeError, match="meta"):
        dlbridge.to_numpy(torch.ones(2))
    with pytest.raises(AssertionError, match="address 0"):
        ctypes.string_at(torch.empty(2).data_ptr(), 1)
    assert dlbridge.to_numpy(torch.ones(2, device="cpu")).tolist() == [1.0, 1.0]


def test_the_mode_makes_assumptions_of_the_cpu_fail() -> None:
    """The tests above, in a child pytest with the mode on (and with it off: all skipped)."""
    if _foreign.ACTIVE:
        pytest.skip("the mode is on in this process: the tests above ran here")
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_ISOLATED_CHILD"}
    env[_foreign.ENV] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", __file__, "-k", "in_the_mode"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and " passed" in out, out
    if "skipped" in out:  # a framework that is not installed: its test says so
        assert "is not installed" in out, out
