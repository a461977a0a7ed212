"""Every CPU producer x consumer x dtype x layout: values, dtype and memory sharing.

Every cell whose dtype the installed producer can export and the consumer can hold (the
capability table says which; today's stack holds them all) must arrive with its true dtype and
equal bits, and share memory except where JAX must copy (layouts it cannot take, or a buffer
not aligned the way XLA needs); the others must be refused with UnsupportedDtypeError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from dlbridge._capabilities import capabilities
from tests._arrays import DTYPES, FRAMEWORKS, LAYOUTS, bits, data_ptr, dtype_name, make_source, to_host
from tests.conftest import need

JAX_ALIGNMENT = 64  # XLA:CPU shares buffers aligned to this; others are copied on import


def _jax_x64() -> bool:
    import jax

    return bool(jax.config.jax_enable_x64)


def _made(producer: str, dtype: str, layout: str) -> tuple[Any, np.ndarray]:
    try:
        return make_source(producer, dtype, layout)
    except TypeError as err:  # the framework has no such dtype (array-api-strict's float16, MLX's float8)
        pytest.skip(f"{producer} cannot make {dtype}: {err}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("consumer", FRAMEWORKS)
@pytest.mark.parametrize("producer", FRAMEWORKS)
def test_cell(producer: str, consumer: str, dtype: str, layout: str) -> None:
    need(producer)
    need(consumer)
    need("ml_dtypes")
    if dtype == "int64" and "jax" in (producer, consumer) and not _jax_x64():
        pytest.skip("JAX without x64 has no int64 (covered by test_jax_x64_* below)")
    src, expected = _made(producer, dtype, layout)
    made_by = capabilities(producer, ADAPTERS[producer].version)
    if dtype in made_by.cannot_export:  # e.g. JAX < 0.5.3 and float8
        with pytest.raises(dlbridge.UnsupportedDtypeError, match="cannot export"):
            dlbridge.convert(src, consumer)
        return
    info = dlbridge.inspect(src)
    assert info.dtype == dtype
    caps = capabilities(consumer, ADAPTERS[consumer].version)
    if dtype not in caps.holds:  # e.g. JAX < 0.5.3 and float8
        with pytest.raises(dlbridge.UnsupportedDtypeError, match="cannot hold"):
            dlbridge.convert(src, consumer)
        return

    options: dict[str, Any] = {}
    holds_readonly = caps.readonly_arrays or caps.readonly_imports or caps.copies_imports
    if not ADAPTERS[producer].mutable_arrays and not holds_readonly:  # read-only memory (JAX)
        with pytest.raises(dlbridge.ReadOnlyError, match='readonly="drop"'):
            dlbridge.convert(src, consumer)
        options["readonly"] = "drop"  # the same memory, as an array not to be written
    out = dlbridge.convert(src, consumer, **options)

    assert dtype_name(consumer, out) == dtype
    assert tuple(out.shape) == expected.shape
    np.testing.assert_array_equal(bits(to_host(consumer, out)), bits(expected))
    if expected.size == 0:
        return
    shared = data_ptr(consumer, out) == data_ptr(producer, src)
    if caps.copies_imports:  # MLX: every CPU import is a copy
        assert not shared, "expected a copy"
    elif consumer != "jax":
        assert shared, "expected a zero-copy handoff"
    else:
        dense = info.is_c_contiguous() if caps.row_major_only else info.is_compact()
        aligned = info.data_ptr % JAX_ALIGNMENT == 0 or caps.shares_unaligned  # JAX < 0.4.35 shares it anyway
        assert shared == (dense and aligned), (dense, aligned)


@pytest.mark.parametrize("consumer", FRAMEWORKS)
@pytest.mark.parametrize("producer", FRAMEWORKS)
def test_writes_are_visible_through_zero_copy(producer: str, consumer: str) -> None:
    """Sharing is real: a write through the source shows in the result."""
    if "jax" in (producer, consumer):
        pytest.skip("JAX arrays are immutable")
    need(producer)
    need(consumer)
    need("ml_dtypes")
    caps = capabilities(consumer, ADAPTERS[consumer].version)
    if caps.copies_imports:
        pytest.skip(f"{consumer} copies every CPU import")
    if "bfloat16" not in caps.holds:
        pytest.skip(f"{consumer} cannot hold bfloat16")
    if producer == "mlx":
        pytest.skip("MLX's item assignment writes a new buffer, not the shared one (see tests/test_mlx.py)")
    src, _ = _made(producer, "bfloat16", "contiguous")
    out = dlbridge.convert(src, consumer)
    src[0, 0] = 5.5
    assert float(out[0, 0]) == 5.5


def test_jax_x64_off_refuses_int64_instead_of_narrowing() -> None:
    need("jax")
    torch = need("torch")
    if _jax_x64():
        pytest.skip("x64 is on in this process")
    t = torch.arange(3, dtype=torch.int64, device="cpu") + 2**40
    with pytest.raises(dlbridge.UnsupportedDtypeError, match=r"jax_enable_x64"):
        dlbridge.to_jax(t)


def test_jax_x64_on_int64_both_ways() -> None:
    from tests.conftest import run_child

    need("jax")
    need("torch")

    proc = run_child(
        """
        import jax; jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp, torch, numpy as np, dlbridge
        t = torch.arange(3, dtype=torch.int64, device="cpu") + 2**40
        j = dlbridge.to_jax(t)
        assert j.dtype == jnp.int64 and j.unsafe_buffer_pointer() == t.data_ptr(), j
        assert (np.asarray(j) == t.numpy()).all()
        back = dlbridge.to_torch(j, readonly="drop")  # (a JAX array is read-only memory)
        assert back.data_ptr() == t.data_ptr() and back.dtype == torch.int64
        n = dlbridge.to_numpy(jax.device_put(jnp.arange(3, dtype=jnp.int64), jax.devices("cpu")[0]))
        assert n.dtype == np.int64
        print("ok")
        """
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
