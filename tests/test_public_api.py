"""The public typing names, as users see them at run time."""

from __future__ import annotations

import dlbridge
from tests.conftest import need


def test_supports_dlpack_is_public_and_recognises_arrays_of_every_framework() -> None:
    np, torch, jnp = need("numpy"), need("torch"), need("jax.numpy")
    assert "SupportsDLPack" in dlbridge.__all__ and dlbridge.SupportsDLPack.__module__ == "dlbridge"
    for array in (np.zeros(2), torch.zeros(2), jnp.zeros(2)):
        assert isinstance(array, dlbridge.SupportsDLPack), type(array)
    for other in ([1.0, 2.0], 3.0, np.zeros(2).__dlpack__()):  # a list, a scalar, a bare capsule
        assert not isinstance(other, dlbridge.SupportsDLPack), type(other)
