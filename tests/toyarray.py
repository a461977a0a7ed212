"""A toy array framework for tests: a DLPack producer and consumer over a NumPy array, with a
``from_dlpack`` of its own. It is not a dlbridge framework until ``tests/toy_adapter.py`` adds one."""

from __future__ import annotations

from typing import Any

import numpy as np

__version__ = "1.0"


class ToyArray:
    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data  # a NumPy array: the memory this array shares

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:  # CPU only: no stream to honour
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.data.__dlpack_device__()  # type: ignore[no-any-return]


def from_dlpack(x: Any) -> ToyArray:
    return ToyArray(np.from_dlpack(x))
