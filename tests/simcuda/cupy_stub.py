"""A stand-in ``cupy`` module with CuPy 13.3.0's or 14.2.0's DLPack behaviour (not GPU evidence).

``install(monkeypatch, "13.3.0")`` puts it into ``sys.modules`` as ``cupy`` (and ``cupy.cuda``,
``cupy.cuda.runtime``); dlbridge's CuPy adapter then imports and drives it as it would the real one.
Arrays live in simulated device memory (:mod:`tests.simcuda.core`). Every behaviour below is copied
from the CuPy sources at the tag named in its comment (github.com/cupy/cupy):

- ``ndarray.__dlpack__``: v13.3.0 ``cupy/_core/core.pyx`` lines 287-329 (keyword ``stream`` only);
  v14.2.0 ``cupy/_core/core.pyx`` lines 342-441 (``stream``, ``max_version``, ``dl_device``, ``copy``).
- the capsule it builds: v13.3.0 ``cupy/_core/dlpack.pyx`` ``toDlpack`` lines 98-154 (managed memory
  gets device id 0, line 127; dtype by kind only, else ``ValueError('Unknown dtype')``);
  v14.2.0 ``cupy/_core/dlpack.pyx`` ``get_dlpack_dtype_code_itemsize`` lines 75-97 (bfloat16 by name,
  anything else of kind 'V' -> ``BufferError``; kind 'f' -> kDLFloat of the item's width, so ml_dtypes'
  float8_e5m2, kind 'f', exports as kDLFloat with 8 bits) and ``get_dlpack_device`` lines 100-117.
- ``__dlpack_device__``: v13.3.0 core.pyx lines 331-343; v14.2.0 core.pyx lines 443-446.
- ``from_dlpack``: v13.3.0 dlpack.pyx lines 344-412 with ``DLPackMemory`` lines 169-212 and
  ``_dlpack_to_cupy_array`` lines 267-341; v14.2.0 dlpack.pyx lines 507-605, 300-371, 428-505.
- the streams: ``cupy_backends/cuda/stream.pyx`` ``get_default_stream_ptr`` (legacy stream, 1, unless
  per-thread default streams are on) and ``get_current_stream_ptr`` (0 until a stream is made current).
- ``ndarray.view``: v14.2.0 core.pyx lines 926-990 (``check_support=False``: any NumPy dtype, ml_dtypes'
  float8 included); ``asarray``: v14.2.0 ``cupy/_core/_dtype.pyx`` ``check_supported_dtype`` lines 37-76
  (``ValueError('Unsupported dtype ...')`` for a dtype with no C type name, float8 among them).

**The crash.** CuPy 13.3's ``DLPackMemory.__init__`` keeps the capsule's pointer without renaming the
capsule; when ``_dlpack_to_cupy_array`` then raises (bfloat16: ``NotImplementedError`` line 319, float8:
``TypeError`` line 321, lanes != 1: ``ValueError`` line 272), ``DLPackMemory.__dealloc__`` calls the
deleter (line 212) and the capsule's destructor calls it again (line 84): a double free, SIGSEGV or
SIGABRT (upstream cupy#8801). The stand-in raises :class:`~tests.simcuda.core.SimulatedCrash` there.
CuPy 14.2 renames the capsule first (dlpack.pyx v14.2.0 lines 303-314), so its errors are ordinary.
"""

from __future__ import annotations

import sys
import types
import warnings
import weakref
from typing import Any

import numpy as np

from tests.simcuda import core
from tests.simcuda.core import KDL_CPU, KDL_CUDA, KDL_CUDA_MANAGED, LEGACY, LOG, SimulatedCrash

__all__ = ["install", "make_cupy", "CuPyStub"]

MEMORY_TYPE = {"host": 1, "device": 2, "managed": 3, "pinned": 1}  # cudaMemoryType (driver_types.h)


class CUDARuntimeError(RuntimeError):
    pass


def make_cupy(version: str = "14.2.0") -> types.ModuleType:
    """A fresh ``cupy`` module object for ``version`` ("13.3.0" or "14.2.0")."""
    return CuPyStub(version).module


def install(monkeypatch: Any, version: str = "14.2.0") -> types.ModuleType:
    """Put a stand-in ``cupy`` (and its submodules) into ``sys.modules`` for one test."""
    mod = make_cupy(version)
    monkeypatch.setitem(sys.modules, "cupy", mod)
    monkeypatch.setitem(sys.modules, "cupy.cuda", mod.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.runtime", mod.cuda.runtime)
    return mod


class CuPyStub:
    def __init__(self, version: str) -> None:
        self.version = version
        self.v14 = tuple(int(p) for p in version.split(".")[:2]) >= (14, 0)
        self.current_streams: dict[int, int] = {}  # device -> current stream ptr (0: the null stream)
        self.module = self._build()

    # --- the module -----------------------------------------------------------------------------
    def _build(self) -> types.ModuleType:
        stub = self
        cp = types.ModuleType("cupy")
        cp.__version__ = self.version  # type: ignore[attr-defined]
        cp.__file__ = __file__
        cp.__simulated__ = True  # type: ignore[attr-defined]
        cuda = types.ModuleType("cupy.cuda")
        runtime = types.ModuleType("cupy.cuda.runtime")
        cp.cuda = cuda  # type: ignore[attr-defined]
        cuda.runtime = runtime  # type: ignore[attr-defined]

        runtime.streamLegacy = LEGACY  # type: ignore[attr-defined]
        runtime.streamPerThread = core.PER_THREAD  # type: ignore[attr-defined]
        runtime.memoryTypeHost, runtime.memoryTypeDevice, runtime.memoryTypeManaged = 1, 2, 3  # type: ignore[attr-defined]
        runtime.CUDARuntimeError = CUDARuntimeError  # type: ignore[attr-defined]
        runtime.getDevice = lambda: core.STATE.current_device  # type: ignore[attr-defined]
        runtime.setDevice = stub.set_device  # type: ignore[attr-defined]
        runtime.getDeviceCount = lambda: core.STATE.device_count  # type: ignore[attr-defined]
        runtime.pointerGetAttributes = stub.pointer_get_attributes  # type: ignore[attr-defined]
        runtime.is_hip = False  # type: ignore[attr-defined]
        runtime.getDeviceProperties = lambda i: {"name": b"Simulated GPU (not a GPU)"}  # type: ignore[attr-defined]

        class Device:
            """``cupy.cuda.Device``: ``Device()`` is the current device; ``with Device(i):`` switches."""

            def __init__(self, device: Any = None) -> None:
                self.id = core.STATE.current_device if device is None else int(device)
                self._prev: list[int] = []

            def __enter__(self) -> Device:
                self._prev.append(core.STATE.current_device)
                stub.set_device(self.id)
                return self

            def __exit__(self, *exc: Any) -> None:
                stub.set_device(self._prev.pop())

            def use(self) -> None:
                stub.set_device(self.id)

            def synchronize(self) -> None:
                LOG.add("cupy", "device_sync", device=self.id)

            def __eq__(self, other: object) -> bool:
                return isinstance(other, Device) and other.id == self.id

            def __hash__(self) -> int:
                return hash(self.id)

            def __repr__(self) -> str:
                return f"<CUDA Device {self.id}>"

        class Stream:
            """``cupy.cuda.Stream``; ``Stream.null`` has ptr 0 (cupy/cuda/stream.pyx)."""

            def __init__(self, null: bool = False, non_blocking: bool = False, ptr: int | None = None) -> None:
                self.ptr = 0 if null else (core.new_stream() if ptr is None else ptr)
                self.device_id = core.STATE.current_device
                self._prev: list[int] = []

            def __enter__(self) -> Stream:
                self._prev.append(stub.current_streams.get(self.device_id, 0))
                stub.current_streams[self.device_id] = self.ptr
                return self

            def __exit__(self, *exc: Any) -> None:
                stub.current_streams[self.device_id] = self._prev.pop()

            def use(self) -> Stream:
                stub.current_streams[self.device_id] = self.ptr
                return self

            def synchronize(self) -> None:
                LOG.add("cupy", "sync", self.ptr)

            def record(self, event: Any = None) -> Any:
                return ("event", self.ptr)

            def wait_event(self, event: Any) -> None:
                LOG.add("cupy", "wait", self.ptr, after=event[1])

            def __eq__(self, other: object) -> bool:
                return getattr(other, "ptr", None) == self.ptr

            def __hash__(self) -> int:
                return hash(self.ptr)

            def __repr__(self) -> str:
                return f"<Stream {self.ptr:#x} (device {self.device_id})>"

        Stream.null = Stream(null=True)  # type: ignore[attr-defined]

        class ExternalStream(Stream):
            def __init__(self, ptr: int, device_id: int = -1) -> None:
                super().__init__(ptr=ptr)

        def get_current_stream(device_id: int = -1) -> Stream:
            dev = core.STATE.current_device if device_id == -1 else device_id
            s = Stream(ptr=stub.current_streams.get(dev, 0))
            s.device_id = dev
            return s

        Device.__module__ = "cupy.cuda.device"  # what dlbridge's parse_device recognises
        cuda.Device = Device  # type: ignore[attr-defined]
        cuda.Stream = Stream  # type: ignore[attr-defined]
        cuda.ExternalStream = ExternalStream  # type: ignore[attr-defined]
        cuda.get_current_stream = get_current_stream  # type: ignore[attr-defined]
        cuda.is_available = lambda: True  # type: ignore[attr-defined]
        cuda.runtime = runtime  # type: ignore[attr-defined]
        self.Device, self.Stream = Device, Stream

        cp.ndarray = _make_ndarray_class(self)  # type: ignore[attr-defined]
        self.ndarray = cp.ndarray  # type: ignore[attr-defined]
        cp.from_dlpack = self.from_dlpack if self.v14 else self.from_dlpack_13  # type: ignore[attr-defined]
        cp.asarray = self.asarray  # type: ignore[attr-defined]
        cp.ascontiguousarray = lambda a: a if a._host.flags.c_contiguous else a.copy()  # type: ignore[attr-defined]
        cp.array = self.asarray  # type: ignore[attr-defined]
        cp.empty = self.empty  # type: ignore[attr-defined]
        cp.asnumpy = lambda a: a.get() if isinstance(a, cp.ndarray) else np.asarray(a)  # type: ignore[attr-defined]
        for name in ("bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                     "float16", "float32", "float64", "complex64", "complex128"):  # fmt: skip
            setattr(cp, name, getattr(np, name))
        cp.dtype = np.dtype  # type: ignore[attr-defined]
        return cp

    # --- the runtime --------------------------------------------------------------------------
    def set_device(self, device: int) -> None:
        if not 0 <= int(device) < core.STATE.device_count:
            raise CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")
        core.STATE.current_device = int(device)

    def pointer_get_attributes(self, ptr: int) -> Any:
        kind, device = core.pointer_attributes(ptr)
        return types.SimpleNamespace(type=MEMORY_TYPE[kind], device=device, devicePointer=ptr, hostPointer=0)

    def current_stream_ptr(self) -> int:
        return self.current_streams.get(core.STATE.current_device, 0)

    # --- arrays --------------------------------------------------------------------------------
    def asarray(self, obj: Any, dtype: Any = None) -> Any:
        if isinstance(obj, self.ndarray):
            # v14.2.0 core.pyx _array_from_cupy_ndarray lines 2854-2857: an array on another device
            # is copied onto the current one; on the current device only a dtype change copies
            if obj._device_id != core.STATE.current_device:
                return self.ndarray._from_host(obj._host.astype(dtype or obj.dtype), core.STATE.current_device)
            return obj if dtype is None else obj.astype(dtype)
        host = np.asarray(obj, dtype=dtype)
        # v14.2.0 cupy/_core/_dtype.pyx check_supported_dtype lines 69-76: a dtype with no C type name
        # (ml_dtypes' float8) -> ValueError; bfloat16 is held (v14.2.0 _dtype.pyx line 135).
        if host.dtype.kind == "V" and not (self.v14 and host.dtype.name == "bfloat16"):
            raise ValueError(f"Unsupported dtype {host.dtype}")
        return self.ndarray._from_host(host, core.STATE.current_device)

    def empty(self, shape: Any, dtype: Any = np.float32, device: int | None = None, kind: str = "device") -> Any:
        """``cupy.empty``; ``device`` and ``kind`` ("device", "managed") are the simulation's additions."""
        return self.ndarray._alloc(tuple(np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),), np.dtype(dtype),
                                   core.STATE.current_device if device is None else device, kind)  # fmt: skip

    # --- from_dlpack, 14.2 ------------------------------------------------------------------------
    def from_dlpack(self, array: Any, *, device: Any = None, copy: Any = None) -> Any:
        # v14.2.0 cupy/_core/dlpack.pyx from_dlpack, lines 542-605
        if not hasattr(array, "__dlpack_device__"):
            return self._import(array)  # a raw capsule, for backward compatibility (line 542-545)
        dev_type, dev_id = array.__dlpack_device__()
        if device is not None:
            raise NotImplementedError("from_dlpack() does not support device yet.")
        if dev_type in (KDL_CUDA, KDL_CUDA_MANAGED):
            prev = core.STATE.current_device
            try:
                self.set_device(dev_id)
                stream = self.current_stream_ptr()
                if stream == 0:
                    stream = LEGACY  # get_default_stream_ptr(): streamLegacy without PTDS
                LOG.add("cupy", "consumer_stream", stream)
                try:
                    capsule = array.__dlpack__(stream=stream, max_version=(1, 0), copy=copy)
                except TypeError:
                    if copy is not None:
                        raise
                    capsule = array.__dlpack__(stream=stream)
            finally:
                self.set_device(prev)
        elif dev_type == KDL_CPU:
            raise TypeError(
                "CPU arrays cannot be directly imported to CuPy. Use `cupy.array(numpy.from_dlpack(input))` instead."
            )
        else:
            raise TypeError(f"Unsupported array type: {dev_type}")
        return self._import(capsule)

    # --- from_dlpack, 13.3 ------------------------------------------------------------------------
    def from_dlpack_13(self, array: Any) -> Any:
        # v13.3.0 cupy/_core/dlpack.pyx from_dlpack, lines 375-412
        if not hasattr(array, "__dlpack_device__"):
            return self._import(array)
        dev_type, dev_id = array.__dlpack_device__()
        if dev_type in (KDL_CUDA, KDL_CUDA_MANAGED):
            prev = core.STATE.current_device
            try:
                self.set_device(dev_id)
                stream = self.current_stream_ptr()
                if stream == 0:
                    stream = LEGACY
                LOG.add("cupy", "consumer_stream", stream)
                capsule = array.__dlpack__(stream=stream)
            finally:
                self.set_device(prev)
        elif dev_type == KDL_CPU:
            raise TypeError(
                "CPU arrays cannot be directly imported to CuPy. Use `cupy.array(numpy.from_dlpack(input))` instead."
            )
        else:
            raise TypeError(f"Unsupported array type: {dev_type}")
        return self._import(capsule)

    def _import(self, capsule: Any) -> Any:
        """``_dlpack_to_cupy_array`` with ``DLPackMemory`` (the version's order of checks)."""
        LOG.add("cupy", "import")
        try:
            view = core.read_capsule(capsule)
        except (ValueError, TypeError, SystemError):
            view = None
        if self.v14:
            # v14.2.0 dlpack.pyx lines 303-331: take ownership first (rename), then check the version
            if view is None or view.name not in (b"dltensor", b"dltensor_versioned"):
                raise ValueError(
                    "A DLPack tensor object cannot be consumed multiple times "
                    f"(or object was not a DLPack capsule). Got: {capsule!r}"
                )
            view.take(capsule)
            if view.versioned and view.version is not None and view.version[0] > 1:
                view.delete()
                raise BufferError("DLPack exported too new major version.")
        elif view is None or view.name != b"dltensor":
            # v13.3.0 dlpack.pyx lines 173-175 (a versioned capsule lands here too: no crash)
            raise ValueError("A DLPack tensor object cannot be consumed multiple times")
        owned = self.v14  # 13.3: the pointer is held but the capsule keeps its name (the crash setup)

        def fail(err: BaseException) -> BaseException:
            if owned:
                view.delete()  # __dealloc__ (v14.2.0 lines 363-371): the only deleter call
                return err
            # v13.3.0: __dealloc__ (line 212) and the capsule destructor (line 84) both delete
            return SimulatedCrash(f"CuPy {self.version} double-frees the capsule after: {type(err).__name__}: {err}")

        dev_type, dev_id = view.device
        if dev_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
            # raised before dlm_tensor is stored in 13.3 (lines 184-188): no deleter runs here
            err = RuntimeError(
                "CuPy is built against CUDA, different from the backend that backs the incoming DLPack tensor"
            )
            if owned:
                view.delete()
            raise err
        data = view.tensor.data or 0
        # managed memory: "look up the actual physical device as the id from dl_tensor could be 0"
        device_id = self.pointer_get_attributes(data).device if dev_type == KDL_CUDA_MANAGED else dev_id
        code, bits, lanes = view.dtype
        if lanes != 1:
            raise fail(ValueError(f"vector dtypes (lanes={lanes}) is not supported"))
        table = {0: {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64},
                 1: {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64},
                 2: {16: np.float16, 32: np.float32, 64: np.float64},
                 5: {64: np.complex64, 128: np.complex128}, 6: {8: np.bool_}}  # fmt: skip
        names = {0: "int{}", 1: "uint{}", 2: "float{}", 5: "complex{}", 6: "{}-bit bool"}
        if code in table:
            if bits not in table[code]:
                raise fail(TypeError(names[code].format(bits) + " is not supported"))
            dtype: Any = np.dtype(table[code][bits])
        elif code == 4:
            bf16 = _bfloat16() if self.v14 else None
            if bits == 16 and bf16 is not None:
                dtype = bf16
            elif self.v14:
                raise fail(
                    NotImplementedError("CuPy does not support bfloat16. Please install ml_dtypes to use bfloat16.")
                )
            else:
                raise fail(NotImplementedError("CuPy does not support bfloat16 yet"))
        else:
            raise fail(TypeError(f"Unsupported dtype. dtype code: {code}"))
        if not self.v14:
            view.take(capsule)  # v13.3.0 lines 332/340: renamed only once everything passed
        itemsize = max(bits // 8, 1)
        strides = view.strides
        arr = self.ndarray._wrap(
            data + view.tensor.byte_offset, view.shape, dtype,
            None if strides is None else tuple(s * itemsize for s in strides), device_id,
            owner=view,
        )  # fmt: skip
        weakref.finalize(arr, view.delete)
        return arr


def _bfloat16() -> Any:
    # v14.2.0 cupy/_core/dlpack.pyx lines 22-29: bfloat16 only with NumPy >= 2.1.2 and ml_dtypes
    if np.lib.NumpyVersion(np.__version__) < "2.1.2":
        return None
    try:
        from ml_dtypes import bfloat16
    except ImportError:
        return None
    return np.dtype(bfloat16)


def _make_ndarray_class(stub: CuPyStub) -> type:
    class MemoryPointer:
        def __init__(self, ptr: int, device_id: int, mem: Any) -> None:
            self.ptr, self.device_id, self.mem = ptr, device_id, mem

    class ndarray:
        """A CuPy array over simulated device memory; ``_host`` is a NumPy view of the same bytes."""

        def __init__(self) -> None:
            raise TypeError("use cupy.asarray / cupy.from_dlpack")

        @classmethod
        def _wrap(cls, ptr: int, shape: Any, dtype: Any, strides: Any, device_id: int, owner: Any) -> ndarray:
            self = object.__new__(cls)
            self._owner = owner
            self._host = core.host_array(ptr, dtype, tuple(shape), strides, keepalive=owner)
            self._device_id = device_id
            return self

        @classmethod
        def _alloc(cls, shape: tuple[int, ...], dtype: np.dtype, device: int, kind: str = "device") -> ndarray:
            nbytes = int(np.prod(shape)) * dtype.itemsize
            mem = core.alloc(nbytes, device, kind)
            return cls._wrap(mem.base, shape, dtype, None, device, owner=mem)

        @classmethod
        def _from_host(cls, host: np.ndarray, device: int, kind: str = "device") -> ndarray:
            arr = cls._alloc(host.shape, host.dtype, device, kind)
            arr._host[...] = host
            return arr

        # --- attributes -------------------------------------------------------------------------
        shape = property(lambda self: self._host.shape)
        strides = property(lambda self: self._host.strides)
        dtype = property(lambda self: self._host.dtype)
        ndim = property(lambda self: self._host.ndim)
        size = property(lambda self: self._host.size)
        nbytes = property(lambda self: self._host.nbytes)
        itemsize = property(lambda self: self._host.itemsize)
        flags = property(lambda self: self._host.flags)

        @property
        def data(self) -> MemoryPointer:
            return MemoryPointer(self._host.__array_interface__["data"][0], self._device_id, self._owner)

        @property
        def device(self) -> Any:
            return stub.Device(self._device_id)

        @property
        def T(self) -> ndarray:
            return self._derive(self._host.T)

        def _derive(self, host: np.ndarray) -> ndarray:
            out = object.__new__(type(self))
            out._owner, out._host, out._device_id = self._owner, host, self._device_id
            return out

        def __getitem__(self, key: Any) -> ndarray:
            if isinstance(key, ndarray):  # fancy indexing: a new array (the kernel's output)
                return type(self)._from_host(self._host[key._host], self._device_id)
            return self._derive(self._host[key])

        def __lshift__(self, n: int) -> ndarray:  # elementwise kernels: computed on the host copy
            return type(self)._from_host(self._host << n, self._device_id)

        def transpose(self, *axes: Any) -> ndarray:
            return self._derive(self._host.transpose(*axes))

        def reshape(self, *shape: Any) -> ndarray:
            return self._derive(self._host.reshape(*shape))

        def view(self, dtype: Any = None) -> ndarray:
            # v14.2.0 core.pyx lines 926-990: get_dtype_with_itemsize(dtype, check_support=False)
            return self._derive(self._host if dtype is None else self._host.view(dtype))

        def copy(self) -> ndarray:
            return type(self)._from_host(np.ascontiguousarray(self._host), self._device_id)

        def astype(self, dtype: Any) -> ndarray:
            return type(self)._from_host(self._host.astype(dtype), self._device_id)

        def get(self, stream: Any = None) -> np.ndarray:
            return np.array(self._host, copy=True)

        def __array__(self, *args: Any, **kwargs: Any) -> Any:
            raise TypeError(
                "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy array explicitly."
            )

        def __len__(self) -> int:
            return len(self._host)

        def __repr__(self) -> str:
            return f"simcupy.ndarray({self._host!r}, device={self._device_id})"

        # --- DLPack -----------------------------------------------------------------------------
        def __dlpack_device__(self) -> tuple[int, int]:
            kind, _ = core.pointer_attributes(self.data.ptr)
            # v13.3.0 core.pyx 331-343 / v14.2.0 dlpack.pyx get_dlpack_device 100-117: the array's device id
            return (KDL_CUDA_MANAGED if kind == "managed" else KDL_CUDA, self._device_id)

        if stub.v14:

            def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                           copy: Any = None) -> Any:  # fmt: skip
                LOG.add("cupy", "export", stream, max_version=max_version, dl_device=dl_device, copy=copy)
                if max_version is not None and not isinstance(max_version, tuple):
                    raise TypeError(
                        f"Argument 'max_version' has incorrect type (expected tuple, got {type(max_version).__name__})"
                    )
                use_versioned = max_version is not None and max_version[0] >= 1
                to_cpu = False
                if dl_device is None or tuple(dl_device) == self.__dlpack_device__():
                    if copy is True:
                        raise BufferError("copy=True only supported for copy to CPU.")
                elif tuple(dl_device) == (KDL_CPU, 0):
                    if copy is False and self.__dlpack_device__()[0] != KDL_CUDA_MANAGED:
                        raise ValueError("GPU memory cannot be exported to CPU without copy.")
                    to_cpu = True
                else:
                    raise BufferError("unsupported device requested.")
                curr = stub.current_stream_ptr() or LEGACY  # lines 384-385, 415-416
                consumer = -2
                if not to_cpu:
                    if stream is None:
                        consumer = LEGACY
                    elif isinstance(stream, int):
                        consumer = stream
                    if consumer < -1:
                        raise ValueError(
                            f"On CUDA, the valid stream for the DLPack protocol is -1, 1, 2, or any larger value, but {stream} was provided"
                        )
                    elif consumer == 0:
                        warnings.warn(
                            "Stream 0 is passed from a library that you are converting to; CuPy assumes 0 as a legacy default "
                            "stream. Please report this problem to the library as this violates the DLPack protocol.",
                            stacklevel=2,
                        )
                        consumer = LEGACY
                if consumer >= 0 and consumer != curr:
                    LOG.add("cupy", "wait", consumer, producer_stream=curr)
                return self._capsule(use_versioned, to_cpu, copy is True, v14=True)

        else:

            def __dlpack__(self, *, stream: Any = None) -> Any:
                LOG.add("cupy", "export", stream)
                curr = stub.current_stream_ptr()
                if stream is None:
                    stream = LEGACY
                elif not isinstance(stream, int) or stream < -1:
                    raise ValueError(
                        f"On CUDA, the valid stream for the DLPack protocol is -1, 1, 2, or any larger value, but {stream} was provided"
                    )
                if stream == 0:
                    warnings.warn(
                        "Stream 0 is passed from a library that you are converting to; CuPy assumes 0 as a legacy default "
                        "stream. Please report this problem to the library as this violates the DLPack protocol.",
                        stacklevel=2,
                    )
                    stream = LEGACY
                if curr == 0:
                    curr = LEGACY
                if stream >= 0 and stream != curr:
                    LOG.add("cupy", "wait", stream, producer_stream=curr)
                return self._capsule(False, False, False, v14=False)

        def _capsule(self, versioned: bool, to_cpu: bool, ensure_copy: bool, v14: bool) -> Any:
            dt = self.dtype
            kind = dt.kind
            # By kind alone, bits = itemsize * 8 (v13.3.0 dlpack.pyx lines 134-147; v14.2.0 lines 75-97, 170-174):
            # ml_dtypes' float8_e5m2 is kind 'f' (ml_dtypes v0.6.0 _src/dtypes.cc line 164), so its capsule
            # says kDLFloat with 8 bits, as the H100 run of 2026-11-27 saw (CuPy 14.2.0 and 13.3.0).
            code = {"u": 1, "i": 0, "f": 2, "c": 5, "b": 6}.get(kind)
            if code is None:
                if v14 and dt.name == "bfloat16":
                    code = 4  # v14.2.0 dlpack.pyx lines 93-95
                elif v14:
                    raise BufferError("dtype is not supported for dlpack export")  # line 97
                else:
                    raise ValueError("Unknown dtype")  # v13.3.0 dlpack.pyx line 146
            mem_kind, _ = core.pointer_attributes(self.data.ptr)
            device_type = KDL_CUDA_MANAGED if mem_kind == "managed" else KDL_CUDA
            device_id = self._device_id
            if not v14 and mem_kind == "managed":
                device_id = 0  # v13.3.0 dlpack.pyx line 127: "make it accessible on CPU too"
            owner: Any = self
            ptr = self.data.ptr
            if to_cpu and (ensure_copy or mem_kind != "managed"):
                host = np.array(self._host, copy=True)
                owner, ptr, device_type, device_id = host, host.ctypes.data, KDL_CPU, 0
                strides = tuple(s // max(dt.itemsize, 1) for s in host.strides)
            else:
                strides = tuple(s // max(dt.itemsize, 1) for s in self.strides)
            flags = 2 if to_cpu and owner is not self else 0  # IS_COPIED
            return core.export(owner, ptr, self.shape, strides, (code, dt.itemsize * 8, 1), (device_type, device_id),
                               versioned, flags=flags)  # fmt: skip

    ndarray.__module__, ndarray.__qualname__ = "cupy", "ndarray"  # cupy._core.core.ndarray, re-exported
    return ndarray
