"""The adapter interface: everything dlbridge needs to know about one framework.

An adapter is built without importing its framework; ``mod`` imports it on first use inside
a conversion. Detection reads ``sys.modules`` only, so asking "is this a torch tensor?" never
imports torch. Adding a framework means adding one subclass and listing it in ``__init__``.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from functools import cached_property
from typing import Any, ClassVar

from .._capabilities import Capabilities, capabilities
from .._capsule import Carrier
from .._errors import MissingFrameworkError

__all__ = ["Adapter", "export_capsule"]


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
    aliases: ClassVar[tuple[str, ...]] = ()
    array_type: ClassVar[tuple[str, str]]  # (module in sys.modules, attribute) of its array class
    producer_modules: ClassVar[tuple[str, ...]] = ()  # top-level __module__ names of its arrays
    device_codes: ClassVar[frozenset[int]] = frozenset({1})  # DLPack device types it can live on
    # What to pass as a producer's __dlpack__(stream=) for "no synchronisation" (DLPack says -1).
    no_sync_stream: ClassVar[int | None] = -1
    # Whether, as a consumer, it reads on the stream the producer was told (False: it imports on a
    # stream of its own choosing, so a caller's stream= cannot be honoured).
    honours_stream: ClassVar[bool] = True
    # Whether its arrays may be written (JAX's may not): decides whether NumPy < 2.2, which makes
    # every import read-only, gets this producer's memory back writable, as NumPy 2.2+ would.
    mutable_arrays: ClassVar[bool] = True

    # --- detection (never imports) -----------------------------------------------------
    def is_array(self, obj: object) -> bool:
        mod = sys.modules.get(self.array_type[0])
        cls = getattr(mod, self.array_type[1], None) if mod is not None else None
        return cls is not None and isinstance(obj, cls)

    def loaded(self) -> bool:
        return self.module in sys.modules

    # --- framework access (imports on first use) ----------------------------------------
    @cached_property
    def mod(self) -> Any:
        import importlib

        try:
            return importlib.import_module(self.module)
        except ImportError as err:
            raise MissingFrameworkError(
                f"dlbridge needs {self.module} for this conversion, but importing it failed ({err}); "
                f"install it (pip install {self.module})"
            ) from err

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

    def has_cuda(self) -> bool:
        """Whether this framework sees a CUDA device in this process (imports it)."""
        return False

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

    def view(self, arr: Any, dtype: str) -> Any:
        """Zero-copy reinterpretation as ``dtype`` (same itemsize)."""
        raise NotImplementedError

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

    def __repr__(self) -> str:
        return f"<dlbridge adapter {self.name}>"
