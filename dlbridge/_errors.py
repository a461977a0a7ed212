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
    OptionError,
    MissingFrameworkError,
):
    _cls.__module__ = "dlbridge"
del _cls
