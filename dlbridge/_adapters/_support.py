"""What adapters share besides the interface: the DLPack export call, the fast route's export
description, the ``AsIs`` signal, and package metadata lookups (nothing here imports a framework)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from functools import cache
from typing import Any, NamedTuple

from .._errors import MissingFrameworkError

__all__ = ["AsIs", "FastExport", "export_capsule", "findable", "distribution_version", "import_framework"]

# What Adapter.fast_export returns: (kind, handle, guards, alias, relabel).
FastExport = tuple[int, Any, tuple[tuple[Any, bool, Any], ...], "str | None", "dict[Any, tuple[Any, int]] | None"]


class GpuExport(NamedTuple):
    """How an array of one exact type on a GPU takes the fast route's GPU half (``Adapter.fast_gpu_export``)."""

    guards: tuple[tuple[Any, bool, Any], ...]  # as FastExport's, checked before anything is exported
    device_method: str  # x.<device_method>() says where x is: (type, id), or the id of ...
    device_type: int  # ... this device type (0: the method gives the type too)
    kind: int  # 1: the DLPack C exchange API (no synchronisation), 0: __dlpack__(stream=, max_version=), 3: without max_version
    alias: str | None = None  # a method whose result is exported instead of x (where there is no CPU entry)
    current_device: Any = None  # current_device() -> id where the producer's handshake needs x's device current
    relabels: Any = None  # dtype -> (None, triple): its capsule labels the dtype wrongly; the route writes triple


class AsIs(Exception):  # a signal, caught in _convert
    """Raised by ``Adapter.export_failed`` when the target should get ``value`` itself, not an
    import of a capsule (a torch tensor that requires grad, handed to torch: its graph is kept)."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


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
    except TypeError:
        # Producers older than DLPack 1.0 don't take max_version.
        return obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()


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
