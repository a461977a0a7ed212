"""The prober interface: how the report, the tests and the benchmarks make and read one framework's
arrays. No conversion calls it; each adapter names its prober class (``Adapter.prober_class``) and
hands out one instance as ``adapter.prober``. It reads its adapter through ``Probed`` (what it needs of
one), so that this module and the adapter's (``_base``) do not import each other.

A framework's prober lives in its adapter file, next to the adapter. It must say how to make an
array from a NumPy reference (``make_array``) and how to read one back (``host_bytes``,
``to_host``); the rest have defaults that fit most frameworks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

__all__ = ["Prober", "Probed"]


class Probed(Protocol):
    """What a prober reads of its adapter (an ``Adapter``; a framework's prober may name its own class)."""

    @property
    def name(self) -> str: ...
    @property
    def display(self) -> str: ...
    @property
    def mod(self) -> Any: ...
    @property
    def version(self) -> str: ...
    def has_cuda(self) -> bool: ...


class Prober(ABC):
    """The report's, tests' and benchmarks' helpers for one framework (off the conversion path;
    they import the framework, and NumPy where they say so)."""

    adapter: Probed

    def __init__(self, adapter: Probed) -> None:
        self.adapter = adapter

    @property
    def mod(self) -> Any:
        """The framework's module (imported on first use, as ``Adapter.mod``)."""
        return self.adapter.mod

    # --- making arrays ----------------------------------------------------------------------
    @abstractmethod
    def make_array(self, ref: Any, device: str) -> Any:
        """A new array of this framework with ``ref``'s dtype, shape and exact bits, on "cpu" or "cuda".

        ``ref`` is a NumPy array (ml_dtypes for bf16/fp8). Raises when the framework cannot make it.
        """

    def make_from_bits(self, data: bytes, dtype: str, shape: tuple[int, ...], device: str) -> Any | None:
        """Like ``make_array``, from raw C-order element bytes, where the framework can build an array
        without NumPy (so that it is probed on a machine without NumPy); None: the report's worker makes
        the reference array with the host framework and calls ``make_array``."""
        return None

    def transpose(self, arr: Any) -> Any | None:
        """A transposed view of the 2-D ``arr`` sharing its memory (strides swapped); None where
        this framework's arrays are always dense (the report then makes no transposed source)."""
        return None

    def make_readonly(self, arr: Any) -> Any | None:
        """A read-only view of ``arr`` whose capsules carry DLPack's READ_ONLY flag; None where the
        framework has no such arrays (the report then makes no read-only source)."""
        return None

    def dtype_for(self, name: str) -> Any:
        """This framework's dtype object for a dlbridge dtype name."""
        return getattr(self.mod, name)

    # --- reading arrays back ----------------------------------------------------------------
    def shape_of(self, arr: Any) -> tuple[int, ...]:
        """``arr``'s shape as a tuple of ints (ONNX Runtime's is a method)."""
        return tuple(arr.shape)

    def dtype_str(self, arr: Any) -> str:
        """dlbridge's name for ``arr``'s dtype ("bfloat16", "float8_e4m3fn", "bool", ...)."""
        dtype = arr.dtype
        name = getattr(dtype, "name", None)
        return name if isinstance(name, str) else str(dtype).rpartition(".")[2]

    @abstractmethod
    def host_bytes(self, arr: Any) -> Any:
        """``arr``'s elements' raw bytes, C order, as a flat NumPy uint8 array (copied to the host)."""

    @abstractmethod
    def to_host(self, arr: Any) -> Any:
        """A NumPy copy of ``arr`` with its logical dtype (ml_dtypes for bf16/fp8)."""

    def raw_bytes(self, arr: Any) -> bytes:
        """``arr``'s elements' raw bytes, C order (``host_bytes`` as a bytes object)."""
        return bytes(self.host_bytes(arr).tobytes())

    # --- the machine --------------------------------------------------------------------------
    def doctor_notes(self, version: str) -> list[str]:
        """Hazards of this framework that depend on its settings, not on the capability table
        (for ``dlbridge doctor``: must not import the framework)."""
        return []

    def gpu_name(self) -> str | None:
        """The name of GPU 0 as this framework reports it, or None."""
        return None

    def __repr__(self) -> str:
        return f"<dlbridge prober {self.adapter.name}>"
