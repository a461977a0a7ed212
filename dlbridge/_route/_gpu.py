"""The fast route's GPU steps: where a framework's own GPU array is, which stream its consumer reads on,
and its export, with the stream handshake done right or not at all (the Python twin of the GPU half of
``dlbridge/_csrc/route.c``: the same steps, in the same order).

The DLPack stream rule (torch's ``Tensor.__dlpack__``, CuPy's ``ndarray.__dlpack__`` in
``cupy/_core/core.pyx``): the consumer's stream must wait for the producer's work only where the two
streams differ. So the consumer's current stream on the array's device is asked once
(``State.stream_query``: torch's DLPack C exchange API ``current_work_stream``, or the framework's own
query), and then:

- on the compiled route, a producer with a DLPack C exchange API (torch; ``managed_tensor_from_py_object_no_sync``
  does no synchronisation, dlpack.h) whose own current stream on that device is the consumer's is exported
  that way: no event is needed (here, in Python, the producer's own ``__dlpack__`` does the same: its
  tensor needs a capsule with a C destructor, see ``_capsule/_exchange.py``);
- otherwise the producer is handed the consumer's stream in ``__dlpack__(stream=, max_version=)`` and
  makes the consumer wait itself, where its array is on its current device (``Producer.current_device``:
  torch refuses other devices' tensors, CuPy records its event on the current device's stream); where
  it is elsewhere the route declines before any export, and the pipeline switches device first.

A consumer that picks its stream itself when it asks for the capsule (JAX: ``State.deferred``; XLA
hands out its external-ready-event streams round-robin, so asking first and letting it ask again gives
another stream) is handed a ``DeferredCarrier``: the export happens inside its ``from_dlpack``, with the
stream it passes, and the capsule is checked against the stored route before it gets it.
"""

from __future__ import annotations

from typing import Any

from .._capsule._abi import dlpack_stream
from .._capsule._carriers import DeferredCarrier
from .._capsule._exchange import current_work_stream
from ._records import EXPORT_METHOD_LEGACY

__all__ = ["device_of", "consumer_stream", "export", "Declined"]

VERSION = (1, 3)


class Declined(Exception):
    """Raised inside a consumer's ``from_dlpack`` where the route does not replay the capsule it was
    about to hand over: the pipeline converts x."""


def device_of(producer: Any, x: Any) -> tuple[int, int]:
    """Where x is: ``Producer.device_method`` gives (type, id), or the id of ``Producer.device_type``."""
    found = getattr(x, producer.device_method)()
    if producer.device_type:
        return (producer.device_type, int(found))
    return (int(found[0]), 0 if found[1] is None else int(found[1]))


def consumer_stream(state: Any, device: tuple[int, int]) -> int | None:
    """The consumer's current stream on ``device`` as DLPack spells it; None where it cannot be asked here."""
    query = state.stream_query
    if query is None:
        return None
    if type(query) is tuple:
        ask, attribute = query
        handle = getattr(ask(device[1]), attribute)
    else:
        handle = current_work_stream(query, device)
        if handle is None:
            return None
    return dlpack_stream(int(handle), device[0])


def _source(producer: Any, x: Any) -> tuple[Any, int | None]:
    """What is exported (x, its alias, or a view), and the dtype triple its capsule is given (None: as it is):
    the Producer's relabels, as the CPU export reads them."""
    relabel = producer.relabels.get(x.dtype) if producer.relabels else None
    if relabel is not None and relabel[0] is not None:
        return x.view(relabel[0]), relabel[1]
    return (x if producer.alias is None else getattr(x, producer.alias)), None if relabel is None else relabel[1]


def _dlpack(source: Any, stream: Any, versioned: bool) -> Any:
    return source.__dlpack__(stream=stream, max_version=VERSION) if versioned else source.__dlpack__(stream=stream)


def export(producer: Any, x: Any, device: tuple[int, int], stream: int, versioned: bool) -> Any:
    """(x's capsule for a consumer reading on ``stream``, the handshake done; the dtype triple the route writes
    into it as it reads it, or None), as the CPU export gives them; None: declined, nothing exported; an
    Exception: the error the producer's export raised (the pipeline handles it, not asking again)."""
    source, triple = _source(producer, x)
    # (No exchange-API export here: its tensor needs a capsule with a C destructor, the compiled route's;
    # the producer's own __dlpack__(stream=) records no event where the consumer's stream is its own.)
    if producer.current_device is not None and producer.current_device() != device[1]:
        return None  # its handshake is made on the current device: the pipeline switches to x's first
    try:
        capsule = _dlpack(source, stream, versioned and producer.gpu_kind != EXPORT_METHOD_LEGACY)
    except MemoryError:
        raise
    except Exception as err:
        return err
    return capsule, triple


def deferred(producer: Any, x: Any, device: tuple[int, int], versioned: bool, check: Any,
             failed: list[Exception]) -> DeferredCarrier:  # fmt: skip
    """A carrier whose ``__dlpack__(stream=S)`` exports x with the consumer's own S (the producer's
    handshake), then ``check(capsule, triple)`` (the dtype triple to write as it reads it, or None): the capsule,
    relabelled as its stored route says; else ``Declined``.
    An Exception the producer's export raises is appended to ``failed`` (the pipeline handles it, not
    asking the producer again) and the consumer gets ``Declined``."""
    source, triple = _source(producer, x)

    versioned = versioned and producer.gpu_kind != EXPORT_METHOD_LEGACY  # a producer before DLPack 1.0

    def export_when_asked(stream: Any) -> Any:
        try:
            capsule = _dlpack(source, stream, versioned)
        except MemoryError:
            raise
        except Exception as err:
            failed.append(err)
            raise Declined("declined: the producer's export failed") from None
        return check(capsule, triple)

    return DeferredCarrier(export_when_asked, device)
