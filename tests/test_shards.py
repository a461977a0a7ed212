"""Sharded JAX arrays: ``dlbridge.shards`` hands each addressable shard over zero-copy with its
index, ``dlbridge.from_shards`` rebuilds the sharded array, and converting a sharded array as a
whole is refused with a ``ProducerError`` naming both (JAX refuses DLPack for it).

JAX reads ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` when its backend starts, so the
four-device cases run in a child process (once on the compiled fast route where it is built, once
in pure Python); the parent's JAX may already have started with one device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import dlbridge
from tests.conftest import need

jax = need("jax")
torch = need("torch")
np = need("numpy")

_FOUR_CPUS = """
import json, os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp, numpy as np, torch, dlbridge
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

assert len(jax.devices("cpu")) == 4, jax.devices()
mesh1 = Mesh(np.array(jax.devices()), ("a",))
mesh2 = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
out = {"compiled": dlbridge._accelerator.accel is not None}

def idx(index):
    return [[s.start, s.stop] for s in index]

def ptr(a):
    if isinstance(a, torch.Tensor):
        return a.data_ptr()
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0]
    return a.unsafe_buffer_pointer()

def values(a):
    if isinstance(a, torch.Tensor):
        return a.float().tolist()
    return np.asarray(a).astype(np.float32).tolist()

def err(call):
    try:
        call()
    except dlbridge.DLBridgeError as e:
        return type(e).__name__ + ": " + str(e)
    return "no error"

cases = {
    "1d_f32": jax.device_put(jnp.arange(16, dtype=jnp.float32), NamedSharding(mesh1, P("a"))),
    "2d_bf16": jax.device_put(jnp.arange(32, dtype=jnp.bfloat16).reshape(8, 4), NamedSharding(mesh2, P("a", "b"))),
    "2d_replicated_b": jax.device_put(jnp.arange(32, dtype=jnp.float32).reshape(8, 4), NamedSharding(mesh2, P("a", None))),
}
for name, x in cases.items():
    own = [s.data.unsafe_buffer_pointer() for s in x.addressable_shards]
    res = {"indices": [idx(s.index) for s in x.addressable_shards], "devices": [s.device.id for s in x.addressable_shards]}
    for to in ("torch", "numpy", "jax"):
        parts = dlbridge.shards(x, to)
        res[to] = {
            "type": type(parts).__name__,
            "indices": [idx(i) for i, _ in parts],
            "same_memory": [ptr(a) == p for (_, a), p in zip(parts, own)],
            "dtypes": sorted({str(a.dtype).removeprefix("torch.") for _, a in parts}),
            "values_match": all(values(a) == values(np.asarray(x)[i]) for i, a in parts),
        }
        if to == "jax":
            res[to]["devices"] = [next(iter(a.devices())).id for _, a in parts]
        back = dlbridge.from_shards(parts, x.sharding, copy=True if to == "numpy" else None)
        res[to]["round_trip"] = {
            "values": bool((np.asarray(back) == np.asarray(x)).all()),
            "sharding": back.sharding == x.sharding,
            "dtype": str(back.dtype),
            "shape": list(back.shape),
            "shares_parts": [s.data.unsafe_buffer_pointer() == ptr(a) for s, (_, a) in zip(back.addressable_shards, parts)],
        }
    out[name] = res

x = cases["1d_f32"]
plain = jnp.arange(4, dtype=jnp.float32)
dlbridge.to_torch(plain); dlbridge.to_torch(plain)  # the fast route has learnt ArrayImpl float32 -> torch
out["refusals"] = {
    "to_torch": err(lambda: dlbridge.to_torch(x)),
    "to_torch_again": err(lambda: dlbridge.to_torch(x)),
    "convert_numpy": err(lambda: dlbridge.convert(x, "numpy")),
    "to_jax": err(lambda: dlbridge.to_jax(x)),
    "inspect": err(lambda: dlbridge.inspect(x)),
    "replicated": err(lambda: dlbridge.to_torch(jax.device_put(jnp.arange(4.0), NamedSharding(mesh1, P()))),),
}
try:
    dlbridge.to_torch(x)
except dlbridge.ProducerError as e:
    out["refusals"]["is_buffer_error"] = isinstance(e, BufferError)

y = cases["2d_replicated_b"]
good = dlbridge.shards(y, "torch")
f16 = [(i, t.half() if k == 1 else t) for k, (i, t) in enumerate(good)]
out["bad"] = {
    "missing_device": err(lambda: dlbridge.from_shards(good[:3], y.sharding)),
    "duplicate": err(lambda: dlbridge.from_shards(good[:3] + good[:1], y.sharding)),
    "wrong_shape": err(lambda: dlbridge.from_shards([(good[0][0], good[0][1][:2])] + good[1:], y.sharding)),
    "mixed_dtypes": err(lambda: dlbridge.from_shards(f16, y.sharding)),
    "given_shape_too_big": err(lambda: dlbridge.from_shards(good, y.sharding, shape=(16, 4))),
    "not_a_sharding": err(lambda: dlbridge.from_shards(good, "cpu")),
    "not_pairs": err(lambda: dlbridge.from_shards([t for _, t in good], y.sharding)),
    "readonly_numpy_parts": err(lambda: dlbridge.from_shards(dlbridge.shards(y, "numpy"), y.sharding)),
    "given_shape_ok": bool((np.asarray(dlbridge.from_shards(good, y.sharding, shape=(8, 4))) == np.asarray(y)).all()),
}
print(json.dumps(out))
"""


def _run(pure: bool) -> dict:
    env = dict(os.environ)
    env.pop("DLBRIDGE_PURE_PYTHON", None)
    if pure:
        env["DLBRIDGE_PURE_PYTHON"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FOUR_CPUS)], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["route", "pure"])
def four_cpus(request: pytest.FixtureRequest) -> dict:
    return _run(pure=request.param == "pure")


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


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("to", ["torch", "numpy", "jax"])
def test_shards_hand_over_each_shard_zero_copy_with_its_index(four_cpus: dict, case: str, to: str) -> None:
    res, want = four_cpus[case], _CASES[case]
    got = res[to]
    assert res["indices"] == want["indices"] and res["devices"] == [0, 1, 2, 3], res
    assert got["type"] == "list" and got["indices"] == want["indices"], got  # x.addressable_shards order
    assert got["same_memory"] == [True] * 4, got  # each part is its shard's own buffer
    assert got["dtypes"] == [want["dtype"]] and got["values_match"], got
    if to == "jax":
        assert got["devices"] == [0, 1, 2, 3], got  # each JAX part stays on its shard's device


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("to", ["torch", "numpy", "jax"])
def test_from_shards_rebuilds_the_sharded_array(four_cpus: dict, case: str, to: str) -> None:
    back, want = four_cpus[case][to]["round_trip"], _CASES[case]
    assert back["values"] and back["sharding"], back
    assert back["dtype"] == want["dtype"] and back["shape"] == want["shape"], back
    # torch and JAX parts are shared (aligned CPU memory); read-only NumPy parts need copy=True.
    assert back["shares_parts"] == [to != "numpy"] * 4, back


def test_converting_a_sharded_array_whole_is_refused_naming_shards_and_a_gathered_copy(four_cpus: dict) -> None:
    r = four_cpus["refusals"]
    for key in ("to_torch", "to_torch_again", "convert_numpy", "to_jax", "inspect"):
        assert r[key].startswith("ProducerError: the JAX array (float32[16]) is sharded over 4 devices"), (key, r[key])
        assert "jax.device_get(x) / np.asarray(x)" in r[key] and "dlbridge.from_shards(parts, x.sharding)" in r[key]
    # The fast route (once it has learnt ArrayImpl float32 -> torch) declines; the pipeline refuses.
    assert 'dlbridge.shards(x, "torch")' in r["to_torch"] and r["to_torch_again"] == r["to_torch"]
    assert 'dlbridge.shards(x, "numpy")' in r["convert_numpy"] and 'dlbridge.shards(x, "jax")' in r["to_jax"]
    assert r["replicated"].startswith("ProducerError: the JAX array (float32[4]) is replicated on 4 devices")
    assert "x.addressable_data(0)" in r["replicated"]
    assert r["is_buffer_error"]


def test_the_route_child_ran_compiled_where_it_is_built(four_cpus: dict, request: pytest.FixtureRequest) -> None:
    from dlbridge import _accelerator

    pure = request.node.callspec.params["four_cpus"] == "pure"
    if (
        not pure
        and _accelerator.accel is None
        and _accelerator.reason.startswith(f"pure Python ({_accelerator.ENV_VAR}=")
    ):
        import importlib.util  # this process was asked for pure Python; the route child was not: is it built?

        built = importlib.util.find_spec("dlbridge._accel") is not None
        assert four_cpus["compiled"] is built
        return
    assert four_cpus["compiled"] is (False if pure else _accelerator.accel is not None)


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
def test_from_shards_names_what_is_wrong(four_cpus: dict, key: str, kind: str, says: str) -> None:
    msg = four_cpus["bad"][key]
    assert msg.startswith(kind + ": ") and says in msg, msg


def test_from_shards_takes_the_global_shape(four_cpus: dict) -> None:
    assert four_cpus["bad"]["given_shape_ok"]


# --- in this process (JAX may have one CPU device) --------------------------------------------


def test_a_single_device_array_is_one_shard_covering_it() -> None:
    jnp = need("jax.numpy")
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    parts = dlbridge.shards(x, "torch")
    assert len(parts) == 1
    ((index, t),) = parts
    assert index == (slice(None), slice(None)) and t.data_ptr() == x.unsafe_buffer_pointer()
    assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    back = dlbridge.from_shards(parts, x.sharding)
    assert back.sharding == x.sharding and back.unsafe_buffer_pointer() == t.data_ptr()
    assert back.shape == (2, 3) and (np.asarray(back) == np.asarray(x)).all()


def test_shards_passes_the_conversion_options() -> None:
    jnp = need("jax.numpy")
    x = jnp.arange(4, dtype=jnp.float32)
    ((_, t),) = dlbridge.shards(x, "torch", copy=True)
    assert t.data_ptr() != x.unsafe_buffer_pointer() and t.tolist() == [0.0, 1.0, 2.0, 3.0]
    ((_, u),) = dlbridge.shards(x, "numpy", dtype="int32")
    assert u.dtype == np.int32
    with pytest.raises(dlbridge.OptionError, match="unknown target framework 'nope'"):
        dlbridge.shards(x, "nope")


@pytest.mark.parametrize("other", [lambda: np.zeros(3), lambda: torch.zeros(3), lambda: [1.0, 2.0]])
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

    f(jnp.ones(2))
    assert seen and "tracer" in seen[0]
    d = jnp.ones(2)
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
    x = jnp.float32(2.5)
    ((index, t),) = dlbridge.shards(x, "torch")
    assert index == () and t.shape == () and t.item() == 2.5
    back = dlbridge.from_shards([(index, t)], x.sharding)
    assert back.shape == () and float(back) == 2.5


def test_a_replicated_gpu_index_takes_the_part_already_on_that_gpu() -> None:
    """Parts with the same index (a replicated axis): each GPU takes the one on it (no copy); CPU
    devices are one memory, so there the order is kept. Stand-ins: only __dlpack_device__ is read."""
    from dlbridge._shards import _nearest

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
