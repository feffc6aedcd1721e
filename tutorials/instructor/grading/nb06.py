"""Checks for 06_plan_to_cuda."""
from __future__ import annotations

import json
import os

import astitch_sim as asim

from checks.core import Derived, Wrong, direction, exercise, integer


def _source(strategy: str) -> str:
    import gpu_backend       # generating source needs no GPU and no simulator
    # the notebook prints the paper's reduction trees (reduce_scheme="tree"): their barriers are the lesson
    return gpu_backend.generate_source(asim.compile(asim.workload("layernorm", rows=2, cols=16), strategy, "V100",
                                                    reduce_scheme="tree"))


@exercise(wrong=[2, 4, 3, 0])
def q1_syncthreads(syncthreads):
    got = integer(syncthreads, "syncthreads")
    src = _source("astitch")
    truth = sum(1 for line in src.splitlines() if "cuda.syncthreads()" in line)
    if got == truth:
        return
    plan = asim.compile(asim.workload("layernorm", rows=2, cols=16), "astitch", "V100", reduce_scheme="tree")
    if got == plan.kernels[0].block_barriers:
        raise Wrong("those are the barriers between stages; each reduction synchronises its threads too")
    if got == 0:
        raise Wrong("search the source for 'cuda.syncthreads()'")
    raise Wrong(f"{direction(got, truth)}: count source lines containing cuda.syncthreads()")


@exercise(wrong=[1, 4, 6, 0])
def q2_xla_kernels(xla_kernels):
    got = integer(xla_kernels, "xla_kernels")
    src = _source("xla")
    truth = src.count("\n@jit(")
    if got == truth:
        return
    if got == 1:
        raise Wrong("one is the stitched plan; XLA's plan has one kernel function per fusion")
    raise Wrong(f"{direction(got, truth)}: count the functions decorated with @jit(...) in xla_source")


def _results_dir() -> str:
    """benchmarks/results of the checkout the notebook runs in (the nearest one up from the working directory)."""
    from pathlib import Path
    for p in (Path.cwd(), *Path.cwd().parents):
        if (p / "benchmarks" / "results").is_dir():
            return str(p / "benchmarks" / "results")
    raise Wrong("cannot find benchmarks/results above this folder: run the notebook inside a checkout of "
                "astitch-sim")


def _counted_by_hand(root: str) -> dict:
    """Counts a student might make by reading the results files instead of asking ``asim.gpu_measurements``:
    every GPU run's plan timings in every results.json (a window's merged file repeats its parts), every timed
    run of the files it reads (the jax.jit and torch baselines too), and the measured cases."""
    found = asim.gpu_measurements(root)
    every_file = with_baselines = 0
    for d, _, files in os.walk(root):
        if "results.json" not in files:
            continue
        path = os.path.join(d, "results.json")
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        device = str((doc.get("provenance") or {}).get("device") or "")
        if doc.get("mode") == "simulator" or not device or device.lower().startswith("none"):
            continue
        runs = [r for c in doc.get("cases", []) for r in c.get("runs", []) if r.get("gpu_us")]
        every_file += sum(1 for r in runs if r.get("kind") == "plan")
        if path in found.files:
            with_baselines += len(runs)
    cases = len({(m.source, m.workload, tuple(sorted(m.shape.items()))) for m in found.rows})
    return {"every_file": every_file, "with_baselines": with_baselines, "cases": cases}


@exercise(wrong=[Derived(lambda env: len(env["rows"]), "prediction rows"),
                 Derived(lambda env: len(env["cases"]), "predicted cases"), 1, -1,
                 Derived(lambda env: _counted_by_hand(_results_dir())["every_file"], "the merged file counted too"),
                 Derived(lambda env: _counted_by_hand(_results_dir())["with_baselines"], "baselines counted too"),
                 Derived(lambda env: _counted_by_hand(_results_dir())["cases"], "measured cases")])
def q3_measurements(n_measurements):
    got = integer(n_measurements, "n_measurements")
    root = _results_dir()
    truth = len(asim.gpu_measurements(root).rows)
    if got == truth:
        return
    path = os.path.join(root, "simt_predictions.json")
    if os.path.exists(path):
        with open(path) as f:
            rows = json.load(f).get("rows", [])
        if got in (len(rows), len({r.get("case") for r in rows}), len([r for r in rows if r.get("gpu") == "H100"])):
            raise Wrong("that counts the SIMT model's predictions; a measurement is a time taken on a GPU")
    if got < 0:
        raise Wrong("a count cannot be negative")
    by_hand = _counted_by_hand(root)
    if got == by_hand["every_file"]:
        raise Wrong("a GPU window's merged results.json repeats the plan timings of its parts (parts/p*/"
                    "results.json): count each timing once, as asim.gpu_measurements does")
    if got == by_hand["with_baselines"]:
        raise Wrong("that counts the baselines (jax.jit, torch) too: count the timings of the project's plans, "
                    "the rows asim.gpu_measurements returns")
    if got == by_hand["cases"]:
        raise Wrong("that counts the measured cases (a workload at a shape); each case times one plan per strategy")
    raise Wrong("that is not what asim.gpu_measurements finds in the checkout's benchmarks/results (print(measured))")
