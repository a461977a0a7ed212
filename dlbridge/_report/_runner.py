"""A pool of worker processes that runs every attempt of the matrix, surviving crashes.

Each worker imports the frameworks once and runs many attempts; the parent hands out one
task at a time, so when a worker dies the task it held is recorded as a crash (with the
signal) and a fresh worker carries on from the next task. The parent never imports a framework.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from ._cases import (
    BASE_DTYPES,
    CANDIDATE_DTYPES,
    CONSUMERS,
    EXTRA_FP8,
    FRAMEWORKS,
    LAYOUT_DTYPE,
    LAYOUTS,
    REPORTED,
    SUBBYTE_DTYPES,
)
from ._doctor import support_notes
from ._model import ATTEMPTS, Attempt, Cell, Export, Report, predict, predict_export, predict_layout

__all__ = ["run_report", "Progress"]

Progress = Callable[[int, int, str], None]
HELLO_TIMEOUT = 300.0  # importing several large frameworks from a cold disk can take a while


class _Worker:
    """One child process speaking the JSON-lines protocol of ``_worker``."""

    def __init__(self, config: dict[str, Any], env: dict[str, str]) -> None:
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from dlbridge._report._worker import main; main()", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            start_new_session=True,  # Ctrl-C reaches the parent only; it stops the workers itself
        )
        self._buffer = b""
        self.task: dict[str, Any] | None = None
        self.since = 0.0
        self.hello: dict[str, Any] | None = None

    @property
    def fd(self) -> int:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def send(self, task: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.task, self.since = task, time.monotonic()
        self.proc.stdin.write((json.dumps(task) + "\n").encode())
        self.proc.stdin.flush()

    def read(self) -> list[dict[str, Any]] | None:
        """Complete lines available now; None once the process has closed its stdout."""
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            return None
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def death(self) -> str:
        """How the process ended: a signal name ("SIGSEGV") or "exit N", plus its last stderr line."""
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.wait()
        how = _signal_name(-rc) if rc < 0 else f"exit {rc}"
        tail = self.stderr_tail()
        return f"{how} ({tail})" if tail else how

    def stderr_tail(self) -> str:
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 2000))
        lines = [ln.strip() for ln in self._stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        return lines[-1][:200] if lines else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        # Workers hold nothing worth a graceful exit, and one may still be importing a framework.
        self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # stdin of a killed process: flushing may hit a broken pipe
                    pipe.close()
        self._stderr.close()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # The report shows dlbridge's own default, not this shell's choice.
    env.pop("DLBRIDGE_FALLBACK", None)
    # Several workers share one GPU: a framework must not grab most of its memory in each of them.
    for adapter in REPORTED.values():
        for key, value in adapter.worker_env.items():
            env.setdefault(key, value)
    root = str(Path(__file__).resolve().parents[2])  # the directory holding the dlbridge package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _cells(hello: dict[str, Any], frameworks: list[str], dtypes: list[str] | None) -> tuple[list[Cell], list[dict[str, str]], list[str]]:  # fmt: skip
    producers: dict[str, dict[str, str | None]] = hello["producers"]
    if dtypes is None:  # the base list plus every other fp8 kind (and fp4 form) some producer makes
        made = {d for makes in producers.values() for d, why in makes.items() if why is None}
        dtypes = list(BASE_DTYPES) + [d for d in (*EXTRA_FP8, *SUBBYTE_DTYPES) if d in made]
    consumers = [f for f in CONSUMERS if f in frameworks]  # producer-only frameworks are rows, never columns
    order = sorted(producers, key=lambda p: (p.split(":")[1] != "cpu", FRAMEWORKS.index(p.split(":")[0])))
    readonly = set(hello.get("readonly_sources", ()))
    cells, not_made = [], []
    for key in order:
        fw, dev = key.split(":")
        for dtype in dtypes:
            why = producers[key].get(dtype, "not probed")
            if why is not None:
                not_made.append({"producer": fw, "producer_device": dev, "dtype": dtype, "why": why})
                continue
            for consumer in consumers:
                cell = Cell(fw, dev, consumer, dtype, readonly_source=key in readonly)
                if cell.readonly_source:  # every array of this producer is read-only: judged as such
                    predict_layout(cell, hello["caps"], hello["device_codes"])
                else:
                    cell.predicted = predict(cell, hello["caps"], hello["device_codes"])
                cells.append(cell)
    return cells, not_made, dtypes


def _layout_cells(hello: dict[str, Any], frameworks: list[str]) -> list[Cell]:
    """One float32 source per producer and layout it can make, handed to every consumer."""
    consumers = [f for f in CONSUMERS if f in frameworks]
    cells = []
    for key, layouts in hello.get("layouts", {}).items():
        fw, dev = key.split(":")
        if hello["producers"][key].get(LAYOUT_DTYPE, "not probed") is not None:
            continue
        for layout in LAYOUTS:
            if layouts.get(layout, "not probed") is not None:
                continue
            for consumer in consumers:
                cell = Cell(fw, dev, consumer, LAYOUT_DTYPE, layout=layout)
                predict_layout(cell, hello["caps"], hello["device_codes"])
                cells.append(cell)
    return cells


def _exports(hello: dict[str, Any]) -> list[Export]:
    found = []
    for key, dtypes in hello.get("exports", {}).items():
        fw, dev = key.split(":")
        for dtype, seen in dtypes.items():
            found.append(Export(fw, dev, dtype, seen["raw"], seen["adapter"], predict_export(fw, dtype, hello["caps"])))
    return found


def run_report(frameworks: list[str], devices: list[str], dtypes: list[str] | None, *, jobs: int = 2,
               timeout: float = 60.0, progress: Progress | None = None, command: str = "") -> Report:  # fmt: skip
    """Probe every cell; returns the (possibly partial, after Ctrl-C) report."""
    started = time.monotonic()
    env = _env()
    config = {"frameworks": frameworks, "devices": devices, "dtypes": dtypes or list(CANDIDATE_DTYPES),
              "parent": os.getpid()}  # fmt: skip
    first = _Worker({**config, "hello": True}, env)
    workers: list[_Worker] = [first]
    interrupted = False
    try:
        hello = _wait_hello(first)
        broken: dict[str, str] = hello.get("broken", {})
        frameworks = [f for f in frameworks if f not in broken]  # importing it failed: said in the header
        config["frameworks"] = frameworks
        dense, not_made, dtypes = _cells(hello, frameworks, dtypes)
        cells = dense + _layout_cells(hello, frameworks)
        tasks = deque(
            {
                "id": i * len(ATTEMPTS) + j,
                "producer": c.producer,
                "device": c.producer_device,
                "consumer": c.consumer,
                "dtype": c.dtype,
                "layout": c.layout,
                "readonly": c.readonly_source,
                "attempt": a,
            }
            for i, c in enumerate(cells)
            for j, a in enumerate(ATTEMPTS)
        )
        total = len(tasks)
        for _ in range(max(0, min(jobs, total) - 1)):
            workers.append(_Worker(config, env))  # one by one: an interrupt leaves none unlisted
        try:
            _drive(workers, tasks, cells, config, env, timeout, progress, total)
        except KeyboardInterrupt:
            interrupted = True
    finally:
        for w in workers:
            w.close()
    done = [c for c in cells if c.complete and c.layout == "dense"]
    layouts_done = [c for c in cells if c.complete and c.layout != "dense"]
    meta = _meta(hello, command, jobs, time.monotonic() - started, frameworks, devices, dtypes)
    meta["partial"] = interrupted
    meta["cells_planned"], meta["cells_done"] = len(cells), len(done) + len(layouts_done)
    meta["import_failed"] = broken
    meta["readonly_sources"] = hello.get("readonly_sources", [])
    meta["support"] = support_notes(hello["versions"], frameworks)
    versions = {**hello["versions"], "dlbridge": meta["dlbridge"], "python": meta["python"]}
    return Report(meta, versions, done, not_made, hello["caps"], layouts_done, _exports(hello))


def _wait_hello(worker: _Worker) -> dict[str, Any]:
    deadline = time.monotonic() + HELLO_TIMEOUT
    with selectors.DefaultSelector() as sel:
        sel.register(worker.fd, selectors.EVENT_READ)
        while worker.hello is None:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                worker.kill()
                raise RuntimeError(f"the report worker did not start within {HELLO_TIMEOUT:.0f} s")
            lines = worker.read()
            if lines is None:
                raise RuntimeError(f"the report worker died while importing the frameworks: {worker.death()}")
            for line in lines:
                worker.hello = line.get("hello")
    return worker.hello


def _drive(workers: list[_Worker], tasks: deque[dict[str, Any]], cells: list[Cell], config: dict[str, Any],
           env: dict[str, str], timeout: float, progress: Progress | None, total: int) -> None:  # fmt: skip
    done = 0
    sel = selectors.DefaultSelector()
    for w in workers:
        sel.register(w.fd, selectors.EVENT_READ, w)

    def record(task: dict[str, Any], attempt: Attempt) -> None:
        nonlocal done
        cells[task["id"] // len(ATTEMPTS)].attempts[task["attempt"]] = attempt
        done += 1
        if progress is not None:
            cell = cells[task["id"] // len(ATTEMPTS)]
            progress(done, total, f"{cell.label} ({task['attempt']})")

    def replace(old: _Worker) -> None:
        sel.unregister(old.fd)
        old.close()
        new = _Worker(config, env)
        workers[workers.index(old)] = new
        sel.register(new.fd, selectors.EVENT_READ, new)

    try:
        while True:
            for w in workers:
                if w.hello is not None and w.task is None and tasks:  # only workers done importing
                    w.send(tasks.popleft())
            if not tasks and all(w.task is None for w in workers):
                return
            for key, _ in sel.select(timeout=0.5):
                w = key.data
                lines = w.read()
                if lines is None:  # the worker died: its task crashed it
                    if w.hello is None:
                        raise RuntimeError(f"a report worker died while importing the frameworks: {w.death()}")
                    if w.task is not None:
                        record(
                            w.task,
                            Attempt("crash", w.death(), mode="native" if w.task["attempt"] == "native" else None),
                        )
                    replace(w)
                    continue
                for line in lines:
                    if "hello" in line:
                        w.hello = line["hello"]
                        continue
                    if w.task is None:
                        continue
                    status = line["status"]
                    if status == "skip":  # the producer failed to make what it made at hello time
                        status, line["error"] = "error", line.get("error")
                    record(w.task, Attempt.from_worker({**line, "status": status}))
                    w.task = None
            now = time.monotonic()
            for w in [w for w in workers if w.task is not None and now - w.since > timeout]:
                record(w.task, Attempt("crash", f"timeout (no answer in {timeout:.0f} s)"))  # type: ignore[arg-type]
                w.kill()
                replace(w)
    finally:
        sel.close()


def _gpu_driver() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _meta(hello: dict[str, Any], command: str, jobs: int, elapsed: float, frameworks: list[str],
          devices: list[str], dtypes: list[str]) -> dict[str, Any]:  # fmt: skip
    from .. import __version__

    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.system()} {platform.release()} {platform.machine()}, {_cpu_model()}, {os.cpu_count()} CPUs",
        "gpu": hello.get("gpu"),
        "gpu_driver": _gpu_driver() if hello.get("cuda") else None,
        "cuda_producers": hello.get("cuda", []),
        "python": platform.python_version(),
        "dlbridge": __version__,
        "command": command,
        "jobs": jobs,
        "elapsed_s": round(elapsed, 1),
        "frameworks": frameworks,
        "devices": devices,
        "dtypes": dtypes,
    }
