"""The adapter interface: everything dlbridge needs to know about one framework.

An adapter is built without importing its framework; ``mod`` imports it on first use inside
a conversion. Detection reads ``sys.modules`` only, so asking "is this a torch tensor?" never
imports torch. Adding a framework means adding one subclass and listing it in ``__init__``.
"""

from __future__ import annotations

import importlib.util
import sys
from contextlib import AbstractContextManager, nullcontext
from functools import cache, cached_property
from typing import Any, ClassVar

from .._capabilities import Capabilities, capabilities
from .._capsule import Carrier
from .._errors import DLBridgeError, MissingFrameworkError

__all__ = ["Adapter", "AsIs", "FastExport", "export_capsule"]

# What Adapter.fast_export returns: (kind, handle, guards, alias, relabel).
FastExport = tuple[int, Any, tuple[tuple[str, bool, Any], ...], "str | None", "dict[Any, tuple[Any, int]] | None"]


class AsIs(Exception):  # a signal, caught in _convert
    """Raised by ``Adapter.export_failed`` when the target should get ``value`` itself, not an
    import of a capsule (a torch tensor that requires grad, handed to torch: its graph is kept)."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


@cache
def _findable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def export_capsule(obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
    """Call ``obj.__dlpack__`` the way the protocol allows, oldest signatures included."""
    if max_version is None:
        return obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
    try:
        return obj.__dlpack__(stream=stream, max_version=max_version)
    except TypeError:
        # Producers older than DLPack 1.0 don't take max_version.
        return obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()


class Adapter:
    name: ClassVar[str]
    module: ClassVar[str]  # what ``import`` loads
    display: ClassVar[str] = ""  # how people write it ("PyTorch")
    # PyPI distributions to read its version from, in order (doctor; nothing is imported).
    distributions: ClassVar[tuple[str, ...]] = ()
    # Other distributions whose versions the report and doctor list beside it (compiled halves, dtype add-ons).
    companions: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str] = ""  # dlbridge's install extra: pip install "dlbridge[<extra>]"
    producer_devices: ClassVar[tuple[str, ...]] = ("cpu",)  # where the report makes source arrays
    # Modules that, already imported, make importing this framework crash the process.
    unsafe_after: ClassVar[tuple[str, ...]] = ()
    # Environment defaults for processes that import it beside others (the report's workers).
    worker_env: ClassVar[dict[str, str]] = {}
    # The host framework: CPU arrays any DLPack CPU capsule can land in (staging for copies, and the
    # report's reference arrays). Exactly one adapter is the host.
    host: ClassVar[bool] = False
    aliases: ClassVar[tuple[str, ...]] = ()
    # Other modules that name it as a target (convert(x, "jax.numpy")); unlike aliases, not CLI names.
    module_aliases: ClassVar[tuple[str, ...]] = ()
    array_type: ClassVar[tuple[str, str]]  # (module in sys.modules, attribute) of its array class
    producer_modules: ClassVar[tuple[str, ...]] = ()  # top-level __module__ names of its arrays
    device_codes: ClassVar[frozenset[int]] = frozenset({1})  # DLPack device types it can live on
    # What to pass as a producer's __dlpack__(stream=) for "no synchronisation" (DLPack says -1).
    no_sync_stream: ClassVar[int | None] = -1
    # Whether, as a consumer, it reads on the stream the producer was told (False: it imports on a
    # stream of its own choosing, so a caller's stream= cannot be honoured).
    honours_stream: ClassVar[bool] = True
    # Whether, as a consumer, its from_dlpack asks the producer for a stream of its own choosing
    # (JAX): the pipeline then hands it a DeferredCarrier that exports with that stream.
    asks_producer_stream: ClassVar[bool] = False
    # Whether its arrays may be written (JAX's may not): decides whether NumPy < 2.2, which makes
    # every import read-only, gets this producer's memory back writable, as NumPy 2.2+ would.
    mutable_arrays: ClassVar[bool] = True
    # For messages: the call that makes one of its arrays from Python data ("numpy.asarray").
    wrap_call: ClassVar[str] = ""
    # The module that gives its arrays the dtypes it lacks natively (bf16/fp8), if any.
    dtype_addon: ClassVar[str] = ""
    # For ``dlbridge doctor``, where it imports capsules read-only: what dlbridge does about it.
    readonly_imports_note: ClassVar[str] = "dlbridge gives the memory of mutable producers back writable and zero-copy."

    # --- detection (never imports) -----------------------------------------------------
    def array_class(self) -> type | None:
        """The framework's array base class, if the framework is loaded (read from sys.modules)."""
        mod = sys.modules.get(self.array_type[0])
        cls = getattr(mod, self.array_type[1], None) if mod is not None else None
        return cls if isinstance(cls, type) else None

    def is_array(self, obj: object) -> bool:
        cls = self.array_class()
        return cls is not None and isinstance(obj, cls)

    def for_type(self, cls: type) -> Adapter:
        """The adapter for arrays of class ``cls`` (one of this framework's array classes): this
        one, or a stand-in that refuses a subclass whose state DLPack would drop (a mask)."""
        return self

    def loaded(self) -> bool:
        return self.module in sys.modules

    def device_of(self, obj: Any) -> tuple[int, int]:
        """Where ``obj`` lives, as a DLPack (device type, id); a None id (some producers) means 0."""
        dev = obj.__dlpack_device__()
        return (int(dev[0]), 0 if dev[1] is None else int(dev[1]))

    def parse_device(self, device: Any) -> str | tuple[int, int] | None:
        """A device object of this framework as "cpu"/"cuda:N" or (type, id); None if it is not one."""
        return None

    @property
    def home_device(self) -> tuple[int, int]:
        """Where a copy lands when the caller names no device: the CPU if it can live there."""
        return (1, 0) if 1 in self.device_codes else (min(self.device_codes), 0)

    # --- framework access (imports on first use) ----------------------------------------
    @cached_property
    def mod(self) -> Any:
        import importlib

        if self.module not in sys.modules:
            crashers = [m for m in self.unsafe_after if m in sys.modules]
            if crashers:
                raise MissingFrameworkError(
                    f"dlbridge needs {self.module} for this conversion, but {', '.join(crashers)} is already "
                    f"imported in this process, and importing {self.module} after it crashes the process; "
                    f"import {self.module} before {crashers[0]} (e.g. at the top of your program)"
                )
        try:
            return importlib.import_module(self.module)
        except ImportError as err:
            raise MissingFrameworkError(
                f"dlbridge needs {self.module} for this conversion, but importing it failed ({err}); "
                f"install it (pip install {self.module})"
            ) from err

    def check_installed(self) -> None:
        """Raise MissingFrameworkError if the framework is not installed (imports nothing; cached)."""
        if self.module not in sys.modules and not _findable(self.module):
            raise MissingFrameworkError(
                f"dlbridge needs {self.module} for this conversion, but it is not installed; "
                f"install it (pip install {self.module})"
            )

    def installed_version(self) -> str:
        """The installed version without importing the framework: ``__version__`` if it is
        loaded, else the package metadata. Raises MissingFrameworkError if it is not installed."""
        loaded = sys.modules.get(self.module)
        version = getattr(loaded, "__version__", None) if loaded is not None else None
        if isinstance(version, str):
            return version
        from importlib import metadata

        # The distribution may be named otherwise (cupy-cuda12x, ...): ask the metadata which one
        # provides the module, and only when the plain name is not found.
        try:
            return metadata.version(self.module)
        except metadata.PackageNotFoundError:
            pass
        for dist in metadata.packages_distributions().get(self.module, ()):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        raise MissingFrameworkError(
            f"{self.name} is not installed, so dlbridge cannot tell its version; install it "
            f"(pip install {self.module}), or pass the version to ask about, e.g. "
            f'capabilities("{self.name}", "1.0")'
        )

    @cached_property
    def version(self) -> str:
        return str(getattr(self.mod, "__version__", "0"))

    @cached_property
    def caps(self) -> Capabilities:
        """This framework's row in the capability table (the version is fixed for the process)."""
        return capabilities(self.name, self.version)

    def hint(self, dtype: str) -> str | None:
        """A runtime setting that would let this framework hold ``dtype`` (for error messages)."""
        return None

    def capabilities(self) -> Capabilities:
        """Capabilities, adjusted for runtime settings (JAX's x64 mode, ...)."""
        return self.caps

    # --- producing ------------------------------------------------------------------------
    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        return export_capsule(obj, stream=stream, max_version=max_version)

    # --- unusual states: consulted only after the producer failed (free on the common path) --
    def export_failed(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None,
                      copy: bool | None, target: Adapter | None, dtype: Any) -> Any:  # fmt: skip
        """After ``export`` raised: a capsule of a stand-in that is right to share (a resolved
        copy), or raise an error naming the fix (or ``AsIs``); None when the failure is not known.

        ``target`` None: the capsule is only described (``inspect``), never imported, so a
        capsule of the same memory will do.
        """
        error = self.state_error(obj)
        if error is not None:
            raise error
        return None

    def symbolic_error(self, cls: type) -> DLBridgeError | None:
        """For ``cls``, a placeholder this framework traces with (no data, often no ``__dlpack__``):
        an error saying what to do instead; None when ``cls`` is not one."""
        return None

    def state_error(self, obj: Any) -> DLBridgeError | None:
        """An error naming the fix when ``obj`` is in a state no ``copy=`` can help (sparse, meta,
        quantized, deleted, traced), else None. Called only after one of its DLPack methods failed."""
        return None

    def opaque(self, obj: Any) -> bool:
        """Whether ``obj``, one of this framework's array objects, holds no data DLPack can carry at
        all (TensorFlow strings, variants, resource handles): ``export`` refuses it, and a guard
        passes it through as it does values that are not arrays."""
        return False

    def has_cuda(self) -> bool:
        """Whether this framework sees a CUDA device in this process (imports it)."""
        return False

    def cpu_devices(self) -> int:
        """How many CPU devices this framework numbers (all of them the host's memory)."""
        return 1

    def current_stream(self, device: tuple[int, int]) -> int | None:
        """The stream this framework would use on ``device``, as DLPack's ``stream=`` integer."""
        return None

    def on_device(self, device: tuple[int, int]) -> AbstractContextManager[Any]:
        """Make ``device`` this framework's current GPU (for exports and allocations), if it is not."""
        return nullcontext()

    # --- consuming --------------------------------------------------------------------------
    def from_dlpack(self) -> Any:
        """The framework's own ``from_dlpack`` function."""
        return self.mod.from_dlpack

    @cached_property
    def _from_dlpack(self) -> Any:
        return self.from_dlpack()

    def import_capsule(self, capsule: Any, device: tuple[int, int], caps: Capabilities) -> Any:
        """Hand a ready capsule to the consumer: bare where it takes raw capsules (cheapest; the
        handshake is already done), else wrapped in a single-use ``Carrier`` (also where bare
        capsules are deprecated: JAX 0.4.35-0.7.1 warn on each one)."""
        if caps.raw_capsules and not caps.raw_capsules_deprecated:
            return self._from_dlpack(capsule)
        return self._from_dlpack(Carrier(capsule, device))

    # --- the fast route (see _route.py): how this framework's own arrays are exported and imported
    # there; None declines, and the full pipeline handles every conversion. --------------------------
    # Whether capabilities() can change during the process (the route then checks it on every call).
    dynamic_capabilities: ClassVar[bool] = False

    def fast_export(self, cls: type) -> FastExport | None:
        """How arrays of exactly type ``cls`` are exported on the fast route: (kind, handle, guards,
        alias, relabel). kind 0 calls ``x.__dlpack__``, 1 the type's DLPack C exchange API (handle:
        its capsule), 2 ``handle(x)``, 3 ``x.__dlpack__()`` without ``max_version`` (before DLPack 1.0). Each guard ``(attribute, call, expected)`` must give
        ``expected`` (by identity), else the pipeline converts ``x``; ``alias`` names a method whose
        result is exported instead of ``x``; ``relabel`` maps ``x.dtype`` to ``(d, triple)``: export
        ``x.view(d)`` and write dtype ``code | bits << 8 | lanes << 16`` into its capsule (dtypes the
        framework holds but cannot export). None: arrays of ``cls`` always take the pipeline."""
        return (0, None, (), None, None) if cls is self.array_class() else None

    def fast_import(self, caps: Capabilities) -> tuple[int, Any, Any] | None:
        """How the fast route hands a capsule to this framework: (kind, importer, exchange API
        capsule). kind 0 calls ``importer(capsule)``, 1 ``importer(carrier)``, 2 imports through the
        exchange API (``importer(capsule)`` where it is not compiled). None: never on the fast route."""
        if caps.readonly_imports:  # its imports need writable() afterwards: the pipeline does that
            return None
        return (0 if caps.takes_raw_capsules else 1, self._from_dlpack, None)

    def fast_self_import(self) -> tuple[type, Any] | None:
        """(array type, f): the fast route returns ``f(x)`` for ``x`` of exactly that type, this
        framework's own array, without any capsule: what its ``from_dlpack`` would return (a new
        array object over the same memory, same dtype), where ``f`` is cheaper. Only for the dtypes
        the pipeline converted that way before (the route learns them one by one), so dtypes the
        pipeline refuses are refused however warm the route is."""
        return None

    def import_alignment(self, caps: Capabilities) -> int:
        """The data alignment (bytes) below which the fast route leaves an import to the pipeline."""
        return 1

    def readonly_alias(self, arr: Any) -> Any | None:
        """A read-only ``arr`` handed to its own framework as a read-only alias, where DLPack cannot
        carry it (NumPy < 2.1); None: go through DLPack."""
        return None

    def writable(self, arr: Any) -> Any:
        """``arr`` as a writable array over the same memory (consumers with ``readonly_imports``)."""
        return arr

    def view(self, arr: Any, dtype: str) -> Any:
        """Zero-copy reinterpretation as ``dtype`` (same itemsize)."""
        raise NotImplementedError

    def viewer(self, dtype: str) -> Any:
        """``view(_, dtype)`` as a one-argument callable (the fast route's reinterpret step)."""
        return lambda arr: self.view(arr, dtype)

    def data_ptr(self, arr: Any) -> int:
        raise NotImplementedError

    def copy(self, arr: Any) -> Any:
        raise NotImplementedError

    def contiguous(self, arr: Any) -> Any:
        """A C-contiguous array with the same values (a copy when needed)."""
        raise NotImplementedError

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        """A copy of ``arr`` on ``device``: any of ``device_codes``, and always the CPU (1, 0)."""
        raise NotImplementedError

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        """Copy a NumPy array onto ``device`` (for frameworks that cannot live on the CPU)."""
        raise NotImplementedError

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        raise NotImplementedError

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        raise NotImplementedError

    # --- report, test and benchmark helpers (off the hot path; import lazily) -----------------
    def make_array(self, ref: Any, device: str) -> Any:
        """A new array of this framework with ``ref``'s dtype, shape and exact bits, on "cpu" or "cuda".

        ``ref`` is a NumPy array (ml_dtypes for bf16/fp8). Raises when the framework cannot make it.
        """
        raise NotImplementedError(f"{self.name} cannot make arrays here")

    def make_from_bits(self, data: bytes, dtype: str, shape: tuple[int, ...], device: str) -> Any:
        """Like ``make_array``, from raw C-order element bytes (what the report's worker uses, so that
        a framework that can build arrays without NumPy is probed on a machine without NumPy)."""
        from . import HOST

        ref = HOST.mod.frombuffer(data, dtype="u1").view(HOST.dtype_for(dtype)).reshape(shape)
        return self.make_array(ref, device)

    def transpose(self, arr: Any) -> Any | None:
        """A transposed view of the 2-D ``arr`` sharing its memory (strides swapped); None where
        this framework's arrays are always dense (the report then makes no transposed source)."""
        return None

    def make_readonly(self, arr: Any) -> Any | None:
        """A read-only view of ``arr`` whose capsules carry DLPack's READ_ONLY flag; None where the
        framework has no such arrays (the report then makes no read-only source)."""
        return None

    def is_readonly(self, arr: Any) -> bool:
        """Whether writes to ``arr`` through its framework's API are impossible (a read-only flag,
        or an immutable array type)."""
        return not self.mutable_arrays

    def raw_bytes(self, arr: Any) -> bytes:
        """``arr``'s elements' raw bytes, C order (``host_bytes`` as a bytes object)."""
        return bytes(self.host_bytes(arr).tobytes())

    def dtype_for(self, name: str) -> Any:
        """This framework's dtype object for a dlbridge dtype name."""
        return getattr(self.mod, name)

    def shape_of(self, arr: Any) -> tuple[int, ...]:
        """``arr``'s shape as a tuple of ints (ONNX Runtime's is a method)."""
        return tuple(arr.shape)

    def dtype_str(self, arr: Any) -> str:
        """dlbridge's name for ``arr``'s dtype ("bfloat16", "float8_e4m3fn", "bool", ...)."""
        dtype = arr.dtype
        name = getattr(dtype, "name", None)
        return name if isinstance(name, str) else str(dtype).rpartition(".")[2]

    def host_bytes(self, arr: Any) -> Any:
        """``arr``'s elements' raw bytes, C order, as a flat NumPy uint8 array (copied to the host)."""
        raise NotImplementedError

    def to_host(self, arr: Any) -> Any:
        """A NumPy copy of ``arr`` with its logical dtype (ml_dtypes for bf16/fp8)."""
        raise NotImplementedError

    def doctor_notes(self, version: str) -> list[str]:
        """Hazards of this framework that depend on its settings, not on the capability table
        (for ``dlbridge doctor``: must not import the framework)."""
        return []

    def gpu_name(self) -> str | None:
        """The name of GPU 0 as this framework reports it, or None."""
        return None

    def __repr__(self) -> str:
        return f"<dlbridge adapter {self.name}>"
