"""What the per-framework modules share: the registry entry (``Framework``), the row type, its kinds,
and dtype sets."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .._dtypes import FLOAT8

INTS = frozenset(f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64))
CORE = INTS | {"float16", "float32", "float64", "complex64", "complex128"}
WIDE_UINTS = frozenset({"uint16", "uint32", "uint64"})
# Boundaries as far as probed (see the rows' sources): the first version seen without the behaviour.
JAX_FP4_UNTIL = "0.9.2"  # 0.9.1 imports it, 0.9.2 refuses it (.ci/edges, compat_edges.md)
JAX_LAYOUTS_SINCE = "0.8"
JAX_COPY_FIXED = "0.4.35"  # 0.4.31 crashes, 0.4.35 does not (0.4.33-0.4.34 not probed)
TORCH_FP8 = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"})


# Feature flags (no dtypes): what a consumer does with capsules and layouts.
FEATURES = (
    "crashes_on_reject",  # a capsule it rejects kills the process (double free)
    "raw_capsules",  # its from_dlpack takes a bare PyCapsule
    "versioned_capsules",  # it reads "dltensor_versioned"
    "compact_only",  # it refuses strides that are not a permutation of a dense layout
    "readonly_arrays",  # it can give back a read-only array for a READ_ONLY capsule
    "negative_strides",  # it imports negative strides correctly
    "offset_needs_strides",  # it refuses a non-zero byte_offset when strides is NULL (legal DLPack)
    "row_major_only",  # it refuses or misreads every layout but dense row-major (transposed ones too)
    "raw_capsules_deprecated",  # it warns on a bare PyCapsule: dlbridge hands it a Carrier instead
    "readonly_imports",  # it makes every imported array read-only, whatever the capsule says
    "copy_crashes_unaligned",  # copying an array it imported from an unaligned buffer kills the process
    "shares_unaligned",  # it shares CPU buffers that are not 64-byte aligned (newer JAX copies them)
    "copies_unaligned",  # a CPU buffer not 64-byte aligned reaches it as a copy (its own, or dlbridge's first)
    # users can register DLPack dtypes with it at run time (NumPy's register_dlpack_dtype): the adapter's
    # capabilities() then adds the kinds registered to "imports", and it exports them itself
    "dtype_registry",
    "copies_imports",  # its from_dlpack always copies a CPU capsule (never shares it): copy=False is refused
    # as a producer: its __dlpack__ takes no max_version and makes legacy capsules only, which cannot
    # say READ_ONLY (its adapter refuses to export read-only arrays that way: ReadOnlyError, or copy=True)
    "exports_legacy_only",
    # its from_dlpack(x) imports a uint8-labelled capsule as bool where x itself says bool (its dtype):
    # a producer that labels bool uint8 ("exports_uint8") still reaches it as bool
    "detects_bool_sources",
    # releasing what it imported from a capsule whose deleter is NULL (DLPack allows one) kills the
    # process: dlbridge refuses such a capsule before it sees it
    "aborts_on_null_deleter",
)
# Producer rows: "exports_uint8" lists dtypes whose capsules the producer labels uint8;
# "exports_as_float" dtypes it labels kDLFloat of their width (kDLFloat with 8 bits for a float8 kind:
# no dtype DLPack defines, which every consumer refuses or misreads); "cannot_export" dtypes it holds
# but cannot put in a capsule at all. dlbridge's export through the producer's adapter relabels the
# first two with the true dtype, zero-copy.
PRODUCER_KINDS = ("exports_uint8", "exports_as_float", "cannot_export")
KINDS = ("imports", "holds", *FEATURES, *PRODUCER_KINDS)


class Support(NamedTuple):
    """What dlbridge supports of one framework, beside its rows: the floors and the probed range.

    ``extra`` is pyproject's install extra for it, the framework's own requirement first (its floor:
    ``dlbridge doctor`` and ``dlbridge report`` flag an installed version below it); the others are
    what the extra installs beside it ("ml_dtypes>=0.4"). tests/test_versions.py checks pyproject
    against it. ``probed``: the oldest and newest release the rows were checked on (a release prefix:
    "2.13" covers 2.13.x); outside it the rows' predictions are unverified, and both commands say so.
    """

    extra: tuple[str, ...]
    probed: tuple[str, str]


class Row(NamedTuple):
    consumer: str
    what: str  # one of KINDS
    dtypes: frozenset[str]
    since: str | None  # first version with it (inclusive); None = always
    until: str | None  # first version without it (exclusive); None = still
    requires: str | None  # modules that must be installed, optionally ">=version", comma-separated (all of them)
    source: str


class Framework(NamedTuple):
    """A framework as the registry lists it: what dlbridge knows without importing the framework or its
    adapter (its names, how its arrays are recognised through ``sys.modules``) and where its adapter lives.

    Each framework module here sets one (``FRAMEWORK``) beside its ``ROWS``; ``dlbridge._rows.register``
    adds one at run time. The adapter class is imported when first needed (a conversion, the detection of
    an array of the framework once it is loaded, the report) and made with this entry."""

    name: str  # dlbridge's name for it: to_<name>(), convert(x, "<name>"), its rows' consumer
    module: str  # what ``import`` loads
    array_type: tuple[str, str]  # (module in sys.modules, attribute) of its array class
    adapter: str  # where its Adapter subclass lives: "package.module:Class"
    aliases: tuple[str, ...] = ()  # other names for it, CLI names too ("pytorch", "np")
    # Other modules that name it as a target (convert(x, "jax.numpy")); unlike aliases, not CLI names.
    module_aliases: tuple[str, ...] = ()
    producer_modules: tuple[str, ...] = ()  # top-level __module__ names of its arrays
    # The CPU framework any DLPack CPU capsule can land in (staging for copies, the report's reference
    # arrays): exactly one framework is the host.
    host: bool = False
    # False: dlbridge reads its arrays but never converts into it (no to_<name>, no consumer rows, a row
    # of the report but no column).
    target: bool = True


def row(consumer: str, what: str, dtypes: Iterable[str] = (), since: str | None = None, until: str | None = None,
       requires: str | None = None, *, source: str) -> Row:  # fmt: skip
    return Row(consumer, what, frozenset(dtypes), since, until, requires, source)


# ml_dtypes 0.5.0 added float8_e3m4, float8_e4m3 and float8_e8m0fnu (ml_dtypes CHANGELOG 0.5.0);
# the other float8 kinds and bfloat16 are in every ml_dtypes dlbridge supports (>= 0.4).
NEW_FP8 = frozenset({"float8_e3m4", "float8_e4m3", "float8_e8m0fnu"})
ML_DTYPES_05 = "ml_dtypes>=0.5"
# float4_e2m1fn is in ml_dtypes 0.5.0, its sign bit decoded right since 0.5.1 (ml_dtypes CHANGELOG 0.5.1)
ML_DTYPES_FP4 = "ml_dtypes>=0.5.1"
CUPY_BF16 = "ml_dtypes,numpy>=2.1.2"  # every one of them (comma: all of)
# dtypes only ml_dtypes gives NumPy (a CuPy array can be viewed as any of them)
ML_ONLY = FLOAT8 | {"bfloat16", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"}
