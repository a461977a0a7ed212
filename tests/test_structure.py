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


def test_scanner_sees_code_not_comments(tmp_path: Path) -> None:
    source = (
        '"""numpy in a docstring is fine."""\n'
        "import numpy as np  # torch in a comment is fine\n"
        "def f():\n"
        '    """jax here too."""\n'
        '    return np.asarray, f"e.g. {1} cupy.asarray", getattr(x, "paddle")\n'
    )
    tmp = tmp_path / "structure_probe.py"  # (not in the checkout: stacks of the version matrix run at once)
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


# --- devices and streams: one module ------------------------------------------------------------

DEVICES = "_pipeline/_devices.py"  # where memory is, where the target can use it, the stream handshake
# The stream rule's words: raised by _devices.stream_rule, and nowhere else.
STREAM_RULE = "only stream=None is valid off the GPU"
# A capsule's device (DLPackInfo's fields), read only by the capsule layer and the devices module.
DEVICE_FIELDS = frozenset({"device_code", "device_id"})
# Not a capsule's: the fields of a stored route's admission (decide's, compared field by field with a
# capsule's facts in _route/_replay._admitted, as route.c's admitted does).
ADMISSION_RECORDS = frozenset({"replay"})
# The capsule layer's device edits and aliases: used only through the devices module.
DEVICE_PRIMITIVES = frozenset({"relabel_device", "alias_device", "DEVICE_ALIASES"})
# The adapters' stream handshake: asked only by the devices module (the adapters define them).
STREAM_METHODS = frozenset({"current_stream", "no_sync_stream", "on_device"})


def device_rule_breaks(path: Path, rel: str) -> list[str]:
    """Where ``path`` (``rel`` under dlbridge/) decides about devices or streams itself: the stream
    rule's message, a capsule's device read (a DLPackInfo field, or ``.device`` compared), the capsule
    layer's device primitives, or an adapter's stream methods."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    capsule_layer, adapters = rel.startswith("_capsule/"), rel.startswith("_adapters/")
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and STREAM_RULE in node.value:
            found.append(f"{rel}:{line}: the stream rule's message (raise it with _devices.stream_rule)")
        if capsule_layer:
            continue
        if isinstance(node, ast.Attribute) and node.attr in DEVICE_FIELDS:
            if isinstance(node.value, ast.Name) and node.value.id in ADMISSION_RECORDS:
                continue
            found.append(f"{rel}:{line}: reads a capsule's .{node.attr} (ask _devices)")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Attribute) and o.attr == "device" for o in operands):
                found.append(f"{rel}:{line}: compares a .device (ask _devices: placed, destination, ...)")
        elif isinstance(node, ast.Name) and node.id in DEVICE_PRIMITIVES:
            found.append(f"{rel}:{line}: uses {node.id} (ask _devices)")
        elif isinstance(node, ast.alias) and node.name in DEVICE_PRIMITIVES:
            found.append(f"{rel}:{line}: imports {node.name} (ask _devices)")
        elif isinstance(node, ast.Attribute) and node.attr in STREAM_METHODS and not adapters:
            found.append(f"{rel}:{line}: asks an adapter's .{node.attr} (ask _devices.handshake / on_device)")
    return found


def test_devices_and_streams_are_decided_in_one_module() -> None:
    broken = [
        hit
        for path in _python_modules()
        if (rel := str(path.relative_to(PACKAGE))) != DEVICES
        for hit in device_rule_breaks(path, rel)
    ]
    assert not broken, "device or stream rules outside dlbridge/_pipeline/_devices.py:\n" + "\n".join(broken)
    assert device_rule_breaks(PACKAGE / DEVICES, DEVICES), "the scanner no longer sees the devices module's own rules"


def test_device_scanner_sees_each_kind_of_rule(tmp_path: Path) -> None:
    source = (
        "from .._capsule._read import alias_device\n"
        "def f(info, home, target, stream):\n"
        f"    raise OptionError(f'stream={{stream!r}} on cpu: {STREAM_RULE}')\n"
        "    if info.device != home or info.device_code != 1:\n"
        "        return target.current_stream(home), info.device_id\n"
    )
    tmp = tmp_path / "device_probe.py"  # (not in the checkout: stacks of the version matrix run at once)
    tmp.write_text(source, encoding="utf-8")
    try:
        hits = device_rule_breaks(tmp, "_pipeline/_probe.py")
    finally:
        tmp.unlink()
    kinds = sorted({h.split(": ", 1)[1].split(" ")[0] for h in hits})
    assert len(hits) == 6 and kinds == ["asks", "compares", "imports", "reads", "the"], hits


def _callers(name: str) -> list[str]:
    """``module:function`` for each function in the package that calls ``name`` (by name or attribute)."""
    found = []
    for path in _python_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if any(getattr(c, "id", None) == name or getattr(c, "attr", None) == name for c in _own_calls(fn)):
                found.append(f"{path.relative_to(PACKAGE)}:{fn.name}")
    return found


def _own_calls(fn: ast.AST) -> list[ast.expr]:
    """What ``fn``'s own body calls (not the functions defined inside it)."""
    calls, todo = [], list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            calls.append(node.func)
        todo.extend(ast.iter_child_nodes(node))
    return calls


def test_an_arrays_export_is_read_checked_and_decided_in_one_sequence() -> None:
    # export -> read -> check and relabel the device (_devices.placed) -> decide: written once, and
    # called by the array stage, the deferred export (JAX's own ask) and explain (through decide_stage).
    assert _callers("placed") == ["_pipeline/_stage.py:exported_handoff"]
    callers = _callers("exported_handoff")
    assert sorted(callers) == ["_pipeline/_convert.py:export_when_asked", "_pipeline/_stage.py:_array_stage"]


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
_ADMISSION_FIELDS = ("triple", "device_type", "device_id", "kinds", "readonly_ok", "offset_ok", "align", "clear_readonly",
                     "misaligned")  # fmt: skip
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
    dlbridge.to_torch(x)
    state = route.SPECS["torch"][0]
    state.routes.clear()  # only this conversion's route (earlier tests stored others: readonly=, fallback=)
    for _ in range(3):
        dlbridge.to_torch(x)  # learned: NumPy's Producer, torch's State, the float32 route
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


# --- no import circles ---------------------------------------------------------------------------------

# An import circle among dlbridge's modules makes what a module sees at import time depend on which
# module was imported first (a name missing from a half-run module), and says the layers are not layers.
# Counted: every import that runs when a module is imported (module level, class bodies, try/if blocks,
# not an `if TYPE_CHECKING:` block, which never runs), and, separately, the imports inside functions.
# A circle closed by an import inside a function would be allowed only where listed here with why
# (module, the module it imports lazily): none is.
LAZY_CIRCLES_ALLOWED: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _import_edges(path: Path, known: set[str], name: str = "") -> tuple[set[str], set[str]]:
    """(the dlbridge modules ``path`` (module ``name``) imports when it is imported, those it imports
    inside functions). ``from .pkg import name`` names ``pkg.name`` where that is a module, else ``pkg``
    (its __init__); a module's own package, which Python imports first, is not counted (no import of its)."""
    name = name or _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    eager: set[str] = set()
    lazy: set[str] = set()

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = package[: len(package) - node.level + 1] if node.level else []
        module = ".".join([*base, *([node.module] if node.module else [])])
        return [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]

    def visit(statements: list[ast.stmt], in_function: bool) -> None:
        for node in statements:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                (lazy if in_function else eager).update(t for t in targets(node) if t in known and t != name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, True)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse, in_function)
            else:
                for block in ("body", "orelse", "finalbody"):
                    visit([s for s in getattr(node, block, []) if isinstance(s, ast.stmt)], in_function)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, in_function)

    visit(ast.parse(path.read_text(encoding="utf-8")).body, False)
    return eager, lazy


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (module -> the modules it imports): its strongly connected
    components of more than one module, each sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _import_graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level imports, those and the imports inside functions) of every dlbridge module."""
    paths = _python_modules()
    known = {_module_name(p) for p in paths}
    edges = {_module_name(p): _import_edges(p, known) for p in paths}
    eager = {m: e for m, (e, _) in edges.items()}
    lazy = {m: e | {t for t in lz if (m, t) not in LAZY_CIRCLES_ALLOWED} for m, (e, lz) in edges.items()}
    return eager, lazy


def test_no_import_circle_among_dlbridges_modules() -> None:
    eager, with_lazy = _import_graphs()
    assert len(eager) > 80 and eager["dlbridge._pipeline._convert"], "the import scanner found too little"
    assert not _circles(eager), f"module-level import circles: {_circles(eager)}"
    assert not _circles(with_lazy), (
        f"import circles closed by imports inside functions: {_circles(with_lazy)} (break them, or list the "
        "lazy import in LAZY_CIRCLES_ALLOWED with why)"
    )


def test_import_circle_scanner_sees_circles_and_the_imports_that_close_them(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _circles(graph) == [["a", "b", "c"]]
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import _stage\n"
        "from ._export import inspect\n"
        "from .. import _errors as errors\n"
        "if TYPE_CHECKING:\n"
        "    from ._moves import plan_move\n"
        "try:\n"
        "    from .._capsule._read import read\n"
        "except ImportError:\n"
        "    pass\n"
        "def f():\n"
        "    from ._convert import direct\n"
    )
    probe = tmp_path / "circle_probe.py"  # (not in the checkout: stacks of the version matrix run at once)
    known = {"dlbridge._pipeline._stage", "dlbridge._pipeline._export", "dlbridge._errors",
             "dlbridge._pipeline._moves", "dlbridge._capsule._read", "dlbridge._pipeline._convert"}  # fmt: skip
    probe.write_text(source, encoding="utf-8")
    try:
        eager, lazy = _import_edges(probe, known, "dlbridge._pipeline._circle_probe")
    finally:
        probe.unlink()
    assert eager == {"dlbridge._pipeline._stage", "dlbridge._pipeline._export", "dlbridge._errors",
                     "dlbridge._capsule._read"}  # fmt: skip
    assert lazy == {"dlbridge._pipeline._convert"}
