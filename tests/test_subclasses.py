"""Subclasses of a framework's array class, defined anywhere, are that framework's arrays:
detected by class hierarchy (sys.modules only, cached per type), converted like their base."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import dlbridge
from dlbridge import _adapters
from tests.conftest import need, run_child

torch = need("torch")
ml_dtypes = need("ml_dtypes")


class UserTensor(torch.Tensor):
    pass


class UserArray(np.ndarray):
    pass


def test_torch_subclass_defined_in_user_code_converts_zero_copy() -> None:
    t = torch.arange(6, dtype=torch.bfloat16, device="cpu").as_subclass(UserTensor)
    assert type(t).__module__ == __name__  # not under torch.*: found by its class hierarchy
    assert _adapters.adapter_for(t) is _adapters.ADAPTERS["torch"]
    out = dlbridge.to_numpy(t)
    assert out.dtype == ml_dtypes.bfloat16 and out.astype(np.float32).tolist() == list(range(6))
    assert out.ctypes.data == t.data_ptr()
    back = dlbridge.to_torch(t)
    assert back.dtype == torch.bfloat16 and back.data_ptr() == t.data_ptr()


def test_requires_grad_subclass_is_refused_like_its_base() -> None:
    t = torch.ones(3, device="cpu").as_subclass(UserTensor).requires_grad_()
    with pytest.raises(dlbridge.ProducerError, match=r"requires grad.*x\.detach\(\)"):
        dlbridge.to_numpy(t)
    out = dlbridge.to_numpy(t.detach())
    assert out.tolist() == [1.0, 1.0, 1.0] and out.ctypes.data == t.data_ptr()
    assert dlbridge.to_torch(t) is t  # torch -> torch keeps the graph, as for the base class


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_ml_dtypes_ndarray_subclass_converts_like_its_base(dtype: str) -> None:
    base = np.arange(4, dtype=np.float32).astype(getattr(ml_dtypes, dtype))
    sub = base.view(UserArray)
    out = dlbridge.to_torch(sub)
    assert out.dtype == getattr(torch, dtype) and out.data_ptr() == base.ctypes.data
    assert out.float().tolist() == [0.0, 1.0, 2.0, 3.0]
    back = dlbridge.to_numpy(sub)
    assert back.dtype == base.dtype and back.ctypes.data == base.ctypes.data


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_numpy_matrix_converts_as_its_two_dimensional_data() -> None:
    m = np.matrix([[1, 2], [3, 4]], dtype=np.int32)
    out = dlbridge.to_torch(m)
    assert out.dtype == torch.int32 and out.tolist() == [[1, 2], [3, 4]] and out.data_ptr() == m.ctypes.data
    plain = dlbridge.to_numpy(m)
    assert type(plain) is np.ndarray and plain.ctypes.data == m.ctypes.data  # matrix semantics are not kept


def test_type_detection_is_cached_and_a_miss_is_retried_when_modules_load() -> None:
    class NotAnArray:
        pass

    obj = NotAnArray()
    assert _adapters.adapter_for(obj) is None
    assert _adapters._NOT_ARRAYS[NotAnArray] == len(sys.modules)  # a miss, trusted while nothing loads
    assert UserArray not in _adapters._BY_TYPE or _adapters._BY_TYPE[UserArray] is _adapters.ADAPTERS["numpy"]
    _adapters.adapter_for(np.zeros(1).view(UserArray))
    assert _adapters._BY_TYPE[UserArray] is _adapters.ADAPTERS["numpy"]  # a hit, kept
    name = "dlbridge_test_late_module"
    sys.modules[name] = types.ModuleType(name)  # "a framework loads later"
    try:
        assert _adapters.adapter_for(obj) is None
        assert _adapters._NOT_ARRAYS[NotAnArray] == len(sys.modules)  # looked at again, re-recorded
    finally:
        del sys.modules[name]


def test_subclass_detection_imports_no_other_framework() -> None:
    proc = run_child(
        """
        import sys
        import numpy as np
        import dlbridge

        class Mine(np.ndarray):
            pass

        a = np.arange(3.0).view(Mine)
        out = dlbridge.to_numpy(a)
        assert out.tolist() == [0.0, 1.0, 2.0] and out.ctypes.data == a.ctypes.data
        assert dlbridge.inspect(a).producer == "numpy"
        loaded = sorted(m for m in ("torch", "jax", "cupy", "tensorflow", "paddle") if m in sys.modules)
        print(loaded)
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
