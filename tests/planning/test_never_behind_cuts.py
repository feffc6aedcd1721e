"""The best stitch inside a scope (issue 28, ``strategies/astitch_cuts.py``): never-behind prices the stitch scope cut
at a stage boundary beside the stitched kernels and XLA's, and keeps the fastest its byte rule admits.

``models/argmax_accuracy`` is the case issue 28 named: one scope, an argmax over 512 rows of 32000 logits, then the
mean of ``argmax == label``.  Stitched, the compare's result crosses blocks through a grid barrier (a Global value:
2 KiB more than XLA's kernels move), so never-behind refused it and took XLA's three kernels, 1.21x slower than
fusionstitching's two.  The cut before the sum, with the compare and convert moved down into the sum's stage, is
fusionstitching's plan, and AStitch now draws it.
"""
from __future__ import annotations

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.plan.kernel_end import EndRule
from astitch_sim.planning.strategies import astitch_cuts
from test_never_behind import TIME_SLACK, load_fixture

GPUS = ("V100", "A100", "H100")


@pytest.fixture(scope="module")
def argmax():
    return load_fixture("models", "argmax_accuracy")


@pytest.mark.parametrize("gpu", GPUS)
def test_argmax_accuracy_takes_the_scope_cut_before_the_sum(argmax, gpu):
    g, inputs = argmax
    plan = asim.compile(g, "astitch", gpu)
    assert [k.kind for k in plan.kernels] == ["generated", "generated"], str(plan)
    first, second = plan.kernels
    assert not first.global_barriers and not second.global_barriers
    # the epilogue moved down: the first kernel stores the argmax (a graph output) and nothing else
    assert first.outputs == ["jit_accuracy_.3/reduce.11#1"], str(plan)
    assert {"eq.3", "convert_element_type.1"} <= set(second.computed)
    assert any(e.rule == EndRule.STITCH_CUT and "never-behind" in e.why for e in first.ends), first.ends
    # the decision, with its prices, in the plan notes and on the first cut kernel
    note = next(n for n in plan.notes if n.startswith("never behind XLA: the scope cut before"))
    assert "cut before reduce_sum.7 (with the epilogue before it) into 2 kernel(s)" in note and "chosen" in note
    assert "over the stitched stitch.0:reduce_sum.7" in note and "more global bytes" in note and " us" in note
    assert any(n.startswith("never behind XLA: the scope cut before") for n in first.notes)
    assert note in str(plan)
    again = asim.Plan.from_json(plan.to_json())                      # the decision travels with the plan
    assert note in again.notes and again.kernels[0].ends == first.ends
    got = asim.simulate(plan, inputs)
    for a, b in zip(got.outputs, asim.reference(g, inputs), strict=True):
        np.testing.assert_array_equal(a, b)
    xla = asim.simulate(asim.compile(g, "xla", gpu), inputs).stats
    fs = asim.simulate(asim.compile(g, "fusionstitching", gpu), inputs).stats
    a = got.stats
    assert a.predicted_us < xla.predicted_us / 1.1                   # 1.21-1.35x faster than XLA's three kernels
    assert a.global_bytes <= xla.global_bytes
    assert a.predicted_us <= fs.predicted_us * TIME_SLACK


def test_the_cut_is_never_behinds_decision_only(argmax):
    """The raw stitch plan (``never_behind=False``) and the rules' launches (``launch_search=False``: never-behind
    without the priced candidates) are what they were: one stitched kernel, and XLA's three kernels."""
    g, _ = argmax
    raw = asim.compile(g, "astitch", "H100", never_behind=False)
    assert len(raw.kernels) == 1 and raw.kernels[0].global_barriers == 1
    rules = asim.compile(g, "astitch", "H100", launch_search=False)
    assert [k.name.split(":")[0].split(".")[0] for k in rules.kernels] == ["fusion"] * 3, str(rules)


def test_cut_search_is_bounded(monkeypatch, argmax):
    """Each scope prices at most ``2 * MAX_BOUNDARIES * (1 + GREEDY_ROUNDS)`` cut plans at the rules' launches,
    each once, and searches the launches of at most ``KEEP`` of them, which it hands never-behind."""
    g, _ = argmax
    built, kept = [], []
    real = astitch_cuts.scope_cuts

    def counting(graph, gpu, groups, kernels, build, byte_cap, movable=frozenset()):
        def counted(at, down=frozenset(), launches=False):
            built.append((at, down, launches))
            return build(at, down, launches)
        out = real(graph, gpu, groups, kernels, counted, byte_cap, movable)
        kept.append(len(out))
        return out
    monkeypatch.setattr("astitch_sim.planning.strategies.astitch.scope_cuts", counting)
    asim.compile(g, "astitch", "H100")
    quick = [b for b in built if not b[2]]
    assert 0 < len(quick) <= 2 * astitch_cuts.MAX_BOUNDARIES * (1 + astitch_cuts.GREEDY_ROUNDS)
    assert len(set(built)) == len(built)                             # no cut plan is built twice the same way
    assert len(built) - len(quick) == sum(kept) and all(n <= astitch_cuts.KEEP for n in kept)


def test_boundaries_are_mapping_changes_grid_barriers_first():
    """Where a cut may start a kernel: between stages of another kind or domain, those behind a grid barrier
    first, never where a kernel already starts."""
    from types import SimpleNamespace as NS
    from astitch_sim.plan.vocabulary import Barrier

    def group(kind, domain):
        return NS(kind=kind, domain=domain, adopt=None)
    groups = [group("rows", (8, 64)), group("rows", (8, 64)), group("rows", (1, 8)), group("flat", (8, 64)),
              group("rows", (8, 64))]
    stage = NS(barrier_after=Barrier.NONE, sync_after_combine=False)
    barrier = NS(barrier_after=Barrier.GRID, sync_after_combine=False)
    kernels = [NS(stages=[stage, barrier, stage, stage]), NS(stages=[stage])]
    # 1: the same mapping (no boundary); 2: a new domain, behind the grid barrier; 3: another kind; 4: the second
    # kernel already starts there
    assert astitch_cuts.boundaries(groups, kernels) == [2, 3]
    groups[2] = group("rows", (8, 64))
    assert astitch_cuts.boundaries(groups, kernels) == [3]
