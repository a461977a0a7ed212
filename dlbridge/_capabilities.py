"""What each consumer accepts, by version: one table, one source per row.

The conversion logic only *reads* this table (through :func:`capabilities`); ``dlbridge
report`` checks it against what the installed frameworks really do and lists disagreements.

Rows are facts about consumers ("imports", "holds" and the FEATURES flags) and about
producers ("exports_uint8", "exports_as_float": dtypes whose capsules a producer mislabels;
"cannot_export"; "exports_legacy_only"). ``requires`` names
a module, optionally with a minimum version ("ml_dtypes>=0.5"), read from package metadata.

Sources: upstream release notes, changelogs, pull requests and source files; "probe
YYYY-MM-DD (versions)" is a run of ``dlbridge report``, the test suite or a one-off script on
the versions named (the version matrix in ``.ci/matrix`` reruns them).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache, lru_cache
from typing import NamedTuple

from ._rows import FEATURES, KINDS, PRODUCER_KINDS, REGISTRY, SUPPORT, Row

__all__ = ["Row", "table", "consumers", "Capabilities", "capabilities", "parse_version", "FEATURES", "KINDS",
           "satisfied", "installed_version", "floor", "version_notes"]  # fmt: skip


def table() -> tuple[Row, ...]:
    """Every row of every framework in the registry (``dlbridge._rows``), in its order."""
    return REGISTRY.table()


def consumers() -> tuple[str, ...]:
    """The frameworks dlbridge converts into (those that are only sources, such as pyarrow, are not)."""
    return tuple(name for name, framework in REGISTRY.entries.items() if framework.target)


class Capabilities(NamedTuple):
    consumer: str
    version: str
    imports: frozenset[str]
    holds: frozenset[str]  # imports plus what it can hold after a zero-copy reinterpret
    crashes_on_reject: bool
    raw_capsules: bool
    versioned_capsules: bool
    compact_only: bool
    readonly_arrays: bool
    negative_strides: bool
    offset_needs_strides: bool
    row_major_only: bool
    raw_capsules_deprecated: bool
    readonly_imports: bool
    copy_crashes_unaligned: bool
    shares_unaligned: bool
    copies_unaligned: bool
    dtype_registry: bool
    copies_imports: bool
    exports_legacy_only: bool  # as a producer: legacy capsules only (no max_version)
    detects_bool_sources: bool
    aborts_on_null_deleter: bool
    exports_uint8: frozenset[str]  # as a producer: dtypes its capsules label uint8
    exports_as_float: frozenset[str]  # as a producer: dtypes its capsules label kDLFloat of their width
    cannot_export: frozenset[str]  # as a producer: dtypes its __dlpack__ refuses

    @property
    def takes_raw_capsules(self) -> bool:
        """Whether dlbridge hands it bare capsules (taken, and without a deprecation warning)."""
        return self.raw_capsules and not self.raw_capsules_deprecated


# A pre-release sorts before its release: a row "since 2.6" must not claim 2.6.0rc1 or a 2.6 nightly.
_VERSION = re.compile(r"(\d+(?:\.\d+)*)(?:[-_.]?(dev|a|alpha|b|beta|c|rc|pre|preview)[-_.]?(\d*))?", re.IGNORECASE)
_PRE = {"dev": -4, "a": -3, "alpha": -3, "b": -2, "beta": -2, "c": -1, "rc": -1, "pre": -1, "preview": -1}


def parse_version(text: str) -> tuple[int, ...]:
    """A comparable key for a version string (PEP 440 order for the forms frameworks publish).

    The release without trailing zeros, then (0, 0) for a release or (negative phase, number) for a
    pre-release: '2.6.0' -> (2, 6, 0, 0), '2.6.0rc1' -> (2, 6, -1, 1), '2.6.0.dev20250101' ->
    (2, 6, -4, 20250101), so every pre-release sorts below its release. A local version ('+cpu',
    '+gitabc') and a post-release suffix are ignored: '2.13.0+cpu' and '2.13' give the same key.
    """
    match = _VERSION.match(text.strip().removeprefix("v"))
    if match is None:
        return ()
    release = [int(p) for p in match.group(1).split(".")]
    while release and release[-1] == 0:
        release.pop()
    if match.group(2) is None:
        return (*release, 0, 0)
    return (*release, _PRE[match.group(2).lower()], int(match.group(3) or 0))


@cache
def _importable(module: str) -> bool:
    if module in sys.modules:  # None there means "blocked" (import raises ImportError)
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a submodule of a missing package ("mlx.core" without mlx)
        return False


def installed_version(module: str) -> str | None:
    """The version of ``module`` without importing it (its ``__version__`` if loaded, else metadata)."""
    loaded = sys.modules.get(module)
    if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
        return str(loaded.__version__)
    from importlib import metadata  # only here: importing it costs more than all of dlbridge

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return None


@cache
def satisfied(requirement: str) -> bool:
    """Whether a ``requires`` entry holds here: "ml_dtypes", "ml_dtypes>=0.5", or several of them
    separated by commas (all must hold: "ml_dtypes,numpy>=2.1.2")."""
    if "," in requirement:
        return all(satisfied(part.strip()) for part in requirement.split(","))
    module, _, minimum = requirement.partition(">=")
    if not _importable(module):
        return False
    if not minimum:
        return True
    found = installed_version(module)
    return found is not None and parse_version(found) >= parse_version(minimum)


def _applies(row: Row, version: tuple[int, ...]) -> bool:
    if row.since is not None and version < parse_version(row.since):
        return False
    if row.until is not None and version >= parse_version(row.until):
        return False
    return row.requires is None or satisfied(row.requires)


def capabilities(consumer: str, version: str) -> Capabilities:
    """What ``consumer`` at ``version`` accepts, read off the table (cached while the registry is unchanged)."""
    return _capabilities(consumer, version, REGISTRY.generation)


@lru_cache(maxsize=64)
def _capabilities(consumer: str, version: str, generation: int) -> Capabilities:
    v = parse_version(version)
    rows = [r for r in table() if r.consumer == consumer and _applies(r, v)]
    imports = frozenset().union(*(r.dtypes for r in rows if r.what == "imports"))
    holds = imports.union(*(r.dtypes for r in rows if r.what == "holds"))
    flags: dict[str, object] = {f: any(r.what == f for r in rows) for f in FEATURES}
    flags.update({k: frozenset().union(*(r.dtypes for r in rows if r.what == k)) for k in PRODUCER_KINDS})
    return Capabilities(consumer, version, imports, holds, **flags)  # type: ignore[arg-type]


def missing_requirements(consumer: str, version: str, dtype: str) -> list[str]:
    """Requirements ("ml_dtypes", "ml_dtypes>=0.5") whose installation would let ``consumer`` hold ``dtype``."""
    v = parse_version(version)
    return sorted(
        {
            part.strip()
            for r in table()
            if r.consumer == consumer and r.what in ("imports", "holds") and dtype in r.dtypes and r.requires
            and not satisfied(r.requires) and _applies(r._replace(requires=None), v)
            for part in r.requires.split(",") if not satisfied(part.strip())
        }
    )  # fmt: skip


def imports_from(consumer: str, version: str, dtype: str) -> str | None:
    """The first release after ``version`` whose rows have ``consumer`` import ``dtype`` (for messages
    naming the upgrade that fixes a refusal); None where no later row does."""
    v = parse_version(version)
    later = [r.since for r in table() if r.consumer == consumer and r.what == "imports" and dtype in r.dtypes
             and r.since is not None and parse_version(r.since) > v]  # fmt: skip
    return min(later, key=parse_version) if later else None


def split_requirement(text: str) -> tuple[str, str | None]:
    """A requirement of pyproject's extras as (name, minimum): "mlx[cpu]>=0.32" -> ("mlx", "0.32")."""
    name, _, minimum = text.partition(">=")
    return name.partition("[")[0].strip(), minimum.strip() or None


def floor(name: str) -> str | None:
    """The oldest version of framework ``name`` dlbridge supports (its pyproject extra's floor); None: no extra."""
    support = SUPPORT.get(name)
    return split_requirement(support.extra[0])[1] if support is not None and support.extra else None


def _release(text: str) -> tuple[int, ...]:
    match = _VERSION.match(text.strip().removeprefix("v"))
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def version_notes(name: str, version: str) -> list[str]:
    """Why ``version`` of framework ``name`` is outside what dlbridge supports: below its floor (the
    version its pyproject extra installs), or outside the releases its rows were probed on, where the
    table's predictions are unverified. Empty when it is inside both (or dlbridge has no data for it)."""
    support = SUPPORT.get(name)
    if support is None or not _release(version):
        return []
    notes = []
    lowest = floor(name)
    if lowest is not None and parse_version(version) < parse_version(lowest):
        notes.append(f'below dlbridge\'s floor {lowest} (pip install -U "{support.extra[0]}")')
    low, high = support.probed
    newest = _release(high)
    if parse_version(version) < parse_version(low) or _release(version)[: len(newest)] > newest:
        notes.append(f"outside the releases dlbridge's capability rows were probed on ({low} to {high}.x): "
                     "their predictions are unverified here (dlbridge report checks them)")  # fmt: skip
    return notes
