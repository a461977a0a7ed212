"""Test-only hooks for child processes (the report's workers, a ``python -m dlbridge`` child).

A test puts this directory first on the child's ``PYTHONPATH``; Python imports this module at
start-up. Nothing here ships with dlbridge.

- ``$DLBRIDGE_TEST_BLOCK`` (comma-separated module names): make them unimportable, as if not
  installed (``sys.modules[name] = None``: ``import`` raises ModuleNotFoundError and
  ``importlib.util.find_spec`` returns None).
- ``$DLBRIDGE_TEST_FAULTS`` (comma-separated ``producer:device>consumer:dtype:attempt``, each
  optionally ``=segv``, ``=hang`` or ``=hang:MARKER_PATH``): the report worker aborts,
  dereferences NULL or hangs on those tasks, to prove crash recovery, timeouts and Ctrl-C.
"""

from __future__ import annotations

import os
import sys

for _name in filter(None, os.environ.get("DLBRIDGE_TEST_BLOCK", "").split(",")):
    sys.modules[_name] = None  # type: ignore[assignment]

_FAULTS = os.environ.get("DLBRIDGE_TEST_FAULTS", "")
if _FAULTS:
    import ctypes
    import time

    import dlbridge._report._worker as _worker

    _run_task = _worker.run_task

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
                ctypes.string_at(0)  # SIGSEGV
            os.abort()  # SIGABRT
        return _run_task(task)

    _worker.run_task = _faulty_run_task
