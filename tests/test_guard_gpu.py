"""@dlbridge.guard on CUDA: CuPy kernels called with torch bf16 CUDA tensors, results back in torch.

Two paths to bf16 in a CuPy body:
- ``fallback="view"``: the body gets a uint16 view of the same memory and its kernels read the
  bf16 bits as ``unsigned short``; run in a child interpreter with ml_dtypes blocked, so CuPy 14
  (which would otherwise hold bf16) takes the view path as CuPy <= 13 does.
- native (CuPy >= 14 with ml_dtypes): the body gets a real bf16 ``cupy.ndarray``.
"""

from __future__ import annotations

import textwrap
import warnings

import pytest

import dlbridge
from tests.conftest import need, run_child

pytestmark = pytest.mark.gpu

torch = need("torch")
np = need("numpy")

# Doubling a bf16 value only changes its exponent, so truncating the float32 back to its top
# 16 bits is exact; the kernels need no rounding code.
KERNEL = r"""
extern "C" __global__ void double_bf16(const unsigned short* x, unsigned short* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float f = __uint_as_float(((unsigned int)x[i]) << 16);
        y[i] = (unsigned short)(__float_as_uint(f * 2.0f) >> 16);
    }
}
"""
ELEMENTWISE = "y = (unsigned short)(__float_as_uint(__uint_as_float(((unsigned int)x) << 16) * 2.0f) >> 16)"
VALUES = [1.0, -2.0, 0.5, 3.5, 0.001, -0.0, 100.0, -7.25] * 64


@pytest.fixture
def cupy(cuda):
    return need("cupy")


def _cupy_holds_bf16(cupy) -> bool:
    return "bfloat16" in dlbridge._adapters.ADAPTERS["cupy"].capabilities().imports


def _launch(cupy, kernel, a, out) -> None:
    n = a.size
    kernel(((n + 255) // 256,), (256,), (a, out, np.int64(n)))


_VIEW_CHILD = """
    import numpy as np, torch, dlbridge
    try:
        import cupy
    except ImportError as err:
        print("skip: cupy does not import without ml_dtypes:", err); raise SystemExit(0)
    raw = cupy.RawKernel(KERNEL, "double_bf16")
    elementwise = cupy.ElementwiseKernel("uint16 x", "uint16 y", ELEMENTWISE, "double_bf16_bits")
    x = torch.tensor(VALUES, dtype=torch.bfloat16, device="cuda")
    seen = []

    @dlbridge.guard("cupy", fallback="view")
    def double_raw(a):
        seen.append((str(a.dtype), a.data.ptr))
        out = cupy.empty_like(a)
        n = a.size
        raw(((n + 255) // 256,), (256,), (a, out, np.int64(n)))
        return out

    @dlbridge.guard(cupy, fallback="view")
    def double_elementwise(a):
        seen.append((str(a.dtype), a.data.ptr))
        return elementwise(a)

    for fn in (double_raw, double_elementwise):
        seen.clear()
        y = fn(x)
        torch.cuda.synchronize()
        assert seen == [("uint16", x.data_ptr())], seen
        assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.device == x.device, y
        assert torch.equal(y, x * 2), (y, x * 2)
    print("ok")
"""


def test_view_fallback_kernel_reads_bf16_bits_as_unsigned_short(cuda) -> None:
    need("cupy")
    code = f"KERNEL = {KERNEL!r}\nELEMENTWISE = {ELEMENTWISE!r}\nVALUES = {VALUES!r}\n" + textwrap.dedent(_VIEW_CHILD)
    done = run_child(code, timeout=300, block=("ml_dtypes",))  # CuPy 14 then cannot hold bf16: the view path
    assert done.returncode == 0, done.stderr[-4000:]
    if done.stdout.startswith("skip:"):
        pytest.skip(done.stdout.strip())
    assert done.stdout.strip() == "ok", done.stdout + done.stderr[-2000:]


def test_native_cupy_bf16_path(cupy) -> None:
    if not _cupy_holds_bf16(cupy):
        pytest.skip(f"CuPy {cupy.__version__} cannot hold bf16 (needs CuPy >= 14 with ml_dtypes)")
    kernel = cupy.RawKernel(KERNEL, "double_bf16")
    x = torch.tensor(VALUES, dtype=torch.bfloat16, device="cuda")
    seen = []

    @dlbridge.guard("cupy")
    def double(a):
        seen.append((str(a.dtype), a.data.ptr))
        out = cupy.empty_like(a)  # bf16 too: the kernel reads and writes the raw bits
        _launch(cupy, kernel, a, out)
        return out, a

    y, same = double(x)
    torch.cuda.synchronize()
    assert seen == [("bfloat16", x.data_ptr())]
    assert y.dtype == torch.bfloat16 and y.device == x.device
    assert torch.equal(y, x * 2)
    assert same is x  # an argument handed back is the caller's own tensor


def _external_stream(cupy, ptr: int):
    """CuPy's wrapper for a foreign stream (ExternalStream warns DeprecationWarning from CuPy 14)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "ExternalStream is deprecated", DeprecationWarning)
        return cupy.cuda.ExternalStream(ptr)


def test_native_path_runs_on_the_callers_stream(cupy) -> None:
    if not _cupy_holds_bf16(cupy):
        pytest.skip(f"CuPy {cupy.__version__} cannot hold bf16 (needs CuPy >= 14 with ml_dtypes)")
    kernel = cupy.RawKernel(KERNEL, "double_bf16")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.tensor(VALUES, dtype=torch.bfloat16, device="cuda") * 1  # queued on `stream`

        @dlbridge.guard("cupy", stream=stream.cuda_stream)
        def double(a):
            out = cupy.empty_like(a)
            with _external_stream(cupy, stream.cuda_stream):
                _launch(cupy, kernel, a, out)
            return out

        y = double(x)
    stream.synchronize()
    assert torch.equal(y, torch.tensor(VALUES, dtype=torch.bfloat16, device="cuda") * 2)


def test_mixed_arguments_in_containers(cupy) -> None:
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    b = torch.ones(8, dtype=torch.float32, device="cuda")

    @dlbridge.guard("cupy")
    def fused(a, rest, *, scale=1.0):
        assert isinstance(a, cupy.ndarray) and isinstance(rest[0], cupy.ndarray)
        return {"sum": (a + rest[0]) * scale, "n": int(a.size)}

    out = fused(x, (b,), scale=2.0)
    assert isinstance(out["sum"], torch.Tensor) and out["sum"].device == x.device
    assert out["sum"].tolist() == [(i + 1) * 2.0 for i in range(8)] and out["n"] == 8


def test_cpu_arguments_go_to_the_gpu_and_results_come_back(cupy) -> None:
    x = torch.arange(4, dtype=torch.float32, device="cpu")

    @dlbridge.guard("cupy", device="cuda")
    def double(a):
        assert isinstance(a, cupy.ndarray) and a.device.id == 0
        return a * 2

    y = double(x)
    assert isinstance(y, torch.Tensor) and y.device.type == "cpu"
    assert y.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_convert_false_checks_bf16_against_this_cupy(cupy) -> None:
    x = torch.ones(4, dtype=torch.bfloat16, device="cuda")
    calls = []

    @dlbridge.guard("cupy", convert=False, returns=None)
    def body(a):
        calls.append(a)
        return a

    if _cupy_holds_bf16(cupy):
        assert body(x) is x and calls == [x]
    else:
        with pytest.raises(dlbridge.UnsupportedDtypeError, match=r"^body\(a=…\) under @dlbridge.guard\('cupy'\)"):
            body(x)
        assert calls == []
