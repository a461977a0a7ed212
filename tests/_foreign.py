"""The suite with foreign default devices: ``DLBRIDGE_TEST_FOREIGN_DEFAULT=1``.

On a GPU machine JAX puts every array made without explicit placement on the GPU, and code that called
``torch.set_default_device("cuda")`` does the same for torch. A CPU test that builds its arrays without
saying where (``jnp.asarray(x)``, ``torch.arange(4)``), expects a CPU result, or reads an array's memory
through a raw pointer then fails there, or takes the process down (a host read of device memory). This
mode makes the same mistakes fail here, on a CPU-only machine, and says why:

- JAX gets two CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=2``, read when its backend
  starts) and ``jax_default_device`` is the second one: an array made without placement lands on cpu:1.
  Such an array is *uncommitted* (``x._committed`` is False: JAX's own flag for "on the default device,
  free to move"), and it claims to be where it would be on a GPU machine: its ``__dlpack_device__`` says
  ``(kDLCUDA, 0)`` and its capsules say so too (jax/_src/array.py ``__dlpack_device__``, jax 0.10.2: a GPU
  array answers ``(DLDeviceType.kDLCUDA, local_hardware_id)``). dlbridge then treats it as the GPU array
  it would be: CPU consumers refuse it, the fast route declines it. An array placed explicitly
  (``jax.device_put(x, jax.devices("cpu")[0])``, ``tests._arrays.jax_cpu``), and whatever JAX computes
  from it, is committed and stays a plain CPU array. (Explicit placement on cpu:1 is a CPU array too.)
- torch's default device is ``meta`` (``torch.set_default_device``): a tensor made without ``device=`` has
  no data, so a test that uses it as CPU data fails; ``torch.from_numpy`` and ``torch.frombuffer`` still
  give CPU tensors, as they do on a GPU machine.
- ``ctypes.string_at`` refuses an address inside an array that claims the GPU (or address 0, a meta
  tensor's): on a GPU machine that read is a segmentation fault.

Each is applied when the framework is first imported (a finder on ``sys.meta_path`` runs it right after
``jax`` or ``torch`` finishes importing), so nothing is imported that a test did not import, in the order
it did. The pytest process installs it from ``tests/conftest.py``; every Python child of it (isolated
tests, ``run_child`` scripts, the report's workers) from ``tests/child_hooks/sitecustomize.py``, which the
mode puts first on ``PYTHONPATH``. Standard library only at import (sitecustomize loads it by its path).

Nothing here touches a GPU or says anything about one: it checks where the *tests* put their arrays
(never GPU evidence; ``-m gpu`` on a GPU machine is).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ENV = "DLBRIDGE_TEST_FOREIGN_DEFAULT"
ACTIVE = os.environ.get(ENV, "") not in ("", "0")
HOOKS = Path(__file__).resolve().parent / "child_hooks"  # its sitecustomize installs the mode in children
_COUNT = re.compile(r"--xla_force_host_platform_device_count=(\d+)")
KDL_CPU, KDL_CUDA = 1, 2


def prepare_environment() -> None:
    """In the pytest process, before any framework is imported (conftest import time): give JAX a second
    CPU device unless XLA_FLAGS already asks for two or more (a test's own count, e.g. four for the
    sharding tests), put the children's hooks first on PYTHONPATH, and install the mode here."""
    if not ACTIVE:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    found = _COUNT.search(flags)
    if found is None:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2".strip()
    elif int(found.group(1)) < 2:
        os.environ["XLA_FLAGS"] = _COUNT.sub("--xla_force_host_platform_device_count=2", flags)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(HOOKS) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOKS), *paths]))
    install()


def install() -> None:
    """Install the mode in this process, once (the framework parts as each framework is imported)."""
    if not ACTIVE or getattr(sys, "_dlbridge_foreign_default", False):
        return
    sys._dlbridge_foreign_default = True  # type: ignore[attr-defined]
    ctypes.string_at = _checked_string_at  # type: ignore[assignment]
    after = {"jax": _install_jax, "torch": _install_torch}
    for name in [n for n in after if sys.modules.get(n) is not None]:
        after.pop(name)(sys.modules[name])  # already imported: now
    sys.meta_path.insert(0, _AfterImport(after))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``actions[name](module)`` once, right after the module ``name`` is executed (first import)."""

    def __init__(self, actions: dict[str, Callable[[ModuleType], None]]) -> None:
        self.actions = actions

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        action = self.actions.get(fullname)
        if action is None:
            return None
        for finder in sys.meta_path:  # the spec the rest of the import system finds (a blocked module raises)
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if finder is not self and find is not None else None
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        loader, actions = spec.loader, self.actions
        real_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            if actions.pop(fullname, None) is not None:
                action(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this module's own loader object
        return spec


def _install_torch(torch: ModuleType) -> None:
    torch.set_default_device("meta")  # thread-local: other threads keep the CPU


# --- JAX: uncommitted arrays claim the GPU they would be on ------------------------------------------
def claims_gpu(x: Any) -> bool:
    """Whether JAX array ``x`` lives on JAX's default device (uncommitted, one device): a GPU array on a
    GPU machine, so here it claims to be one."""
    try:
        return not x._committed and len(x.sharding.device_set) == 1
    except Exception:  # deleted, a tracer: JAX's own methods say what is wrong
        return False


def _install_jax(jax: Any) -> None:
    from jax._src import array as jax_array

    cpus = jax.devices("cpu")
    if len(cpus) > 1:
        jax.config.update("jax_default_device", cpus[1])
    try:
        from jax._src.dlpack import DLDeviceType

        cuda: Any = DLDeviceType.kDLCUDA
    except (ImportError, AttributeError):
        cuda = KDL_CUDA
    impl = jax_array.ArrayImpl
    real_device, real_dlpack = impl.__dlpack_device__, impl.__dlpack__

    def __dlpack_device__(self: Any) -> Any:
        return (cuda, 0) if claims_gpu(self) else real_device(self)

    def __dlpack__(self: Any, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:  # fmt: skip
        if not claims_gpu(self):
            return real_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
        if dl_device is not None and int(dl_device[0]) == KDL_CPU:
            if copy is False:  # jax/_src/dlpack.py to_dlpack: another device needs a copy
                raise ValueError("a copy to the CPU was asked for with copy=False")
            return real_dlpack(jax.device_put(self, cpus[0]), max_version=max_version)  # a host copy, as JAX makes
        return _relabel(real_dlpack(self, max_version=max_version, copy=copy), (KDL_CUDA, 0))

    impl.__dlpack_device__ = __dlpack_device__
    impl.__dlpack__ = __dlpack__


_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _relabel(capsule: Any, device: tuple[int, int]) -> Any:
    """A fresh capsule's DLTensor says ``device`` (dlpack.h: DLManagedTensor starts with its DLTensor;
    DLManagedTensorVersioned holds it after version, manager_ctx, deleter and flags, 32 bytes; DLTensor's
    device (two int32) follows its data pointer)."""
    name = _capsule_name(capsule)
    tensor = _capsule_pointer(capsule, name) + (32 if name == b"dltensor_versioned" else 0)
    (ctypes.c_int32 * 2).from_address(tensor + 8)[:] = list(device)
    return capsule


# --- raw reads --------------------------------------------------------------------------------------
_string_at = ctypes.string_at


def _checked_string_at(address: Any, size: int = -1) -> bytes:
    where = _foreign_memory(address)
    if where is not None:
        raise AssertionError(
            f"ctypes.string_at({where}): on a GPU machine this reads device memory from the host (a segmentation "
            "fault); make the array on the CPU explicitly (tests._arrays.jax_cpu, device='cpu') and check the "
            "device before reading its memory"
        )
    return _string_at(address, size)


def _foreign_memory(address: Any) -> str | None:
    """What ``address`` points into, where it is memory a host read must not touch on a GPU machine."""
    value = getattr(address, "value", address)
    if not value:
        return "address 0, a meta tensor's (torch's default device here) or a null pointer"
    jax = sys.modules.get("jax")
    if not isinstance(value, int) or jax is None:
        return None
    for arr in jax.live_arrays():
        if claims_gpu(arr):
            try:
                start = arr.unsafe_buffer_pointer()
            except Exception:
                continue
            if start <= value < start + max(arr.nbytes, 1):
                return f"{value:#x}, inside a JAX array on JAX's default device ({arr.dtype}{list(arr.shape)})"
    return None
