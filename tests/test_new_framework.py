"""A new framework is one adapter module plus its rows module (its registry entry and capability rows).

tests/toy_adapter.py makes tests/toyarray.py (a DLPack producer and consumer over NumPy) a framework
with ``dlbridge._adapters.register``; it then converts to and from NumPy and torch like the shipped
frameworks, decided by its rows. Registration lasts for the process, so those tests run in a child.
A shipped framework adds, outside its two modules, three shared places: its name in
``dlbridge._rows.MODULES``, its ``to_<name>`` in ``dlbridge/_api.py`` (with its ``convert`` overload; re-exported
by ``dlbridge/__init__.py``, tests/test_api_registry.py) and an install extra; the last test here checks that
nothing else in the package names it, for every shipped framework. An adapter that leaves out part of the
interface fails when it is made (at registration, or on first use), naming what is missing."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dlbridge
from dlbridge._adapters import ADAPTERS, Adapter, Prober, adapter_for, register
from dlbridge._rows import MODULES, REGISTRY
from tests._isolated import IN_CHILD
from tests.conftest import need, run_child
from tests.test_structure import PACKAGE, _docstrings

# The toy framework is NumPy's own DLPack 1.0 export and import under another name (versioned capsules,
# max_version, copy=: NumPy >= 2.1), whose imports are writable (NumPy >= 2.2; 2.1 makes every import
# read-only, and the toy would then export them READ_ONLY).
_NUMPY_DLPACK_1 = np.lib.NumpyVersion(np.__version__) >= "2.2.0"


def isolated(test: Any) -> Any:
    skip = pytest.mark.skipif(not _NUMPY_DLPACK_1, reason="the toy framework wraps NumPy >= 2.2's DLPack 1.0")
    return skip(pytest.mark.isolated(test))


def _to_toy(x: Any, **options: Any) -> Any:
    return dlbridge.convert(x, "toy", **options)


@pytest.fixture(scope="module")
def to_toy() -> Any:
    if not IN_CHILD:
        return None  # the tests using it run in a child (isolated): this process registers nothing
    from tests.toy_adapter import FRAMEWORK, ROWS

    register(FRAMEWORK, ROWS)
    return _to_toy


def _ptr(arr: Any) -> int:
    return int(arr.data.ctypes.data)


@isolated
def test_numpy_and_toy_share_memory_both_ways(to_toy: Any) -> None:
    from tests.toyarray import ToyArray

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = to_toy(a)
    assert type(t) is ToyArray and t.dtype == np.float32 and t.shape == (3, 4)
    assert _ptr(t) == a.ctypes.data
    np.testing.assert_array_equal(t.data, a)
    back = dlbridge.to_numpy(t)
    assert back.dtype == np.float32 and back.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(back, a)
    assert adapter_for(t) is ADAPTERS["toy"]


@isolated
def test_torch_and_toy_share_memory_both_ways(to_toy: Any) -> None:
    torch = need("torch")
    x = torch.arange(6, dtype=torch.int32, device="cpu")
    t = to_toy(x)
    assert t.dtype == np.int32 and _ptr(t) == x.data_ptr()
    assert t.data.tolist() == list(range(6))
    y = dlbridge.to_torch(t)
    assert y.dtype == torch.int32 and y.data_ptr() == x.data_ptr()
    assert y.tolist() == list(range(6))


@isolated
def test_the_rows_decide_what_the_toy_takes(to_toy: Any) -> None:
    torch = need("torch")
    assert "float32" in dlbridge.capabilities("toy", "1.0").imports
    x = torch.tensor([1.0, -2.0], dtype=torch.bfloat16, device="cpu")  # no row says the toy holds bf16
    with pytest.raises(dlbridge.UnsupportedDtypeError, match="bfloat16"):
        to_toy(x, fallback="raise")
    view = to_toy(x, fallback="view")  # the same bits as uint16, zero-copy
    assert view.dtype == np.uint16 and _ptr(view) == x.data_ptr()
    assert view.data.tolist() == x.view(torch.uint16).tolist()
    up = to_toy(x, fallback="upcast")  # a float32 copy, through the adapter's bf16_bits_to_f32
    assert up.dtype == np.float32 and up.data.tolist() == [1.0, -2.0]


_ROUTE_CHECK = """
import numpy as np
import dlbridge
from dlbridge._adapters import register
from dlbridge._route._replay import SPECS
from tests.toy_adapter import FRAMEWORK, ROWS

register(FRAMEWORK._replace(adapter="tests.toy_adapter:{cls}"), ROWS)
a = np.arange(4, dtype=np.float32)
shared = [dlbridge.to_numpy(dlbridge.convert(a, "toy")).ctypes.data == a.ctypes.data for _ in range(3)]
print(all(shared), SPECS["toy"][0].ready)
"""


@pytest.mark.skipif(not _NUMPY_DLPACK_1, reason="the toy framework wraps NumPy >= 2.2's DLPack 1.0")
@pytest.mark.parametrize(("cls", "replayed"), [("ToyAdapter", False), ("FastToyAdapter", True)])
def test_a_core_adapter_takes_the_pipeline_and_one_with_the_fast_part_the_route(cls: str, replayed: bool) -> None:
    proc = run_child(_ROUTE_CHECK.format(cls=cls))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", str(replayed)]


@isolated
def test_register_refuses_taken_names_foreign_rows_and_what_is_no_adapter(to_toy: Any) -> None:
    from dlbridge._rows import row
    from tests.toy_adapter import FRAMEWORK

    with pytest.raises(dlbridge.OptionError, match=r"'toy', 'tests\.toyarray' already taken \(by 'toy'\)"):
        register(FRAMEWORK, ())
    other = FRAMEWORK._replace(name="other", module="other_mod", producer_modules=())
    with pytest.raises(dlbridge.OptionError, match="is not a row of 'other'"):
        register(other, [row("toy", "imports", ["float32"], source="-")])
    with pytest.raises(dlbridge.OptionError, match=r"'tests\.toyarray:ToyArray' is not an Adapter subclass"):
        register(other._replace(adapter="tests.toyarray:ToyArray"), ())
    with pytest.raises(dlbridge.OptionError, match="as the host: there is one already"):
        register(other._replace(host=True), ())
    assert "other" not in REGISTRY.entries  # nothing of a refused registration stays


def test_what_is_derived_from_the_registry_follows_it() -> None:
    # Before registration: not an array, not a target, no rows; after: all three, with no table patched.
    proc = run_child(
        """
        import json
        import numpy as np
        import dlbridge
        from dlbridge._adapters import ADAPTERS, adapter_for, register
        from dlbridge._capabilities import capabilities, consumers
        from tests.toyarray import ToyArray
        from tests.toy_adapter import FRAMEWORK, ROWS

        t = ToyArray(np.arange(3.0))
        def seen():
            try:
                shared = dlbridge.convert(t, "toy").data.ctypes.data == t.data.ctypes.data
            except dlbridge.OptionError:
                shared = None
            adapter = adapter_for(t)
            return [adapter and adapter.name, "toy" in ADAPTERS, sorted(capabilities("toy", "1.0").imports)[:2],
                    "toy" in consumers(), shared]
        before = seen()
        register(FRAMEWORK, ROWS)
        print(json.dumps([before, seen()]))
        """
    )
    assert proc.returncode == 0, proc.stderr
    before, after = json.loads(proc.stdout.strip().splitlines()[-1])
    assert before == [None, False, [], False, None]
    assert after == ["toy", True, ["bool", "complex128"], True, True]


# --- an incomplete adapter fails when it is made ----------------------------------------------------


def _adapter_class(drop: str = "", **attrs: Any) -> type[Adapter]:
    from tests.toy_adapter import ToyAdapter

    body = {k: v for k, v in vars(ToyAdapter).items() if k != drop and not k.startswith("__")}
    return type("Partial", (Adapter,), {**body, **attrs})


def _made(cls: type[Adapter]) -> Adapter:
    from tests.toy_adapter import FRAMEWORK

    return cls(FRAMEWORK)


def test_the_toy_adapter_is_complete() -> None:
    adapter = _made(_adapter_class())
    assert isinstance(adapter.prober, Prober) and adapter.prober.adapter is adapter
    assert (adapter.name, adapter.module, adapter.framework.array_type) == (
        "toy",
        "tests.toyarray",
        ("tests.toyarray", "ToyArray"),
    )


@pytest.mark.parametrize("method", ["view", "data_ptr", "copy", "contiguous", "to_device", "lookup_f32"])
def test_an_adapter_missing_an_abstract_method_cannot_be_made(method: str) -> None:
    with pytest.raises(TypeError, match=rf"Can't instantiate abstract class Partial .*{method}"):
        _made(_adapter_class(drop=method))


@pytest.mark.parametrize("attribute", ["display", "prober_class"])
def test_an_adapter_missing_a_required_attribute_cannot_be_made(attribute: str) -> None:
    with pytest.raises(TypeError, match=f"adapter Partial does not set {attribute}; every adapter sets"):
        _made(_adapter_class(drop=attribute))


def test_a_gpu_only_adapter_must_say_how_to_upload() -> None:
    with pytest.raises(TypeError, match=r"cannot live on the CPU \(device_codes \[2\]\), so it must implement "):
        _made(_adapter_class(device_codes=frozenset({2})))


def test_a_prober_missing_a_reader_cannot_be_made() -> None:
    from tests.toy_adapter import ToyProber

    partial = type("PartialProber", (Prober,), {"make_array": ToyProber.make_array, "host_bytes": ToyProber.host_bytes})
    adapter = _made(_adapter_class(prober_class=partial))
    with pytest.raises(TypeError, match=r"Can't instantiate abstract class PartialProber.*to_host"):
        adapter.prober  # noqa: B018 - made on first use
    for name in ADAPTERS:  # the shipped probers are complete
        assert isinstance(ADAPTERS[name].prober, Prober)


# --- how many places a shipped framework touches ------------------------------------------------------

# Outside the framework's own modules (_adapters/_<name>*.py, _rows/<name>.py), the only files of the
# package that may name it, and what each holds for it. Other frameworks' modules may name it too (a fact
# about both: the host they copy through, a module they must not be imported after, a row's source).
SHARED = {
    "_rows/__init__.py": "its name in MODULES (the registry's list)",
    "_rows/_common.py": "row constants that several frameworks' rows share (a version, a requirement)",
    "_api.py": "its to_<name>, and convert's overload for its names (typing)",
    "_shards.py": "shards' overload for its names (typing; optional)",
    "_types.py": "its dtype and device classes in DTypeLike / DeviceLike (typing; optional)",
}


def _names_in_code(path: Path) -> set[str]:
    """Every identifier, import part and word of a string constant in ``path``'s code (not docstrings)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.update(node.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(node.module.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found.update(re.findall(r"[A-Za-z0-9_]+", node.value))
    return found


def _own(rel: str, name: str) -> bool:
    return rel == f"_rows/{name}.py" or re.fullmatch(rf"_adapters/_{name}(_\w+)?\.py", rel) is not None


def test_a_shipped_framework_is_its_two_modules_and_three_shared_places() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    code = {str(p.relative_to(PACKAGE)): _names_in_code(p) for p in sorted(PACKAGE.rglob("*.py"))}
    pyproject = (
        Path(__file__).resolve().parent.parent / "pyproject.toml"
    )  # the repository's (not the installed package's)
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    assert list(REGISTRY.entries) == list(MODULES)
    for name, framework in REGISTRY.entries.items():
        words = {name, framework.module.partition(".")[0], *(a for a in framework.aliases if a.isidentifier())}
        naming = {rel for rel, found in code.items() if words & found}
        assert f"_adapters/_{name}.py" in naming and f"_rows/{name}.py" in naming, name
        others = {rel for rel in naming if not any(_own(rel, other) for other in REGISTRY.entries)}
        assert others <= set(SHARED), f"{name} is named outside its modules: {sorted(others - set(SHARED))}"
        assert "_rows/__init__.py" in others, name
        if framework.target:  # a framework dlbridge converts into has a public function and an extra
            assert "_api.py" in others and f"to_{name}" in code["_api.py"], name
            assert ADAPTERS[name].extra in extras or name == "cupy", name  # CuPy's wheels are per CUDA version
