"""The capability table at its version boundaries (run by .ci/edges, which makes the base venvs).

For each framework with consumer rows (dlbridge/_rows/<fw>.py), every version a row names as its ``since`` or
``until`` and the release just below it, installed one at a time over a base venv (``pip install --no-deps
--only-binary=:all: --target DIR dist==version``, DIR first on PYTHONPATH) and checked with
``python -m dlbridge report --frameworks numpy,torch,<fw> --devices cpu --strict``.

"At" a boundary B is the lowest release >= B, "below" it the highest release < B (from ``pip index versions``:
final releases only). A version without a wheel for this interpreter is skipped, saying so. A version that
cannot be imported over the base (one built against NumPy 1.x, on a base with NumPy 2) is tried over the
fallback base (the oldest stack: NumPy 1.26) before it is skipped. Writes a Markdown summary (--out) and
exits 1 when a report failed (a table disagreement or a dlbridge failure).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlbridge._adapters import ALL_ADAPTERS  # noqa: E402
from dlbridge._capabilities import (  # noqa: E402
    floor,
    parse_version,
    table,
)

# Packages that must come along at a matching version: "{v}" is the framework's version.
COMPANIONS = {"jax": ("jaxlib<={v}",), "mlx": ("mlx-cpu=={v}",)}
# Frameworks whose rows this CPU machine cannot check, and why.
NOT_HERE = {"cupy": "CUDA only: its rows are checked on the GPU machine (.ci/gpu-session: report, cupy13)"}
# Every PyPI torch but the CPU build this machine's pip finds locally is a CUDA build that needs its NVIDIA
# packages (about 2.5 GB a version, installed with it): checked only when named (--heavy torch).
HEAVY = {"torch": "PyPI's torch builds are CUDA builds: with their NVIDIA packages, about 2.5 GB a version"}
WITH_DEPS = {"torch"}  # installed with their dependencies (torch's NVIDIA packages), into the same target


def pip(py: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([py, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout)


def releases(py: str, dist: str) -> list[str]:
    """Final releases of ``dist`` on the index, ascending (pip index versions: every file, not only wheels)."""
    out = pip(py, "index", "versions", dist, timeout=120).stdout
    found = re.search(r"^Available versions: (.*)$", out, re.MULTILINE)
    return sorted(found.group(1).split(", ") if found else [], key=parse_version)


def boundaries(fw: str) -> list[str]:
    bounds = {b for r in table() if r.consumer == fw for b in (r.since, r.until) if b is not None}
    return sorted(bounds, key=parse_version)


def versions_to_check(bounds: list[str], available: list[str]) -> list[tuple[str, str]]:
    """(version, why) for each boundary B: the first release of B's series (2.2 -> the lowest 2.2.x, 0.4.24 ->
    0.4.24 or a 0.4.24.x) and the last release before B; a boundary without a release of its series on the
    index for this interpreter is named as it is (its install then says why it is skipped)."""
    picked: dict[str, list[str]] = {}
    for b in bounds:
        key = parse_version(b)
        series = [int(p) for p in b.split(".")]
        after = ".".join(map(str, [*series[:-1], series[-1] + 1]))  # the next series: 2.2 -> 2.3
        at = [v for v in available if key <= parse_version(v) < parse_version(after)]
        below = [v for v in available if parse_version(v) < key]
        picked.setdefault(at[0] if at else b, []).append(f"at {b}")
        if below:
            picked.setdefault(below[-1], []).append(f"below {b}")
    return sorted(((v, ", ".join(w)) for v, w in picked.items()), key=lambda p: parse_version(p[0]))


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def distribution(fw: str) -> str:
    """The distribution the base venv has for ``fw`` (tensorflow-cpu, not tensorflow), else the adapter's first."""
    names = ALL_ADAPTERS[fw].distributions
    return next((name for name in names if installed_version(name) is not None), names[0])


def install(py: str, target: Path, dist: str, version: str) -> str | None:
    """Installs ``dist==version`` and its companions into ``target`` (one pip call: a second call into the same
    target would not add files to a package directory the first made); None, or why it could not."""
    shutil.rmtree(target, ignore_errors=True)
    specs = [f"{dist}=={version}", *(c.format(v=version) for c in COMPANIONS.get(dist, ()))]
    deps = () if dist in WITH_DEPS else ("--no-deps",)
    done = pip(py, "install", "-q", *deps, "--only-binary=:all:", "--target", str(target), *specs)
    if done.returncode == 0:
        return None
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")]
    missing = [ln.split(" for ", 1)[-1] for ln in errors if "No matching distribution found" in ln]
    if missing:
        return f"no wheel of {', '.join(missing)} for Python {sys.version_info[0]}.{sys.version_info[1]} on the index"
    return f"{' '.join(specs)}: pip failed: " + (errors[-1][:200] if errors else f"exit {done.returncode}")


def conflicts(py: str, env: dict[str, str], dist: str) -> set[str]:
    """What `pip check` finds wrong (with this PYTHONPATH) with a package the report imports: NumPy, ml_dtypes,
    torch, ``dist`` and its companions (another package's needs, scipy's say, do not matter to it)."""
    names = ["numpy", "ml_dtypes", "torch", dist, *(re.split(r"[<>=]", c)[0] for c in COMPANIONS.get(dist, ()))]
    used = {n.lower().replace("_", "-") for n in names}
    done = subprocess.run([py, "-m", "pip", "check"], env=env, capture_output=True, text=True, timeout=120)
    lines = [ln.strip() for ln in done.stdout.splitlines() if " has requirement " in ln]
    return {ln for ln in lines if ln.split()[0].lower().replace("_", "-") in used}


def importable(py: str, env: dict[str, str], fw: str, target: Path) -> str | None:
    """None when NumPy, ml_dtypes and the framework import over this base, the framework from ``target``
    (and torch too where NumPy is the one changed)."""
    module = ALL_ADAPTERS[fw].module
    also = ", torch" if fw == "numpy" else ""
    code = (
        f"import numpy, ml_dtypes{also}, {module} as m; f = m.__file__ or ''; "
        f"assert f.startswith({str(target)!r}), 'imported ' + f"
    )
    done = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode == 0 and "compiled using NumPy 1.x" not in done.stderr:
        return None
    lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else f"exit {done.returncode}"


def check(fw: str, version: str, bases: list[str], work: Path, timeout: float) -> dict[str, str]:
    dist = distribution(fw)
    target = work / f"{dist}-{version}"
    why = install(bases[0], target, dist, version)
    if why is not None:
        return {"result": "skipped", "detail": why}
    errors = []
    for py in bases:  # the first base where it imports and conflicts with no package of the base's
        name = Path(py).parent.parent.name
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env.pop("DLBRIDGE_PURE_PYTHON", None)
        before = conflicts(py, env, dist)
        env["PYTHONPATH"] = os.pathsep.join([str(target), str(ROOT)])
        clash = sorted(conflicts(py, env, dist) - before)
        error = importable(py, env, fw, target) if not clash else "; ".join(clash)[:300]
        if error is not None:
            errors.append(f"{name}: {error}")
            continue
        frameworks = ",".join(dict.fromkeys(["numpy", "torch", fw]))
        cmd = [py, "-m", "dlbridge", "report", "--frameworks", frameworks, "--devices", "cpu", "--strict",
               "--out", str(work / f"{fw}-{version}.md"), "--json", str(work / f"{fw}-{version}.json")]  # fmt: skip
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"result": "FAILED", "base": name, "detail": f"report ran past {timeout} s"}
        finally:
            shutil.rmtree(target, ignore_errors=True)  # keeps the disk small; the report and its log stay
        (work / f"{fw}-{version}.log").write_text(done.stdout + done.stderr)
        lines = [ln.strip() for ln in done.stderr.splitlines()]
        summary = next((ln for ln in lines if ln.startswith("dlbridge report:")), lines[-1] if lines else "")
        problems = [ln for ln in lines if ln.startswith(("table disagrees:", "dlbridge failure:"))]
        detail = re.sub(r"^dlbridge report: wrote \S+: ", "", summary)
        result = "ok" if done.returncode == 0 else "FAILED"
        return {"result": result, "base": name, "detail": detail, "problems": "\n".join(problems)}
    shutil.rmtree(target, ignore_errors=True)
    return {"result": "unimportable", "detail": "does not import, or conflicts: " + "; ".join(errors)}


def known_failures(path: Path) -> dict[tuple[str, str], str]:
    """(framework, version) -> why, from lines "<framework> <version> <why>" ('#' starts a comment)."""
    known = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        fw, version, why = [*line.split("#", 1)[0].split(None, 2), "", "", ""][:3]
        if fw:
            known[fw, version] = why or "no reason given"
    return known


def markdown(rows: list[dict[str, str]], notes: list[str], took: float) -> str:
    head = [
        "# The capability table at its version boundaries",
        "",
        "Generated by `bash .ci/edges` (.ci/edges.py): for each framework with consumer rows, every version a row",
        "names as its `since`/`until` and the release just below it, installed over a base venv and checked with",
        "`python -m dlbridge report --frameworks numpy,torch,<fw> --devices cpu --strict`. Regenerate it with the",
        "command; do not edit by hand. The floor is the lowest version dlbridge supports (its install extra in",
        'pyproject.toml): a report that fails below it is listed ("differs"), not counted as a failure. The',
        "base is the venv the version was installed over (latest; oldest, NumPy 1.26, for builds against NumPy 1.x).",
        "",
        f"Run {time.strftime('%Y-%m-%d', time.gmtime())} on Python {sys.version.split()[0]}, {took:.0f} s.",
        "",
        "| framework | version | boundary | floor | base | result | detail |",
        "|---|---|---|---|---|---|---|",
    ]
    body = [
        f"| {r['fw']} | {r['version']} | {r['why']} | {r['floor']} | {r.get('base', '')} | {r['result']} | "
        + r["detail"].replace("|", "\\|")
        + "".join(f"<br>{p}".replace("|", "\\|") for p in r.get("problems", "").splitlines())
        + " |"
        for r in rows
    ]
    return "\n".join([*head, *body, "", *(f"- {n}" for n in notes), ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fallback", help="python of a base with NumPy 1.x, for versions built against it")
    ap.add_argument("--work", default=str(ROOT / ".venv-matrix" / "edges"), help="install targets and logs")
    ap.add_argument("--out", help="write the Markdown summary here")
    ap.add_argument("--heavy", action="store_true", help=f"also check {', '.join(HEAVY)} ({'; '.join(HEAVY.values())})")
    ap.add_argument(
        "--supported",
        action="store_true",
        help="only versions at or above each framework's floor (where a disagreement fails the run)",
    )
    ap.add_argument("--timeout", type=float, default=600, help="seconds one report may take")
    ap.add_argument(
        "--versions",
        action="append",
        default=[],
        metavar="FW=V1,V2",
        help="check these versions of FW instead of its boundaries (to find where a behaviour starts)",
    )
    ap.add_argument("--plan", action="store_true", help="list each framework's boundaries, installing nothing")
    ap.add_argument("frameworks", nargs="*", help="only these (default: every framework with consumer rows)")
    args = ap.parse_args()
    t0 = time.monotonic()
    work = Path(args.work).resolve()  # absolute: an import is checked to come from under it
    if not args.plan:
        work.mkdir(parents=True, exist_ok=True)
    bases = [sys.executable, *([args.fallback] if args.fallback else [])]
    consumers = list(dict.fromkeys(r.consumer for r in table()))
    chosen = {fw: vs.split(",") for fw, _, vs in (v.partition("=") for v in args.versions)}
    args.frameworks += [fw for fw in chosen if fw not in args.frameworks]
    unknown = sorted(set(args.frameworks) - set(consumers))
    if unknown:
        ap.error(f"no consumer rows for {', '.join(unknown)}; frameworks with rows: {', '.join(consumers)}")
    known = known_failures(ROOT / ".ci" / "edges-known")
    rows: list[dict[str, str]] = []
    notes = [f"{name}: no capability rows: nothing to check" for name in ALL_ADAPTERS if name not in consumers]
    for fw in args.frameworks or consumers:
        if fw in NOT_HERE or (fw in HEAVY and not (args.heavy or fw in args.frameworks)):
            notes.append(f"{fw}: not checked: {NOT_HERE.get(fw) or HEAVY[fw] + ' (bash .ci/edges --heavy)'}")
            print(f"=== {fw}: skipped: {notes[-1].split(': ', 2)[-1]}", flush=True)
            continue
        dist, lowest = distribution(fw), floor(fw)
        if args.plan:  # what a run would look up for fw, without the index or an install
            print(f"{fw} ({dist}, module {ALL_ADAPTERS[fw].module}): floor {lowest or '-'}, boundaries "
                  f"{', '.join(boundaries(fw)) or '-'}", flush=True)  # fmt: skip
            continue
        if fw in chosen:
            todo = [(v, "chosen (--versions)") for v in chosen[fw]]
        else:
            todo = versions_to_check(boundaries(fw), releases(bases[0], dist))
        below = [v for v, _ in todo if lowest and parse_version(v) < parse_version(lowest)]
        if args.supported and below:
            todo = [(v, w) for v, w in todo if v not in below]
            notes.append(f"{fw}: below its floor {lowest}, not checked (--supported): {', '.join(below)}")
        print(f"=== {fw} ({dist}): {', '.join(f'{v} ({w})' for v, w in todo)}", flush=True)
        for version, why in todo:
            t = time.monotonic()
            if parse_version(version) == parse_version(installed_version(dist) or ""):
                found = {"result": "skipped", "detail": "the base venv's own version: the version matrix checks it"}
                rows.append({"fw": fw, "version": version, "why": why, "floor": lowest or "", **found})
                print(f"  {fw} {version} ({why}): skipped: {found['detail']}", flush=True)
                continue
            found = check(fw, version, bases, work, args.timeout)
            supported = not lowest or parse_version(version) >= parse_version(lowest)
            if found["result"] == "unimportable":  # a supported version that cannot be checked fails the run
                found["result"] = "FAILED" if supported else "skipped"
            elif found["result"] == "FAILED" and not supported:
                found["result"] = f"differs (below the floor {lowest})"  # not supported: listed, not failed
            elif found["result"] == "FAILED" and (fw, version) in known:
                found["result"] = f"known failure ({known[fw, version]})"  # listed in .ci/edges-known
            elif (fw, version) in known:
                notes.append(f"{fw} {version} is listed in .ci/edges-known but passes now: remove it from there")
                print(f"  note: {notes[-1]}", flush=True)
            rows.append({"fw": fw, "version": version, "why": why, "floor": lowest or "", **found})
            print(f"  {fw} {version} ({why}): {found['result']} [{found.get('base', '-')}, {time.monotonic() - t:.0f} s] "
                  f"{found['detail']}", flush=True)  # fmt: skip
            for problem in found.get("problems", "").splitlines():
                print(f"    {problem}", flush=True)
    took = time.monotonic() - t0
    text = markdown(rows, notes, took)
    if args.out and not args.plan:
        Path(args.out).write_text(text)
    failed = [f"{r['fw']} {r['version']}" for r in rows if r["result"] == "FAILED"]
    counts = {k: sum(r["result"].startswith(k) for r in rows) for k in ("ok", "skipped", "differs", "known")}
    total = time.monotonic() - t0 + float(os.environ.get("EDGES_SETUP_S", "0"))
    print(
        f"=== edges: {len(rows)} versions in {total:.0f} s: {counts['differs']} differ below a floor, "
        f"{counts['known']} known failures (.ci/edges-known){': failed: ' + ', '.join(failed) if failed else ''}"
    )
    print(f"edges: {counts['ok']} passed, {len(failed)} failed, {counts['skipped']} skipped", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
