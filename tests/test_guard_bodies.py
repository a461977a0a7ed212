"""@dlbridge.guard and what bodies do: change an argument's metadata in place and return it, run as
``async def``, yield (generators and async generators). Real torch and NumPy; values, shape, dtype
and data pointers checked."""

from __future__ import annotations

import asyncio

import pytest

import dlbridge
from tests._arrays import set_in_place
from tests._guard_helpers import fp4, np, ptr, torch

# --- in-place metadata changes: the result is what the body returned ------------------------------


def _transpose_(x):
    return x.t_()


def _unsqueeze_(x):
    return x.unsqueeze_(0)


def _reshape_in_place(x):
    return set_in_place(x, shape=(3, 2))


def _redtype_in_place(x):
    return set_in_place(x, dtype=np.int32)


def test_torch_body_t_in_place_returns_the_transposed_array_not_the_callers_original() -> None:
    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = dlbridge.guard("torch")(_transpose_)(src)
    assert isinstance(out, np.ndarray) and out is not src
    assert out.shape == (3, 2) and out.dtype == np.float32
    assert out.tolist() == src.T.tolist()
    assert ptr(out) == ptr(src)  # still zero-copy
    assert src.shape == (2, 3)  # the caller's own array keeps its metadata


def test_torch_body_unsqueeze_in_place_returns_the_new_shape() -> None:
    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = dlbridge.guard("torch")(_unsqueeze_)(src)
    assert isinstance(out, np.ndarray) and out.shape == (1, 2, 3) and out.dtype == np.float32
    assert out[0].tolist() == src.tolist()
    assert ptr(out) == ptr(src)


def test_numpy_body_setting_shape_returns_the_reshaped_tensor() -> None:
    src = torch.arange(6, dtype=torch.float32, device="cpu").reshape(2, 3)
    out = dlbridge.guard("numpy")(_reshape_in_place)(src)
    assert isinstance(out, torch.Tensor) and out is not src
    assert tuple(out.shape) == (3, 2) and out.dtype == torch.float32
    assert out.flatten().tolist() == src.flatten().tolist()
    assert ptr(out) == ptr(src)
    assert tuple(src.shape) == (2, 3)


def test_numpy_body_setting_dtype_returns_the_reinterpreted_tensor() -> None:
    src = torch.tensor([1.0, -2.0, 3.5], dtype=torch.float32, device="cpu")
    out = dlbridge.guard("numpy")(_redtype_in_place)(src)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.int32 and tuple(out.shape) == (3,)
    assert out.tolist() == src.view(torch.int32).tolist()  # the same bits, read as int32
    assert ptr(out) == ptr(src)
    assert src.dtype == torch.float32


def test_torch_body_returning_its_unchanged_argument_gives_back_the_callers_own_object() -> None:
    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert dlbridge.guard("torch")(lambda x: x)(src) is src


def test_torch_body_t_in_place_on_a_square_matrix_is_seen_by_its_strides() -> None:
    # t_() on a square matrix keeps the shape: only the strides tell the change apart.
    src = np.arange(9, dtype=np.float32).reshape(3, 3)
    out = dlbridge.guard("torch")(_transpose_)(src)
    assert out is not src and out.shape == (3, 3) and out.tolist() == src.T.tolist()
    assert ptr(out) == ptr(src)


def test_torch_body_in_place_change_on_a_native_argument_is_the_callers_tensor() -> None:
    # A torch argument is passed as it is: the body's in-place change is on the caller's tensor.
    src = torch.arange(6, dtype=torch.float32, device="cpu").reshape(2, 3)
    out = dlbridge.guard("torch")(_transpose_)(src)
    assert out is src and tuple(out.shape) == (3, 2)


def test_numpy_body_reshaping_a_view_in_place_returns_the_logical_dtype_in_the_new_shape() -> None:
    src = fp4()  # torch float4_e2m1fn_x2: NumPy gets a uint8 view
    out = dlbridge.guard("numpy", fallback="view")(_reshape_flat_in_place)(src)
    assert isinstance(out, torch.Tensor) and out.dtype == src.dtype and tuple(out.shape) == (1, 4)
    assert out.view(torch.uint8).flatten().tolist() == src.view(torch.uint8).tolist()
    assert ptr(out) == ptr(src)


def _reshape_flat_in_place(x):
    return set_in_place(x, shape=(1, 4))


# --- async def bodies ------------------------------------------------------------------------------


def test_async_body_result_goes_back_to_the_callers_framework() -> None:
    @dlbridge.guard("numpy")
    async def double(x):
        assert isinstance(x, np.ndarray)
        await asyncio.sleep(0)
        return x * 2

    src = torch.tensor([1.0, 2.0, 3.0], device="cpu")
    out = asyncio.run(double(src))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.tolist() == [2.0, 4.0, 6.0]


def test_async_body_returning_its_argument_gives_back_the_callers_object() -> None:
    @dlbridge.guard("numpy")
    async def same(x):
        return x

    src = torch.tensor([1.0, 2.0], device="cpu")
    assert asyncio.run(same(src)) is src


def test_async_guard_is_still_a_coroutine_function() -> None:
    @dlbridge.guard("numpy")
    async def body(x):
        return x

    assert asyncio.iscoroutinefunction(body)


def test_async_body_exception_carries_the_view_note() -> None:
    @dlbridge.guard("numpy", fallback="view")
    async def body(x):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom") as info:
        asyncio.run(body(fp4()))
    notes = getattr(info.value, "__notes__", [])
    assert any("body() received x as a uint8 view of float4_e2m1fn_x2" in n for n in notes), notes


# --- generators ------------------------------------------------------------------------------------


def test_generator_yields_and_return_value_go_back_to_the_callers_framework() -> None:
    @dlbridge.guard("numpy")
    def chunks(x):
        assert isinstance(x, np.ndarray)
        yield x[:2]
        yield x[2:]
        return x[::-1]

    src = torch.arange(4, dtype=torch.float32, device="cpu")
    gen = chunks(src)
    first, second = next(gen), next(gen)
    assert isinstance(first, torch.Tensor) and first.tolist() == [0.0, 1.0] and ptr(first) == ptr(src)
    assert isinstance(second, torch.Tensor) and second.tolist() == [2.0, 3.0]
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert isinstance(stop.value.value, torch.Tensor) and stop.value.value.tolist() == [3.0, 2.0, 1.0, 0.0]


def test_generator_send_values_are_converted_like_arguments() -> None:
    seen = []

    @dlbridge.guard("numpy")
    def accumulate(x):
        total = x
        while True:
            more = yield total
            seen.append(type(more))
            total = total + more

    gen = accumulate(torch.ones(2, device="cpu"))
    assert next(gen).tolist() == [1.0, 1.0]
    out = gen.send(torch.full((2,), 2.0, device="cpu"))
    assert seen == [np.ndarray]
    assert isinstance(out, torch.Tensor) and out.tolist() == [3.0, 3.0]
    gen.close()


def test_generator_throw_and_close_reach_the_body() -> None:
    events = []

    @dlbridge.guard("numpy")
    def body(x):
        try:
            while True:
                try:
                    yield x
                except KeyError:
                    events.append("caught")
        finally:
            events.append("closed")

    gen = body(torch.ones(1, device="cpu"))
    next(gen)
    assert isinstance(gen.throw(KeyError("k")), torch.Tensor)
    gen.close()
    assert events == ["caught", "closed"]


def test_generator_throw_not_caught_by_the_body_propagates() -> None:
    @dlbridge.guard("numpy")
    def body(x):
        yield x

    gen = body(torch.ones(1, device="cpu"))
    next(gen)
    with pytest.raises(KeyError):
        gen.throw(KeyError("k"))


def test_generator_guard_is_still_a_generator_function() -> None:
    import inspect

    @dlbridge.guard("numpy")
    def body(x):
        yield x

    assert inspect.isgeneratorfunction(body)


def test_async_generator_yields_go_back_to_the_callers_framework() -> None:
    @dlbridge.guard("numpy")
    async def halves(x):
        assert isinstance(x, np.ndarray)
        more = yield x[:1]
        yield x[1:] + more

    async def drive():
        gen = halves(torch.tensor([1.0, 2.0], device="cpu"))
        first = await gen.__anext__()
        second = await gen.asend(torch.tensor([10.0], device="cpu"))
        with pytest.raises(StopAsyncIteration):
            await gen.__anext__()
        return first, second

    first, second = asyncio.run(drive())
    assert isinstance(first, torch.Tensor) and first.tolist() == [1.0]
    assert isinstance(second, torch.Tensor) and second.tolist() == [12.0]


# --- plain functions that return a generator or a coroutine ------------------------------------------


def test_plain_function_returning_a_generator_expression_has_its_yields_converted() -> None:
    @dlbridge.guard("numpy")
    def rows(x):
        assert isinstance(x, np.ndarray)
        return (row for row in x)

    src = torch.arange(4, dtype=torch.float32, device="cpu").reshape(2, 2)
    out = list(rows(src))
    assert all(isinstance(r, torch.Tensor) for r in out)
    assert [r.tolist() for r in out] == [[0.0, 1.0], [2.0, 3.0]]
    assert ptr(out[1]) == ptr(src) + 2 * 4  # each row a zero-copy view of the caller's tensor


def test_object_with_an_async_call_has_its_awaited_result_converted() -> None:
    class Doubler:
        async def __call__(self, x):
            assert isinstance(x, np.ndarray)
            return x * 2

    guarded = dlbridge.guard("numpy")(Doubler())
    out = asyncio.run(guarded(torch.tensor([1.0, 2.0], device="cpu")))
    assert isinstance(out, torch.Tensor) and out.tolist() == [2.0, 4.0]


def test_returns_none_leaves_a_returned_generator_as_the_body_made_it() -> None:
    def make(x):
        return (v for v in x)

    gen_obj = dlbridge.guard("numpy", returns=None)(make)(torch.ones(2, 2, device="cpu"))
    assert type(gen_obj).__name__ == "generator"
    assert all(isinstance(v, np.ndarray) for v in gen_obj)
