"""Simulated CUDA: stand-ins that let dlbridge's CUDA paths run on a machine without a GPU.

**This is not GPU evidence.** Nothing here touches a GPU, a CUDA driver or a real stream. Device
memory is host memory (ctypes buffers) whose DLPack capsules *say* ``kDLCUDA`` (2), ``kDLCUDAHost``
(3) or ``kDLCUDAManaged`` (13); streams are integers; "waiting on a stream" is an entry in a log.
What the simulation can show is the *protocol*: which stream each producer was handed, how many
times it was asked to export, which device id a capsule carries, and where a real library would
crash the process (raised here as :class:`SimulatedCrash`, a ``BaseException`` no test may see).
It cannot show timing, data races, kernel behaviour or anything a driver does. A passing simulated
test says "dlbridge follows the protocol the upstream sources describe"; only a run on a GPU
machine says "it works".

Each stand-in is written from the upstream sources, cited next to the behaviour it copies:

- :mod:`tests.simcuda.cupy_stub`: a ``cupy`` module (13.3.0 or 14.2.0 behaviour) for ``sys.modules``.
- :mod:`tests.simcuda.producers`: CUDA-claiming torch tensors and JAX arrays (real CPU memory, real
  capsules, relabelled), torch's CUDA stream API, and JAX's CUDA consumer with XLA's round-robin
  external-ready-event streams.
- :mod:`tests.simcuda.core`: the device memory, the streams, the capsule reader and the call log.
"""

from tests.simcuda.core import LOG, SimulatedCrash, reset

__all__ = ["LOG", "SimulatedCrash", "reset"]
