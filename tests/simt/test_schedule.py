"""Tests for astitch_sim.simt.schedule: waves, dispatch, grid-barrier rules, the timeline.

Kernel counters are made by hand (no executor needed): the scheduler only needs the
launch shape and the per-block time the cost model derives from the counters.
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import astitch_sim as asim
from astitch_sim.errors import AStitchError
from astitch_sim.hardware.gpus import GPUS
from astitch_sim.simt import cost
from astitch_sim.simt.schedule import (BARRIER, align_stages, build_timeline, check_grid_barrier, dispatch,
                                       dispatch_uniform)
from astitch_sim.simt.stats import KernelStats, StageStats

V100 = GPUS["V100"]


def kstats(grid, block, bytes_per_block=4096, stages=1, grid_barriers=(), shared=0, regs=32, name="k"):
    """A kernel whose blocks each move ``bytes_per_block`` bytes per stage (so equal work per block)."""
    ks = KernelStats(name, "generated", grid, block, shared, regs)
    ks.stages = [StageStats(s, f"d{s}", global_bytes_read=bytes_per_block * grid,
                            grid_barriers=grid_barriers[s] if s < len(grid_barriers) else 0)
                 for s in range(stages)]
    return ks


def fake_plan(stats, gpu=V100):
    """The scheduler reads only ``plan.gpu`` and ``plan.kernels`` (None: no plan structure)."""
    return SimpleNamespace(gpu=gpu, kernels=[None] * len(stats))


# ---------------------------------------------------------------------------
# waves, hand-computed
# ---------------------------------------------------------------------------

def test_160_blocks_of_1024_threads_are_one_wave_on_v100():
    # 1024 threads -> 2 blocks/SM (2048 threads/SM) x 80 SMs = 160 per wave.
    ks = kstats(160, 1024)
    tl = build_timeline(fake_plan([ks]), [ks])
    assert (ks.blocks_per_wave, ks.waves) == (160, 1)
    k = tl.kernels[0]
    assert k.duration_us == pytest.approx(k.block_us)
    assert tl.utilisation(include_gaps=False) == pytest.approx(1.0)


def test_161_blocks_need_a_second_wave_that_costs_a_whole_block_time():
    one, two = kstats(160, 1024), kstats(161, 1024)
    t1 = build_timeline(fake_plan([one]), [one]).kernels[0]
    t2 = build_timeline(fake_plan([two]), [two]).kernels[0]
    assert (two.blocks_per_wave, two.waves) == (160, 2)
    assert t2.duration_us == pytest.approx(2 * t1.duration_us)          # the tail effect
    tl = build_timeline(fake_plan([two]), [two])
    last = [e for e in tl.entries if e.block == 160]
    assert len(last) == 1 and last[0].sm == 0 and last[0].start_us == pytest.approx(t2.start_us + t1.duration_us)
    assert tl.utilisation(include_gaps=False) == pytest.approx(161 / 320)


def test_xla_dien_row_reduce_750000_tiny_blocks_waves_and_truncation():
    # 32-thread blocks: capped by 32 blocks/SM -> 2560 per wave -> ceil(750000/2560) = 293 waves.
    # Only the first and last waves are stored (that is what keeps it fast: python -m benchmarks.unit_speed times it)
    ks = kstats(750000, 32, bytes_per_block=128)
    tl = build_timeline(fake_plan([ks]), [ks])
    assert ks.blocks_per_wave == 2560 and ks.waves == ceil(750000 / 2560) == 293
    k = tl.kernels[0]
    assert k.truncated and tl.truncated
    kept = tl.entries_for_kernel(0)
    assert len(kept) <= 3 * 2560 and {e.block for e in kept} >= {0, 2559, 749999}
    assert k.duration_us == pytest.approx(293 * k.block_us)
    assert k.busy_us == pytest.approx(750000 * k.block_us)
    assert "middle waves not stored" in tl.render_ascii()


def test_waves_follow_shared_memory_and_registers():
    # 48 KiB shared per block: 96 KiB/SM -> 2 blocks/SM of 256 threads -> 160 per wave.
    ks = kstats(320, 256, shared=48 * 1024)
    build_timeline(fake_plan([ks]), [ks])
    assert (ks.blocks_per_wave, ks.waves) == (160, 2)
    # 128 registers x 256 threads = 32 Ki registers/block -> 2 blocks/SM.
    ks = kstats(161, 256, regs=128)
    build_timeline(fake_plan([ks]), [ks])
    assert (ks.blocks_per_wave, ks.waves) == (160, 2)


# ---------------------------------------------------------------------------
# dispatch: the event queue and its closed form
# ---------------------------------------------------------------------------

def _max_concurrent(sm, start, end, sms):
    worst = 0
    for s in range(sms):
        ev = sorted([(a, 1) for a in start[sm == s]] + [(b, -1) for b in end[sm == s]], key=lambda x: (x[0], x[1]))
        now = 0
        for _, d in ev:
            now += d
            worst = max(worst, now)
    return worst


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=60), st.integers(1, 5), st.integers(1, 4))
def test_dispatch_invariants(durations, sms, per_sm):
    sm, start, end = dispatch(durations, sms, per_sm, t0=1.0)
    assert len(sm) == len(durations) and (start >= 1.0).all()                      # every block, once
    assert np.allclose(end - start, durations)
    assert _max_concurrent(sm, start, end, sms) <= per_sm                            # residency limit
    # work-conserving: a block starts at t0 or the moment some earlier block ends
    for b in range(len(durations)):
        assert start[b] == 1.0 or np.isclose(end[:b], start[b]).any()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 500), st.integers(1, 6), st.integers(1, 4), st.floats(0.5, 3.0))
def test_uniform_closed_form_equals_event_simulation(grid, sms, per_sm, d):
    ev = dispatch(np.full(grid, d), sms, per_sm, t0=2.0)
    cf = dispatch_uniform(np.arange(grid), d, sms, per_sm, t0=2.0)
    for a, b in zip(ev, cf, strict=True):
        assert np.allclose(a, b)


def test_custom_block_durations_go_through_the_event_queue():
    ks = kstats(200, 1024)
    slow = np.ones(200)
    slow[0] = 5.0
    tl = build_timeline(fake_plan([ks]), [ks], block_us={0: slow})
    e = {x.block: x for x in tl.entries}
    assert e[0].end_us - e[0].start_us == pytest.approx(5.0)
    # blocks 160.. take the slots that free first (not SM 0's slot held by the slow block)
    assert e[160].start_us == pytest.approx(tl.kernels[0].start_us + 1.0) and e[160].sm == 1
    assert tl.kernels[0].end_us == pytest.approx(tl.kernels[0].start_us + 5.0)


# ---------------------------------------------------------------------------
# grid barriers
# ---------------------------------------------------------------------------

def test_grid_barrier_aligns_stages_on_the_slowest_block():
    work = np.array([[1.0, 1.0], [3.0, 1.0], [2.0, 1.0]])
    spans, end = align_stages(work, [1, 0], barrier_us=2.5, t0=10.0)
    release = 10.0 + 3.0 + 2.5
    for b in range(3):
        stage0, wait, stage1 = spans[b]
        assert stage0 == (0, 10.0, 10.0 + work[b, 0])
        assert wait == (BARRIER, 10.0 + work[b, 0], release)
        assert stage1[0] == 1 and stage1[1] == pytest.approx(release)
    assert np.allclose(end, release + 1.0)


def test_grid_barrier_kernel_in_timeline_is_aligned_and_costed():
    ks = kstats(32, 1024, stages=3, grid_barriers=(1, 1, 0))
    tl = build_timeline(fake_plan([ks]), [ks], block_us={0: np.linspace(1, 2, 32)})
    starts_stage1 = {round(a, 9) for e in tl.entries for s, a, _ in e.stages if s == 1}
    assert len(starts_stage1) == 1
    assert tl.kernels[0].grid_barriers == 2
    assert "|" in tl.render_ascii(width=60, max_sms=4)


def test_grid_barrier_beyond_one_wave_deadlocks_with_explanation():
    ks = kstats(161, 1024, stages=2, grid_barriers=(1, 0))
    with pytest.raises(AStitchError) as e:
        build_timeline(fake_plan([ks]), [ks])
    msg = str(e.value)
    for words in ("deadlock", "161 blocks", "only 160", "grid <= blocks per wave", "vertical packing"):
        assert words in msg
    with pytest.raises(AStitchError, match="deadlock"):
        cost.predict(fake_plan([ks]), [ks])


def test_deadlock_from_an_edited_astitch_plan():
    # The astitch fig7 plan stitches with 2 grid barriers in 32 blocks; ask for 161 blocks instead.
    plan = asim.compile(asim.workload("paper_fig7"), "astitch", "V100", launch_search=False)   # the paper's launch
    k = replace(plan.kernels[0], grid=161)
    assert k.global_barriers > 0
    ks = KernelStats(k.name, k.kind, k.grid, k.block, k.shared_bytes, k.registers_per_thread)
    ks.stages = [StageStats(i, s.dominant) for i, s in enumerate(k.stages)]   # no counters: plan decides
    with pytest.raises(AStitchError, match="vertical packing -- launch at most 160 blocks"):
        check_grid_barrier(plan.gpu, k, ks)
    k = replace(k, grid=160)
    ks.grid = 160
    check_grid_barrier(plan.gpu, k, ks)      # one full wave: every block resident, legal


# ---------------------------------------------------------------------------
# the timeline as a whole
# ---------------------------------------------------------------------------

def test_kernels_back_to_back_with_launch_gaps_and_match_the_cost_model():
    stats = [kstats(128, 256, name="a"), kstats(7500, 256, name="b"), kstats(32, 1024, stages=2,
                                                                              grid_barriers=(1, 0), name="c")]
    stats[2].memset_bytes = 512
    plan = fake_plan(stats)
    tl = build_timeline(plan, stats)
    cost.predict(plan, stats)
    prev = 0.0
    for k, ks in zip(tl.kernels, stats, strict=True):
        assert k.start_us == pytest.approx(prev + k.launch_gap_us)
        assert k.launch_gap_us + k.duration_us == pytest.approx(ks.predicted_us)
        prev = k.end_us
    assert tl.end_us == pytest.approx(sum(ks.predicted_us for ks in stats))
    assert stats[2].breakdown["memset_us"] > 0 and tl.kernels[2].launch_gap_us > V100.kernel_launch_us


def test_rows_and_ascii_rendering():
    stats = [kstats(128, 256, stages=2), kstats(8, 1024)]
    tl = build_timeline(fake_plan(stats), stats)
    rows = tl.to_rows()
    assert len(rows) == 128 * 2 + 8
    assert set(rows[0]) == {"kernel", "kernel_name", "sm", "block", "stage", "kind", "start_us", "end_us"}
    text = tl.render_ascii(width=50, max_sms=10)
    lines = text.splitlines()
    assert lines[1].startswith("SM0 ") and "0" in lines[1] and "1" in lines[1]
    assert lines[9].startswith("SM8 ") and "1" not in lines[9].split(None, 1)[1]   # kernel 1 uses SMs 0-7
    assert "(70 more SMs not shown)" in text and "utilisation" in text
    assert all(len(l) <= 50 + 6 for l in lines[:11])


def test_utilisation_of_a_small_grid_is_low():
    # Figure 7's astitch kernel: 32 blocks of 1024 threads, the GPU holds 160.
    ks = kstats(32, 1024)
    tl = build_timeline(fake_plan([ks]), [ks])
    assert tl.utilisation(include_gaps=False) == pytest.approx(32 / 160)
    assert tl.utilisation() < 32 / 160


def test_library_kernel_schedules_as_its_roofline():
    ks = KernelStats("library.0:dot", "library", 64, 256, 0, 128, library_flops=2 * 1024 ** 3,
                     library_bytes=3 * 4 * 1024 ** 2)
    plan = fake_plan([ks])
    tl = build_timeline(plan, [ks])
    cost.predict(plan, [ks])
    assert tl.kernels[0].duration_us == pytest.approx(ks.breakdown["library_us"])


def test_stats_count_must_match_plan():
    with pytest.raises(AStitchError, match="one KernelStats per plan kernel"):
        build_timeline(SimpleNamespace(gpu=V100, kernels=[None, None]), [kstats(1, 32)])
