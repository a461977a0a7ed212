"""Test-only hooks for child processes (the report's workers, a ``python -m dlbridge`` child).

A test puts this directory first on the child's ``PYTHONPATH``; Python imports this module at
start-up. Nothing here ships with dlbridge.

- ``$DLBRIDGE_TEST_BLOCK`` (comma-separated module names): make them unimportable, as if not
  installed (``tests/_blocking.py``: ``import`` and ``importlib.util.find_spec`` raise
  ModuleNotFoundError, in compiled modules too).
- ``$DLBRIDGE_TEST_FOREIGN_DEFAULT=1``: JAX's and torch's default devices are foreign, as on a GPU
  machine (``tests/_foreign.py``, which puts this directory first on every child's ``PYTHONPATH``).
- ``$DLBRIDGE_TEST_FAULTS`` (comma-separated ``producer:device>consumer:dtype:attempt``, each
  optionally ``=segv``, ``=hang`` or ``=hang:MARKER_PATH``): the report worker aborts,
  dereferences NULL or hangs on those tasks, to prove crash recovery, timeouts and Ctrl-C.
"""

from __future__ import annotations

import os

_BLOCK = [name for name in os.environ.get("DLBRIDGE_TEST_BLOCK", "").split(",") if name]
if _BLOCK:  # tests/_blocking.py, loaded by its path (the child need not find a ``tests`` package)
    import importlib.util
    from pathlib import Path

    _spec = importlib.util.spec_from_file_location(
        "_dlbridge_test_blocking", Path(__file__).parents[1] / "_blocking.py"
    )
    assert _spec is not None and _spec.loader is not None
    _blocking = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_blocking)
    _blocking.block(*_BLOCK)

_FAULTS = os.environ.get("DLBRIDGE_TEST_FAULTS", "")
if _FAULTS:
    import ctypes
    import time

    import dlbridge._report._worker as _worker

    _run_task = _worker.run_task
    _null_read = ctypes.string_at  # bound before the foreign-device mode below checks host reads: this must crash

    def _faulty_run_task(task: dict) -> dict:
        key = _worker.task_key(task)
        for entry in _FAULTS.split(","):
            target, _, action = entry.partition("=")
            if target != key:
                continue
            if action.startswith("hang"):  # "hang:PATH" touches PATH first, so a test knows it got here
                marker = action.partition(":")[2]
                if marker:
                    open(marker, "w").close()
                time.sleep(3600)
            elif action == "segv":
                _null_read(0)  # SIGSEGV
            os.abort()  # SIGABRT
        return _run_task(task)

    _worker.run_task = _faulty_run_task

if os.environ.get("DLBRIDGE_TEST_FOREIGN_DEFAULT", "") not in ("", "0"):  # tests/_foreign.py, by its path
    import importlib.util
    from pathlib import Path

    _spec = importlib.util.spec_from_file_location("_dlbridge_test_foreign", Path(__file__).parents[1] / "_foreign.py")
    assert _spec is not None and _spec.loader is not None
    _foreign = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_foreign)
    _foreign.install()
