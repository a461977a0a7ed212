"""``dlbridge doctor``: installed versions and the hazards the capability table knows for them.

Fast on purpose: versions come from package metadata and hazards from the table, so no
framework is imported and nothing is probed (``dlbridge report`` does that).
"""

from __future__ import annotations

import importlib.util
import os
from importlib import metadata

from .._capabilities import TABLE, capabilities, missing_requirements
from .._dtypes import BY_NAME, FLOAT8
from .._options import ENV_VAR, get_default_fallback
from ._cases import BASE_DTYPES, FRAMEWORKS

__all__ = ["installed_versions", "hazards", "doctor_text"]

_DISPLAY = {"torch": "PyTorch", "cupy": "CuPy", "jax": "JAX", "numpy": "NumPy"}
# Distributions that provide a framework's module under another name (CuPy ships per CUDA version).
_DISTS = {"jax": ("jax",), "jaxlib": ("jaxlib",), "ml_dtypes": ("ml_dtypes", "ml-dtypes")}


def _dist_version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    for name in _DISTS.get(module, (module,)):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    for name in metadata.packages_distributions().get(module, ()):  # e.g. cupy-cuda12x
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return "unknown version"


def installed_versions() -> dict[str, str | None]:
    """Version of each framework, jaxlib, ml_dtypes and dlbridge; None when not installed."""
    from .. import __version__

    found: dict[str, str | None] = {name: _dist_version(name) for name in FRAMEWORKS}
    found["jaxlib"] = _dist_version("jaxlib") if found["jax"] else None
    found["ml_dtypes"] = _dist_version("ml_dtypes")
    found["dlbridge"] = __version__
    return found


def _source(consumer: str, what: str) -> str:
    return next((r.source for r in TABLE if r.consumer == consumer and r.what == what), "")


def _names(dtypes: set[str]) -> str:
    fp8 = sorted(d for d in dtypes if d in FLOAT8)
    rest = sorted(d for d in dtypes if d not in FLOAT8)
    return ", ".join(rest + ([f"fp8 ({', '.join(n.removeprefix('float8_') for n in fp8)})"] if fp8 else []))


def hazards(versions: dict[str, str | None]) -> list[str]:
    """One line per known hazard of the installed versions, read off the capability table."""
    out: list[str] = []
    for name in FRAMEWORKS:
        version = versions.get(name)
        if version is None:
            continue
        caps = capabilities(name, version)
        who = f"{_DISPLAY[name]} {version}"
        if caps.crashes_on_reject:
            out.append(f"{who} crashes the process on a capsule it rejects (bf16, fp8, lanes != 1; "
                       f"{_source(name, 'crashes_on_reject')}); dlbridge never hands it one.")  # fmt: skip
        unheld = {d for d in BASE_DTYPES if d not in caps.holds}
        reinterpreted = caps.holds - caps.imports
        if reinterpreted:
            out.append(f"{who} cannot import {_names(set(reinterpreted))} through DLPack; "
                       "dlbridge imports the bits as unsigned integers and views them as the true dtype (zero-copy).")  # fmt: skip
        needs: dict[str, set[str]] = {}
        for dtype in BY_NAME:  # dtypes a newer ml_dtypes would add (e.g. fp8 kinds of ml_dtypes 0.5)
            for requirement in missing_requirements(name, version, dtype):
                if ">=" in requirement:
                    needs.setdefault(requirement, set()).add(dtype)
        for requirement, dtypes in sorted(needs.items()):
            have = versions.get(requirement.partition(">=")[0]) or "not installed"
            out.append(f"{who} cannot hold {_names(dtypes)} with ml_dtypes {have}: they need {requirement} "
                       "(pip install -U ml_dtypes); dlbridge raises UnsupportedDtypeError until then.")  # fmt: skip
        if unheld:
            extra = (
                " (pip install ml_dtypes would add bf16/fp8)"
                if name == "numpy" and not versions.get("ml_dtypes")
                else ""
            )
            out.append(f"{who} cannot hold {_names(unheld)}{extra}: dlbridge raises UnsupportedDtypeError; "
                       'fallback="view" gives a zero-copy unsigned-integer view instead.')  # fmt: skip
        if not caps.negative_strides and not caps.compact_only:
            # The table has no negative_strides row for it; see the comment in _capabilities.TABLE.
            out.append(f"{who} cannot import negative strides safely (torch 2.13 was seen aborting the process on NumPy's "
                       "a[::-1]); dlbridge hands it a dense copy instead.")  # fmt: skip
        if caps.row_major_only:
            out.append(f"{who} refuses or misreads every layout but row-major (transposed views too; "
                       f"{_source(name, 'row_major_only')}); dlbridge hands it a dense copy "
                       "(copy=False raises LayoutError).")  # fmt: skip
        elif caps.compact_only:
            out.append(f"{who} refuses strides with gaps (sliced views such as a[:, ::2]); dlbridge hands it a dense "
                       "copy (copy=False raises LayoutError).")  # fmt: skip
        if caps.copy_crashes_unaligned:
            out.append(f"{who} can crash copying an array imported from an unaligned buffer "
                       f"({_source(name, 'copy_crashes_unaligned')}); dlbridge's copy=True copies through the host "
                       "instead.")  # fmt: skip
        if caps.exports_uint8:
            out.append(f"{who} exports {_names(set(caps.exports_uint8))} arrays labelled uint8; dlbridge relabels its "
                       "own exports with the true dtype.")  # fmt: skip
        if caps.readonly_imports:
            out.append(f"{who} imports every DLPack capsule as a read-only array; dlbridge gives the memory of mutable "
                       "producers (torch, NumPy) back writable and zero-copy, as NumPy 2.2+ does.")  # fmt: skip
        if caps.offset_needs_strides:
            out.append(f"{who} refuses a byte_offset on a capsule without strides (legal DLPack; "
                       f"{_source(name, 'offset_needs_strides')}); dlbridge has the producer re-export it densely.")  # fmt: skip
        if not caps.readonly_arrays:
            legacy = "" if caps.versioned_capsules else " and reads only legacy capsules, which cannot say so"
            out.append(f"{who} has no read-only arrays{legacy}: dlbridge refuses read-only sources (ReadOnlyError) "
                       "unless copy=True.")  # fmt: skip
        if name == "jax" and os.environ.get("JAX_ENABLE_X64", "").lower() not in ("1", "true", "yes"):
            out.append(f"{who} runs without 64-bit types (JAX_ENABLE_X64 unset): it narrows int64/float64/complex128 "
                       "to 32 bits on import; dlbridge refuses them instead of narrowing.")  # fmt: skip
    return out


def doctor_text() -> str:
    versions = installed_versions()
    width = max(len(k) for k in versions)
    lines = ["dlbridge doctor: installed versions (package metadata; nothing imported)"]
    lines += [f"  {k:<{width}}  {v or 'not installed'}" for k, v in versions.items()]
    found = hazards(versions)
    lines += ["", f"hazards known to the capability table ({len(found)}):"]
    lines += [f"  - {h}" for h in found] or ["  none"]
    env = os.environ.get(ENV_VAR)
    lines += ["", f'default fallback: "{get_default_fallback()}"' + (f" (${ENV_VAR}={env})" if env else ""),
              "run `dlbridge report` to probe the installed stack in isolated processes."]  # fmt: skip
    return "\n".join(lines)
