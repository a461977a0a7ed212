"""The fast route's records: ``State`` (a consumer's state), ``Producer`` (how arrays of one type are
exported) and ``Replay`` (a stored route), immutable and built by keyword. Where the accelerator is built
they are its C types (``dlbridge/_csrc/records.c``), else the Python classes here, with the same fields
(``_fields``; tests/test_route_reentrancy.py checks both agree). See ``_route``."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from .._accelerator import accel
from ._guards import holds

__all__ = ["State", "Producer", "Replay", "Routes", "IMPORT_CAPSULE", "IMPORT_CARRIER", "IMPORT_EXCHANGE",
           "EXPORT_METHOD", "EXPORT_EXCHANGE", "EXPORT_FUNCTION", "EXPORT_METHOD_LEGACY"]  # fmt: skip

# Import kinds: the consumer takes a bare capsule, an object with __dlpack__, or a managed tensor
# through its DLPack C exchange API. Export kinds: x.__dlpack__(), the exchange API, a function.
IMPORT_CAPSULE, IMPORT_CARRIER, IMPORT_EXCHANGE = 0, 1, 2
EXPORT_METHOD, EXPORT_EXCHANGE, EXPORT_FUNCTION, EXPORT_METHOD_LEGACY = 0, 1, 2, 3


@dataclass(frozen=True, slots=True, kw_only=True)
class _PyState:
    """A consumer's state (the compiled ``State`` where the accelerator is built; the same fields)."""

    _fields: ClassVar[tuple[str, ...]]
    target: Any = None  # the consumer's adapter
    ready: bool = False  # whether the fields below are set: the route replays
    kind: int = IMPORT_CAPSULE  # how the consumer imports (IMPORT_*) ...
    importer: Any = None  # ... with this callable
    api: Any = None  # the consumer's exchange API capsule (IMPORT_EXCHANGE)
    versioned: bool = False  # whether the consumer reads versioned capsules (the kind its producer is asked for)
    routes: Any = None  # route key -> Replay, or None (the pipeline decides each time)
    caps_guard: Any = None  # (object, attribute, value) its capability row was read under, where it can vary
    caps: Any = None  # the capability row the routes were decided for
    decide: Any = None  # decide(key): the key's Replay or None, stored in routes
    self_type: Any = None  # the consumer's own array type ...
    self_import: Any = None  # ... handed back as self_import(x) ...
    self_dtypes: Any = None  # ... for these dtypes (a list, matched by identity)
    stream_query: Any = None  # its current stream: an exchange API capsule, (ask(device id), attribute), or None
    deferred: bool = False  # it asks a GPU producer for the capsule itself, with its own stream (a carrier)


@dataclass(frozen=True, slots=True, kw_only=True)
class _PyProducer:
    """How arrays of one exact type are exported (the compiled ``Producer``: the same fields)."""

    _fields: ClassVar[tuple[str, ...]]
    kind: int = EXPORT_METHOD  # EXPORT_*: how CPU arrays are exported
    handle: Any = None  # the exchange API capsule, or the export function
    guards: tuple[tuple[Any, ...], ...] | None = ()  # (attribute, call, expected[, unless]): CPU memory; None: never
    alias: str | None = None  # an attribute whose value is exported instead of x
    # a method whose result holds x's memory: an exchange-API export of x (the compiled route's: a tensor C
    # code can wrap) holds x.<keep>() until freed, in place of exporting the alias; None: the alias
    keep: str | None = None
    relabels: dict[Any, tuple[Any, int]] | None = None  # dtype -> (view dtype, triple its capsule gets)
    gpu_guards: tuple[tuple[Any, ...], ...] | None = None  # the GPU half's guards; None: no GPU half
    device_method: str | None = None  # x.<device_method>() says where x is: (type, id), or the id ...
    device_type: int = 0  # ... of this device type (0: the method gives the type too)
    gpu_kind: int = EXPORT_METHOD  # EXPORT_EXCHANGE (no sync: same streams only) or EXPORT_METHOD (stream=)
    current_device: Any = None  # current_device() -> id where the producer's handshake needs x's device current
    readonly: bool = False  # its arrays are read-only whatever their capsules say (JAX's are immutable)
    # guards and gpu_guards as one function each (``_guards.holds``), made here once: the Python route's own,
    # not fields of the record (the compiled Producer parses its guards in C)
    holds: Any = field(init=False, compare=False, repr=False)
    gpu_holds: Any = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "holds", holds(self.guards))
        object.__setattr__(self, "gpu_holds", holds(self.gpu_guards))


@dataclass(frozen=True, slots=True, kw_only=True)
class _PyReplay:
    """A stored route (the compiled ``Replay``: the same fields): the record ``decide`` made, whose
    admission (``record.admits``) is read into the fields below once, when the Replay is made."""

    _fields: ClassVar[tuple[str, ...]]
    record: Any  # the Handoff decide() made, which this route replays
    finish: Any = None  # turns the import into the result (a zero-copy view), or None
    importer: Any = None  # how the consumer imports for this record (None: the State's importer)
    unaligned: Any = None  # the Replay for the capsules this one's alignment turns away (None: the pipeline)
    wire: int = field(init=False)  # the dtype triple the consumer is handed
    triple: int = field(init=False)  # the admission: the capsule's dtype triple, ...
    device_type: int = field(init=False)
    device_id: int = field(init=False)
    kinds: int = field(init=False)  # ... capsule kinds (1 legacy, 2 versioned), ...
    readonly_ok: bool = field(init=False)
    offset_ok: bool = field(init=False)
    align: int = field(init=False)
    clear_readonly: bool = field(init=False)  # READ_ONLY cleared before the import (Admission.clear_readonly)
    misaligned: bool = field(init=False)  # data below align admitted, not aligned data (Admission.misaligned)

    def __post_init__(self) -> None:
        admits = self.record.admits
        if admits is None:
            raise TypeError("Replay(record=) needs a record whose admits is set")
        if (self.finish is not None and not callable(self.finish)) or (self.importer is not None and
                                                                       not callable(self.importer)):  # fmt: skip
            raise TypeError("Replay(finish=, importer=) must be callable or None")
        if self.unaligned is not None and type(self.unaligned) not in (_PyReplay, Replay):
            raise TypeError("Replay(unaligned=) must be a Replay or None")
        for name in _ADMISSION:
            value = getattr(admits, name)
            object.__setattr__(self, name, int(value) if name in _INTEGERS else bool(value))


_ADMISSION = ("wire", "triple", "device_type", "device_id", "kinds", "readonly_ok", "offset_ok", "align",
              "clear_readonly", "misaligned")  # fmt: skip
_INTEGERS = ("wire", "triple", "device_type", "device_id", "kinds", "align")


for _cls in (_PyState, _PyProducer, _PyReplay):
    _cls._fields = tuple(f.name for f in fields(_cls) if f.compare)  # (the record's fields: not _PyProducer.holds)

State: Any = _PyState if accel is None else accel.State
Producer: Any = _PyProducer if accel is None else accel.Producer
Replay: Any = _PyReplay if accel is None else accel.Replay
# A State's routes, and the Producers: a dict, or the compiled Routes (a mapping that keeps the compiled route's
# cache of it current)
Routes: Any = dict if accel is None else accel.Routes
