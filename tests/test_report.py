"""`dlbridge report`: a real run on the CPU frameworks, crash recovery, the JSON schema, the matrix file."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbridge._adapters import ADAPTERS
from dlbridge._capabilities import consumers
from dlbridge._cli import main
from dlbridge._report._cases import REPORTED, installed_frameworks, layout_ref, reference
from dlbridge._report._markdown import parse
from dlbridge._report._model import (
    ATTEMPTS,
    MODES,
    RESULTS,
    Attempt,
    Cell,
    Export,
    caps_entry,
    predict_export,
    predict_layout,
)
from dlbridge._report._worker import _exports, run_task

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "tests" / "child_hooks"  # a sitecustomize for child processes: faults, blocked imports
FAULTS, BLOCK = "DLBRIDGE_TEST_FAULTS", "DLBRIDGE_TEST_BLOCK"
CPU_FRAMEWORKS = [f for f in installed_frameworks() if "cpu" in REPORTED[f].producer_devices]
CPU_CONSUMERS = [f for f in CPU_FRAMEWORKS if f in ADAPTERS]  # producer-only frameworks are rows, no column
DTYPES = ["float32", "bfloat16", "float8_e4m3fn", "bool", "int64"]
CELL_KEYS = {"producer", "producer_device", "consumer", "dtype", "native", "native_error", "dlbridge",
             "dlbridge_mode", "zero_copy", "view"}  # fmt: skip


def child_hooks(env: dict[str, str] | None = None, **hooks: str) -> dict[str, str]:
    """``env`` (default: this process's) with the test hooks on the children's PYTHONPATH and ``hooks`` set."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOKS), str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **hooks}


def _hooks(monkeypatch: pytest.MonkeyPatch, **hooks: str) -> None:
    """Install the child hooks for the report workers this process starts."""
    for key, value in child_hooks(**hooks).items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)


def _run(tmp_path: Path, *args: str) -> tuple[int, str, dict, str]:
    out, js = tmp_path / "matrix.md", tmp_path / "matrix.json"
    rc = main(["report", "--out", str(out), "--json", str(js), "--svg", str(tmp_path / "matrix.svg"), *args])
    return rc, out.read_text(encoding="utf-8"), json.loads(js.read_text(encoding="utf-8")), str(out)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    """The report CI runs: every installed CPU framework, a dtype subset, two workers (~5-10 s)."""
    if "numpy" not in CPU_FRAMEWORKS:
        pytest.skip("numpy is not installed")
    tmp = tmp_path_factory.mktemp("report")
    # --devices cpu: on a GPU machine the CUDA cells would double every cell lookup below
    rc, md, data, _ = _run(tmp, "--frameworks", ",".join(CPU_FRAMEWORKS), "--dtypes", ",".join(DTYPES), "--jobs", "2",
                           "--devices", "cpu")  # fmt: skip
    return rc, md, data


def _cell(data: dict, producer: str, consumer: str, dtype: str) -> dict:
    found = [c for c in data["cells"] if (c["producer"], c["consumer"], c["dtype"]) == (producer, consumer, dtype)]
    assert len(found) == 1, (producer, consumer, dtype, found)
    return found[0]


def test_cpu_run_succeeds_with_no_crash_and_no_dlbridge_failure(cpu_run):
    rc, md, data = cpu_run
    assert rc == 0
    assert all(c["dlbridge"] in ("ok", "error") for c in data["cells"])
    assert "**dlbridge failures** (crash" in md and "\n- none.\n" in md


def test_json_schema(cpu_run):
    _, _, data = cpu_run
    assert set(data) >= {"versions", "meta", "cells", "not_made", "table_disagrees"}
    assert set(data["versions"]) >= {*CPU_FRAMEWORKS, "ml_dtypes", "dlbridge", "python"}
    for cell in data["cells"]:
        assert set(cell) >= CELL_KEYS
        assert cell["native"] in RESULTS and cell["dlbridge"] in RESULTS and cell["view"]["result"] in RESULTS
        assert cell["dlbridge_mode"] in MODES
        assert cell["zero_copy"] in (True, False, None)
        assert (cell["native_error"] is None) == (cell["native"] == "ok")
    # every producer x consumer x dtype the producers can make is there, exactly once
    made = {(c["producer"], c["dtype"]) for c in data["cells"]}
    keys = [(c["producer"], c["consumer"], c["dtype"]) for c in data["cells"]]
    assert len(keys) == len(set(keys)) == len(made) * len(CPU_CONSUMERS)
    assert {c["consumer"] for c in data["cells"]} == set(CPU_CONSUMERS)


def test_known_cells_values_and_sharing(cpu_run):
    _, _, data = cpu_run
    # NumPy cannot import bf16 through DLPack (its own export of ml_dtypes arrays fails first);
    # dlbridge reinterprets, sharing memory.
    cell = _cell(data, "numpy", "numpy", "bfloat16")
    assert cell["native"] == "error" and "BufferError" in cell["native_error"] and cell["native_export_failed"]
    assert (cell["dlbridge"], cell["dlbridge_mode"], cell["zero_copy"]) == ("ok", "reinterpret", True)
    assert (cell["view"]["result"], cell["view"]["mode"]) == ("ok", "reinterpret")
    plain = _cell(data, "numpy", "numpy", "float32")
    assert (plain["native"], plain["native_zero_copy"], plain["dlbridge_mode"], plain["zero_copy"]) == (
        "ok",
        True,
        "native",
        True,
    )


def test_known_cells_with_torch(cpu_run):
    if "torch" not in CPU_FRAMEWORKS:
        pytest.skip("torch is not installed")
    _, md, data = cpu_run
    cell = _cell(data, "torch", "numpy", "bfloat16")
    assert cell["native"] == "error" and not cell["native_export_failed"]
    assert (cell["dlbridge"], cell["dlbridge_mode"], cell["zero_copy"]) == ("ok", "reinterpret", True)
    # NumPy's refusal: RuntimeError before NumPy 2.5, BufferError from 2.5 ("Unsupported dtype in DLTensor")
    assert "| torch:cpu → numpy |" in md and re.search(r"✗ (RuntimeError|BufferError) → ✓ reinterpret", md)


def test_jax_without_x64_narrows_int64_natively_and_dlbridge_refuses(cpu_run):
    if "jax" not in CPU_FRAMEWORKS:
        pytest.skip("jax is not installed")
    _, _, data = cpu_run
    # JAX (x64 off) cannot even make int64, so it is "not made", never probed as a producer ...
    assert {"producer": "jax", "producer_device": "cpu", "dtype": "int64"}.items() <= next(
        r for r in data["not_made"] if r["producer"] == "jax" and r["dtype"] == "int64"
    ).items()
    # ... and as a consumer it narrows to int32: a wrong result, which dlbridge refuses instead.
    cell = _cell(data, "numpy", "jax", "int64")
    assert cell["native"] == "wrong" and "int32" in cell["native_error"]
    assert (cell["dlbridge"], cell["dlbridge_mode"]) == ("error", "raise")
    assert cell["dlbridge_error"].startswith("UnsupportedDtypeError")


def test_markdown_has_header_legend_tables_summary(cpu_run):
    _, md, data = cpu_run
    parsed = parse(md)
    head = parsed["header"]
    assert head["command"].startswith("`dlbridge report --out ") and "--dtypes" in head["command"]
    assert head["dlbridge"] == data["versions"]["dlbridge"] and head["Python"] == data["versions"]["python"]
    assert head["run"].startswith("CPU only") and "pending" in head["run"]
    for section in ("## Legend", "## Producers on cpu", "## Summary", "## Table disagrees", "Fixed by dlbridge"):
        assert section in md
    rows = parsed["tables"]["cpu"]
    assert len(rows) == len(CPU_FRAMEWORKS) * len(CPU_CONSUMERS)
    assert all(len(r["cells"]) == len(DTYPES) for r in rows)


def test_svg_picture_has_two_halves_per_cell_and_a_legend(cpu_run, tmp_path_factory):
    import xml.etree.ElementTree as ET

    from dlbridge._report._svg import OUTCOMES

    _, md, data = cpu_run
    svg = next(Path(tmp_path_factory.getbasetemp()).glob("report*/matrix.svg")).read_text(encoding="utf-8")
    root = ET.fromstring(svg)  # well-formed, self-contained XML
    ns = "{http://www.w3.org/2000/svg}"
    titles = [t.text or "" for t in root.iter(f"{ns}title")]
    for cell in data["cells"]:
        label = f"{cell['producer']}:{cell['producer_device']} → {cell['consumer']} {cell['dtype']}:"
        assert sum(t.startswith(label) for t in titles) == 2, label  # native half and dlbridge half
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert all(label in texts for _, label in OUTCOMES.values())
    fills = {r.get("fill") for r in root.iter(f"{ns}rect")}
    assert OUTCOMES["shared"][0] in fills
    # every dlbridge error in this run is a clean refusal (test_cpu_run_succeeds... pins that)
    refused = any(c["dlbridge"] == "error" for c in data["cells"])
    assert (OUTCOMES["refused"][0] in fills) == refused == ("🛡 refused" in md)


def test_crash_is_recorded_and_the_next_attempt_runs(tmp_path, monkeypatch):
    # The native import of numpy->numpy bf16 aborts its worker; the dlbridge attempt of the same cell
    # (the very next task) and every later cell still run, in a restarted worker.
    _hooks(monkeypatch, **{FAULTS: "numpy:cpu>numpy:bfloat16:native,numpy:cpu>numpy:float32:view=segv,"
                                   "numpy:cpu>numpy:bool:native=hang"})  # fmt: skip
    start = time.monotonic()
    rc, md, data, _ = _run(tmp_path, "--frameworks", "numpy", "--dtypes", "float32,bfloat16,bool,uint16",
                           "--jobs", "1", "--timeout", "3", "--strict", "--devices", "cpu")  # fmt: skip
    assert time.monotonic() - start < 30
    bf16 = _cell(data, "numpy", "numpy", "bfloat16")
    assert (bf16["native"], bf16["native_error"]) == ("crash", "SIGABRT")
    assert (bf16["dlbridge"], bf16["dlbridge_mode"]) == ("ok", "reinterpret")
    f32 = _cell(data, "numpy", "numpy", "float32")
    assert (f32["native"], f32["dlbridge"], f32["view"]["result"], f32["view"]["error"]) == (
        "ok",
        "ok",
        "crash",
        "SIGSEGV",
    )
    hung = _cell(data, "numpy", "numpy", "bool")
    assert hung["native"] == "crash" and hung["native_error"].startswith("timeout")
    assert _cell(data, "numpy", "numpy", "uint16")["native"] == "ok"
    assert "💥 SIGABRT → ✓ reinterpret" in md
    # an unpredicted crash is a table disagreement; the view crash a dlbridge failure: --strict fails
    assert rc == 1
    assert any("numpy bfloat16" in d["cell"] and "crashed" in d["why"] for d in data["table_disagrees"])


def test_strict_passes_when_the_table_matches(tmp_path):
    rc, _, data, _ = _run(
        tmp_path, "--frameworks", "numpy", "--dtypes", "float32,bfloat16", "--strict", "--devices", "cpu"
    )
    assert rc == 0 and data["table_disagrees"] == []


def _stop(proc: subprocess.Popen) -> None:
    """Kill ``proc`` (and, through its death, its workers) if a test left it running; reap it."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def test_ctrl_c_writes_the_partial_report(tmp_path):
    out, js, marker = tmp_path / "m.md", tmp_path / "m.json", tmp_path / "hung"
    env = child_hooks(**{FAULTS: f"numpy:cpu>numpy:bool:native=hang:{marker}"})
    # A shell without a terminal (nohup, setsid, CI) may start us with SIGINT ignored; an ignored
    # signal is inherited through exec (a handled one is reset to the default), and Python leaves an
    # ignored SIGINT ignored. Handle it while starting the child, so the child gets Ctrl-C as usual.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dlbridge", "report", "--frameworks", "numpy", "--dtypes", "float32,bool,uint16",
             "--jobs", "1", "--out", str(out), "--json", str(js)],
            env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the worker never reached the hanging cell"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        _stop(proc)
    assert proc.returncode == 130, err
    assert "partial report was written" in err
    data = json.loads(js.read_text())
    assert data["meta"]["partial"] and data["meta"]["cells_done"] < data["meta"]["cells_planned"]
    assert [c["dtype"] for c in data["cells"]] == ["float32"]
    assert re.search(r"INTERRUPTED: 1 of \d+ cells", out.read_text())  # 3 dtypes, then the f32 layouts


def test_disagreement_logic():
    def cell(predicted: str, status: str, export_failed: bool = False) -> Cell:
        c = Cell("numpy", "cpu", "torch", "bfloat16", predicted=predicted)
        c.attempts = {
            a: Attempt(status, None if status == "ok" else "E: x", export_failed=export_failed) for a in ATTEMPTS
        }
        return c

    assert cell("ok", "ok").disagreement() is None
    assert cell("error", "error").disagreement() is None
    assert cell("crash", "crash").disagreement() is None
    assert "imports it" in cell("ok", "error").disagreement()
    assert "crashed" in cell("error", "crash").disagreement()
    assert "right values" in cell("crash", "ok").disagreement()
    assert cell("ok", "error", export_failed=True).disagreement() is None  # the producer's fault, not the table's


def test_committed_matrix_parses_and_covers_every_consumer():
    text = (ROOT / "compat_matrix.md").read_text(encoding="utf-8")
    parsed = parse(text)
    head = parsed["header"]
    for field in ("run", "date", "machine", "GPU (name, driver)", "Python", "dlbridge", "command", *consumers()):
        assert head.get(field), field
    assert "dlbridge report" in head["command"]
    covered = {row["consumer"] for rows in parsed["tables"].values() for row in rows}
    cpu_only = head["run"].startswith("CPU only")
    for consumer in consumers():
        # A CPU-only run cannot cover CuPy; the GPU run that replaces it must cover everything.
        assert consumer in covered or (cpu_only and head[consumer] == "not installed"), consumer
    if not cpu_only:
        assert {"cpu", "cuda"} <= set(parsed["tables"])
    for rows in parsed["tables"].values():
        assert all(all(text for text in row["cells"].values()) for row in rows)


# --- layout cells and producer exports --------------------------------------------------------


def _hello_caps(**flipped: dict) -> dict:
    """The worker's capability JSON for NumPy here (the framework these tests import), with rows
    flipped: ``numpy={"row_major_only": True}``."""
    pytest.importorskip("numpy")
    rows = {"versioned_capsules": True, **flipped.get("numpy", {})}  # as NumPy >= 2.1, whatever is installed
    c = ADAPTERS["numpy"].capabilities()._replace(**rows)
    return {"numpy": caps_entry(c)}


def _needs_readonly_exports() -> None:
    if not ADAPTERS["numpy"].capabilities().versioned_capsules:
        pytest.skip("read-only sources need NumPy >= 2.1 to export them (READ_ONLY)")


def test_layout_cells_are_probed_and_rendered(cpu_run):
    _needs_readonly_exports()
    _, md, data = cpu_run
    assert "## Layouts and read-only sources" in md and "| producer → consumer | transposed | read-only |" in md
    cells = {(c["producer"], c["consumer"], c["layout"]): c for c in data["layout_cells"]}
    transposed = cells[("numpy", "numpy", "transposed")]
    assert transposed["native"] == "ok" and transposed["native_zero_copy"]  # bits of the transpose, shared
    assert transposed["dlbridge"] == "ok" and transposed["zero_copy"]
    readonly = cells[("numpy", "numpy", "readonly")]
    assert readonly["native_readonly"] is True and readonly["dlbridge_readonly"] is True
    assert readonly["table_predicts_dlbridge"] == "readonly"
    assert "| numpy:cpu → numpy | ✓ | ✓ 🔒 → ✓ native 🔒 |" in md
    if "torch" in CPU_FRAMEWORKS:  # torch tensors cannot be read-only: dlbridge refuses, clearly
        assert cells[("numpy", "torch", "readonly")]["dlbridge_error"].startswith("ReadOnlyError")
    if "jax" in CPU_FRAMEWORKS:  # JAX arrays are always dense and immutable: no such sources
        assert not any(c["producer"] == "jax" for c in data["layout_cells"])
    assert data["exports"] and all(e["table_disagrees"] is None for e in data["exports"])
    assert data["table_disagrees"] == []


def test_transposed_prediction_follows_row_major_only():
    c = Cell("numpy", "cpu", "numpy", "float32", layout="transposed")
    predict_layout(c, _hello_caps(numpy={"row_major_only": True}), {"cpu": 1})
    assert (c.predicted, c.predicted_dlbridge) == (None, "copy")  # native may take another path: not predicted
    c.attempts = {a: Attempt("ok", mode="native", zero_copy=True) for a in ATTEMPTS}  # what NumPy really does
    assert c.disagreement() is not None  # dlbridge shared it where the row says it copies
    predict_layout(c, _hello_caps(), {"cpu": 1})
    assert (c.predicted, c.predicted_dlbridge) == ("ok", "ok") and c.disagreement() is None


def test_readonly_prediction_native_only_where_a_row_does_dlbridge_from_the_decision():
    cell = Cell("numpy", "cpu", "numpy", "float32", layout="readonly")
    no_rows = {"readonly_arrays": False, "readonly_imports": False}
    predict_layout(cell, _hello_caps(numpy=no_rows), {"cpu": 1})
    assert cell.predicted is None and cell.predicted_readonly is None  # no row says what native does
    assert cell.predicted_dlbridge == "ReadOnlyError"
    predict_layout(cell, _hello_caps(numpy={"readonly_arrays": False, "readonly_imports": True}), {"cpu": 1})
    # Native: a read-only import. dlbridge: decide() shares it read-only, as the consumer's own import of
    # read-only memory is (_handoff._import_record: readonly_arrays or readonly_imports hold it read-only).
    assert (cell.predicted, cell.predicted_readonly, cell.predicted_dlbridge) == ("ok", True, "readonly")


def test_a_flipped_readonly_row_shows_up_as_a_disagreement_from_a_real_probe():
    """The worker's real attempts on NumPy's read-only view, judged by a table whose NumPy rows
    say it cannot hold read-only arrays: native's read-only result and dlbridge's are flagged."""
    _needs_readonly_exports()
    caps = _hello_caps(numpy={"readonly_arrays": False, "readonly_imports": True})
    task = {"producer": "numpy", "device": "cpu", "consumer": "numpy", "dtype": "float32", "layout": "readonly"}
    cell = Cell("numpy", "cpu", "numpy", "float32", layout="readonly")
    cell.attempts = {a: Attempt.from_worker(run_task({**task, "attempt": a})) for a in ATTEMPTS}
    assert cell.native.readonly is True and cell.dlbridge.readonly is True
    predict_layout(cell, caps, {"cpu": 1})
    # readonly_imports: read-only natively (as seen), and dlbridge's import under this table keeps the
    # source read-only too (every import of that consumer is): nothing flagged.
    assert cell._native_disagreement() is None
    assert cell.disagreement() is None
    cell.predicted_readonly = False  # a row claiming a writable result
    assert "writable array of it; probe: from_dlpack returned a read-only one" in cell.disagreement()
    # Neither row: dlbridge's decision under this table would refuse the read-only source, and the probe
    # converted it: flagged.
    predict_layout(cell, _hello_caps(numpy={"readonly_arrays": False, "readonly_imports": False}), {"cpu": 1})
    assert "refuses it (ReadOnlyError)" in cell.disagreement()


def test_transposed_source_values_are_the_transpose():
    task = {"producer": "numpy", "device": "cpu", "consumer": "numpy", "dtype": "float32", "layout": "transposed"}
    found = run_task({**task, "attempt": "native"})
    assert found["status"] == "ok" and found["zero_copy"]
    ref = reference("float32")
    moved = layout_ref(ref, "transposed")
    assert moved.shape == (6, 4) and moved.data[4:8] == ref.data[6 * 4 : 7 * 4]  # [0, 1] is ref[1, 0]


def test_export_rows_are_checked_against_the_producers_capsules():
    pytest.importorskip("ml_dtypes")
    seen = _exports("numpy", "cpu", {"bool": None, "bfloat16": None, "uint16": "not made"})
    assert seen["bool"] == {"raw": "bool", "adapter": "bool"} and "uint16" not in seen
    assert seen["bfloat16"]["raw"].startswith("refused") and seen["bfloat16"]["adapter"] == "bfloat16"
    table = _hello_caps()
    for dtype, what in seen.items():  # NumPy's own bf16 refusal is covered by dlbridge's export
        assert Export("numpy", "cpu", dtype, what["raw"], what["adapter"], predict_export("numpy", dtype, table)).disagreement() is None  # fmt: skip
    wrong = _hello_caps(numpy={"exports_uint8": frozenset({"bool"}), "cannot_export": frozenset({"bfloat16"})})
    bool_row = Export("numpy", "cpu", "bool", **seen["bool"], predicted=predict_export("numpy", "bool", wrong))
    assert "labels its capsule uint8; probe: __dlpack__() says bool" in bool_row.disagreement()
    bf16 = Export("numpy", "cpu", "bfloat16", **seen["bfloat16"], predicted=predict_export("numpy", "bfloat16", wrong))
    assert bf16.disagreement() is None  # refused, as the flipped row says
    made_up = Export("numpy", "cpu", "bfloat16", "bfloat16", "bfloat16", predict_export("numpy", "bfloat16", wrong))
    assert "cannot export it" in made_up.disagreement()
