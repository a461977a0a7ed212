"""The compiled capsule probe reads a producer's shape and strides arrays, and nothing past them.

The capsules come from tests/ctypes_producer.py, whose shape and strides arrays of three or more
dimensions are heap blocks of their exact size (smaller ones sit inside their ctypes object): under
.ci/sanitize (AddressSanitizer, PYTHONMALLOC=malloc) a read one element past either array fails the
run. Without the sanitizers this checks that the compiled probe and the Python one agree.
"""

from __future__ import annotations

import pytest

from dlbridge import _accelerator
from dlbridge._capsule import _probe as _capsule_probe
from tests.ctypes_producer import CtypesArray

pytestmark = pytest.mark.skipif(_accelerator.accel is None, reason="the compiled module is not in use")


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


@pytest.mark.parametrize("ndim", range(9))
@pytest.mark.parametrize("strided", [False, True], ids=["no-strides", "strides"])
@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_probe_reads_shape_and_strides_of_any_ndim(ndim: int, strided: bool, versioned: bool) -> None:
    shape = tuple(2 + i % 2 for i in range(ndim))
    count = 1
    for dim in shape:
        count *= dim
    p = CtypesArray.zeros(4 * count, code=2, bits=32, shape=shape)
    if strided:
        p.with_(strides=_c_strides(shape))
    capsule = p.__dlpack__(max_version=(1, 3)) if versioned else p.__dlpack__()
    compiled = _accelerator.accel.probe(capsule)
    assert compiled == _capsule_probe._probe_py(capsule)
    assert compiled is not None and compiled[11] == shape
    assert compiled[12] == (_c_strides(shape) if strided and ndim else None)
