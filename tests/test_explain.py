"""``dlbridge.explain`` says what the conversion then does: over the report's grid (every installed
producer and consumer on the CPU, the report's dtypes, dense / transposed / read-only sources, every
fallback, copy None/False/True), the error type it names is the one ``convert`` raises, and where it
says the result shares memory, the result's data pointer is the source's (and only there).

Each producer/consumer pair runs in a child (``isolated``): a crash fails one pair, not the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import product

import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS
from dlbridge._report._cases import (
    CANDIDATE_DTYPES,
    REPORTED,
    import_order,
    installed_frameworks,
    make_source,
    reference,
)
from tests.conftest import need

INSTALLED = [name for name in import_order(installed_frameworks()) if "cpu" in REPORTED[name].producer_devices]
PAIRS = [(p, c) for p in INSTALLED for c in INSTALLED if c in ADAPTERS]  # producer-only frameworks: no target
LAYOUTS = ("dense", "transposed", "readonly")


def _import_all() -> None:
    for name in INSTALLED:  # one safe order for the whole process (see Adapter.unsafe_after)
        need(REPORTED[name].module)


def _outcome(src: object, consumer: str, **options: object) -> tuple[type[BaseException] | None, object]:
    try:
        return None, dlbridge.convert(src, consumer, **options)
    except dlbridge.DLBridgeError as err:
        return type(err), err


def _check_pair(producer: str, consumer: str) -> tuple[int, list[str]]:
    """(cases compared, disagreements) for one producer/consumer pair."""
    _import_all()
    compared, wrong = 0, []
    src_ptr = REPORTED[producer].data_ptr
    for dtype in CANDIDATE_DTYPES:
        for layout in LAYOUTS:
            try:
                src = make_source(producer, "cpu", reference(dtype), layout)
            except Exception:
                continue  # the producer cannot make it (the report lists these as not made)
            # readonly="drop" where the source is read-only (a read-only view, or an immutable producer's array)
            choices = ("keep", "drop") if layout == "readonly" or not REPORTED[producer].mutable_arrays else ("keep",)
            for fallback, copy, readonly in product(("raise", "view", "upcast"), (None, False, True), choices):
                options = {"fallback": fallback, "copy": copy, "readonly": readonly}
                record = dlbridge.explain(src, consumer, **options)
                error, out = _outcome(src, consumer, **options)
                compared += 1
                case = f"{producer} {dtype} {layout} -> {consumer} {options}"
                if error is not record.error:
                    got = error.__name__ if error else "a result"
                    wrong.append(f"{case}: explain said {record}, convert gave {got}: {out}")
                elif error is None:
                    shares = ADAPTERS[consumer].data_ptr(out) == src_ptr(src)
                    if shares != record.shares:
                        wrong.append(f"{case}: explain said shares={record.shares} ({record}); result shares={shares}")
    return compared, wrong


@pytest.mark.isolated
@pytest.mark.parametrize(("producer", "consumer"), PAIRS, ids=[f"{p}-{c}" for p, c in PAIRS])
def test_explain_agrees_with_the_conversion(producer: str, consumer: str) -> None:
    compared, wrong = _check_pair(producer, consumer)
    assert compared > 0, f"{producer} made no source array"
    assert not wrong, f"{len(wrong)} of {compared} cases disagree:\n" + "\n".join(wrong[:20])


def test_explain_runs_nothing_and_reads_as_steps() -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.bfloat16, device="cpu").reshape(2, 3)
    before = t.clone()
    record = dlbridge.explain(t, "numpy", fallback="view")
    assert record.error is None and record.shares
    assert record.plan is not None and record.plan.logical == "bfloat16"
    assert "import as uint16" in str(record)
    assert torch.equal(t, before)
    as_json = json.loads(json.dumps(record.to_json()))
    assert as_json["shares"] is True and as_json["error"] is None and as_json["steps"] == list(record.steps)
    refused = dlbridge.explain(np.ones((2, 3), np.float32)[:, ::-1], "jax", copy=False)
    assert refused.error is dlbridge.LayoutError and not refused.shares
    assert str(refused).startswith("refuse: LayoutError: to_jax()")
    dense = dlbridge.explain(np.ones((2, 3), np.float32)[:, ::-1], "jax")
    assert dense.dense == "numpy" and dense.then is not None and not dense.shares
    assert "dense copy" in str(dense)


def test_explain_of_a_bad_option_is_the_error_convert_raises() -> None:
    np = pytest.importorskip("numpy")
    x = np.ones(3, np.float32)
    record = dlbridge.explain(x, "numpy", copy="yes")  # type: ignore[arg-type]
    assert record.error is dlbridge.OptionError
    with pytest.raises(dlbridge.OptionError, match=r"copy='yes'"):
        dlbridge.convert(x, "numpy", copy="yes")  # type: ignore[arg-type]
    with pytest.raises(dlbridge.OptionError, match="unknown target framework"):
        dlbridge.explain(x, "nonesuch")


def test_cli_explain_prints_the_record() -> None:
    if not {"torch", "numpy"} <= set(INSTALLED):
        pytest.skip("needs torch and numpy")
    cmd = [sys.executable, "-m", "dlbridge", "explain", "torch", "bf16", "numpy", "--fallback", "view", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["shares"] is True and record["wire"] == "uint16" and record["logical"] == "bfloat16"
    cmd = [sys.executable, "-m", "dlbridge", "explain", "numpy", "float32", "torch", "--layout", "readonly"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "-> torch: no shared memory" in done.stdout  # (NumPy < 2.1 refuses the export itself)
    assert "refuse: ReadOnlyError" in done.stdout
    cmd = [sys.executable, "-m", "dlbridge", "explain", "torch", "float32", "numpy", "--layout", "readonly"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "torch cannot make a readonly float32 array" in done.stderr
