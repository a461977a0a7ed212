from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from .._capsule import GPU_CODES, device_name
from ._base import Adapter, aligned_copy, export_capsule, raw_bits


class TorchAdapter(Adapter):
    name = "torch"
    module = "torch"
    aliases = ("pytorch",)
    array_type = ("torch", "Tensor")
    producer_modules = ("torch",)
    device_codes = frozenset({1, 2, 10})
    display = "PyTorch"
    distributions = ("torch",)
    extra = "torch"
    producer_devices = ("cpu", "cuda")

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        # Another framework cannot carry autograd history; torch refuses to export without detach.
        if obj.requires_grad:
            obj = obj.detach()
        return export_capsule(obj, stream=stream, max_version=max_version)

    def has_cuda(self) -> bool:
        try:
            return bool(self.mod.cuda.is_available())
        except Exception:
            return False

    def current_stream(self, device: tuple[int, int]) -> int | None:
        if device[0] not in GPU_CODES:
            return None
        try:  # the raw handle, without building a torch.cuda.Stream (what torch's Triton glue calls)
            ptr = self.mod._C._cuda_getCurrentRawStream(device[1])
        except Exception:  # a build or version without it
            ptr = self.mod.cuda.current_stream(device[1]).cuda_stream
        # CUDA: 0 is the legacy default stream, spelled 1 in DLPack. ROCm spells it 0 (torch's
        # __dlpack__ rejects 1 there), as torch.from_dlpack does.
        return (ptr or 1) if device[0] != 10 else ptr

    def on_device(self, device: tuple[int, int]) -> AbstractContextManager[Any]:
        # torch's __dlpack__ refuses tensors on a GPU other than the current one.
        cuda = self.mod.cuda
        if device[0] not in GPU_CODES or cuda.current_device() == device[1]:
            return nullcontext()
        return cuda.device(device[1])

    def view(self, arr: Any, dtype: str) -> Any:
        return arr.view(getattr(self.mod, dtype))

    def data_ptr(self, arr: Any) -> int:
        return int(arr.data_ptr())

    def copy(self, arr: Any) -> Any:
        return arr.clone()

    def contiguous(self, arr: Any) -> Any:
        return arr.contiguous()

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        if device_name(device[0]) == "cpu":
            out = arr.to("cpu")
            return out.clone() if out is arr else out  # a pinned tensor's .to("cpu") is itself
        return arr.to(f"cuda:{device[1]}")

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        torch = self.mod
        return (u16.to(torch.int32) << 16).view(torch.float32)

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        torch = self.mod
        return torch.tensor(table, dtype=torch.float32, device=u8.device)[u8.to(torch.int64)]

    # --- report, test and benchmark helpers ----------------------------------------------------
    def parse_device(self, device: Any) -> str | tuple[int, int] | None:
        if type(device).__module__ != "torch" or not isinstance(getattr(device, "type", None), str):
            return None
        return f"{device.type}:{device.index or 0}"

    def make_array(self, ref: Any, device: str) -> Any:
        torch = self.mod
        target = getattr(torch, ref.dtype.name, None)
        if not isinstance(target, torch.dtype):
            raise TypeError(f"torch {self.version} has no {ref.dtype.name}")
        t = torch.from_numpy(aligned_copy(raw_bits(ref)))  # bf16/fp8: the bits, then a zero-copy view
        t = t.view(target) if t.dtype != target else t
        return t.to("cuda") if device == "cuda" else t

    def make_from_bits(self, data: bytes, dtype: str, shape: tuple[int, ...], device: str) -> Any:
        # Without NumPy: torch reads the bytes itself, into a 64-byte aligned buffer (see aligned_copy).
        torch = self.mod
        target = getattr(torch, dtype, None)
        if not isinstance(target, torch.dtype):
            raise TypeError(f"torch {self.version} has no {dtype}")
        buf = torch.empty(len(data) + 64, dtype=torch.uint8)
        start = -buf.data_ptr() % 64
        raw = buf[start : start + len(data)]
        raw.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        t = raw.view(target).reshape(shape)
        return t.to("cuda") if device == "cuda" else t

    def raw_bytes(self, arr: Any) -> bytes:
        torch = self.mod  # without NumPy: .tolist() of the bytes (report-sized arrays only)
        t = self._host_tensor(arr).reshape(-1)
        if t.is_complex():
            t = torch.view_as_real(t).reshape(-1)
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        return bytes(t.view(torch.uint8).tolist())

    def dtype_str(self, arr: Any) -> str:
        return str(arr.dtype).removeprefix("torch.")

    def _host_tensor(self, arr: Any) -> Any:
        return arr.detach().cpu().contiguous()  # .numpy() refuses CUDA tensors and autograd

    def host_bytes(self, arr: Any) -> Any:
        torch = self.mod
        t = self._host_tensor(arr).reshape(-1)
        if t.is_complex():
            t = torch.view_as_real(t).reshape(-1)
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        return t.view(torch.uint8).numpy().copy()

    def to_host(self, arr: Any) -> Any:
        from ._numpy import numpy_dtype

        t = self._host_tensor(arr)
        name = self.dtype_str(t)
        if name == "bool" or name in ("float32", "float64", "float16", "complex64", "complex128") or "int" in name:
            return t.numpy().copy()
        width = t.element_size() * 8  # bf16/fp8: the bits, viewed as the ml_dtypes dtype
        raw = t.view(getattr(self.mod, f"uint{width}" if width > 8 else "uint8"))
        return raw.numpy().view(numpy_dtype(name)).copy()

    def gpu_name(self) -> str | None:
        if not self.has_cuda():
            return None
        return str(self.mod.cuda.get_device_name(0))
