"""Apache Arrow (pyarrow) as a producer: ``pyarrow.Array`` and ``pyarrow.Tensor`` into any target.

Arrow arrays are immutable (``mutable_arrays``: read-only whatever their capsules say, see
``_handoff.decide``). Their ``__dlpack__`` flags versioned capsules READ_ONLY (this adapter flags a
mutable Tensor's too), but a legacy capsule (``max_version=None``) cannot say so and comes out
writable: for a consumer that reads only legacy capsules this adapter refuses the export of an
immutable array as read-only, so the pipeline raises ReadOnlyError, or with ``copy=True`` exports a
writable copy (a ``pyarrow.Tensor`` over a NumPy copy); a mutable Tensor's legacy capsule is read-only
memory all the same (``decide``: ``copy=True`` or ``readonly="drop"``). ``pyarrow.Tensor`` refuses legacy export itself when it is immutable ("Legacy
DLPack support is not implemented for immutable tensors"). ``__dlpack__`` refuses arrays with
nulls, bit-packed booleans and non-numeric types; ``ChunkedArray`` has none (probe 2026-11-25,
pyarrow 26.0.1). dlbridge does not convert into pyarrow (no ``to_pyarrow``).

pyarrow before 26 (below dlbridge's floor) makes legacy capsules only: its ``__dlpack__`` takes no
``max_version``, and an immutable Tensor's capsule has a NULL data pointer (capability row
``exports_legacy_only``). Such arrays cannot say they are read-only, so every immutable one is
refused as read-only before pyarrow is asked (``ReadOnlyError`` naming the upgrade, or ``copy=True``).
"""

from __future__ import annotations

import warnings
from typing import Any

from .._capsule._abi import FLAG_READ_ONLY
from .._capsule._edit import add_flags
from .._capsule._read import read
from .._errors import DLBridgeError, NotAnArrayError, ProducerError
from ._base import Adapter, Prober, export_capsule

_READ_ONLY = "read-only: Arrow arrays are immutable, and a legacy DLPack capsule cannot say so"


def _describe(obj: Any) -> str:
    shape = f"{list(obj.shape)}" if hasattr(obj, "shape") else f"[{len(obj)}]"
    return f"a pyarrow {type(obj).__name__} of {obj.type}{shape}"


class PyarrowProber(Prober):
    """The report's and tests' helpers for Arrow arrays (a source only: rows of the report, no column)."""

    adapter: PyarrowAdapter

    def make_array(self, ref: Any, device: str) -> Any:
        if device != "cpu":
            raise ValueError(f"Arrow arrays live on the CPU only, not {device}")
        return self.mod.Tensor.from_numpy(ref)

    def dtype_str(self, arr: Any) -> str:
        import numpy as np  # an Arrow type's NumPy equivalent names it as dlbridge does

        # (not DataType.to_pandas_dtype: pyarrow 25 needs pandas for it)
        for name in (
            "float16",
            "float32",
            "float64",
            "bool",
            *(f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64)),
        ):
            if arr.type == self.mod.from_numpy_dtype(np.dtype(name)):
                return name
        return str(arr.type)

    def host_bytes(self, arr: Any) -> Any:
        import numpy as np

        return np.ascontiguousarray(arr.to_numpy()).reshape(-1).view(np.uint8).copy()

    def to_host(self, arr: Any) -> Any:
        return arr.to_numpy().copy()


class PyarrowAdapter(Adapter):  # no FastRoute: the pipeline reads every capsule's READ_ONLY flag
    prober_class = PyarrowProber
    display = "Apache Arrow"
    distributions = ("pyarrow",)
    extra = "pyarrow"
    mutable_arrays = False
    wrap_call = "pyarrow.array"

    def is_array(self, obj: object) -> bool:
        mod = self.mod if self.loaded() else None
        return mod is not None and isinstance(obj, (mod.Array, mod.Tensor))

    @property
    def readonly_fix(self) -> str:  # type: ignore[override]  # the base's constant, by version here
        fix = "pass copy=True (Arrow arrays are immutable: there is no writable one to make)"
        if self.loaded() and self.caps.exports_legacy_only:
            return (f"{fix}, or upgrade pyarrow (pip install -U \"pyarrow>=26\"): pyarrow {self.version} makes "
                    "legacy capsules only, which cannot say read-only (26 flags them READ_ONLY)")  # fmt: skip
        return fix

    def empty_copy(self, arr: Any) -> tuple[Any, tuple[int, ...]] | None:
        if not self.caps.exports_legacy_only:
            return None  # pyarrow >= 26: the array's own versioned capsule says its memory
        import numpy as np

        try:
            if isinstance(arr, self.mod.Tensor):
                host, shape = arr.to_numpy(), tuple(arr.shape)  # zero-copy: a Tensor is one dense buffer
            else:
                host, shape = arr.to_numpy(zero_copy_only=True), (len(arr),)
            return self.mod.Tensor.from_numpy(np.empty(0, host.dtype)), shape  # mutable: its legacy capsule has data
        except (self.mod.ArrowException, TypeError):  # nulls, bit-packed booleans, dates: DLPack carries none of
            return None  # them, and explain says the export's own refusal

    def export(self, obj: Any, *, stream: int | None, max_version: tuple[int, int] | None) -> Any:
        mutable = bool(getattr(obj, "is_mutable", False))
        legacy = max_version is None or self.caps.exports_legacy_only  # pyarrow < 26 makes no other capsule
        if legacy and not mutable:  # (pyarrow < 26: an immutable Tensor's legacy capsule has no data at all)
            raise BufferError(f"{_describe(obj)} is {_READ_ONLY}")
        if legacy:
            # A mutable Tensor to a legacy-only consumer: pyarrow warns that legacy capsules are
            # deprecated, which is the consumer's doing, not the caller's.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return export_capsule(obj, stream=stream, max_version=None)
        capsule = export_capsule(obj, stream=stream, max_version=max_version)
        if not mutable and not read(capsule).versioned:  # a pyarrow without DLPack 1.0 the rows do not know
            raise BufferError(f"{_describe(obj)} is {_READ_ONLY}")
        # Arrow arrays are immutable (mutable_arrays): a Tensor over writable memory (is_mutable) is read-only
        # too, so its capsule says so, as pyarrow's own says for every other Arrow array (probe 2026-11-27,
        # pyarrow 26.0.1: Tensor.from_numpy(writable).__dlpack__(max_version=(1, 0)) is not flagged READ_ONLY).
        add_flags(capsule, FLAG_READ_ONLY)
        return capsule

    def symbolic_error(self, cls: type) -> DLBridgeError | None:
        fix = {
            "ChunkedArray": "x.combine_chunks() (one contiguous Array; a copy when there are several chunks)",
            "Table": "one column, e.g. table.column('x').combine_chunks()",
            "RecordBatch": "one column, e.g. batch.column('x')",
        }.get(cls.__name__)
        if fix is None or not cls.__module__.startswith("pyarrow"):
            return None
        return NotAnArrayError(f"a pyarrow {cls.__name__} has no DLPack export (__dlpack__); pass {fix}")

    def state_error(self, obj: Any) -> DLBridgeError | None:
        if not isinstance(obj, self.mod.Array):
            return None
        kind = obj.type
        if obj.null_count:
            return ProducerError(
                f"{_describe(obj)} has {obj.null_count} null(s), which DLPack cannot carry. Pass "
                "x.fill_null(value) for an array without nulls, or x.to_numpy(zero_copy_only=False) for a NumPy "
                "copy (nulls become NaN, the integers float64)"
            )
        if self.mod.types.is_boolean(kind):
            return ProducerError(
                f"{_describe(obj)}: Arrow packs booleans as bits, and DLPack's bool is one byte per value. Pass "
                "x.to_numpy(zero_copy_only=False) for a NumPy bool copy, or pyarrow.compute.cast(x, pyarrow.uint8()) "
                "for 0/1 bytes"
            )
        return ProducerError(
            f"{_describe(obj)}: DLPack carries fixed-width numbers only. Pass x.cast(...) to a numeric type "
            "(e.g. pyarrow.int64() for timestamps and dates), or, for dictionary arrays, x.indices"
        )

    # --- copies (Arrow has no mutable arrays: copies are Tensors over NumPy memory) -------------
    def copy(self, arr: Any) -> Any:
        import numpy as np

        host = arr.to_numpy() if isinstance(arr, self.mod.Tensor) else arr.to_numpy(zero_copy_only=False)
        return self.mod.Tensor.from_numpy(np.array(host, copy=True, order="C"))

    def contiguous(self, arr: Any) -> Any:
        if not isinstance(arr, self.mod.Tensor):
            return arr  # an Array's values are one dense buffer
        # Tensor.is_contiguous is also true for column-major tensors: the strides tell row-major.
        step, row_major = arr.type.bit_width // 8, list[int]()
        for n in reversed(arr.shape):
            row_major.insert(0, step)
            step *= n
        dense = all(s == r for s, r, n in zip(arr.strides, row_major, arr.shape) if n > 1)
        return arr if dense else self.copy(arr)

    def data_ptr(self, arr: Any) -> int:
        if isinstance(arr, self.mod.Tensor):
            return int(arr.to_numpy().ctypes.data)  # Tensor.to_numpy is zero-copy (any pyarrow version)
        # An Array's values buffer plus its slice offset (no capsule: pyarrow < 26 exports legacy ones only)
        return int(arr.buffers()[1].address) + int(arr.offset) * int(arr.type.bit_width) // 8

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        return self.copy(arr)  # CPU only

    # --- a source only: dlbridge never hands Arrow an import to finish ------------------------
    def view(self, arr: Any, dtype: str) -> Any:
        raise TypeError(f"dlbridge does not convert into {self.display} (a source only)")

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        raise TypeError(f"dlbridge does not convert into {self.display} (a source only)")

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        raise TypeError(f"dlbridge does not convert into {self.display} (a source only)")
