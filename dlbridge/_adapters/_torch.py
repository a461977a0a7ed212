from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from .._capsule import GPU_CODES, device_name
from ._base import Adapter, export_capsule


class TorchAdapter(Adapter):
    name = "torch"
    module = "torch"
    aliases = ("pytorch",)
    array_type = ("torch", "Tensor")
    producer_modules = ("torch",)
    device_codes = frozenset({1, 2, 10})

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
        switch: AbstractContextManager[Any] = cuda.device(device[1])
        return switch

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
