"""Checks for 02_where_xla_stops."""
from __future__ import annotations

import astitch_sim as asim
from astitch_sim.planning.strategies.xla_rules import DEFAULT_RULES, RULES

from checks.core import Derived, Wrong, answered, close, direction, exercise, integer, names, number


#: the rules the xla strategy follows by default (which ops today's XLA calls expensive on the GPU)
XLA_RULES = RULES[DEFAULT_RULES]


def _fig7_plans():
    g = asim.workload("paper_fig7")
    return g, {s: asim.compile(g, s, "V100") for s in ("xla", "tvm")}


def _ends(plan) -> list:
    return [k.computed[-1] if k.kind == "generated" else k.library_op for k in plan.kernels]


#: why an XLA kernel ends at a node, as a hint that names the kind of node, not the node
ENDS = {
    "reduce": "XLA also ends a kernel at a reduce whose result is used by a later kernel",
    "expensive": "XLA also ends a kernel at an expensive op whose result is broadcast",
    "output": "the last kernel ends at the graph's output",
}


def _end_kind(g, name) -> str:
    if name in {o.name for o in g.outputs}:
        return "output"
    return "reduce" if g[name].op == "reduce" else "expensive"


def _cheap_broadcast_graph():
    g = asim.Graph("scale_by_add")
    x, v = g.parameter("x", (64, 128)), g.parameter("v", (64,))
    g.set_outputs(g.multiply(x, g.broadcast(g.add(v, 1.0), (64, 128), dimensions=(0,))))
    return g


def _reduce_graph():
    g = asim.Graph("normalize_rows")
    x = g.parameter("x", (64, 128))
    s = g.reduce(x, dims=(1,), reducer="sum")
    g.set_outputs(g.divide(x, g.broadcast(s, (64, 128), dimensions=(0,))))
    return g


def _no_broadcast_graph():
    g = asim.Graph("just_exp")
    g.set_outputs(g.exponential(g.parameter("x", (64, 128))))
    return g


@exercise(wrong=[Derived(lambda env: _cheap_broadcast_graph(), "cheap op broadcast"),
                 Derived(lambda env: _reduce_graph(), "a reduce"),
                 Derived(lambda env: _no_broadcast_graph(), "no broadcast"),
                 Derived(lambda env: asim.compile(env["my_graph"], "xla", "V100"), "a plan, not a graph")])
def q1_my_graph(my_graph):
    answered(my_graph, "my_graph")
    if isinstance(my_graph, asim.Plan):
        raise Wrong("my_graph should be the Graph itself, not a compiled plan")
    if not isinstance(my_graph, asim.Graph):
        raise Wrong(f"my_graph should be an asim.Graph built with the builder API, got {type(my_graph).__name__}")
    if not my_graph.outputs:
        raise Wrong("my_graph has no outputs yet: call my_graph.set_outputs(...)")
    try:
        xla = asim.compile(my_graph, "xla", "V100")
        tvm = asim.compile(my_graph, "tvm", "V100")
    except asim.AStitchError as e:
        raise Wrong(f"my_graph does not compile: {e}") from None
    if any(n.op == "reduce" for n in my_graph):
        raise Wrong("my_graph has a reduce: that is pattern 1. Build pattern 2 with no reduce at all")
    if any(n.op == "dot" for n in my_graph):
        raise Wrong("my_graph has a matrix product, which is a kernel of its own anyway: leave it out")
    if len(xla.kernels) < 2:
        expensive_bcast = any(n.opdef.cost == "expensive" and any(u.op == "broadcast" for u in n.users)
                              for n in my_graph)
        if not expensive_bcast:
            raise Wrong("XLA fuses my_graph into one kernel: pattern 2 needs an *expensive* op whose result "
                        "is broadcast to a bigger shape before it is used")
        if not any(XLA_RULES.is_expensive(n) for n in my_graph):
            raise Wrong("XLA fuses my_graph into one kernel: today's XLA calls f32 divide, rsqrt, exponential "
                        "and sqrt cheap on the GPU and recomputes them; pick another expensive op")
        raise Wrong("XLA fuses my_graph into one kernel: make the broadcast bigger than the expensive op's result")
    if not any("expensive and broadcast" in note for k in xla.kernels for note in k.notes):
        raise Wrong("XLA needs several kernels, but not because of an expensive op followed by a broadcast: "
                    "read the notes in print(asim.compile(my_graph, 'xla', 'V100'))")
    if len(tvm.kernels) >= len(xla.kernels):
        raise Wrong("TVM should need fewer kernels than XLA for pattern 2 (it recomputes instead); check "
                    "that the expensive op is used only through the broadcast")


@exercise(wrong=[["reduce.1", "reduce.2", "multiply.1"], ["reduce.1", "power.1", "reduce.2"],
                 ["reduce.1", "divide.1", "power.1", "reduce.2", "multiply.1"],
                 ["power.1", "reduce.1", "reduce.2", "multiply.1"],
                 "reduce.1, power.1, reduce.2, multiply.1"])
def q2_xla_ends(xla_ends):
    got = names(xla_ends, "xla_ends")
    _, plans = _fig7_plans()
    truth = _ends(plans["xla"])
    if got == truth:
        return
    g = plans["xla"].graph
    unknown = [n for n in got if n not in g]
    if unknown:
        raise Wrong(f"{unknown[0]!r} is not a node of the Figure 7 graph; use the names print(fig7) shows")
    if sorted(got) == sorted(truth):
        raise Wrong("the right nodes, in the wrong order: list them in launch order (kernel 0 first)")
    extra = [n for n in got if n not in truth]
    if extra:                     # name the student's own wrong entry: that is feedback, not the answer
        n = extra[0]
        why = ("its result stays in registers inside the kernel that computes it"
               if g[n].opdef.cost == "light" or g[n].op == "broadcast" else
               "no kernel writes it to global memory")
        raise Wrong(f"{n!r} ends no XLA kernel: {why}; compare with the 'writes' line of each kernel in "
                    "print(plans['xla'])")
    missing = [n for n in truth if n not in got]
    if missing:                   # say which *kind* of kernel end is missing, from why that kernel ends
        kinds = {_end_kind(g, n) for n in missing}
        raise Wrong("too few kernels: " + "; ".join(ENDS[k] for k in sorted(kinds)))
    raise Wrong("the same node twice: list each kernel once, in launch order")


def _power_evaluations() -> int:
    _, plans = _fig7_plans()
    return sum(st.recompute.get("power.1", 1) for k in plans["tvm"].kernels for st in k.stages
               if "power.1" in st.ops)


@exercise(wrong=[256, 128, 1, 2])
def q3_power_evaluations(power_evaluations):
    got = integer(power_evaluations, "power_evaluations")
    truth = _power_evaluations()
    if got == truth:
        return
    _, plans = _fig7_plans()
    per_kernel = {st.recompute.get("power.1", 1) for k in plans["tvm"].kernels for st in k.stages
                  if "power.1" in st.ops}
    if got in per_kernel:
        raise Wrong("that is the factor of one kernel; power.1 is recomputed in more than one kernel of the plan")
    if got == len(plans["tvm"].kernels) - 1 or got == 1:
        raise Wrong("count evaluations of one value, not kernels: each recomputing kernel evaluates it once per "
                    "element of its broadcast")
    if got == 128:
        raise Wrong("128 is N, the length of power.1 itself; the broadcast goes to [C, N]")
    raise Wrong(f"{direction(got, truth)}: add up stage.recompute['power.1'] over the kernels that compute it")


def _other_ratio(results) -> float:
    """TVM's flops over AStitch's instead of XLA's; 10% off when the two happen to do the same flops."""
    r = results["tvm"].stats.flops / results["astitch"].stats.flops
    truth = results["tvm"].stats.flops / results["xla"].stats.flops
    return r if abs(r / truth - 1) > 0.02 else r * 1.1


@exercise(wrong=[Derived(lambda env: env["results"]["xla"].stats.flops / env["results"]["tvm"].stats.flops,
                         "inverted"),
                 Derived(lambda env: env["results"]["tvm"].stats.flops - env["results"]["xla"].stats.flops,
                         "difference"),
                 Derived(lambda env: _other_ratio(env["results"]), "other ratio"),
                 1.0])
def q4_flop_ratio(flop_ratio):
    got = number(flop_ratio, "flop_ratio")
    g, plans = _fig7_plans()
    inputs = asim.workloads.workload_inputs(g)
    tvm = asim.simulate(plans["tvm"], inputs).stats.flops
    xla = asim.simulate(plans["xla"], inputs).stats.flops
    truth = tvm / xla
    if close(got, truth, 0.01):
        return
    if close(got, xla / tvm, 0.01):
        raise Wrong("inverted: TVM's flops over XLA's (TVM does more work, so the ratio is above 1)")
    if close(got, tvm - xla, 0.01):
        raise Wrong("that is a difference of flops; the question asks for a ratio")
    if close(got, 1.0, 0.01):
        raise Wrong("a ratio of 1 would mean TVM recomputes nothing: compare the flops columns of the table")
    raise Wrong(f"ratio {direction(got, truth)}: results['tvm'].stats.flops over results['xla'].stats.flops")
