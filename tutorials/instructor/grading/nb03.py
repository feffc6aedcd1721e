"""Checks for 03_stitch_schemes."""
from __future__ import annotations

from functools import lru_cache

import astitch_sim as asim

from checks.core import Wrong, answered, direction, exercise, integer, names


@lru_cache(maxsize=None)
def _small_layernorm():
    g = asim.workload("layernorm", rows=2, cols=16)
    plan = asim.compile(g, "astitch", "V100", reduce_scheme="tree")     # the notebook's plan: the paper's trees
    res = asim.simulate(plan, asim.random_inputs(g), trace=True)
    return plan, res.trace


@exercise(wrong=[0, 1, 15, 31])
def q1_mean_writer(mean_writer):
    got = integer(mean_writer, "mean_writer")
    plan, trace = _small_layernorm()
    writers = {e.element[0]: e.thread for e in trace.filter(node="mean", kind="write").events}
    truth = writers[1]
    if got == truth:
        return
    if got == writers[0]:
        raise Wrong("that thread writes row 0's mean; row 1 is handled by the other threads of the block")
    if not 0 <= got < plan.kernels[0].block:
        raise Wrong(f"the block has threads 0..{plan.kernels[0].block - 1}")
    if got == 1:
        raise Wrong("1 is the row number; the question asks for a thread number")
    raise Wrong("that thread computes elements of row 1 but does not run the epilogue: which thread of the "
                "row does? (filter the trace for node='mean', kind='write')")


@exercise(wrong=[64, 96, 16, 2])
def q2_x_loads(x_loads):
    got = integer(x_loads, "x_loads")
    plan, trace = _small_layernorm()
    truth = len(trace.filter(node="x", space="global", kind="read"))
    if got == truth:
        return
    elements = 2 * 16
    if got == 2 * elements:
        raise Wrong("that counts a load in stage 0 and another in stage 1; does stage 1 read x from global "
                    "memory, or from somewhere closer? (filter the trace by space as well as node)")
    if got == 3 * elements:
        raise Wrong("not every stage loads x: later stages use values kept in registers instead")
    raise Wrong(f"{direction(got, truth)}: count trace events with node='x', space='global', kind='read'")


@exercise(wrong=[{"schemes": {"mean": "local", "xc": "local", "rstd": "regional", "out": "independent"}},
                 {"schemes": {"mean": "regional", "xc": "regional", "rstd": "regional", "out": "independent"}},
                 {"schemes": {"mean": "regional", "xc": "local", "rstd": "global", "out": "independent"}},
                 {"schemes": {"mean": "regional", "xc": "local", "rstd": "regional", "out": "global"}},
                 {"schemes": {"mean": "regional", "xc": "local"}}])
def q3_schemes(schemes):
    answered(schemes, "schemes")
    if not isinstance(schemes, dict):
        raise Wrong("schemes should be a dict {node name: scheme}")
    plan, _ = _small_layernorm()
    truth = plan.kernels[0].schemes
    wanted = ("mean", "xc", "rstd", "out")
    missing = [n for n in wanted if n not in schemes]
    if missing:
        raise Wrong(f"give a scheme for each of {list(wanted)}; missing: {missing}")
    valid = ("independent", "local", "regional", "global")
    for n in wanted:
        s = str(schemes[n]).strip().lower()
        if s not in valid:
            raise Wrong(f"{n}: {schemes[n]!r} is not a scheme; use one of {valid}")
    wrong = [n for n in wanted if str(schemes[n]).strip().lower() != truth[n]]
    if not wrong:
        return
    why = {
        "mean": "who writes mean, who reads it, and do they share a block?",
        "xc": "is xc ever written to shared or global memory in the trace?",
        "rstd": "are all of rstd's readers in the block that computed it?",
        "out": "does any op of the kernel read out?",
    }
    raise Wrong(f"{len(wrong)} of 4 wrong: " + "; ".join(f"{n} -- {why[n]}" for n in wrong))


@exercise(wrong=[["power.1"], ["reduce.1", "power.1", "reduce.2"], ["multiply.1"], "power.1"])
def q4_global_values(global_values):
    got = sorted(set(names(global_values, "global_values")))
    plan = asim.compile(asim.workload("paper_fig7"), "astitch", "V100", launch_search=False)   # the paper's launch
    schemes = plan.kernels[0].schemes
    truth = sorted(n for n, s in schemes.items() if s == "global")
    if got == truth:
        return
    unknown = [n for n in got if n not in plan.graph]
    if unknown:
        raise Wrong(f"{unknown[0]!r} is not a node of the Figure 7 graph")
    extra = [n for n in got if n not in truth]
    if extra:
        kinds = {schemes.get(n, "not computed") for n in extra}
        raise Wrong(f"{len(extra)} of your nodes are not Global (they are {', '.join(sorted(kinds))}); "
                    "look at the scheme tags in print(plan)")
    raise Wrong(f"{len(truth) - len(got)} Global value(s) missing: a split reduction's result that later "
                "stages read counts too")
