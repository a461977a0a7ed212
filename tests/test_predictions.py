"""The report's predictions are readings of the pipeline's own decisions: the device rule
(``_devices.home_of``), ``decide``'s record (``Handoff.native_import``) and its refusal of a
read-only array for a consumer that reads only legacy capsules (``readonly_refusal``, the message
the export raises). Where the pipeline can be run here, its outcome is compared with the prediction."""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from dlbridge._capsule._read import DLPackInfo
from dlbridge._errors import ReadOnlyError
from dlbridge._pipeline._devices import home_of
from dlbridge._pipeline._handoff import decide, readonly_refusal
from dlbridge._report._cases import DEVICE_CODE
from dlbridge._report._model import Cell, caps_entry, predict, predict_layout
from tests._arrays import FRAMEWORKS, cpu_array, reference
from tests.conftest import need

NUMPY = ADAPTERS["numpy"]


def _caps(name: str, **rows: object) -> dict:
    """The worker's capability JSON for ``name``, rows flipped: ``imports=frozenset(...)``."""
    return {name: caps_entry(ADAPTERS[name].capabilities()._replace(**rows))}


def _readonly_numpy() -> np.ndarray:
    if not NUMPY.capabilities().versioned_capsules:
        pytest.skip("a READ_ONLY capsule needs NumPy >= 2.1")
    ro = np.arange(24, dtype=np.float32).reshape(4, 6)
    ro.flags.writeable = False
    return ro


def _info(dtype: str, readonly: bool, versioned: bool, producer: str) -> DLPackInfo:
    from dlbridge._dtypes import BY_NAME

    d = BY_NAME[dtype]
    return DLPackInfo(dtype, d.code, d.bits, d.lanes, "cpu", 0, (4, 6), None, 0, 64, readonly, versioned,
                      (1, 3) if versioned else None, producer)  # fmt: skip


# --- the device rule: the pipeline's ------------------------------------------------------------


def test_home_of_aliases_pinned_and_managed_memory_and_every_cpu_id() -> None:
    torch, cupy = ADAPTERS["torch"], ADAPTERS["cupy"]
    assert home_of((1, 3), NUMPY) == ((1, 0), True)  # every CPU id names the host's memory
    assert home_of((3, 0), NUMPY) == ((1, 0), True)  # pinned host memory is CPU memory to NumPy
    assert home_of((2, 1), NUMPY) == ((2, 1), False)  # CUDA memory: NumPy cannot use it (moved first)
    assert home_of((13, 1), torch) == ((2, 1), True)  # managed memory is CUDA memory to torch
    assert home_of((13, 1), cupy) == ((13, 1), True)  # CuPy holds managed memory as such
    assert home_of((1, 0), cupy) == ((1, 0), False)


def test_a_device_the_consumer_cannot_use_is_predicted_an_error() -> None:
    cell = Cell("torch", "cuda", "numpy", "float32")
    assert predict(cell, _caps("numpy"), DEVICE_CODE) == "error"
    assert predict(Cell("torch", "cpu", "numpy", "float32"), _caps("numpy"), DEVICE_CODE) == "ok"


# --- the native prediction: decide's record ---------------------------------------------------


def test_native_prediction_reads_the_record_and_the_crash_row() -> None:
    rows = {"imports": frozenset({"float32"}), "holds": frozenset()}
    cell = Cell("torch", "cpu", "numpy", "int64")
    assert predict(Cell("torch", "cpu", "numpy", "float32"), _caps("numpy", **rows), DEVICE_CODE) == "ok"
    assert predict(cell, _caps("numpy", **rows), DEVICE_CODE) == "error"
    assert predict(cell, _caps("numpy", crashes_on_reject=True, **rows), DEVICE_CODE) == "crash"
    # A dtype the consumer holds but imports only under another label: dlbridge relabels it; its own
    # from_dlpack is handed the capsule as it is, and rejects it
    held = {"imports": frozenset({"float32", "uint64"}), "holds": frozenset({"int64"})}
    assert predict(cell, _caps("numpy", **held), DEVICE_CODE) == "error"
    caps = NUMPY.capabilities()._replace(**held)
    record = decide(_info("int64", False, caps.versioned_capsules, "torch"), NUMPY, caps, "raise", None, None)
    assert record.error is None and record.plan is not None and record.plan.mode == "reinterpret"
    assert not record.native_import


@pytest.mark.parametrize("consumer", [f for f in FRAMEWORKS if f in ADAPTERS])
def test_the_native_prediction_is_the_pipelines_native_import(consumer: str) -> None:
    """For NumPy arrays of the report's dense dtypes NumPy can make: ``predict`` says "ok" exactly
    where ``dlbridge.explain`` (the pipeline's first stage, run on the real array) imports as it is."""
    need(ADAPTERS[consumer].module)
    caps = {consumer: caps_entry(ADAPTERS[consumer].capabilities())}
    for dtype in ("float32", "float16", "bool", "complex64", "uint16", "int64", "int8", "uint64"):
        src = cpu_array("numpy", reference(dtype, (4, 6)))
        record = dlbridge.explain(src, consumer)
        said = predict(Cell("numpy", "cpu", consumer, dtype), caps, DEVICE_CODE)
        assert (said == "ok") == record.native_import, (dtype, said, str(record))


# --- read-only sources: one refusal, the export's ----------------------------------------------


def test_a_readonly_array_for_a_legacy_consumer_is_decides_refusal_and_the_exports() -> None:
    need("jax")
    ro = _readonly_numpy()
    jax = ADAPTERS["jax"]
    caps = jax.capabilities()
    assert not caps.versioned_capsules  # JAX reads only legacy capsules
    record = decide(_info("float32", True, False, "numpy"), jax, caps, "raise", None, None, source=NUMPY)
    assert record.error is ReadOnlyError
    assert record.message.endswith(readonly_refusal("", True, NUMPY.readonly_fix))
    with pytest.raises(ReadOnlyError) as raised:  # the pipeline: NumPy refuses the legacy export
        dlbridge.to_jax(ro)
    assert str(raised.value) == readonly_refusal("ndarray", True, NUMPY.readonly_fix)
    assert dlbridge.explain(ro, "jax").error is ReadOnlyError
    # copy=True: the producer exports a writable copy (decided, and run)
    copied = decide(_info("float32", True, False, "numpy"), jax, caps, "raise", None, True, source=NUMPY)
    assert copied.error is None
    np.testing.assert_array_equal(np.asarray(dlbridge.to_jax(ro, copy=True)), ro)


def test_a_producer_that_exports_readonly_arrays_legacy_is_not_refused() -> None:
    """JAX 0.12 flags its versioned capsules READ_ONLY and still exports legacy ones (unflagged):
    decided as the capsule the consumer then gets, not refused."""
    jax = ADAPTERS["jax"]
    assert jax.exports_readonly_legacy and not NUMPY.exports_readonly_legacy
    caps = jax.capabilities()
    record = decide(_info("float32", True, False, "jax"), jax, caps, "raise", None, None, source=jax)
    assert record.error is None and record.native_import and record.given is not None
    assert not record.given.readonly  # a legacy capsule carries no flags


def test_readonly_source_predictions_follow_the_producer() -> None:
    """A read-only source for a consumer that reads only legacy capsules and has no read-only arrays
    (Warp): refused where its producer refuses the legacy export (NumPy, Arrow), and refused where the
    producer exports it unflagged (JAX): JAX arrays are read-only all the same. Into JAX itself
    (immutable arrays): read-only."""
    need("warp")
    need("jax")
    caps = {**_caps("warp"), **_caps("jax")}
    for producer, want in (("numpy", "ReadOnlyError"), ("pyarrow", "ReadOnlyError"), ("jax", "ReadOnlyError")):
        cell = Cell(producer, "cpu", "warp", "float32", readonly_source=True)
        predict_layout(cell, caps, DEVICE_CODE)
        assert cell.predicted_dlbridge == want, producer
    jax_cell = Cell("jax", "cpu", "jax", "float32", readonly_source=True)
    predict_layout(jax_cell, caps, DEVICE_CODE)
    assert (jax_cell.predicted, jax_cell.predicted_readonly, jax_cell.predicted_dlbridge) == ("ok", True, "readonly")
