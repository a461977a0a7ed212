"""Wiring the stand-ins into dlbridge for one test, and undoing it (not GPU evidence).

``Sim(monkeypatch)`` resets the simulated machine; ``sim.cupy("13.3.0")``, ``sim.torch()`` and
``sim.jax()`` install the stand-ins and drop what dlbridge cached about the real frameworks (the
adapters' imported modules, versions and importers, the fast route's learned producers), so the
next conversion sees the simulation; at teardown everything cached comes back as it was.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.simcuda import core, cupy_stub, producers

_CACHED = ("mod", "version", "caps", "_from_dlpack", "_dlpack", "_devices", "_narrowed", "_stream_api", "_state_guards")


def modelled_stack() -> tuple[Any, Any]:
    """torch and jax for a module of simulated tests; skips the module where the stand-ins do not model
    this stack (they copy JAX >= 0.7's from_dlpack(array) and CuPy 14's bfloat16, which needs NumPy >= 2.1.2)."""
    import numpy as np

    from tests.conftest import need

    torch, jax = need("torch"), need("jax")
    if tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 7) or np.lib.NumpyVersion(np.__version__) < "2.1.2":
        pytest.skip(
            f"the stand-ins model JAX >= 0.7's from_dlpack(array) and CuPy 14's bfloat16 (NumPy >= 2.1.2); this "
            f"stack has JAX {jax.__version__}, NumPy {np.__version__} (the middle and latest stacks run them)",
            allow_module_level=True,
        )
    return torch, jax


class Sim:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from dlbridge._adapters import ADAPTERS
        from dlbridge._route import _learn as _route

        self.mp = monkeypatch
        core.reset()
        self.log = core.LOG
        self.state = core.STATE
        for adapter in ADAPTERS.values():  # monkeypatch puts the cached values back at teardown
            for key in _CACHED:
                if key in adapter.__dict__:
                    monkeypatch.delattr(adapter, key)
        self._saved = [(d, dict(d)) for d in (_route.producers, _route._seen)]
        for d, _ in self._saved:
            d.clear()
        self._specs = [(spec, list(spec)) for spec in _route.SPECS.values()]  # lists: the accelerator holds them
        for spec in _route.SPECS.values():  # a state not yet prepared: the next conversion learns again
            spec[0] = _route.new_state(spec[0].target)
        self.cp: Any = None
        self.torch_cuda: producers.TorchCuda | None = None
        self.gpu: producers.JaxGpu | None = None
        # The stand-ins model torch with no TorchFunctionMode active: a default device set by
        # torch.set_default_device (meta under tests/_foreign.py) is one, and under it their patched
        # Tensor methods would be entered twice (a second export in the log). CPU for the test, then restored.
        import torch

        self._default_device = torch.get_default_device()
        torch.set_default_device(None)

    def close(self) -> None:
        import torch

        if self._default_device.type != "cpu":
            torch.set_default_device(self._default_device)
        for d, saved in self._saved:
            d.clear()
            d.update(saved)
        for spec, items in self._specs:
            spec[:] = items
        core.reset()

    # --- the stand-ins ------------------------------------------------------------------------
    def cupy(self, version: str = "14.2.0") -> Any:
        self.cp = cupy_stub.install(self.mp, version)
        return self.cp

    def torch(self) -> producers.TorchCuda:
        import torch

        self.torch_cuda = producers.TorchCuda().install(self.mp)
        # torch as a consumer of CUDA capsules: torch/utils/dlpack.py from_dlpack's CUDA half
        self.mp.setattr(torch, "from_dlpack", producers.torch_from_dlpack)
        self.mp.setattr(torch.utils.dlpack, "from_dlpack", producers.torch_from_dlpack)
        self.mp.setattr(torch._C, "_from_dlpack", producers.torch_capsule_import)  # a capsule's import (the route's)
        return self.torch_cuda

    def cuda_tensor(self, cpu: Any, index: int = 0) -> Any:
        if self.torch_cuda is None:
            self.torch()
        return producers.cuda_tensor(cpu, index)

    def jax(self, ids: list[tuple[int, int]] | None = None) -> producers.JaxGpu:
        import jax

        gpu = self.gpu = producers.JaxGpu(ids).install(self.mp)
        real_local, real_devices = jax.local_devices, jax.devices

        def local_devices(process_index: Any = None, backend: Any = None, host_id: Any = None) -> Any:
            if backend in ("gpu", "cuda"):
                return gpu.local_devices()
            return real_local(process_index=process_index, backend=backend, host_id=host_id)

        def devices(backend: Any = None) -> Any:
            return gpu.local_devices() if backend in ("gpu", "cuda") else real_devices(backend)

        self.mp.setattr(jax, "local_devices", local_devices)
        self.mp.setattr(jax, "devices", devices)
        self.mp.setattr(jax.dlpack, "from_dlpack", gpu.from_dlpack)
        return gpu
