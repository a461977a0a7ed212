"""A consumer's import that copies (TensorFlow's, for host data below its 64-byte alignment) failing on
the replayed route: the capsule goes to the pipeline as it was exported (no second export) where the
import refused it without taking it, the pipeline exports again where the import took it, and an
interrupt propagates. The result is then what the pipeline gives: the values, an aligned copy.

TensorFlow runs in a child (it must not be imported before paddle in the suite's process). Every
test runs on the path this process loaded and, where that is the compiled module, on pure Python
(``[pure-python]``, tests/_route_helpers.py's ``on_both_paths``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests._route_helpers import on_both_paths, route_path  # noqa: F401 - route_path: the fixture on_both_paths parametrizes
from tests.conftest import run_child

pytest_generate_tests = on_both_paths  # [loaded] and, where the compiled module is, [pure-python]

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import sys, warnings
sys.path.insert(0, {root!r})
warnings.simplefilter("ignore")
import numpy as np, tensorflow as tf, dlbridge
from dlbridge._route import _replay as route
from tests._route_helpers import aligned

def address(t):
    return dlbridge.inspect(tf.experimental.dlpack.to_dlpack(t)).data_ptr

ref = np.arange(32, dtype=np.float32).reshape(4, 8)
x = aligned(ref, offset=4)  # 4 bytes past a 64-byte boundary: TensorFlow is handed an aligned copy
for _ in range(3):
    dlbridge.to_tensorflow(x)  # learned, then replayed
state = route.SPECS["tensorflow"][0]
key, primary = next((k, r) for k, r in state.routes.items()
                    if r is not None and r.triple == 0x1_20_02 and r.unaligned is not None)
below = primary.unaligned
assert below.misaligned and below.importer is not None, below

handed = []
pipeline = route._convert
def counted(x, target, *args, **kwargs):  # what the route hands the pipeline: the export it declined, or None
    handed.append(None if len(args) <= 5 or args[5] is None else dlbridge.inspect(args[5]))
    return pipeline(x, target, *args, **kwargs)
route._convert = counted

def with_importer(importer):
    twin = route.Replay(record=below.record, finish=below.finish, importer=importer, unaligned=below.unaligned)
    state.routes[key] = route.Replay(record=primary.record, finish=primary.finish, importer=primary.importer,
                                     unaligned=twin)

def check(out):
    got = address(out)
    assert out.dtype == tf.float32 and out.shape == (4, 8), (out.dtype, out.shape)
    np.testing.assert_array_equal(out.numpy(), ref)
    assert got % 64 == 0 and got != x.ctypes.data, (got, x.ctypes.data)
    tf.reverse(out, [0])  # an op: aborts the process on misaligned data

# The copying import refuses the capsule without taking it: handed back as exported.
seen = []
def refuse(capsule):
    seen.append(dlbridge.inspect(capsule))
    raise RuntimeError("refused")
with_importer(refuse)
check(dlbridge.to_tensorflow(x))
assert len(seen) == 1 and seen[0].data_ptr == x.ctypes.data and seen[0].dtype == "float32", seen
assert len(handed) == 1 and handed[0] is not None, "the refused capsule was not handed to the pipeline"
assert handed[0].data_ptr == x.ctypes.data and handed[0].dtype == "float32" and not handed[0].readonly, handed

# It takes the capsule, then fails: the pipeline exports x again (a used capsule is never handed on).
handed.clear()
def take_then_fail(capsule):
    tf.experimental.dlpack.from_dlpack(capsule)  # TensorFlow owns it from here on
    raise RuntimeError("failed after taking it")
with_importer(take_then_fail)
check(dlbridge.to_tensorflow(x))
assert handed == [None], handed

# An interrupt in it reaches the caller; the pipeline is not asked.
handed.clear()
def interrupted(capsule):
    raise KeyboardInterrupt("in the copy")
with_importer(interrupted)
try:
    dlbridge.to_tensorflow(x)
except KeyboardInterrupt as err:
    assert str(err) == "in the copy", err
else:
    raise AssertionError("the interrupt was lost")
assert handed == [], handed

# The stored route as it was: replayed again, nothing handed on.
state.routes[key] = primary
check(dlbridge.to_tensorflow(x))
assert handed == [], handed
np.testing.assert_array_equal(x, ref)
print("OK")
"""


def test_a_failing_copy_on_the_replayed_route_leaves_the_conversion_to_the_pipeline() -> None:
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed")
    proc = run_child(_CHILD.format(root=str(ROOT)), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK" in proc.stdout
