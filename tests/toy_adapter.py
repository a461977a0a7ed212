"""The toy framework of tests/toyarray.py, made a dlbridge framework with what a new framework needs and
nothing else: its registry entry and capability rows (what ``dlbridge/_rows/<name>.py`` holds for a
shipped framework) and its adapter (what ``dlbridge/_adapters/_<name>.py`` holds), here in one module.
``dlbridge._adapters.register(FRAMEWORK, ROWS)`` adds them for the process."""

from __future__ import annotations

from typing import Any

from dlbridge._adapters import Adapter, Prober
from dlbridge._adapters._fast import FastRoute
from dlbridge._adapters._numpy import numpy_dtype
from dlbridge._rows import Framework, row
from dlbridge._rows._common import CORE

FRAMEWORK = Framework(
    name="toy",
    module="tests.toyarray",
    array_type=("tests.toyarray", "ToyArray"),
    adapter="tests.toy_adapter:ToyAdapter",
    producer_modules=("tests",),
)
_SOURCE = "probe 2026-11-25 (numpy 2.4.6): tests/toyarray.py imports through numpy.from_dlpack"
ROWS = (
    row("toy", "imports", CORE | {"bool"}, source=_SOURCE),
    row("toy", "versioned_capsules", source=_SOURCE),
)


class ToyProber(Prober):
    def make_array(self, ref: Any, device: str) -> Any:
        if device != "cpu":
            raise ValueError(f"toy arrays live on the CPU only, not {device}")
        return self.mod.ToyArray(ref.copy())

    def host_bytes(self, arr: Any) -> Any:
        return arr.data.reshape(-1).view("u1").copy()

    def to_host(self, arr: Any) -> Any:
        return arr.data.copy()


class ToyAdapter(Adapter):
    """The core adapter only: every conversion takes the pipeline."""

    display = "Toy"
    prober_class = ToyProber

    def view(self, arr: Any, dtype: str) -> Any:
        return self.mod.ToyArray(arr.data.view(numpy_dtype(dtype)))

    def data_ptr(self, arr: Any) -> int:
        return int(arr.data.ctypes.data)

    def copy(self, arr: Any) -> Any:
        return self.mod.ToyArray(arr.data.copy())

    def contiguous(self, arr: Any) -> Any:
        return arr if arr.data.flags.c_contiguous else self.mod.ToyArray(arr.data.copy(order="C"))

    def to_device(self, arr: Any, device: tuple[int, int]) -> Any:
        if device != (1, 0):
            raise ValueError(f"toy arrays live on the CPU only, not {device}")
        return self.copy(arr)

    def bf16_bits_to_f32(self, u16: Any) -> Any:
        return self.mod.ToyArray((u16.data.astype("u4") << 16).view("f4"))

    def lookup_f32(self, table: tuple[float, ...], u8: Any) -> Any:
        import numpy as np

        return self.mod.ToyArray(np.asarray(table, dtype=np.float32)[u8.data])


class FastToyAdapter(FastRoute, ToyAdapter):
    """The same with the fast route's part: its conversions are replayed by the route once learnt."""
