"""fp4 (float4_e2m1fn) between torch (float4_e2m1fn_x2 pairs), JAX (packed) and NumPy (ml_dtypes, one a byte).

Values are checked against ml_dtypes' decoding of every one of the 16 codes; torch's pairs are
decoded here from its documented layout (torch/headeronly/util/Float4_e2m1fn_x2.h: value 2i in
bits 3..0, value 2i+1 in bits 7..4), independently of dlbridge's own packing.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import dlbridge
from dlbridge import LayoutError
from tests._arrays import jax_cpu
from tests.conftest import need

ml_dtypes = need("ml_dtypes")
if not hasattr(ml_dtypes, "float4_e2m1fn"):
    pytest.skip("ml_dtypes has no float4_e2m1fn", allow_module_level=True)

FP4 = np.dtype(ml_dtypes.float4_e2m1fn)
CODES = np.arange(16, dtype=np.uint8)
# OCP MX E2M1: the 16 codes' values (sign, 2 exponent bits, 1 mantissa bit)
VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
FRAMEWORKS = ("torch", "jax", "numpy")


def _torch_pairs(codes: np.ndarray):
    """A torch float4_e2m1fn_x2 tensor holding ``codes`` (..., 2n), built from the documented layout."""
    torch = need("torch")
    lo, hi = codes[..., 0::2].astype(np.uint8), codes[..., 1::2].astype(np.uint8)
    return torch.from_numpy(np.ascontiguousarray(lo | (hi << 4))).view(torch.float4_e2m1fn_x2)


def _make(framework: str, codes: np.ndarray):
    if framework == "torch":
        return _torch_pairs(codes)
    elements = np.array(codes, dtype=np.uint8, order="C").view(FP4)  # 0-d stays 0-d
    return jax_cpu(elements) if framework == "jax" else elements


def _codes_of(framework: str, arr) -> np.ndarray:
    """The fp4 codes ``arr`` holds, one a byte, in its logical shape (torch: pairs split)."""
    if framework == "torch":
        torch = need("torch")
        assert arr.dtype == torch.float4_e2m1fn_x2
        raw = arr.view(torch.uint8).numpy()
        out = np.empty((*raw.shape[:-1], raw.shape[-1] * 2), dtype=np.uint8)
        out[..., 0::2], out[..., 1::2] = raw & 0x0F, raw >> 4
        return out
    host = np.asarray(arr)
    assert host.dtype == FP4, host.dtype
    return host.view(np.uint8)


def _ptr(framework: str, arr) -> int:
    if framework == "torch":
        return int(arr.data_ptr())
    if framework == "jax":
        return int(arr.unsafe_buffer_pointer())
    return int(arr.__array_interface__["data"][0])


def test_ml_dtypes_decodes_the_16_codes_as_e2m1():
    assert FP4.itemsize == 1
    assert [float(v) for v in CODES.view(FP4).astype(np.float32)] == VALUES
    assert [np.signbit(v) for v in CODES.view(FP4).astype(np.float32)] == [c >= 8 for c in CODES]


def test_pack_and_unpack_put_value_2i_in_the_low_nibble():
    from dlbridge._pipeline._subbyte import pack, unpack

    packed = pack(CODES.reshape(2, 8))
    assert packed.tolist() == [[0x10, 0x32, 0x54, 0x76], [0x98, 0xBA, 0xDC, 0xFE]]
    assert unpack(packed, 16).tolist() == CODES.tolist()
    assert unpack(np.array([0x21, 0x03], np.uint8), 3).tolist() == [1, 2, 3]


def test_jax_holds_fp4_packed_two_a_byte():
    """What the table's JAX rows say about its CPU buffers, measured through the capsule's pointer."""
    import ctypes

    need("jax")
    from dlbridge._capsule._read import read

    arr = jax_cpu(CODES[:15].reshape(3, 5).view(FP4))
    capsule = arr.__dlpack__()
    info = read(capsule, "jax")
    assert (info.code, info.bits, info.lanes, info.flags) == (17, 4, 1, 0)
    assert info.device_code == 1, info  # kDLCPU: host memory (a host read of device memory is a segfault)
    raw = list(ctypes.string_at(info.data_ptr, 8))
    # 15 values in 8 bytes, C order over the whole array; the last byte's high nibble is not a value
    assert raw[:7] == [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC] and raw[7] & 0x0F == 0x0E
    del capsule


@pytest.mark.parametrize("source", FRAMEWORKS)
@pytest.mark.parametrize("target", FRAMEWORKS)
def test_values_dtype_and_shape_every_pair_of_frameworks(source, target):
    need(source), need(target)
    codes = CODES.reshape(2, 8)
    src = _make(source, codes)
    for attempt in range(2):  # the second call is the warm route (or the pipeline again)
        out = dlbridge.convert(src, target)
        got = _codes_of(target, out)
        assert got.shape == (2, 8), (attempt, got.shape)
        assert got.tolist() == codes.tolist(), attempt
        values = got.view(FP4).astype(np.float32)  # ml_dtypes' decoding of the codes each target holds
        assert values.tolist() == np.array(VALUES, np.float32).reshape(2, 8).tolist()
        assert np.signbit(values).tolist() == (codes >= 8).tolist()  # -0.0 stays -0.0
    if target == "torch":
        assert tuple(out.shape) == (2, 4)


def test_jax_to_torch_is_zero_copy_when_the_last_dimension_is_even():
    torch = need("torch")
    need("jax")
    src = jax_cpu(np.tile(CODES, 3).reshape(3, 16).view(FP4))
    for _ in range(2):
        out = dlbridge.to_torch(src)
        assert out.dtype == torch.float4_e2m1fn_x2 and tuple(out.shape) == (3, 8)
        assert out.data_ptr() == src.unsafe_buffer_pointer()
        assert _codes_of("torch", out).tolist() == np.tile(CODES, 3).reshape(3, 16).tolist()
    copied = dlbridge.to_torch(src, copy=True)
    assert copied.data_ptr() != src.unsafe_buffer_pointer()
    assert _codes_of("torch", copied).tolist() == np.tile(CODES, 3).reshape(3, 16).tolist()
    assert dlbridge.to_torch(src, copy=False).data_ptr() == src.unsafe_buffer_pointer()


def test_jax_to_jax_is_the_same_array_and_numpy_to_numpy_shares_memory():
    need("jax")
    src = jax_cpu(CODES.view(FP4))
    same = dlbridge.to_jax(src)  # itself where JAX cannot import fp4 (0.10+), else its zero-copy import
    assert same is src or same.unsafe_buffer_pointer() == src.unsafe_buffer_pointer()
    again = dlbridge.to_jax(src, copy=True)
    assert again is not src and again.unsafe_buffer_pointer() != src.unsafe_buffer_pointer()
    assert _codes_of("jax", again).tolist() == CODES.tolist()
    host = CODES.view(FP4)
    for _ in range(2):
        out = dlbridge.to_numpy(host)
        assert out.dtype == FP4 and _ptr("numpy", out) == _ptr("numpy", host)
    assert _ptr("numpy", dlbridge.to_numpy(host, copy=True)) != _ptr("numpy", host)


@pytest.mark.parametrize(("source", "target"), [("torch", "jax"), ("torch", "numpy"), ("jax", "numpy"),
                                                ("numpy", "torch"), ("numpy", "jax")])  # fmt: skip
def test_repacked_conversions_are_copies_and_refused_under_copy_false(source, target):
    need(source), need(target)
    src = _make(source, CODES.reshape(2, 8))
    out = dlbridge.convert(src, target)
    assert _ptr(target, out) != _ptr(source, src)
    with pytest.raises(LayoutError, match=r"repacked copy, which copy=False forbids\. Pass copy=None"):
        dlbridge.convert(src, target, copy=False)


@pytest.mark.parametrize("copy", [None, False])
def test_fallback_view_gives_torch_pairs_as_uint8_bytes(copy):
    src = _torch_pairs(CODES)
    out = dlbridge.to_numpy(src, copy=copy, fallback="view")
    assert out.dtype == np.uint8 and _ptr("numpy", out) == src.data_ptr()
    assert out.tolist() == [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]


@pytest.mark.parametrize("source", ["jax", "numpy"])
@pytest.mark.parametrize("shape", [(15,), (3, 5), ()])
def test_odd_counts_are_refused_by_torch_with_what_to_do(source, shape):
    need("torch"), need(source)
    codes = (np.arange(int(np.prod(shape))) % 16).astype(np.uint8).reshape(shape)
    with pytest.raises(LayoutError, match=r"cannot be paired\. Pad the last dimension to an even length"):
        dlbridge.to_torch(_make(source, codes))
    # the same values in a framework that holds single fp4 values
    other = "numpy" if source == "jax" else "jax"
    need(other)
    assert _codes_of(other, dlbridge.convert(_make(source, codes), other)).tolist() == codes.tolist()


def test_odd_last_dimension_of_jax_reads_its_flat_packing_right():
    need("jax")
    codes = (np.arange(21) % 16).astype(np.uint8).reshape(3, 7)
    out = dlbridge.to_numpy(jax_cpu(codes.view(FP4)))
    assert out.dtype == FP4 and out.view(np.uint8).tolist() == codes.tolist()


def test_non_contiguous_sources():
    torch = need("torch")
    codes = (np.arange(48) % 16).astype(np.uint8).reshape(4, 12)
    pairs = _torch_pairs(codes)  # (4, 6) bytes
    strided = pairs[:, ::2]  # every other pair: codes 0,1, 4,5, 8,9 of each row
    assert not strided.is_contiguous()
    want = codes.reshape(4, 6, 2)[:, ::2].reshape(4, 6)
    assert dlbridge.to_numpy(strided).view(np.uint8).tolist() == want.tolist()
    transposed = pairs.t()  # (6, 4) bytes, strides (1, 6)
    want_t = np.stack([codes.reshape(4, 6, 2)[:, j].reshape(-1) for j in range(6)])
    assert dlbridge.to_numpy(transposed).view(np.uint8).tolist() == want_t.tolist()
    assert _codes_of("jax", dlbridge.to_jax(transposed)).tolist() == want_t.tolist()
    host = codes.view(FP4).T  # (12, 4), Fortran order
    out = dlbridge.to_torch(host)
    assert out.dtype == torch.float4_e2m1fn_x2 and _codes_of("torch", out).tolist() == codes.T.tolist()
    assert _codes_of("jax", dlbridge.to_jax(host[::2])).tolist() == codes.T[::2].tolist()


def test_a_padded_capsule_reaches_numpy_zero_copy_and_torch_repacked():
    from tests.ctypes_producer import CtypesArray

    torch = need("torch")
    padded = CtypesArray.zeros(16, code=17, bits=4, lanes=1, shape=(2, 8), flags=1 << 2, versioned=True)
    padded.write_bytes(bytes(CODES))
    out = dlbridge.to_numpy(padded)
    assert out.dtype == FP4 and out.view(np.uint8).tolist() == CODES.reshape(2, 8).tolist()
    assert _ptr("numpy", out) == padded.data_ptr
    pairs = dlbridge.to_torch(padded)
    assert pairs.dtype == torch.float4_e2m1fn_x2 and _codes_of("torch", pairs).tolist() == CODES.reshape(2, 8).tolist()
    del out, pairs


def test_a_legacy_capsule_dlbridge_marks_padded_reads_one_value_a_byte():
    """NumPy < 2.1 exports legacy capsules only, which have no flags: the NumPy adapter's fp4 export
    marks its one-value-a-byte capsule through the capsule's context, and the reader reads it back as
    IS_SUBBYTE_TYPE_PADDED (read as packed, torch got other values: numpy 2.0.2, found by .ci/edges)."""
    from dlbridge._capsule._edit import mark_padded
    from dlbridge._capsule._read import read
    from dlbridge._dtypes import BY_NAME

    torch = need("torch")
    codes = CODES.reshape(2, 8).copy()
    for make in (lambda: codes.__dlpack__(), lambda: codes.__dlpack__(max_version=(1, 0))):
        capsule = make()
        mark_padded(capsule, BY_NAME["float4_e2m1fn"])
        info = read(capsule)
        assert (info.code, info.bits, info.shape, info.flags & (1 << 2)) == (17, 4, (2, 8), 1 << 2), info
        out = dlbridge.to_numpy(capsule)
        assert out.dtype == FP4 and out.view(np.uint8).tolist() == codes.tolist()
        assert out.ctypes.data == codes.ctypes.data  # zero-copy
    plain = codes.__dlpack__()  # the same bytes, unmarked: packed two a byte, as a capsule says
    assert not read(plain).flags
    capsule = codes.__dlpack__()
    mark_padded(capsule, BY_NAME["float4_e2m1fn"])
    with pytest.raises(LayoutError, match="one value a byte"):  # a raw capsule torch would take as pairs
        dlbridge.to_torch(capsule)
    del plain, capsule, torch


def test_inspect_describes_numpy_fp4_as_a_padded_capsule_of_its_memory():
    host = CODES.view(FP4).reshape(4, 4)
    info = dlbridge.inspect(host)
    assert (info.dtype, info.code, info.bits, info.lanes, info.shape) == ("float4_e2m1fn", 17, 4, 1, (4, 4))
    assert info.flags & (1 << 2) and info.data_ptr == _ptr("numpy", host)


def test_torch_to_torch_keeps_its_pairs_zero_copy():
    src = _torch_pairs(CODES)
    for _ in range(2):
        out = dlbridge.to_torch(src)
        assert out.dtype == src.dtype and out.data_ptr() == src.data_ptr()


def test_targets_without_fp4_still_refuse_as_before():
    need("torch")
    from dlbridge import UnsupportedDtypeError, inspect
    from dlbridge._capabilities import capabilities
    from dlbridge._pipeline._plan import plan_for
    from dlbridge._pipeline._subbyte import _form

    cupy = capabilities("cupy", "14.0")  # holds no fp4 in any layout: the pipeline refuses as it did
    assert _form(cupy) is None
    assert (_form(capabilities("torch", "2.13")), _form(capabilities("numpy", "2.4"))) == ("pairs", "elements")
    with pytest.raises(UnsupportedDtypeError, match="cannot hold float4_e2m1fn_x2"):
        plan_for(inspect(_torch_pairs(CODES)), cupy, "raise")


@pytest.mark.parametrize("pure", [False, True])
def test_twice_in_a_fresh_process_with_and_without_the_compiled_route(pure):
    need("torch"), need("jax")
    code = """
import numpy as np, ml_dtypes, torch, jax, dlbridge
codes = np.arange(16, dtype=np.uint8)
src = torch.from_numpy(codes[0::2] | (codes[1::2] << 4)).view(torch.float4_e2m1fn_x2)
j = jax.device_put(codes.view(ml_dtypes.float4_e2m1fn), jax.devices("cpu")[0])
for _ in range(3):
    assert np.asarray(dlbridge.to_numpy(src)).view(np.uint8).tolist() == codes.tolist()
    assert np.asarray(dlbridge.to_jax(src)).view(np.uint8).tolist() == codes.tolist()
    assert dlbridge.to_numpy(j).view(np.uint8).tolist() == codes.tolist()
    assert dlbridge.to_torch(j).data_ptr() == j.unsafe_buffer_pointer()
    k = dlbridge.to_jax(j); assert k is j or k.unsafe_buffer_pointer() == j.unsafe_buffer_pointer()
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_PURE_PYTHON"}
    if pure:
        env["DLBRIDGE_PURE_PYTHON"] = "1"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_padded_capsule_is_never_handed_to_a_consumer_that_reads_fp4_packed():
    """One value a byte (IS_SUBBYTE_TYPE_PADDED) read as two a byte would be wrong values: the record
    repacks an array, and refuses a raw capsule (which dlbridge does not rewrite)."""
    from dlbridge._adapters import ADAPTERS
    from dlbridge._capabilities import capabilities
    from dlbridge._capsule._read import DLPackInfo
    from dlbridge._pipeline._handoff import decide
    from dlbridge._pipeline._subbyte import FLAG_PADDED

    caps = capabilities("jax", "0.9.0")  # a JAX that imports float4_e2m1fn, packed (DLPack's default)
    assert "float4_e2m1fn" in caps.imports
    info = DLPackInfo("float4_e2m1fn", 17, 4, 1, "cpu", 0, (16,), None, 0, 64, False, True, (1, 3), "numpy",
                      FLAG_PADDED)  # fmt: skip
    jax = ADAPTERS["jax"]
    array = decide(info, jax, caps, "raise", None, None, source=ADAPTERS["numpy"])
    assert array.error is None and array.fp4 == "repack" and not array.shares
    raw = decide(info, jax, caps, "raise", None, None, raw=True)
    assert raw.error is LayoutError and "pass the array itself" in raw.message
    packed = decide(_unflagged(info), jax, caps, "raise", None, None, raw=True)
    assert packed.error is None and packed.plan is not None and packed.plan.mode == "native"


def _unflagged(info):
    from dataclasses import replace

    return replace(info, flags=0, versioned=False, version=None)  # as JAX exports it (legacy capsules)


def test_a_refused_raw_fp4_capsule_is_left_as_it_came():
    torch = need("torch")
    need("numpy")
    x = _torch_pairs(CODES)
    capsule = x.__dlpack__()
    with pytest.raises(dlbridge.DLBridgeError):
        dlbridge.to_jax(capsule, copy=False)  # raw pairs: not rewritten, not repacked
    back = torch.from_dlpack(capsule)  # unconsumed and unchanged: torch still reads its own capsule
    assert back.dtype == torch.float4_e2m1fn_x2 and back.shape == x.shape and back.data_ptr() == x.data_ptr()
    assert torch.equal(back.view(torch.uint8), x.view(torch.uint8))
