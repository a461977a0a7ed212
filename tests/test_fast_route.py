"""The fast route (dlbridge/_route/_replay.py; compiled in dlbridge/_csrc/): the same results as the full
pipeline, on both paths.

Every test runs in-process on the path this process loaded (``[loaded]``) and, where that is the
compiled module, again in a child pytest on pure Python (``[pure-python]``, tests/_route_helpers.py's
``on_both_paths``; tests/test_fast_route_states.py too), so both paths are covered, test by test.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import os
import pydoc
import re
import sys
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge import _accelerator
from dlbridge._route import _replay as _route
from tests._arrays import make_source, np_dtype, reference
from tests._route_helpers import (  # noqa: F401 - route_path: the fixture on_both_paths parametrizes
    COMPILED,
    aligned,
    counting_declines,
    on_both_paths,
    outcome,
    pipeline,
    ptr,
    route_path,
)
from tests.conftest import caps_of, need, run_child

ROOT = Path(__file__).resolve().parents[1]
TO = {"numpy": dlbridge.to_numpy, "torch": dlbridge.to_torch, "jax": dlbridge.to_jax}
DTYPES = ("float32", "int64", "bool", "bfloat16", "float8_e4m3fn", "complex64", "uint16")


# --- both paths ----------------------------------------------------------------------------------

pytest_generate_tests = on_both_paths


def test_the_path_is_the_one_asked_for(request: pytest.FixtureRequest) -> None:
    if request.getfixturevalue("route_path") == "pure-python":
        assert not COMPILED and _accelerator.reason.startswith("pure Python (DLBRIDGE_PURE_PYTHON"), _accelerator.reason
    elif "DLBRIDGE_PURE_PYTHON" not in os.environ:
        assert COMPILED or not _accelerator.reason.startswith("pure Python (DLBRIDGE_PURE_PYTHON"), _accelerator.reason


def _pure_python_env() -> dict[str, str]:
    """For a fresh interpreter on the pure-Python path (a child compares what it sees with this one)."""
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_FALLBACK"}
    env["DLBRIDGE_PURE_PYTHON"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_the_path_is_the_one_reported() -> None:
    if COMPILED:
        assert _accelerator.reason.startswith("compiled (")
        assert _route.convert is _accelerator.accel.convert
        assert type(dlbridge.to_numpy).__name__ == "Route"
    else:
        assert _accelerator.reason.startswith("pure Python (")
        assert _route.convert is _route._convert_py
        assert inspect.isfunction(dlbridge.to_numpy)


# --- the route gives what the pipeline gives ---------------------------------------------------


def _source(framework: str, dtype: str):
    ref = reference(dtype, (3, 5))
    if framework == "numpy":
        return aligned(ref)  # JAX shares 64-byte aligned buffers only: the same every run
    if framework == "torch":
        need("torch")
    else:
        need("jax")
    return make_source(framework, dtype, "contiguous")[0]


def test_torch_default_device_keeps_the_route_and_other_modes_do_not() -> None:
    """``torch.set_default_device`` / ``with torch.device(...)`` pushes torch's ``DeviceContext`` mode, which
    only places what factory functions make: torch tensors keep the route under it (on a GPU machine whose
    default device is the GPU as anywhere), sharing memory. Any other TorchFunctionMode sends them through
    the pipeline (torch's own ``__dlpack__``, which that mode sees), with or without a DeviceContext below."""
    torch = need("torch")
    from torch.overrides import TorchFunctionMode

    class Seen(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            Seen.calls += 1
            return func(*args, **(kwargs or {}))

    t = torch.arange(6, dtype=torch.float32, device="cpu")
    dlbridge.to_torch(t), dlbridge.to_torch(t)  # warm (torch -> torch: on the route on every stack)
    with torch.device("meta"):
        assert torch._C._is_torch_function_mode_enabled() and torch.empty(1).device.type == "meta"
        with counting_declines() as slow:
            outs = [dlbridge.to_torch(t) for _ in range(3)]
    assert slow["torch"] == 0, "torch's default-device mode sent a plain tensor through the pipeline"
    assert all(o.data_ptr() == t.data_ptr() and o.device.type == "cpu" and o.tolist() == t.tolist() for o in outs)
    for modes in ((Seen(),), (torch.device("meta"), Seen())):
        Seen.calls = 0
        with counting_declines() as slow, contextlib.ExitStack() as stack:
            for mode in modes:
                stack.enter_context(mode)
            out = dlbridge.to_torch(t)
        assert slow["torch"] == 1 and Seen.calls > 0, (modes, slow, Seen.calls)
        assert out.data_ptr() == t.data_ptr() and out.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


# Plain conversions the route does not take yet (each takes the full pipeline every time: correct,
# not fast). Keyed by (source, target, ml_dtypes dtype). When one is fixed its test fails with
# "drop the _ROUTE_GAPS entry".
_ROUTE_GAPS: dict[tuple[str, str, bool], str] = {}  # (src, dst, bf16/fp8) the route always declines


def _route_stack_gap(src: str, dst: str) -> str | None:
    """Why the installed versions keep (src, dst) off the route (the adapters decline them on
    purpose), or None: the capability rows that make the pipeline necessary on older stacks."""
    if dst == "numpy" and caps_of("numpy").readonly_imports:
        return "NumPy < 2.2 imports read-only: the pipeline makes the result writable"
    if src == "jax" and (caps_of("jax").cannot_export or caps_of("jax").exports_uint8):
        return "this JAX's own export needs correcting (cannot_export / exports_uint8 rows)"
    return None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("src", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("dst", ["numpy", "torch", "jax"])
def test_route_equals_pipeline(src: str, dst: str, dtype: str) -> None:
    need(dst)
    x = _source(src, dtype)
    expected = outcome(lambda: pipeline(x, dst), x)
    with counting_declines() as slow:
        for i in range(3):  # the first call may decide (the pipeline); the others replay
            got = outcome(lambda: TO[dst](x, fallback="raise"), x)
            assert got == expected, (i, got[:3], expected[:3])
            assert outcome(lambda: TO[dst](x), x) == expected
    if expected[0] == "ok":
        stack_gap = _route_stack_gap(src, dst)
        if stack_gap:
            pytest.skip(f"values checked; the route is off on this stack: {stack_gap}")
        gap = _ROUTE_GAPS.get((src, dst, dtype in ("bfloat16", "float8_e4m3fn")))
        if gap and slow[dst] > 2:
            pytest.xfail(gap)
        assert not gap, f"the route now takes it; drop the _ROUTE_GAPS entry: {gap}"
        assert slow[dst] <= 2, f"the route declined a plain conversion ({slow[dst]} of 6 calls took the pipeline)"
        if expected[6]:
            r = TO[dst](x, fallback="raise")
            assert ptr(r) == ptr(x)


@pytest.mark.parametrize("case", ["transposed", "read-only"])
@pytest.mark.parametrize("src", ["numpy", "torch"])
def test_a_declined_export_is_handed_to_the_pipeline(monkeypatch: pytest.MonkeyPatch, src: str, case: str) -> None:
    """The route exports, finds a capsule it does not replay (strided; read-only for a consumer without
    read-only arrays) and hands that capsule to the pipeline, which reads it instead of exporting x
    again: one export per conversion (torch's through its exchange API, wrapped as a capsule)."""
    torch = need("torch")
    if case == "read-only" and src == "torch":
        pytest.skip("torch has no read-only tensors")
    if case == "read-only" and np.lib.NumpyVersion(np.__version__) < "2.1.0":
        pytest.skip(f"NumPy {np.__version__} refuses to export a read-only array: no capsule to hand over")
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    if src == "torch":
        x: Any = torch.from_numpy(base).t()
    elif case == "transposed":
        x = base.T
    else:
        x = base.copy()
        x.flags.writeable = False
    dst = "torch" if src == "numpy" else "numpy"
    gap = _route_stack_gap(src, dst)
    if gap:
        pytest.skip(f"the route is off on this stack: {gap}")
    TO[dst](np.ascontiguousarray(base) if src == "numpy" else torch.from_numpy(base.copy()))  # the route learns
    exports, handed = [], []
    real_export, real_convert = dlbridge._pipeline._stage._export, _route._convert
    monkeypatch.setattr(dlbridge._pipeline._stage, "_export", lambda *a: exports.append(1) or real_export(*a))

    def counted(x: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(args[5] if len(args) > 5 else None)
        return real_convert(x, target, *args, **kwargs)

    monkeypatch.setattr(_route, "_convert", counted)
    if case == "read-only":
        with pytest.raises(dlbridge.ReadOnlyError):  # the pipeline's refusal, decided on the handed capsule
            TO[dst](x)
    else:
        out = TO[dst](x)
        expected = np.asarray(x) if src == "numpy" else x.numpy()
        got = out.numpy() if dst == "torch" else out
        assert np.array_equal(got, expected) and got.dtype == expected.dtype and ptr(out) == ptr(x)
    assert len(handed) == 1 and handed[0] is not None, "the route did not hand its export over"
    assert exports == [], "the pipeline exported x a second time"


# --- x.set_(y) after an export -----------------------------------------------------------------


def test_numpy_keeps_the_storage_after_set_() -> None:
    torch = need("torch")
    for _ in range(3):  # the first conversion decides, the others replay
        t = torch.arange(1000, dtype=torch.float32, device="cpu")
        n = dlbridge.to_numpy(t, fallback="raise")
        assert n.ctypes.data == t.data_ptr()
        t.set_(torch.zeros(3, device="cpu"))
        gc.collect()
        torch.ones(1000, device="cpu").add_(1)  # reuse freed memory if any was freed
        np.testing.assert_array_equal(n, np.arange(1000, dtype=np.float32))


# --- references, leaks --------------------------------------------------------------------------


def _rss() -> int:
    psutil = pytest.importorskip("psutil")
    return int(psutil.Process().memory_info().rss)


def _kinds():
    torch = need("torch")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return {
        "numpy->torch": (lambda: np.ones(4096, np.float32), dlbridge.to_torch),
        "torch->numpy": (lambda: torch.ones(4096, device="cpu"), dlbridge.to_numpy),
        "numpy->numpy": (lambda: np.ones(4096, np.float32), dlbridge.to_numpy),
        "torch->torch": (lambda: torch.ones(4096, device="cpu"), dlbridge.to_torch),
        "bf16 torch->numpy": (lambda: torch.ones(4096, dtype=torch.bfloat16, device="cpu"), dlbridge.to_numpy),
        "bf16 numpy->torch": (lambda: np.ones(4096, ml_dtypes.bfloat16), dlbridge.to_torch),
    }


@pytest.mark.parametrize("kind", ["numpy->torch", "torch->numpy", "numpy->numpy", "torch->torch",
                                  "bf16 torch->numpy", "bf16 numpy->torch"])  # fmt: skip
def test_no_leak_over_ten_thousand_conversions(kind: str) -> None:
    make, to = _kinds()[kind]
    x = make()
    for _ in range(200):
        to(x, fallback="raise")
    gc.collect()
    before, refs = _rss(), sys.getrefcount(x)
    results = [None] * 100
    for i in range(10_000):
        results[i % 100] = to(x, fallback="raise")
        fresh = make()
        to(fresh)  # a new source each time: its memory (16 KiB) must be freed with it
    del results, fresh
    gc.collect()
    grown = _rss() - before
    assert sys.getrefcount(x) == refs, "the route kept a reference to its source"
    assert grown < 8 << 20, f"RSS grew {grown / 2**20:.1f} MiB over 10 000 conversions"
    ref = weakref.ref(x)
    out = to(x)
    del x, out
    assert ref() is None, "the source outlived itself and its results (no gc needed)"


# --- threads ------------------------------------------------------------------------------------


def test_threads_convert_concurrently() -> None:
    torch = need("torch")
    errors: list[BaseException] = []
    counts = [0] * 4

    def work(k: int) -> None:
        dtype = np_dtype("bfloat16") if k % 2 else np.dtype(np.float32)
        base = np.arange(64, dtype=np.float32).astype(dtype) + k
        deadline = time.monotonic() + 1.0
        try:
            while time.monotonic() < deadline:
                src = base.copy()
                t = dlbridge.to_torch(src, fallback="raise")
                assert t.data_ptr() == src.ctypes.data
                back = dlbridge.to_numpy(t)
                assert back.ctypes.data == src.ctypes.data and back.dtype == dtype
                np.testing.assert_array_equal(back.astype(np.float32), base.astype(np.float32))
                tt = torch.full((8,), float(k), device="cpu")
                assert dlbridge.to_numpy(tt)[0] == k
                counts[k] += 1
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    assert min(counts) > 0


# --- the capsule reader: compiled and Python agree ----------------------------------------------


def _capsules():
    """(name, capsule, read() raises CapsuleError) for the malformed cases of
    tests/test_robustness_capsules.py plus well-formed exports, legacy and versioned."""
    from tests._capsule_cases import MALFORMED
    from tests.ctypes_producer import CtypesArray, UsedBy

    keep = []
    for case, (overrides, _, inspect_error) in MALFORMED.items():
        for versioned in (False, True):
            p = CtypesArray.zeros(16, code=2, bits=32, shape=(4,)).with_(**overrides)
            capsule = p.__dlpack__(max_version=(1, 3)) if versioned else p.__dlpack__()
            if case == "used_name":
                keep.append(UsedBy(capsule))
            yield f"{case}/{'v' if versioned else 'legacy'}", capsule, inspect_error == "CapsuleError"
    for shape, strides in (((4,), None), ((2, 3), (3, 1)), ((), None), ((0, 3), (3, 1)), ((2, 2), (1, 2))):
        p = CtypesArray.zeros(64, code=2, bits=32, shape=shape).with_(strides=strides, byte_offset=4)
        yield f"ok{shape}", p.__dlpack__(max_version=(1, 3)), False
        yield f"ok{shape}/legacy", p.__dlpack__(), False
    yield "numpy", np.arange(6.0).reshape(2, 3).__dlpack__(), False  # legacy: NumPy < 2.1 has no max_version
    if hasattr(np, "from_dlpack") and np.lib.NumpyVersion(np.__version__) >= "2.1.0":
        # NumPy lays strides out right after shape (the Python reader reads both at once there)
        yield "numpy/v", np.arange(6.0).reshape(2, 3).__dlpack__(max_version=(1, 3)), False
        yield "numpy/v/strided", np.arange(12.0).reshape(3, 4)[:, ::2].__dlpack__(max_version=(1, 3)), False
    for user in keep:
        user.release()


def test_probe_compiled_and_python_agree() -> None:
    from dlbridge._capsule import _probe as _capsule_probe
    from dlbridge._capsule import _read as _capsule

    for case, capsule, malformed in _capsules():
        mine = _capsule_probe._probe_py(capsule)
        if COMPILED:
            assert _accelerator.accel.probe(capsule) == mine, case
        if malformed:
            with pytest.raises(dlbridge.CapsuleError):
                _capsule.read(capsule)
        elif mine is not None:
            info = _capsule.read(capsule)
            assert (info.ndim, info.shape) == (mine[7], mine[11]), case
        if case.startswith(("ok", "numpy")):
            assert mine is not None, case
        if case == "numpy/v/strided":
            assert (mine[11], mine[12]) == ((3, 2), (4, 2)), mine
    assert _capsule_probe._probe_py(object()) is None
    if COMPILED:
        assert _accelerator.accel.probe(object()) is None


# --- the public functions look like Python functions -------------------------------------------

_DESCRIBE = """
import inspect, json, pydoc, re, dlbridge
out = {}
for name in ("to_torch", "to_cupy", "to_jax", "to_numpy", "to_tensorflow", "to_paddle"):
    f = getattr(dlbridge, name)
    help_text = pydoc.render_doc(f, renderer=pydoc.plaintext)
    out[name] = [str(inspect.signature(f)), f.__doc__, f.__name__, f.__qualname__, f.__module__,
                 re.sub("0x[0-9a-f]+", "0x", repr(f)), help_text.split(chr(10), 2)[2]]
print(json.dumps(out))
"""


def _describe_here() -> dict:
    out = {}
    for name in ("to_torch", "to_cupy", "to_jax", "to_numpy", "to_tensorflow", "to_paddle"):
        f = getattr(dlbridge, name)
        help_text = pydoc.render_doc(f, renderer=pydoc.plaintext)
        out[name] = [str(inspect.signature(f)), f.__doc__, f.__name__, f.__qualname__, f.__module__,
                     re.sub("0x[0-9a-f]+", "0x", repr(f)), help_text.split("\n", 2)[2]]  # fmt: skip
    return out


@pytest.mark.skipif(not COMPILED, reason="the compiled module is not loaded (the Python functions are themselves)")
def test_route_objects_describe_themselves_like_the_functions() -> None:
    env = _pure_python_env()
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _DESCRIBE], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    functions = json.loads(proc.stdout)
    fields = ("signature", "__doc__", "__name__", "__qualname__", "__module__", "repr", "help()")
    for name, described in _describe_here().items():
        for field, got, want in zip(fields, described, functions[name]):
            assert got == want, f"{name} {field}: {got!r} != {want!r}"


def test_wrong_calls_raise_what_the_function_raises() -> None:
    x = np.zeros(3)
    calls = [
        lambda f: f(x, fallbak="view"),
        lambda f: f(x, "view"),
        lambda f: f(),
        lambda f: f(x=x),
        lambda f: f(x, x=x),
        lambda f: f(x, fallback="raise", dtype=None, device=None, copy=None, stream=None, extra=1),
    ]
    plain = dlbridge.to_numpy.__wrapped__ if COMPILED else dlbridge.to_numpy
    for call in calls:
        with pytest.raises(TypeError) as expected:
            call(plain)
        with pytest.raises(TypeError) as got:
            call(dlbridge.to_numpy)
        assert str(got.value) == str(expected.value)


_VECTORCALL = """
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
from dlbridge import _accel
R = _accel.Route
def to_x(x, /, *, fallback=None):
    return (x, fallback)
f = R([None], to_x)
offset = ctypes.c_ssize_t.from_address(id(R) + 56).value  # PyTypeObject.tp_vectorcall_offset (a GIL build)
slot = ctypes.c_void_p.from_address(id(f) + offset).value if offset > 0 else None
print(json.dumps({"python": sys.version.split()[0], "flag": bool(R.__flags__ & (1 << 11)), "offset": offset > 0,
                  "function": bool(slot), "call": f(1, fallback=2) == (1, 2),
                  "shown": hasattr(f, "__vectorcalloffset__") or "__vectorcalloffset__" in dir(f)}))
"""


def _interpreters() -> list[str]:
    """This Python and every other CPython 3.10+ found on PATH or in pyenv that runs (pyenv's shim fails for a
    version that is not the active one)."""
    import glob
    import shutil
    import subprocess

    found = [sys.executable]
    gil_build = "import sys; assert not hasattr(sys, '_is_gil_enabled') or sys._is_gil_enabled()"
    for minor in range(10, 15):
        if minor == sys.version_info[1]:
            continue
        pyenv = glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}*/bin/python3.{minor}"))
        for exe in filter(None, [shutil.which(f"python3.{minor}"), *pyenv]):
            try:
                runs = subprocess.run([exe, "-c", gil_build], capture_output=True, timeout=30).returncode == 0
            except subprocess.TimeoutExpired:  # (ended by run: an interpreter that hangs is not one to test)
                runs = False
            if runs:
                found.append(exe)
                break
    return found


@pytest.mark.skipif(not COMPILED, reason="the compiled module is not loaded (the Python functions are themselves)")
def test_a_route_takes_vector_calls_on_every_python(tmp_path: Path) -> None:
    """The Route type sets CPython's vectorcall flag and offset through the limited API's 3.12 spelling; the
    abi3 module built here is loaded by each interpreter found (3.10 on), which must read them."""
    import shutil
    import subprocess

    package = tmp_path / "dlbridge"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(_accelerator.accel.__file__, package)
    want = {"flag": True, "offset": True, "function": True, "call": True, "shown": False}
    seen = []
    for exe in _interpreters():
        proc = subprocess.run([exe, "-c", _VECTORCALL, str(tmp_path)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (exe, proc.stderr[-2000:])
        got = json.loads(proc.stdout)
        seen.append(got.pop("python"))
        assert got == want, (exe, seen[-1], got)
    print("vector calls on Python", ", ".join(seen))


def test_every_way_of_calling_replays_the_route() -> None:
    """A Route takes its arguments by vector call (the call site's own stack), and by tuple and dict where a
    caller has them so (``f.__call__``): every way of calling it, with each keyword the route reads,
    replays the stored route (the pipeline is not asked) and gives the same memory with the true dtype; and
    every keyword reaches the conversion."""
    import functools

    torch = need("torch")
    f = dlbridge.to_torch
    ways: dict[str, Any] = {
        "f(x, **kw)": lambda x, kw: f(x, **kw),
        "f(*args, **kw)": lambda x, kw: f(*[x], **kw),
        "f.__call__": lambda x, kw: f.__call__(x, **kw),
        "partial": lambda x, kw: functools.partial(f, **kw)(x),
        "map": lambda x, kw: next(map(functools.partial(f, **kw), [x])),
    }
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    keywords: list[dict[str, Any]] = [
        {},
        {"fallback": "raise"},
        {"readonly": "keep"},
        {"fallback": "view", "readonly": "drop", "dtype": None, "device": None, "copy": None, "stream": None},
    ]
    for kw in keywords:
        f(x, **kw)  # the route learns this (fallback, readonly)
        with counting_declines() as declined:
            for way, call in ways.items():
                out = call(x, kw)
                assert isinstance(out, torch.Tensor) and out.dtype == torch.float32, (way, kw)
                assert ptr(out) == ptr(x) and np.array_equal(out.numpy(), x), (way, kw)
        assert declined["torch"] == 0, f"{dict(declined)} calls took the pipeline with {kw}"
    for way, call in ways.items():  # a keyword the route does not replay reaches the pipeline (a relabel)
        out = call(x, {"dtype": "int32"})
        assert out.dtype == torch.int32 and np.array_equal(out.numpy(), x.view(np.int32)), way
        assert ptr(out) == ptr(x), way
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        return  # (older NumPy refuses to export a read-only array)
    frozen = x.copy()  # readonly= decides whether read-only memory may reach torch, which has no read-only tensors
    frozen.flags.writeable = False
    for _ in range(2):  # (learnt, then replayed)
        for way, call in ways.items():
            with pytest.raises(dlbridge.ReadOnlyError):
                call(frozen, {})
            out = call(frozen, {"readonly": "drop"})
            assert ptr(out) == ptr(frozen) and np.array_equal(out.numpy(), frozen), way


def test_fallback_none_is_not_given() -> None:
    torch = need("torch")
    with warnings.catch_warnings():  # "ComplexHalf support is experimental"
        warnings.simplefilter("ignore")
        x = torch.zeros(4, dtype=torch.complex32, device="cpu")
    for _ in range(2):
        assert outcome(lambda: dlbridge.to_numpy(x, fallback=None), x) == outcome(lambda: pipeline(x, "numpy"), x)
        r = dlbridge.to_numpy(np.arange(3), fallback=None)
        np.testing.assert_array_equal(r, np.arange(3))
    with pytest.raises(dlbridge.OptionError):
        dlbridge.to_numpy(np.arange(3), fallback="View")
    with pytest.raises(dlbridge.OptionError):
        dlbridge.to_numpy(np.arange(3), fallback=1)


# --- switched at run time: JAX's x64 flag, the fallback policy (fresh processes) -----------------

_X64 = """
import sys
sys.path.insert(0, {root!r})
import numpy as np, jax, jax.numpy as jnp, dlbridge
from tests._route_helpers import outcome, pipeline
x = np.arange(8, dtype=np.int64) * 3
outs = []
for on in (False, True, False, True):
    jax.config.update("jax_enable_x64", on)
    for _ in range(2):
        got, want = outcome(lambda: dlbridge.to_jax(x), x), outcome(lambda: pipeline(x, "jax"), x)
        assert got == want, (on, got[:3], want[:3])
        outs.append(got[0])
    j = jnp.arange(4) * 5
    for _ in range(2):
        got, want = outcome(lambda: dlbridge.to_numpy(j), j), outcome(lambda: pipeline(j, "numpy"), j)
        assert got == want, (on, got[:3], want[:3])
print("OK", outs)
"""


def test_jax_x64_switched_between_calls() -> None:
    need("jax")
    proc = run_child(_X64.format(root=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK ['error', 'error', 'ok', 'ok', 'error', 'error', 'ok', 'ok']" in proc.stdout, proc.stdout


_POLICY = """
import os, sys
os.environ.pop("DLBRIDGE_FALLBACK", None)
sys.path.insert(0, {root!r})
import numpy as np, torch, dlbridge
x = torch.zeros(4, dtype=torch.complex32, device="cpu")
def dtype():
    try:
        return str(dlbridge.to_numpy(x).dtype)
    except dlbridge.UnsupportedDtypeError:
        return "raise"
seen = [dtype(), dtype()]
dlbridge.set_default_fallback("view")
seen += [dtype(), dtype()]
dlbridge.set_default_fallback(None)
seen += [dtype(), dtype()]
with dlbridge.fallback_policy("view"):
    seen += [dtype(), dtype()]
seen += [dtype(), dtype()]
dlbridge.set_default_fallback("view")
seen += [dtype(), dtype()]
with dlbridge.fallback_policy("raise"):
    seen += [dtype(), dtype()]
seen += [dtype(), dtype()]
print("SEEN", " ".join(seen))
"""


def test_default_fallback_and_policy_blocks_switched_between_calls() -> None:
    need("torch")
    proc = run_child(_POLICY.format(root=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = ["raise"] * 2 + ["uint32"] * 2 + ["raise"] * 2 + ["uint32"] * 2 + ["raise"] * 2 + ["uint32"] * 2
    expected += ["raise"] * 2 + ["uint32"] * 2
    assert proc.stdout.split("SEEN ", 1)[-1].split() == expected, proc.stdout + proc.stderr[-2000:]


@pytest.mark.skipif(not COMPILED, reason="the compiled module's Routes (pure Python keeps a dict)")
def test_every_change_to_the_routes_reaches_the_next_conversion() -> None:
    """The compiled route keeps a small cache in front of a State's routes (``Routes``, routes.c): each way of
    changing the mapping empties it, so the next conversion replays what the mapping holds; the dict behind
    it cannot be changed past the cache."""
    pytest.importorskip("torch")
    x = aligned(np.arange(16, dtype=np.float32))
    for _ in range(3):
        dlbridge.to_torch(x)
    routes = _route.SPECS["torch"][0].routes
    assert type(routes) is _accelerator.accel.Routes
    key, replay = next((k, r) for k, r in routes.items() if r is not None and r.triple == 0x1_20_02)
    assert key in routes and routes[key] is replay and routes.get(key) is replay and key in list(routes)
    assert len(routes) == len(dict(routes.items())) == len(routes.keys()) == len(routes.values())

    def delete() -> None:
        del routes[key]
        routes.update({key: None})

    changes = {
        "setitem": lambda: routes.__setitem__(key, None),
        "update": lambda: routes.update({key: None}),
        "del, update": delete,
        "pop, setdefault": lambda: (routes.pop(key), routes.setdefault(key, None)),
        "popitem, update": lambda: (routes.popitem(), routes.update({key: None})),
        "clear, update": lambda: (routes.clear(), routes.update([(key, None)])),
    }
    for name, change in changes.items():
        routes[key] = replay
        with counting_declines() as slow:
            dlbridge.to_torch(x)  # replayed (and cached)
        assert slow["torch"] == 0, name
        change()
        with counting_declines() as slow:
            out = dlbridge.to_torch(x)
        assert slow["torch"] == 1, f"{name}: a changed route was replayed from the cache"
        assert out.data_ptr() == x.ctypes.data
    routes[key] = replay
    assert not hasattr(routes, "__ior__") and not hasattr(routes, "fromkeys")  # only the dict's reads are handed on
    with pytest.raises(TypeError):
        dict.__setitem__(routes, key, None)  # type: ignore[index]
    # No read hands out the dict behind the cache: its methods are the mapping's (a bound method of the dict would
    # give it as __self__), its views' .mapping is read-only, a copy is a copy.
    for read in (routes.get, routes.items, routes.keys, routes.values, routes.copy, routes.pop, routes.update):
        assert read.__self__ is routes, read
    for view in (routes.keys(), routes.items(), routes.values()):
        with pytest.raises(TypeError):
            view.mapping[key] = None
    copied = routes.copy()
    copied[key] = None
    assert routes[key] is replay and routes.get(key) is replay and routes.get(-1, "absent") == "absent"


@pytest.mark.skipif(not COMPILED, reason="the compiled module's Routes (pure Python keeps a dict)")
def test_every_change_to_the_producers_reaches_the_next_conversion() -> None:
    """The Producers are a ``Routes`` too where compiled, whose cache the route reads them through (by the
    type's address, the type held while cached): each way of changing the mapping empties it, so the next
    conversion reads what the mapping holds (here: a type without a Producer, which the pipeline converts)."""
    torch = pytest.importorskip("torch")
    from dlbridge._route import _learn

    producers = _learn.producers
    assert type(producers) is _accelerator.accel.Routes and _route.producers is producers
    x = aligned(np.arange(16, dtype=np.float32))
    for _ in range(3):
        dlbridge.to_torch(x)
    producer = producers[np.ndarray]

    def popitem() -> None:
        while producers.popitem()[0] is not np.ndarray:
            pass

    changes = {
        "setitem": lambda: producers.__setitem__(np.ndarray, None),
        "del": lambda: producers.__delitem__(np.ndarray),
        "pop": lambda: producers.pop(np.ndarray),
        "popitem": popitem,
        "clear": producers.clear,
        "update": lambda: producers.update({np.ndarray: None}),
    }
    for name, change in changes.items():
        held = dict(producers.items())
        with counting_declines() as slow:
            dlbridge.to_torch(x)  # replayed (its Producer cached)
        assert slow["torch"] == 0, name
        change()
        seen = _learn._seen.pop(np.ndarray, None)  # (else the pipeline, which learns again, would not ask)
        with counting_declines() as slow:
            out = dlbridge.to_torch(x)
            assert out.data_ptr() == x.ctypes.data and out.dtype == torch.float32
            assert out.tolist() == x.tolist()
        assert slow["torch"] == 1, f"{name}: a removed Producer was read from the cache"
        producers.clear()
        producers.update(held)
        if seen is not None:
            _learn._seen[np.ndarray] = seen
        assert producers[np.ndarray] is producer


@pytest.mark.skipif(not COMPILED, reason="the compiled module's Routes (pure Python keeps a dict)")
def test_a_producer_lookup_that_changes_the_producers_is_not_cached() -> None:
    """A type whose metaclass hashes in Python runs code inside the route's lookup of its Producer; where that
    code changes the Producers, what the lookup found is not cached (it may be stale): the next conversion
    looks it up again. Where it changes nothing, it is cached and looked up once."""
    torch = pytest.importorskip("torch")
    from dlbridge._route import _learn

    producers = _learn.producers
    dlbridge.to_torch(np.arange(4, dtype=np.float32))
    hashed: list[int] = []
    change = [True]

    class Meta(type):
        def __hash__(cls) -> int:
            hashed.append(1)
            if change[0]:
                producers.pop(Other, None)  # a change to the mapping, made while the route looks up
            return type.__hash__(cls)

    class Odd(np.ndarray, metaclass=Meta):
        pass

    class Other:
        pass

    producers[Odd] = producers[np.ndarray]
    try:
        x = aligned(np.arange(16, dtype=np.float32)).view(Odd)
        for changing in (True, False):
            change[0] = changing
            producers.pop(Other, None)  # (empties the cache)
            hashed.clear()
            with counting_declines() as slow:
                outs = [dlbridge.to_torch(x) for _ in range(3)]
            assert slow["torch"] == 0 and all(out.data_ptr() == x.ctypes.data for out in outs)
            assert all(out.dtype == torch.float32 and out.tolist() == x.tolist() for out in outs)
            assert len(hashed) == (3 if changing else 1), (changing, hashed)
    finally:
        producers.pop(Odd, None)


# --- the Python route's guards: one function per Producer ------------------------------------------------


def _guard_holds_by_definition(guards: tuple[tuple[Any, ...], ...], x: Any) -> bool:
    """The guards' meaning, written as a loop (``_route._guards``' docstring), to compare with ``holds``."""
    for guard in guards:
        value = getattr(x, guard[0]) if type(guard[0]) is str else guard[0]
        if guard[1]:
            value = value()
        if value is not guard[2] and (len(guard) < 4 or guard[3]() is not True):
            return False
    return True


def test_the_python_routes_guard_function_means_what_the_guards_say() -> None:
    """``_guards.holds`` makes one function of a Producer's guards: it answers as the guards' definition
    for attributes, methods, names that are not identifiers, process-wide functions and ``unless``,
    compares by identity (1 is not True), asks ``unless`` only where the answer differs, and is None for
    None and ``always`` for no guards."""
    from itertools import product

    from dlbridge._route._guards import always, holds

    class Obj:
        def __init__(self, flag: Any, method: Any) -> None:
            self.flag, self._method = flag, method
            setattr(self, "odd-name", flag)  # not an identifier: read with getattr

        def method(self) -> Any:
            return self._method

    asked: list[int] = []

    def unless(answer: Any) -> Any:
        return lambda: asked.append(1) or answer

    assert holds(None) is None and holds(()) is always and always(object()) is True
    sentinel = object()
    for flag, method, state, answer in product(
        [True, False, 1, None], [False, sentinel], [False, True], [True, 1, False]
    ):
        x = Obj(flag, method)
        for guards in (
            (("flag", False, True),),
            (("odd-name", False, True), ("method", True, sentinel)),
            (("flag", False, True), (lambda s=state: s, True, False, unless(answer))),
            (("method", True, False), ("flag", False, None)),
        ):
            asked.clear()
            expected = _guard_holds_by_definition(guards, x)
            n_asked = len(asked)
            asked.clear()
            assert holds(guards)(x) is expected, (guards, flag, method, state, answer)  # type: ignore[misc]
            assert len(asked) == n_asked  # unless() asked exactly where the definition asks it
    with pytest.raises(TypeError, match="a guard is"):
        holds((("flag", False),))
    with pytest.raises(AttributeError):  # a missing attribute raises as getattr does (the route declines)
        holds((("missing", False, True),))(Obj(True, False))  # type: ignore[misc]


def test_the_python_producer_carries_its_guard_functions() -> None:
    """The Python Producer makes its guard functions once, when it is made; they are not record fields (the
    compiled Producer has the same fields, and ``_learn.current`` compares fields only)."""
    from dlbridge._route._records import _PyProducer

    p = _PyProducer(guards=(("real", False, 3),), gpu_guards=None)
    assert p.holds(3) is True and p.holds(4) is False and p.gpu_holds is None
    assert "holds" not in _PyProducer._fields and "gpu_holds" not in _PyProducer._fields
    assert p == _PyProducer(guards=(("real", False, 3),), gpu_guards=None)
