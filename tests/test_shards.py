"""Sharded JAX arrays: ``dlbridge.shards`` hands each addressable shard over zero-copy with its
index, ``dlbridge.from_shards`` rebuilds the sharded array, and converting a sharded array as a
whole is refused with a ``ProducerError`` naming both (JAX refuses DLPack for it).

JAX reads ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` when its backend starts, so the
four-device cases are ``isolated(env={"XLA_FLAGS": ...})``: they run in a child pytest (once on the
compiled fast route where it is built, once in pure Python); the parent's JAX may already have
started with one device.
"""

from __future__ import annotations

import pytest

import dlbridge
from tests._arrays import jax_cpu
from tests.conftest import need

jax = need("jax")
torch = need("torch")
np = need("numpy")

FOUR = "--xla_force_host_platform_device_count=4"
# Each four-device test runs in a child pytest: on the compiled fast route where it is built
# ([route]) and in pure Python ([pure]).
PATHS = [
    pytest.param("route", marks=pytest.mark.isolated(env={"XLA_FLAGS": FOUR, "DLBRIDGE_PURE_PYTHON": None})),
    pytest.param("pure", marks=pytest.mark.isolated(env={"XLA_FLAGS": FOUR, "DLBRIDGE_PURE_PYTHON": "1"})),
]


def _case(name: str):
    """A sharded JAX array over four CPU devices (the cases of ``_CASES``, and a replicated one)."""
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    cpus = jax.devices("cpu")
    assert len(cpus) == 4, cpus
    mesh1, mesh2 = Mesh(np.array(cpus), ("a",)), Mesh(np.array(cpus).reshape(2, 2), ("a", "b"))
    if name == "1d_f32":
        return jax.device_put(jnp.arange(16, dtype=jnp.float32), NamedSharding(mesh1, P("a")))
    if name == "2d_bf16":
        return jax.device_put(jnp.arange(32, dtype=jnp.bfloat16).reshape(8, 4), NamedSharding(mesh2, P("a", "b")))
    if name == "replicated":
        return jax.device_put(jnp.arange(4.0), NamedSharding(mesh1, P()))
    assert name == "2d_replicated_b", name
    return jax.device_put(jnp.arange(32, dtype=jnp.float32).reshape(8, 4), NamedSharding(mesh2, P("a", None)))


def _idx(index) -> list:
    return [[s.start, s.stop] for s in index]


def _ptr(a) -> int:
    if isinstance(a, torch.Tensor):
        return a.data_ptr()
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0]
    return a.unsafe_buffer_pointer()


def _values(a) -> list:
    return a.float().tolist() if isinstance(a, torch.Tensor) else np.asarray(a).astype(np.float32).tolist()


def _err(call) -> str:
    try:
        call()
    except dlbridge.DLBridgeError as e:
        return type(e).__name__ + ": " + str(e)
    return "no error"


_CASES = {
    "1d_f32": {"indices": [[[0, 4]], [[4, 8]], [[8, 12]], [[12, 16]]], "dtype": "float32", "shape": [16]},
    "2d_bf16": {
        "indices": [[[0, 4], [0, 2]], [[0, 4], [2, 4]], [[4, 8], [0, 2]], [[4, 8], [2, 4]]],
        "dtype": "bfloat16",
        "shape": [8, 4],
    },
    # P("a", None): the second mesh axis replicates, so two devices hold each row block.
    "2d_replicated_b": {
        "indices": [[[0, 4], [None, None]], [[0, 4], [None, None]], [[4, 8], [None, None]], [[4, 8], [None, None]]],
        "dtype": "float32",
        "shape": [8, 4],
    },
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("to", ["torch", "numpy", "jax"])
def test_shards_hand_over_each_shard_zero_copy_with_its_index(path: str, case: str, to: str) -> None:
    x, want = _case(case), _CASES[case]
    assert [_idx(s.index) for s in x.addressable_shards] == want["indices"]
    assert [s.device.id for s in x.addressable_shards] == [0, 1, 2, 3]
    own = [s.data.unsafe_buffer_pointer() for s in x.addressable_shards]
    parts = dlbridge.shards(x, to, readonly="drop")  # (JAX arrays are read-only: torch shares them so)
    assert type(parts) is list and [_idx(i) for i, _ in parts] == want["indices"]  # x.addressable_shards order
    assert [_ptr(a) == p for (_, a), p in zip(parts, own)] == [True] * 4  # each part is its shard's own buffer
    assert {str(a.dtype).removeprefix("torch.") for _, a in parts} == {want["dtype"]}
    assert all(_values(a) == _values(np.asarray(x)[i]) for i, a in parts)
    if to == "jax":
        assert [next(iter(a.devices())).id for _, a in parts] == [0, 1, 2, 3]  # each stays on its device


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("to", ["torch", "numpy", "jax"])
def test_from_shards_rebuilds_the_sharded_array(path: str, case: str, to: str) -> None:
    x, want = _case(case), _CASES[case]
    parts = dlbridge.shards(x, to, readonly="drop")  # (JAX arrays are read-only: torch shares them so)
    back = dlbridge.from_shards(parts, x.sharding, copy=True if to == "numpy" else None)
    assert (np.asarray(back) == np.asarray(x)).all() and back.sharding == x.sharding
    assert str(back.dtype) == want["dtype"] and list(back.shape) == want["shape"]
    # torch and JAX parts are shared (aligned CPU memory); read-only NumPy parts need copy=True.
    shared = [s.data.unsafe_buffer_pointer() == _ptr(a) for s, (_, a) in zip(back.addressable_shards, parts)]
    assert shared == [to != "numpy"] * 4


@pytest.mark.parametrize("path", PATHS)
def test_converting_a_sharded_array_whole_is_refused_naming_shards_and_a_gathered_copy(path: str) -> None:
    import jax.numpy as jnp

    x = _case("1d_f32")
    plain = jax_cpu(jnp.arange(4, dtype=jnp.float32))
    (
        dlbridge.to_torch(plain, readonly="drop"),
        dlbridge.to_torch(plain, readonly="drop"),
    )  # the fast route has learnt ArrayImpl float32 -> torch
    r = {
        "to_torch": _err(lambda: dlbridge.to_torch(x)),
        "to_torch_again": _err(lambda: dlbridge.to_torch(x)),
        "convert_numpy": _err(lambda: dlbridge.convert(x, "numpy")),
        "to_jax": _err(lambda: dlbridge.to_jax(x)),
        "inspect": _err(lambda: dlbridge.inspect(x)),
    }
    for key, message in r.items():
        assert message.startswith("ProducerError: the JAX array (float32[16]) is sharded over 4 devices"), (
            key,
            message,
        )
        assert "jax.device_get(x) / np.asarray(x)" in message and "dlbridge.from_shards(parts, x.sharding)" in message
    # The fast route (once it has learnt ArrayImpl float32 -> torch) declines; the pipeline refuses.
    assert 'dlbridge.shards(x, "torch")' in r["to_torch"] and r["to_torch_again"] == r["to_torch"]
    assert 'dlbridge.shards(x, "numpy")' in r["convert_numpy"] and 'dlbridge.shards(x, "jax")' in r["to_jax"]
    replicated = _err(lambda: dlbridge.to_torch(_case("replicated")))
    assert replicated.startswith("ProducerError: the JAX array (float32[4]) is replicated on 4 devices")
    assert "x.addressable_data(0)" in replicated
    with pytest.raises(BufferError):
        dlbridge.to_torch(x)


@pytest.mark.parametrize("path", PATHS)
def test_the_child_runs_the_path_it_was_given(path: str) -> None:
    import importlib.util

    from dlbridge import _accelerator

    if path == "pure":
        assert _accelerator.accel is None and _accelerator.reason.startswith("pure Python (DLBRIDGE_PURE_PYTHON")
    else:  # compiled wherever it is built
        assert (_accelerator.accel is not None) is (importlib.util.find_spec("dlbridge._accel") is not None)


def _bad(key: str) -> str:
    """What ``from_shards`` says for a bad input (``key``), over a sharded float32[8, 4]."""
    y = _case("2d_replicated_b")
    good = dlbridge.shards(y, "torch", readonly="drop")
    f16 = [(i, t.half() if k == 1 else t) for k, (i, t) in enumerate(good)]
    calls = {
        "missing_device": lambda: dlbridge.from_shards(good[:3], y.sharding),
        "duplicate": lambda: dlbridge.from_shards(good[:3] + good[:1], y.sharding),
        "wrong_shape": lambda: dlbridge.from_shards([(good[0][0], good[0][1][:2]), *good[1:]], y.sharding),
        "mixed_dtypes": lambda: dlbridge.from_shards(f16, y.sharding),
        "given_shape_too_big": lambda: dlbridge.from_shards(good, y.sharding, shape=(16, 4)),
        "not_a_sharding": lambda: dlbridge.from_shards(good, "cpu"),
        "not_pairs": lambda: dlbridge.from_shards([t for _, t in good], y.sharding),
        "readonly_numpy_parts": lambda: dlbridge.from_shards(dlbridge.shards(y, "numpy"), y.sharding),
    }
    return _err(calls[key])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("key", "kind", "says"),
    [
        ("missing_device", "OptionError", "no part for: cpu:3 needs [4:8, 0:4]"),
        ("duplicate", "OptionError", "no device for: part 3 at [0:4, 0:4]"),
        ("wrong_shape", "LayoutError", "part 0 has shape [2, 4], but its index [0:4, :]"),
        ("mixed_dtypes", "OptionError", "part 1: float16"),
        ("given_shape_too_big", "OptionError", "for shape [16, 4]"),
        ("not_a_sharding", "OptionError", "sharding is a builtins.str, not a jax.sharding.Sharding"),
        ("not_pairs", "OptionError", "each part is an (index, array) pair"),
        ("readonly_numpy_parts", "ReadOnlyError", "pass copy=True"),
    ],
)
def test_from_shards_names_what_is_wrong(path: str, key: str, kind: str, says: str) -> None:
    msg = _bad(key)
    assert msg.startswith(kind + ": ") and says in msg, msg


@pytest.mark.parametrize("path", PATHS)
def test_from_shards_takes_the_global_shape(path: str) -> None:
    y = _case("2d_replicated_b")
    good = dlbridge.shards(y, "torch", readonly="drop")
    assert (np.asarray(dlbridge.from_shards(good, y.sharding, shape=(8, 4))) == np.asarray(y)).all()


# --- in this process (JAX may have one CPU device) --------------------------------------------


def test_a_single_device_array_is_one_shard_covering_it() -> None:
    jnp = need("jax.numpy")
    x = jax_cpu(jnp.arange(6, dtype=jnp.float32)).reshape(2, 3)
    parts = dlbridge.shards(x, "torch", readonly="drop")
    assert len(parts) == 1
    ((index, t),) = parts
    assert index == (slice(None), slice(None)) and t.data_ptr() == x.unsafe_buffer_pointer()
    assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    back = dlbridge.from_shards(parts, x.sharding)
    assert back.sharding == x.sharding and back.unsafe_buffer_pointer() == t.data_ptr()
    assert back.shape == (2, 3) and (np.asarray(back) == np.asarray(x)).all()


def test_shards_passes_the_conversion_options() -> None:
    jnp = need("jax.numpy")
    x = jax_cpu(jnp.arange(4, dtype=jnp.float32))
    ((_, t),) = dlbridge.shards(x, "torch", copy=True)
    assert t.data_ptr() != x.unsafe_buffer_pointer() and t.tolist() == [0.0, 1.0, 2.0, 3.0]
    ((_, u),) = dlbridge.shards(x, "numpy", dtype="int32")
    assert u.dtype == np.int32
    with pytest.raises(dlbridge.OptionError, match="unknown target framework 'nope'"):
        dlbridge.shards(x, "nope")


@pytest.mark.parametrize("other", [lambda: np.zeros(3), lambda: torch.zeros(3, device="cpu"), lambda: [1.0, 2.0]])
def test_shards_takes_only_jax_arrays(other) -> None:
    with pytest.raises(dlbridge.NotAnArrayError, match=r"takes a jax.Array .* dlbridge.convert\(x, to\)"):
        dlbridge.shards(other(), "torch")


def test_shards_of_a_tracer_or_deleted_array_names_the_state() -> None:
    jnp = need("jax.numpy")
    seen: list[str] = []

    @jax.jit
    def f(a):
        with pytest.raises(dlbridge.ProducerError) as info:
            dlbridge.shards(a, "numpy")
        seen.append(str(info.value))
        return a

    f(jax_cpu(jnp.ones(2)))
    assert seen and "tracer" in seen[0]
    d = jax_cpu(jnp.ones(2))
    d.delete()
    with pytest.raises(dlbridge.ProducerError, match="was deleted"):
        dlbridge.shards(d, "torch")


def test_readme_example_runs_as_written() -> None:
    from tests.conftest import readme_block

    scope: dict = {}
    exec(readme_block("shards-example"), scope)  # the README's own code, unchanged (this process's devices)
    x, parts, y = scope["x"], scope["parts"], scope["y"]
    assert y.sharding == x.sharding and np.allclose(np.asarray(y), np.sqrt(np.arange(8.0)))
    ptrs = {s.data.unsafe_buffer_pointer() for s in y.addressable_shards}
    assert ptrs == {t.data_ptr() for _, t in parts}  # the torch tensors' memory, not copies


def test_a_zero_dimensional_array_round_trips() -> None:
    jnp = need("jax.numpy")
    x = jax_cpu(jnp.float32(2.5))
    ((index, t),) = dlbridge.shards(x, "torch", readonly="drop")
    assert index == () and t.shape == () and t.item() == 2.5
    back = dlbridge.from_shards([(index, t)], x.sharding)
    assert back.shape == () and float(back) == 2.5


def test_a_replicated_gpu_index_takes_the_part_already_on_that_gpu() -> None:
    """Parts with the same index (a replicated axis): each GPU takes the one on it (no copy); CPU
    devices are one memory, so there the order is kept. Stand-ins: only __dlpack_device__ is read."""
    from dlbridge._adapters._jax_shards import _nearest

    class On:
        def __init__(self, gpu: int) -> None:
            self.gpu = gpu

        def __dlpack__(self, **_: object) -> None:
            raise AssertionError("never exported")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, self.gpu)

    class Dev:
        def __init__(self, platform: str, hw: int) -> None:
            self.platform, self.local_hardware_id = platform, hw

    pairs = [((slice(None),), On(0)), ((slice(None),), On(1)), ((slice(None),), On(2))]
    assert _nearest([0, 1, 2], pairs, Dev("gpu", 2)) == 2
    assert _nearest([0, 1], pairs, Dev("gpu", 1)) == 1
    assert _nearest([0, 1], pairs, Dev("gpu", 7)) == 0  # none there: the first (a copy)
    assert _nearest([0, 1, 2], pairs, Dev("cpu", 2)) == 0


@pytest.mark.parametrize("path", PATHS)
def test_shards_keep_the_read_only_rule_and_take_readonly(path: str) -> None:
    """JAX shards are read-only: into torch refused by default naming both fixes; readonly="drop" shares
    each shard's memory; copy=True copies."""
    x = _case("1d_f32")
    with pytest.raises(dlbridge.ReadOnlyError, match=r'JAX arrays are immutable.*copy=True.*readonly="drop"'):
        dlbridge.shards(x, "torch")
    shared = dlbridge.shards(x, "torch", readonly="drop")
    assert {t.data_ptr() for _, t in shared} == {s.data.unsafe_buffer_pointer() for s in x.addressable_shards}
    copied = dlbridge.shards(x, "torch", copy=True)
    assert not {t.data_ptr() for _, t in copied} & {s.data.unsafe_buffer_pointer() for s in x.addressable_shards}
    with pytest.raises(dlbridge.OptionError, match="not a read-only choice"):
        dlbridge.shards(x, "torch", readonly="yes")  # type: ignore[arg-type]
