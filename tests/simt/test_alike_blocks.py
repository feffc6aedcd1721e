"""Work the SIMT model does once where every block would do the same: a split reduction's epilogue counted on its
first part (``memory.count_first_part``), and a value every block holds alike in shared memory gathered as one row
(``executor.rows_alike`` in ``gather_shared``).  Each shortcut is checked against the definition it replaces: the
simulation with it on and off (every counter, the timeline, every output byte), on plans that take it and on
random graphs."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.simt import executor, memory
from astitch_sim.simt.geometry import EpilogueGeometry, Geometry
from astitch_sim.simt.memory import Access
from random_graphs import cases
from test_simt_blocked_paths import on_and_off

#: plans with reductions split over blocks and epilogues that every part runs: batch norm's column sums
#: (atomic combine, mean and var kept in shared memory), a global sum over split rows, a softmax whose rows are
#: split over 4 blocks behind grid barriers (every part reads every partial), layer norm's backward, Figure 7
SPLIT = [("batchnorm_train", dict(rows=8192, cols=64), "astitch", {}),
         ("batchnorm_train", dict(rows=8192, cols=64), "xla", {}),
         ("global_norm", dict(rows=256, cols=1024), "astitch", {}),
         ("softmax", dict(rows=64, cols=30000), "astitch", {"launch_search": False}),
         ("layernorm_backward", dict(rows=4096, cols=768), "astitch", {}),
         ("paper_fig7", dict(n=1024, c=256), "astitch", {})]


def _plan(name, shape, strategy, opts):
    g = asim.workload(name, **shape)
    return asim.compile(g, strategy, "H100", **opts), workload_inputs(g, 0)


@pytest.mark.parametrize("name,shape,strategy,opts", SPLIT, ids=[f"{n}-{s}" for n, _, s, _ in SPLIT])
def test_an_epilogue_counted_on_its_first_part_counts_what_every_part_counts(name, shape, strategy, opts):
    """Counting an epilogue access on the first split part, times the parts, changes no counter, and is taken."""
    plan, x = _plan(name, shape, strategy, opts)
    answers = on_and_off(plan, x, memory, "count_first_part")
    if any(s.mapping.splits > 1 for k in plan.generated for s in k.stages if s.reduces):
        assert any(a is not None for a in answers), "no epilogue access was counted on its first part"


@pytest.mark.parametrize("name,shape,strategy,opts", SPLIT, ids=[f"{n}-{s}" for n, _, s, _ in SPLIT])
def test_a_value_every_block_holds_alike_is_gathered_as_one_row(name, shape, strategy, opts):
    """Gathering a shared value as one row where every block's copy has the same bits changes no counter and
    no output byte; batch norm's mean and var (made by every block after the combine) take it."""
    plan, x = _plan(name, shape, strategy, opts)
    answers = on_and_off(plan, x, executor, "rows_alike")
    if (name, strategy) == ("batchnorm_train", "astitch"):
        assert True in answers, "batch norm's mean was gathered per block"


def test_rows_alike_compares_bits():
    """Rows alike means the same bits: NaNs alike, +0 and -0 not, and one differing element is enough."""
    t = np.array([[1.0, np.nan, 0.0]] * 4, np.float32)
    assert executor.rows_alike(t)
    signed = t.copy()
    signed[2, 2] = -0.0
    assert not executor.rows_alike(signed)
    one_off = t.copy()
    one_off[3, 0] = np.nextafter(np.float32(1), np.float32(2))
    assert not executor.rows_alike(one_off)
    assert executor.rows_alike(np.array([[True, False]] * 3))


def test_blocks_that_hold_different_values_are_gathered_per_block():
    """Where one block's copy differs, every element reads its own block's: the gather equals ``view[block,
    slot]`` element by element, with the shortcut asked and refused (and, with the copies alike, the one row
    broadcast equals it too)."""
    plan, x = _plan("batchnorm_train", dict(rows=8192, cols=64), "astitch", {})
    calls = []
    real = executor.gather_shared

    def spy(view, geom, slot):
        calls.append((view.copy(), geom, slot))
        return real(view, geom, slot)
    with mock.patch.object(executor, "gather_shared", spy):
        asim.simulate(plan, x)
    assert calls
    one_row = 0
    for view, geom, slot in calls:
        want = view[geom.block, slot]
        alike = real(view, geom, slot)
        one_row += alike.size < want.size
        assert np.array_equal(np.broadcast_to(alike, want.shape), want)
        view[3] += 1                                   # block 3's copy now differs (bits and value)
        want = view[geom.block, slot]
        got = real(view, geom, slot)
        assert got.size == want.size and np.array_equal(np.broadcast_to(got, want.shape), want)
    assert one_row, "no value every block holds alike was gathered as one row"


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=st.one_of(cases("mixed"), cases("shared"), cases("long_rows")),
       strategy=st.sampled_from(["astitch", "xla", "fusionstitching"]))
def test_random_graphs_simulate_the_same_without_either_shortcut(case, strategy):
    """Random graphs (reductions over every dim, producers shared across reductions, long rows split over
    blocks): the same counters, timeline and outputs with the shortcuts off."""
    try:
        plan = asim.compile(case.graph, strategy, "H100")
    except asim.AStitchError:
        return
    on_and_off(plan, case.inputs, memory, "count_first_part")
    on_and_off(plan, case.inputs, executor, "rows_alike")


def test_only_an_epilogue_whose_parts_take_blocks_of_their_own_is_counted_on_one():
    """The first part stands for every part only where no block (so no warp) holds two parts: the tasks' head
    blocks agree modulo the split count.  An access that varies over the parts (the store of the first part
    only) is counted in full."""
    plan, _ = _plan("batchnorm_train", dict(rows=8192, cols=64), "astitch", {})
    stage = plan.generated[0].stages[0]
    epi = EpilogueGeometry(Geometry(stage.mapping), stage.task_shape)
    assert epi.splits > 1 and epi.first_part().shape == (1,) + tuple(stage.task_shape)
    for acc in (Access("shared", "write", "mean", 4, 256, [np.broadcast_to(epi.slot, epi.shape)]),
                Access("global", "read", "mean_sum", 4, 512, [epi.idx[0] * epi.splits + 3], dedup=True),
                Access("global", "atomic", "mean_sum", 4, 0, list(epi.idx), identity=True)):
        assert memory.count_first_part(epi, acc) == memory.count_dense(epi, acc)
    assert memory.count_first_part(epi, Access("global", "write", "mean", 4, 0, list(epi.idx),
                                               epi.part == 0, identity=True)) is None
    shifted = EpilogueGeometry(Geometry(stage.mapping), stage.task_shape)
    shifted.block = shifted.block + np.arange(shifted.block.shape[-1]) % 2   # odd tasks a block later
    assert shifted.first_part() is None
