"""``@dlbridge.guard`` with containers it cannot rebuild, and ``dlbridge.capabilities`` with a bad version.

The guard converts the arrays inside tuples, lists and dicts by rebuilding them. A container that
holds itself cannot be rebuilt, and one nested thousands deep would exhaust Python's recursion
limit: both are refused with ``NotAnArrayError`` (the value passed is not an array or a structure of
arrays the guard can walk; ``OptionError`` is for dlbridge's own options) naming where, before the
body runs, and ``args=`` / ``returns=None`` leave them alone. Up to 100 levels convert as before.
"""

from __future__ import annotations

import re
from collections import namedtuple
from typing import Any

import numpy as np
import pytest

import dlbridge
from tests.conftest import need


def _guarded() -> tuple[Any, list[int]]:
    torch = need("torch")
    ran: list[int] = []

    @dlbridge.guard("torch")
    def body(x: Any, extra: Any = None) -> Any:
        ran.append(1)
        return torch.as_tensor(1.0) if x is None else x

    return body, ran


def _nested(leaf: Any, depth: int) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def _cyclic_list(a: np.ndarray) -> list[Any]:
    loop: list[Any] = [a]
    loop.append(loop)
    return loop


def _cyclic_dict(a: np.ndarray) -> dict[str, Any]:
    loop: dict[str, Any] = {"a": a}
    loop["inner"] = {"back": loop}
    return loop


Pair = namedtuple("Pair", "first second")

CYCLES = {
    "list": (_cyclic_list, r"received a list that holds itself .* at x\[1\]"),
    "dict": (_cyclic_dict, r"received a dict that holds itself .* at x\['inner'\]\['back'\]"),
    "namedtuple": (lambda a: Pair(a, _cyclic_list(a)), r"received a list that holds itself .* at x\[1\]\[1\]"),
}


@pytest.mark.parametrize("kind", list(CYCLES))
def test_an_argument_that_holds_itself_is_refused_before_the_body_runs(kind: str) -> None:
    body, ran = _guarded()
    a = np.arange(4, dtype=np.float32)
    make, where = CYCLES[kind]
    with pytest.raises(dlbridge.NotAnArrayError, match=rf"body\(x=…\) under @dlbridge.guard\('torch'\): {where}; "
                       r"pass args= naming the parameters to convert, leaving x out"):  # fmt: skip
        body(make(a))
    assert not ran
    with pytest.raises(dlbridge.NotAnArrayError, match=r"body\(extra=…\) .* holds itself .* leaving extra out"):
        body(a, extra=make(a))  # by keyword, beside an array
    assert not ran


def test_args_leaves_a_self_holding_argument_alone() -> None:
    torch = need("torch")
    a = np.arange(4, dtype=np.float32)
    loop = _cyclic_dict(a)

    @dlbridge.guard("torch", args=["x"])
    def body(x: Any, config: Any) -> Any:
        assert config is loop and isinstance(x, torch.Tensor)
        return x

    out = body(a, loop)
    assert isinstance(out, np.ndarray) and out.ctypes.data == a.ctypes.data


@pytest.mark.parametrize("depth", [101, 1000, 5000])
def test_nesting_deeper_than_100_is_refused_before_the_body_runs(depth: int) -> None:
    body, ran = _guarded()
    with pytest.raises(dlbridge.NotAnArrayError, match=r"body\(x=…\) .* containers nested more than 100 levels deep "
                       r"\(the guard converts arrays at most 100 levels down\) at x\[0\]\[0\]\[…\]\[0\]"):  # fmt: skip
        body(_nested(np.zeros(2, np.float32), depth))
    assert not ran


def test_nesting_100_deep_still_converts() -> None:
    torch = need("torch")
    seen = []

    @dlbridge.guard("torch")
    def body(x: Any) -> Any:
        leaf = x
        while isinstance(leaf, list):
            leaf = leaf[0]
        seen.append(leaf)
        return x

    a = np.arange(3, dtype=np.float32)
    out = body(_nested(a, 100))
    assert isinstance(seen[0], torch.Tensor) and seen[0].data_ptr() == a.ctypes.data
    leaf = out
    for _ in range(100):
        leaf = leaf[0]
    assert leaf is a  # handed back: the caller's own array


@pytest.mark.parametrize("make", ["cycle", "deep"])
def test_a_result_it_cannot_rebuild_is_refused_and_returns_none_leaves_it(make: str) -> None:
    torch = need("torch")

    def body(x: Any) -> Any:
        return _cyclic_list(x) if make == "cycle" else _nested(x, 500)

    what = (
        r"a list that holds itself .* at result\[1\]"
        if make == "cycle"
        else r"containers nested more than 100 levels deep"
    )
    with pytest.raises(dlbridge.NotAnArrayError, match=rf"body\(\) returned {what}.*; pass returns=None"):
        dlbridge.guard("torch")(body)(np.zeros(2, np.float32))
    kept = dlbridge.guard("torch", returns=None)(body)(np.zeros(2, np.float32))
    assert isinstance(kept, list) and isinstance(kept[0] if make == "cycle" else _leaf(kept), torch.Tensor)


def _leaf(x: Any) -> Any:
    while isinstance(x, list):
        x = x[0]
    return x


def test_a_generator_yielding_a_self_holding_list_says_so() -> None:
    need("torch")

    @dlbridge.guard("torch")
    def gen(x: Any) -> Any:
        yield _cyclic_list(x)

    with pytest.raises(dlbridge.NotAnArrayError, match=r"gen\(\) returned a list that holds itself .* at yield\[1\]"):
        next(gen(np.zeros(2, np.float32)))


def test_a_shared_container_is_no_cycle() -> None:
    body, ran = _guarded()
    a = np.arange(2, dtype=np.float32)
    shared = [a]
    out = body([shared, shared, {"again": shared}])
    assert ran and out[0][0] is a and out[2]["again"][0] is a


@pytest.mark.parametrize(
    ("version", "what"),
    [
        (3, "an int"),
        (2.13, "a float"),
        (b"2.13", "a bytes"),
        ("", "not a version number"),
        ("latest", "not a version number"),
    ],
)
def test_capabilities_with_a_version_that_is_not_a_version_string(version: Any, what: str) -> None:
    with pytest.raises(dlbridge.OptionError, match=rf"dlbridge.capabilities\('torch', version={re.escape(repr(version))}\):"
                       rf" the version is {what}; pass it as a string, e.g. version=\"\d+(\.\d+)+\", or leave it out"):  # fmt: skip
        dlbridge.capabilities("torch", version=version)


def test_capabilities_by_alias_and_unknown_consumers() -> None:
    assert dlbridge.capabilities("pytorch", "2.13") == dlbridge.capabilities("torch", "2.13")
    with pytest.raises(
        dlbridge.OptionError, match=r"unknown target framework 'tensorflw'; expected one of: .*tensorflow"
    ):
        dlbridge.capabilities("tensorflw", "2.21")
