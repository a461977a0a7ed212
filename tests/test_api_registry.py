"""The public ``to_<name>`` functions: one per framework of the registry that dlbridge converts into, each
written out in ``dlbridge/_api.py`` (typed, documented, found by tools) and re-exported by ``dlbridge``;
where the accelerator is built a compiled ``Route`` stands in for it (tests/test_pickle.py: it pickles
and copies by reference, as the function does)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import dlbridge
from dlbridge import _accelerator
from dlbridge._adapters import ADAPTERS
from tests.conftest import need

PACKAGE = Path(dlbridge.__file__).resolve().parent
ROOT = PACKAGE.parent


def _module(name: str) -> ast.Module:
    return ast.parse((PACKAGE / name).read_text(encoding="utf-8"))


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_target_has_a_public_function_written_out() -> None:
    names = [f"to_{name}" for name in ADAPTERS]
    assert [n for n in dlbridge.__all__ if n.startswith("to_")] == names
    written = _functions(_module("_api.py"))
    reexported = {
        alias.asname
        for node in _module("__init__.py").body
        if isinstance(node, ast.ImportFrom) and node.module == "_api"
        for alias in node.names
    }
    for name, adapter in ADAPTERS.items():
        to = f"to_{name}"
        assert to in written, f"write {to} out in dlbridge/_api.py"
        assert to in reexported, f"re-export it in dlbridge/__init__.py: from ._api import {to} as {to}"
        assert ast.unparse(written[to].returns).partition("[")[0] == ".".join(adapter.framework.array_type)  # type: ignore[arg-type]
        f = getattr(dlbridge, to)
        assert (f.__name__, f.__qualname__, f.__module__) == (to, to, "dlbridge")
        assert f.__doc__.startswith(f"``x`` as a ``{'.'.join(adapter.framework.array_type)}``: ")
        assert adapter.display in f.__doc__
        params = inspect.signature(f).parameters
        assert list(params) == ["x", "fallback", "dtype", "device", "copy", "stream", "readonly"]
        assert params["x"].kind is inspect.Parameter.POSITIONAL_ONLY
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params.values())[1:])
        assert inspect.signature(f).return_annotation.partition("[")[0] == ".".join(adapter.framework.array_type)
        # Tools find the source: the function itself, or the one the compiled Route stands for.
        assert inspect.getsourcefile(inspect.unwrap(f)) == str(PACKAGE / "_api.py")


def test_the_compiled_route_stands_in_for_the_function_where_built() -> None:
    f = dlbridge.to_numpy
    if _accelerator.accel is None:
        assert inspect.isfunction(f)
        return
    assert type(f).__name__ == "Route" and inspect.isfunction(f.__wrapped__)
    assert f.__wrapped__.__code__.co_filename == str(PACKAGE / "_api.py")
    np = need("numpy")
    a = np.arange(4.0)
    assert f(a).ctypes.data == a.ctypes.data


def test_convert_has_an_overload_for_every_name_and_alias() -> None:
    literals: dict[str, str] = {}  # target name -> return type of its overload
    for node in _module("_api.py").body:
        if isinstance(node, ast.FunctionDef) and node.name == "convert":
            annotation = node.args.posonlyargs[1].annotation
            if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "Literal":
                for value in ast.walk(annotation.slice):
                    if isinstance(value, ast.Constant):
                        literals[value.value] = ast.unparse(node.returns)  # type: ignore[arg-type]
    for name, adapter in ADAPTERS.items():
        for alias in (name, *adapter.framework.aliases, *adapter.framework.module_aliases):
            assert alias in literals, f"convert(x, {alias!r}) has no overload in dlbridge/_api.py"
            assert literals[alias].partition("[")[0] == ".".join(adapter.framework.array_type), alias


def test_every_listed_name_is_there_and_typed() -> None:
    tree = _module("__init__.py")
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    }
    assert set(dlbridge.__all__) - {"__version__"} <= imported, sorted(set(dlbridge.__all__) - imported)
    for name in dlbridge.__all__:
        assert getattr(dlbridge, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'to_nothing'"):
        dlbridge.to_nothing  # type: ignore[attr-defined]  # noqa: B018
