"""The stream a producer is handed, checked without a GPU.

A ctypes producer that *claims* a device records the keywords of every ``__dlpack__`` call; no
consumer ever reads its memory here (inspect only reads the capsule, and the refusals happen
before any export), so the pretend device is never dereferenced.
"""

from __future__ import annotations

import gc

import pytest

import dlbridge
from tests.conftest import need
from tests.ctypes_producer import CtypesArray


def _producer(device: tuple[int, int]) -> CtypesArray:
    return CtypesArray.zeros(16, code=2, bits=32, shape=(4,)).with_(device=device)


def _settle(p: CtypesArray) -> None:
    gc.collect()
    assert p.balanced


@pytest.mark.parametrize(
    "device,stream",
    [((2, 0), -1), ((13, 0), -1), ((10, 0), -1), ((1, 0), None), ((3, 0), None)],
    ids=["cuda", "cuda_managed", "rocm", "cpu", "cuda_host"],
)
def test_inspect_asks_for_no_synchronisation_on_gpu_memory(device: tuple[int, int], stream: int | None) -> None:
    """inspect reads no data: on GPU memory (managed memory included) it asks for stream=-1."""
    p = _producer(device)
    info = dlbridge.inspect(p)
    assert info.device == device
    assert p.calls[-1].get("stream") == stream
    _settle(p)


def test_jax_refuses_a_stream_it_would_not_read_on() -> None:
    """JAX imports on its own stream: a caller's stream would synchronise the wrong one."""
    p = _producer((2, 0))
    with pytest.raises(dlbridge.OptionError, match="stream=None"):
        dlbridge.to_jax(p, stream=7)
    assert p.exports == 0  # refused before the producer was asked for anything


@pytest.mark.parametrize("device", [(2, 0), (13, 0)], ids=["cuda", "cuda_managed"])
def test_stream_zero_is_ambiguous_on_cuda(device: tuple[int, int]) -> None:
    need("torch")
    p = _producer(device)
    with pytest.raises(dlbridge.OptionError, match="ambiguous"):
        dlbridge.to_torch(p, stream=0)
    assert p.exports == 0


@pytest.mark.parametrize("device", [(1, 0), (3, 0)], ids=["cpu", "cuda_host"])
def test_host_memory_takes_no_stream(device: tuple[int, int]) -> None:
    need("torch")
    p = _producer(device)
    with pytest.raises(dlbridge.OptionError, match="only stream=None"):
        dlbridge.to_torch(p, stream=5)
    assert p.exports == 0
    out = dlbridge.to_torch(p)  # and stream=None is what the producer is given
    assert p.calls[-1].get("stream") is None and out.data_ptr() == p.data_ptr
    del out
    _settle(p)


def test_torch_exchange_api_stream_query():
    # torch >= 2.10's DLPackExchangeAPI.current_work_stream, called as the route's GPU half calls it:
    # the CPU has no stream (NULL); a CPU-only build answers NULL for CUDA too (no CUDA runtime).
    torch = need("torch")
    from dlbridge._capsule._exchange import current_work_stream, is_exchange_api

    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if not is_exchange_api(api):
        pytest.skip(f"torch {torch.__version__} has no DLPack C exchange API")
    assert current_work_stream(api, (1, 0)) == 0
    if torch.version.cuda is None:  # a CPU-only build: no CUDA runtime, NULL
        assert current_work_stream(api, (2, 0)) == 0
    elif not torch.cuda.is_available():  # a CUDA build without a usable GPU: torch's CUDA error, as a Python one
        try:
            found = current_work_stream(api, (2, 0))
        except RuntimeError as err:  # e.g. "CUDA driver version is insufficient for CUDA runtime version"
            assert "CUDA" in str(err)
        else:
            assert found == 0
    else:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            assert current_work_stream(api, (2, torch.cuda.current_device())) == stream.cuda_stream


def test_torch_without_cuda_cannot_name_a_cuda_stream():
    # A CUDA source in a process whose torch has no CUDA: the stream query raises (the pipeline says the
    # device cannot be used here), rather than the exchange API's NULL read as the legacy default stream.
    torch = need("torch")
    if torch.cuda.is_available():
        pytest.skip("torch has CUDA here")
    from dlbridge._adapters import ADAPTERS

    with pytest.raises(Exception):  # noqa: B017 - torch's own error ("Torch not compiled with CUDA enabled", ...)
        ADAPTERS["torch"].current_stream((2, 0))
    with pytest.raises(dlbridge.DeviceMismatchError):
        dlbridge._pipeline._devices.stream_for(None, ADAPTERS["torch"], (2, 0))
