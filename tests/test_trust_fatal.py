"""MemoryError, KeyboardInterrupt and SystemExit reach the caller unchanged, from anywhere.

dlbridge turns a producer's or a consumer's *errors* into its own (naming the fix), and declines to
the pipeline on them; but running out of memory, Ctrl-C and an exit are not a producer's fault nor
a reason to try another way: they propagate as the very object raised. Injected at the consumer's
import, the producer's export, ``__dlpack_device__``, a guarded body and its conversions, and
``dlbridge.shards``, on both paths, cold (the pipeline) and warm (the fast route); and every
``except Exception`` in dlbridge is preceded by one that lets MemoryError through.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from dlbridge._route import _replay
from tests._arrays import jax_cpu
from tests._trust_helpers import ON_BOTH_PATHS, trust_path  # noqa: F401 (a fixture)
from tests.conftest import need
from tests.ctypes_producer import CtypesArray, Fields

FATAL = [MemoryError, KeyboardInterrupt, SystemExit]
WARMTH = ["cold", "warm"]


class Injector:
    """Raises its armed exception once, at the point it wraps (after letting ``after`` calls through)."""

    def __init__(self) -> None:
        self.armed: BaseException | None = None
        self.after = 0

    def arm(self, exc: type[BaseException], after: int = 0) -> BaseException:
        self.armed, self.after = exc("injected"), after
        return self.armed

    def fire(self) -> None:
        if self.armed is None:
            return
        if self.after:
            self.after -= 1
            return
        armed, self.armed = self.armed, None
        raise armed

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.fire()
            return fn(*args, **kwargs)

        return wrapped


def _fresh(name: str) -> None:
    """The fast route forgets what it learnt for target ``name``: the next conversion is cold."""
    _replay.SPECS[name][0] = _replay._state(ADAPTERS[name])


def _warm(convert: Callable[[], Any], name: str) -> None:
    convert(), convert()
    assert _replay.SPECS[name][0].ready, "the fast route did not learn the conversion"


@contextmanager
def _patched(obj: Any, attr: str, value: Any) -> Iterator[None]:
    old = obj.__dict__.get(attr, None)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        if old is None:
            delattr(obj, attr)
        else:
            setattr(obj, attr, old)


def _raises_unchanged(injected: BaseException, call: Callable[[], Any], inject: Injector | None = None) -> None:
    """``call()`` raises ``injected`` itself; with ``inject``, it may instead never reach the point
    injected at (the fast route asks a producer less), and then returns."""
    if inject is not None:
        try:
            call()
        except BaseException as err:
            assert err is injected, f"{injected!r} arrived as {err!r}"
        else:
            assert inject.armed is injected, "the injected exception was raised, and did not arrive"
            inject.armed = None
        return
    with pytest.raises(type(injected)) as caught:
        call()
    assert caught.value is injected, f"{injected!r} arrived as {caught.value!r}"


@ON_BOTH_PATHS
@pytest.mark.parametrize("warmth", WARMTH)
@pytest.mark.parametrize("exc", FATAL, ids=lambda e: e.__name__)
def test_at_the_consumers_import(exc: type[BaseException], warmth: str) -> None:
    torch = need("torch")
    numpy_caps = dlbridge.capabilities("numpy")
    if warmth == "warm" and numpy_caps.readonly_imports:  # _adapters/_fast.py FastRoute.fast_import
        pytest.skip(
            f"NumPy {numpy_caps.version} imports every capsule read-only (readonly_imports): the fast "
            "route leaves NumPy consumers to the pipeline, so there is no warm route to interrupt"
        )
    numpy = ADAPTERS["numpy"]
    numpy._from_dlpack  # noqa: B018  (the cached importer, wrapped below)
    inject = Injector()
    t = torch.arange(8, dtype=torch.float32, device="cpu")
    with _patched(numpy, "_from_dlpack", inject.wrap(numpy.__dict__["_from_dlpack"])):
        _fresh("numpy")  # the route's state takes the wrapped importer when it learns
        if warmth == "warm":
            _warm(lambda: dlbridge.to_numpy(t), "numpy")
        _raises_unchanged(inject.arm(exc), lambda: dlbridge.to_numpy(t))
        assert dlbridge.to_numpy(t).tolist() == list(range(8))
    _fresh("numpy")
    assert t.tolist() == list(range(8))


@ON_BOTH_PATHS
@pytest.mark.parametrize("warmth", WARMTH)
@pytest.mark.parametrize("exc", FATAL, ids=lambda e: e.__name__)
@pytest.mark.parametrize("method", ["__dlpack__", "__dlpack_device__"])
def test_at_a_known_producers_export(exc: type[BaseException], warmth: str, method: str) -> None:
    jnp = need("jax").numpy
    need("torch")
    x = jax_cpu(np.arange(8), jnp.float32)  # shared as torch reads it (readonly="drop": JAX arrays are immutable)
    cls = type(x)
    inject = Injector()
    with _patched(cls, method, inject.wrap(getattr(cls, method))):
        _fresh("torch")
        if warmth == "warm":
            _warm(lambda: dlbridge.to_torch(x, readonly="drop"), "torch")
            if method == "__dlpack_device__":  # the route exports a CPU array without asking it
                _raises_unchanged(inject.arm(exc), lambda: dlbridge.to_torch(x, readonly="drop"), inject)
        else:
            _raises_unchanged(inject.arm(exc), lambda: dlbridge.to_torch(x, readonly="drop"))
        if method == "__dlpack__" or warmth == "cold":
            _raises_unchanged(inject.arm(exc), lambda: dlbridge.to_torch(x, readonly="drop"))
        _raises_unchanged(inject.arm(exc), lambda: dlbridge.inspect(x))
        assert dlbridge.to_torch(x, readonly="drop").tolist() == list(range(8))


class _Flaky(CtypesArray):
    """A producer dlbridge has no adapter for, whose DLPack methods raise what it is armed with."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inject = Injector()

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        self.inject.fire()
        return super().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        self.inject.fire()
        return super().__dlpack_device__()


@ON_BOTH_PATHS
@pytest.mark.parametrize("exc", FATAL, ids=lambda e: e.__name__)
@pytest.mark.parametrize("after", [0, 1], ids=["dlpack_device", "dlpack"])  # __dlpack_device__ is asked first
def test_at_an_unknown_producers_export(exc: type[BaseException], after: int) -> None:
    arr = _Flaky(16, Fields(2, 32, 1, (4,), None))
    for target in ("numpy", "torch"):
        need(target)
        _raises_unchanged(arr.inject.arm(exc, after), lambda: dlbridge.convert(arr, target))  # noqa: B023
        assert dlbridge.convert(arr, target).tolist() == [0.0] * 4
    _raises_unchanged(arr.inject.arm(exc, after), lambda: dlbridge.inspect(arr))
    assert arr.balanced  # every capsule made was freed


@ON_BOTH_PATHS
@pytest.mark.parametrize("exc", FATAL, ids=lambda e: e.__name__)
@pytest.mark.parametrize("where", ["body", "argument", "result"])
def test_in_a_guard(exc: type[BaseException], where: str) -> None:
    need("torch")
    inject = Injector()
    flaky = _Flaky(16, Fields(2, 32, 1, (4,), None))

    @dlbridge.guard("torch", fallback="view")
    def body(x: Any) -> Any:
        inject.fire()
        return flaky if where == "result" else x * 2

    src = np.arange(4, dtype=np.float32)
    injected = {"body": inject, "argument": flaky.inject, "result": flaky.inject}[where].arm(exc)
    _raises_unchanged(injected, lambda: body(flaky if where == "argument" else src))
    out = body(src)  # and the guard goes on working
    assert np.array_equal(out, np.zeros(4) if where == "result" else src * 2) and isinstance(out, np.ndarray)


@ON_BOTH_PATHS
@pytest.mark.parametrize("exc", FATAL, ids=lambda e: e.__name__)
@pytest.mark.parametrize("attr", ["sharding", "addressable_shards"])
def test_in_shards(exc: type[BaseException], attr: str) -> None:
    jnp = need("jax").numpy
    x = jax_cpu(np.arange(8), jnp.float32)
    cls = type(x)
    inject = Injector()
    original = cls.__dict__[attr]
    with _patched(cls, attr, property(lambda self: (inject.fire(), original.__get__(self))[1])):
        _raises_unchanged(inject.arm(exc), lambda: dlbridge.shards(x, "numpy"))
        [(_index, part)] = dlbridge.shards(x, "numpy")
    assert part.tolist() == list(range(8))


# --- every handler in dlbridge ------------------------------------------------------------------------

_LIBRARY = Path(dlbridge.__file__).resolve().parent


def _names(node: ast.expr | None) -> set[str]:
    if node is None:
        return {"BaseException"}  # a bare except
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    return {node.id if isinstance(node, ast.Name) else getattr(node, "attr", "?")}


def test_no_handler_in_dlbridge_swallows_memoryerror_interrupts_or_exits() -> None:
    """``except Exception`` only after a handler that lets MemoryError through (``except MemoryError:
    raise``); ``except BaseException`` (or bare) only to clean up and re-raise (a bare ``raise`` in
    it), or to pass an exception thrown into a generator on to its body (said on the line). The report
    (``dlbridge/_report``, a diagnostic run in child processes) records what its probes raise."""
    found = []
    for path in sorted(_LIBRARY.rglob("*.py")):
        if "_report" in path.parts:
            continue
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.Try):
                continue
            earlier: set[str] = set()
            for handler in node.handlers:
                names = _names(handler.type)
                where = f"{path.relative_to(_LIBRARY.parent)}:{handler.lineno}"
                if "Exception" in names and "MemoryError" not in earlier:
                    found.append(f"{where}: except Exception with no except MemoryError before it")
                if "BaseException" in names:
                    body = [n for s in handler.body for n in ast.walk(s)]
                    reraises = any(isinstance(n, ast.Raise) and n.exc is None for n in body)
                    if not reraises and "passed on to the body" not in lines[handler.lineno - 1]:
                        found.append(f"{where}: except BaseException that neither re-raises nor passes it on")
                earlier |= names
    assert not found, "\n".join(found)
