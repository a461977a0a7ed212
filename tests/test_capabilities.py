"""The capability table: well-formed, and right about the CPU frameworks installed here.

The native checks run in a child process: the table exists because consumers sometimes die
on capsules they reject.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

import dlbridge
from dlbridge._capabilities import KINDS, capabilities, parse_version, table
from dlbridge._dtypes import BY_NAME
from tests.conftest import need, run_child


def test_every_row_has_a_source_and_a_known_kind() -> None:
    for row in table():
        assert row.source.strip(), row
        assert row.what in KINDS, row
        assert "FACTS" not in row.source, row  # upstream sources or dlbridge's own probes only
        assert all(d in BY_NAME for d in row.dtypes), row
        if row.since and row.until:
            assert parse_version(row.since) < parse_version(row.until), row


def test_version_ranges() -> None:
    assert capabilities("cupy", "13.3.0").crashes_on_reject
    assert not capabilities("cupy", "13.4.0").crashes_on_reject
    assert "bfloat16" not in capabilities("cupy", "13.6.0").holds
    assert not capabilities("torch", "2.8.0").versioned_capsules
    assert capabilities("torch", "2.13.0+cpu").versioned_capsules
    fp8_old = capabilities("torch", "2.5.1")
    assert "float8_e4m3fn" in fp8_old.holds and "float8_e4m3fn" not in fp8_old.imports


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        ("2.6.0rc1", "2.6"),  # a release candidate
        ("2.5.0a0+gitabc", "2.5"),  # a source build before the release (torch's form)
        ("2.6.0.dev20250101", "2.6"),  # a nightly
        ("2.6.0.dev20250101", "2.6.0rc1"),
        ("2.6", "2.6.1"),
        ("1.26.4", "1.27"),  # plain releases compare numerically, not as text
        ("0.4.9", "0.4.30"),
        ("2.5", "2.5.0.1"),
    ],
)
def test_parse_version_orders_prereleases_before_their_release(earlier: str, later: str) -> None:
    assert parse_version(earlier) < parse_version(later)


@pytest.mark.parametrize(("a", "b"), [("2.13.0+cpu", "2.13.0"), ("2.13", "2.13.0"), ("1.26.4", "1.26.4+local")])
def test_parse_version_ignores_local_labels_and_trailing_zeros(a: str, b: str) -> None:
    assert parse_version(a) == parse_version(b)


@pytest.mark.parametrize("version", ["2.9.0rc1", "2.9.0a0+git1234567", "2.9.0.dev20250101"])
def test_a_row_claims_nothing_for_a_prerelease_of_its_first_version(version: str) -> None:
    # torch reads versioned capsules since 2.9: its pre-releases are still treated as 2.8.
    assert capabilities("torch", "2.9.0").versioned_capsules
    assert not capabilities("torch", version).versioned_capsules


def test_cupy_13_3_never_receives_a_dtype_it_would_crash_on() -> None:
    """The plan for a crash-prone consumer only ever puts imported dtypes on the wire."""
    from dlbridge._capsule._read import DLPackInfo
    from dlbridge._errors import UnsupportedDtypeError
    from dlbridge._pipeline._plan import plan_for

    caps = capabilities("cupy", "13.3.0")
    for name, d in BY_NAME.items():
        info = DLPackInfo(
            name, d.code, d.bits, d.lanes, "cuda", 0, (2,), None, 0, 1 << 20, False, False, None, "torch", 0, 2
        )
        for fallback in ("raise", "view", "upcast"):
            try:
                plan = plan_for(info, caps, fallback)  # type: ignore[arg-type]
            except UnsupportedDtypeError:
                continue
            assert plan.wire in caps.imports, (name, fallback, plan)


PROBE = """
import json, warnings
warnings.simplefilter("ignore")
import numpy as np, ml_dtypes, jax, jax.numpy as jnp, torch
from dlbridge._dtypes import BY_NAME
names = [n for n in BY_NAME if n != "float4_e2m1fn_x2" and n not in ("float6_e2m3fn", "float6_e3m2fn")]
importers = {"torch": torch.from_dlpack, "jax": jnp.from_dlpack, "numpy": np.from_dlpack}
seen = {}
for name in names:
    dt = getattr(jnp, name, None) if name != "bool" else jnp.bool_
    if dt is None:
        continue
    try:
        src = jax.device_put(jnp.zeros((4,), dtype=dt), jax.devices("cpu")[0])
    except Exception:
        continue
    if str(src.dtype) != name and not (name == "bool" and src.dtype == jnp.bool_):
        continue  # narrowed (64-bit types without x64)
    for consumer, imp in importers.items():
        try:
            imp(src)
            seen.setdefault(consumer, []).append(name)
        except Exception:
            pass
print(json.dumps({"seen": seen, "versions": {"torch": torch.__version__, "jax": jax.__version__, "numpy": np.__version__}}))
"""


def test_table_imports_match_native_from_dlpack_here() -> None:
    for module in ("torch", "jax", "numpy", "ml_dtypes"):
        need(module)
    proc = run_child(PROBE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for consumer, imported in result["seen"].items():
        caps = capabilities(consumer, result["versions"][consumer])
        tried = set(imported) | {n for n in caps.imports if n in BY_NAME}
        predicted = {n for n in tried if n in caps.imports}
        # Everything the table says the consumer imports, it did import (from JAX sources);
        # everything it imported is in the table.
        jax_made = set().union(*result["seen"].values())
        assert predicted & jax_made == set(imported), (consumer, sorted(predicted & jax_made ^ set(imported)))


@pytest.mark.parametrize("consumer", ["torch", "cupy", "jax", "numpy"])
def test_every_consumer_has_rows(consumer: str) -> None:
    caps = capabilities(consumer, "99.0")
    assert "float32" in caps.imports


def test_capabilities_default_to_the_installed_version_without_importing_it() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (this test reads its installed version without importing it)")
    proc = run_child(
        """
        import json, sys
        from importlib import metadata
        import dlbridge
        caps = dlbridge.capabilities("torch")
        print(json.dumps([caps.version, metadata.version("torch"), "torch" in sys.modules]))
        """
    )
    assert proc.returncode == 0, proc.stderr
    version, installed, imported = json.loads(proc.stdout.strip().splitlines()[-1])
    assert version == installed and not imported
    # Once imported, the version is torch.__version__, which may carry a local label the package metadata
    # lacks (PyPI's CUDA wheels: "2.11.0+cu130" against "2.11.0"): the same rows either way.
    loaded = dlbridge.capabilities("torch")
    assert loaded.version.partition("+")[0] == version.partition("+")[0]
    assert capabilities("torch", version) == loaded._replace(version=version)


def test_capabilities_of_a_framework_that_is_not_installed_says_so() -> None:
    import importlib.util

    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("cupy is installed")
    with pytest.raises(dlbridge.MissingFrameworkError, match=r'CuPy is not installed.*capabilities\("cupy", "1.0"\)'):
        dlbridge.capabilities("cupy")
    assert capabilities("cupy", "13.6.0").consumer == "cupy"  # an explicit version needs no install
