"""Per-task values kept in registers after a shuffle reduction (astitch_sim/plan/task_registers.py).

The planner's decision at paper size (registers under the shuffle, shared memory under the tree, the
same rule for every strategy), what ``print(plan)`` shows, the register budget it is counted against,
and the validator refusing a register claim the reduction or the readers cannot honour.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import astitch_sim as asim
from astitch_sim import AStitchError
from astitch_sim.plan.task_registers import WHY, kept_per_task, same_task_threads
from astitch_sim.plan.reduce_scheme import scratch_areas

#: paper sizes, and the per-row values a later stage of the stitched kernel reads
PAPER = {
    "layernorm": ({"rows": 16384, "cols": 768}, {"mean", "rstd"}),
    "softmax_dien": ({"rows": 750000, "cols": 32}, {"row_max", "sum_exp"}),
    "rmsnorm": ({"rows": 4096, "cols": 4096}, {"rstd"}),
}


def _graph(case):
    shape, _ = PAPER[case]
    return asim.workload("softmax" if case == "softmax_dien" else case, **shape)


def _stitched(plan):
    (k,) = [k for k in plan.kernels if k.kind == "generated" and len(k.stages) > 1]
    return k


@pytest.fixture(scope="module", params=sorted(PAPER))
def case(request):
    g = _graph(request.param)
    return request.param, g, asim.compile(g, "astitch", "H100"), asim.compile(g, "astitch", "H100", reduce_scheme="tree")


def test_shuffle_keeps_the_row_values_in_registers_and_the_tree_in_shared_memory(case):
    name, g, shuffle, tree = case
    values = PAPER[name][1]
    k = _stitched(shuffle)
    for n in values:
        v = k.values[n]
        assert (v.space, v.scheme) == ("register", "local") and WHY in v.why, (n, v)
        assert kept_per_task(k, g, n) and k.stages[v.stage].reduce_scheme == "shuffle"
        assert all(same_task_threads(k.stages[v.stage].mapping, k.stages[j].mapping) for j in v.read_later)
    assert not any(v.space == "shared" for v in k.values.values())
    assert all(s.barrier_after == "none" for s in k.stages) and k.shared_bytes == k.scratch_bytes
    t = _stitched(tree)
    for n in values:
        v = t.values[n]
        assert (v.space, v.scheme) == ("shared", "regional") and not kept_per_task(t, g, n), (n, v)
        assert "block-locality" in v.why
        assert t.stages[v.stage].reduce_scheme == "tree" and t.stages[v.read_later[0] - 1].barrier_after == "block"
    assert tree.options["reduce_scheme"] == "tree" and "reduce_scheme" not in shuffle.options


def test_print_shows_the_decision(case):
    name, g, shuffle, tree = case
    text, paper = str(shuffle), str(tree)
    for n in PAPER[name][1]:
        line = next(ln for ln in text.splitlines() if ln.split()[:2] in (["epilogue", n], [n, "reduce"]))
        assert "[local]" in line and "in every lane's registers" in line, line
        tline = next(ln for ln in paper.splitlines() if ln.split()[:2] in (["epilogue", n], [n, "reduce"]))
        assert "[regional] -> shared memory" in tline, tline
    assert "block barrier" not in text.split("\n  note:")[0] and "block barrier" in paper


@pytest.mark.parametrize("strategy", ["fusionstitching", "inductor"])
def test_every_stitching_strategy_gets_the_same_rule(strategy):
    """The rule lives in the shared kernel builder: another strategy's multi-stage kernels keep their row
    values in registers under the shuffle, in shared memory under the tree, exactly as astitch's."""
    g = asim.workload("layernorm", rows=4096, cols=768)
    for scheme, space in (("shuffle", "register"), ("tree", "shared")):
        plan = asim.compile(g, strategy, "H100", reduce_scheme=scheme)
        crossing = [(k, n, v) for k in plan.generated if len(k.stages) > 1 for n, v in k.values.items()
                    if v.stage >= 0 and v.read_later and (plan.graph[n].op == "reduce" or n in k.stages[v.stage].epilogue)]
        assert crossing, f"{strategy} builds no multi-stage kernel with a per-row value here"
        for k, n, v in crossing:
            if k.stages[v.stage].mapping.kind == "rows" and k.stages[v.stage].mapping.splits == 1 and \
                    all(same_task_threads(k.stages[v.stage].mapping, k.stages[j].mapping) for j in v.read_later):
                assert v.space == space, (strategy, scheme, k.name, n, v.why)


def test_register_reuse_off_keeps_them_out_of_registers():
    g = _graph("layernorm")
    k = _stitched(asim.compile(g, "astitch", "H100", register_reuse=False))
    assert all(k.values[n].space != "register" for n in ("mean", "rstd"))


def test_one_register_per_task_trip_counts_in_the_budget():
    """Rows packed vertically (several rows per thread): a per-task value needs one register per trip of
    the task loop, and the plan's register estimate counts them."""
    from astitch_sim.plan.task_registers import registers_of
    from astitch_sim.planning.kernel_builder import assemble_kernel
    g = asim.workload("layernorm", rows=64, cols=32)
    base = _stitched(asim.compile(g, "astitch", "H100"))

    def build(rows_per_thread):       # one block of 8 rows x 8 lanes; the grid's 8 row slots loop over 64 rows
        stages = [asim.Stage(s.dominant, list(s.ops), asim.ThreadMapping(
            "rows", s.mapping.domain, s.mapping.groups, block=64, grid=64 // 8 // rows_per_thread, threads_per_row=8),
            list(s.epilogue)) for s in base.stages]
        return assemble_kernel(g, "k", stages, asim.gpu("H100"), {"out"}, stitch=True, plan_vectors=False)
    k, one = build(8), build(1)
    v = k.values["mean"]
    trips = k.stages[v.stage].mapping.task_iterations
    assert v.space == "register" and trips == 8 and one.stages[0].mapping.task_iterations == 1
    assert registers_of(g, "mean", k.stages[v.stage]) == trips
    assert k.registers_per_thread > one.registers_per_thread


def test_validator_refuses_a_register_claim_the_tree_or_the_readers_cannot_honour():
    g = asim.workload("layernorm", rows=64, cols=256)
    plan = asim.compile(g, "astitch", "H100")
    k = plan.kernels[0]
    assert k.values["mean"].space == "register"
    tree = plan.with_stage(0, 0, reduce_scheme="tree")        # its scratch reserved: only the register claim is wrong
    t, w, _ = scratch_areas(tree.kernels[0].stages, lambda s: s.scratch_slots)
    tree = tree.with_kernel(0, scratch_bytes=t + w, shared_bytes=k.scratch_offset + t + w)
    with pytest.raises(AStitchError, match="only a shuffle in one block leaves the total in every lane"):
        tree.validate()
    assert k.values["rstd"].space == "register" and k.values["rstd"].read_later == (2,)
    m = k.stages[2].mapping
    other = plan.with_stage(0, 2, mapping=replace(m, threads_per_row=m.threads_per_row // 2))
    with pytest.raises(AStitchError, match="gives the tasks to other threads"):
        other.validate()
