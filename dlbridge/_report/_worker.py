"""The worker process: imports the frameworks once, then runs one attempt per stdin line.

Protocol (JSON lines): the parent starts ``python -c "from dlbridge._report._worker import
main; main()" CONFIG``; the worker writes one ``{"hello": ...}`` line, then answers each task
line with one result line. A crash kills only this process; the parent records it and starts a
new worker at the next task. Nothing but protocol lines reaches the real stdout: C-level prints
from the frameworks are sent to stderr. A worker never outlives its parent (it dies with it on
Linux, and ends when its stdin closes everywhere).
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import json
import os
import signal
import sys
import warnings
from functools import partial
from typing import Any

from .._adapters import ADAPTERS
from .._adapters._support import findable
from .._capsule._probe import probe
from .._capsule._read import c_strides, read
from .._dtypes import BY_NAME, dtype_name, unsigned_of_width
from .._errors import DLBridgeError, ReadOnlyError
from .._options import NOT_GIVEN
from .._pipeline._export import inspect
from ._cases import (
    DEVICE_CODE,
    LAYOUT_DTYPE,
    LAYOUTS,
    REPORTED,
    SUBBYTE_DTYPES,
    Ref,
    cuda_producers,
    fp4_codes,
    gpu_info,
    import_order,
    layout_ref,
    make_source,
    native_import,
    reference,
    upcast_bits,
)
from ._model import caps_entry

__all__ = ["task_key", "run_task", "hello", "main"]


def task_key(task: dict[str, Any]) -> str:
    layout = task.get("layout", "dense")
    dtype = task["dtype"] if layout == "dense" else f"{task['dtype']}@{layout}"
    return f"{task['producer']}:{task['device']}>{task['consumer']}:{dtype}:{task['attempt']}"


def _error(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    text = text if len(text) <= 400 else text[:397] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _check(consumer: str, out: Any, ref: Ref, want_dtype: str, want_bytes: bytes) -> str | None:
    """Why ``out`` is wrong (dtype, shape or bits), or None when it is right."""
    adapter = ADAPTERS[consumer]
    got = adapter.prober.dtype_str(out)
    if got in SUBBYTE_DTYPES and want_dtype in SUBBYTE_DTYPES:  # fp4 in either form: the values compared
        found = fp4_codes(got, tuple(out.shape), adapter.prober.raw_bytes(out))
        if found[0] != fp4_codes(want_dtype, ref.shape, want_bytes)[0]:
            return f"fp4 shape {found[0]} ({got}{tuple(out.shape)}), expected {fp4_codes(want_dtype, ref.shape, want_bytes)[0]}"
        return None if found == fp4_codes(want_dtype, ref.shape, want_bytes) else "fp4 values differ from the source"
    if got != want_dtype:
        return f"dtype {got}, expected {want_dtype}"
    shape = adapter.prober.shape_of(out)
    if shape != tuple(ref.shape):
        return f"shape {shape}, expected {tuple(ref.shape)}"
    data = adapter.prober.raw_bytes(out)
    if data != want_bytes:
        return "values differ from the source (bit patterns compared)"
    return None


def _native(task: dict[str, Any], src: Any, ref: Ref) -> dict[str, Any]:
    consumer = task["consumer"]
    try:
        out = native_import(consumer, src)
    except Exception as err:
        return {"status": "error", "error": _error(err), "clean": False, "export_failed": _export_fails(src)}
    try:
        wrong = _check(consumer, out, ref, task["dtype"], ref.data)
        zero_copy = ADAPTERS[consumer].data_ptr(out) == REPORTED[task["producer"]].data_ptr(src)
    except Exception as err:  # the prober's own failure: said as such (never a crash of the consumer)
        return {**_unreadable(err), "export_failed": _export_fails(src), "mode": "native"}
    found = {"status": "wrong" if wrong else "ok", "error": wrong, "zero_copy": zero_copy, "mode": "native"}
    return _readonly(task, out, found)


def _unreadable(err: BaseException) -> dict[str, Any]:
    """A result the report's prober could not read back (memory that is not the host's, a tensor
    without storage): the attempt's outcome is unknown, said as an error of the prober."""
    return {"status": "error", "error": f"unreadable result (the report's prober: {_error(err)})", "clean": False}


def _readonly(task: dict[str, Any], out: Any, found: dict[str, Any]) -> dict[str, Any]:
    """Read-only sources' cells (a read-only view, or a producer whose every array is read-only)
    also say whether the result is read-only (what the rows predict)."""
    if (task.get("layout") == "readonly" or task.get("readonly")) and found["status"] == "ok":
        found["readonly"] = ADAPTERS[task["consumer"]].is_readonly(out)
    return found


def _export_fails(src: Any) -> bool:
    """Whether the producer's own DLPack methods fail, so the failure is not the consumer's: its
    ``__dlpack__`` refuses (or is missing), or its ``__dlpack_device__`` is not a pair of integers
    (a device id of None, which consumers that read it as an integer refuse)."""
    if not hasattr(type(src), "__dlpack__"):
        return True
    try:
        raw = probe(src.__dlpack__())  # the unconsumed capsule is freed by its destructor
        device = src.__dlpack_device__()
    except Exception:
        return True
    if raw is None or (not raw[4] and 0 not in raw[11]):  # unreadable, or no data for a non-empty array
        return True  # (pyarrow < 26: an immutable Tensor's legacy capsule has a NULL data pointer)
    return not (len(device) == 2 and all(isinstance(d, int) for d in device))


def _dlbridge(task: dict[str, Any], src: Any, ref: Ref) -> dict[str, Any]:
    """The attempt through the public conversion, checked against the record ``explain`` gave for it."""
    import dlbridge

    consumer = task["consumer"]
    explain, to_consumer = dlbridge.explain, getattr(dlbridge, f"to_{consumer}")
    fallback = "view" if task["attempt"] == "view" else NOT_GIVEN
    record = explain(src, consumer, fallback=fallback)
    mode = "raise" if record.error else "copy" if record.move else record.plan.mode if record.plan else "raise"
    if record.fp4 is not None:  # fp4 in another layout (dlbridge._pipeline._subbyte): relabelled, or a repacked copy
        mode = "copy" if record.fp4 == "repack" else "reinterpret"
    elif record.keep:
        mode = "native"
    try:
        out = to_consumer(src, fallback=fallback)
    except Exception as err:
        return {"status": "error", "error": _error(err), "clean": isinstance(err, DLBridgeError), "mode": "raise",
                "steps": str(record)}  # fmt: skip
    try:
        return _judged(task, out, src, ref, mode, record)
    except Exception as err:  # the prober's own failure on dlbridge's result: a failure, said as the prober's
        return {**_unreadable(err), "mode": mode, "steps": str(record)}


def _judged(task: dict[str, Any], out: Any, src: Any, ref: Ref, mode: str, record: Any) -> dict[str, Any]:
    """A dlbridge result checked against the source and the record ``explain`` gave for it."""
    consumer = task["consumer"]
    flat = ref.data
    if mode == "view":
        want = unsigned_of_width(BY_NAME[ref.dtype].width) or "?"
    elif mode == "upcast":
        want, flat = "float32", upcast_bits(ref)
    else:
        want = task["dtype"]
    wrong = _check(consumer, out, ref, want, flat)
    zero_copy = ADAPTERS[consumer].data_ptr(out) == REPORTED[task["producer"]].data_ptr(src)
    if zero_copy != record.shares and not wrong:
        wrong = f"explain said shares={record.shares} ({record}); the result shares={zero_copy}"
    found = {"status": "wrong" if wrong else "ok", "error": wrong, "zero_copy": zero_copy, "mode": mode,
             "steps": str(record)}  # fmt: skip
    return _readonly(task, out, found)


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run one attempt; every Python-level failure becomes data (a crash ends the process)."""
    layout = task.get("layout", "dense")
    try:
        ref = reference(task["dtype"])
        src = make_source(task["producer"], task["device"], ref, layout)
    except Exception as err:
        return {"status": "skip", "error": f"producer cannot make it: {_error(err)}"}
    attempt = _native if task["attempt"] == "native" else _dlbridge
    try:
        return attempt(task, src, layout_ref(ref, layout))
    except Exception as err:  # the report's own code failed: said as such, never counted as a crash
        return {"status": "error", "error": f"the report's prober failed: {_error(err)}", "clean": False}


# --- hello: what this stack is ------------------------------------------------------------------


def _versions(frameworks: list[str]) -> dict[str, str]:
    from importlib import metadata

    out = {name: REPORTED[name].version for name in frameworks}
    for name in frameworks:
        for companion in REPORTED[name].companions:
            try:
                found = findable(companion)
                out[companion] = metadata.version(companion) if found else "not installed"
            except (metadata.PackageNotFoundError, ValueError):
                out[companion] = "not installed"
    return out


def _makes(framework: str, device: str, dtypes: list[str]) -> dict[str, str | None]:
    """dtype -> None when the producer makes it, else the reason it cannot."""
    adapter = REPORTED[framework]
    found: dict[str, str | None] = {}
    for dtype in dtypes:
        try:
            ref = reference(dtype)
        except Exception as err:
            found[dtype] = f"no reference values: {_error(err)}"
            continue
        try:
            got = adapter.prober.dtype_str(make_source(framework, device, ref))
            found[dtype] = None if got == dtype else f"makes {got} when asked for {dtype}"
        except ModuleNotFoundError as err:  # NumPy's bf16/fp8 come from ml_dtypes
            found[dtype] = f"needs {err.name}, which is not installed (pip install {err.name})"
        except Exception as err:
            found[dtype] = _error(err)
    return found


def _capsule_dtype(make: Any) -> str:
    """The dtype a capsule from ``make()`` says (its label, also one dlbridge refuses to read, such as
    kDLFloat with 8 bits: "float8"), or "refused: <error>" when making it raises."""
    try:
        capsule = make()  # the unconsumed capsule is freed by its destructor
        raw = probe(capsule)
        return read(capsule).dtype if raw is None else dtype_name(raw[8], raw[9], raw[10])
    except Exception as err:
        return f"refused: {_error(err)}"


def _raw_dtype(src: Any) -> str:
    """What the producer's own capsule says: a legacy one, or where the producer refuses legacy
    capsules (immutable arrays, which only a versioned capsule can flag READ_ONLY) a versioned one."""
    legacy = _capsule_dtype(src.__dlpack__)
    if not legacy.startswith("refused"):
        return legacy
    versioned = _capsule_dtype(partial(src.__dlpack__, max_version=(1, 0)))
    return legacy if versioned.startswith("refused") else versioned


def _exports(framework: str, device: str, makes: dict[str, str | None]) -> dict[str, dict[str, str]]:
    """dtype -> what the producer's capsules say: its own ``__dlpack__()`` ("raw") and dlbridge's
    export through the adapter ("adapter"), for every dtype it makes."""
    adapter = REPORTED[framework]
    found = {}
    for dtype, why in makes.items():
        try:
            src = make_source(framework, device, reference(dtype)) if why is None else None
        except Exception:  # made a moment ago: a flaky producer says nothing about its rows
            src = None
        if src is None:
            continue
        found[dtype] = {
            "raw": _raw_dtype(src),
            "adapter": _capsule_dtype(partial(adapter.export, src, stream=None, max_version=None)),
        }
    return found


def _layouts(framework: str, device: str) -> dict[str, str | None]:
    """layout -> None when the producer makes a source of it (a strided view, a READ_ONLY capsule),
    else why not."""
    found: dict[str, str | None] = {}
    for layout in LAYOUTS:
        try:
            info = inspect(make_source(framework, device, reference(LAYOUT_DTYPE), layout))
            if layout == "transposed" and info.strides in (None, c_strides(info.shape)):
                found[layout] = "its transpose is a dense copy, not a strided view"
            elif layout == "readonly" and not info.readonly:
                found[layout] = "its read-only view's capsule is not flagged READ_ONLY"
            else:
                found[layout] = None
        except Exception as err:
            found[layout] = _error(err)
    return found


def _readonly_source(framework: str, device: str) -> bool:
    """Whether the producer's plain arrays are read-only (immutable arrays, as JAX's and Arrow's, whatever
    their capsules say; or capsules flagged READ_ONLY): its dense cells are then judged as read-only sources."""
    if not REPORTED[framework].mutable_arrays:
        return True
    try:
        return inspect(make_source(framework, device, reference(LAYOUT_DTYPE))).readonly
    except ReadOnlyError:  # a producer that cannot mark a capsule read-only (pyarrow < 26): refused as such
        return True
    except Exception:
        return False


def hello(frameworks: list[str], devices: list[str], dtypes: list[str]) -> dict[str, Any]:
    cuda = cuda_producers(frameworks) if "cuda" in devices else []
    producers, exports, layouts, readonly = {}, {}, {}, []
    for fw in frameworks:
        for dev in REPORTED[fw].producer_devices:
            if dev in devices and (dev == "cpu" or fw in cuda):
                key = f"{fw}:{dev}"
                producers[key] = _makes(fw, dev, dtypes)
                exports[key] = _exports(fw, dev, producers[key])
                layouts[key] = _layouts(fw, dev)
                if _readonly_source(fw, dev):
                    readonly.append(key)
    caps = {fw: caps_entry(REPORTED[fw].capabilities()) for fw in frameworks}
    return {"versions": _versions(frameworks), "cuda": cuda, "gpu": gpu_info(cuda) if cuda else None,
            "producers": producers, "exports": exports, "layouts": layouts, "caps": caps,
            "readonly_sources": readonly, "device_codes": DEVICE_CODE}  # fmt: skip


def _die_with_parent(parent: int) -> None:
    """End this worker when the report process ends, however it ends (Linux: the kernel's
    PR_SET_PDEATHSIG; elsewhere the closed stdin ends the task loop)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def main() -> None:
    config = json.loads(sys.argv[1])
    if config.get("parent"):
        _die_with_parent(config["parent"])
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # C-level prints from the frameworks go to stderr, not into the protocol
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")
    frameworks, broken = [], {}
    for fw in import_order(config["frameworks"]):  # never one a loaded module makes crash on import
        try:
            importlib.import_module(REPORTED[fw].module)
            frameworks.append(fw)
        except Exception as err:  # a broken install: the report says so and probes the others
            broken[fw] = _error(err)
    frameworks.sort(key=config["frameworks"].index)
    info = {}
    if config.get("hello"):
        info = {**hello(frameworks, config["devices"], config["dtypes"]), "broken": broken}
    protocol.write(json.dumps({"hello": info, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        task = json.loads(line)
        result = run_task(task)
        result["id"] = task["id"]
        protocol.write(json.dumps(result) + "\n")
