"""The registry: the frameworks dlbridge knows, one module here per framework holding its entry
(``FRAMEWORK``: its names, how its arrays are recognised, where its adapter lives) and its capability rows
(``ROWS``: its consumer and producer facts, each with its source).

``MODULES`` lists the frameworks dlbridge ships, in order; they are read when first needed (a conversion,
the capability table), never at ``import dlbridge``.
What is derived from the registry elsewhere (the adapter table and its name lookups, the capability
table) is rebuilt when ``REGISTRY.generation`` changes. ``dlbridge._adapters.register`` adds a
framework at run time.

The versions at each row's ``since``/``until`` boundary, and the release just below it, are installed and checked
against ``dlbridge report --strict`` by ``.ci/edges``; ``compat_edges.md`` at the repository root lists which
versions were checked and what they showed.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping

from .._dtypes import BY_NAME
from .._errors import OptionError
from ._common import FEATURES, KINDS, PRODUCER_KINDS, Framework, Row, Support, row

__all__ = ["FEATURES", "KINDS", "PRODUCER_KINDS", "Framework", "Row", "Support", "row", "MODULES", "REGISTRY",
           "SUPPORT"]  # fmt: skip

# paddle before tensorflow: code that imports the frameworks in this order must not crash (importing
# paddle after tensorflow does; see PaddleAdapter.unsafe_after). Sources only (pyarrow) come last.
MODULES = ("torch", "cupy", "jax", "numpy", "paddle", "tensorflow", "mlx", "array_api_strict", "onnxruntime", "warp",
           "pyarrow")  # fmt: skip


class Registry:
    """The frameworks, in order: each one's entry and rows. Replaced whole when a framework is added
    (never edited in place), so that a reader in another thread never sees one half-made."""

    def __init__(self, modules: tuple[str, ...]) -> None:
        self._modules = modules
        self._entries: dict[str, Framework] | None = None
        self._rows: dict[str, tuple[Row, ...]] = {}
        self._support: dict[str, Support] = {}
        self._table: tuple[Row, ...] | None = None
        self.generation = 0  # +1 for each framework registered at run time

    @property
    def entries(self) -> dict[str, Framework]:
        """Every framework's entry by name (the shipped ones read on first use). Do not edit: register."""
        entries = self._entries
        if entries is None:
            entries, rows, support = {}, {}, {}
            for name in self._modules:
                module = importlib.import_module(f"{__name__}.{name}")
                _check(module.FRAMEWORK, module.ROWS)
                entries[name], rows[name], support[name] = module.FRAMEWORK, module.ROWS, module.SUPPORT
            self._rows, self._support, self._entries = rows, support, entries
        return entries

    def table(self) -> tuple[Row, ...]:
        """Every framework's capability rows, in the registry's order."""
        table = self._table
        if table is None:
            entries, rows = self.entries, self._rows  # (entries first: it reads the shipped rows)
            table = self._table = tuple(r for name in entries for r in rows[name])
        return table

    def support(self, name: str) -> Support | None:
        """A framework's floors (pyproject's extra) and the releases its rows were probed on (its module's
        ``SUPPORT``); None for a framework registered at run time without them."""
        self.entries  # noqa: B018  (reads the shipped modules first)
        return self._support.get(name)

    def register(self, framework: Framework, rows: Iterable[Row], support: Support | None = None) -> None:
        """Add ``framework`` (its adapter is imported when first needed) and its capability rows (made
        with ``row``, consumer ``framework.name``) for the rest of the process. OptionError if one of its
        names is taken, a row is not its own, or it claims to be the host (there is one already)."""
        entries = self.entries
        if not isinstance(framework, Framework):
            raise OptionError(f"register() takes a dlbridge._rows.Framework, not {type(framework).__name__}")
        rows = tuple(rows)
        _check(framework, rows)
        taken = {n: f.name for f in entries.values() for n in _names(f)}
        clash = [n for n in _names(framework) if n in taken]
        if clash:
            raise OptionError(f"cannot register {framework.name!r}: {', '.join(map(repr, clash))} already taken "
                              f"(by {taken[clash[0]]!r}); pick names no framework uses")  # fmt: skip
        if framework.host:
            raise OptionError(f"cannot register {framework.name!r} as the host: there is one already")
        self._rows = {**self._rows, framework.name: rows}
        if support is not None:
            self._support = {**self._support, framework.name: support}
        self._entries, self._table = {**entries, framework.name: framework}, None
        self.generation += 1


def _names(framework: Framework) -> tuple[str, ...]:
    """The names a framework is found by: its own, its module, its aliases and its module aliases."""
    return (framework.name, framework.module, *framework.aliases, *framework.module_aliases)


def _check(framework: Framework, rows: tuple[Row, ...]) -> None:
    name = framework.name
    module, _, cls = framework.adapter.partition(":")
    if not module or not cls:
        raise OptionError(
            f"{name!r}: adapter={framework.adapter!r}; name its Adapter subclass as 'package.module:Class'"
        )
    for r in rows:
        if not isinstance(r, Row) or r.consumer != name or r.what not in KINDS:
            raise OptionError(f"register({name!r}): {r!r} is not a row of {name!r}; make rows "
                              f"with dlbridge._rows.row({name!r}, <one of {', '.join(KINDS)}>, ...)")  # fmt: skip
        unknown = sorted(d for d in r.dtypes if d not in BY_NAME)
        if unknown:
            raise OptionError(f"register({name!r}): row {r.what!r} names unknown dtypes {unknown}")


REGISTRY = Registry(MODULES)


class _Support(Mapping[str, Support]):
    """framework name -> its ``Support`` (floors and probed range), read off the registry when asked."""

    def __getitem__(self, name: str) -> Support:
        found = REGISTRY.support(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return (name for name in REGISTRY.entries if REGISTRY.support(name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


SUPPORT: Mapping[str, Support] = _Support()
