"""What dlbridge says where it cannot convert, and what it converts that it used to refuse.

Each message names what was received and the fix; the wording is pinned. On both paths, in children.
"""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from dlbridge._pipeline._subbyte import padded_capsule
from tests._trust_helpers import ON_BOTH_PATHS, trust_path  # noqa: F401 (a fixture)
from tests.conftest import need
from tests.ctypes_producer import CtypesArray, Fields

pytestmark = ON_BOTH_PATHS

CODES = np.array([0, 1, 2, 3, 7, 8, 9, 15, 4, 5, 6, 10, 11, 12, 13, 14], dtype=np.uint8)  # every fp4 code


def _fp4_numpy() -> np.ndarray:
    ml = need("ml_dtypes")
    fp4 = getattr(ml, "float4_e2m1fn", None)
    if fp4 is None:
        pytest.skip(f"ml_dtypes {ml.__version__} has no float4_e2m1fn: NumPy arrays cannot hold fp4 here")
    return CODES.copy().view(fp4)


def test_a_raw_padded_fp4_capsule_reaches_numpy_zero_copy_like_the_arrays() -> None:
    x = _fp4_numpy()
    codes = x.view(np.uint8)
    raw = padded_capsule(codes, (1, 3))  # dtype (17, 4, 1), flagged IS_SUBBYTE_TYPE_PADDED: one value a byte
    assert dlbridge.inspect(raw).flags & 4
    out = dlbridge.to_numpy(raw)
    assert out.dtype == x.dtype and out.ctypes.data == x.ctypes.data  # same dtype, same memory
    assert np.array_equal(out.view(np.uint8), CODES) and np.array_equal(out.astype(np.float32), x.astype(np.float32))
    via_array = dlbridge.to_numpy(x)
    assert via_array.dtype == out.dtype and via_array.ctypes.data == out.ctypes.data


def test_a_refused_raw_padded_capsule_is_left_as_it_came(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbridge._adapters import ADAPTERS

    x = _fp4_numpy()
    raw = padded_capsule(x.view(np.uint8), (1, 3))
    before = dlbridge.inspect(raw)
    numpy = ADAPTERS["numpy"]

    def refuses(capsule: object) -> object:
        assert dlbridge.inspect(capsule).dtype == "uint8"  # relabelled for NumPy, one value a byte
        raise RuntimeError("refused")

    monkeypatch.setattr(numpy, "_from_dlpack", refuses)  # NumPy refusing it (a fault injected at its import)
    with pytest.raises(
        dlbridge.CapsuleError, match=r"numpy \S+ refused cpu uint8\[16\] as uint8: RuntimeError: refused"
    ):
        dlbridge.to_numpy(raw)
    monkeypatch.undo()
    assert dlbridge.inspect(raw) == before  # fp4 and flagged again, unconsumed
    assert dlbridge.to_numpy(raw).ctypes.data == x.ctypes.data  # and it still converts


def test_a_raw_packed_fp4_capsule_into_torch_says_to_pass_the_array() -> None:
    torch = need("torch")
    arr = CtypesArray(8, Fields(17, 4, 1, (16,), None))  # 16 values packed two a byte (DLPack's default)
    arr.write_bytes(bytes((CODES[1::2] << 4) | CODES[0::2]))
    capsule = arr.capsule(True)
    before = dlbridge.inspect(capsule)
    with pytest.raises(dlbridge.LayoutError, match=(
        r"to_torch\(\): torch \S+ holds fp4 as float4_e2m1fn_x2 \(pairs of values along the last dimension, two a "
        r"byte\), and this raw capsule holds cpu float4_e2m1fn\[16\] packed two values a byte: the same bytes, which "
        r"dlbridge relabels as float4_e2m1fn_x2 \(zero-copy\) by rewriting the capsule's shape: it does that only to "
        r"a capsule it asked the producer for; pass the array itself \(not its capsule\), which dlbridge converts"
    )):  # fmt: skip
        dlbridge.to_torch(capsule)
    assert dlbridge.inspect(capsule) == before  # untouched
    out = dlbridge.to_torch(arr)  # the fix: the array itself
    assert out.dtype == torch.float4_e2m1fn_x2 and out.shape == (8,) and out.data_ptr() == arr.base
    assert out.view(torch.uint8).numpy().tobytes() == arr.read_bytes()


@pytest.mark.parametrize("dtype", ["uint8", "float4_e2m1fn_x2", "int8", np.uint8])
@pytest.mark.parametrize("to", ["torch", "numpy"])
def test_dtype_over_a_numpy_fp4_array_says_what_to_do(dtype: object, to: str) -> None:
    need(to)
    x = _fp4_numpy()
    shown = dtype if isinstance(dtype, str) else "uint8"
    pairs = r" \(torch gets float4_e2m1fn_x2 pairs\)" if to == "torch" else ""
    with pytest.raises(dlbridge.OptionError, match=(
        rf"to_{to}\(\): dtype='{shown}' cannot reinterpret a NumPy float4_e2m1fn array \(shape \[16\]\): ml_dtypes "
        r"keeps one 4-bit value in the low half of each byte, and no dtype of that width relabels such memory\. Drop "
        rf"dtype= to convert the values{pairs}, or pass x\.view\(np\.uint8\) for the 4-bit codes, one a byte "
        r"\(zero-copy\)"
    )):  # fmt: skip
        dlbridge.convert(x, to, dtype=dtype)
    assert x.dtype.name == "float4_e2m1fn" and np.array_equal(x.view(np.uint8), CODES)  # left as it was
    codes = dlbridge.convert(x.view(np.uint8), to)  # the fix, zero-copy
    ptr = codes.data_ptr() if to == "torch" else codes.ctypes.data
    assert ptr == x.ctypes.data and np.array_equal(np.asarray(codes), CODES)


def test_dtype_naming_the_arrays_own_fp4_changes_nothing() -> None:
    torch = need("torch")
    x = _fp4_numpy()
    assert dlbridge.to_torch(x, dtype="float4_e2m1fn").dtype == torch.float4_e2m1fn_x2
    same = dlbridge.to_numpy(x, dtype=x.dtype)
    assert same.dtype == x.dtype and same.ctypes.data == x.ctypes.data


ZERO = (r"a torch float32\[4\] tensor on cpu is an efficient zero tensor \(torch\._efficientzerotensor, which autograd "
        r"makes for zero gradients\): it stands for zeros without any memory to share; pass x\.clone\(\) for a tensor "
        r"of zeros with memory")  # fmt: skip


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("to", ["numpy", "jax"])
def test_an_efficient_zero_tensor_is_a_producer_error_naming_the_fix(warm: bool, to: str) -> None:
    torch = need("torch")
    need(to)
    if warm:  # the fast route has learnt torch float32 -> `to`
        dlbridge.convert(torch.ones(4, device="cpu"), to), dlbridge.convert(torch.ones(4, device="cpu"), to)
    z = torch._efficientzerotensor(4, device="cpu")
    with pytest.raises(dlbridge.ProducerError, match=ZERO):
        dlbridge.convert(z, to)
    with pytest.raises(dlbridge.ProducerError, match=ZERO):
        dlbridge.inspect(z)
    assert np.array_equal(np.asarray(dlbridge.convert(z.clone(), to)), np.zeros(4, np.float32))  # the fix


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_functionalized_tensor_is_a_producer_error_naming_the_fix(warm: bool) -> None:
    torch = need("torch")
    from torch.func import functionalize

    if warm:
        dlbridge.to_numpy(torch.ones(3, device="cpu")), dlbridge.to_numpy(torch.ones(3, device="cpu"))
    seen = []

    def body(x: object) -> object:
        with pytest.raises(dlbridge.ProducerError, match=(
            r"a torch float32\[3\] tensor on cpu is a value inside a torch.func transform \(vmap, grad, functionalize, "
            r"\.\.\.\): a wrapper with no memory of its own; convert outside the transform"
        )):  # fmt: skip
            dlbridge.to_numpy(x)
        seen.append(1)
        return x

    functionalize(body)(torch.ones(3, device="cpu"))
    assert seen
    wrapped = torch._to_functional_tensor(torch.ones(3, device="cpu"))  # functionalized outside torch.func, too
    with pytest.raises(dlbridge.ProducerError, match=r"is a functional tensor \(inside torch\.func\.functionalize, or "
                       r"another functionalization\): a wrapper with no memory of its own; convert outside"):  # fmt: skip
        dlbridge.to_numpy(wrapped)
