"""How the route reads x's dtype on every call where a producer's dtypes need relabelling (NumPy with
ml_dtypes loaded: NumPy cannot export bfloat16 or float8, so the route exports a same-width unsigned view
and writes the true dtype into the capsule). The compiled route reads the dtype through the array class's
own getset and looks up only dtypes of the relabelled dtypes' classes; these tests hold either path to
the results: every relabelled kind, by whichever dtype object the array holds, and every plain dtype
beside them, replayed (the pipeline not asked), at the source's address, with the source's bits.
"""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from tests._route_helpers import (  # noqa: F401 - route_path: the fixture on_both_paths parametrizes
    counting_declines,
    on_both_paths,
    ptr,
    route_path,
)
from tests.conftest import caps_of, need

pytest_generate_tests = on_both_paths

ML_KINDS = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
PLAIN = ("float32", "float64", "float16", "int8", "int64", "uint16", "bool", "complex64")


def _torch_dtype(name: str):
    return getattr(need("torch"), name)


def _equal_dtypes(kind: str) -> dict[str, np.dtype]:
    """The dtype objects an ml_dtypes array may hold: NumPy's registered one, and an equal other object."""
    ml_dtypes = need("ml_dtypes")
    registered = np.dtype(getattr(ml_dtypes, kind))
    other = registered.newbyteorder("=")
    assert other == registered and other is not registered  # else this case tests nothing new
    return {"registered": registered, "equal copy": other}


@pytest.mark.parametrize("kind", ML_KINDS)
def test_ml_dtypes_arrays_relabel_by_any_equal_dtype_object(kind: str) -> None:
    torch = need("torch")
    for held, dtype in _equal_dtypes(kind).items():
        x = np.arange(16, dtype=np.float32).reshape(4, 4).astype(np.dtype(getattr(need("ml_dtypes"), kind)))
        x = x.view(dtype)
        assert x.dtype is dtype
        dlbridge.to_torch(x)  # learnt
        with counting_declines() as declined:
            out = dlbridge.to_torch(x)
        assert declined["torch"] == 0, f"{kind} ({held}): the route declined: {dict(declined)}"
        assert isinstance(out, torch.Tensor) and out.dtype == _torch_dtype(kind), (held, out.dtype)
        assert ptr(out) == ptr(x), f"{kind} ({held}): not the source's memory"
        bits = out.view(torch.uint8).numpy().tobytes()
        assert bits == x.view(np.uint8).tobytes(), f"{kind} ({held}): other bits"


@pytest.mark.parametrize("target", ["torch", "numpy"])
def test_plain_dtypes_replay_beside_relabelled_ones(target: str) -> None:
    """With ml_dtypes loaded (the Producer relabels its kinds), every other dtype is exported as it is:
    replayed, at the source's address, with its own dtype. Alternating with a bf16 array, so that neither
    kind's lookup is left over from the call before."""
    need("ml_dtypes")
    if caps_of(target).readonly_imports:  # its imports are made writable afterwards: never on the route
        pytest.skip(f"{target} {need(target).__version__} imports read-only: the pipeline converts into it every time")
    convert = getattr(dlbridge, f"to_{target}")
    bf16 = np.ones((2, 3), dtype=np.dtype(need("ml_dtypes").bfloat16))
    arrays = [np.arange(6).astype(name).reshape(2, 3) for name in PLAIN]
    for x in (*arrays, bf16):
        convert(x)  # learnt
    with counting_declines() as declined:
        for x in arrays:
            for source in (x, bf16):
                out = convert(source)
                assert ptr(out) == ptr(source), (source.dtype, target)
                assert str(out.dtype).removeprefix("torch.") == str(source.dtype), (source.dtype, out.dtype)
                back = out.numpy() if target == "torch" and source is not bf16 else None
                assert back is None or np.array_equal(back, source), source.dtype
    assert declined[target] == 0, f"the route declined {dict(declined)}"


class _Flaky:
    """A host array whose ``dtype`` raises while ``fail`` is set; its capsule is its NumPy array's."""

    def __init__(self, a: np.ndarray) -> None:
        self.a, self.fail = a, False

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    @property
    def dtype(self) -> np.dtype:
        if self.fail:
            raise ValueError("no dtype now")
        return self.a.dtype


@pytest.mark.isolated()
def test_a_dtype_that_raises_after_a_plain_one_declines() -> None:
    """A producer with relabels whose array's dtype raises, after the route has met one of its plain dtypes: the
    route declines (the pipeline converts it, without the dtype), and the next plain call replays again."""
    torch = need("torch")
    ml_dtypes = need("ml_dtypes")
    from dlbridge._route import _replay as _route

    dlbridge.to_torch(np.arange(4, dtype=np.float32))  # the route's state for torch, ready
    bf16 = np.dtype(ml_dtypes.bfloat16)
    kind = _route._producers[np.ndarray].kind  # how this NumPy's __dlpack__ is asked (max_version or not)
    producer = _route.Producer(kind=kind, handle=None, guards=(), alias=None,
                               relabels={bf16: (np.dtype("u2"), 4 | 16 << 8 | 1 << 16)})  # fmt: skip
    try:
        x = _Flaky(np.arange(6, dtype=np.float32))
        dlbridge.to_torch(x)  # the pipeline, which notes that no adapter has this type (asked once)
        _route._producers[_Flaky] = producer  # arrays of this type exported as x.__dlpack__() gives them
        for fail in (False, True, False):
            x.fail = fail
            with counting_declines() as declined:
                out = dlbridge.to_torch(x)
            assert out.dtype == torch.float32 and ptr(out) == x.a.ctypes.data, fail
            assert np.array_equal(out.numpy(), x.a), fail
            assert declined["torch"] == (1 if fail else 0), (fail, dict(declined))
            assert np.array_equal(x.a, np.arange(6, dtype=np.float32)), fail  # the source as it was
    finally:
        _route._producers.pop(_Flaky, None)
