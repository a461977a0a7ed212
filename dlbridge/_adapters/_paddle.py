"""PaddlePaddle: ``paddle.Tensor`` in and out through ``__dlpack__`` / ``paddle.from_dlpack``.

Importing paddle after tensorflow crashes the process (paddlepaddle 3.3.1 with tensorflow 2.21.0,
probe 2026-11-23), hence ``unsafe_after``. Paddle's ``__dlpack_device__`` says ``(kDLCPU, None)``
on the CPU; the base ``device_of`` reads None as 0.
"""

from __future__ import annotations

from typing import Any

from .._errors import ProducerError
from ._base import Adapter, AsIs, Prober, export_capsule
from ._fast import FastExport, FastRoute

_GRAD = "paddle tensor requires grad"


def _dense(own: Any) -> Any:
    return own if own.is_contiguous() else own.contiguous()  # in place: only on a tensor of ours


class PaddleProber(Prober):
    """The report's, tests' and benchmarks' Paddle helpers."""

    adapter: PaddleAdapter

    def gpu_name(self) -> str | None:
        try:
            return str(self.mod.device.cuda.get_device_name(0)) if self.adapter.has_cuda() else None
        except MemoryError:
            raise
        except Exception:
            return None

    def make_array(self, ref: Any, device: str) -> Any:
        import numpy as np

        paddle = self.mod
        place = paddle.CUDAPlace(0) if device == "cuda" else paddle.CPUPlace()
        name = ref.dtype.name
        if ref.dtype.type.__module__ != "ml_dtypes":
            return paddle.to_tensor(ref, place=place)
        # Paddle reads NumPy uint16 as its bfloat16; fp8 comes through uint8 and a zero-copy view.
        bits = paddle.to_tensor(np.ascontiguousarray(ref).view(f"u{ref.dtype.itemsize}"), place=place)
        return bits if name == "bfloat16" else bits.view(getattr(paddle, name))

    def dtype_str(self, arr: Any) -> str:
        return str(arr.dtype).removeprefix("paddle.")

    def transpose(self, arr: Any) -> Any:
        return arr.transpose([1, 0])  # a strided view (paddle 3 stride kernels); the report checks it shares

    def host_bytes(self, arr: Any) -> Any:
        import numpy as np

        # .numpy() gives bf16 as uint16 and fp8 as int8: go through the raw bytes instead.
        raw = self.adapter.contiguous(arr).reshape([-1]).view(self.mod.uint8) if arr.size else arr.astype("uint8")
        return np.array(raw.cpu().numpy(), dtype=np.uint8, copy=True).reshape(-1)

    def to_host(self, arr: Any) -> Any:
        from ._numpy import numpy_dtype

        return self.host_bytes(arr).view(numpy_dtype(self.dtype_str(arr))).reshape(tuple(arr.shape))


class PaddleAdapter(FastRoute, Adapter):
    device_codes = frozenset({1, 2})
    display = "PaddlePaddle"
    prober_class = PaddleProber
    distributions = ("paddlepaddle", "paddlepaddle-gpu")
    extra = "paddle"
    producer_devices = ("cpu", "cuda")
    unsafe_after = ("tensorflow",)

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        # Paddle refuses to export a tensor in an autograd graph; export_failed says what to do.
        if not obj.stop_gradient:
            raise BufferError(_GRAD)
        return export_capsule(obj, stream=stream, max_version=max_version)

    def fast_export(self, cls: type) -> FastExport | None:
        if cls is not self.array_class() or self.has_cuda():  # the route replays CPU memory only (see JAX's)
            return None
        return (0, None, (("stop_gradient", False, True),), None, None)  # in an autograd graph: export_failed

    def export_failed(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None,
                      copy: bool | None, target: Adapter | None, dtype: Any) -> Any:  # fmt: skip
        if obj.stop_gradient:
            return super().export_failed(obj, stream=stream, max_version=max_version, copy=copy, target=target,
                                         dtype=dtype)  # fmt: skip
        if target is None:  # described only (inspect): the same memory
            return export_capsule(obj.detach(), stream=stream, max_version=max_version)
        if target is self and dtype is None:  # paddle -> paddle: nothing to change, the graph is kept
            raise AsIs(obj.clone() if copy else obj)
        what = f"{target.display} cannot carry its autograd graph" if target is not self else "dtype= would cut it"
        raise ProducerError(
            f"to_{target.name}(): a paddle {str(obj.dtype).removeprefix('paddle.')}{list(obj.shape)} tensor has "
            f"stop_gradient=False, and {what}; dlbridge does not drop it silently. Pass x.detach() to convert "
            "its values without the graph (no gradient flows back through them)."
        )

    def hint(self, dtype: str) -> str | None:
        if dtype != "uint16":
            return None
        # paddle.from_dlpack reads a uint16 capsule as paddle.bfloat16 (its bf16 is stored as uint16;
        # probe 2026-11-23, paddlepaddle 3.3.1), so a uint16 array would arrive with other values.
        return (
            "Paddle has no uint16 dtype: it reads uint16 data as its own bfloat16, which would change the values. "
            'Pass dtype="bfloat16" if the bits are bfloat16 (zero-copy), dtype="int16" for the same bits as int16 '
            "(zero-copy; values above 32767 read as negative), or convert to int32 first (x.astype(int32), a copy)."
        )

    def has_cuda(self) -> bool:
        try:
            return bool(self.mod.device.is_compiled_with_cuda() and self.mod.device.cuda.device_count() > 0)
        except MemoryError:
            raise
        except Exception:
            return False

    def current_stream(self, device: tuple[int, int]) -> int | None:
        if device[0] != 2:
            return None
        ptr = self.mod.device.cuda.current_stream(device[1]).cuda_stream
        return ptr or 1  # 0 is the legacy default stream, spelled 1 in DLPack (as paddle.from_dlpack does)

    def view(self, arr: Any, dtype: str) -> Any:
        return arr.view(getattr(self.mod, dtype))  # zero-copy (probe 2026-11-23, paddlepaddle 3.3.1)

    def data_ptr(self, arr: Any) -> int:
        return int(arr.data_ptr())

    def copy(self, arr: Any) -> Any:
        return arr.clone()

    def contiguous(self, arr: Any) -> Any:
        # Never arr.contiguous() on the caller's tensor: paddle makes that very tensor contiguous
        # in place, in new memory, cutting it off from the views it shared memory with
        # (probe 2026-11-23, paddlepaddle 3.3.1). A clone comes out dense.
        return arr if arr.is_contiguous() else _dense(arr.clone())

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        if device[0] != 1:
            return arr.cuda(device[1])
        out = arr.cpu()
        return out.clone() if out.data_ptr() == arr.data_ptr() else out  # a CPU tensor's .cpu() is itself

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        place = self.mod.CUDAPlace(device[1]) if device[0] == 2 else self.mod.CPUPlace()
        return self.mod.to_tensor(host, place=place)

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        paddle = self.mod
        shifted = paddle.bitwise_left_shift(u16.astype("int32"), paddle.to_tensor(16, dtype="int32", place=u16.place))
        return shifted.view(paddle.float32)

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        paddle = self.mod
        return paddle.to_tensor(table, dtype="float32", place=u8.place)[u8.astype("int64")]
