"""Checks for 05_grid_barriers."""
from __future__ import annotations

import numpy as np

import astitch_sim as asim

from checks.core import Derived, Wrong, answered, direction, exercise, integer, word

V100 = asim.gpu("V100")


def _softmax_kernel():
    return asim.compile(asim.workload("softmax", rows=64, cols=30000), "astitch", "V100", launch_search=False).kernels[0]


@exercise(wrong=[128, 80, 2560, 161])
def q1_max_grid(max_grid):
    got = integer(max_grid, "max_grid")
    k = _softmax_kernel()
    truth = V100.blocks_per_wave(k.block, k.shared_bytes, k.registers_per_thread)
    if got == truth:
        return
    if got == k.grid:
        raise Wrong("that is the grid the plan launches now; the question asks how far it could grow")
    if got == truth + 1:
        raise Wrong("one block too many: that grid needs a second wave, and the barrier deadlocks")
    if got == V100.sms:
        raise Wrong("that assumes one block per SM; check blocks_per_sm for this block shape")
    raise Wrong(f"{direction(got, truth)}: every block must be resident at once -- use blocks_per_wave with "
                "the kernel's block, shared_bytes and registers_per_thread")


def _wave(threads: int, shared: int, regs: int) -> int:
    try:
        return V100.blocks_per_wave(threads, shared, regs)
    except asim.AStitchError:      # not even one block fits
        return 0


def _relaxed(threads: int = 512, shared: int = 32768) -> int:
    base = _wave(threads, shared, 32)
    return max(r for r in range(32, 256) if _wave(threads, shared, r) == base)


@exercise(wrong=[32, 255, 64, 48, 41])
def q2_relaxed_registers(relaxed_registers):
    got = integer(relaxed_registers, "relaxed_registers")
    truth = _relaxed()
    if got == truth:
        return
    if got == 32:
        raise Wrong("32 is the assumption you start from; relaxing means finding how far above it you can go")
    if not 1 <= got <= V100.max_registers_per_thread:
        raise Wrong(f"a V100 thread has 1 to {V100.max_registers_per_thread} registers")
    if _wave(512, 32768, got) < _wave(512, 32768, 32):
        raise Wrong("with that many registers fewer blocks fit: the wave shrinks")
    raise Wrong("the wave still holds at that count, but more registers would too: find the largest")


def _wrong_plan_moved(env):
    p = env["plan"]
    return asim.Plan(p.graph, p.strategy, env["half_v100"], p.kernels)


@exercise(wrong=[Derived(_wrong_plan_moved, "V100 plan on the half GPU"),
                 Derived(lambda env: asim.compile(env["tfm"], "xla", env["half_v100"]), "xla plan"),
                 Derived(lambda env: env["plan"], "the V100 plan"),
                 Derived(lambda env: asim.compile(asim.workload("softmax", rows=8, cols=300), "astitch",
                                                  env["half_v100"]), "another shape")])
def q3_fixed_plan(fixed_plan):
    answered(fixed_plan, "fixed_plan")
    if not isinstance(fixed_plan, asim.Plan):
        raise Wrong(f"fixed_plan should be a Plan (from asim.compile), got {type(fixed_plan).__name__}")
    if fixed_plan.gpu.sms != 40:
        raise Wrong(f"fixed_plan is made for a GPU with {fixed_plan.gpu.sms} SMs; it must run on half_v100 (40)")
    g = fixed_plan.graph
    if g.name != "softmax" or [tuple(p.shape) for p in g.inputs] != [(64, 30000)]:
        raise Wrong("fixed_plan should compute the <64,30000> softmax of this notebook (tfm)")
    x = asim.random_inputs(g)
    try:
        res = asim.simulate(fixed_plan, x)
    except asim.AStitchError as e:      # the whole message: it names the rule broken and the way out
        raise Wrong(f"fixed_plan does not run on the 40-SM GPU; the SIMT model says: {e}") from None
    if len(fixed_plan.kernels) != 1:
        kept = any(n.startswith("never behind XLA: XLA's boundaries kept") for n in fixed_plan.notes)
        raise Wrong(f"fixed_plan runs, but as {len(fixed_plan.kernels)} kernels; keep it one stitched kernel"
                    + (" (its notes say never-behind kept XLA's kernels)" if kept else ""))
    ref = asim.reference(g, x)[0]
    if not np.allclose(res.outputs[0], ref, rtol=1e-5, atol=1e-7):
        raise Wrong("fixed_plan runs, but its output differs from the numpy reference")


@exercise(wrong=[{"race_node": "mean_sum"}, {"race_count": 4}, {"race_count": 128}, {"race_node": "rstd"},
                 {"race_count": 31}])
def q4_races(race_node, race_count):
    answered(race_node, "race_node")
    count = integer(race_count, "race_count")
    g = asim.workload("layernorm", rows=4, cols=32)
    plan = asim.compile(g, "astitch", "V100", reduce_scheme="tree").with_stage(0, 0, barrier_after="none")
    races = asim.simulate(plan, asim.random_inputs(g), trace=True).races
    node = word(race_node, "race_node", {n.name for n in g}, "the layernorm graph's node names (print(small))")
    truth_node = races[0].node
    if node != truth_node:
        if node == "mean_sum":
            raise Wrong("race_node: mean_sum is combined inside stage 0 (with the tree's own barriers); which "
                        "value does stage 1 read from shared memory?")
        raise Wrong("race_node: that value is not read across the missing barrier; look at races[0].node")
    if count == len(races):
        return
    tpr = plan.kernels[0].stages[0].mapping.threads_per_row
    if count == g["x"].shape[0]:
        raise Wrong("race_count: one race per row would be too few: every reading thread of a row that is not "
                    "the writer races")
    if count == g["x"].shape[0] * tpr:
        raise Wrong("race_count: the writing thread reads its own value in program order: that is no race")
    if count == tpr - 1:
        raise Wrong("race_count: that is one row; the block holds several rows")
    raise Wrong(f"race_count {direction(count, len(races))}: len(traced.races)")
