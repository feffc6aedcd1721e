"""GPU measurements committed under ``benchmarks/results/``, read back for comparison with the model.

``python -m benchmarks.gpu_bench`` writes a ``results.json`` per run (format
``astitch-sim gpu_bench 1``): provenance (device, driver, versions, commit,
date, command), and per case the workload, its shape and one run per strategy
with its measured ``gpu_us``.  A run in Numba's CUDA simulator writes the same
file with ``mode: "simulator"`` and a device of ``"none (...)"``: its times are
a CPU's wall clock and say nothing about a GPU, so they are never returned as
measurements.

    >>> found = gpu_measurements("benchmarks/results")
    >>> found.rows          # one Measurement per validated plan time (60 from the 2026-11-27 H200 window)
    >>> print(found)        # says where it looked and what it skipped, and why

The tutorials (notebook 6), the explorer and anyone comparing predicted with
measured time use this instead of globbing JSON by hand.  A measurement is of
one plan: each run records its :func:`plan_signature`, so ``m.same_plan(plan)``
says whether the plan compiled today is the one that was timed (a prediction of
a plan the planner no longer draws is no comparison).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

from ..errors import AStitchError

FORMAT = "astitch-sim gpu_bench 1"


@dataclass(frozen=True)
class Measurement:
    """One plan timed on a real GPU."""
    workload: str
    shape: dict
    strategy: str
    gpu_us: float
    device: str
    preset: str
    date: str
    commit: str
    source: str                 # the results.json it came from
    plan_signature: str = ""    # plan_signature() of the plan timed ("" where the run recorded none)

    def same_plan(self, plan):
        """True if ``plan`` is the plan this run timed (same :func:`plan_signature`), False if the planner
        draws another one now, None if the run recorded no signature (it cannot be told)."""
        if not self.plan_signature:
            return None
        return plan_signature(plan) == self.plan_signature


def plan_signature(plan) -> str:
    """A short digest of what a plan decided -- its kernels' launches and every stage's ops, thread mapping and
    reduction scheme -- without its notes (which carry search timings).  ``benchmarks.gpu_bench`` records it
    with each measured plan (before ``apply_compiler``), so a measurement can be matched with the plan compiled
    today (``benchmarks/calibrate`` leaves out the measurements whose plan changed)."""
    desc = [(k.name, k.kind, k.grid, k.block,
             [(s.dominant, list(s.ops), list(s.epilogue), s.mapping.to_dict(), str(s.reduce_scheme),
               str(s.barrier_after)) for s in k.stages])
            for k in plan.kernels]
    return hashlib.sha256(json.dumps(desc, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Measurements:
    root: str
    rows: list = field(default_factory=list)          # Measurement
    files: list = field(default_factory=list)         # results files that held GPU measurements
    skipped: list = field(default_factory=list)       # (path, why)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def __str__(self) -> str:
        if self.rows:
            devices = sorted({r.device for r in self.rows})
            head = (f"{len(self.rows)} GPU measurement(s) from {len(self.files)} file(s) under {self.root} "
                    f"(devices: {', '.join(devices)})")
        else:
            head = (f"no GPU measurements under {self.root}: no results.json there comes from a GPU run "
                    "(python -m benchmarks.gpu_bench on a machine with a CUDA GPU writes one)")
        lines = [head] + [f"  skipped {p}: {why}" for p, why in self.skipped]
        return "\n".join(lines)


def _is_gpu_run(results: dict) -> tuple[bool, str]:
    if results.get("format") != FORMAT:
        return False, f"format {results.get('format')!r} is not {FORMAT!r}"
    if results.get("mode") == "simulator":
        return False, "made in Numba's CUDA simulator (CPU wall clock, not GPU time)"
    device = str((results.get("provenance") or {}).get("device") or "")
    if not device or device.lower().startswith("none"):
        return False, f"provenance names no GPU device ({device!r})"
    return True, device


def _merged_parts(path: str, results: dict):
    """The files a render merged into ``path`` (its ``merged_from``), found on disk, or None.

    A GPU window split over several device commands leaves one results.json per part and a merged one
    beside them (``python -m benchmarks.gpu_session --render``); read both and every time counts twice.
    The entries were written relative to where the render ran (a checkout's root), so each is looked for
    from the current folder and from every folder above ``path``."""
    entries = results.get("merged_from")
    if not entries or not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        return None                     # not a render's merge (or a hand-edited one): read the file itself
    out = []
    for entry in entries:
        candidates = [entry] if os.path.isabs(entry) else [entry] + [
            os.path.join(up, entry) for up in _ancestors(os.path.dirname(os.path.abspath(path)))]
        hit = next((c for c in candidates if os.path.isfile(c)), None)
        if hit is None:
            return None
        out.append(hit)
    return out


def _ancestors(folder: str) -> list:
    out = []
    while True:
        out.append(folder)
        up = os.path.dirname(folder)
        if up == folder:
            return out
        folder = up


def gpu_measurements(root: str = "benchmarks/results") -> Measurements:
    """Every GPU-measured plan time in the ``results.json`` files under ``root`` (recursively).

    Files from the CUDA simulator, files of another format and runs that failed
    validation are skipped and listed in ``.skipped`` with the reason.  A missing
    ``root`` is an AStitchError (a wrong path should not read as "no measurements").
    """
    if not os.path.isdir(root):
        raise AStitchError(f"{root!r} is not a directory: pass the benchmarks/results folder of a checkout "
                           "(e.g. '../benchmarks/results' from tutorials/)")
    out = Measurements(root=root)
    paths = [os.path.join(d, n) for d, _, files in sorted(os.walk(root)) for n in sorted(files) if n == "results.json"]
    found = {os.path.realpath(p) for p in paths}
    for path in paths:
        try:
            with open(path) as f:
                results = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            out.skipped.append((path, f"unreadable ({type(e).__name__}: {e})"))
            continue
        parts = _merged_parts(path, results) if isinstance(results, dict) else None
        if parts and all(os.path.realpath(q) in found for q in parts):
            out.skipped.append((path, f"merges {len(parts)} results files read on their own (each with its "
                                      "own provenance): " + ", ".join(parts)))
            continue
        ok, why = _is_gpu_run(results) if isinstance(results, dict) else (False, "not a JSON object")
        if not ok:
            out.skipped.append((path, why))
            continue
        prov = results["provenance"]
        before = len(out.rows)
        for case in results.get("cases", []):
            for run in case.get("runs", []):
                us = run.get("gpu_us")
                if run.get("kind") != "plan" or not us:
                    continue
                if not (run.get("validation") or {}).get("ok", False):
                    out.skipped.append((path, f"{case.get('key')} {run.get('strategy')}: output did not "
                                              "validate against the reference"))
                    continue
                out.rows.append(Measurement(
                    workload=case.get("workload", ""), shape=dict(case.get("shape") or {}),
                    strategy=run.get("strategy", run.get("name", "")), gpu_us=float(us),
                    device=why, preset=results.get("gpu_preset", ""), date=str(prov.get("date", "")),
                    commit=str(prov.get("git_commit", "")), source=path,
                    plan_signature=str(run.get("plan_signature") or "")))
        if len(out.rows) > before:
            out.files.append(path)
        else:
            out.skipped.append((path, "a GPU run, but no validated plan timing in it"))
    return out
