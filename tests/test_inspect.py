"""dlbridge.inspect: every field, every producer, raw capsules, and never consuming anything."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import dlbridge
from tests._arrays import jax_cpu
from tests.conftest import caps_of, need

torch = need("torch")
jnp = need("jax.numpy")
ml_dtypes = need("ml_dtypes")


def test_torch_sliced_bf16_every_field() -> None:
    base = torch.zeros(4, 6, dtype=torch.bfloat16, device="cpu")
    t = base[1:, 2:]
    info = dlbridge.inspect(t)
    assert (info.dtype, info.code, info.bits, info.lanes) == ("bfloat16", 4, 16, 1)
    assert (info.device_type, info.device_id, info.device) == ("cpu", 0, (1, 0))
    assert info.shape == (3, 4) and info.strides == (6, 1)
    assert info.data_ptr == t.data_ptr() == base.data_ptr() + (6 + 2) * 2
    assert info.versioned and info.version is not None and info.version[0] == 1
    assert (info.readonly, info.producer) == (False, "torch")
    assert info.describe() == "torch cpu bfloat16[3, 4]"
    assert not info.is_c_contiguous() and not info.is_compact()
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.dtype = "float32"  # type: ignore[misc]


def test_fast_construction_matches_the_dataclass() -> None:
    """read() fills __dict__ directly (speed): the result must equal one built by the dataclass."""
    for x in (torch.zeros(2, 3, device="cpu")[:, 1:], np.zeros(4, np.int16), jax_cpu(jnp.zeros(()))):
        info = dlbridge.inspect(x)
        assert set(vars(info)) == {f.name for f in dataclasses.fields(info)}
        rebuilt = dlbridge.DLPackInfo(**{f.name: getattr(info, f.name) for f in dataclasses.fields(info)})
        assert rebuilt == info and hash(rebuilt) == hash(info) and repr(rebuilt) == repr(info)
        with pytest.raises(dataclasses.FrozenInstanceError):
            info.shape = ()  # type: ignore[misc]


def test_numpy_readonly_and_ml_dtypes() -> None:
    if not caps_of("numpy").versioned_capsules:
        pytest.skip("NumPy < 2.1 cannot export a read-only array (no READ_ONLY flag in legacy DLPack)")
    a = np.arange(6, dtype=np.float32).astype(ml_dtypes.float8_e5m2).reshape(2, 3)
    a.flags.writeable = False
    info = dlbridge.inspect(a)
    assert (info.dtype, info.code, info.bits) == ("float8_e5m2", 12, 8)
    assert info.readonly and info.producer == "numpy" and info.data_ptr == a.ctypes.data


def test_jax_is_legacy_only() -> None:
    info = dlbridge.inspect(jax_cpu(jnp.arange(3, dtype=jnp.bfloat16)))
    assert info.producer == "jax" and info.dtype == "bfloat16"
    assert not info.versioned and info.version is None


def test_raw_capsules_are_not_consumed() -> None:
    t = torch.arange(5.0, device="cpu")
    cap = t.__dlpack__(max_version=(1, 0))
    first = dlbridge.inspect(cap)
    assert first == dlbridge.inspect(cap)  # reading twice gives the same answer
    assert first.producer is None and first.dtype == "float32"
    out = torch.from_dlpack(cap)  # the capsule is still usable by a consumer
    assert out.data_ptr() == t.data_ptr()
    with pytest.raises(dlbridge.CapsuleError, match="already consumed"):
        dlbridge.inspect(cap)


def test_strides_none_for_compact_legacy_numpy() -> None:
    info = dlbridge.inspect(np.zeros((2, 3)).__dlpack__())
    assert info.strides in (None, (3, 1))
    assert info.is_c_contiguous()


def test_zero_d_and_empty() -> None:
    assert dlbridge.inspect(torch.tensor(1.5, device="cpu")).shape == ()
    empty = dlbridge.inspect(torch.empty(0, 3, device="cpu"))
    assert empty.shape == (0, 3) and empty.size == 0 and empty.nbytes == 0


def test_not_an_array() -> None:
    with pytest.raises(dlbridge.NotAnArrayError, match="got list"):
        dlbridge.inspect([1, 2, 3])
    with pytest.raises(TypeError):  # users catching the builtin still catch it
        dlbridge.to_torch([1, 2, 3])


def test_unknown_codes_get_names_not_exceptions() -> None:
    from dlbridge._dtypes import dtype_name

    assert dtype_name(2, 32, 4) == "float32x4"
    assert dtype_name(0, 4) == "int4"
    assert dtype_name(99, 8) == "dlpack(code=99, bits=8, lanes=1)"
    assert dtype_name(17, 4, 2) == "float4_e2m1fn_x2"
