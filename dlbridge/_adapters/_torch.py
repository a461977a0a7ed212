from __future__ import annotations

import importlib
import sys
from contextlib import AbstractContextManager, nullcontext
from functools import cached_property
from operator import methodcaller
from typing import Any

from .._capabilities import Capabilities
from .._capsule._exchange import current_work_stream, is_exchange_api
from .._capsule._read import GPU_CODES, device_name
from .._errors import DLBridgeError, ProducerError
from ._base import Adapter, AsIs, Prober, export_capsule
from ._fast import FastExport, FastRoute, GpuExport
from ._numpy import aligned_copy, raw_bits
from ._support import StandIn

# torch's Tensor.__dlpack__ refuses a tensor that requires grad or has its conjugate bit set, but
# exports one with the negative bit set as its bare memory, without the sign (probe 2026-11-23,
# torch 2.13: torch.tensor([1+2j]).conj().imag reaches np.from_dlpack as [2.], not [-2.]).
_NEG_BIT = "Can't export tensors with the negative bit set"


class TorchProber(Prober):
    """The report's, tests' and benchmarks' torch helpers (arrays made from bits and their bytes read
    without NumPy, so that the report probes torch on a machine without NumPy)."""

    adapter: TorchAdapter

    def make_array(self, ref: Any, device: str) -> Any:
        torch = self.mod
        target = getattr(torch, ref.dtype.name, None)
        if not isinstance(target, torch.dtype):
            raise TypeError(f"torch {self.adapter.version} has no {ref.dtype.name}")
        t = torch.from_numpy(aligned_copy(raw_bits(ref)))  # bf16/fp8: the bits, then a zero-copy view
        t = t.view(target) if t.dtype != target else t
        return t.to("cuda") if device == "cuda" else t

    def make_from_bits(self, data: bytes, dtype: str, shape: tuple[int, ...], device: str) -> Any:
        # Without NumPy: torch reads the bytes itself, into a 64-byte aligned buffer (see aligned_copy).
        torch = self.mod
        target = getattr(torch, dtype, None)
        if not isinstance(target, torch.dtype):
            raise TypeError(f"torch {self.adapter.version} has no {dtype}")
        buf = torch.empty(len(data) + 64, dtype=torch.uint8, device="cpu")  # whatever torch's default device is
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

    def transpose(self, arr: Any) -> Any:
        return arr.transpose(0, 1)

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
        if not self.adapter.has_cuda():
            return None
        return str(self.mod.cuda.get_device_name(0))


class TorchAdapter(FastRoute, Adapter):
    device_codes = frozenset({1, 2, 10})
    display = "PyTorch"
    prober_class = TorchProber
    distributions = ("torch",)
    extra = "torch"
    producer_devices = ("cpu", "cuda")
    export_keeps = "untyped_storage"  # the storage itself (see export): 40 ns to make, x.data 186 (timeit, 2.13)

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        # Refused like torch's own refusals (autograd, conjugate bit): export_failed resolves it.
        if obj.is_neg():
            raise BufferError(_NEG_BIT)
        if obj._is_zerotensor() or self.mod._is_functional_tensor(obj):  # torch exports them with a NULL data pointer
            raise self.state_error(obj) or BufferError("no memory")
        if obj.requires_grad:
            return export_capsule(obj, stream=stream, max_version=max_version)  # torch refuses it
        # torch's capsule keeps the exported tensor alive, not its storage: a later x.set_(...) on the
        # caller's tensor would free memory the importer still reads (probe 2026-11-23, torch 2.13:
        # np.from_dlpack(x) then x.set_(y) gives garbage). x.data holds it: detach() minus the dispatcher.
        return export_capsule(obj.data, stream=stream, max_version=max_version)

    def fast_export(self, cls: type) -> FastExport | None:
        torch = self.mod
        if cls is not torch.Tensor:  # subclasses may override __torch_function__ / __dlpack__
            return None
        # The exchange API (torch 2.10+: Tensor.__dlpack_c_exchange_api__, DLPack 1.3's
        # DLPackExchangeAPI) skips __dlpack__'s checks, so the states __dlpack__ refuses or exports
        # wrongly are guards here: autograd, the conjugate and negative bits, non-strided layouts.
        # is_cpu first: the route replays CPU memory only, so a CUDA tensor is declined before any
        # export (the route's GPU half exports it once, with the consumer's stream: fast_gpu_export).
        guards = (("is_cpu", False, True), *self._state_guards)
        api = getattr(cls, "__dlpack_c_exchange_api__", None)
        # x.data: an alias that holds the storage itself (see export; where C exports x, export_keeps).
        return (1, api, guards, "data", None) if is_exchange_api(api) else (0, None, guards, "data", None)

    def fast_gpu_export(self, cls: type) -> GpuExport | None:
        # The exchange API exports without synchronising (dlpack.h): the route uses it where torch's
        # current stream on the tensor's device is the consumer's, and declines otherwise (the pipeline
        # calls __dlpack__(stream=), torch's own handshake). The guards are the states export() would
        # refuse or correct, and a strided tensor (the route replays dense C order), so that they are
        # declined before any export. get_device(): the CUDA (HIP on ROCm builds) ordinal, in C.
        if cls is not self.mod.Tensor:
            return None
        guards = (("is_cuda", False, True), *self._state_guards, ("is_contiguous", True, True))
        kind = 1 if is_exchange_api(getattr(cls, "__dlpack_c_exchange_api__", None)) else 0
        cuda = self.mod.cuda  # its handshake (__dlpack__(stream=)) refuses tensors off the current device
        return GpuExport(guards, "get_device", 10 if self.mod.version.hip else 2, kind, "data", cuda.current_device)

    def fast_stream_query(self) -> Any:
        return self._stream_api  # current_work_stream, where torch has CUDA

    @cached_property
    def _state_guards(self) -> tuple[tuple[Any, ...], ...]:
        """The tensor states torch's export refuses or would export wrongly, as route guards; and an active
        TorchFunctionMode, which the exchange API's export would bypass (torch's Python __dlpack__ and x.data
        dispatch to it), unless all are torch's default-device mode: the ``DeviceContext`` that
        ``set_default_device`` and ``with torch.device(...)`` push only adds ``device=`` to factory functions
        (torch/utils/_device.py, torch 2.13), which these calls are not."""
        guards: tuple[tuple[Any, ...], ...] = (("requires_grad", False, False), ("is_conj", True, False),
                                               ("is_neg", True, False), ("layout", False, self.mod.strided))  # fmt: skip
        c = self.mod._C
        names = ("is_torch_function_mode_enabled", "len_torch_function_stack", "get_function_stack_at")
        mode, length, at = (getattr(c, f"_{n}", None) for n in names)
        try:
            device_mode = importlib.import_module("torch.utils._device").DeviceContext
        except (ImportError, AttributeError):
            device_mode = None
        if mode is None or length is None or at is None or device_mode is None:
            return guards if mode is None else (*guards, (mode, True, False))

        def only_the_device_mode() -> bool:  # asked only while a mode is active; `with torch.device` adds a second
            return all(type(at(i)) is device_mode for i in range(length()))

        return (*guards, (mode, True, False, only_the_device_mode))

    def fast_import(self, caps: Capabilities) -> tuple[int, Any, Any] | None:
        found, api = super().fast_import(caps), getattr(self.mod.Tensor, "__dlpack_c_exchange_api__", None)
        if found is None:
            return None
        # a capsule: torch.from_dlpack's own last step (torch/utils/dlpack.py), without its Python frame
        importer = getattr(self.mod._C, "_from_dlpack", None) or found[1]
        return (2, importer, api) if is_exchange_api(api) else (found[0], importer, None)

    def for_type(self, cls: type) -> Adapter:
        fake = getattr(sys.modules.get("torch._subclasses.fake_tensor"), "FakeTensor", None)
        return self._fake if isinstance(fake, type) and issubclass(cls, fake) else self

    @cached_property
    def _fake(self) -> Adapter:
        return _FakeTensors(self.framework)

    def export_failed(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None,
                      copy: bool | None, target: Adapter | None, dtype: Any) -> Any:  # fmt: skip
        error = self.state_error(obj)
        if error is not None:
            raise error
        if target is None:  # described only: the same memory, without the lazy bits' meaning
            return self._plain_capsule(obj, stream, max_version)
        call = f"to_{target.name}()"
        if obj.requires_grad:
            if target is self and dtype is None:  # torch -> torch: nothing to change, the graph is kept
                raise AsIs(obj, obj.clone if copy else None)
            what = f"{target.display} cannot carry its autograd graph" if target is not self else "dtype= would cut it"
            raise ProducerError(
                f"{call}: {_describe(obj)} requires grad, and {what}; dlbridge does not drop it silently. "
                "Pass x.detach() to convert its values without the graph (no gradient flows back through them)."
            )
        conj, neg = obj.is_conj(), obj.is_neg()
        if conj or neg:
            if copy is False:
                bit, fix = ("conjugate", "x.resolve_conj()") if conj else ("negative", "x.resolve_neg()")
                raise ProducerError(
                    f"{call}: {_describe(obj)} has its {bit} bit set (a lazy {'x.conj()' if conj else 'negation'}): "
                    f"its memory holds other values than it stands for, so only a resolved copy is right to "
                    f"share, which copy=False forbids. Pass copy=None, or {fix} first."
                )
            return StandIn(
                lambda: self.export(self._resolved(obj), stream=stream, max_version=max_version),
                lambda: self._plain_capsule(obj, stream, max_version),
                f"a resolved copy (its {'conjugate' if conj else 'negative'} bit applied)",
            )
        return None

    def _resolved(self, obj: Any) -> Any:
        """A C-order copy with the values the tensor stands for, in one copy whatever its strides:
        copy_ writes the values of a tensor with the conjugate or negative bit into one that has
        neither (probe 2026-11-27, torch 2.13: equal to x.resolve_conj() / x.resolve_neg() of a
        transposed tensor, is_conj() and is_neg() False, strides C order)."""
        out = self.mod.empty(obj.shape, dtype=obj.dtype, device=obj.device)
        with self.mod.no_grad():
            return out.copy_(obj)

    @staticmethod
    def _plain_capsule(obj: Any, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        """A capsule of the tensor's own memory, the lazy bits' meaning left out (described, never imported)."""
        plain = obj.detach()
        return export_capsule(plain.conj() if plain.is_conj() else plain, stream=stream, max_version=max_version)

    def state_error(self, obj: Any) -> DLBridgeError | None:
        torch = self.mod
        if obj.layout != torch.strided:
            return ProducerError(
                f"{_describe(obj)} has layout {obj.layout}, and DLPack shares only strided (dense) tensors; "
                "pass x.to_dense() (a dense copy)"
            )
        if obj.is_meta:
            return ProducerError(
                f"{_describe(obj)}: the meta device holds a shape and a dtype but no data to share; "
                "make it on a real device (or load its values) first"
            )
        if obj.is_quantized:
            return ProducerError(
                f"{_describe(obj)} is quantized, and DLPack has no quantized dtypes; pass x.dequantize() for "
                "its real values, or x.int_repr() for the stored integers"
            )
        if obj.is_nested:
            return ProducerError(
                "a torch nested tensor has no single strided layout to share; pass x.to_padded_tensor(0.0), "
                "or its components (x.unbind())"
            )
        functorch = getattr(torch._C, "_functorch", None)
        if functorch is not None and functorch.is_functorch_wrapped_tensor(obj):
            return ProducerError(
                f"{_describe(obj)} is a value inside a torch.func transform (vmap, grad, functionalize, ...): a wrapper "
                "with no memory of its own; convert outside the transform"
            )
        # Both export with a NULL data pointer (probe 2026-11-27, torch 2.13): no memory to share.
        if torch._is_functional_tensor(obj):
            return ProducerError(
                f"{_describe(obj)} is a functional tensor (inside torch.func.functionalize, or another "
                "functionalization): a wrapper with no memory of its own; convert outside the transform, where "
                "its inputs and results are plain tensors"
            )
        if obj._is_zerotensor():
            return ProducerError(
                f"{_describe(obj)} is an efficient zero tensor (torch._efficientzerotensor, which autograd makes for "
                "zero gradients): it stands for zeros without any memory to share; pass x.clone() for a tensor of "
                "zeros with memory"
            )
        return None

    def device_of(self, obj: Any) -> tuple[int, int]:
        # Tensor.__dlpack_device__ asks is_pinned() of a CPU tensor, which for one with the conjugate
        # or negative bit materialises a resolved copy first (probe 2026-11-27, torch 2.13: the peak
        # grows by the tensor's size); its storage says the same without copying anything.
        if (obj.is_conj() or obj.is_neg()) and obj.device.type == "cpu":
            return (3 if obj.untyped_storage().is_pinned() else 1, 0)
        return super().device_of(obj)

    def has_cuda(self) -> bool:
        try:
            return bool(self.mod.cuda.is_available())
        except MemoryError:
            raise
        except Exception:
            return False

    def device_count(self, device_type: int) -> int | None:
        # A ROCm build's devices are kDLROCM (10), a CUDA build's kDLCUDA (2); torch.version.hip is
        # None on CUDA and CPU-only builds (torch/version.py), device_count() 0 without a GPU.
        hip = getattr(self.mod.version, "hip", None) is not None
        if device_type != (10 if hip else 2):
            return 0
        try:
            return int(self.mod.cuda.device_count())
        except MemoryError:
            raise
        except Exception:  # no driver: no device this process can use
            return 0

    def current_stream(self, device: tuple[int, int]) -> int | None:
        if device[0] not in GPU_CODES:
            return None
        # torch's DLPack C exchange API answers the same stream as the public query (see
        # current_work_stream) without building a stream object, but only for its own device type
        # (managed memory is asked as the CUDA device it belongs to).
        api = self._stream_api
        found = current_work_stream(api, (2 if device[0] == 13 else device[0], device[1])) if api else None
        ptr = self.mod.cuda.current_stream(device[1]).cuda_stream if found is None else found
        # CUDA: 0 is the legacy default stream, spelled 1 in DLPack. ROCm spells it 0 (torch's
        # __dlpack__ rejects 1 there), as torch.from_dlpack does.
        return (ptr or 1) if device[0] != 10 else ptr

    @cached_property
    def _stream_api(self) -> Any:
        """torch's DLPack C exchange API (torch >= 2.10) for stream queries, where torch has CUDA; None
        without CUDA, where its answer, NULL, would read as the legacy default stream: then the public
        query raises (a CUDA source this process cannot use)."""
        api = getattr(self.mod.Tensor, "__dlpack_c_exchange_api__", None)
        return api if is_exchange_api(api) and self.mod.cuda.is_available() else None

    def on_device(self, device: tuple[int, int]) -> AbstractContextManager[Any]:
        # torch's __dlpack__ refuses tensors on a GPU other than the current one.
        cuda = self.mod.cuda
        if device[0] not in GPU_CODES or cuda.current_device() == device[1]:
            return nullcontext()
        switch: AbstractContextManager[Any] = cuda.device(device[1])
        return switch

    def view(self, arr: Any, dtype: str) -> Any:
        return arr.view(getattr(self.mod, dtype))

    def viewer(self, dtype: str) -> Any:
        return methodcaller("view", getattr(self.mod, dtype))

    def data_ptr(self, arr: Any) -> int:
        return int(arr.data_ptr())

    def fast_view_address(self) -> tuple[tuple[str, bool], ...]:
        return (("data_ptr", True),)  # data_ptr's path, read in C by the route's view record

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

    def parse_device(self, device: Any) -> str | tuple[int, int] | None:
        if type(device).__module__ != "torch" or not isinstance(getattr(device, "type", None), str):
            return None
        if device.index is not None:
            return f"{device.type}:{device.index}"
        # torch.device("cuda") is the *current* device (torch/cuda/__init__.py current_device; what
        # tensor.to("cuda") uses), not cuda:0; "cpu" has one device.
        if device.type == "cuda" and self.has_cuda():
            return f"cuda:{self.mod.cuda.current_device()}"
        return device.type if device.type == "cuda" else f"{device.type}:0"


class _FakeTensors(TorchAdapter):
    """torch's fake tensors (torch.compile tracing, FakeTensorMode): shapes without data. torch
    2.13 exports them with a NULL data pointer and a deprecation warning; refused here instead."""

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        raise ProducerError(
            f"{_describe(obj)} is a fake tensor (torch.compile tracing or FakeTensorMode): it has no data "
            "to share; convert outside the compiled region (torch.compiler.disable), or from a custom op"
        )


def _describe(t: Any) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    try:
        shape = list(t.shape)
    except MemoryError:
        raise
    except Exception:  # nested tensors have no single shape
        return f"a torch {dtype} tensor"
    return f"a torch {dtype}{shape} tensor on {t.device}"
