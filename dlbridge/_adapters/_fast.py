"""The fast route's part of an adapter: how a framework's own arrays are exported, and capsules imported,
on the route that replays the common conversions (``dlbridge/_route``), without the pipeline.

Optional: an adapter mixes it in (``class TorchAdapter(FastRoute, Adapter)``) to take the route; the
defaults fit a CPU framework with a plain ``__dlpack__`` and ``from_dlpack``. An adapter without it
converts through the pipeline every time, with the same results. Each hook may also decline (None) for
one array type or one capability row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ._support import FastExport, GpuExport

if TYPE_CHECKING:
    from .._capabilities import Capabilities
    from ._base import Adapter

    _Base = Adapter  # to the checker a FastRoute is an Adapter (its hooks use the adapter's methods) ...
else:
    _Base = object  # ... at run time a mixin: class MyAdapter(FastRoute, Adapter)

__all__ = ["FastRoute", "FastExport", "GpuExport"]


class FastRoute(_Base):
    """The fast route's hooks (see the module docstring); None declines, and the pipeline converts."""

    # A method of the array whose result holds its memory: where the compiled route exports x through the
    # exchange API, it exports x itself and holds x.<export_keeps>() with the tensor until the consumer frees
    # it, instead of exporting fast_export's alias (the alias still serves every other export). None: the alias.
    export_keeps: ClassVar[str | None] = None

    def caps_switch(self) -> tuple[Any, str] | None:
        """``(object, attribute)`` whose value ``capabilities()`` depends on where it can change during the
        process (the route reads it on every call, and declines where it changed); None: fixed."""
        return None

    def fast_export(self, cls: type) -> FastExport | None:
        """How arrays of exactly type ``cls`` are exported on the fast route: (kind, handle, guards,
        alias, relabel). kind 0 calls ``x.__dlpack__``, 1 the type's DLPack C exchange API (handle:
        its capsule), 2 ``handle(x)``, 3 ``x.__dlpack__()`` without ``max_version`` (before DLPack 1.0).
        Each guard ``(attribute, call, expected)`` must give ``expected`` (by identity), else the
        pipeline converts ``x``, unless its optional fourth item ``unless()`` is True (asked only then);
        ``alias`` names an attribute whose value is exported instead of ``x``;
        ``relabel`` maps ``x.dtype`` to ``(d, triple)``: export ``x.view(d)`` and write dtype
        ``code | bits << 8 | lanes << 16`` into its capsule (dtypes the framework holds but cannot
        export). None: arrays of ``cls`` always take the pipeline. Where the framework's rows say its
        capsules mislabel a dtype (``exports_uint8``), only kind 2 (an export through this adapter, which
        relabels them) is kept: the route never replays such a producer's raw capsule."""
        return (0, None, (), None, None) if cls is self.array_class() else None

    def fast_gpu_export(self, cls: type) -> GpuExport | None:
        """How an array of exactly type ``cls`` that may be on a GPU takes the fast route's GPU half
        (``_route/_gpu.py``): its guards (each ``(attribute, call, expected)`` as in ``fast_export``, checked
        before anything is exported), how to ask its device, and how it is exported with the stream
        handshake. None: GPU arrays of ``cls`` always take the pipeline."""
        return None

    def fast_stream_query(self) -> Any:
        """How the fast route asks this framework, as a consumer, for its current stream on a device: its
        DLPack C exchange API capsule (``current_work_stream``), or ``(ask, attribute)`` where
        ``ask(device id).attribute`` is the stream's handle; None: GPU arrays into it take the pipeline."""
        return None

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

    def fast_view_address(self) -> tuple[tuple[str, bool], ...] | None:
        """The attribute path from an array this framework imported to its data address, each step
        ``(name, call)``: ``getattr``, then called where ``call``. The compiled route reads it (and the
        array's ``shape``) in C to record a view it replays (``_logical.remembering``); only where
        ``view_memory`` is ``(data_ptr(arr), tuple(arr.shape))`` with ``data_ptr`` that path. None: the
        route calls ``view_memory``."""
        return None

    def import_alignment(self, caps: Capabilities) -> int:
        """The data alignment (bytes) below which this framework's import of host memory is another one
        (the pipeline's, or ``fast_unaligned_import``'s)."""
        return 1

    def fast_unaligned_import(self, caps: Capabilities) -> Any:
        """How the fast route imports a capsule of host memory below ``import_alignment``: a callable
        taking what ``fast_import``'s importer takes (the import the pipeline's ``import_capsule`` makes
        of such a capsule: a copy). None: such capsules take the pipeline."""
        return None

    def view_memory(self, arr: Any) -> tuple[int, tuple[int, ...]]:
        """(data address, shape) of an array this framework imported from a dense capsule: what the
        route records for a view it replays (``_logical.remembering``)."""
        return self.data_ptr(arr), tuple(arr.shape)

    def viewer(self, dtype: str) -> Any:
        """``view(_, dtype)`` as a one-argument callable (the route's zero-copy reinterpret step)."""
        return lambda arr: self.view(arr, dtype)
