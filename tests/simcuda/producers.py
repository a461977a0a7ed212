"""CUDA-claiming torch tensors and JAX arrays, torch's CUDA stream API, JAX's CUDA consumer
(not GPU evidence: see the package docstring).

The memory is real CPU memory of real torch tensors / JAX arrays, exported by the framework's own
CPU ``__dlpack__``; the capsule is then relabelled to say ``(kDLCUDA, ordinal)``
(:func:`tests.simcuda.core.relabel`). What is simulated is the CUDA half of the protocol, copied from:

- torch 2.13 ``torch/_tensor.py`` ``Tensor.__dlpack__`` (lines 1538-1667 of the release): the default
  ``stream=-1`` (no synchronisation), ``None``/``1`` = the default stream, ``2`` -> ``BufferError``
  ("per-thread default stream is not supported."), ``0`` -> ``AssertionError``, a tensor on another
  device than ``torch.cuda.current_device()`` -> ``BufferError`` (lines 1601-1609), and the
  producer-side wait ``stream.wait_event(event recorded on the current stream)`` when the streams
  differ (lines 1638-1643).
- torch 2.13 ``torch/utils/dlpack.py`` ``from_dlpack`` (lines 122-215): ``max_version=(1, 0)``, the
  consumer stream ``torch.cuda.current_stream(f'cuda:{id}')`` passed as ``1`` when it is the null
  stream, and the TypeError fallbacks that drop ``max_version``, ``copy``, ``dl_device``.
- JAX 0.10.2 ``jax/_src/array.py`` ``ArrayImpl.__dlpack_device__`` (lines 436-462: the device id is
  ``local_hardware_id``) and ``jax/_src/dlpack.py`` ``from_dlpack`` (lines 240-280): the device is
  ``backend.device_from_local_hardware_id(device_id)``, the stream is
  ``dlpack_device.get_stream_for_external_ready_events()`` (``None`` for ``kDLCUDAHost`` and
  TensorFlow tensors), and the producer is asked ``__dlpack__(stream=stream)``, keyword ``stream`` only.
- XLA (openxla/xla) ``xla/pjrt/local_device_state.cc`` ``LocalDeviceState::GetExternalReadyEventStream``:
  the streams handed out for external ready events rotate round-robin over
  ``kNumExternalReadyEventStreams = 4`` (``local_device_state.h``); jaxlib binds it as
  ``Device.get_stream_for_external_ready_events`` (``PjRtDevice::GetStreamForExternalReadyEvents``,
  ``xla/python/py_device.cc``). Two calls in a row give two different streams.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

from tests.simcuda import core
from tests.simcuda.core import KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, LEGACY, LOG

__all__ = ["TorchCuda", "cuda_tensor", "JaxGpu", "XLA_EXTERNAL_READY_STREAMS"]

XLA_EXTERNAL_READY_STREAMS = 4  # xla/pjrt/local_device_state.h kNumExternalReadyEventStreams


# ---------------------------------------------------------------------------------------------
# torch
# ---------------------------------------------------------------------------------------------
class _TorchStream:
    """``torch.cuda.Stream``-alike: ``cuda_stream`` is the handle (0: the legacy null stream)."""

    def __init__(self, ptr: int, device: int) -> None:
        import torch

        self.cuda_stream = ptr
        self.device_index = device
        self.device = torch.device("cuda", device)
        self._prev: list[Any] = []

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _TorchStream) and other.cuda_stream == self.cuda_stream

    def __hash__(self) -> int:
        return hash(self.cuda_stream)

    def wait_event(self, event: Any) -> None:
        LOG.add("torch", "wait", self.cuda_stream, after=event)

    def synchronize(self) -> None:
        LOG.add("torch", "sync", self.cuda_stream)

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.cuda_stream:#x}>"


class TorchCuda:
    """Makes ``torch.cuda`` answer as on a machine with ``core.STATE.device_count`` GPUs, and makes
    tensors claim CUDA. ``install(monkeypatch)`` patches the ``torch.cuda`` functions dlbridge calls."""

    def __init__(self) -> None:
        self.current: dict[int, int] = {}  # device -> current stream handle (0: the default stream)

    def install(self, monkeypatch: Any) -> TorchCuda:
        import torch

        global _real_from_dlpack
        if _real_from_dlpack is None:
            _real_from_dlpack = torch._C._from_dlpack
        cuda = torch.cuda
        sim = self

        class _DeviceCtx:
            def __init__(self, device: Any) -> None:
                self.idx = _index(device)
                self.prev = 0

            def __enter__(self) -> None:
                self.prev = core.STATE.current_device
                core.STATE.current_device = self.idx

            def __exit__(self, *exc: Any) -> None:
                core.STATE.current_device = self.prev

        class _StreamCtx:
            def __init__(self, stream: _TorchStream) -> None:
                self.stream = stream

            def __enter__(self) -> _TorchStream:
                dev = self.stream.device_index
                self.prev = sim.current.get(dev, 0)
                sim.current[dev] = self.stream.cuda_stream
                return self.stream

            def __exit__(self, *exc: Any) -> None:
                sim.current[self.stream.device_index] = self.prev

        def current_stream(device: Any = None) -> _TorchStream:
            dev = _index(device)
            return _TorchStream(sim.current.get(dev, 0), dev)

        def new_stream(device: Any = None, priority: int = 0) -> _TorchStream:
            return _TorchStream(core.new_stream(), _index(device))

        _install_exchange_api(monkeypatch, sim)
        for name, value in {
            "is_available": lambda: True,
            "device_count": lambda: core.STATE.device_count,
            "current_device": lambda: core.STATE.current_device,
            "set_device": lambda d: setattr(core.STATE, "current_device", _index(d)),
            "current_stream": current_stream,
            "default_stream": lambda device=None: _TorchStream(0, _index(device)),
            "Stream": new_stream,
            "ExternalStream": lambda ptr, device=None: _TorchStream(ptr, _index(device)),
            "stream": _StreamCtx,
            "device": _DeviceCtx,
            "synchronize": lambda device=None: LOG.add("torch", "device_sync", device=_index(device)),
            "is_initialized": lambda: True,
        }.items():
            monkeypatch.setattr(cuda, name, value)
        return self


_real_from_dlpack: Any = None  # torch._C._from_dlpack (a capsule's import) before the harness replaced it


def _install_exchange_api(monkeypatch: Any, sim: TorchCuda) -> None:
    """torch's DLPack C exchange API (``Tensor.__dlpack_c_exchange_api__``, torch >= 2.10) with its
    ``current_work_stream`` answering for the simulated CUDA streams: the current stream's handle on
    the device asked (0: the legacy default stream), as torch's does from
    ``at::cuda::getCurrentCUDAStream`` (apache/tvm-ffi tests/python/test_current_work_stream_gpu.py
    checks it equals ``torch.cuda.current_stream().cuda_stream``); and its
    ``managed_tensor_from_py_object_no_sync`` exporting a tensor that claims CUDA as torch's does one on
    a GPU: the same tensor, its device ``(kDLCUDA, index)``, no stream touched (dlpack.h: the exchange API
    "does not perform any stream synchronization"), logged as an export with no stream. The other entries
    are torch's own."""
    import ctypes

    import torch

    real = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if real is None:
        return
    # private prototypes: ctypes.pythonapi's own are shared with every other library in the process
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi)
    )
    table = (ctypes.c_void_p * 7).from_buffer_copy((ctypes.c_char * 56).from_address(get_pointer(real, _EXCHANGE)))

    def current_work_stream(device_type: int, device_id: int, out: Any) -> int:
        LOG.add("torch", "stream_query", sim.current.get(device_id, 0), device=device_id)
        out[0] = sim.current.get(device_id, 0) if device_type == KDL_CUDA else None
        return 0

    torch_export = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(table[3])

    def from_py_object(obj: Any, out: Any) -> int:
        index = cuda_index(obj)
        if index is not None:
            LOG.add("torch", "export", None, exchange=True, device=index)
        result = int(torch_export(obj, out))
        if result == 0 and index is not None and out[0]:
            device = (ctypes.c_int32 * 2).from_address(out[0] + _VERSIONED_TENSOR + _DEVICE_AT)
            device[0], device[1] = KDL_CUDA, index
        return result

    torch_import = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))(table[4])

    def to_py_object(managed: int, out: Any) -> int:
        # torch's import of a CUDA tensor (managed_tensor_to_py_object_no_sync), as _torch_import does it:
        # the real import of the memory as the CPU's, the tensor saying cuda:<id>
        device = (ctypes.c_int32 * 2).from_address(managed + _VERSIONED_TENSOR + _DEVICE_AT)
        if device[0] != KDL_CUDA:
            return int(torch_import(managed, out))
        index = device[1]
        LOG.add("torch", "consume", None, exchange=True, device=index)
        device[0], device[1] = KDL_CPU, 0
        inner = ctypes.c_void_p()
        result = int(torch_import(managed, ctypes.byref(inner)))
        if result != 0 or not inner.value:
            return result
        wrapped = cuda_tensor(ctypes.cast(inner, ctypes.py_object).value, index)
        _incref(wrapped)  # the new reference the caller gets through out
        out[0] = id(wrapped)
        _decref(inner.value)  # the real import's reference, now held by the wrapper
        return 0

    query = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
    export = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
    to_py = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
    callbacks = (query(current_work_stream), export(from_py_object), to_py(to_py_object))
    table[6] = ctypes.cast(callbacks[0], ctypes.c_void_p).value
    table[3] = ctypes.cast(callbacks[1], ctypes.c_void_p).value
    table[4] = ctypes.cast(callbacks[2], ctypes.c_void_p).value
    new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
        ("PyCapsule_New", ctypes.pythonapi)
    )
    capsule = new_capsule(ctypes.addressof(table), _EXCHANGE, None)
    _KEEP.append((table, callbacks, torch_export, torch_import))  # the capsule points into them: alive for the process
    monkeypatch.setattr(torch.Tensor, "__dlpack_c_exchange_api__", capsule)


def cuda_index(obj: Any) -> int | None:
    """The CUDA ordinal an exact ``torch.Tensor`` claims (tests/simcuda/exact.py), else None."""
    from tests.simcuda import exact

    return exact.index_of(obj)


# DLManagedTensorVersioned: its DLTensor at 32 bytes, the DLTensor's device at 8 (dlpack.h, LP64).
_VERSIONED_TENSOR, _DEVICE_AT = 32, 8
_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))
_decref = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("Py_DecRef", ctypes.pythonapi))


_EXCHANGE = b"dlpack_exchange_api"
_KEEP: list[Any] = []


def _index(device: Any) -> int:
    """torch's rule for a device argument: None / "cuda" / torch.device("cuda") = the current device."""
    import torch

    if device is None:
        return core.STATE.current_device
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return core.STATE.current_device if device.index is None else device.index
    return int(getattr(device, "device_index", getattr(device, "idx", 0)))


def _torch_subclass() -> type:
    import torch

    global _SimCudaTensor
    if _SimCudaTensor is not None:
        return _SimCudaTensor

    class SimCudaTensor(torch.Tensor):
        """A CPU tensor that says it lives on ``cuda:<index>`` (device, is_cuda, DLPack)."""

        _sim_index: int

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            # Results of ops on a CUDA tensor stay on its device; .cpu() / .to("cpu") / .numpy() leave it,
            # .to("cuda:N") / .cuda(N) copy (on the host) to device N.
            kwargs = kwargs or {}
            index = next((a._sim_index for a in (*args, *kwargs.values()) if isinstance(a, cls)), 0)
            name = getattr(func, "__name__", "")
            if name in ("to", "cuda"):
                moved = _moved_to(name, args[1:], kwargs)
                if moved is not None:
                    plain = args[0].as_subclass(torch.Tensor)
                    if moved == "cpu":
                        return plain.clone()
                    return cuda_tensor(plain if moved == index and name == "to" else plain.clone(), moved)
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
            if name in ("cpu", "numpy", "__dlpack__", "__dlpack_device__", "tolist", "item"):
                return out
            return _rewrap(out, cls, index)

        @property
        def device(self) -> Any:  # type: ignore[override]
            return torch.device("cuda", self._sim_index)

        @property
        def is_cuda(self) -> bool:  # type: ignore[override]
            return True

        def get_device(self) -> int:  # type: ignore[override]
            return self._sim_index

        def is_pinned(self, device: Any = None) -> bool:  # type: ignore[override]
            return False

        def __dlpack_device__(self) -> tuple[int, int]:  # type: ignore[override]
            return (KDL_CUDA, self._sim_index)

        def __dlpack__(self, *, stream: Any = -1, max_version: Any = None, dl_device: Any = None,
                       copy: Any = None) -> Any:  # type: ignore[override]  # fmt: skip
            plain = self.as_subclass(torch.Tensor)
            return cuda_dlpack(plain, torch.Tensor.__dlpack__, self._sim_index, stream, max_version, dl_device, copy)

    _SimCudaTensor = SimCudaTensor
    return SimCudaTensor


_SimCudaTensor: type | None = None


def cuda_dlpack(plain: Any, cpu_dlpack: Any, index: int, stream: Any, max_version: Any, dl_device: Any,
                copy: Any) -> Any:  # fmt: skip
    """torch 2.13 ``torch/_tensor.py`` ``Tensor.__dlpack__`` (lines 1538-1667) for a tensor on
    ``cuda:<index>`` whose memory is the CPU tensor ``plain`` (exported by ``cpu_dlpack``, torch's own
    CPU ``__dlpack__``, then relabelled)."""
    import torch

    LOG.add("torch", "export", stream, max_version=max_version, dl_device=dl_device, copy=copy, device=index)
    if plain.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    if index != core.STATE.current_device:
        raise BufferError(
            "Can't export tensors on a different CUDA device index. "
            f"Expected: {index}. Current device: {core.STATE.current_device}."
        )
    if stream is not None and type(stream) is not int:
        raise TypeError("stream must be ``int`` or ``none``")
    if stream != -1:
        if stream is None or stream == 1:
            target = 0  # torch.cuda.default_stream(): the legacy null stream
        else:
            if stream == 2:
                raise BufferError("per-thread default stream is not supported.")
            if stream == 0:
                raise AssertionError(f"unsupported stream on CUDA: {stream}.")
            target = stream
        current = torch.cuda.current_stream().cuda_stream  # patched by TorchCuda
        if target != current:
            LOG.add("torch", "wait", LEGACY if target == 0 else target, producer_stream=current)
    if dl_device is not None and tuple(dl_device) == (KDL_CPU, 0):
        return cpu_dlpack(plain, max_version=max_version, copy=True if copy is None else copy)  # a CPU copy
    if dl_device is not None and tuple(dl_device) != (KDL_CUDA, index):
        raise BufferError(f"cannot export to device {tuple(dl_device)}")
    capsule = cpu_dlpack(plain, max_version=max_version, copy=copy)
    return core.relabel(capsule, (KDL_CUDA, index))


def _moved_to(name: str, args: Any, kwargs: Any) -> int | str | None:
    """Where ``.to(...)`` / ``.cuda(...)`` moves a tensor: "cpu", a CUDA ordinal, or None (no move)."""
    import torch

    if name == "cuda":
        dev = args[0] if args else kwargs.get("device")
        return _index(dev)
    for a in (*args, kwargs.get("device")):
        if isinstance(a, (str, torch.device)):
            d = torch.device(a)
            return "cpu" if d.type == "cpu" else _index(d)
    return None


def _rewrap(out: Any, cls: type, index: int) -> Any:
    import torch

    if isinstance(out, torch.Tensor) and not isinstance(out, cls):
        out = out.as_subclass(cls)
        out._sim_index = index  # type: ignore[attr-defined]
        return out
    if isinstance(out, tuple):
        return tuple(_rewrap(o, cls, index) for o in out)
    return out


def cuda_tensor(cpu: Any, index: int = 0) -> Any:
    """``cpu`` (a real CPU tensor; its memory is shared) as a tensor that says ``cuda:<index>``."""
    cls = _torch_subclass()
    t = cpu.as_subclass(cls)
    t._sim_index = index
    return t


def torch_from_dlpack(ext: Any, device: Any = None, copy: Any = None) -> Any:
    """torch 2.13 ``torch/utils/dlpack.py`` ``from_dlpack`` lines 122-215, for CUDA producers: the
    capsule is relabelled back to CPU for the real importer and the tensor says ``cuda:<id>``."""
    import torch

    if not hasattr(ext, "__dlpack__"):
        return _torch_import(ext)
    kwargs: dict[str, Any] = {"max_version": (1, 0)}
    if copy is not None:
        kwargs["copy"] = copy
    ext_device = tuple(ext.__dlpack_device__())
    if ext_device[0] == KDL_CUDA:
        stream = torch.cuda.current_stream(f"cuda:{ext_device[1]}")
        kwargs["stream"] = 1 if stream.cuda_stream == 0 else stream.cuda_stream
        LOG.add("torch", "consumer_stream", kwargs["stream"])
    capsule = None
    for drop in (None, "max_version", "copy", "dl_device"):
        if drop is not None:
            kwargs.pop(drop, None)
        try:
            capsule = ext.__dlpack__(**kwargs)
            break
        except TypeError:
            if drop == "dl_device":
                raise
    return _torch_import(capsule)


def torch_capsule_import(capsule: Any) -> Any:
    """torch 2.13 ``torch._C._from_dlpack``, the import a capsule reaches (``torch/utils/dlpack.py`` lines 224-231):
    a CUDA capsule is relabelled back to CPU for the real importer and the tensor says ``cuda:<id>``."""
    return _torch_import(capsule)


def _torch_import(capsule: Any) -> Any:
    view = core.read_capsule(capsule)
    dev_type, dev_id = view.device
    if dev_type == KDL_CPU:
        return _real_from_dlpack(capsule)
    if dev_type != KDL_CUDA:
        raise BufferError(f"Unsupported device_type: {dev_type}")
    core.relabel(capsule, (KDL_CPU, 0))
    return cuda_tensor(_real_from_dlpack(capsule), dev_id)


# ---------------------------------------------------------------------------------------------
# JAX
# ---------------------------------------------------------------------------------------------
class SimJaxDevice:
    """A JAX GPU device: ``id`` (JAX's global id) and ``local_hardware_id`` (the CUDA ordinal) may differ."""

    platform = "gpu"
    device_kind = "Simulated GPU (not a GPU)"

    def __init__(self, gpu: JaxGpu, id: int, local_hardware_id: int) -> None:
        self.gpu = gpu
        self.id = id
        self.local_hardware_id = local_hardware_id
        self.process_index = 0
        self.client = gpu
        self._streams = [core.new_stream() for _ in range(XLA_EXTERNAL_READY_STREAMS)]
        self._next = itertools.cycle(range(XLA_EXTERNAL_READY_STREAMS))

    def get_stream_for_external_ready_events(self) -> int:
        # LocalDeviceState::GetExternalReadyEventStream: round robin over 4 streams
        stream = self._streams[next(self._next)]
        LOG.add("jax", "stream_query", stream, device=self.local_hardware_id)
        return stream

    def __repr__(self) -> str:
        return f"CudaDevice(id={self.id})"


SimJaxDevice.__module__ = "jaxlib._jax"  # where jaxlib's Device class lives (dlbridge's parse_device checks)


class JaxGpu:
    """The CUDA half of JAX: devices (optionally with ``id`` != ``local_hardware_id``), CUDA-claiming
    arrays (real CPU arrays whose ``__dlpack__`` / ``__dlpack_device__`` say CUDA) and ``from_dlpack``."""

    platform = "cuda"
    platform_version = "cuda 13000 (simulated)"

    def __init__(self, ids: list[tuple[int, int]] | None = None) -> None:
        pairs = ids if ids is not None else [(i, i) for i in range(core.STATE.device_count)]
        self.devices = [SimJaxDevice(self, i, hw) for i, hw in pairs]
        self.claims: dict[int, tuple[Any, SimJaxDevice]] = {}  # id(array) -> (array, device)

    def device_from_local_hardware_id(self, hw: int) -> SimJaxDevice:
        for d in self.devices:
            if d.local_hardware_id == hw:
                return d
        raise RuntimeError(f"INVALID_ARGUMENT: No matching device found for local_hardware_id {hw}")

    def local_devices(self) -> list[SimJaxDevice]:
        return list(self.devices)

    # --- producers ------------------------------------------------------------------------------
    def claim(self, array: Any, device: SimJaxDevice | None = None) -> Any:
        """Make a real (CPU) JAX array say it lives on ``device`` (default: the first)."""
        self.claims[id(array)] = (array, device or self.devices[0])
        return array

    def install(self, monkeypatch: Any) -> JaxGpu:
        from jax._src import array as jax_array

        sim = self
        impl = jax_array.ArrayImpl
        real_dlpack, real_device = impl.__dlpack__, impl.__dlpack_device__

        def __dlpack_device__(self: Any) -> Any:
            claim = sim.claims.get(id(self))
            if claim is None:
                return real_device(self)
            return (KDL_CUDA, claim[1].local_hardware_id)  # array.py lines 458-462

        def __dlpack__(self: Any, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                       copy: Any = None) -> Any:  # fmt: skip
            claim = sim.claims.get(id(self))
            if claim is None:
                return real_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
            dev = claim[1]
            LOG.add("jax", "export", stream, max_version=max_version, dl_device=dl_device, copy=copy,
                    device=dev.local_hardware_id)  # fmt: skip
            if stream is not None:
                # jaxlib's buffer_to_dlpack_managed_tensor: the consumer stream waits for the buffer's
                # definition events (WaitUntilBufferReadyOnStream)
                LOG.add("jax", "wait", stream)
            if dl_device is not None and tuple(dl_device) == (KDL_CPU, 0):
                return real_dlpack(self, max_version=max_version, copy=copy)
            capsule = real_dlpack(self, max_version=max_version, copy=copy)  # always "dltensor"
            return core.relabel(capsule, (KDL_CUDA, dev.local_hardware_id))

        monkeypatch.setattr(impl, "__dlpack__", __dlpack__)
        monkeypatch.setattr(impl, "__dlpack_device__", __dlpack_device__)
        real_property = impl.__dict__.get("device")
        if isinstance(real_property, property):  # JAX >= 0.4.31

            def device(self: Any) -> Any:
                # array.py `device`: a single-device array's one device (its GPU's Device object)
                claim = sim.claims.get(id(self))
                return real_property.__get__(self) if claim is None else claim[1]

            monkeypatch.setattr(impl, "device", property(device))
        return self

    # --- consumer -------------------------------------------------------------------------------
    def from_dlpack(self, external_array: Any, device: Any = None, copy: Any = None) -> Any:
        """JAX 0.10.2 ``jax/_src/dlpack.py`` ``from_dlpack`` lines 240-280 for CUDA producers; the
        capsule is then relabelled to CPU and imported by the real (CPU) JAX."""
        if not hasattr(external_array, "__dlpack__") or not hasattr(external_array, "__dlpack_device__"):
            raise TypeError("The array passed to from_dlpack must have __dlpack__ and __dlpack_device__ methods.")
        dl_device_type, device_id = external_array.__dlpack_device__()
        from jax._src import dlpack as real  # the real CPU importer (jax.dlpack.from_dlpack may be this one)

        if dl_device_type == KDL_CPU:
            return real.from_dlpack(external_array, device=device, copy=copy)
        if dl_device_type not in (KDL_CUDA, KDL_CUDA_HOST):
            raise TypeError(
                "Array passed to from_dlpack is on unsupported device type "
                f"(DLDeviceType: {dl_device_type}, array: {external_array}"
            )
        dlpack_device = self.device_from_local_hardware_id(device_id)
        stream = None if dl_device_type == KDL_CUDA_HOST else dlpack_device.get_stream_for_external_ready_events()
        capsule = external_array.__dlpack__(stream=stream)
        LOG.add("jax", "consume", stream, device=device_id)
        view = core.read_capsule(capsule)
        if view.name != b"dltensor":
            # jaxlib DLPackManagedTensorToBuffer: only a legacy, unconsumed "dltensor" capsule
            raise ValueError("DLPack tensor is consumed or is not a 'dltensor' capsule.")
        core.relabel(capsule, (KDL_CPU, 0))
        result = real.from_dlpack(_Capsule(capsule), copy=copy)
        self.claims[id(result)] = (result, dlpack_device)
        return result


class _Capsule:
    """Hands a ready CPU capsule to the real ``jax.dlpack.from_dlpack`` (it wants an object)."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CPU, 0)

    def __dlpack__(self, **kwargs: Any) -> Any:
        capsule, self.capsule = self.capsule, None
        return capsule
