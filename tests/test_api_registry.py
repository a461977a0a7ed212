"""The public ``to_<name>`` functions come from the adapter table: one per adapter, looking like a
hand-written function, and typed in ``dlbridge/__init__.pyi`` (checked here against the table)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import dlbridge
from dlbridge._adapters import ADAPTERS
from dlbridge._api import TO

STUB = Path(dlbridge.__file__).resolve().parent / "__init__.pyi"


def _stub() -> ast.Module:
    return ast.parse(STUB.read_text(encoding="utf-8"))


def test_every_adapter_has_a_public_to_function() -> None:
    names = [f"to_{name}" for name in ADAPTERS]
    assert list(TO) == names
    assert [n for n in dlbridge.__all__ if n.startswith("to_")] == names
    for name, adapter in ADAPTERS.items():
        f = getattr(dlbridge, f"to_{name}")
        assert f is TO[f"to_{name}"]
        assert (f.__name__, f.__qualname__, f.__module__) == (f"to_{name}", f"to_{name}", "dlbridge")
        assert f.__doc__.startswith(f"``x`` as a ``{'.'.join(adapter.array_type)}``: ")
        assert adapter.display in f.__doc__ and adapter.to_doc in f.__doc__
        params = inspect.signature(f).parameters
        assert list(params) == ["x", "fallback", "dtype", "device", "copy", "stream"]
        assert params["x"].kind is inspect.Parameter.POSITIONAL_ONLY
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params.values())[1:])
        assert inspect.signature(f).return_annotation == ".".join(adapter.array_type)


def test_the_stub_types_every_to_function_and_no_other() -> None:
    typed = {node.name: node for node in _stub().body if isinstance(node, ast.FunctionDef)}
    to_typed = {name for name in typed if name.startswith("to_")}
    assert to_typed == {f"to_{name}" for name in ADAPTERS}, "add to_<name> to dlbridge/__init__.pyi"
    for name, adapter in ADAPTERS.items():
        returns = ast.unparse(typed[f"to_{name}"].returns)  # type: ignore[arg-type]
        assert returns.partition("[")[0] == ".".join(adapter.array_type), (name, returns)


def test_the_stub_has_a_convert_overload_for_every_name_and_alias() -> None:
    literals: dict[str, str] = {}  # target name -> return type of its overload
    for node in _stub().body:
        if isinstance(node, ast.FunctionDef) and node.name == "convert":
            annotation = node.args.posonlyargs[1].annotation
            if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "Literal":
                for value in ast.walk(annotation.slice):
                    if isinstance(value, ast.Constant):
                        literals[value.value] = ast.unparse(node.returns)  # type: ignore[arg-type]
    for name, adapter in ADAPTERS.items():
        for alias in (name, *adapter.aliases, *adapter.module_aliases):
            assert alias in literals, f"convert(x, {alias!r}) has no overload in dlbridge/__init__.pyi"
            assert literals[alias].partition("[")[0] == ".".join(adapter.array_type), alias


def test_the_stub_names_what_the_package_exports() -> None:
    stubbed = (
        {
            alias.asname or alias.name
            for node in _stub().body
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 1
            for alias in node.names
        }
        | {node.name for node in _stub().body if isinstance(node, ast.FunctionDef)}
        | {"__version__"}
    )
    assert set(dlbridge.__all__) <= stubbed, sorted(set(dlbridge.__all__) - stubbed)
