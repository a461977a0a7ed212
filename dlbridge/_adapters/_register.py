"""Adding a framework at run time: its adapter and its capability rows, in one call.

dlbridge's own frameworks are listed statically (``ADAPTERS`` in ``_adapters/__init__.py``, the
row modules in ``_rows.MODULES``) and each has a public ``to_<name>``. ``register`` puts another
adapter in the same tables for the rest of the process: ``convert(x, "<name>")`` then reaches it,
and its arrays are recognised as sources. It is how an adapter is tried out before it is listed,
and how the tests show that an adapter file plus its rows is all a framework needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import _adapters, _api, _capabilities
from .._dtypes import BY_NAME
from .._errors import OptionError
from .._route import _learn
from .._rows import KINDS, Row
from . import ADAPTERS, Adapter

__all__ = ["register"]


def register(adapter: Adapter, rows: Iterable[Row]) -> Callable[..., Any]:
    """Add ``adapter`` (an instance of an ``Adapter`` subclass) and its capability ``rows`` (made with
    ``dlbridge._rows.row``, consumer ``adapter.name``) for the rest of the process. Returns its
    ``to_<name>`` function (not added to the ``dlbridge`` namespace, whose functions are typed in
    ``__init__.pyi``). OptionError if a name is taken or a row is not the adapter's."""
    rows = tuple(rows)
    _check(adapter, rows)
    ADAPTERS[adapter.name] = adapter
    for alias in (adapter.name, adapter.module, *adapter.aliases, *adapter.module_aliases):
        _adapters._NAMES[alias] = adapter
    for module in adapter.producer_modules:
        _adapters._BY_MODULE.setdefault(module, adapter)
    _adapters._NOT_ARRAYS.clear()  # types found to be no framework's array may be this one's
    _capabilities.TABLE = (*_capabilities.TABLE, *rows)
    _capabilities.CONSUMERS = (*_capabilities.CONSUMERS, adapter.name)
    _capabilities.capabilities.cache_clear()
    _learn.SPECS[adapter.name] = [_learn.new_state(adapter)]
    to = _api._to(adapter)
    _api.TO[to.__name__] = to
    return to


def _check(adapter: Adapter, rows: tuple[Row, ...]) -> None:
    if not isinstance(adapter, Adapter):
        raise OptionError(f"register() takes an Adapter instance, not {type(adapter).__name__}")
    taken = [
        n for n in (adapter.name, adapter.module, *adapter.aliases, *adapter.module_aliases) if n in _adapters._NAMES
    ]
    if taken:
        raise OptionError(f"cannot register adapter {adapter.name!r}: {', '.join(map(repr, taken))} already taken "
                          f"(by {_adapters._NAMES[taken[0]].name!r}); pick names no framework uses")  # fmt: skip
    for r in rows:
        if not isinstance(r, Row) or r.consumer != adapter.name or r.what not in KINDS:
            raise OptionError(f"register({adapter.name!r}): {r!r} is not a row of {adapter.name!r}; make rows "
                              f"with dlbridge._rows.row({adapter.name!r}, <one of {', '.join(KINDS)}>, ...)")  # fmt: skip
        unknown = sorted(d for d in r.dtypes if d not in BY_NAME)
        if unknown:
            raise OptionError(f"register({adapter.name!r}): row {r.what!r} names unknown dtypes {unknown}")
