"""Re-entrancy: code that runs in the middle of a fast-route conversion and re-enters dlbridge.

A conversion calls back into Python at several points: torch's guards under a ``TorchFunctionMode``,
a producer's Python ``__dlpack__`` (JAX), the consumer's import (JAX), a capability row that varies at
run time (JAX's x64 flag), the fallback policy. Code running there can import modules and convert
other arrays, which makes dlbridge learn again: it rebinds the producer entries and the consumer specs
the route reads. Each test below does exactly that, at one point of the call, and then fills the
memory the old entries held with look-alike objects that lack the guards (so a stale pointer reads a
producer entry without them). The outer conversion must still give the right values: conjugated,
negated, refused while autograd is on. Each runs in a child pytest (``isolated``): a crash fails
one test. The last one does the same from a second thread, with no hooks at all.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge import _accelerator
from dlbridge._pipeline._handoff import Admission, Handoff
from dlbridge._route import _records as _route_records
from dlbridge._route import _replay as _route
from tests._arrays import jax_cpu
from tests.conftest import need

pytestmark = pytest.mark.isolated

_junk: list[Any] = []  # kept alive: look-alike entries that reuse freed memory
_count = [0]


def _relearn() -> None:
    """What code inside a conversion may do: import a module, then convert arrays of every type
    through the pipeline (each makes the route learn its producer again), and flip JAX's x64 flag
    (the consumer spec of JAX is prepared again twice). Then allocate look-alike tuples."""
    torch, jax = need("torch"), need("jax")
    _count[0] += 1
    name = f"_dlbridge_reentry_{_count[0]}"
    sys.modules[name] = types.ModuleType(name)
    t = torch.arange(4, dtype=torch.float32, device="cpu")
    n = np.arange(4, dtype=np.float32)
    j = jax_cpu(jax.numpy.arange(4, dtype=jax.numpy.float32))
    for x in (t, n, j):
        for to in ("numpy", "torch", "jax"):
            dlbridge.convert(x, to, copy=True)
    x64 = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", not x64)
    dlbridge.to_jax(n, copy=True)
    jax.config.update("jax_enable_x64", x64)
    dlbridge.to_jax(n, copy=True)
    # Freed records' memory is handed to the next objects of their size: look-alikes of the torch
    # Producer with its guards removed, and tuples of its fields of every size.
    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    _junk.extend(_route.Producer(kind=1, handle=api, guards=(), alias="data") for _ in range(64))
    for size in range(1, 9):
        _junk.extend((1, api, (), "data", None, None, None, None)[:size] for _ in range(64))
    _junk.extend(lambda x: x for _ in range(64))


@contextlib.contextmanager
def _reentering_at(names: set[str]) -> Iterator[list[str]]:
    """Re-enter dlbridge once at the first call of each Python function in ``names``, wherever it is
    called from (C included: a profile hook sees it). Yields the names it re-entered at."""
    hit: list[str] = []

    def hook(frame: types.FrameType, event: str, arg: Any) -> None:
        name = frame.f_code.co_name
        if event == "call" and name in names and name not in hit:
            hit.append(name)
            sys.setprofile(None)  # no re-entry inside the re-entry
            try:
                _relearn()
            finally:
                sys.setprofile(hook)

    sys.setprofile(hook)
    try:
        yield hit
    finally:
        sys.setprofile(None)


def _warm(call: Callable[[], Any]) -> None:
    for _ in range(3):
        call()


def _conj(torch: Any) -> Any:
    return (torch.arange(1, 7, dtype=torch.float32, device="cpu") * (1 + 2j)).to(torch.complex64).conj()


def _expected_conj() -> np.ndarray:
    return (np.arange(1, 7, dtype=np.float32) * (1 - 2j)).astype(np.complex64)


def _host(x: Any) -> np.ndarray:
    return np.asarray(x.resolve_conj().resolve_neg() if hasattr(x, "resolve_conj") else x)


# --- a TorchFunctionMode: every torch call the route makes (guards, detach) reaches Python ----------


def _mode(torch: Any, every: bool = False) -> Any:
    from torch.overrides import TorchFunctionMode

    class Reenter(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.calls += 1
            if every or self.calls == 1:
                _relearn()
            return func(*args, **(kwargs or {}))

    return Reenter()


@pytest.mark.parametrize("to", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("every", [False, True], ids=["first-call", "every-call"])
def test_torch_function_mode_reenters(to: str, every: bool) -> None:
    torch = need("torch")
    need("jax")
    convert = getattr(dlbridge, f"to_{to}")
    x = _conj(torch)
    _warm(lambda: convert(torch.arange(6, dtype=torch.float32, device="cpu").to(torch.complex64)))
    for _ in range(3):
        with _mode(torch, every) as mode:
            out = convert(x)
        assert mode.calls > 0  # the mode saw the conversion
        np.testing.assert_array_equal(_host(out), _expected_conj())


def test_torch_function_mode_keeps_the_negative_bit_and_autograd() -> None:
    torch = need("torch")
    neg = (torch.arange(1, 7, dtype=torch.float32, device="cpu") * (1 + 2j)).to(torch.complex64).conj().imag
    assert neg.is_neg()
    grad = torch.arange(4, dtype=torch.float32, device="cpu").requires_grad_()
    _warm(lambda: dlbridge.to_numpy(torch.arange(6, dtype=torch.float32, device="cpu")))
    with _mode(torch, every=True):
        out = dlbridge.to_numpy(neg)
        with pytest.raises(dlbridge.ProducerError, match="detach"):
            dlbridge.to_numpy(grad)
    np.testing.assert_array_equal(out, -np.arange(2, 14, 2, dtype=np.float32))


# --- Python functions the route calls: a profile hook re-enters there ---------------------------------

# JAX arrays export through a Python __dlpack__; JAX imports in Python; its capability row is read
# on every call (x64); fallback_policy makes the route ask get_default_fallback().
_POINTS = {"__dlpack__", "capabilities", "from_dlpack", "_from_dlpack", "get_default_fallback", "_decide_into", "slow"}


@pytest.mark.parametrize("source", ["torch", "jax", "numpy"])
@pytest.mark.parametrize("to", ["numpy", "torch", "jax"])
def test_python_callbacks_reenter(source: str, to: str) -> None:
    torch = need("torch")
    need("jax")
    convert = getattr(dlbridge, f"to_{to}")
    if source == "jax" and to == "torch":  # JAX arrays are read-only: shared as readonly="drop" asks
        convert = partial(convert, readonly="drop")
    values = np.arange(1, 7, dtype=np.float32)
    make = {
        "torch": lambda: torch.from_numpy(values.copy()),
        "jax": lambda: jax_cpu(values),
        "numpy": lambda: values.copy(),
    }[source]
    _warm(lambda: convert(make()))
    with dlbridge.fallback_policy("raise"):  # the route now asks the policy (a Python call)
        for _ in range(3):
            x = make()
            with _reentering_at(_POINTS) as hit:
                out = convert(x)
            np.testing.assert_array_equal(_host(out), values)
            if source == "torch" and to != "numpy":
                c = _conj(torch)
                with _reentering_at(_POINTS):
                    np.testing.assert_array_equal(_host(convert(c)), _expected_conj())
    assert hit, "no Python callback was reached: the test re-entered nowhere"


def test_a_decision_made_while_reentered() -> None:
    """The first call of a (consumer, dtype) pair asks _decide_into() (Python) in the middle of the call."""
    torch = need("torch")
    need("jax")
    _warm(lambda: dlbridge.to_jax(torch.arange(3, dtype=torch.float32, device="cpu")))
    with _reentering_at({"_decide_into"}) as hit:
        out = dlbridge.to_jax(torch.arange(3, dtype=torch.int16, device="cpu"))
    assert hit == ["_decide_into"]
    np.testing.assert_array_equal(np.asarray(out), np.arange(3, dtype=np.int16))


# --- threads: one converts in a loop, another makes dlbridge learn again ---------------------------


@pytest.mark.parametrize("to", ["jax", "numpy"])
def test_threads_relearning_while_converting(to: str) -> None:
    torch = need("torch")
    need("jax")
    convert = getattr(dlbridge, f"to_{to}")
    x = _conj(torch)
    plain = torch.arange(6, dtype=torch.float32, device="cpu").to(torch.complex64)
    _warm(lambda: convert(plain))
    stop = threading.Event()
    errors: list[BaseException] = []

    def relearn() -> None:
        try:
            while not stop.is_set():
                _relearn()
                del _junk[:]
        except BaseException as err:  # reported below
            errors.append(err)

    other = threading.Thread(target=relearn)
    other.start()
    calls, deadline = 0, time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            np.testing.assert_array_equal(_host(convert(x)), _expected_conj())
            np.testing.assert_array_equal(_host(convert(plain)), np.arange(6, dtype=np.complex64))
            calls += 1
    finally:
        stop.set()
        other.join()
    assert not errors, errors
    assert calls > 10


def test_the_route_is_in_use() -> None:
    """The tests above exercise the route, not only the pipeline: warm conversions replay."""
    torch = need("torch")
    from tests._route_helpers import counting_declines

    t = torch.arange(6, dtype=torch.float32, device="cpu")
    dlbridge.to_torch(t)
    with counting_declines() as counts:
        for _ in range(5):
            dlbridge.to_jax(t)
            dlbridge.to_torch(t)
    assert counts["torch"] == 0, counts
    assert counts["jax"] <= 1, counts  # at most the first to_jax: the pipeline, then replays
    assert _route.SPECS["torch"][0].ready


# --- errors raised in the middle of a conversion: only Exceptions send it to the pipeline -----------


class _Raise:
    """Raise ``err`` at the first call of a Python function in ``names``: a function's name, or its code object
    where the name alone is too common (JAX's x64 switch is a ``<lambda>``, and any lambda a garbage
    collection runs in a finalizer, whose errors Python prints and drops, would take the one raise)."""

    def __init__(self, names: set[str | types.CodeType], err: BaseException) -> None:
        self.names, self.err, self.raised = names, err, 0

    def __enter__(self) -> _Raise:
        def hook(frame: types.FrameType, event: str, arg: Any) -> None:
            code = frame.f_code
            if event == "call" and (code in self.names or code.co_name in self.names) and not self.raised:
                self.raised += 1
                sys.setprofile(None)
                raise self.err

        sys.setprofile(hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(None)


_ESCAPING = [KeyboardInterrupt("^C"), SystemExit(3), MemoryError("out of memory"), GeneratorExit()]


def _switch_functions(jax: Any) -> set[str | types.CodeType]:
    """The first Python function reading JAX's x64 switch runs, as its code object (the route's capability
    check reads the switch on every call: JaxAdapter.caps_switch); skips where it runs none on this JAX
    (nothing to interrupt)."""
    names: list[types.CodeType] = []
    obj, attribute = dlbridge._adapters.ADAPTERS["jax"].caps_switch()
    sys.setprofile(lambda frame, event, arg: names.append(frame.f_code) if event == "call" else None)
    try:
        getattr(obj, attribute)
    finally:
        sys.setprofile(None)
    if not names:
        pytest.skip(f"JAX {jax.__version__} reads its x64 switch without Python code: nothing to interrupt there")
    return {names[0]}


@pytest.mark.parametrize("err", _ESCAPING, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("where", ["import", "export", "capabilities"])
def test_interrupts_in_the_middle_propagate(where: str, err: BaseException) -> None:
    """Ctrl-C in the consumer's import (JAX's from_dlpack, Python), in a producer's Python __dlpack__
    (JAX) or in a capability check propagates: never cleared and retried by the pipeline."""
    torch, jax = need("torch"), need("jax")
    source, to, names = {
        "import": (
            lambda: torch.arange(4, dtype=torch.float32, device="cpu"),
            dlbridge.to_jax,
            {"from_dlpack", "_from_dlpack"},
        ),
        "export": (lambda: jax_cpu(jax.numpy.arange(4, dtype=jax.numpy.float32)), dlbridge.to_numpy, {"__dlpack__"}),
        "capabilities": (
            lambda: torch.arange(4, dtype=torch.float32, device="cpu"),
            dlbridge.to_jax,
            _switch_functions(jax),
        ),
    }[where]
    x = source()
    _warm(lambda: to(x))
    for _ in range(20):  # every time, not most of the time
        with _Raise(names, err) as raising, pytest.raises(type(err)):
            to(x)
        assert raising.raised == 1


@pytest.mark.parametrize("err", _ESCAPING[:3], ids=lambda e: type(e).__name__)
def test_interrupts_in_a_torch_guard_propagate(err: BaseException) -> None:
    torch = need("torch")
    from torch.overrides import TorchFunctionMode

    class Interrupt(TorchFunctionMode):  # once, like a signal: a retry would not meet it again
        raised = 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if not self.raised:
                self.raised += 1
                raise err
            return func(*args, **(kwargs or {}))

    t = torch.arange(4, dtype=torch.float32, device="cpu")
    _warm(lambda: dlbridge.to_numpy(t))
    for _ in range(20):
        with Interrupt() as mode, pytest.raises(type(err)):
            dlbridge.to_numpy(t)
        assert mode.raised == 1


def test_an_ordinary_error_in_the_middle_goes_to_the_pipeline() -> None:
    """The other side of the rule: an Exception the route meets is the pipeline's to explain (here the
    pipeline's own import succeeds, so the caller gets the result)."""
    torch = need("torch")
    need("jax")
    t = torch.arange(4, dtype=torch.float32, device="cpu")
    _warm(lambda: dlbridge.to_jax(t))
    with _Raise({"from_dlpack", "_from_dlpack"}, RuntimeError("transient")) as raising:
        out = dlbridge.to_jax(t)
    assert raising.raised == 1
    np.testing.assert_array_equal(np.asarray(out), np.arange(4, dtype=np.float32))


# --- the records both routes read -------------------------------------------------------------------


def _records() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Each record type with one set of fields (all of them, none the default)."""
    state = {
        "target": "numpy", "ready": True, "kind": 1, "importer": len, "api": "api", "versioned": True, "routes": {},
        "caps_guard": (int, "real", True), "caps": "caps", "decide": len, "self_type": int, "self_import": str, "self_dtypes": [],
        "stream_query": (abs, "real"), "deferred": True,
    }  # fmt: skip
    producer = {"kind": 2, "handle": len, "guards": (("is_cpu", False, True),), "alias": "data", "keep": "untyped_storage",
                "relabels": {1: 2}, "gpu_guards": (("is_cuda", False, True),), "device_method": "get_device", "device_type": 2, "gpu_kind": 1,
                "current_device": abs, "readonly": True}  # fmt: skip
    unaligned = _route._PyReplay if _accelerator.accel is None else _accelerator.accel.Replay
    replay = {"record": _record(), "finish": abs, "importer": len,
              "unaligned": unaligned(record=_record(_ADMITS._replace(misaligned=True)))}  # fmt: skip
    return {"State": (_route._PyState, state), "Producer": (_route._PyProducer, producer),
            "Replay": (_route._PyReplay, replay)}  # fmt: skip


_ADMITS = Admission(wire=0x1_10_02, triple=0x1_10_04, device_type=2, device_id=3, kinds=3, readonly_ok=True,
                    offset_ok=False, align=64, clear_readonly=True, misaligned=False)  # fmt: skip


def _record(admits: Any = _ADMITS) -> Handoff:
    return Handoff("numpy", "torch", admits=admits)


def _fields_of(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """Every field of a record made from ``values``: a Replay's admission fields come from its record."""
    return {**values, **values["record"].admits._asdict()} if name == "Replay" else values


def test_the_compiled_records_have_the_python_records_fields() -> None:
    accel = _accelerator.accel
    for name, (py, values) in _records().items():
        assert py._fields == tuple(_fields_of(name, values)), name  # every field, in order
        assert getattr(_route, name) is (py if accel is None else getattr(accel, name))
        if accel is None:
            continue
        c = getattr(accel, name)
        assert c._fields == py._fields, name
        made_c, made_py = c(**values), py(**values)
        for field in c._fields:  # the same values read back by name
            assert getattr(made_c, field) == getattr(made_py, field) == _fields_of(name, values)[field], (name, field)
        with pytest.raises(AttributeError):
            setattr(made_c, c._fields[0], None)  # read-only, as the frozen Python records
        with pytest.raises(TypeError):
            c(*values.values())  # keyword-only


def test_the_kind_numbers_match_the_c_header() -> None:
    import re
    from pathlib import Path

    # The package's own copy (the checkout's, or the installed one: the wheel ships _csrc/ too).
    header = (Path(dlbridge.__file__).parent / "_csrc" / "accel.h").read_text()
    enums = [e for e in re.findall(r"enum \{([^}]*)\}", header) if re.search(r"\b(IMPORT|EXPORT)_", e)]
    assert len(enums) == 2, enums
    for entry in (e.strip() for enum in enums for e in enum.split(",")):
        name, _, value = (part.strip() for part in entry.partition("="))
        assert getattr(_route_records, name) == int(value), name


def test_records_the_compiled_route_cannot_read_are_refused_or_declined() -> None:
    """A spec not holding a compiled State raises a TypeError; a Producer or Replay of another type
    is declined (the pipeline converts x); a record made with fields the C code would misread raises."""
    accel = _accelerator.accel
    if accel is None:
        pytest.skip("the compiled route is not built")
    need("torch")
    from dlbridge._options import NOT_GIVEN

    x = np.arange(6, dtype=np.float32)
    numpy_state = _route.SPECS["numpy"][0]
    for spec in ([("a", "tuple")], [_route._PyState(target=numpy_state.target)], [], [numpy_state, 1], "spec"):
        with pytest.raises(TypeError, match=r"one-item list holding a dlbridge\._accel\.State"):
            accel.convert(spec, x, NOT_GIVEN, None, None, None, None)
    for _ in range(2):  # learned: the numpy Producer and torch's State; then replayed: its float32 Replay stored
        dlbridge.to_torch(x)
    torch_state, producer = _route.SPECS["torch"][0], _route._producers[np.ndarray]
    assert isinstance(producer, accel.Producer) and torch_state.ready and torch_state.routes
    for key, replay in list(torch_state.routes.items()):
        assert replay is None or (isinstance(replay, accel.Replay) and replay.record.plan is not None)
        torch_state.routes[key] = (replay.wire, replay.finish) if replay else None  # a tuple: declined
    _route._producers[np.ndarray] = tuple(getattr(producer, f) for f in producer._fields)
    out = accel.convert(_route.SPECS["torch"], x, NOT_GIVEN, None, None, None, None)
    np.testing.assert_array_equal(out.numpy(), x)
    assert out.data_ptr() == x.ctypes.data
    for bad in ({"ready": True}, {"ready": True, "routes": {}, "self_dtypes": (), "importer": len, "decide": len},
                {"align": 64}, {"caps_guard": (int, "real")}, {"caps_guard": (int, 1, True)}):  # fmt: skip
        with pytest.raises(TypeError):
            accel.State(target=None, **bad)
    for bad_producer in ({"guards": [("is_cpu", False, True)]}, {"alias": 1}, {"relabels": [1]}, {"kind": "1"},
                         {"gpu_guards": ()}, {"gpu_guards": [], "device_method": "x"}, {"current_device": 1}):  # fmt: skip
        with pytest.raises(TypeError):
            accel.Producer(**bad_producer)
    bad_admits = [
        _ADMITS._replace(**{f: v})
        for f, v in (
            ("wire", -1),
            ("wire", 1 << 32),
            ("align", 0),
            ("kinds", 0),
            ("device_id", 1 << 15),
            ("triple", "x"),
            ("clear_readonly", 2),
            ("misaligned", -1),
        )
    ]
    for bad_replay in ({"record": _record(None)}, {"record": "record"}, {"record": _record(), "finish": 1}, {},
                       {"record": _record(), "importer": 1}, {"record": _record(), "unaligned": _record()},
                       *({"record": _record(a)} for a in bad_admits)):  # fmt: skip
        with pytest.raises((TypeError, OverflowError, AttributeError)):
            accel.Replay(**bad_replay)
