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


@exercise(wrong=[Derived(lambda env: len(env["rows"]), "prediction rows"),
                 Derived(lambda env: len(env["cases"]), "predicted cases"), 1, -1])
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
    raise Wrong("that is not what asim.gpu_measurements finds in the checkout's benchmarks/results (print(measured))")
