"""What dlbridge cannot prevent, pinned as the README documents it (native DLPack does the same).

JAX arrays are read-only: torch has no read-only tensors, so ``to_torch(jax_array)`` raises
ReadOnlyError unless ``copy=True`` or ``readonly="drop"``. With ``readonly="drop"`` (as with
``torch.from_dlpack``) the tensor is a writable alias of memory JAX treats as immutable: writes show
through the JAX array, but a jitted function that captured the array as a constant keeps the old
values. A JAX array made from a torch tensor or NumPy array shares the source's
memory, so writing the source changes the JAX array (and can race with JAX work already queued:
JAX dispatches asynchronously).
"""

from __future__ import annotations

import pytest

import dlbridge
from tests._arrays import jax_cpu
from tests._robust_helpers import np, torch
from tests.conftest import need

jax = need("jax")
jnp = jax.numpy


def test_torch_from_jax_is_a_writable_alias_only_when_asked() -> None:
    x = jax_cpu(jnp.arange(16, dtype=jnp.float32))
    with pytest.raises(dlbridge.ReadOnlyError, match=r'JAX arrays are immutable.*copy=True.*readonly="drop"'):
        dlbridge.to_torch(x)
    t = dlbridge.to_torch(x, readonly="drop")
    assert t.data_ptr() == x.unsafe_buffer_pointer() and t.dtype == torch.float32
    t[0] = 100.0  # torch has no read-only tensors: nothing stops the write
    assert float(x[0]) == 100.0  # the "immutable" JAX array changed
    native = torch.from_dlpack(x)  # native DLPack behaves the same
    assert native.data_ptr() == x.unsafe_buffer_pointer()


def test_jitted_constant_does_not_see_writes_through_the_alias() -> None:
    x = jax_cpu(jnp.arange(16, dtype=jnp.float32))
    constant = jax.jit(lambda: x * 2)  # x captured as a constant of the compiled function
    assert float(constant()[0]) == 0.0
    dlbridge.to_torch(x, readonly="drop")[0] = 100.0  # what readonly="drop" leaves to the caller
    assert float(x[0]) == 100.0
    assert float(constant()[0]) == 0.0  # stale: JAX assumed x could never change
    assert float(jax.jit(lambda y: y * 2)(x)[0]) == 200.0  # passed as an argument, it is read anew


def test_numpy_from_jax_is_read_only() -> None:
    """Where the consumer can say so, the alias is read-only (JAX exports READ_ONLY)."""
    x = jax_cpu(jnp.arange(16, dtype=jnp.float32))
    n = dlbridge.to_numpy(x)
    assert n.__array_interface__["data"][0] == x.unsafe_buffer_pointer() and not n.flags.writeable


def test_jax_from_torch_sees_later_writes_to_the_source() -> None:
    """The JAX array is the source's memory: write the source only once JAX work on it is done
    (``block_until_ready()`` on the results), or pass copy=True."""
    t = torch.zeros(16, dtype=torch.float32, device="cpu")
    j = dlbridge.to_jax(t)
    assert j.unsafe_buffer_pointer() == t.data_ptr()
    t[0] = 7.0
    assert float(j[0]) == 7.0
    c = dlbridge.to_jax(t, copy=True)
    t[0] = 8.0
    assert float(c[0]) == 7.0 and c.unsafe_buffer_pointer() != t.data_ptr()


def test_jax_from_numpy_shares_when_aligned() -> None:
    raw = np.zeros(16 + 16, dtype=np.float32)
    offset = (-raw.__array_interface__["data"][0] % 64) // 4
    a = raw[offset : offset + 16]  # 64-byte aligned: JAX shares it instead of copying
    j = dlbridge.to_jax(a)
    assert j.unsafe_buffer_pointer() == a.__array_interface__["data"][0]
    a[1] = 3.0
    assert float(j[1]) == 3.0
