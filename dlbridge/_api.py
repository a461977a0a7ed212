"""The public conversion functions: ``to_<framework>`` for each framework dlbridge converts into, and
``convert``, each a thin, keyword-only call into the route (``dlbridge/_route``), typed per framework.

Nothing here loads a framework, an adapter or the route: ``import dlbridge`` stays small. The route
loads with the first conversion (``_replay``, a stand-in until then). Where the accelerator is built, each
``to_<name>`` is a compiled ``Route`` standing in for the function written here (``_public``).
"""

from __future__ import annotations

from ._accelerator import accel
from ._options import NOT_GIVEN
from ._route._specs import SPECS

# typing costs more to import than the rest of ``import dlbridge``: it is the checker's only.
TYPE_CHECKING = False
if not TYPE_CHECKING:

    def overload(fn: object) -> object:  # (at run time the last definition of convert stands)
        return fn

else:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any, Literal, TypeVar, overload

    import array_api_strict
    import cupy
    import jax
    import mlx.core
    import numpy
    import onnxruntime
    import paddle
    import tensorflow
    import torch
    import warp

    from ._capabilities import Capabilities
    from ._options import Readonly
    from ._types import DeviceLike, DTypeLike, FallbackOption, SupportsDLPack

    _F = TypeVar("_F", bound="Callable[..., Any]")

__all__ = ["to_torch", "to_cupy", "to_jax", "to_numpy", "to_paddle", "to_tensorflow", "to_mlx", "to_array_api_strict",
           "to_onnxruntime", "to_warp", "convert", "capabilities", "register_numpy_dtypes"]  # fmt: skip

# ``x`` is typed ``SupportsDLPack | Any``: any DLPack array, but also a raw capsule or a producer older
# than DLPack 1.0 (``__dlpack__(stream=)`` only); anything else raises NotAnArrayError at run time.


class _RouteNotLoaded:
    """Stands for the route (``_route._replay``) until the first conversion, which loads it."""

    @staticmethod
    def convert(*args: Any) -> Any:
        global _replay
        from ._route import _replay

        return _replay.convert(*args)


# The route: its convert(spec, x, fallback, dtype, device, copy, stream, readonly) is the compiled route where
# built, else the Python one. The module itself from the first conversion on.
_replay: Any = _RouteNotLoaded


def _public(fn: _F) -> _F:
    """``to_<name>`` as users get it: in module ``dlbridge``; where the accelerator is built, a compiled
    ``Route`` stands in for it, whose call enters the C route without a Python frame (the function below
    runs only for a call the Route cannot read, and the first one, which loads the route). The Route
    shows the function's name, signature and docstring (``__wrapped__``), and pickles and copies by
    reference, as the function does."""
    fn.__module__ = "dlbridge"
    if accel is None:
        return fn
    return accel.Route(SPECS[fn.__name__.removeprefix("to_")], fn)


@_public
def to_torch(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN, dtype: DTypeLike | None = None,
             device: DeviceLike | None = None, copy: bool | None = None, stream: int | None = None,
             readonly: Readonly = "keep") -> torch.Tensor:  # fmt: skip
    """``x`` as a ``torch.Tensor``: the same memory and true dtype where PyTorch can hold them."""
    return _replay.convert(SPECS["torch"], x, fallback, dtype, device, copy, stream, readonly)


@_public
def to_cupy(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN, dtype: DTypeLike | None = None,
            device: DeviceLike | None = None, copy: bool | None = None, stream: int | None = None,
            readonly: Readonly = "keep") -> cupy.ndarray:  # fmt: skip
    """``x`` as a ``cupy.ndarray``: the same memory and true dtype where CuPy can hold them. CPU sources
    need ``device="cuda"`` or ``copy=True``."""
    return _replay.convert(SPECS["cupy"], x, fallback, dtype, device, copy, stream, readonly)


@_public
def to_jax(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN, dtype: DTypeLike | None = None,
           device: DeviceLike | None = None, copy: bool | None = None, stream: int | None = None,
           readonly: Readonly = "keep") -> jax.Array:  # fmt: skip
    """``x`` as a ``jax.Array``: the same memory and true dtype where JAX can hold them."""
    return _replay.convert(SPECS["jax"], x, fallback, dtype, device, copy, stream, readonly)


@_public
def to_numpy(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN, dtype: DTypeLike | None = None,
             device: DeviceLike | None = None, copy: bool | None = None,
             stream: int | None = None,
             readonly: Readonly = "keep") -> numpy.ndarray[Any, Any]:  # fmt: skip
    """``x`` as a ``numpy.ndarray``: the same memory and true dtype where NumPy can hold them. bf16/fp8
    arrive as ml_dtypes arrays sharing the memory."""
    return _replay.convert(SPECS["numpy"], x, fallback, dtype, device, copy, stream, readonly)


@_public
def to_paddle(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN, dtype: DTypeLike | None = None,
              device: DeviceLike | None = None, copy: bool | None = None, stream: int | None = None,
              readonly: Readonly = "keep") -> paddle.Tensor:  # fmt: skip
    """``x`` as a ``paddle.Tensor``: the same memory and true dtype where PaddlePaddle can hold them.
    Raises MissingFrameworkError instead of importing paddle after tensorflow (that crashes the process)."""
    return _replay.convert(SPECS["paddle"], x, fallback, dtype, device, copy, stream, readonly)


@_public
def to_tensorflow(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN, dtype: DTypeLike | None = None,
                  device: DeviceLike | None = None, copy: bool | None = None,
                  stream: int | None = None,
                  readonly: Readonly = "keep") -> tensorflow.Tensor:  # fmt: skip
    """``x`` as a ``tensorflow.Tensor``: the same memory and true dtype where TensorFlow can hold them.
    TensorFlow takes only dense row-major layouts, so others are copied densely first."""
    return _replay.convert(SPECS["tensorflow"], x, fallback, dtype, device, copy, stream, readonly)


@_public
def to_mlx(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN, dtype: DTypeLike | None = None,
           device: DeviceLike | None = None, copy: bool | None = None, stream: int | None = None,
           readonly: Readonly = "keep") -> mlx.core.array:  # fmt: skip
    """``x`` as a ``mlx.core.array``: the same memory and true dtype where MLX can hold them."""
    return _replay.convert(SPECS["mlx"], x, fallback, dtype, device, copy, stream, readonly)


@_public
def to_array_api_strict(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN,
                        dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
                        stream: int | None = None,
                        readonly: Readonly = "keep") -> array_api_strict._array_object.Array:  # fmt: skip
    """``x`` as a ``array_api_strict._array_object.Array``: the same memory and true dtype where
    array-api-strict can hold them."""
    return _replay.convert(SPECS["array_api_strict"], x, fallback, dtype, device, copy, stream, readonly)


@_public
def to_onnxruntime(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN, dtype: DTypeLike | None = None,
                   device: DeviceLike | None = None, copy: bool | None = None,
                   stream: int | None = None,
                   readonly: Readonly = "keep") -> onnxruntime.OrtValue:  # fmt: skip
    """``x`` as a ``onnxruntime.OrtValue``: the same memory and true dtype where ONNX Runtime can hold them."""
    return _replay.convert(SPECS["onnxruntime"], x, fallback, dtype, device, copy, stream, readonly)


@_public
def to_warp(x: SupportsDLPack | Any, /, *, fallback: FallbackOption = NOT_GIVEN, dtype: DTypeLike | None = None,
            device: DeviceLike | None = None, copy: bool | None = None, stream: int | None = None,
            readonly: Readonly = "keep") -> warp.array[Any]:  # fmt: skip
    """``x`` as a ``warp.array``: the same memory and true dtype where NVIDIA Warp can hold them."""
    return _replay.convert(SPECS["warp"], x, fallback, dtype, device, copy, stream, readonly)


# ``convert(x, "numpy")`` is typed like ``to_numpy(x)``: one overload per framework name and alias.
@overload
def convert(x: SupportsDLPack | Any, to: Literal["torch", "pytorch"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> torch.Tensor: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["cupy"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> cupy.ndarray: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["jax", "jax.numpy"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> jax.Array: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["numpy", "np"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> numpy.ndarray[Any, Any]: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["paddle", "paddlepaddle"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> paddle.Tensor: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["tensorflow", "tf"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> tensorflow.Tensor: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["mlx", "mlx.core"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> mlx.core.array: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["array_api_strict", "array-api-strict"], /, *,
            fallback: FallbackOption = ..., dtype: DTypeLike | None = ..., device: DeviceLike | None = ...,
            copy: bool | None = ..., stream: int | None = ...,
            readonly: Readonly = ...) -> array_api_strict._array_object.Array: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["onnxruntime", "ort"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> onnxruntime.OrtValue: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: Literal["warp", "wp", "warp-lang"], /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> warp.array[Any]: ...  # fmt: skip
@overload
def convert(x: SupportsDLPack | Any, to: str | ModuleType, /, *, fallback: FallbackOption = ...,
            dtype: DTypeLike | None = ..., device: DeviceLike | None = ..., copy: bool | None = ...,
            stream: int | None = ...,
            readonly: Readonly = ...) -> Any: ...  # fmt: skip
def convert(x: SupportsDLPack | Any, to: str | ModuleType, /, *, fallback: FallbackOption = NOT_GIVEN,
            dtype: DTypeLike | None = None, device: DeviceLike | None = None, copy: bool | None = None,
            stream: int | None = None,
            readonly: Readonly = "keep") -> Any:  # fmt: skip
    """Hand ``x`` to framework ``to`` (a name such as ``"torch"`` or ``"pytorch"``, or the module).

    Zero-copy whenever the target can hold the data where it is; see the README for the
    fallback policy. ``copy=False`` forbids any copy, ``copy=True`` always copies. ``readonly``:
    ``"keep"`` (a read-only source, such as a JAX array, raises ReadOnlyError for a consumer without
    read-only arrays unless ``copy=True``) or ``"drop"`` (the same memory, handed over writable: do not
    write to it); consumers with read-only arrays (NumPy) get read-only ones either way.
    """
    spec = SPECS.get(to) if type(to) is str else None  # a framework's own name, once its spec is made
    if spec is None:
        from ._adapters import adapter_named

        spec = SPECS[adapter_named(to).name]
    return _replay.convert(spec, x, fallback, dtype, device, copy, stream, readonly)


def capabilities(consumer: str, version: str | None = None) -> Capabilities:
    """What ``consumer`` accepts at ``version``, read off the capability table.

    ``consumer`` is a framework's name (or an alias, "pytorch", "np") or its module; ``version`` a
    version string ("2.13.0"), defaulting to the installed one, read from the package metadata (the
    framework is not imported); MissingFrameworkError if it is not installed. OptionError for a
    consumer dlbridge does not know or a version that is not a version string.
    """
    from ._adapters import adapter_named
    from ._capabilities import capabilities as table
    from ._capabilities import parse_version
    from ._errors import OptionError

    adapter = adapter_named(consumer)
    if version is None:
        return table(adapter.name, adapter.installed_version())
    if not isinstance(version, str) or not parse_version(version):
        kind = type(version).__name__
        what = "not a version number" if isinstance(version, str) else f"a{'n' * (kind[0] in 'aeiou')} {kind}"
        raise OptionError(
            f"dlbridge.capabilities({adapter.name!r}, version={version!r}): the version is {what}; pass it as a "
            f'string, e.g. version="{_example_version(adapter.name)}", or leave it out for the installed one'
        )
    return table(adapter.name, version)


def _example_version(name: str) -> str:
    """A version of framework ``name`` the table has rows for (for messages)."""
    from ._capabilities import parse_version, table

    since = [r.since for r in table() if r.consumer == name and r.since]
    return max(since, key=parse_version) if since else "1.0"


def register_numpy_dtypes() -> tuple[str, ...]:
    """Register ml_dtypes' bfloat16 and float8 kinds with NumPy's DLPack dtype registry (NumPy >= 2.5),
    so that NumPy itself (``np.from_dlpack``, ``ndarray.__dlpack__``) exports and imports them.

    Registration is global and permanent for the process, which is why dlbridge never does it on its
    own; dlbridge's results are the same either way (values, dtype, shared memory). Returns the dtype
    names NumPy now handles natively, those registered before included; a kind whose DLPack code or
    dtype is already registered otherwise is left as it is (and left out). UnsupportedDtypeError on
    NumPy < 2.5, MissingFrameworkError without ml_dtypes.
    """
    from ._adapters import adapter_named

    return adapter_named("numpy").register_dtypes()  # type: ignore[attr-defined]
