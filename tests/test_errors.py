"""The exception hierarchy and the wording of the messages users read (pinned on purpose)."""

from __future__ import annotations

import numpy as np
import pytest

import dlbridge
from tests.conftest import caps_of, need

torch = need("torch")


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (dlbridge.UnsupportedDtypeError, NotImplementedError),
        (dlbridge.DeviceMismatchError, BufferError),
        (dlbridge.CapsuleError, BufferError),
        (dlbridge.ReadOnlyError, BufferError),
        (dlbridge.LayoutError, BufferError),
        (dlbridge.NotAnArrayError, TypeError),
        (dlbridge.ProducerError, BufferError),
        (dlbridge.OptionError, ValueError),
        (dlbridge.MissingFrameworkError, ImportError),
    ],
)
def test_hierarchy(cls: type, builtin: type) -> None:
    assert issubclass(cls, dlbridge.DLBridgeError) and issubclass(cls, builtin)
    assert cls.__module__ == "dlbridge"


def test_cpu_to_cupy_says_what_to_pass(cupy_counted_installed: None) -> None:
    with pytest.raises(
        dlbridge.DeviceMismatchError,
        match=r'to_cupy\(\): the source is on cpu:0 and cupy cannot use memory there .*pass device="cuda" or copy=True',
    ):
        dlbridge.to_cupy(torch.zeros(2, device="cpu"))


def test_copy_false_forbids_device_moves(cupy_counted_installed: None) -> None:
    with pytest.raises(dlbridge.DeviceMismatchError, match="copy=False forbids"):
        dlbridge.to_cupy(torch.zeros(2, device="cpu"), copy=False)


def test_unknown_target_lists_the_valid_ones() -> None:
    with pytest.raises(
        dlbridge.OptionError,
        match=r"unknown target framework 'mxnet'; expected one of: array_api_strict, cupy, jax, mlx, numpy, "
        r"onnxruntime, paddle, tensorflow, torch, warp",
    ):
        dlbridge.convert(torch.zeros(1, device="cpu"), "mxnet")


def test_targets_by_name_alias_and_module() -> None:
    import jax.numpy as jnp

    t = torch.arange(3.0, device="cpu")
    for to in ("numpy", "np", np):
        assert isinstance(dlbridge.convert(t, to), np.ndarray)
    assert isinstance(dlbridge.convert(np.arange(3.0), "pytorch"), torch.Tensor)
    assert dlbridge.convert(t, jnp).shape == (3,)


def test_readonly_to_torch() -> None:
    a = np.arange(3.0)
    a.flags.writeable = False
    # NumPy >= 2.1 says READ_ONLY in a versioned capsule; older NumPy refuses to export it at all.
    said = r'numpy cpu float64\[3\] is read-only and torch arrays cannot be; pass copy=True .* or readonly="drop"'
    with pytest.raises(dlbridge.ReadOnlyError, match=said if caps_of("numpy").versioned_capsules else "pass copy=True"):
        dlbridge.to_torch(a)
    t = dlbridge.to_torch(a, copy=True)
    t[0] = 7
    assert a[0] == 0 and t.data_ptr() != a.ctypes.data


def test_readonly_stays_readonly_in_numpy() -> None:
    a = np.arange(3.0)
    a.flags.writeable = False
    out = dlbridge.to_numpy(a)
    assert not out.flags.writeable and out.ctypes.data == a.ctypes.data


def test_stream_on_cpu_is_an_option_error() -> None:
    with pytest.raises(dlbridge.OptionError, match="only stream=None is valid off the GPU"):
        dlbridge.to_numpy(torch.zeros(1, device="cpu"), stream=5)


def test_bad_device_and_copy_values() -> None:
    with pytest.raises(dlbridge.OptionError, match="is not a device"):
        dlbridge.to_torch(torch.zeros(1, device="cpu"), device="tpu-ish")
    with pytest.raises(dlbridge.OptionError, match="copy='yes'"):
        dlbridge.to_torch(torch.zeros(1, device="cpu"), copy="yes")  # type: ignore[arg-type]


def test_missing_target_framework() -> None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(dlbridge.MissingFrameworkError, match="pip install cupy"):
            dlbridge.to_cupy(torch.zeros(1, device="cpu"), device="cuda")
        # Also where a device message would come next: the missing framework is said first.
        for options in ({}, {"copy": False}, {"copy": True}):
            with pytest.raises(dlbridge.MissingFrameworkError, match=r"cupy .*not installed"):
                dlbridge.convert(torch.zeros(1, device="cpu"), "cupy", **options)
        with pytest.raises(dlbridge.MissingFrameworkError, match=r"cupy .*not installed"):
            dlbridge.to_cupy(torch.zeros(1, device="cpu").__dlpack__())  # a raw capsule
    else:
        pytest.skip("cupy is installed")


def test_negative_strides_reach_torch_as_a_copy_not_an_abort() -> None:
    """torch 2.13 aborts the process on a[::-1]'s capsule (see tests/test_robustness_capsules.py); dlbridge copies."""
    from tests.conftest import run_child

    proc = run_child(
        r"""
        import numpy as np, dlbridge
        a = np.arange(6.0)[::-1]
        t = dlbridge.to_torch(a)
        assert t.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0], t
        try:
            dlbridge.to_torch(a, copy=False)
        except dlbridge.LayoutError as e:
            assert "strides [-1]; it needs a dense copy, which copy=False forbids" in str(e), e
        else:
            raise SystemExit("no LayoutError")
        print("ok")
        """
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


def test_jax_copy_false_on_a_strided_slice() -> None:
    t = torch.arange(12.0, device="cpu").reshape(3, 4)[:, 1:]
    with pytest.raises(dlbridge.LayoutError, match="copy=False forbids"):
        dlbridge.to_jax(t, copy=False)
    assert dlbridge.to_jax(t).tolist() == t.tolist()


def test_cuda_upload_without_cuda_is_a_device_error() -> None:
    """device="cuda" on a build or machine without CUDA: DeviceMismatchError, not torch's
    AssertionError or JAX's RuntimeError; decided from the device count before anything is copied,
    as explain says."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the upload would work")
    need("jax")
    sources = {"numpy": np.arange(4, dtype=np.float32), "torch": torch.arange(4.0, device="cpu")}
    for fn, name in ((dlbridge.to_torch, "torch"), (dlbridge.to_jax, "jax")):
        for src in sources.values():
            for device in ("cuda", "gpu", ("cuda", 10**30)):
                with pytest.raises(dlbridge.DeviceMismatchError, match=r"has no cuda device in this process.*cuda:"):
                    fn(src, device=device)
                assert dlbridge.explain(src, name, device=device).error is dlbridge.DeviceMismatchError


def test_a_fallback_that_cannot_help_says_why_in_its_own_terms() -> None:
    jax = need("jax")
    if jax.config.jax_enable_x64:
        pytest.skip("JAX runs with x64 here: it imports float64")
    with pytest.raises(
        dlbridge.UnsupportedDtypeError,
        match=r'fallback="upcast" cannot help: it widens bfloat16 and float8 formats to float32, and float64 is not',
    ) as upcast:
        dlbridge.to_jax(np.zeros(2), fallback="upcast")
    assert "unsigned" not in str(upcast.value)  # that is the view fallback's reason
    with pytest.raises(
        dlbridge.UnsupportedDtypeError,
        match=r'fallback="view" cannot help: it would hand over float64 as uint64, which jax does not import',
    ):
        dlbridge.to_jax(np.zeros(2), fallback="view")
