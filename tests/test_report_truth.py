"""The report tells the truth about producers and versions: predictions read the producer rows (a
capsule a producer mislabels is predicted wrong, or refused), dlbridge's own export must carry the
true dtype, the report's prober never counts its own failure as a crash, and versions below
dlbridge's floor or outside the probed releases are said in the header and by ``dlbridge doctor``.
The floors are one list: pyproject's extras are checked against it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlbridge._adapters import ADAPTERS, ALL_ADAPTERS
from dlbridge._capabilities import capabilities, floor, version_notes
from dlbridge._report import _doctor
from dlbridge._report._cases import DEVICE_CODE
from dlbridge._report._markdown import _header
from dlbridge._report._model import Attempt, Cell, Export, Report, caps_entry, predict, predict_export
from dlbridge._report._worker import run_task
from dlbridge._rows import SUPPORT
from tests.conftest import need

ROOT = Path(__file__).resolve().parents[1]


def _caps(**versions: str) -> dict:
    """The worker's capability JSON for frameworks at the versions named (any version: rows only)."""
    return {name: caps_entry(capabilities(name, version)) for name, version in versions.items()}


# --- predictions read the producer rows -------------------------------------------------------------


def test_a_producers_mislabel_is_predicted_for_the_consumers_own_import() -> None:
    caps = _caps(onnxruntime="1.30.0", torch="2.13.0", numpy="2.4.6", cupy="14.2.0", jax="0.10.2")
    # ONNX Runtime < 1.32 labels bool uint8: every consumer that imports uint8 makes a uint8 array of it
    for consumer in ("torch", "numpy", "jax"):
        assert predict(Cell("onnxruntime", "cpu", consumer, "bool"), caps, DEVICE_CODE) == "wrong", consumer
    # ... except ONNX Runtime itself, whose from_dlpack(OrtValue) reads bool off the source
    assert predict(Cell("onnxruntime", "cpu", "onnxruntime", "bool"), caps, DEVICE_CODE) == "ok"
    assert predict(Cell("onnxruntime", "cpu", "torch", "float8_e4m3fn"), caps, DEVICE_CODE) == "error"  # no capsule
    # CuPy's float8_e5m2 capsule says kDLFloat with 8 bits: no consumer imports that
    for consumer in ("torch", "jax", "cupy"):
        assert predict(Cell("cupy", "cuda", consumer, "float8_e5m2"), caps, DEVICE_CODE) == "error", consumer
    assert predict(Cell("torch", "cpu", "numpy", "bool"), caps, DEVICE_CODE) == "ok"  # a producer without such rows
    fixed = _caps(onnxruntime="1.32.0", torch="2.13.0")
    assert predict(Cell("onnxruntime", "cpu", "torch", "bool"), fixed, DEVICE_CODE) == "ok"


def test_a_predicted_wrong_result_must_be_seen_wrong() -> None:
    def cell(seen: str, error: str | None = None) -> Cell:
        c = Cell("onnxruntime", "cpu", "torch", "bool", predicted="wrong")
        c.attempts = {"native": Attempt(seen, error), "dlbridge": Attempt("ok"), "view": Attempt("ok")}
        return c

    assert cell("wrong", "dtype uint8, expected bool").disagreement() is None
    assert "mislabelled capsule" in (cell("ok").disagreement() or "")
    assert "mislabelled capsule" in (cell("error", "RuntimeError: x").disagreement() or "")


def test_export_rows_name_the_label_and_dlbridges_export_must_be_true() -> None:
    caps = _caps(onnxruntime="1.30.0", cupy="14.2.0")
    assert predict_export("onnxruntime", "bool", caps) == "uint8"
    assert predict_export("onnxruntime", "float8_e5m2", caps) == "refused"
    assert predict_export("cupy", "float8_e5m2", caps) == "float8"  # what a kDLFloat/8 capsule reads as
    good = Export("cupy", "cuda", "float8_e5m2", raw="float8", adapter="float8_e5m2", predicted="float8")
    assert good.disagreement() is None
    raw_replayed = Export("onnxruntime", "cpu", "bool", raw="uint8", adapter="uint8", predicted="uint8")
    assert "dlbridge's export of onnxruntime's bool says uint8" in (raw_replayed.disagreement() or "")
    assert Export("onnxruntime", "cpu", "bool", "uint8", "refused: X", "uint8").disagreement() is None


# --- the prober's own failures --------------------------------------------------------------------


def test_a_probers_own_failure_is_reported_as_such_not_as_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    need("numpy")
    prober = ADAPTERS["numpy"].prober

    def unreadable(arr: object) -> bytes:
        raise RuntimeError("tolist() shouldn't be called on a tensor with unallocated storage")

    monkeypatch.setattr(prober, "raw_bytes", unreadable)
    task = {"producer": "numpy", "device": "cpu", "consumer": "numpy", "dtype": "float32"}
    for attempt in ("native", "dlbridge"):
        found = run_task({**task, "attempt": attempt})  # before: the exception ended the worker (a "crash")
        assert found["status"] == "error" and not found["clean"], found
        assert found["error"].startswith("unreadable result (the report's prober: RuntimeError"), found


# --- floors and probed ranges -----------------------------------------------------------------------


def test_versions_below_a_floor_or_outside_the_probed_range_are_named() -> None:
    assert version_notes("torch", "2.13.0") == [] and version_notes("onnxruntime", "1.30.0") == []
    assert version_notes("torch", "2.11.0+cu130") == ['below dlbridge\'s floor 2.13 (pip install -U "torch>=2.13")']
    (note,) = version_notes("cupy", "14.3.0")
    assert note.startswith("outside the releases dlbridge's capability rows were probed on (13.3 to 14.2.x)")
    assert len(version_notes("onnxruntime", "1.25.1")) == 2  # below the floor, and never probed
    notes = _doctor.support_notes({"pyarrow": "25.0.1", "tensorflow": "2.21.0", "ml_dtypes": "0.4.1"})
    assert sorted(notes) == [
        'Apache Arrow 25.0.1 is below dlbridge\'s floor 26 (pip install -U "pyarrow>=26")',
        "TensorFlow 2.21.0 needs ml_dtypes>=0.5.1 beside it (dlbridge's [tensorflow] extra), and ml_dtypes 0.4.1 is "
        'installed: pip install -U "ml_dtypes>=0.5.1"',
    ]


def test_doctor_and_the_report_header_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = _doctor.installed_versions()  # those this stack has outside the supported range left out
    supported = {
        k: v for k, v in installed.items() if k not in _doctor.REPORTED or not _doctor.support_notes(installed, [k])
    }
    versions = {**supported, "pyarrow": "25.0.1", "onnxruntime": "1.30.0"}
    monkeypatch.setattr(_doctor, "installed_versions", lambda: versions)
    text = _doctor.doctor_text()
    assert "versions outside what dlbridge supports or has probed (1):" in text
    assert "Apache Arrow 25.0.1 is below dlbridge's floor 26" in text
    assert "ONNX Runtime 1.30.0 exports bool arrays labelled uint8" in text
    assert "ONNX Runtime 1.30.0 cannot export fp8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0fnu)" in text
    meta = {"date": "d", "machine": "m", "python": "3", "dlbridge": "0", "command": "c", "elapsed_s": 1, "jobs": 1,
            "devices": ["cpu"], "support": _doctor.support_notes(versions, ["pyarrow", "onnxruntime"])}  # fmt: skip
    header = "\n".join(_header(Report(meta, {"pyarrow": "25.0.1"}, [], [])))
    assert "| supported versions | Apache Arrow 25.0.1 is below dlbridge's floor 26" in header
    meta["support"] = []
    assert "| supported versions | every framework probed is at or above" in "\n".join(
        _header(Report(meta, {}, [], []))
    )


def test_pyprojects_extras_are_the_floors_the_rows_hold() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is Python 3.11+")
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    adapters = dict(ALL_ADAPTERS)
    held = {adapters[name].extra: list(s.extra) for name, s in SUPPORT.items() if s.extra}
    assert held == extras  # every extra, requirement for requirement, in order
    assert set(SUPPORT) == set(adapters)  # every framework has its floors and probed range
    for name, support in SUPPORT.items():
        assert floor(name) is None or version_notes(name, floor(name) or "") == [], name  # the floor is probed
        assert len(support.probed) == 2, name
