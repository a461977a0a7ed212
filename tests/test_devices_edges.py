"""Devices at the edges: CPU device ids, JAX's numbered CPU devices, and malformed ``device=``.

DLPack's kDLCPU device_id is 0 for host memory, but JAX writes the number of its CPU device
(with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``) while ``__dlpack_device__`` says
(1, 0). Every CPU id is the host's memory to dlbridge; ``device="cpu:N"`` places a JAX result on
JAX's CPU device N (zero-copy: the same memory, labelled N), and names a device the target lacks
with a ``DeviceMismatchError``. JAX reads XLA_FLAGS when its backend starts, so the multi-device
cases run in a child pytest (``isolated(env={"XLA_FLAGS": ...})``).
"""

from __future__ import annotations

import gc

import pytest

import dlbridge
from tests._robust_helpers import TO, data_ptr, np, torch
from tests.conftest import caps_of, need
from tests.ctypes_producer import CtypesArray

jax = need("jax")

# --- JAX with four CPU devices (isolated: XLA_FLAGS is read once, when JAX's backend starts) -------

four_cpus = pytest.mark.isolated(env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
VALUES = [0.0, 1.0, 2.0, 3.0]


def _cpus() -> list:
    cpus = jax.devices("cpu")
    assert len(cpus) == 4, cpus
    return cpus


def _on_cpu3():
    """float32 [0, 1, 2, 3] on JAX's cpu:3."""
    import jax.numpy as jnp

    return jax.device_put(jnp.arange(4.0, dtype=jnp.float32), _cpus()[3])


def _describe(r, ptr: int) -> dict:
    """Whether ``r`` shares ``ptr``, its values and dtype (and a JAX result's device ids)."""
    if isinstance(r, torch.Tensor):
        return {"ptr": r.data_ptr() == ptr, "values": r.tolist(), "dtype": str(r.dtype).removeprefix("torch.")}
    if isinstance(r, np.ndarray):
        return {"ptr": r.__array_interface__["data"][0] == ptr, "values": r.tolist(), "dtype": str(r.dtype)}
    return {"ptr": r.unsafe_buffer_pointer() == ptr, "values": r.tolist(), "dtype": str(r.dtype),
            "device": [d.id for d in r.devices()]}  # fmt: skip


def _placed(t, **kw) -> dict:
    r = dlbridge.to_jax(t, **kw)
    return {
        "device": [d.id for d in r.devices()],
        "ptr": r.unsafe_buffer_pointer() == t.data_ptr(),
        "values": r.tolist(),
    }


@four_cpus
def test_jax_array_on_cpu_device_3_says_so_only_in_its_capsule() -> None:
    """The premise: JAX writes cpu:3 into the capsule and (1, 0) into __dlpack_device__."""
    x = _on_cpu3()
    assert list(dlbridge.inspect(x.__dlpack__()).device) == [1, 3]
    assert [int(v) for v in x.__dlpack_device__()] == [1, 0]


@four_cpus
@pytest.mark.parametrize("consumer", ["torch", "numpy", "jax"])
@pytest.mark.parametrize("how", ["", "_capsule"], ids=["array", "raw capsule"])
def test_jax_array_on_cpu_device_3_converts_zero_copy(consumer: str, how: str) -> None:
    x = _on_cpu3()
    # (the array: JAX arrays are read-only, so torch shares it as readonly="drop" asks; a raw capsule says only
    # its own flags)
    r = _describe(TO[consumer](x.__dlpack__() if how else x, readonly="drop"), x.unsafe_buffer_pointer())
    assert r["ptr"] and r["values"] == VALUES and r["dtype"] == "float32", r
    if consumer == "jax":
        assert r["device"] == [0]  # as jax.dlpack.from_dlpack does: the host is JAX's cpu:0


@four_cpus
def test_device_cpu_n_places_a_jax_array_on_that_cpu_device_zero_copy() -> None:
    x, cpus, t = _on_cpu3(), _cpus(), torch.arange(4, dtype=torch.float32, device="cpu")
    ptr = x.unsafe_buffer_pointer()
    assert _describe(dlbridge.to_jax(x, device="cpu:1"), ptr) == {"ptr": True, "values": VALUES, "dtype": "float32",
                                                                   "device": [1]}  # fmt: skip
    on2 = _describe(dlbridge.to_jax(x.__dlpack__(), device=cpus[2]), ptr)
    assert on2["device"] == [2] and on2["ptr"], on2
    assert _placed(t, device="cpu:2", copy=False) == {"device": [2], "ptr": True, "values": VALUES}
    assert _placed(t, device=cpus[1]) == {"device": [1], "ptr": True, "values": VALUES}
    assert _placed(t, device=(1, 0)) == {"device": [0], "ptr": True, "values": VALUES}


@four_cpus
def test_device_cpu_n_with_copy_lands_on_that_device() -> None:
    """Before: to_jax(t, device="cpu:2", copy=True) silently landed on cpu:0."""
    _cpus()
    t = torch.arange(4, dtype=torch.float32, device="cpu")
    assert _placed(t, device="cpu:2", copy=True) == {"device": [2], "ptr": False, "values": VALUES}


@four_cpus
def test_device_cpu_n_the_target_lacks_is_a_clear_error() -> None:
    x, cpus, t = _on_cpu3(), _cpus(), torch.arange(4, dtype=torch.float32, device="cpu")
    with pytest.raises(dlbridge.DeviceMismatchError, match=r"^to_jax\(\): device='cpu:9' names CPU device 9") as err:
        dlbridge.to_jax(t, device="cpu:9")
    assert "JAX has 4 CPU devices (cpu:0..cpu:3)" in str(err.value)
    with pytest.raises(dlbridge.DeviceMismatchError, match=r"^to_torch\(\): device='cpu:2'") as err:
        dlbridge.to_torch(x, device="cpu:2")
    assert 'PyTorch has 1 CPU device (cpu:0); pass device="cpu"' in str(err.value)
    with pytest.raises(dlbridge.DeviceMismatchError, match=r"^to_numpy\(\): device=CpuDevice\(id=3\)"):
        dlbridge.to_numpy(t, device=cpus[3])


# --- in this process (JAX has one CPU device) -------------------------------------------------


@pytest.mark.parametrize("consumer,versioned", [("torch", False), ("torch", True), ("numpy", False),
                                                ("numpy", True), ("jax", False)])  # fmt: skip
def test_capsule_on_cpu_id_3_is_the_host(consumer: str, versioned: bool) -> None:
    """A producer writing cpu:3 (as JAX does) is imported as host memory, zero-copy; JAX, which
    has no CPU device 3 here and would refuse it, is handed the capsule relabelled cpu:0."""
    if versioned and not caps_of(consumer).versioned_capsules:
        pytest.skip(f"{consumer} {caps_of(consumer).version} reads only legacy capsules (capability table)")
    raw = np.arange(4, dtype=np.float32).tobytes()
    p = CtypesArray.from_bytes(raw, "float32", (4,)).with_(device=(1, 3))
    for source in (p, p.capsule(versioned=versioned)):
        r = TO[consumer](source)
        assert data_ptr(r) == p.data_ptr and np.asarray(r).tolist() == [0.0, 1.0, 2.0, 3.0]
        assert np.asarray(r).dtype == np.float32
        del r
    gc.collect()
    assert p.balanced


def test_producer_claiming_another_cpu_id_than_its_capsule_is_accepted() -> None:
    p = CtypesArray.from_bytes(bytes(range(4)), "uint8", (4,)).with_(device=(1, 3), claimed_device=(1, 0))
    assert dlbridge.inspect(p).device == (1, 3)  # inspect reports what the capsule says
    t = dlbridge.to_torch(p)
    assert t.data_ptr() == p.data_ptr and t.tolist() == [0, 1, 2, 3]


def test_refused_cpu_id_capsule_keeps_its_device() -> None:
    p = CtypesArray.from_bytes(bytes(range(4)), "uint8", (4,)).with_(device=(1, 3))
    capsule = p.capsule(versioned=False)
    before = dlbridge.inspect(capsule)
    cpus = len(jax.devices("cpu"))  # one, or more where XLA_FLAGS forces more host devices
    with pytest.raises(dlbridge.DeviceMismatchError, match=f"JAX has {cpus} CPU device"):
        dlbridge.to_jax(capsule, device=f"cpu:{cpus}")
    assert dlbridge.inspect(capsule) == before
    j = dlbridge.to_jax(capsule)
    assert data_ptr(j) == p.data_ptr and j.tolist() == [0, 1, 2, 3]


# --- device= spellings ------------------------------------------------------------------------


@pytest.mark.parametrize("device", [("cpu", 0), (1, 0), "cpu", "cpu:0"])
def test_cpu_device_spellings_are_accepted(device) -> None:
    a = np.arange(3, dtype=np.int32)
    t = dlbridge.to_torch(a, device=device)
    assert t.data_ptr() == data_ptr(a) and t.dtype == torch.int32 and t.tolist() == [0, 1, 2]


@pytest.mark.parametrize("device", [(None, 0), ("cpu", None), (1.5, 0), ("bogus", 0), (True, 0), (1, -1), (1, 0, 0)])
def test_malformed_device_is_an_option_error_naming_it(device) -> None:
    with pytest.raises(dlbridge.OptionError) as err:
        dlbridge.to_torch(np.zeros(2), device=device)
    assert f"device={device!r} is not a device" in str(err.value)
    assert "(device_type, id) pair" in str(err.value) and '"cpu"' in str(err.value)
