"""``dlbridge.fallback_policy``: scoped per thread / task, nests, survives being closed from another
thread or task (a generator finished elsewhere), and refuses bad modes with an ``OptionError``."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

import dlbridge
from tests.conftest import need

np = need("numpy")


@pytest.fixture(autouse=True)
def _no_process_default():
    previous = dlbridge.set_default_fallback(None)
    yield
    dlbridge.set_default_fallback(previous)


def _policy_block_in_a_generator(mode: str):
    with dlbridge.fallback_policy(mode):  # type: ignore[arg-type]
        yield dlbridge.get_default_fallback()
        yield dlbridge.get_default_fallback()


def test_fallback_policy_nests_and_restores() -> None:
    assert dlbridge.get_default_fallback() == "raise"
    with dlbridge.fallback_policy("view"):
        assert dlbridge.get_default_fallback() == "view"
        with dlbridge.fallback_policy("upcast"):
            assert dlbridge.get_default_fallback() == "upcast"
        assert dlbridge.get_default_fallback() == "view"
    assert dlbridge.get_default_fallback() == "raise"


def test_one_fallback_policy_object_can_be_entered_twice_nested() -> None:
    policy = dlbridge.fallback_policy("view")
    with policy:
        with policy:
            assert dlbridge.get_default_fallback() == "view"
        assert dlbridge.get_default_fallback() == "view"
    assert dlbridge.get_default_fallback() == "raise"


def test_generator_policy_closed_from_another_thread_raises_nothing_and_restores_the_entering_thread() -> None:
    gen = _policy_block_in_a_generator("view")
    assert next(gen) == "view"
    assert dlbridge.get_default_fallback() == "view"  # the documented caveat: the block spans the yield
    errors: list[BaseException] = []
    seen_there = []

    def close_elsewhere() -> None:
        try:
            gen.close()
        except BaseException as err:  # a bare ValueError here was the old failure
            errors.append(err)
        seen_there.append(dlbridge.get_default_fallback())

    t = threading.Thread(target=close_elsewhere)
    t.start()
    t.join()
    assert errors == []
    assert seen_there == ["raise"]
    assert dlbridge.get_default_fallback() == "raise"  # not left changed for good
    # and the restored default is what conversions use: an fp8-free check with a plain array
    assert dlbridge.to_numpy(np.ones(2)).tolist() == [1.0, 1.0]


def test_generator_policy_closed_from_another_thread_keeps_an_outer_block_in_force() -> None:
    with dlbridge.fallback_policy("upcast"):
        gen = _policy_block_in_a_generator("view")
        next(gen)
        assert dlbridge.get_default_fallback() == "view"
        t = threading.Thread(target=gen.close)
        t.start()
        t.join()
        assert dlbridge.get_default_fallback() == "upcast"
        with dlbridge.fallback_policy("view"):  # a new block after the leaked one still nests normally
            assert dlbridge.get_default_fallback() == "view"
        assert dlbridge.get_default_fallback() == "upcast"
    assert dlbridge.get_default_fallback() == "raise"


def test_generator_policy_closed_from_another_async_task_restores_the_first_task() -> None:
    async def main() -> list[str]:
        gen = _policy_block_in_a_generator("view")
        seen = []

        async def first() -> None:
            next(gen)
            seen.append(dlbridge.get_default_fallback())
            await asyncio.sleep(0.01)
            seen.append(dlbridge.get_default_fallback())

        async def second() -> None:
            await asyncio.sleep(0)
            gen.close()

        await asyncio.gather(first(), second())
        return seen

    assert asyncio.run(main()) == ["view", "raise"]


def test_context_copied_inside_a_block_keeps_its_policy_after_the_block_ends() -> None:
    with dlbridge.fallback_policy("view"):
        ctx = contextvars.copy_context()
    assert dlbridge.get_default_fallback() == "raise"
    assert ctx.run(dlbridge.get_default_fallback) == "view"


@pytest.mark.parametrize("bad", ["veiw", 3, None])
def test_fallback_policy_bad_mode_is_an_option_error_naming_the_value(bad: object) -> None:
    with pytest.raises(
        dlbridge.OptionError, match=rf"^fallback={bad!r} is not a fallback; expected one of 'raise', 'view', 'upcast'"
    ):
        dlbridge.fallback_policy(bad)  # type: ignore[arg-type]


def test_fallback_policy_given_an_array_is_an_option_error_not_numpys_truth_value_error() -> None:
    with pytest.raises(dlbridge.OptionError, match=r"^fallback= received a numpy.ndarray, not a fallback name"):
        dlbridge.fallback_policy(np.array(["view", "raise"]))  # type: ignore[arg-type]


def test_to_numpy_fallback_given_an_array_is_an_option_error() -> None:
    with pytest.raises(dlbridge.OptionError, match=r"^fallback= received a numpy.ndarray"):
        dlbridge.to_numpy(np.ones(2), fallback=np.zeros(3))  # type: ignore[arg-type]


def test_set_default_fallback_given_an_array_is_an_option_error() -> None:
    with pytest.raises(dlbridge.OptionError, match=r"^fallback= received a numpy.ndarray"):
        dlbridge.set_default_fallback(np.zeros(3))  # type: ignore[arg-type]
