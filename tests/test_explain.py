"""``dlbridge.explain`` says what the conversion then does: over the report's grid (every installed
producer and consumer on the CPU, the report's dtypes, dense / transposed / read-only sources, every
fallback, copy None/False/True), the error type it names is the one ``convert`` raises, and where it
says the result shares memory, the result's data pointer is the source's (and only there). A second
grid does the same for every consumer over what the first does not make: 0-d to 5-d arrays, torch's
conjugate and negative bits, byte-swapped and odd-strided NumPy arrays, devices this process does not
have (``device="cuda"`` on a CPU-only build), and raw CUDA / managed capsules and arrays claiming
those devices (refused before any consumer sees their memory). And explain copies nothing: its peak
memory does not grow with the source (a 256 MiB one).

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
from tests._arrays import jax_cpu
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


# --- shapes, lazy bits, devices this process lacks, GPU capsules: every consumer ------------------

CONSUMERS = [c for c in INSTALLED if c in ADAPTERS]
DEVICES = (None, "cpu", "cuda", "gpu", "cuda:1", ("cuda", 10**30))


def _grid_sources() -> list[tuple[str, object]]:
    """(label, source) that the report's grid does not make (each framework's as installed)."""
    import numpy as np

    out: list[tuple[str, object]] = []
    for n in range(6):
        out.append((f"numpy {n}-d", np.arange(2**n, dtype=np.float32).reshape((2,) * n)))
    out.append(("numpy big-endian", np.arange(4, dtype=">f4")))
    out.append(("numpy structured field", np.zeros(4, np.dtype([("a", "u1"), ("b", "f4")]))["b"]))
    if "torch" in INSTALLED:
        torch = need("torch")
        for n in range(6):
            out.append((f"torch {n}-d", torch.arange(2.0**n, device="cpu").reshape((2,) * n)))
        c = torch.tensor([[1 + 2j, 3 - 4j], [5 + 6j, 7 + 8j]], dtype=torch.complex64, device="cpu")
        out += [("torch conj", c.conj()), ("torch conj transposed", c.T.conj())]
        out += [("torch neg", c.conj().imag), ("torch neg transposed", c.conj().imag.T)]
    if "jax" in INSTALLED:
        jnp = need("jax").numpy
        out += [("jax 0-d", jax_cpu(2.0, "float32")), ("jax 5-d", jax_cpu(jnp.ones((1, 2, 1, 2, 1))))]
        # and on JAX's default device (a GPU on a GPU machine, as DLBRIDGE_TEST_FOREIGN_DEFAULT=1 makes it):
        # a move to the CPU first, then the consumer's refusal, which explain's record must carry as its error
        out += [("jax 0-d, default device", jnp.ones(())), ("jax 5-d, default device", jnp.ones((1, 2, 1, 2, 1)))]
    return out


def _shares(src: object, out: object, consumer: str) -> bool:
    from dlbridge._adapters import adapter_for

    source = adapter_for(src)
    assert source is not None
    return bool(ADAPTERS[consumer].data_ptr(out) == source.data_ptr(src))


def _compare(label: str, src: object, consumer: str, options: dict[str, object], wrong: list[str]) -> None:
    record = dlbridge.explain(src, consumer, **options)
    error, out = _outcome(src, consumer, **options)
    case = f"{label} -> {consumer} {options}"
    if error is not record.error:
        wrong.append(f"{case}: explain said {record}, convert gave {error.__name__ if error else 'a result'}: {out}")
    elif error is None and _shares(src, out, consumer) != record.shares:
        wrong.append(f"{case}: explain said shares={record.shares} ({record}); the result does not agree")


def _check_consumer(consumer: str) -> tuple[int, list[str]]:
    _import_all()
    compared, wrong = 0, []
    for label, src in _grid_sources():
        for device in DEVICES:
            for copy in (None, False, True):
                _compare(label, src, consumer, {"device": device, "copy": copy}, wrong)
                compared += 1
    return compared, wrong


@pytest.mark.isolated
@pytest.mark.parametrize("consumer", CONSUMERS)
def test_explain_agrees_on_shapes_lazy_bits_and_devices(consumer: str) -> None:
    compared, wrong = _check_consumer(consumer)
    assert compared > 0
    assert not wrong, f"{len(wrong)} of {compared} cases disagree:\n" + "\n".join(wrong[:20])


def _gpu_capable(consumer: str) -> bool:
    adapter = ADAPTERS[consumer]
    return bool(adapter.device_codes - {1}) and adapter.has_cuda()


@pytest.mark.isolated
@pytest.mark.parametrize("consumer", CONSUMERS)
def test_explain_agrees_on_gpu_capsules_this_process_cannot_use(consumer: str) -> None:
    # The capsules point at host memory labelled CUDA: a consumer that read it as device memory could
    # crash, so they are only handed to consumers this process has no GPU for (a child, all the same),
    # where both explain and the conversion refuse them before any import (DeviceMismatchError).
    from tests.ctypes_producer import CtypesArray

    _import_all()
    if _gpu_capable(consumer):
        pytest.skip(f"{consumer} has a GPU in this process")
    wrong: list[str] = []
    for device in ((2, 0), (13, 0), (2, 3)):
        array = CtypesArray.zeros(16, code=2, bits=32, shape=(4,)).with_(device=device, claimed_device=device)
        for options in ({}, {"copy": True}, {"device": "cpu"}, {"device": "cuda"}, {"device": device}):
            for versioned in (False, True):
                capsule = array.capsule(versioned=versioned)
                record = dlbridge.explain(capsule, consumer, **options)
                error, out = _outcome(capsule, consumer, **options)
                if error is not record.error or error is not dlbridge.DeviceMismatchError:
                    wrong.append(f"capsule on {device} {options}: explain {record}, convert {error}: {out}")
            if ("device" in options and options["device"] != device) or "copy" in options:
                continue  # a move to the host: the producer's own copy (dl_device=), which this one cannot make
            record = dlbridge.explain(array, consumer, **options)
            error, out = _outcome(array, consumer, **options)
            if error is not record.error or error is not dlbridge.DeviceMismatchError:
                wrong.append(f"array on {device} {options}: explain {record}, convert {error}: {out}")
    assert not wrong, "\n".join(wrong)


# --- explain copies nothing ---------------------------------------------------------------------------

MIB = 1 << 20


def _memory() -> tuple[int, int]:
    """(current, peak) resident memory of this process in bytes (Linux /proc)."""
    with open("/proc/self/status", encoding="ascii") as status:
        fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def _peak_growth(call: object, trace: bool = True) -> tuple[int, int]:
    """(peak resident growth, tracemalloc peak) in bytes while ``call()`` runs; ``trace=False``: resident
    growth only (0 traced). A conversion into JAX must not run traced: JAX frees an imported NumPy buffer
    on a worker thread, whose deleter takes the GIL while tracemalloc may be stopping: a race in
    CPython's tracemalloc that crashes the process (python/cpython#128679, fixed upstream by
    python/cpython#128893; Python 3.11 has it)."""
    import tracemalloc

    with open("/proc/self/clear_refs", "w", encoding="ascii") as reset:  # the peak starts at the current size
        reset.write("5")
    before, _ = _memory()
    if not trace:
        call()  # type: ignore[operator]
        return _memory()[1] - before, 0
    tracemalloc.start()
    try:
        call()  # type: ignore[operator]
        traced = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return _memory()[1] - before, traced


def _big_sources(size: int = 256 * MIB) -> list[tuple[str, object, str, dict[str, object]]]:
    """(label, ``size``-byte source, target, options) whose conversion copies in the producer or as the
    target's own array: explain must describe that copy without making it."""
    import numpy as np

    n = size // 4
    out: list[tuple[str, object, str, dict[str, object]]] = []
    readonly = np.ones(n, np.float32)
    readonly.flags.writeable = False
    for target in ("onnxruntime", "jax", "warp"):  # legacy capsules only: NumPy's read-only export refused
        out.append((f"read-only numpy, copy=True -> {target}", readonly, target, {"copy": True}))
    swapped = np.ones(n, ">f4")
    out += [("big-endian numpy, copy=True -> torch", swapped, "torch", {"copy": True}),
            ("big-endian numpy, copy=True -> numpy", swapped, "numpy", {"copy": True})]  # fmt: skip
    if "torch" in INSTALLED:
        torch = need("torch")
        conj = torch.ones(n // 2, dtype=torch.complex64, device="cpu").conj()
        neg = torch.ones(n // 2, dtype=torch.complex64, device="cpu").conj().imag
        grad = torch.ones(n, requires_grad=True, device="cpu")
        out += [("torch conj -> numpy", conj, "numpy", {}), ("torch neg -> numpy", neg, "numpy", {}),
                ("torch conj, copy=True -> torch", conj, "torch", {"copy": True}),
                ("torch requires_grad, copy=True -> torch", grad, "torch", {"copy": True})]  # fmt: skip
    return [case for case in out if case[2] in INSTALLED]


@pytest.mark.isolated
def test_explain_allocates_nothing_proportional_to_the_data() -> None:
    import os

    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux's /proc/self/clear_refs to measure a peak")
    _import_all()
    grown = []
    for label, src, target, options in _big_sources():
        dlbridge.explain(src, target, **options)  # imports and first-call caches, outside the measure
        record_holder: list[object] = []
        rss, traced = _peak_growth(
            lambda src=src, target=target, options=options, held=record_holder: held.append(
                dlbridge.explain(src, target, **options)
            )
        )
        record = record_holder[0]
        assert getattr(record, "error", None) is None and not getattr(record, "shares", True), (label, record)
        if rss > 32 * MIB or traced > 32 * MIB:
            grown.append(f"{label}: explain grew the peak by {rss // MIB} MiB (traced {traced // MIB} MiB): {record}")
    assert not grown, "\n".join(grown)


@pytest.mark.isolated
def test_a_copy_the_producer_makes_is_the_one_copy_true_asks_for() -> None:
    """copy=True where the producer exports a copy in the array's place (read-only, byte-swapped, a torch
    lazy bit): that copy is the result's memory, none is made after the import. explain says so (no
    "copied (copy=True)" step) and the conversion's peak grows by one copy, not two."""
    import os

    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux's /proc/self/clear_refs to measure a peak")
    _import_all()
    size, twice = 64 * MIB, []
    for label, src, target, options in _big_sources(size):
        record = dlbridge.explain(src, target, **options)
        if record.producer_copy is None or options.get("copy") is not True:
            continue  # a copy made as the target's own array (AsIs), or no copy=True
        assert record.error is None and not record.copy and not record.shares, (label, str(record))
        assert not any("copy=True" in step for step in record.steps), (label, str(record))
        dlbridge.convert(src, target, **options)  # imports and first-call caches, outside the measure
        rss = _conversion_peak(src, target, options)
        # The process's own threads (the frameworks' pools) may touch memory while one conversion runs, on a
        # busy machine: a second copy shows in every measure, such noise not in the smallest of three.
        if rss > size * 3 // 2:
            rss = min(rss, _conversion_peak(src, target, options), _conversion_peak(src, target, options))
        # JAX copies a CPU buffer that is not 64-byte aligned on import (its own copy, which dlbridge
        # allows with copy=None): only the other consumers' peaks are one copy exactly.
        if target != "jax" and rss > size * 3 // 2:
            twice.append(f"{label}: the conversion grew the peak by {rss // MIB} MiB for a {size // MIB} MiB source")
    assert not twice, "\n".join(twice)


def _conversion_peak(src: object, target: str, options: dict[str, object]) -> int:
    """The peak resident growth of one conversion, its result freed before this returns."""
    held: list[object] = []
    rss, _ = _peak_growth(lambda: held.append(dlbridge.convert(src, target, **options)), trace=False)
    held.clear()
    return rss


def test_a_move_then_refused_is_the_records_error() -> None:
    """A record whose moved (or dense) array is then refused carries that refusal as its own ``error`` and
    ``message``, as the conversion raises it, and its steps keep the copy made first (on a GPU machine: a
    JAX array on the GPU, moved to the CPU for Warp, which has no 0-d arrays; the foreign-default pass of
    the suite makes that case for real in ``test_explain_agrees_on_shapes_lazy_bits_and_devices``)."""
    from dlbridge._pipeline._explain import _outcome
    from dlbridge._pipeline._record import Handoff, Move

    refusal = Handoff("jax", "warp", error=dlbridge.LayoutError, message="warp arrays have 1 to 4 dimensions")
    moved = Handoff("jax", "warp", move=Move((2, 0), (1, 0), "jax"), then=refusal)
    record = _outcome(moved)
    assert record.error is dlbridge.LayoutError and record.message == refusal.message
    assert record.steps == ("jax copies it cuda:0 → cpu:0", "refuse: LayoutError: warp arrays have 1 to 4 dimensions")
    assert not record.shares and record.to_json()["error"] == "LayoutError"
    fine = Handoff("jax", "warp", move=Move((2, 0), (1, 0), "jax"), then=Handoff("jax", "warp"))
    assert _outcome(fine) is fine and _outcome(refusal) is refusal
