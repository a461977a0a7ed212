"""Checked by ``mypy --strict`` in tests/test_guard_typing.py, never imported: how ``@dlbridge.guard`` is typed.

No framework appears: two plain classes stand for "the body's framework" and "another one"."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Coroutine, Generator
from typing import Any

from typing_extensions import assert_type

import dlbridge


class BodyArray:
    pass


class CallerArray:
    pass


@dlbridge.guard("numpy")
def plain(x: BodyArray, *, scale: float = 1.0) -> BodyArray:
    return x


# A caller's array of another framework is accepted, and the result is not claimed to be a BodyArray.
assert_type(plain(CallerArray(), scale=2.0), Any)


@dlbridge.guard("numpy")
async def coro(x: BodyArray) -> BodyArray:
    return x


assert_type(coro, Callable[..., Coroutine[Any, Any, Any]])


async def awaits() -> None:
    assert_type(await coro(CallerArray()), Any)


@dlbridge.guard("numpy")
def gen(x: BodyArray) -> Generator[BodyArray, None, None]:
    yield x


assert_type(gen(CallerArray()), Generator[Any, Any, Any])


@dlbridge.guard("numpy")
async def agen(x: BodyArray) -> AsyncGenerator[BodyArray, None]:
    yield x


assert_type(agen(CallerArray()), AsyncGenerator[Any, Any])


@dlbridge.guard("numpy", returns=None)
def kept(x: BodyArray) -> BodyArray:
    return x


# returns=None leaves results as the body made them: the return type stays.
assert_type(kept(CallerArray()), BodyArray)


class Model:
    @dlbridge.guard("numpy")
    def forward(self, x: BodyArray) -> BodyArray:
        return x

    @dlbridge.guard("numpy")
    @staticmethod
    def static(x: BodyArray) -> BodyArray:
        return x

    @dlbridge.guard("numpy")
    @classmethod
    def klass(cls, x: BodyArray) -> BodyArray:
        return x


assert_type(Model().forward(CallerArray()), Any)
assert_type(Model.static(CallerArray()), Any)
assert_type(Model.klass(CallerArray()), Any)

dlbridge.guard("numpy", fallback="view", copy=None, args=("x",))
dlbridge.guard("numpy", returns="torch")
