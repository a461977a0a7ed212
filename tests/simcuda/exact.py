"""Plain ``torch.Tensor`` objects that claim CUDA (not GPU evidence: see the package docstring).

The fast route replays only a framework's own array type, never a subclass (which may override
``__dlpack__``), so the subclass in :mod:`tests.simcuda.producers` cannot reach it. Here the
tensors are of exactly ``torch.Tensor``: :func:`install` patches the class's ``is_cuda``,
``is_cpu``, ``device``, ``get_device``, ``__dlpack_device__``, ``__dlpack__``, ``detach`` and ``data`` so
that a *registered* tensor answers as on ``cuda:<index>`` (with the upstream ``__dlpack__`` of
:func:`tests.simcuda.producers.cuda_dlpack`), and every other tensor as before. Patched for one
test (``monkeypatch``), in the child process the simulated tests run in.
"""

from __future__ import annotations

import weakref
from typing import Any

from tests.simcuda.core import KDL_CUDA
from tests.simcuda.producers import cuda_dlpack

__all__ = ["install", "cuda_tensor", "index_of"]

_CUDA: dict[int, tuple[Any, int]] = {}  # id(tensor) -> (weak reference, device index)


def _index(t: Any) -> int | None:
    entry = _CUDA.get(id(t))
    return entry[1] if entry is not None and entry[0]() is t else None


def index_of(t: Any) -> int | None:
    """The CUDA ordinal ``t`` claims, None for a tensor that claims nothing."""
    return _index(t)


def _register(t: Any, index: int) -> Any:
    _CUDA[id(t)] = (weakref.ref(t), index)
    return t


def cuda_tensor(cpu: Any, index: int = 0) -> Any:
    """A new ``torch.Tensor`` (exactly) over ``cpu``'s memory that says it is on ``cuda:<index>``."""
    import torch

    t = cpu.detach().view_as(cpu)
    assert type(t) is torch.Tensor
    return _register(t, index)


def install(monkeypatch: Any) -> None:
    import torch

    tensor = torch.Tensor
    base = {name: getattr(tensor, name) for name in ("is_cuda", "is_cpu", "device", "get_device", "detach", "data")}
    cpu_dlpack, cpu_device = tensor.__dlpack__, tensor.__dlpack_device__

    def prop(name: str, cuda: Any) -> Any:
        def get(self: Any) -> Any:
            index = _index(self)
            return base[name].__get__(self) if index is None else cuda(index)

        return property(get)

    def dlpack(self: Any, *, stream: Any = -1, max_version: Any = None, dl_device: Any = None,
               copy: Any = None) -> Any:  # fmt: skip
        index = _index(self)
        if index is None:
            return cpu_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
        return cuda_dlpack(self, cpu_dlpack, index, stream, max_version, dl_device, copy)

    def dlpack_device(self: Any) -> Any:
        index = _index(self)
        return cpu_device(self) if index is None else (KDL_CUDA, index)

    def detach(self: Any) -> Any:
        out = base["detach"](self)
        index = _index(self)
        return out if index is None else _register(out, index)

    def data(self: Any) -> Any:  # the alias torch's exports are made of (dlbridge/_adapters/_torch.py)
        out = base["data"].__get__(self)
        index = _index(self)
        return out if index is None else _register(out, index)

    def get_device(self: Any) -> int:
        index = _index(self)
        return base["get_device"](self) if index is None else index

    for name, value in {
        "is_cuda": prop("is_cuda", lambda index: True),
        "is_cpu": prop("is_cpu", lambda index: False),
        "device": prop("device", lambda index: torch.device("cuda", index)),
        "__dlpack__": dlpack,
        "__dlpack_device__": dlpack_device,
        "detach": detach,
        "data": property(data, base["data"].__set__),
        "get_device": get_device,
    }.items():
        monkeypatch.setattr(tensor, name, value)
