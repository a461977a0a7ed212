"""One guarded function's settings (``_Spec``) and one call's state (``_Call``): which arguments are
converted and how, and how results go back (the caller's own object when the body handed back an
argument unchanged, its logical dtype restored after a ``fallback="view"`` view)."""

from __future__ import annotations

import inspect as _inspect
from collections.abc import Callable, Sequence
from types import CoroutineType, GeneratorType
from typing import Any

from .._adapters import Adapter, adapter_for
from .._capsule._read import device_name
from .._dtypes import BY_NAME, DType, dtype_name, lookup
from .._errors import (
    CapsuleError,
    DeviceMismatchError,
    DLBridgeError,
    NotAnArrayError,
    OptionError,
    ProducerError,
    ReadOnlyError,
    UnsupportedDtypeError,
)
from .._options import NOT_GIVEN, Fallback, resolve_fallback
from .._pipeline._convert import run_stages
from .._pipeline._devices import result_device
from .._pipeline._explain import explain
from .._pipeline._handoff import Handoff
from .._route._replay import SPECS
from .._route._replay import convert as route
from ._kinds import converted_coroutine, converted_generator
from ._messages import call_head, describe, in_context, nesting_error
from ._values import CONTAINERS as _CONTAINERS
from ._values import MAX_DEPTH, device_or_unknown, holds_array, layout, map_items, opaque, unchanged

__all__ = ["_Spec", "_Call"]

_Kind = _inspect.Parameter
_NAMED = (_Kind.POSITIONAL_ONLY, _Kind.POSITIONAL_OR_KEYWORD)
_BY_KEYWORD = (_Kind.POSITIONAL_OR_KEYWORD, _Kind.KEYWORD_ONLY)


class _Spec:
    """Everything about one guarded function that does not change between calls."""

    def __init__(self, fn: Callable[..., Any], target: Adapter, to_label: str, args: Sequence[str | int] | None,
                 back: Adapter | Any, convert: bool, fallback: Any, device: Any, copy: bool | None,
                 stream: int | None, readonly: str = "keep") -> None:  # fmt: skip
        self.fn = fn
        self.target = target
        self.to_label = to_label
        self.back = back  # None, NOT_GIVEN (the caller's framework) or an adapter
        self.convert = convert
        self.fallback = fallback
        self.device, self.copy, self.stream, self.readonly = device, copy, stream, readonly
        # Arrays already in the target framework are passed as they are unless they must move or copy.
        self.keep_native = device is None and copy is not True
        # Where results go back: only a conversion that may have moved data needs the source device.
        self.track_device = back is NOT_GIVEN and (device is not None or copy is True or target.device_codes != {1})
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        self.name = name.rpartition("<locals>.")[2]  # "Model.forward", not "make.<locals>.Model.forward"
        try:
            params = list(_inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # builtins without a signature: positions only
            params = []
        self.params = params
        self.positional = [p.name for p in params if p.kind in _NAMED]
        self.keywords = frozenset(p.name for p in params if p.kind in _BY_KEYWORD)
        self.star = next((p.name for p in params if p.kind is _Kind.VAR_POSITIONAL), None)
        # args=: (position or None, keyword or None) per selected parameter; "*" / "**" for varargs.
        self.selected: list[tuple[Any, Any]] | None = None
        if args is not None:
            self.selected = [self._slot(p) for p in self._select(args)]

    def _slot(self, p: _inspect.Parameter) -> tuple[Any, Any]:
        if p.kind is _Kind.VAR_POSITIONAL:
            return ("*", None)
        if p.kind is _Kind.VAR_KEYWORD:
            return (None, "**")
        pos = self.positional.index(p.name) if p.kind in _NAMED else None
        return (pos, p.name if p.kind in _BY_KEYWORD else None)

    def _select(self, args: Sequence[str | int]) -> list[_inspect.Parameter]:
        if isinstance(args, (str, int)):
            args = (args,)
        by_name = {p.name: p for p in self.params}
        chosen: list[_inspect.Parameter] = []
        for key in args:
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise OptionError(f"guard(args=...): {key!r} is neither a parameter name nor a position")
            param = by_name.get(key) if isinstance(key, str) else (
                self.params[key] if -len(self.params) <= key < len(self.params) else None)  # fmt: skip
            if param is None:
                names = ", ".join(by_name) or "none"
                raise OptionError(
                    f"guard(args=...): {self.name}() has no parameter {key!r}; its parameters are: {names}"
                )
            if param not in chosen:
                chosen.append(param)
        return sorted(chosen, key=self.params.index)

    # --- the call ------------------------------------------------------------------------------

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        # enter() and leave() inlined: this is every plain call's path.
        state = _Call(self)
        if self.selected is None:
            args, kwargs = state.all_args(args, kwargs)
        else:
            args, kwargs = state.selected_args(args, kwargs)
        if state.views:
            try:
                result = self.fn(*args, **kwargs)
            except BaseException as err:
                self.annotate(state, err)
                raise
        else:
            result = self.fn(*args, **kwargs)
        back = self.back
        if back is None:
            return result
        if back is NOT_GIVEN:
            back = state.first_adapter
            if back is None:  # no array argument, or one from a framework dlbridge cannot make
                return result
        return state.result(result, back, ("result",))

    # --- the steps (also for async and generator bodies) ---------------------------------------

    def enter(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[_Call, tuple[Any, ...], dict[str, Any]]:
        __tracebackhide__ = True
        state = _Call(self)
        if self.selected is None:
            args, kwargs = state.all_args(args, kwargs)
        else:
            args, kwargs = state.selected_args(args, kwargs)
        return state, args, kwargs

    def leave(self, state: _Call, value: Any, where: tuple[Any, ...]) -> Any:
        __tracebackhide__ = True
        back = self.back
        if back is None:
            return value
        if back is NOT_GIVEN:
            back = state.first_adapter
            if back is None:
                return value
        return state.result(value, back, where)

    @staticmethod
    def annotate(state: _Call, err: BaseException) -> None:
        if state.views and hasattr(err, "add_note"):
            err.add_note(state.view_note())

    # --- naming arguments for messages -----------------------------------------------------

    def label(self, where: tuple[Any, ...]) -> str:
        """``x``, ``xs[1]``, ``d['k']`` for an argument's path (position or keyword first)."""
        head, *rest = where
        if isinstance(head, int):
            if head < len(self.positional):
                head = self.positional[head]
            else:
                rest = [head - len(self.positional), *rest]
                head = self.star or "args"
        return str(head) + "".join(f"[{k!r}]" for k in rest)


class _Call:
    """The state of one guarded call: fallback, first array argument, views made."""

    __slots__ = ("fb", "first_adapter", "first_device", "given", "spec", "views", "walking")

    def __init__(self, spec: _Spec) -> None:
        self.spec = spec
        self.fb: Fallback | None = None
        self.first_adapter: Adapter | None = None
        self.first_device: tuple[int, int] | None = None
        self.views: dict[DType, tuple[str, str]] = {}  # wire dtype -> (logical dtype, argument label)
        # id(converted) -> (converted, original, the converted array's layout then; None if the same object)
        self.given: dict[int, tuple[Any, Any, Any]] = {}
        self.walking: list[int] | None = None  # ids of the containers being walked, outermost first

    def all_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        __tracebackhide__ = True
        new_args = None
        for i, value in enumerate(args):
            new = self.value(value, (i,), False)
            if new is not value:
                if new_args is None:
                    new_args = list(args)
                new_args[i] = new
        new_kwargs = None
        for key, value in kwargs.items():
            new = self.value(value, (key,), False)
            if new is not value:
                if new_kwargs is None:
                    new_kwargs = dict(kwargs)
                new_kwargs[key] = new
        return (args if new_args is None else tuple(new_args)), (kwargs if new_kwargs is None else new_kwargs)

    def selected_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        __tracebackhide__ = True
        spec = self.spec
        new_args, new_kwargs = list(args), dict(kwargs)
        for pos, key in spec.selected or ():
            if pos == "*":
                for i in range(len(spec.positional), len(args)):
                    new_args[i] = self.value(args[i], (i,), True)
            elif key == "**":
                for k in kwargs:
                    if k not in spec.keywords:
                        new_kwargs[k] = self.value(kwargs[k], (k,), True)
            elif pos is not None and pos < len(args):
                new_args[pos] = self.value(args[pos], (pos,), True)
            elif key is not None and key in kwargs:
                new_kwargs[key] = self.value(kwargs[key], (key,), True)
        return tuple(new_args), new_kwargs

    def value(self, value: Any, where: tuple[Any, ...], explicit: bool) -> Any:
        """``value`` with its arrays converted (containers rebuilt only when something changed)."""
        __tracebackhide__ = True
        cls = type(value)
        if hasattr(cls, "__dlpack__"):
            if not opaque(value):
                return self.array(value, where)
            if explicit:
                dtype = getattr(getattr(value, "dtype", None), "name", "?")
                raise NotAnArrayError(
                    f"{self.spec.name}({self.spec.label(where)}=…): args= selects it for conversion to "
                    f"{self.spec.target.display}, but it is a tensor of dtype {dtype} ({cls.__qualname__}), which "
                    "holds no array of numbers DLPack can carry; leave it out of args= (the guard then passes it "
                    "through unchanged)"
                )
            return value  # a TensorFlow string tensor, say: passed as values that are not arrays are
        if cls in _CONTAINERS or (isinstance(value, tuple) and hasattr(cls, "_fields")):
            if explicit and value and not holds_array(value):  # a list of numbers, say: nothing to convert
                raise NotAnArrayError(
                    f"{self.spec.name}({self.spec.label(where)}=…): args= selects it for conversion to "
                    f"{self.spec.target.display}, but it is a {cls.__qualname__} holding no array that supports "
                    "DLPack; pass arrays (or a tuple, list or dict holding some), or leave it out of args="
                )
            return self.walk(value, where, lambda v, k: self.value(v, (*where, k), False))
        if explicit and value is not None:
            raise NotAnArrayError(
                f"{self.spec.name}({self.spec.label(where)}=…): args= selects it for conversion to "
                f"{self.spec.target.display}, but it is a {cls.__module__}.{cls.__qualname__}, not an array that "
                "supports DLPack (or a tuple, list or dict of them)"
            )
        return value

    def walk(self, value: Any, where: tuple[Any, ...], convert: Any) -> Any:
        """``map_items(value, convert)``; a container that holds itself, or one nested deeper than
        MAX_DEPTH, is refused (NotAnArrayError) rather than walked into a RecursionError."""
        __tracebackhide__ = True
        walking = self.walking
        if walking is None:
            walking = self.walking = []
        cycle = id(value) in walking
        if cycle or len(walking) >= MAX_DEPTH:
            raise nesting_error(self.spec, where, value, cycle, MAX_DEPTH)
        walking.append(id(value))
        try:
            return map_items(value, convert)
        finally:
            walking.pop()

    def array(self, x: Any, where: tuple[Any, ...]) -> Any:
        __tracebackhide__ = True
        spec = self.spec
        source = adapter_for(x)
        if self.first_adapter is None and self.first_device is None:
            self.first_adapter = source
            dev = device_or_unknown(x) if spec.track_device else (0, 0)
            self.first_device = result_device(dev, source)  # a pinned torch tensor's results: CPU tensors
        if source is spec.target and spec.keep_native:
            self.given[id(x)] = (x, x, None)  # handed back, it is the caller's own object, not a view
            return x
        if not spec.convert:
            self.check(x, where)
            return x
        fb = self.fb
        if fb is None:
            fb = self.fb = resolve_fallback(spec.fallback)
        try:
            if fb == "view":  # the record says whether a view was handed over (noted for the results)
                new, record = run_stages(x, spec.target, fb, None, spec.device, spec.copy, spec.stream,
                                         readonly=spec.readonly)  # fmt: skip
                self.note_view(record, where)
            else:  # the fast route, as to_<target>() takes it
                new = route(SPECS[spec.target.name], x, fb, None, spec.device, spec.copy, spec.stream, spec.readonly)
        except DLBridgeError as err:
            raise in_context(err, spec, where, x) from err.__cause__
        self.given[id(new)] = (new, x, None if new is x else layout(new))
        return new

    def note_view(self, record: Handoff, where: tuple[Any, ...]) -> None:
        """A ``fallback="view"`` conversion the record says handed over a view: noted for the result."""
        plan = record.plan
        if plan is not None and plan.mode == "view":
            self.views.setdefault(BY_NAME[plan.wire], (plan.logical, self.spec.label(where)))

    def plain_argument(self, wire: DType) -> bool:
        """Whether the caller also passed a genuine ``wire`` array (a real uint16 beside a bf16 view):
        then a ``wire`` result may be either, and it is left as the body made it, not relabelled."""
        return any(lookup(getattr(original, "dtype", None)) == wire for _, original, _ in self.given.values())

    def view_note(self) -> str:
        seen = ", ".join(
            f"{arg} as a {dtype_name(*wire)} view of {logical}" for wire, (logical, arg) in self.views.items()
        )
        return f'dlbridge.guard({self.spec.to_label!r}, fallback="view"): {self.spec.name}() received {seen}'

    def check(self, x: Any, where: tuple[Any, ...]) -> None:
        """``convert=False``: raise now what the target would fail on (the record's device move or
        dtype refusal; layouts and read-only memory are the body's own), convert nothing."""
        __tracebackhide__ = True
        spec = self.spec
        record = explain(x, spec.target.name, fallback="raise")
        if record.move is not None or record.error is DeviceMismatchError:
            where_ok = sorted({device_name(c) for c in spec.target.device_codes})
            raise DeviceMismatchError(
                f"{call_head(spec, where)}: received {describe(x)}; {spec.target.name} arrays live on "
                f"{' or '.join(where_ok)}, and convert=False moves nothing. Pass the argument on "
                f'{where_ok[0]}, or drop convert=False and pass device="{where_ok[0]}" to the guard'
            )
        if record.error in (UnsupportedDtypeError, OptionError, ProducerError, NotAnArrayError, CapsuleError):
            err = record.error(record.message)
            hint = " convert=False converts nothing: drop it to let the guard convert with that fallback."
            raise in_context(err, spec, where, x, hint if "fallback=" in str(err) else "") from None

    # --- results -----------------------------------------------------------------------------

    def result(self, value: Any, back: Adapter, where: tuple[Any, ...]) -> Any:
        __tracebackhide__ = True
        cls = type(value)
        if hasattr(cls, "__dlpack__"):
            return value if opaque(value) else self.result_array(value, back, where)
        if cls in _CONTAINERS or (isinstance(value, tuple) and hasattr(cls, "_fields")):
            return self.walk(value, where, lambda v, k: self.result(v, back, (*where, k)))
        if cls is GeneratorType:  # from a plain function (a generator expression, say): convert as it yields
            return converted_generator(value, self.spec, self)
        if cls is CoroutineType:  # from a plain function (an object whose __call__ is async, say)
            return converted_coroutine(value, self.spec, self)
        return value

    def result_array(self, r: Any, back: Adapter, where: tuple[Any, ...]) -> Any:
        __tracebackhide__ = True
        spec = self.spec
        given = self.given.get(id(r))
        handed_back = False
        if given is not None and given[0] is r and (given[2] is None or unchanged(r, given)):
            # The body returned an argument it was handed, as it was handed: give back what the
            # caller passed (its own object, true dtype and all), or convert that instead of the
            # view. One whose metadata the body changed in place (``x.t_()``, ``x.shape = ...``)
            # is not the caller's object any more: it is converted as the body left it.
            if adapter_for(given[1]) is back:
                return given[1]
            r, handed_back = given[1], True
        dtype = None
        if self.views and not handed_back:  # the caller's own object already has its true dtype
            wire = lookup(getattr(r, "dtype", None))
            if wire is not None and wire in self.views and not self.plain_argument(wire):
                dtype = self.views[wire][0]
        device = self.first_device if spec.track_device and spec.back is NOT_GIVEN else None
        if dtype is None and adapter_for(r) is back and (device is None or device_or_unknown(r) == device):
            return r  # already where it belongs
        fb = self.fb if self.fb is not None else resolve_fallback(spec.fallback)
        try:
            try:
                return run_stages(r, back, fb, dtype, device, None, None, readonly=spec.readonly)[0]
            except ReadOnlyError:
                # A read-only result (a JAX array, a NumPy view of one) that the caller's framework
                # cannot share (readonly="keep"): results need only their values, so let the producer copy it.
                return run_stages(r, back, fb, dtype, device, True, None)[0]
        except DLBridgeError as err:
            raise in_context(err, spec, where, r, returned=True) from err.__cause__
