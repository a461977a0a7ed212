"""Shared cases for the ctypes producer (tests/ctypes_producer.py): the malformed capsules every
consumer must refuse, and the logical bytes a producer's array holds."""

from __future__ import annotations

import numpy as np

from tests.ctypes_producer import CtypesArray

# case -> (overrides of a 16-byte float32[4] CtypesArray, error class of every to_*, inspect's)
# inspect describes well-formed capsules it merely cannot convert (unknown codes get a descriptive
# name); everything structurally broken is a CapsuleError everywhere.
MALFORMED: dict[str, tuple[dict, str, str | None]] = {
    "wrong_name": ({"name": b"dltensor_v2"}, "CapsuleError", "CapsuleError"),
    "used_name": ({}, "CapsuleError", "CapsuleError"),  # consumed by someone else first
    "null_data": ({"data": 0}, "CapsuleError", "CapsuleError"),
    "ndim_negative": ({"ndim": -1}, "CapsuleError", "CapsuleError"),
    "ndim_absurd": ({"ndim": 2**31 - 1}, "CapsuleError", "CapsuleError"),
    "null_shape": ({"shape": None, "ndim": 2}, "CapsuleError", "CapsuleError"),
    "negative_dim": ({"shape": (4, -1)}, "CapsuleError", "CapsuleError"),
    "bits_zero": ({"bits": 0}, "CapsuleError", "CapsuleError"),
    "lanes_4": ({"lanes": 4, "shape": (1,)}, "UnsupportedDtypeError", None),
    "unknown_code": ({"code": 99}, "UnsupportedDtypeError", None),
    "unknown_device": ({"device": (99, 0)}, "DeviceMismatchError", None),
    "unknown_major": ({"versioned": True, "version": (2, 0)}, "CapsuleError", "CapsuleError"),
    # Strides whose reach leaves the 64-bit address space / int64 byte offsets (torch aborts
    # the process on these: "Storage size calculation overflowed"; NumPy wraps them silently).
    "strides_overflow": ({"strides": (2**62,)}, "CapsuleError", "CapsuleError"),
    "strides_below_zero": ({"strides": (-(2**61),)}, "CapsuleError", "CapsuleError"),
    "shape_overflow": ({"shape": (2**32, 2**32)}, "CapsuleError", "CapsuleError"),
    # A producer that ignores max_version: JAX reads only legacy capsules, so dlbridge must
    # refuse to hand it a versioned one; torch and NumPy read both and succeed.
    "versioned_unasked": ({"versioned": True}, "jax:CapsuleError", None),
}


def expected_bytes(p: CtypesArray) -> bytes:
    """The logical C-order contents, gathered from the producer's raw bytes with NumPy."""
    f = p.fields
    size = f.bits * f.lanes // 8
    shape = f.shape or ()
    strides = f.strides
    if strides is None:
        strides, step = (), 1
        for d in reversed(shape):
            strides, step = (step, *strides), step * d
    words = np.frombuffer(p.read_bytes(), dtype=f"V{size}")[f.byte_offset // size :]
    view = np.lib.stride_tricks.as_strided(words, shape, tuple(s * size for s in strides), writeable=False)
    return np.ascontiguousarray(view).tobytes()
