"""The adapter interface: everything the conversion needs to know about one framework.

``Adapter`` is an abstract base class: its docstring says what a new framework implements. The fast
route's hooks are an optional part of their own (``_fast.FastRoute``); the report's, tests' and
benchmarks' helpers are not part of it either (``_probe.Prober``).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from .._capabilities import Capabilities, capabilities
from .._capsule._carriers import Carrier
from .._errors import DLBridgeError, MissingFrameworkError
from ._probe import Prober
from ._support import AsIs, distribution_version, export_capsule, findable, import_framework

if TYPE_CHECKING:
    from .._rows import Framework

__all__ = ["Adapter", "AsIs", "Prober", "export_capsule"]

# What every adapter class sets (Adapter.__init__ checks them).
_REQUIRED = ("display", "prober_class")


class Adapter(ABC):
    """One framework, as the conversion sees it.

    A new framework is one module in ``_adapters/_<name>.py`` with a subclass of this class, and one in
    ``_rows/<name>.py`` with its registry entry (``FRAMEWORK``, a ``dlbridge._rows.Framework``: its
    names, its array class, where this subclass lives) and its capability rows (``ROWS``), listed in
    ``_rows.MODULES``; the README's "adding a framework" says what else a shipped one adds (its
    ``to_<name>`` in ``dlbridge/_api.py``, an install extra). The subclass:

    - sets the class attributes below: ``display`` and ``prober_class`` are required (checked when the
      adapter is made); the others have defaults that fit a CPU framework with a plain ``from_dlpack``;
    - implements every ``abstractmethod`` (the array operations the conversion needs: ``view``,
      ``data_ptr``, ``copy``, ``contiguous``, ``to_device``, ``bf16_bits_to_f32``, ``lookup_f32``);
      a missing one makes ``TypeError: Can't instantiate abstract class`` when the adapter is made;
    - implements ``from_host`` when the framework cannot live on the CPU (1 not in ``device_codes``);
    - overrides the other methods only where the framework differs from their documented default
      (its own device objects, streams, states its exporter refuses);
    - mixes in ``_fast.FastRoute`` (``class MyAdapter(FastRoute, Adapter)``) for the fast route, which
      replays the common conversions without the pipeline; without it every conversion takes the
      pipeline, with the same results;
    - names a ``Prober`` subclass (``_probe.py``) for the report, tests and benchmarks: how to
      make its arrays and read them back. It lives in the same file, above the adapter.

    An adapter is made from its registry entry when first needed (a conversion, the detection of one of
    its arrays once its framework is loaded, the report), without importing its framework: ``mod``
    imports it on first use inside a conversion, and detection reads ``sys.modules`` only. Keep framework
    knowledge in these two files (tests/test_structure.py checks that nothing else names a framework).
    """

    # --- identity: its registry entry (names, array class, aliases, host), set when the adapter is made --
    framework: Framework
    name: str  # framework.name: to_<name>(), convert(x, "<name>"), the table's consumer
    module: str  # framework.module: what ``import`` loads

    display: ClassVar[str]  # how people write it ("PyTorch"): in messages, the report and doctor
    # The report's, tests' and benchmarks' helpers for it (a Prober subclass; ``adapter.prober``).
    prober_class: ClassVar[type[Prober]]

    # --- installation (doctor, report and messages; nothing is imported) ----------------------
    # PyPI distributions to read its version from, in order (doctor; nothing is imported).
    distributions: ClassVar[tuple[str, ...]] = ()
    # Other distributions whose versions the report and doctor list beside it (compiled halves, dtype add-ons).
    companions: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str] = ""  # dlbridge's install extra: pip install "dlbridge[<extra>]"
    pip_name: ClassVar[str] = ""  # what to pip install for it, where that is not ``module`` ("mlx[cpu]")
    # Modules that, already imported, make importing this framework crash the process.
    unsafe_after: ClassVar[tuple[str, ...]] = ()
    # Environment defaults for processes that import it beside others (the report's workers).
    worker_env: ClassVar[dict[str, str]] = {}
    producer_devices: ClassVar[tuple[str, ...]] = ("cpu",)  # where the report makes source arrays
    # For messages: the call that makes one of its arrays from Python data ("numpy.asarray").
    wrap_call: ClassVar[str] = ""
    # For messages: how to hand over one of its read-only arrays where the consumer cannot hold one.
    readonly_fix: ClassVar[str] = "pass copy=True, or make the array writeable"
    # The module that gives its arrays the dtypes it lacks natively (bf16/fp8), if any.
    dtype_addon: ClassVar[str] = ""
    # For ``dlbridge doctor``, where it imports capsules read-only: what dlbridge does about it.
    readonly_imports_note: ClassVar[str] = "dlbridge gives the memory of mutable producers back writable and zero-copy."

    # --- behaviour the conversion reads ---------------------------------------------------------
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
    # Whether it exports a read-only array's legacy capsule (unflagged: a legacy capsule cannot say
    # read-only) instead of refusing it as NumPy does (JAX): read by ``_handoff.decide``.
    exports_readonly_legacy: ClassVar[bool] = False

    def __init__(self, framework: Framework) -> None:
        self.framework, self.name, self.module = framework, framework.name, framework.module
        cls = type(self)
        missing = [a for a in _REQUIRED if not getattr(cls, a, None)]
        if missing:
            raise TypeError(f"adapter {cls.__name__} does not set {', '.join(missing)}; every adapter sets "
                            f"{', '.join(_REQUIRED)} (see dlbridge._adapters._base.Adapter)")  # fmt: skip
        if 1 not in cls.device_codes and cls.from_host is Adapter.from_host:
            raise TypeError(f"adapter {cls.__name__} cannot live on the CPU (device_codes "
                            f"{sorted(cls.device_codes)}), so it must implement from_host()")  # fmt: skip

    @cached_property
    def prober(self) -> Prober:
        """The report's, tests' and benchmarks' helpers for this framework (``prober_class``)."""
        return self.prober_class(self)

    # --- detection (never imports) -----------------------------------------------------
    def array_class(self) -> type | None:
        """The framework's array base class, if the framework is loaded (read from sys.modules)."""
        module, attribute = self.framework.array_type
        mod = sys.modules.get(module)
        cls = getattr(mod, attribute, None) if mod is not None else None
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
        """The framework's module, imported now if it is not yet (MissingFrameworkError naming the fix)."""
        return import_framework(self.module, self.unsafe_after, self.pip_name or self.module)

    def check_installed(self) -> None:
        """Raise MissingFrameworkError if the framework is not installed (imports nothing; cached)."""
        if self.module not in sys.modules and not findable(self.module):
            raise MissingFrameworkError(
                f"dlbridge needs {self.module} for this conversion, but it is not installed; "
                f"install it (pip install {self.pip_name or self.module})"
            )

    def installed_version(self) -> str:
        """The installed version without importing the framework: ``__version__`` if it is
        loaded, else the package metadata. Raises MissingFrameworkError if it is not installed."""
        loaded = sys.modules.get(self.module)
        version = getattr(loaded, "__version__", None) if loaded is not None else None
        if isinstance(version, str):
            return version
        found = distribution_version(self.module)
        if found is not None:
            return found
        raise MissingFrameworkError(
            f"{self.display} is not installed, so dlbridge cannot tell its version; install it "
            f"(pip install {self.pip_name or self.module}), or pass the version to ask about, e.g. "
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
    def export_retries(self, err: Exception) -> bool:
        """Whether ``export`` asks the producer again after its ``__dlpack__(max_version=...)`` raised
        ``err`` (another way the protocol allows): then an export the fast route saw fail with ``err``
        is made again by the pipeline; any other failure is handled without asking the producer twice."""
        return False

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

    def device_count(self, device_type: int) -> int | None:
        """How many GPUs of DLPack type ``device_type`` (one of ``device_codes``) this framework can
        use in this process: 0 where it sees none (a CPU-only build); None where it sees some but
        cannot number them cheaply (any index is then tried)."""
        return None if self.has_cuda() else 0

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

    def readonly_alias(self, arr: Any) -> Any | None:
        """A read-only ``arr`` handed to its own framework as a read-only alias, where DLPack cannot
        carry it (NumPy < 2.1); None: go through DLPack."""
        return None

    def writable(self, arr: Any) -> Any:
        """``arr`` as a writable array over the same memory (consumers with ``readonly_imports``)."""
        return arr

    def exportable_copy(self, arr: Any) -> Any:
        """A writable copy of ``arr`` that DLPack can carry (what ``copy=True`` exports in a read-only
        array's place where its own export is refused): ``copy`` unless the framework's copies keep
        something DLPack has no word for (NumPy: a byte order other than this machine's)."""
        return self.copy(arr)

    def empty_copy(self, arr: Any) -> tuple[Any, tuple[int, ...]] | None:
        """Where no capsule of ``arr``'s own memory describes its ``exportable_copy`` (pyarrow < 26: an
        immutable Tensor exports only a legacy capsule, which cannot say read-only; a byte-swapped or
        odd-strided NumPy array): an array of the copy's dtype with no elements, and ``arr``'s shape,
        which ``explain`` reads the copy's description from. None: ``arr``'s capsule does."""
        return None

    # --- array operations the conversion needs (every framework provides them) ----------------
    @abstractmethod
    def view(self, arr: Any, dtype: str) -> Any:
        """Zero-copy reinterpretation of ``arr`` as ``dtype`` (a dlbridge dtype name, same itemsize)."""

    @abstractmethod
    def data_ptr(self, arr: Any) -> int:
        """The address of ``arr``'s first element (what the pipeline compares to tell a share from a copy)."""

    @abstractmethod
    def copy(self, arr: Any) -> Any:
        """A copy of ``arr`` on its device, in memory of its own (``copy=True``)."""

    @abstractmethod
    def contiguous(self, arr: Any) -> Any:
        """A C-contiguous array with the same values (a copy when needed)."""

    @abstractmethod
    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        """A copy of ``arr`` on ``device``: any of ``device_codes``, and always the CPU (1, 0)."""

    def from_host(self, host: Any, device: tuple[int, int]) -> Any:
        """Copy a NumPy array onto ``device``. Required where the framework cannot live on the CPU
        (1 not in ``device_codes``); the others get CPU capsules and move them with ``to_device``."""
        raise NotImplementedError(f"{self.name} imports CPU data itself; from_host is for GPU-only frameworks")

    @abstractmethod
    def bf16_bits_to_f32(self, u16: Any) -> Any:
        """float32 values of bfloat16 bits held as uint16 (an upcast; a new array on ``u16``'s device)."""

    @abstractmethod
    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        """``table[u8]`` as float32 (fp8/fp6/fp4 upcasts: one entry per bit pattern)."""

    def is_readonly(self, arr: Any) -> bool:
        """Whether writes to ``arr`` through its framework's API are impossible (a read-only flag,
        or an immutable array type)."""
        return not self.mutable_arrays

    def __repr__(self) -> str:
        return f"<dlbridge adapter {self.name}>"
