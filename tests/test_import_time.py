"""``import dlbridge`` is framework-free and fast, proven in fresh interpreters."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

try:
    import resource
except ImportError:  # not POSIX: wall time
    resource = None  # type: ignore[assignment]

from tests.conftest import run_child

FRAMEWORKS = ("torch", "jax", "jaxlib", "numpy", "cupy", "ml_dtypes")

CHECK = """
import json, sys
{before}
import dlbridge
frameworks = {frameworks!r}
print(json.dumps(sorted({{m.partition(".")[0] for m in sys.modules}} & set(frameworks))))
"""


def loaded_after_import(before: str = "") -> list[str]:
    proc = run_child(CHECK.format(before=before, frameworks=FRAMEWORKS))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_dlbridge_imports_no_framework() -> None:
    assert loaded_after_import() == []


def test_the_check_sees_a_framework_when_one_is_loaded() -> None:
    # The same check must be able to fail: with numpy imported first it reports it.
    assert loaded_after_import("import numpy") == ["numpy"]


def test_a_conversion_imports_only_what_it_needs() -> None:
    # Touching the public API without converting anything still imports no framework.
    code = CHECK.format(before="", frameworks=FRAMEWORKS).replace(
        "import dlbridge\n",
        "import dlbridge\ndlbridge.capabilities('torch', '2.13.0'); dlbridge.get_default_fallback()\n",
    )
    proc = run_child(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


# What ``import dlbridge`` must not load: any adapter or capability row (made when first needed), the
# route and the pipeline (loaded with the first conversion), the guard, and the standard modules that
# cost more to import than all of dlbridge's own (typing alone costs several times the rest).
NOT_AT_IMPORT = ("dlbridge._adapters", "dlbridge._rows", "dlbridge._capabilities", "dlbridge._route._replay",
                 "dlbridge._pipeline", "dlbridge._capsule", "dlbridge._guard", "typing", "dataclasses", "inspect",
                 "enum", "re", "ctypes", "pathlib", "zipfile", "tempfile", "importlib.metadata")  # fmt: skip

LOADED = """
import sys
started = set(sys.modules)
{before}
import dlbridge
{after}
loaded = sorted(sys.modules)
import json  # (after: it loads re and enum)
print(json.dumps([loaded, sorted(started)]))
"""


def _loaded(before: str = "", after: str = "", *, new: bool = False) -> set[str]:
    """The modules loaded after ``before``, ``import dlbridge`` and ``after``; ``new``: only those the
    interpreter had not loaded at start (a site hook, such as setuptools' editable-install finder, imports
    pathlib and re before any code of dlbridge's runs)."""
    proc = run_child(LOADED.format(before=before, after=after))
    assert proc.returncode == 0, proc.stderr
    loaded, started = json.loads(proc.stdout.strip().splitlines()[-1])
    return set(loaded) - set(started) if new else set(loaded)


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_AT_IMPORT))


def test_import_dlbridge_loads_no_adapter_no_route_and_no_typing() -> None:
    assert _heavy(_loaded(new=True)) == []


def test_a_conversion_loads_the_route_and_only_the_adapters_it_uses() -> None:
    # The same check sees what the first conversion loads: it can fail. NumPy -> NumPy makes the NumPy
    # adapter only (detection reads sys.modules; no other framework is loaded).
    loaded = _loaded("import numpy", "dlbridge.to_numpy(numpy.zeros(2))")
    assert {"typing", "dlbridge._route._replay", "dlbridge._pipeline._convert", "dlbridge._adapters._numpy"} <= loaded
    assert sorted(m.rpartition("._")[2] for m in loaded if m.startswith("dlbridge._adapters._")) == [
        "base",
        "fast",
        "numpy",
        "probe",
        "support",
    ]


def _run(code: str) -> tuple[float, float]:
    """(wall, CPU) milliseconds of a fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN) if resource else None
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    wall = (time.perf_counter() - start) * 1e3
    assert proc.returncode == 0, proc.stderr
    if before is None:
        return wall, wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3


def test_import_time_over_bare_python_is_small() -> None:
    # Target: <= 30 ms over bare Python (BENCHMARKS.md has the figure: a few ms). Measured against bare
    # Python in the same run, interleaved, as the median of 7 of each: the CPU time the interpreter took
    # (where the OS says it), which a loaded machine stretches far less than the wall time.
    bare, full = [], []
    for _ in range(7):
        bare.append(_run("pass")[1])
        full.append(_run("import dlbridge")[1])
    over = statistics.median(full) - statistics.median(bare)
    assert over < 30, (over, bare, full)


def test_guard_loads_on_first_use() -> None:
    proc = run_child(
        """
        import sys, dlbridge
        print("dlbridge._guard._decorator" in sys.modules, "guard" in dir(dlbridge))
        from dlbridge import guard
        print("dlbridge._guard._decorator" in sys.modules, guard is dlbridge.guard, guard.__module__)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True", "True", "True", "dlbridge._guard._decorator"]
