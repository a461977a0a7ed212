"""dlbridge's exception hierarchy.

Defined first and importing nothing, so every other module (and users) can catch these
without pulling in a framework. Each class also inherits the builtin exception that users
already catch for the same situation, so ``except NotImplementedError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "DLBridgeError",
    "UnsupportedDtypeError",
    "DeviceMismatchError",
    "CapsuleError",
    "ReadOnlyError",
    "LayoutError",
    "NotAnArrayError",
    "ProducerError",
    "OptionError",
    "MissingFrameworkError",
]


class DLBridgeError(Exception):
    """Base class of every error dlbridge raises."""


class UnsupportedDtypeError(DLBridgeError, NotImplementedError):
    """The consumer cannot hold this dtype, and ``fallback="raise"`` was in force.

    Raised *before* the consumer sees the capsule, so no framework gets a chance to crash.
    """


class DeviceMismatchError(DLBridgeError, BufferError):
    """The consumer cannot use memory on the source's device without a copy."""


class CapsuleError(DLBridgeError, BufferError):
    """A DLPack capsule (or the producer making it) is malformed, consumed or unreadable."""


class ReadOnlyError(DLBridgeError, BufferError):
    """The source is read-only and the consumer cannot express read-only memory."""


class LayoutError(DLBridgeError, BufferError):
    """The consumer cannot take this memory layout (strides, alignment) without a copy."""


class NotAnArrayError(DLBridgeError, TypeError):
    """The object neither supports ``__dlpack__`` nor is a DLPack capsule."""


class ProducerError(DLBridgeError, BufferError):
    """The source cannot be handed over as it is, and the message names the call that fixes it.

    Its producer refuses to export it (a sparse, meta, quantized or deleted array), or it carries
    state the target would silently lose (an autograd graph, a mask, a lazy conjugate or negative
    bit under ``copy=False``). Raised instead of a capsule error: nothing is wrong with DLPack here.
    """


class OptionError(DLBridgeError, ValueError):
    """An option (``to=``, ``fallback=``, ``dtype=``, ``device=`` ...) has a value dlbridge does not know."""


class MissingFrameworkError(DLBridgeError, ImportError):
    """The target framework (or a module a path needs, such as ml_dtypes) is not installed."""


for _cls in (
    DLBridgeError,
    UnsupportedDtypeError,
    DeviceMismatchError,
    CapsuleError,
    ReadOnlyError,
    LayoutError,
    NotAnArrayError,
    ProducerError,
    OptionError,
    MissingFrameworkError,
):
    _cls.__module__ = "dlbridge"
del _cls
