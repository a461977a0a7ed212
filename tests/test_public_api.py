"""The public typing names, as users see them at run time."""

from __future__ import annotations

import dlbridge
from tests._arrays import jax_cpu
from tests.conftest import need


def test_supports_dlpack_is_public_and_recognises_arrays_of_every_framework() -> None:
    np, torch, jnp = need("numpy"), need("torch"), need("jax.numpy")
    assert "SupportsDLPack" in dlbridge.__all__ and dlbridge.SupportsDLPack.__module__ == "dlbridge"
    for array in (np.zeros(2), torch.zeros(2, device="cpu"), jax_cpu(jnp.zeros(2))):
        assert isinstance(array, dlbridge.SupportsDLPack), type(array)
    for other in ([1.0, 2.0], 3.0, np.zeros(2).__dlpack__()):  # a list, a scalar, a bare capsule
        assert not isinstance(other, dlbridge.SupportsDLPack), type(other)


def test_sharded_jax_arrays_have_public_functions() -> None:
    import inspect

    assert {"shards", "from_shards"} <= set(dlbridge.__all__)
    assert dlbridge.shards.__module__ == dlbridge.from_shards.__module__ == "dlbridge._shards"
    shards = inspect.signature(dlbridge.shards).parameters
    assert [p.kind for p in list(shards.values())[:2]] == [inspect.Parameter.POSITIONAL_ONLY] * 2
    assert {"fallback", "dtype", "device", "copy"} <= set(shards)  # the options of convert
    rebuild = inspect.signature(dlbridge.from_shards).parameters
    assert list(rebuild) == ["parts", "sharding", "shape", "copy"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(rebuild.values())[2:])
