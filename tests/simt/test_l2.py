"""Tests for astitch_sim.simt.l2: the L2 residency model and how the cost model charges its hits.

A two-kernel chain ``y = exp(x); z = y * y`` planned unfused passes ``y`` through global memory: the
second kernel reads what the first wrote.  Whether the L2 still holds ``y`` then depends on the bytes
moved in between (``x`` read beside ``y``'s store: ``2 * |y|``) and on the preset's capacity.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.hardware.gpus import GPUS
from astitch_sim.simt import l2
from astitch_sim.simt.cost import format_breakdown
from astitch_sim.simt.stats import KernelStats, StageStats, TensorTraffic

MIB = 2**20


def chain(n: int) -> asim.Graph:
    g = asim.Graph("chain")
    x = g.parameter("x", (n,))
    y = g.exp(x, name="y")
    g.set_outputs(g.multiply(y, y, name="z"))
    return g


def run(graph, gpu, strategy="unfused", **kw):
    plan = asim.compile(graph, strategy=strategy, gpu=gpu)
    return asim.simulate(plan, workload_inputs(graph, 0), **kw)


def reads(res, kernel: int, tensor: str):
    """The TensorTraffic of ``tensor`` in the stages of kernel ``kernel`` that read it."""
    out = [s.tensors[tensor] for s in res.stats.kernels[kernel].stages
           if tensor in s.tensors and s.tensors[tensor].read_sectors]
    assert out, f"kernel {kernel} does not read {tensor}"
    return out


# ---------------------------------------------------------------------------
# the hit rule
# ---------------------------------------------------------------------------

def test_hit_fraction_is_the_lru_stack_distance_rule():
    # the same span length both times: every byte at distance 100
    assert l2.hit_fraction((0, 50), (100, 150), 100) == 1.0
    assert l2.hit_fraction((0, 50), (100, 150), 99) == 0.0
    # previous touch spread over 100, this one over 50: distance 100 + p * (50 - 100) -> hits where p >= 0.4
    assert l2.hit_fraction((0, 100), (100, 150), 80) == pytest.approx(0.6)
    # this touch spread wider: distance 100 + p * 100 -> hits where p <= 0.5
    assert l2.hit_fraction((0, 50), (100, 250), 150) == pytest.approx(0.5)
    assert l2.hit_fraction((0, 50), (100, 150), 0) == 0.0           # no L2 at all


# ---------------------------------------------------------------------------
# between kernels
# ---------------------------------------------------------------------------

def test_an_intermediate_that_fits_in_l2_is_read_from_it_and_costs_less():
    g = chain(32 * 1024)                               # y: 128 KiB
    on, off = run(g, "H100"), run(g, "H100", l2=False)
    np.testing.assert_array_equal(on.outputs[0], off.outputs[0])
    y = reads(on, 1, "y")
    assert sum(t.l2_read_bytes for t in y) == sum(t.read_bytes for t in y) > 0
    assert {t.resident_since for t in y} == {"k0"}
    assert reads(on, 0, "x")[0].l2_read_bytes == 0       # an input: the L2 starts cold
    k1_on, k1_off = on.stats.kernels[1], off.stats.kernels[1]
    assert k1_on.breakdown["l2_us"] > 0 and k1_off.breakdown["l2_us"] == 0
    assert k1_on.breakdown["memory_us"] < k1_off.breakdown["memory_us"]
    assert on.stats.predicted_us < off.stats.predicted_us
    assert on.stats.l2_read_bytes == 128 * 1024 and off.stats.l2_read_bytes == 0
    # the bytes split, not vanish: DRAM + L2 hits is the same traffic either way
    assert on.stats.dram_bytes + on.stats.l2_read_bytes == off.stats.dram_bytes
    assert "l2 " in format_breakdown(k1_on) and "l2 " not in format_breakdown(k1_off)


def test_an_intermediate_beyond_capacity_is_read_from_dram():
    # 1 Mi floats: x (4 MiB) read while y (4 MiB) is stored -> 8 MiB touched before y is read again
    g = chain(1 << 20)
    on, off = run(g, "V100"), run(g, "V100", l2=False)        # 6 MiB of L2
    assert all(t.l2_read_bytes == 0 for t in reads(on, 1, "y"))
    assert on.stats.predicted_us == pytest.approx(off.stats.predicted_us)
    assert on.stats.l2_read_bytes == 0


def test_the_presets_capacity_decides():
    # the same 8 MiB between y's store and its load: beyond V100's 6 MiB, within H100's 50 MiB
    g = chain(1 << 20)
    assert GPUS["V100"].l2_bytes < 8 * MIB < GPUS["H100"].l2_bytes
    v100, h100 = run(g, "V100"), run(g, "H100")
    assert sum(t.l2_read_bytes for t in reads(v100, 1, "y")) == 0
    assert sum(t.l2_read_bytes for t in reads(h100, 1, "y")) == 4 * MIB
    # and a V100 with H100's L2 would have kept it: the capacity, not the rest of the preset, decides
    big = run(g, replace(GPUS["V100"], l2_bytes=GPUS["H100"].l2_bytes))
    assert sum(t.l2_read_bytes for t in reads(big, 1, "y")) == 4 * MIB


def test_l2_off_by_option_or_by_a_gpu_without_l2_prices_every_sector_at_dram():
    g = asim.workload("layernorm", rows=64, cols=128)
    on = run(g, "H100")
    off = run(g, "H100", l2=False)
    none = run(g, replace(GPUS["H100"], l2_bytes=0))
    assert on.stats.l2_read_bytes > 0
    for res in (off, none):
        assert res.stats.l2_read_bytes == 0
        assert all(ks.breakdown.get("l2_us", 0) == 0 for ks in res.stats.kernels)
    assert off.stats.predicted_us == pytest.approx(none.stats.predicted_us)
    assert on.stats.predicted_us < off.stats.predicted_us
    with pytest.raises(asim.AStitchError, match="l2=False"):
        run(g, "H100", l2="no")


def test_many_kernel_plans_gain_most():
    # unfused stores and reloads every intermediate; one stitched kernel has nothing to reload
    g = asim.workload("layernorm", rows=64, cols=128)
    gain = {}
    for strategy in ("unfused", "xla", "astitch"):
        on, off = run(g, "H100", strategy), run(g, "H100", strategy, l2=False)
        gain[strategy] = off.stats.predicted_us - on.stats.predicted_us
    assert gain["unfused"] > gain["xla"] > gain["astitch"] >= 0


# ---------------------------------------------------------------------------
# within a kernel
# ---------------------------------------------------------------------------

def test_a_value_stitched_through_global_memory_is_re_read_from_l2():
    # Figure 7: AStitch stores power.1 for a grid barrier and the next stage of the same kernel reads it back
    g = asim.workload("paper_fig7")
    res = run(g, "V100", "astitch")
    hit = [(ki, s.stage, t) for ki, ks in enumerate(res.stats.kernels) for s in ks.stages
           for n, t in s.tensors.items() if n == "power.1" and t.read_sectors]
    # its 512 bytes come from the L2 (left there by stage 0), every further read of them from the L1
    assert hit and all(t.resident_since.startswith("s") and t.l2_read_bytes == t.nbytes
                       and t.l2_read_bytes + t.l1_read_bytes == t.read_bytes for _, _, t in hit)


def test_a_broadcast_operand_read_again_within_a_stage_comes_from_the_l1_once_loaded():
    """Layer norm's gamma and beta (3 KiB each) are read by every row of the stage: their own bytes come from
    DRAM once (the run starts cold), every further read from the SMs' L1 -- charged to neither DRAM nor the
    L2.  Before (the GPU window found it) every repeat was charged at DRAM bandwidth: 201 MB for a kernel that
    moves 101 MB; the H200 moved the real bytes at its copy rate."""
    g = asim.workload("layernorm", rows=2048, cols=768)
    res = run(g, "H100", "astitch")
    (ks,) = res.stats.kernels
    weights = [t for s in ks.stages for n, t in s.tensors.items() if n in ("gamma", "beta") and t.read_sectors]
    assert weights
    for t in weights:
        assert t.read_bytes > 100 * t.nbytes                    # read once per row
        assert t.l1_read_bytes == t.read_bytes - t.nbytes and t.l2_read_bytes == 0 and t.resident_since == "r"
    x_and_y = 2 * 2048 * 768 * 4
    assert ks.dram_bytes == pytest.approx(x_and_y + 2 * 768 * 4 + 2048 * 8, rel=0.02)   # + gamma, beta, mean, rstd
    off = run(g, "H100", "astitch", l2=False)
    assert off.stats.dram_bytes > 1.9 * ks.dram_bytes               # with no cache every repeat is DRAM traffic
    assert off.stats.predicted_us > res.stats.predicted_us


def _two_stage_kernel(grid: int, tensor_bytes: int, shared: int = 0, grid_barrier: bool = False):
    """Hand-made counters: stage 0 reads T, stage 1 reads T again (a looped reduction reading its row twice);
    ``grid_barrier``: one runs after stage 0."""
    ks = KernelStats("k", "generated", grid, 256, shared, 32)
    sectors = tensor_bytes // 32
    ks.stages = [StageStats(i, f"d{i}", global_sectors_read=sectors, grid_barriers=int(grid_barrier and i == 0),
                            tensors={"T": TensorTraffic(tensor_bytes, read_sectors=sectors)}) for i in range(2)]
    return ks


def _alike(same: bool = True) -> list:
    """The plan kernel of :func:`_two_stage_kernel`, for ``annotate(kernels=...)``: its two stages map their
    elements alike (a block re-reads its own rows) or not (a column stage after a row stage)."""
    stages = [SimpleNamespace(mapping="rows"), SimpleNamespace(mapping="rows" if same else "columns")]
    return [SimpleNamespace(kind="generated", stages=stages)]


def test_within_a_kernel_only_the_resident_blocks_traffic_counts():
    # a block re-reads its rows after only the blocks resident with it moved theirs: with ten waves a tenth
    # of the 10 MiB stage, with one wave all of it (beyond V100's 6 MiB L2).  Across a grid barrier the L1
    # is not credited, so what the L2 holds is what the re-read finds.
    v100 = GPUS["V100"]
    per_wave = v100.occupancy(256, 0, 32).blocks_per_wave
    plan = SimpleNamespace(gpu=v100)
    one_wave, ten_waves = (_two_stage_kernel(n, 10 * MIB, grid_barrier=True) for n in (per_wave, 10 * per_wave))
    l2.annotate(plan, [one_wave], kernels=_alike())
    l2.annotate(plan, [ten_waves], kernels=_alike())
    assert [s.l2_read_bytes for s in one_wave.stages] == [0, 0]
    assert [s.l2_read_bytes for s in ten_waves.stages] == [0, 10 * MIB]
    assert [s.l1_read_bytes for s in ten_waves.stages] == [0, 0]
    assert ten_waves.stages[1].tensors["T"].resident_since == "s0"


def test_a_blocks_re_read_of_what_its_earlier_stage_read_comes_from_its_sms_l1():
    """Ten waves of 256-thread blocks re-reading their rows of a 40 MiB tensor: between a block's two reads
    its SM's 8 resident blocks moved a tenth of it, 52 KiB per SM, inside V100's 128 KiB L1.  With 12 KiB of
    shared memory per block the carveout takes 96 KiB and leaves 32 KiB of L1: then the L2 serves it (a
    tenth of 40 MiB fits V100's 6 MiB)."""
    v100 = GPUS["V100"]
    per_wave = v100.occupancy(256, 0, 32).blocks_per_wave
    plan = SimpleNamespace(gpu=v100)
    for shared, l1 in ((0, 40 * MIB), (12 * 1024, 0)):
        ks = _two_stage_kernel(10 * per_wave, 40 * MIB, shared=shared)
        assert v100.occupancy(256, shared, 32).blocks_per_sm == 8
        l2.annotate(plan, [ks], kernels=_alike())
        assert [s.l1_read_bytes for s in ks.stages] == [0, l1], shared
        assert [s.l2_read_bytes for s in ks.stages] == [0, 40 * MIB - l1], shared
        assert ks.stages[1].tensors["T"].resident_since == "s0"
    # one wave: all 10 MiB pass between the reads, 128 KiB per SM (the whole L1): it holds them; 20 MiB not
    for size, l1 in ((10 * MIB, 10 * MIB), (20 * MIB, 0)):
        ks = _two_stage_kernel(per_wave, size)
        l2.annotate(plan, [ks], kernels=_alike())
        assert [s.l1_read_bytes for s in ks.stages] == [0, l1] and ks.stages[1].l2_read_bytes == 0, size
    # the L2 serves the ten-wave re-read where another block reads each element (a column stage after row
    # stages), where the stages' mappings are not known, and on a preset without the L1's figure
    for on, kernels in ((plan, _alike(same=False)), (plan, None),
                        (SimpleNamespace(gpu=replace(v100, l1_shared_per_sm=0)), _alike())):
        ks = _two_stage_kernel(10 * per_wave, 40 * MIB)
        l2.annotate(on, [ks], kernels=kernels)
        assert ks.stages[1].l1_read_bytes == 0 and ks.stages[1].l2_read_bytes == 40 * MIB


def test_hits_another_blocks_earlier_stage_left_are_unordered_unless_a_grid_barrier_ran():
    """A later stage that reads what *other* blocks' earlier stage read (a column stage after row stages) finds
    it in the L2 only if those blocks ran first, which nothing orders without a grid barrier: such hits are
    ``l2_unordered_bytes``, priced with DRAM's round trip.  A block's own re-read, a re-read after a grid
    barrier, and a tensor an earlier kernel left are ordered."""
    v100 = GPUS["V100"]
    plan = SimpleNamespace(gpu=v100)
    per_wave = v100.occupancy(256, 12 * 1024, 32).blocks_per_wave
    cases = ((False, False, 40 * MIB), (False, True, 0), (True, False, 0))
    for same, barrier, unordered in cases:
        ks = _two_stage_kernel(10 * per_wave, 40 * MIB, shared=12 * 1024, grid_barrier=barrier)
        l2.annotate(plan, [ks], kernels=_alike(same))
        assert ks.stages[1].l2_read_bytes == 40 * MIB, (same, barrier)           # the L1 holds none of it
        assert [s.l2_unordered_bytes for s in ks.stages] == [0, unordered], (same, barrier)
    # across kernels: the earlier kernel has finished
    first, second = (_two_stage_kernel(per_wave, 1 * MIB) for _ in range(2))
    l2.annotate(plan, [first, second], kernels=_alike(False) * 2)
    assert second.stages[0].l2_read_bytes == 1 * MIB and second.stages[0].l2_unordered_bytes == 0


def test_unordered_hits_wait_drams_round_trip_and_ordered_ones_the_l2s():
    """Layer-norm backward 16384x768 unsplit on an H200: its column stage, left on 24 blocks, re-reads x and
    dy that the row stage's other blocks read; the GPU measured 3.6 ms (``benchmarks/results/2026-11-27-h200``).
    Those hits are unordered, so their latency-bound round trips are DRAM's: the L2's own round trip would
    price the stage 7x cheaper (the imbalance 93 -> 14 us) for reads the blocks that own the rows have not
    made yet when 24 first-wave blocks sweep every row."""
    from astitch_sim.planning.strategies.fs_cost import priced
    from astitch_sim.simt import cost
    g = asim.workload("layernorm_backward", rows=16384, cols=768)
    plan = asim.compile(g, "astitch", "H200", task_splitting=False)
    (ks,) = priced(plan.graph, plan.gpu, plan.kernels)
    col = next(s for s, st in zip(ks.stages, plan.kernels[0].stages, strict=True) if st.mapping.kind == "columns")
    assert col.l2_read_bytes > 0 and col.l2_unordered_bytes == col.l2_read_bytes
    ordered = [replace(s, l2_unordered_bytes=0.0) for s in ks.stages]
    as_ordered = replace(ks, stages=ordered)
    (extra,) = [x for x in cost.imbalance_terms(plan.gpu, plan.kernels[0], ks) if x]
    (cheaper,) = [x for x in cost.imbalance_terms(plan.gpu, plan.kernels[0], as_ordered) if x]
    assert extra > 3 * cheaper


def test_fused_passes_over_a_row_read_it_from_the_l1_as_the_h200_measured():
    """FusionStitching's layer norm reads each 3 KiB row in three passes (32 one-warp blocks per SM): on an
    H200 it ran 26.2 us, astitch's one pass 26.5 us (``benchmarks/results/2026-11-29-h200``).  Both passes
    after the first come from the SM's L1: the kernel's DRAM bytes are astitch's, and so is its memory time."""
    g = asim.workload("layernorm", rows=4096, cols=768)
    fs, one = run(g, "H200", "fusionstitching"), run(g, "H200", "astitch")
    (k,) = fs.stats.kernels
    again = [t for s in k.stages[1:] for n, t in s.tensors.items() if n == "x" and t.read_sectors]
    assert len(again) == 2 and all(t.l1_read_bytes == t.read_bytes and t.l2_read_bytes == 0 for t in again)
    assert [t.resident_since for t in again] == ["s0", "s1"]
    assert k.dram_bytes == one.stats.kernels[0].dram_bytes
    assert k.breakdown["memory_us"] == pytest.approx(one.stats.kernels[0].breakdown["memory_us"], rel=0.01)
    assert "l2_us" not in k.breakdown or k.breakdown["l2_us"] == 0


def test_a_column_stage_reading_what_row_stages_read_is_not_an_l1_hit():
    """Layer-norm backward under astitch: its column stage (dgamma) reads ``dy`` and ``x`` the row stages read,
    each element in a block of another SM: the L1 serves nothing there (were it credited, the launch search
    would drop the column stage's split: the 24-block plan an H200 ran in 3.6 ms)."""
    g = asim.workload("layernorm_backward", rows=2048, cols=768)
    res = run(g, "H200", "astitch")
    plan = res.plan
    (k,) = plan.kernels
    col = next(i for i, s in enumerate(k.stages) if s.mapping.kind == "columns")
    assert all(s.mapping.kind == "rows" for s in k.stages[:col])
    # (a small per-row value read by every column lane repeats within the stage: those repeats are L1 reads)
    again = [t for t in res.stats.kernels[0].stages[col].tensors.values()
             if t.read_sectors and t.resident_since and t.nbytes > l2.L1_REUSE_BYTES]
    assert again and all(t.l1_read_bytes == 0 and t.l2_read_bytes > 0 for t in again)
    assert k.stages[col].mapping.splits > 1
