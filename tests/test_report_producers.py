"""`dlbridge report` with a producer-only framework (Apache Arrow): rows of the matrix, never columns,
its read-only arrays judged as read-only sources, and its cells checked against the table."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from dlbridge._adapters import ADAPTERS
from dlbridge._cli import main
from dlbridge._report._cases import CONSUMERS, FRAMEWORKS, installed_frameworks
from dlbridge._report._doctor import doctor_text, hazards, installed_versions
from dlbridge._report._markdown import parse
from dlbridge._report._model import ATTEMPTS, Attempt, Cell, Export, caps_entry, predict_export, predict_layout
from dlbridge._report._worker import _exports, run_task
from tests.conftest import need_supported

DTYPES = ("float32", "bfloat16", "int64")  # Arrow makes f32 and i64, not bf16


def _installed(*names: str) -> list[str]:
    here = installed_frameworks()
    return [n for n in names if n in here]


def _need_arrow() -> None:
    need_supported("pyarrow")  # below its floor: tests/test_pyarrow_versions.py
    pytest.importorskip("numpy")  # Arrow's tensors are made from NumPy arrays


def _caps(**rows: dict) -> dict:
    """The worker's capability JSON for the consumers named, with rows flipped: ``numpy={...}``."""
    return {name: caps_entry(ADAPTERS[name].capabilities()._replace(**flip)) for name, flip in rows.items()}


def _probe(consumer: str, dtype: str = "float32") -> Cell:
    """A pyarrow -> ``consumer`` cell with the worker's real attempts (in this process)."""
    task = {"producer": "pyarrow", "device": "cpu", "consumer": consumer, "dtype": dtype, "readonly": True}
    cell = Cell("pyarrow", "cpu", consumer, dtype, readonly_source=True)
    cell.attempts = {a: Attempt.from_worker(run_task({**task, "attempt": a})) for a in ATTEMPTS}
    return cell


def test_producer_only_frameworks_are_reported_but_are_no_consumer():
    assert "pyarrow" in FRAMEWORKS and "pyarrow" not in CONSUMERS and "pyarrow" not in ADAPTERS
    assert set(CONSUMERS) == set(ADAPTERS) and set(CONSUMERS) < set(FRAMEWORKS)


@pytest.fixture(scope="module")
def arrow_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict, str, list[str]]:
    _need_arrow()
    fws = _installed("numpy", "torch", "pyarrow")
    tmp = tmp_path_factory.mktemp("arrow_report")
    out, js, svg = tmp / "m.md", tmp / "m.json", tmp / "m.svg"
    rc = main(["report", "--frameworks", ",".join(fws), "--dtypes", ",".join(DTYPES), "--devices", "cpu",
               "--jobs", "2", "--strict", "--out", str(out), "--json", str(js), "--svg", str(svg)])  # fmt: skip
    data = json.loads(js.read_text(encoding="utf-8"))
    return rc, out.read_text(encoding="utf-8"), data, svg.read_text(encoding="utf-8"), fws


def test_arrow_is_a_row_for_every_consumer_and_never_a_column(arrow_run):
    rc, md, data, svg, fws = arrow_run
    assert rc == 0 and data["table_disagrees"] == []  # --strict passed: the ReadOnlyErrors are clean refusals
    consumers = [f for f in fws if f in ADAPTERS]
    assert {c["consumer"] for c in data["cells"]} == set(consumers)
    arrow = [c for c in data["cells"] if c["producer"] == "pyarrow"]
    assert {(c["consumer"], c["dtype"]) for c in arrow} == {(c, d) for c in consumers for d in ("float32", "int64")}
    rows = parse(md)["tables"]["cpu"]
    assert {r["consumer"] for r in rows if r["producer"] == "pyarrow:cpu"} == set(consumers)
    assert not any(r["consumer"] == "pyarrow" for r in rows)
    assert "→ pyarrow" not in svg and "pyarrow:cpu → numpy float32:" in svg
    # bf16: Arrow's tensors cannot hold it, so it is listed as not made, with the reason
    assert any(r["producer"] == "pyarrow" and r["dtype"] == "bfloat16" and r["why"] for r in data["not_made"])
    assert data["versions"]["pyarrow"] == metadata.version("pyarrow")
    assert parse(md)["header"]["pyarrow"] == metadata.version("pyarrow")
    assert data["meta"]["readonly_sources"] == ["pyarrow:cpu"]  # NumPy's and torch's arrays are writable
    assert "a producer only" in md and "Every array of pyarrow on cpu is read-only" in md


def test_arrow_cells_are_judged_by_the_table(arrow_run):
    _, md, data, _, fws = arrow_run
    cells = {(c["producer"], c["consumer"], c["dtype"]): c for c in data["cells"]}
    to_numpy = cells[("pyarrow", "numpy", "float32")]
    assert (to_numpy["native"], to_numpy["native_zero_copy"], to_numpy["native_readonly"]) == ("ok", True, True)
    assert (to_numpy["dlbridge"], to_numpy["dlbridge_mode"], to_numpy["zero_copy"]) == ("ok", "native", True)
    assert to_numpy["table_predicts"] == "ok" and to_numpy["table_predicts_dlbridge"] == "readonly"
    assert "| pyarrow:cpu → numpy | ✓ 🔒 → ✓ native 🔒 |" in md
    exports = [e for e in data["exports"] if e["producer"] == "pyarrow"]
    assert {e["dtype"] for e in exports} == {"float32", "int64"}
    assert all(e["raw"] == e["dtype"] and e["table_disagrees"] is None for e in exports)  # its versioned capsule
    if "torch" not in fws:
        return
    to_torch = cells[("pyarrow", "torch", "int64")]
    assert to_torch["dlbridge"] == "error" and to_torch["dlbridge_error"].startswith("ReadOnlyError")
    assert to_torch["table_predicts_dlbridge"] == "ReadOnlyError" and to_torch["table_disagrees"] is None
    assert "| pyarrow:cpu → torch | ✓ → 🛡 refused | — | ✓ → 🛡 refused |" in md  # counted as a refusal ...
    assert "ReadOnlyError: pyarrow's arrays are read-only and torch" in md
    assert (
        "**dlbridge failures**" in md and md.split("**dlbridge failures**")[1].count("pyarrow") == 0
    )  # ... not a failure


def test_a_flipped_numpy_row_shows_up_in_the_arrow_row_from_a_real_probe():
    _need_arrow()
    if not ADAPTERS["numpy"].capabilities().versioned_capsules:
        pytest.skip("Arrow's read-only tensors reach NumPy only through versioned capsules (NumPy >= 2.1)")
    cell = _probe("numpy")
    assert (cell.native.status, cell.native.readonly, cell.native.zero_copy) == ("ok", True, True)
    assert (cell.dlbridge.status, cell.dlbridge.readonly, cell.dlbridge.zero_copy) == ("ok", True, True)
    predict_layout(cell, _caps(numpy={}), {"cpu": 1})
    assert (cell.predicted, cell.predicted_readonly, cell.predicted_dlbridge) == ("ok", True, "readonly")
    assert cell.disagreement() is None
    # a table whose NumPy rows say it cannot hold read-only arrays: dlbridge would refuse, the probe converted
    predict_layout(cell, _caps(numpy={"readonly_arrays": False, "readonly_imports": False}), {"cpu": 1})  # fmt: skip
    assert "refuses it (ReadOnlyError)" in cell.disagreement()
    # a table whose NumPy rows leave out float32: the native import it saw is flagged
    imports = ADAPTERS["numpy"].capabilities().imports - {"float32"}
    predict_layout(cell, _caps(numpy={"imports": imports}), {"cpu": 1})
    assert "does not import it; probe: from_dlpack returned the right values" in cell.disagreement()


def test_a_flipped_torch_row_shows_up_in_the_arrow_row_from_a_real_probe():
    _need_arrow()
    pytest.importorskip("torch")
    cell = _probe("torch")
    assert cell.dlbridge.status == "error" and cell.dlbridge.clean
    assert (cell.dlbridge.error or "").startswith("ReadOnlyError")
    predict_layout(cell, _caps(torch={}), {"cpu": 1})
    assert cell.predicted_dlbridge == "ReadOnlyError" and cell.disagreement() is None
    predict_layout(cell, _caps(torch={"readonly_arrays": True}), {"cpu": 1})  # a made-up row
    # both halves are flagged: torch's own import gave a writable tensor, and dlbridge refused
    assert "torch makes a read-only array of it; probe: from_dlpack returned a writable one" in cell.disagreement()
    assert "converts it to a read-only array for torch; probe: error: ReadOnlyError" in cell._dlbridge_disagreement()


def test_arrow_export_rows_are_checked():
    _need_arrow()
    seen = _exports("pyarrow", "cpu", {"float32": None, "int64": None, "bfloat16": "not made"})
    assert set(seen) == {"float32", "int64"}
    for dtype, what in seen.items():  # the legacy capsule is refused (immutable): the versioned one is read
        assert what["raw"] == dtype and what["adapter"].startswith("refused: BufferError")
        assert Export("pyarrow", "cpu", dtype, **what, predicted=predict_export("pyarrow", dtype, {})).disagreement() is None  # fmt: skip
    flipped = {"pyarrow": {"cannot_export": ["float32"], "exports_uint8": ["int64"]}}
    f32 = Export(
        "pyarrow", "cpu", "float32", **seen["float32"], predicted=predict_export("pyarrow", "float32", flipped)
    )
    assert "cannot export it; probe: __dlpack__() says float32" in f32.disagreement()
    i64 = Export("pyarrow", "cpu", "int64", **seen["int64"], predicted=predict_export("pyarrow", "int64", flipped))
    assert "labels its capsule uint8" in i64.disagreement()


def test_a_producer_only_selection_has_nothing_to_probe(capsys):
    _need_arrow()
    assert main(["report", "--frameworks", "pyarrow", "--devices", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "producers only" in err and "add a consumer from: " + ", ".join(ADAPTERS) in err


def test_doctor_lists_arrow_without_hazard_rows():
    _need_arrow()
    assert installed_versions()["pyarrow"] == metadata.version("pyarrow")
    lines = doctor_text().splitlines()
    assert any(ln.split() == ["pyarrow", metadata.version("pyarrow")] for ln in lines)
    assert not any("Arrow" in h for h in hazards({"pyarrow": metadata.version("pyarrow")}))  # no consumer rows


def test_explain_accepts_arrow_as_producer_only(capsys):
    _need_arrow()
    assert main(["explain", "pyarrow", "float32", "numpy"]) == 0
    assert "shares memory" in capsys.readouterr().out
    assert main(["explain", "numpy", "float32", "pyarrow"]) == 2
    assert "unknown framework 'pyarrow'" in capsys.readouterr().err
