"""What adapters share besides the interface: the DLPack export call, the fast route's export
description, the ``AsIs`` signal, the ``StandIn`` of a copy, and package metadata lookups (nothing here
imports a framework)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

from .._errors import MissingFrameworkError

__all__ = ["AsIs", "StandIn", "FastExport", "export_capsule", "findable", "distribution_version", "import_framework"]

# What Adapter.fast_export returns: (kind, handle, guards, alias, relabel).
FastExport = tuple[int, Any, tuple[tuple[Any, ...], ...], "str | None", "dict[Any, tuple[Any, int]] | None"]


class GpuExport(NamedTuple):
    """How an array of one exact type on a GPU takes the fast route's GPU half (``Adapter.fast_gpu_export``)."""

    guards: tuple[tuple[Any, ...], ...]  # as FastExport's, checked before anything is exported
    device_method: str  # x.<device_method>() says where x is: (type, id), or the id of ...
    device_type: int  # ... this device type (0: the method gives the type too)
    kind: int  # 1: the DLPack C exchange API (no synchronisation), 0: __dlpack__(stream=, max_version=), 3: without max_version
    alias: str | None = None  # an attribute whose value is exported instead of x (where there is no CPU entry)
    current_device: Any = None  # current_device() -> id where the producer's handshake needs x's device current
    relabels: Any = None  # dtype -> (None, triple): its capsule labels the dtype wrongly; the route writes triple


class AsIs(Exception):  # a signal, caught in _convert
    """Raised by ``Adapter.export_failed`` when the target should get ``value`` itself, not an
    import of a capsule (a torch tensor that requires grad, handed to torch: its graph is kept).
    ``copied``: where copy=True asks for a copy, the call that makes it (``result()``), made only
    when the conversion runs: ``dlbridge.explain`` copies nothing."""

    def __init__(self, value: Any, copied: Callable[[], Any] | None = None) -> None:
        super().__init__()
        self.value = value
        self.copied = copied

    def result(self) -> Any:
        return self.value if self.copied is None else self.copied()


class StandIn:
    """What ``Adapter.export_failed`` (or the pipeline's export) returns where a copy of the array is
    right to share in its place (a torch tensor's conjugate bit resolved, a byte-swapped or read-only
    array copied): the copy is made only when the conversion runs, never by ``dlbridge.explain``.

    ``make()``: the copy's capsule (the copy made, C order, writable, exported as asked).
    ``describe()``: a capsule with the copy's dtype and device over memory that exists already (the
    array's own, or none), of the kind the copy's will be, read by explain and never imported;
    ``shape``: the copy's shape where that capsule's is another (None: the same); ``versioned``: the
    copy's capsule kind where that capsule's is another (None: the same). ``why``: the step, as
    explain says it.
    """

    __slots__ = ("describe", "make", "shape", "versioned", "why")

    def __init__(self, make: Callable[[], Any], describe: Callable[[], Any], why: str,
                 shape: tuple[int, ...] | None = None) -> None:  # fmt: skip
        self.make, self.describe, self.why, self.shape = make, describe, why, shape
        self.versioned: bool | None = None


@cache
def findable(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it ("mlx.core" without mlx: False;
    ``find_spec`` of a submodule raises ModuleNotFoundError where its package is missing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package; a module whose __spec__ is None
        return False


def export_capsule(obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
    """Call ``obj.__dlpack__`` the way the protocol allows, oldest signatures included."""
    if max_version is None:
        return obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
    try:
        return obj.__dlpack__(stream=stream, max_version=max_version)
    except TypeError as err:
        # Producers older than DLPack 1.0 don't take max_version (nor, older still, stream). Any other
        # TypeError is the producer's own, raised from inside its __dlpack__: asking again would run it
        # (and its side effects) twice.
        if not _arguments_refused(err):
            raise
        return obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()


def _arguments_refused(err: TypeError) -> bool:
    """Whether ``err`` refuses a call's arguments, as CPython's and C extensions' argument parsers say
    it ("got an unexpected keyword argument 'max_version'", "takes no arguments (2 given)", "'stream'
    is an invalid keyword argument"): every form names an argument (probe 2026-11-27: Python 3.11,
    NumPy 1.26's __dlpack__)."""
    text = str(err)
    return "argument" in text or "max_version" in text


def distribution_version(module: str) -> str | None:
    """The installed version of the distribution that provides ``module``, from the package
    metadata (nothing is imported); None if none is installed."""
    from importlib import metadata

    # The distribution may be named otherwise (cupy-cuda12x, ...): ask the metadata which one
    # provides the module, and only when the plain name is not found.
    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        pass
    for dist in metadata.packages_distributions().get(module, ()):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def import_framework(module: str, unsafe_after: tuple[str, ...], pip_name: str = "") -> Any:
    """Import ``module``, unless a module in ``unsafe_after`` is already loaded (importing it then crashes
    the process): MissingFrameworkError naming the fix either way (``pip install <pip_name>``)."""
    if module not in sys.modules:
        crashers = [m for m in unsafe_after if m in sys.modules]
        if crashers:
            raise MissingFrameworkError(
                f"dlbridge needs {module} for this conversion, but {', '.join(crashers)} is already "
                f"imported in this process, and importing {module} after it crashes the process; "
                f"import {module} before {crashers[0]} (e.g. at the top of your program)"
            )
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingFrameworkError(
            f"dlbridge needs {module} for this conversion, but importing it failed ({err}); "
            f"install it (pip install {pip_name or module})"
        ) from err
