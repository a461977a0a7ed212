"""Structure checks: framework knowledge lives in the framework adapters (``dlbridge/_adapters/_<name>.py``)
and their capability rows (``dlbridge/_rows/<name>.py``) only.

The rest of the package asks the adapter table (``ADAPTERS``, ``HOST``, an adapter's attributes
and methods) instead of naming a framework. This test reads the code, not comments or docstrings:
identifiers, attribute names, imported module names and string constants (f-string parts too).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import dlbridge

# The package under test: the checkout's, or the installed copy where the suite runs against a wheel.
PACKAGE = Path(dlbridge.__file__).resolve().parent
# Framework (and framework dtype add-on) module names, as whole words.
_WORDS = ("numpy", "torch", "pytorch", "jax", "jaxlib", "cupy", "tensorflow", "paddle", "paddlepaddle", "ml_dtypes")
FRAMEWORK = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(_WORDS) + r")(?![A-Za-z0-9_])", re.IGNORECASE)
# Identifiers only: the usual import aliases too (as words in strings they are too common to flag).
IDENTIFIER = re.compile(r"^(" + "|".join((*_WORDS, "np", "tf", "jnp", "cp")) + r")$", re.IGNORECASE)

# (file relative to dlbridge/, framework word) -> why the file may name it in code.
ALLOWED: dict[tuple[str, str], str] = {
    # The public functions: one to_<name> per framework, written out and typed (TYPE_CHECKING imports),
    # each calling the route with its framework's spec; convert()'s overloads name each framework's names;
    # register_numpy_dtypes() is NumPy's by name.
    **{
        ("_api.py", w): "the public to_<name> functions and convert()'s overloads, typed per framework"
        for w in ("torch", "pytorch", "cupy", "jax", "numpy", "tensorflow", "paddle", "paddlepaddle")
    },
    # dlbridge.shards() / from_shards(): typed per target like convert() (TYPE_CHECKING imports, Literal
    # names), over JAX's sharded arrays, whose JAX side is the JAX adapter's (_adapters/_jax_shards.py).
    **{
        ("_shards.py", w): "public per-framework signatures of shards(); the sharded-array API is JAX's"
        for w in ("torch", "pytorch", "cupy", "jax", "numpy", "tensorflow", "paddle")
    },
    # Public typing aliases: DTypeLike / DeviceLike name framework dtype and device classes.
    **{
        ("_types.py", w): "public typing aliases (TYPE_CHECKING imports for annotations)"
        for w in ("torch", "jax", "numpy")
    },
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (module, class, function)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def framework_names_in_code(path: Path) -> list[tuple[int, str, str]]:
    """(line, word, what) for each framework name in ``path``'s code (not comments or docstrings)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        texts: list[tuple[str, bool]] = []  # (text, is an identifier)
        if isinstance(node, ast.Name):
            texts.append((node.id, True))
        elif isinstance(node, ast.Attribute):
            texts.append((node.attr, True))
        elif isinstance(node, ast.alias):
            texts += [(part, True) for part in node.name.split(".")]
            if node.asname:
                texts.append((node.asname, True))
        elif isinstance(node, ast.ImportFrom) and node.module:
            texts += [(part, True) for part in node.module.split(".")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            texts.append((node.value, False))
        for text, identifier in texts:
            if identifier:
                words = [text] if IDENTIFIER.match(text) else []
            else:
                words = [m.group(1) for m in FRAMEWORK.finditer(text)]
            hits += [(getattr(node, "lineno", 0), w.lower(), text) for w in words]
    return hits


_SHARED = ("_base.py", "_fast.py", "_probe.py", "_support.py", "__init__.py")  # _adapters/ modules of no framework


def _outside_adapters() -> list[Path]:
    """The package's modules outside the framework adapters (the adapter base class and the table included)."""
    adapters = PACKAGE / "_adapters"
    return sorted([*PACKAGE.glob("*.py"), *(PACKAGE / "_report").glob("*.py"), *(adapters / n for n in _SHARED)])


@pytest.mark.parametrize("path", _outside_adapters(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_framework_names_only_in_adapters(path: Path) -> None:
    rel = str(path.relative_to(PACKAGE))
    unexpected = [
        f"{rel}:{line}: {word!r} in {text!r}"
        for line, word, text in framework_names_in_code(path)
        if (rel, word) not in ALLOWED
    ]
    assert not unexpected, (
        "framework knowledge outside dlbridge/_adapters/ (move it to the adapter, as data or a method, "
        "or add it to ALLOWED with the reason):\n" + "\n".join(unexpected)
    )


def test_allow_list_is_used() -> None:
    """Every allow-list entry still matches something: stale exceptions are removed, not kept."""
    seen = {
        (str(p.relative_to(PACKAGE)), word) for p in _outside_adapters() for _, word, _ in framework_names_in_code(p)
    }
    assert set(ALLOWED) <= seen, sorted(set(ALLOWED) - seen)


def test_scanner_sees_code_not_comments() -> None:
    source = (
        '"""numpy in a docstring is fine."""\n'
        "import numpy as np  # torch in a comment is fine\n"
        "def f():\n"
        '    """jax here too."""\n'
        '    return np.asarray, f"e.g. {1} cupy.asarray", getattr(x, "paddle")\n'
    )
    tmp = PACKAGE.parent / "build" / "structure_probe.py"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_text(source, encoding="utf-8")
    try:
        words = sorted({w for _, w, _ in framework_names_in_code(tmp)})
    finally:
        tmp.unlink()
    assert words == ["cupy", "np", "numpy", "paddle"]


# --- what moved into the adapters still reads the same --------------------------------------------


def test_messages_ask_the_adapter_table() -> None:
    import dlbridge
    from dlbridge._adapters import HOST
    from dlbridge._guard._messages import usage
    from dlbridge._report._markdown import LEGEND

    with pytest.raises(dlbridge.NotAnArrayError, match=r"\(e\.g\. numpy\.asarray\)$"):
        dlbridge.convert([1, 2], "numpy")
    assert '@dlbridge.guard("torch") (one of' in usage(3)
    assert f"{HOST.display} sources of bf16/fp8 are\n  ml_dtypes arrays." in LEGEND


def test_readonly_imports_note_is_the_consumers() -> None:
    from dlbridge._adapters import ADAPTERS

    assert ADAPTERS["numpy"].readonly_imports_note.endswith(
        "(torch, NumPy) back writable and zero-copy, as NumPy 2.2+ does."
    )
    assert "NumPy" not in ADAPTERS["torch"].readonly_imports_note


def test_symbolic_placeholders_are_known_by_their_adapter() -> None:
    from dlbridge import ProducerError
    from dlbridge._adapters import symbolic_error

    traced = type("SymbolicTensor", (), {"__module__": "tensorflow.python.framework.ops"})
    error = symbolic_error(traced)
    assert isinstance(error, ProducerError)
    assert str(error).startswith("a symbolic TensorFlow tensor (SymbolicTensor, inside tf.function or a graph)")
    assert symbolic_error(type("SymbolicTensor", (), {"__module__": "numpy.core"})) is None
    assert symbolic_error(type("Tensor", (), {"__module__": "tensorflow.python.framework.ops"})) is None


def test_module_aliases_name_targets_not_cli_frameworks() -> None:
    from dlbridge._adapters import ADAPTERS, adapter_named

    assert adapter_named("jax.numpy") is ADAPTERS["jax"]
    assert all("jax.numpy" not in a.framework.aliases for a in ADAPTERS.values())


# --- size: short functions, modules of one concern ------------------------------------------------

MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400


def _python_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", _python_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_python_functions_are_short(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: split them by step: {long}"


@pytest.mark.parametrize("path", _python_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_hold_one_concern(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{lines} lines: split the module by concern (at most {MAX_MODULE_LINES})"


C_FUNCTION = re.compile(r"^[A-Za-z_][^;{}()]*\b([A-Za-z_]\w*)\s*\([^;]*\)\s*\{?\s*$")


def _c_functions(text: str) -> list[tuple[str, int]]:
    """(name, lines) of each top-level function definition in C source (K&R-free, brace at column 0 closes)."""
    found, name, start = [], None, 0
    for number, line in enumerate(text.splitlines(), 1):
        match = C_FUNCTION.match(line)
        if match and not line.startswith(("if", "for", "while", "return", "typedef", "#")):
            name, start = match.group(1), number
        elif line.startswith("}") and name is not None:
            found.append((name, number - start + 1))
            name = None
    return found


@pytest.mark.parametrize("path", sorted((PACKAGE / "_csrc").glob("*.c")), ids=lambda p: p.name)
def test_c_functions_are_short(path: Path) -> None:
    functions = _c_functions(path.read_text(encoding="utf-8"))
    assert functions, "no C function found: the scanner is broken"
    long = [f"{name} ({lines} lines)" for name, lines in functions if lines > MAX_FUNCTION_LINES]
    assert not long, f"C functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_size_scanners_see_long_functions() -> None:
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES + 1))
    assert _c_functions("static int f(int a)\n{\n" + "    a++;\n" * 70 + "}\n") == [("f", 73)]
    tree = ast.parse(f"def f():\n{body}\n")
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef) and (node.end_lineno or 0) - node.lineno + 1 > MAX_FUNCTION_LINES


# --- one place per rule: the capsule layer and the route's record ------------------------------------

_LAYOUT_MODULE = PACKAGE / "_capsule" / "_layout.py"


def _code_of(path: Path) -> str:
    """``path``'s code without comments and docstrings (strings that are code stay)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def test_the_dltensor_layout_is_declared_once() -> None:
    """Python: one module declares DLPack's structs (``_capsule/_layout.py``: ctypes structures, the struct
    formats derived from them); C: one header (``accel.h``). Elsewhere they are imported, never re-declared."""
    twice = []
    for path in _python_modules():
        code = _code_of(path)
        if path != _LAYOUT_MODULE and (
            "'byte_offset', ctypes" in code or re.search(r"Struct\('@[^']*(iiiBBH|IIPPQ)", code)
        ):
            twice.append(str(path.relative_to(PACKAGE)))
    for path in (PACKAGE / "_csrc").glob("*.c"):
        if re.search(r"typedef struct[^;]*byte_offset", path.read_text(encoding="utf-8"), re.S):
            twice.append(path.name)
    assert not twice, f"DLPack's struct layout declared again in {twice}: import it from _capsule/_layout.py"
    assert "'byte_offset', ctypes" in _code_of(_LAYOUT_MODULE)  # the scanner sees the declaration it looks for


def test_capsules_are_read_in_one_place() -> None:
    """Capsule bytes are read by the capsule reader (``_capsule/_probe.py``) and its compiled twin
    (``capsules.c``'s ``view_capsule``); ``_read`` only diagnoses what the reader refuses, ``_edit`` writes."""
    readers = []
    for path in _python_modules():
        if "TENSOR_STRUCT" in _code_of(path) or "MANAGED_STRUCT" in _code_of(path):
            readers.append(path.relative_to(PACKAGE).as_posix())
    assert sorted(readers) == ["_capsule/_layout.py", "_capsule/_probe.py"], readers
    c_readers = [p.name for p in (PACKAGE / "_csrc").glob("*.c") if "->dl_tensor" in p.read_text(encoding="utf-8")]
    assert sorted(c_readers) == ["capsules.c", "steps.c"], c_readers  # steps.c: an exchange export's own tensor
    steps_c = (PACKAGE / "_csrc" / "steps.c").read_text(encoding="utf-8")
    assert "view_capsule(" in steps_c and "PyCapsule_GetPointer(c->capsule, LEGACY)" not in steps_c


# Admission fields: what a capsule must say for a stored route to replay its record (decide's Admission).
_ADMISSION_FIELDS = ("triple", "device_type", "device_id", "kinds", "readonly_ok", "offset_ok", "align", "clear_readonly")
# Capability fields and adapter rules the route would re-derive a decision from, were it to read them.
_RULES = ("readonly_arrays", "offset_needs_strides", "import_alignment", "copies_unaligned", "c_strides",
          "row_major_only", "needs_dense")  # fmt: skip


def test_the_route_replays_its_record_and_decides_nothing() -> None:
    """Both routes compare a capsule's facts with the Replay's admission fields (read from the record
    ``decide`` made) and read no capability rule themselves."""
    for path in (PACKAGE / "_route").glob("*.py"):
        code = _code_of(path)
        found = [rule for rule in _RULES if re.search(rf"\b{rule}\b", code)]
        assert not found, f"{path.name} reads {found}: decide() makes that decision (Handoff.admits)"
    replay_py = _code_of(PACKAGE / "_route" / "_replay.py")
    missing = [f for f in _ADMISSION_FIELDS if f"replay.{f}" not in replay_py]
    assert not missing, f"the Python route does not compare the admission's {missing}"
    route_c = "".join((PACKAGE / "_csrc" / f).read_text(encoding="utf-8") for f in ("route.c", "steps.c", "gpu.c"))
    missing = [f for f in _ADMISSION_FIELDS if f"r->{f}" not in route_c and f"c->replay->{f}" not in route_c]
    assert not missing, f"the compiled route does not compare the admission's {missing}"
    assert "state->align" not in route_c and "state->readonly_ok" not in route_c


def test_the_route_follows_the_admission_in_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored route whose record admits no capsule at that alignment is declined (the pipeline
    converts), on whichever route is in use; with the record as decide made it, the route replays."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    from dlbridge._route import _replay as route

    x = np.arange(16, dtype=np.float32)
    for _ in range(3):
        dlbridge.to_torch(x)  # learned: NumPy's Producer, torch's State, the float32 route
    state = route.SPECS["torch"][0]
    key, replay = next((k, r) for k, r in state.routes.items() if r is not None and r.triple == 0x1_20_02)
    calls: list[object] = []
    real = route._convert
    monkeypatch.setattr(route, "_convert", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    dlbridge.to_torch(x)
    assert calls == [], "the stored route did not replay"
    strict = replay.record._replace(admits=replay.record.admits._replace(align=1 << 20))
    state.routes[key] = route.Replay(record=strict, finish=replay.finish)
    out = dlbridge.to_torch(x)
    assert len(calls) == 1, "the route replayed a capsule its record does not admit"
    assert out.data_ptr() == x.ctypes.data and out.dtype == __import__("torch").float32
    state.routes[key] = replay
