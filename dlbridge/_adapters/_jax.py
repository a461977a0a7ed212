from __future__ import annotations

import os
from functools import cached_property
from typing import Any, ClassVar

from .._capabilities import Capabilities
from .._capsule._edit import relabel
from .._capsule._read import GPU_CODES
from .._dtypes import BY_NAME
from .._errors import DLBridgeError, ProducerError, UnsupportedDtypeError
from ._base import Adapter, Prober, export_capsule
from ._fast import FastExport, FastRoute, GpuExport

_X64 = frozenset({"int64", "uint64", "float64", "complex128"})


class JaxProber(Prober):
    """The report's, tests' and benchmarks' JAX helpers."""

    adapter: JaxAdapter

    def doctor_notes(self, version: str) -> list[str]:
        if os.environ.get("JAX_ENABLE_X64", "").lower() in ("1", "true", "yes"):
            return []
        return [f"{self.adapter.display} {version} runs without 64-bit types (JAX_ENABLE_X64 unset): it narrows "
                "int64/float64/complex128 to 32 bits on import; dlbridge refuses them instead of narrowing."]  # fmt: skip

    def dtype_for(self, name: str) -> Any:
        return getattr(self.mod.numpy, name)

    def make_array(self, ref: Any, device: str) -> Any:
        jax = self.mod
        return jax.device_put(ref, jax.devices("gpu" if device == "cuda" else "cpu")[0])

    def host_bytes(self, arr: Any) -> Any:
        import numpy as np

        return np.ascontiguousarray(np.asarray(arr)).reshape(-1).view(np.uint8).copy()

    def to_host(self, arr: Any) -> Any:
        import numpy as np

        return np.array(arr, copy=True)

    def gpu_name(self) -> str | None:
        if not self.adapter.has_cuda():
            return None
        return str(self.mod.devices("gpu")[0].device_kind)


class JaxAdapter(FastRoute, Adapter):
    device_codes = frozenset({1, 2, 10})
    display = "JAX"
    prober_class = JaxProber
    distributions = ("jax",)
    companions = ("jaxlib",)
    extra = "jax"
    producer_devices = ("cpu", "cuda")
    # Several report workers share one GPU: JAX must not grab 75% of its memory in each of them.
    worker_env: ClassVar[dict[str, str]] = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    # JAX hands DLPack's stream straight to XLA, which would wait on -1 as a stream handle; None
    # makes it wait for the buffer on the host instead. As a consumer it imports on its own stream.
    no_sync_stream = None
    honours_stream = False
    # jax/_src/dlpack.py from_dlpack (jax 0.10.2, lines 264-272) asks the device for a stream
    # (get_stream_for_external_ready_events, a new one each call) and passes it to __dlpack__.
    asks_producer_stream = True
    mutable_arrays = False  # jax.Array is immutable: its legacy capsules reach NumPy read-only
    # JAX 0.12 flags its versioned capsules READ_ONLY and exports legacy ones all the same (probe
    # 2026-11-25, jax 0.12.0: __dlpack__() a legacy capsule, __dlpack__(max_version=(1, 0)) READ_ONLY).
    exports_readonly_legacy = True
    _devices: dict[tuple[int, int], Any]
    _narrowed: tuple[Capabilities, Capabilities] | None = None  # (row, row without 64-bit dtypes)

    @cached_property
    def _dlpack(self) -> Any:
        import jax.dlpack

        return jax.dlpack

    def _plain_export(self, cls: type) -> bool:
        # The concrete array class (jaxlib's ArrayImpl), not tracers; and only where JAX's own
        # export needs no correction (cannot_export / exports_uint8 rows).
        base = self.array_class()
        if base is None or cls.__name__ != "ArrayImpl" or not issubclass(cls, base):
            return False
        return not (self.caps.cannot_export or self.caps.exports_uint8)

    def fast_gpu_export(self, cls: type) -> GpuExport | None:
        # Where its arrays may be on a GPU the route asks each one's device (__dlpack_device__: the
        # device's local_hardware_id, jax/_src/array.py) and hands its __dlpack__ the consumer's stream:
        # JAX makes that stream wait itself. A sharded array has no one device: its __dlpack_device__
        # raises, which declines it with nothing exported (the pipeline says what to do).
        return GpuExport((), "__dlpack_device__", 0, 0) if self._plain_export(cls) else None

    def fast_export(self, cls: type) -> FastExport | None:
        if not self._plain_export(cls):
            return None
        # Where JAX has a GPU backend its arrays may live there: the route then asks each array's device
        # before any export (``fast_gpu_export``'s __dlpack_device__; exporting to find out would block on
        # a GPU array's computation: no stream), and replays a CPU array's export on the CPU half.
        if self.has_cuda():
            return None
        return (0, None, (), None, None)

    def import_alignment(self, caps: Capabilities) -> int:
        # Older JAX crashes copying an unaligned CPU buffer; the pipeline copies through the host.
        return 64 if caps.copy_crashes_unaligned else 1

    def caps_switch(self) -> tuple[Any, str] | None:
        return (self.mod.config, "jax_enable_x64")  # it can be switched at run time: see capabilities()

    def capabilities(self) -> Capabilities:
        caps = self.caps
        if self.mod.config.jax_enable_x64:  # read every call: it can be switched at runtime
            return caps
        # Without x64 JAX narrows 64-bit imports to 32 bits (a copy with other values).
        narrowed = self._narrowed
        if narrowed is None or narrowed[0] is not caps:  # built once per capability row
            narrowed = self._narrowed = (caps, caps._replace(imports=caps.imports - _X64, holds=caps.holds - _X64))
        return narrowed[1]

    def hint(self, dtype: str) -> str | None:
        if dtype in _X64 and not self.mod.config.jax_enable_x64:
            return 'JAX runs without 64-bit types: jax.config.update("jax_enable_x64", True) lets it hold them.'
        return None

    def device_of(self, obj: Any) -> tuple[int, int]:
        try:
            return super().device_of(obj)
        except BufferError:
            # A sharded array has no one device (JAX refuses __dlpack_device__): its first shard's
            # device, so that the export, where the target is known, names the fix (export_failed).
            if self.sharded_over(obj) > 1:
                return super().device_of(obj.addressable_shards[0].data)
            raise

    def export_failed(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None,
                      copy: bool | None, target: Adapter | None, dtype: Any) -> Any:  # fmt: skip
        if self.sharded_over(obj) > 1:
            raise self.sharded_error(obj, target.name if target is not None else None)
        refused = self._cannot_export(obj)  # (the fast route asks __dlpack__ itself, without export()'s check)
        if refused is not None:
            raise refused
        return super().export_failed(obj, stream=stream, max_version=max_version, copy=copy, target=target, dtype=dtype)

    @staticmethod
    def sharded_over(obj: Any) -> int:
        """How many devices ``obj``'s sharding spans (0: not a concrete array with a sharding)."""
        try:
            return len(obj.sharding.device_set)
        except MemoryError:
            raise
        except Exception:  # a tracer, a deleted array, ...: not a sharding question
            return 0

    def sharded_error(self, obj: Any, target: str | None) -> ProducerError:
        """The refusal of an array that spans several devices: no single buffer to share."""
        to = target or "torch"
        spread = len(obj.sharding.device_set)
        if getattr(obj, "is_fully_replicated", False):
            what = f"replicated on {spread} devices (each holds all of it)"
            one = "; x.addressable_data(0) is one device's copy, which dlbridge shares zero-copy"
        else:
            what = f"sharded over {spread} devices ({type(obj.sharding).__name__})"
            one = ""
        return ProducerError(
            f"the JAX array ({obj.dtype}{list(obj.shape)}) is {what}, so it has no single buffer to hand over "
            f'(JAX refuses DLPack for it); dlbridge.shards(x, "{to}") gives each addressable shard zero-copy '
            f"with its index (dlbridge.from_shards(parts, x.sharding) rebuilds the sharded array), or "
            f"jax.device_get(x) / np.asarray(x) gathers a copy on the host{one}"
        )

    def state_error(self, obj: Any) -> DLBridgeError | None:
        if isinstance(obj, self.mod.core.Tracer):
            return ProducerError(
                f"a JAX tracer ({type(obj).__name__}, {getattr(obj, 'aval', '?')}) is a placeholder inside "
                "jax.jit (or another transform) with no data to share; call it outside jax.jit, or use "
                "jax.pure_callback to run it on the concrete values"
            )
        deleted = getattr(obj, "is_deleted", None)
        if deleted is not None and deleted():
            return ProducerError(
                f"the JAX array ({obj.dtype}{list(obj.shape)}) was deleted (x.delete(), or donated to a jitted "
                "function) and has no data left; convert it before it is deleted or donated"
            )
        if self.sharded_over(obj) > 1:
            return self.sharded_error(obj, None)
        return None

    def has_cuda(self) -> bool:
        try:
            return bool(self.mod.devices("gpu"))
        except MemoryError:
            raise
        except Exception:  # RuntimeError: no GPU backend
            return False

    def _device(self, device: tuple[int, int]) -> Any:
        """This process's JAX device for a DLPack device (by local hardware id, as jax.dlpack does)."""
        cache = self.__dict__.setdefault("_devices", {})
        found = cache.get(device)
        if found is None:
            kind = "cpu" if device[0] == 1 else "gpu"
            found = next((d for d in self.mod.local_devices(backend=kind) if d.local_hardware_id == device[1]), None)
            if found is None:
                raise RuntimeError(f"JAX has no local {kind.upper()} with hardware id {device[1]}")
            cache[device] = found
        return found

    def cpu_devices(self) -> int:
        # XLA_FLAGS=--xla_force_host_platform_device_count=N gives N CPU devices over the same memory.
        return len(self.mod.local_devices(backend="cpu"))

    def current_stream(self, device: tuple[int, int]) -> int | None:
        if device[0] not in GPU_CODES:
            return None
        # What jax.dlpack.from_dlpack itself passes to the producer.
        stream: int | None = self._device(device).get_stream_for_external_ready_events()
        return stream

    def _cannot_export(self, obj: Any) -> UnsupportedDtypeError | None:
        if not self.caps.cannot_export or obj.dtype.name not in self.caps.cannot_export:
            return None
        return UnsupportedDtypeError(
            f"JAX {self.version} cannot export {obj.dtype.name} arrays through DLPack (JAX 0.5.3 and newer "
            f"can); upgrade jax, or hand over its bits: x.view(jnp.uint{obj.dtype.itemsize * 8}) (a copy in XLA)"
        )

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        refused = self._cannot_export(obj)
        if refused is not None:
            raise refused
        capsule = export_capsule(obj, stream=stream, max_version=max_version)
        mislabelled = self.caps.exports_uint8
        if mislabelled and obj.dtype.name in mislabelled:  # JAX < 0.4.24 says uint8 for bool
            relabel(capsule, BY_NAME[obj.dtype.name])
        return capsule

    def from_dlpack(self) -> Any:
        return self._dlpack.from_dlpack

    def view(self, arr: Any, dtype: str) -> Any:
        # An XLA op (a copy): only used where no zero-copy path exists.
        return self.mod.lax.bitcast_convert_type(arr, getattr(self.mod.numpy, dtype))

    def data_ptr(self, arr: Any) -> int:
        return int(arr.unsafe_buffer_pointer())

    def fast_view_address(self) -> tuple[tuple[str, bool], ...]:
        return (("unsafe_buffer_pointer", True),)  # data_ptr's path, read in C by the route's view record

    def copy(self, arr: Any) -> Any:
        if self.caps.copy_crashes_unaligned:
            # JAX < 0.4.35 segfaults copying an array imported from an unaligned buffer (see the
            # capability row): copy through the host instead (NumPy reads the buffer, JAX uploads it).
            import numpy as np

            return self.mod.device_put(np.array(arr), next(iter(arr.devices())))
        return self.mod.numpy.array(arr, copy=True)

    def contiguous(self, arr: Any) -> Any:
        return arr  # JAX arrays are always dense

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        return self.mod.device_put(arr, self._device(device))

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        return self.mod.device_put(host, self._device(device))

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        jnp = self.mod.numpy
        return self.mod.lax.bitcast_convert_type(u16.astype(jnp.uint32) << 16, jnp.float32)

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        jnp = self.mod.numpy
        return jnp.asarray(table, dtype=jnp.float32)[u8]

    def parse_device(self, device: Any) -> str | tuple[int, int] | None:
        if not type(device).__module__.startswith(("jax", "jaxlib")):
            return None
        platform = getattr(device, "platform", None)
        if not isinstance(platform, str):
            return None
        # By local_hardware_id, the number DLPack and jax.dlpack use (jax/_src/array.py
        # __dlpack_device__, jax/_src/dlpack.py device_from_local_hardware_id); device.id is JAX's
        # own numbering, which differs from it across processes and with CUDA_VISIBLE_DEVICES.
        # CPU devices keep JAX's id (XLA's --xla_force_host_platform_device_count numbers them so).
        hardware = getattr(device, "local_hardware_id", None) if platform == "gpu" else None
        index = hardware if isinstance(hardware, int) else getattr(device, "id", 0)
        return f"{'cuda' if platform == 'gpu' else platform}:{index}"
