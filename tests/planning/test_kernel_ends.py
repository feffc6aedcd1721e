"""Why a kernel ends (astitch_sim/plan/kernel_end.py): every strategy records it, and it is true.

For each strategy, a graph where one of its boundary rules fires: the plan's ``Kernel.ends`` names that op
and that rule (with the strategy's citation), and switching the rule off (a what-if option, a policy or
config change) changes or removes the reason.  Then the field as part of the Plan: JSON round trip,
validation, ``print(plan)``."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

import astitch_sim as asim
from astitch_sim import AStitchError
from astitch_sim.plan.kernel_end import EndRule, KernelEnd
from astitch_sim.planning.strategies import inductor_rules
from astitch_sim.planning.strategies.fusion import partition_plan
from astitch_sim.planning.strategies.registry import REGISTRY
from astitch_sim.frontends.workloads import WORKLOADS
from astitch_sim.planning.strategies.register_only import TVM, UNFUSED
from test_fusion_rules import reduce_then_broadcast     # the graph the fusion-rule tests build


def ends(plan, rule=None) -> list:
    """Every (kernel name, KernelEnd) of ``plan`` (with rule ``rule``)."""
    return [(k.name, e) for k in plan.kernels for e in k.ends if rule is None or e.rule == rule]


def ends_at(plan, node, rule=None) -> list:
    return [e for _, e in ends(plan, rule) if e.node == node]


def compiled(g, strategy, **options):
    return asim.compile(g, strategy, "V100", **options).validate()


def fig7():
    return asim.workload("paper_fig7")


# -- every strategy, every kernel -------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", list(REGISTRY))
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_every_kernel_of_every_strategy_says_why_it_ends(strategy, workload):
    plan = compiled(asim.workload(workload), strategy)
    for k in plan.kernels:
        assert k.ends, f"{strategy} {k.name} records no reason it ends"
        assert all(type(e.rule) is EndRule and e.why and e.node in k.computed for e in k.ends), k.ends


# -- unfused -----------------------------------------------------------------------------------------------------

def test_unfused_ends_every_kernel_after_its_one_op_and_fusing_removes_the_reason():
    g = asim.Graph("chain")
    x = g.parameter("x", (8, 16))
    a = g.add(x, 1.0, name="a")
    g.set_outputs(g.exp(g.multiply(a, a, name="m"), name="y"))
    plan = compiled(g, "unfused")
    assert [e.node for _, e in ends(plan, EndRule.ONE_OP_PER_KERNEL)] == ["a", "m", "y"]
    (e,) = ends_at(plan, "a")
    assert "a (add) does work" in e.why and "paper, Section 2" in e.source
    # the rule switched off (a policy that does not make every op a root): no kernel ends at a or m
    fused = partition_plan(g, asim.gpu("V100"), replace(UNFUSED, kernel_per_op=False))
    assert len(fused.kernels) == 1 and not ends(fused, EndRule.ONE_OP_PER_KERNEL)
    assert [(e.node, e.rule) for _, e in ends(fused)] == [("y", EndRule.GRAPH_OUTPUT)]


# -- xla ---------------------------------------------------------------------------------------------------------

def test_xla_ends_a_kernel_at_an_expensive_op_a_broadcast_reuses_and_says_how_often():
    """f32 exp is expensive under the paper-era rules (tf-2.6), cheap under openxla-2024: the reason follows."""
    g = reduce_then_broadcast(lambda g, s: g.exp(s, name="e"))
    old = compiled(g, "xla", fusion_rules="tf-2.6")
    (e,) = ends_at(old, "e", EndRule.EXPENSIVE_REUSED)
    assert "recomputed 16 times per value" in e.why and "b reuses its elements" in e.why and "tf-2.6" in e.why
    assert "ShouldFuseInexpensiveChecks" in e.source
    new = compiled(g, "xla")
    assert not ends_at(new, "e") and not ends(new, EndRule.EXPENSIVE_REUSED)


def test_xla_ends_a_kernel_at_a_reduce_and_at_an_expensive_shared_producer():
    g = asim.Graph("shared")
    x = g.parameter("x", (8, 16))
    p = g.exp(x, name="p")
    g.set_outputs(g.reduce(p, (1,), "sum", name="rows"), g.reduce(p, (0,), "sum", name="cols"))
    old = compiled(g, "xla", fusion_rules="tf-2.6")
    (e,) = ends_at(old, "p", EndRule.EXPENSIVE_SHARED)
    assert "2 kernels read it" in e.why and "FusionWouldDuplicate" in e.source
    assert not ends_at(compiled(g, "xla"), "p")            # cheap exp: recomputed in both, no kernel ends at it
    (r,) = ends_at(old, "rows", EndRule.REDUCE_RESULT)
    assert "IsInputFusibleReduction" in r.source


# -- tvm ---------------------------------------------------------------------------------------------------------

def test_tvm_recomputes_an_expensive_broadcast_producer_where_xla_would_end_the_kernel():
    g = reduce_then_broadcast(lambda g, s: g.log(g.add(g.multiply(s, s), 1.0), name="e"))
    plan = compiled(g, "tvm")
    (r,) = ends_at(plan, "s", EndRule.REDUCE_RESULT)
    assert "TVM ends the kernel" in r.why and "kCommReduce" in r.source
    assert not ends_at(plan, "e")
    # the pattern-2 rule switched on for TVM's policy: the kernel now ends at e, and says why
    ending = partition_plan(g, asim.gpu("V100"), replace(TVM, expensive_broadcast_ends_kernel=True))
    (e,) = ends_at(ending, "e", EndRule.EXPENSIVE_REUSED)
    assert "recomputed 16 times per value" in e.why


# -- inductor ----------------------------------------------------------------------------------------------------

def test_inductor_ends_a_kernel_where_can_fuse_refuses_the_next_node(monkeypatch):
    plan = compiled(fig7(), "inductor")
    (e,) = ends_at(plan, "reduce.2", EndRule.NOT_FUSED)
    assert "multiply.1" in e.why and "nodes numel incompatibility" in e.why and "can_fuse" in e.source
    monkeypatch.setitem(inductor_rules.CONFIG, "max_fusion_size", 1)
    capped = compiled(fig7(), "inductor")
    (e,) = ends_at(capped, "reduce.2", EndRule.NOT_FUSED)
    assert "exceeds max_fusion_size" in e.why and "numel incompatibility" not in e.why


def test_inductor_realizes_a_value_read_by_more_than_four_consumers(monkeypatch):
    g = asim.Graph("fanout")
    x = g.parameter("x", (8, 16))
    p = g.exp(g.multiply(x, x), name="p")
    g.set_outputs(*[g.reduce(g.add(p, float(i), name=f"a{i}"), (i % 2,), "sum", name=f"r{i}") for i in range(5)])
    plan = compiled(g, "inductor")
    (e,) = ends_at(plan, "p", EndRule.REALIZED)
    assert "read by 5 consumers" in e.why and "realize_reads_threshold" in e.source
    monkeypatch.setitem(inductor_rules.CONFIG, "realize_reads_threshold", 8)
    assert not ends_at(compiled(g, "inductor"), "p", EndRule.REALIZED)


# -- fusionstitching ---------------------------------------------------------------------------------------------

def test_fusionstitching_ends_where_stitching_would_need_the_global_scheme():
    plan = compiled(fig7(), "fusionstitching")
    (e,) = ends_at(plan, "power.1", EndRule.SEARCH_ILLEGAL)
    assert "Global scheme + grid barrier" in e.why and "fusion.2:reduce.2" in e.why
    # the exploration window shut (max_merge=1): nothing is stitched, every cut inside the run is the limit's
    narrow = compiled(fig7(), "fusionstitching", max_merge=1)
    assert not ends(narrow, EndRule.SEARCH_ILLEGAL)
    limits = ends(narrow, EndRule.SEARCH_LIMIT)
    assert [e.node for _, e in limits] == ["reduce.1", "power.1", "reduce.2"]
    assert all("exceeds max_merge=1" in e.why for _, e in limits)


# -- astitch -----------------------------------------------------------------------------------------------------

def test_astitch_ends_at_the_scope_and_cuts_only_without_global_stitching():
    plan = compiled(fig7(), "astitch")
    assert [(e.node, e.rule) for _, e in ends(plan)] == [("multiply.1", EndRule.SCOPE_END)]
    cut = compiled(fig7(), "astitch", global_stitching=False)
    cuts = ends(cut, EndRule.GLOBAL_CUT)
    assert [e.node for _, e in cuts] == ["reduce.1", "reduce.2"]
    assert all("global_stitching=False" in e.why for _, e in cuts)


def test_astitch_cut_by_a_grid_over_one_wave_says_vertical_packing_is_off():
    g = asim.workload("paper_fig7", n=4096, c=4096)
    cut = compiled(g, "astitch", vertical_packing=False)
    (e,) = ends_at(cut, "reduce.1", EndRule.GLOBAL_CUT)
    assert "vertical packing off: a grid barrier over 4096 blocks" in e.why
    packed = compiled(g, "astitch", never_behind=False)          # vertical packing on: one kernel, no cut
    assert len(packed.kernels) == 1 and not ends(packed, EndRule.GLOBAL_CUT)


def test_astitch_scope_ends_at_a_library_op():
    g = asim.Graph("mlp")
    x = g.parameter("x", (64, 64))
    w = g.parameter("w", (64, 64))
    h = g.exp(x, name="h")
    g.set_outputs(g.tanh(g.dot(h, w, name="mm"), name="y"))
    plan = compiled(g, "astitch")
    (e,) = ends_at(plan, "h", EndRule.SCOPE_END)
    assert "library kernel of mm" in e.why
    (lib,) = ends_at(plan, "mm")
    assert lib.rule == EndRule.LIBRARY_OP


def test_astitch_never_behind_says_xla_kernel_was_kept_and_switching_it_off_removes_it():
    g = asim.workload("row_reduce", rows=4, cols=500)        # XLA's block of 128 threads beats the paper's 1024
    # (test_never_behind.few_rows_row_sum); the default launch search prices XLA's launch too
    plan = asim.compile(g, "astitch", "H100", launch_search=False).validate()
    (name, e), *_ = ends(plan)
    assert e.rule == EndRule.NEVER_BEHIND and e.node == "row_sum" and "more time" in e.why
    assert [x.rule for x in plan.kernels[0].ends][1:] == [EndRule.GRAPH_OUTPUT, EndRule.REDUCE_RESULT]
    raw = asim.compile(g, "astitch", "H100", never_behind=False, launch_search=False)
    assert not ends(raw, EndRule.NEVER_BEHIND) and [e.rule for _, e in ends(raw)] == [EndRule.SCOPE_END]


# -- part of the Plan --------------------------------------------------------------------------------------------

def test_ends_round_trip_through_json_and_print():
    plan = compiled(fig7(), "xla", fusion_rules="tf-2.6")
    back = asim.Plan.from_json(plan.to_json())
    assert back.to_json() == plan.to_json()
    assert [k.ends for k in back.kernels] == [k.ends for k in plan.kernels]
    assert all(type(e) is KernelEnd and e.sealed for k in back.kernels for e in k.ends)
    text = str(plan)
    assert "  ends at power.1: expensive_reused -- power.1 (power) is expensive (tf-2.6 rules)" in text
    assert "ends at reduce.2: reduce_result" in text


def test_an_end_naming_an_op_the_kernel_does_not_compute_fails_validation():
    plan = compiled(fig7(), "xla")
    bad = plan.with_kernel(0, ends=[KernelEnd("multiply.1", EndRule.GRAPH_OUTPUT, "not here")])
    with pytest.raises(AStitchError, match="ends names 'multiply.1'.*does not compute"):
        bad.validate()


@pytest.mark.parametrize("edit, match", [
    (lambda e: e.update(rule="maybe"), "unknown kernel-end rule 'maybe'.*use one of one_op_per_kernel"),
    (lambda e: e.pop("node"), "a kernel end must be a dict with 'node' and 'rule'"),
    (lambda e: e.update(colour="red"), "a kernel end has no field colour"),
])
def test_malformed_ends_in_json_are_refused_by_name(edit, match):
    d = json.loads(compiled(fig7(), "xla").to_json())
    edit(d["kernels"][0]["ends"][0])
    with pytest.raises(AStitchError, match=match):
        asim.Plan.from_dict(d)


def test_a_plan_written_before_ends_were_recorded_still_reads():
    d = json.loads(compiled(fig7(), "xla").to_json())
    for k in d["kernels"]:
        del k["ends"]
    back = asim.Plan.from_dict(d).validate()
    assert all(k.ends == [] for k in back.kernels)
