"""``dlbridge doctor``: installed versions and the hazards the capability table knows for them.

Fast on purpose: versions come from package metadata and hazards from the table, so no
framework is imported and nothing is probed (``dlbridge report`` does that). The ``accelerator:``
line says whether the compiled accelerator is in use, and why not where it is not.
"""

from __future__ import annotations

import os
from importlib import metadata

from .. import _accelerator
from .._adapters import ADAPTERS
from .._adapters._support import findable
from .._capabilities import (
    Capabilities,
    capabilities,
    missing_requirements,
    parse_version,
    split_requirement,
    table,
    version_notes,
)
from .._dtypes import BY_NAME, FLOAT8
from .._options import ENV_VAR, get_default_fallback
from .._rows import SUPPORT
from ._cases import BASE_DTYPES, CONSUMERS, REPORTED, install_hint

__all__ = ["installed_versions", "hazards", "doctor_text", "COMPANIONS", "support_notes"]

# Distributions listed beside the frameworks (compiled halves, dtype add-ons), in registry order.
COMPANIONS: tuple[str, ...] = tuple(dict.fromkeys(c for a in REPORTED.values() for c in a.companions))


def _dist_version(module: str, distributions: tuple[str, ...] = ()) -> str | None:
    if not findable(module):
        return None
    for name in distributions or (module,):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    # A distribution named otherwise (per-CUDA-version wheels, say): ask which one ships the module.
    for name in metadata.packages_distributions().get(module, ()):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return "unknown version"


def installed_versions() -> dict[str, str | None]:
    """Version of each framework (producer-only ones too), their companions and dlbridge; None when
    not installed."""
    from .. import __version__

    found: dict[str, str | None] = {name: _dist_version(a.module, a.distributions) for name, a in REPORTED.items()}
    for adapter in REPORTED.values():
        for companion in adapter.companions:
            if found.get(companion) is None:
                found[companion] = _dist_version(companion)
    found["dlbridge"] = __version__
    return found


def support_notes(versions: dict[str, str | None], names: tuple[str, ...] | list[str] = tuple(REPORTED)) -> list[str]:
    """One line per framework of ``names`` whose installed version dlbridge does not support or has not
    probed: below its floor (pyproject's extra), outside the releases its rows were probed on (their
    predictions unverified there), or beside a companion older than its extra asks for (the rows'
    ``SUPPORT``)."""
    out: list[str] = []
    for name in names:
        version = versions.get(name)
        if not version or name not in REPORTED or name not in SUPPORT:
            continue
        who = f"{REPORTED[name].display} {version}"
        out += [f"{who} is {note}" for note in version_notes(name, version)]
        for wanted in SUPPORT[name].extra[1:]:
            module, minimum = split_requirement(wanted)
            have = versions.get(module)
            if have and minimum and have != "unknown version" and parse_version(have) < parse_version(minimum):
                out.append(f"{who} needs {wanted} beside it (dlbridge's [{REPORTED[name].extra}] extra), and {module} "
                           f'{have} is installed: pip install -U "{wanted}"')  # fmt: skip
    return out


def _source(consumer: str, what: str) -> str:
    return next((r.source for r in table() if r.consumer == consumer and r.what == what), "")


def _names(dtypes: set[str]) -> str:
    fp8 = sorted(d for d in dtypes if d in FLOAT8)
    rest = sorted(d for d in dtypes if d not in FLOAT8)
    return ", ".join(rest + ([f"fp8 ({', '.join(n.removeprefix('float8_') for n in fp8)})"] if fp8 else []))


def hazards(versions: dict[str, str | None]) -> list[str]:
    """One line per known hazard of the installed versions, read off the capability table (whose
    consumer rows a producer-only framework has none of)."""
    out: list[str] = []
    for name in CONSUMERS:
        version = versions.get(name)
        if version is None:
            continue
        caps = capabilities(name, version)
        who = f"{ADAPTERS[name].display or name} {version}"
        if caps.crashes_on_reject:
            out.append(f"{who} crashes the process on a capsule it rejects (bf16, fp8, lanes != 1; "
                       f"{_source(name, 'crashes_on_reject')}); dlbridge never hands it one.")  # fmt: skip
        out += _dtype_hazards(name, version, caps, who, versions)
        out += _layout_hazards(name, caps, who)
        out += _import_hazards(name, caps, who)
        after = [m for m in ADAPTERS[name].unsafe_after if findable(m)]
        if after:
            out.append(f"{who} crashes the process when imported after {' or '.join(after)}: import it first "
                       "(dlbridge refuses to import it late, and its report imports it first).")  # fmt: skip
        out += ADAPTERS[name].prober.doctor_notes(version)
    return out


def _dtype_hazards(name: str, version: str, caps: Capabilities, who: str, versions: dict[str, str | None]) -> list[str]:
    """Dtypes the framework imports only as bits, or cannot hold (and what install would help)."""
    out: list[str] = []
    unheld = {d for d in BASE_DTYPES if d not in caps.holds}
    reinterpreted = caps.holds - caps.imports
    if reinterpreted:
        out.append(f"{who} cannot import {_names(set(reinterpreted))} through DLPack; "
                   "dlbridge imports the bits as unsigned integers and views them as the true dtype "
                   f"({'in the copy it makes of every import' if caps.copies_imports else 'zero-copy'}).")  # fmt: skip
    needs: dict[str, set[str]] = {}
    for dtype in BY_NAME:  # dtypes a newer companion would add (e.g. fp8 kinds of ml_dtypes 0.5)
        for requirement in missing_requirements(name, version, dtype):
            if ">=" in requirement:
                needs.setdefault(requirement, set()).add(dtype)
    for requirement, dtypes in sorted(needs.items()):
        module = requirement.partition(">=")[0]
        have = versions.get(module) or "not installed"
        out.append(f"{who} cannot hold {_names(dtypes)} with {module} {have}: they need {requirement} "
                   f"(pip install -U {module}); dlbridge raises UnsupportedDtypeError until then.")  # fmt: skip
    if unheld:
        installs = sorted({m for d in unheld for m in missing_requirements(name, version, d)})
        gains = sorted(d for d in unheld if any(missing_requirements(name, version, d)))
        wanted = " ".join(f'"{m}"' if ">" in m else m for m in installs)
        extra = f" (pip install {wanted} would add {_names(set(gains))})" if installs else ""
        out.append(f"{who} cannot hold {_names(unheld)}{extra}: dlbridge raises UnsupportedDtypeError; "
                   f'fallback="view" gives {_view_kind(caps)} instead.')  # fmt: skip
    return out


def _view_kind(caps: Capabilities) -> str:
    return "an unsigned-integer copy of the bits" if caps.copies_imports else "a zero-copy unsigned-integer view"


def _layout_hazards(name: str, caps: Capabilities, who: str) -> list[str]:
    """Strides the framework refuses or misreads (dlbridge hands it a dense copy)."""
    out: list[str] = []
    if not caps.negative_strides and not caps.compact_only:
        # The table has no negative_strides row for it; see the comment in its rows (dlbridge/_rows/).
        seen = (
            "it refuses a reversed view, a[::-1]"
            if caps.copies_imports
            else "seen aborting the process on a reversed view, a[::-1]"
        )
        out.append(f"{who} cannot import negative strides safely ({seen}); dlbridge hands it a dense copy instead.")
    if caps.row_major_only:
        out.append(f"{who} refuses or misreads every layout but row-major (transposed views too; "
                   f"{_source(name, 'row_major_only')}); dlbridge hands it a dense copy "
                   "(copy=False raises LayoutError).")  # fmt: skip
    elif caps.compact_only:
        out.append(f"{who} refuses strides with gaps (sliced views such as a[:, ::2]); dlbridge hands it a dense "
                   "copy (copy=False raises LayoutError).")  # fmt: skip
    return out


def _import_hazards(name: str, caps: Capabilities, who: str) -> list[str]:
    """How the framework's imports and exports go wrong otherwise (alignment, labels, read-only)."""
    out: list[str] = []
    if caps.copy_crashes_unaligned:
        out.append(f"{who} can crash copying an array imported from an unaligned buffer "
                   f"({_source(name, 'copy_crashes_unaligned')}); dlbridge's copy=True copies through the host "
                   "instead.")  # fmt: skip
    if caps.exports_uint8:
        out.append(f"{who} exports {_names(set(caps.exports_uint8))} arrays labelled uint8; dlbridge relabels its "
                   "own exports with the true dtype.")  # fmt: skip
    if caps.exports_as_float:
        out.append(f"{who} exports {_names(set(caps.exports_as_float))} arrays labelled kDLFloat of their width, "
                   "which no consumer reads right; dlbridge relabels its own exports with the true dtype, and "
                   "refuses such a bare capsule (CapsuleError).")  # fmt: skip
    if caps.cannot_export:
        out.append(f"{who} cannot export {_names(set(caps.cannot_export))} arrays through DLPack; dlbridge "
                   "refuses them before asking it (UnsupportedDtypeError naming the fix).")  # fmt: skip
    if caps.readonly_imports:
        out.append(f"{who} imports every DLPack capsule as a read-only array; {ADAPTERS[name].readonly_imports_note}")
    if caps.offset_needs_strides:
        out.append(f"{who} refuses a byte_offset on a capsule without strides (legal DLPack; "
                   f"{_source(name, 'offset_needs_strides')}); dlbridge has the producer re-export it densely.")  # fmt: skip
    if caps.copies_imports:
        out.append(f"{who} copies every CPU array it imports ({_source(name, 'copies_imports')}): conversions into "
                   "it are copies (read-only sources included), and copy=False raises LayoutError.")  # fmt: skip
    if not caps.readonly_arrays and not caps.copies_imports:
        legacy = "" if caps.versioned_capsules else " and reads only legacy capsules, which cannot say so"
        out.append(f"{who} has no read-only arrays{legacy}: dlbridge refuses read-only sources (ReadOnlyError) "
                   "unless copy=True.")  # fmt: skip
    return out


def _report_hint(versions: dict[str, str | None], missing: list[str]) -> str:
    if len(missing) == len(CONSUMERS):
        return "once a framework is installed, run `dlbridge report` to probe it in isolated processes."
    return "run `dlbridge report` to probe the installed stack in isolated processes."


def doctor_text() -> str:
    versions = installed_versions()
    width = max(len(k) for k in versions)
    lines = ["dlbridge doctor: installed versions (package metadata; nothing imported)"]
    lines += [f"  {k:<{width}}  {v or 'not installed'}" for k, v in versions.items()]
    missing = [name for name in CONSUMERS if not versions.get(name)]
    if len(missing) == len(CONSUMERS):
        lines += ["", f"no framework is installed: install the ones you use, e.g. {install_hint(CONSUMERS[:1])} "
                  f"(extras: {', '.join(ADAPTERS[n].extra or n for n in CONSUMERS)})."]  # fmt: skip
    unsupported = support_notes(versions)
    if unsupported:
        lines += ["", f"versions outside what dlbridge supports or has probed ({len(unsupported)}):"]
        lines += [f"  - {n}" for n in unsupported]
    found = hazards(versions)
    lines += ["", f"hazards known to the capability table ({len(found)}):"]
    lines += [f"  - {h}" for h in found] or ["  none"]
    env = os.environ.get(ENV_VAR)
    lines += ["", f"accelerator: {_accelerator.reason}",
              f'default fallback: "{get_default_fallback()}"' + (f" (${ENV_VAR}={env})" if env else ""),
              _report_hint(versions, missing)]  # fmt: skip
    return "\n".join(lines)
