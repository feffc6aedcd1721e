"""The cost model's terms that follow the code a plan describes (``astitch_sim/simt/cost.py``): the bytes a
warp keeps in flight (vector width x vectors per thread), spills and instruction issue (ptxas's numbers,
recorded in the plan by ``gpu_backend.apply_compiler``).

The unit tests build counters by hand and check each term against the docstring's formula; the end-to-end
tests run the SIMT model on real plans, one of them compiled by ptxas (astitch's stitched softmax
<64,30000> on H100, whose code spills 24 B per thread at its cooperative grid's register cap).
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil
from types import SimpleNamespace

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim import AStitchError
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.hardware.gpus import GPUS
from astitch_sim.plan.machine import MachineResources, thread_instructions
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.simt import cost
from astitch_sim.simt.cost import constants, predict, saturating_warps, warp_bytes_in_flight
from astitch_sim.simt.stats import KernelStats, StageStats
from toolchain_gate import require_disassembler

V100, H100 = GPUS["V100"], GPUS["H100"]


def flat(vector: int, per_thread: int, grid=80, block=256, size=None):
    size = size or grid * block * per_thread
    return ThreadMapping("flat", (size,), ((0,),), block, grid, per_thread=per_thread, vector=vector)


def fake_kernel(mapping, machine=None):
    """What the cost model reads of a plan kernel: its stages' mappings and ptxas's numbers."""
    stage = SimpleNamespace(mapping=mapping, barrier_after=None, grid_syncs=0)
    return SimpleNamespace(kind="generated", global_barriers=0, stages=[stage], machine=machine)


def one_stage(mapping, bytes_read_per_element=4, machine=None):
    """A hand-made kernel of one flat stage reading ``bytes_read_per_element`` and writing 4 per element."""
    n = mapping.size
    ks = KernelStats("k", "generated", mapping.grid, mapping.block, 0, 32)
    ks.stages = [StageStats(0, "d", elements=n, global_bytes_read=n * bytes_read_per_element,
                            global_sectors_read=n * bytes_read_per_element // 32, global_bytes_written=4 * n,
                            global_sectors_written=4 * n // 32, flops=n)]
    return fake_kernel(mapping, machine), ks


def run(kernel, ks, gpu=V100):
    predict(SimpleNamespace(gpu=gpu, kernels=[kernel]), [ks])
    return ks


def machine(spill_stores=0, spill_loads=0, instructions=None, loop=0):
    return MachineResources(arch="sm_90", tool="test", registers=32, spill_stores=spill_stores,
                            spill_loads=spill_loads, stack=0, shared_static=0, shared_runtime=0, max_registers=32,
                            sass_instructions=instructions, sass_loop_instructions=loop)


# ---------------------------------------------------------------------------
# bytes in flight per warp follow the mapping
# ---------------------------------------------------------------------------

def test_bytes_in_flight_are_vector_width_times_vectors_per_thread():
    c = constants(V100)
    s = StageStats(0, "d", elements=1000, global_bytes_read=4000)          # one f32 tensor read
    assert warp_bytes_in_flight(c, flat(4, 16), s) == 32 * 16 * 4 == 2048  # 4 vectors of 16 B per lane
    assert warp_bytes_in_flight(c, flat(2, 8), s) == 32 * 8 * 4
    assert warp_bytes_in_flight(c, flat(1, 1), s) == c["bytes_in_flight_per_warp"] == 128   # the preset's floor
    two = StageStats(0, "d", elements=1000, global_bytes_read=8000)        # two f32 tensors: both loaded first
    assert warp_bytes_in_flight(c, flat(4, 16), two) == 2 * 2048
    # H100's floor (512 B) wins where the code keeps less in flight
    assert warp_bytes_in_flight(constants(H100), flat(1, 2), s) == 512
    assert warp_bytes_in_flight(c, None, s) == 128                          # hand-made counters: the preset


def test_latency_bound_memory_term_uses_the_vector_width():
    """20 blocks of 8 warps on a V100 (160 warps, below S even for 4 vectors of 16 B per lane: 237): the
    memory term is ``bytes * S / (R * BW)``, so wider vectors (4 per thread) cut it by their bytes in flight."""
    c = constants(V100)
    bw = V100.measured_bandwidth_gbs * 1e3
    times = {}
    for vector in (1, 2, 4):       # same counters, same elements, same grid: only the vector width differs
        kernel, ks = one_stage(flat(vector, 4 * vector, grid=20, size=20 * 256 * 16))
        ks = run(kernel, ks)
        nbytes = ks.stages[0].global_bytes_read + ks.stages[0].global_bytes_written
        sat = saturating_warps(c, 32 * 4 * vector * 4)
        assert sat > 160
        assert ks.breakdown["memory_us"] == pytest.approx(nbytes * sat / (160 * bw))
        times[vector] = ks.breakdown["memory_us"]
    assert times[1] == pytest.approx(2 * times[2]) == pytest.approx(4 * times[4])
    # without the plan's mapping (kernel None) the model falls back to the preset's one load per warp
    _, bare = one_stage(flat(4, 16, grid=20, size=20 * 256 * 16))
    assert run(None, bare).breakdown["memory_us"] == pytest.approx(16 * times[4])


def test_vector_width_does_not_change_a_saturated_stage():
    """With more warps than S the memory term is bytes over bandwidth whatever the code keeps in flight."""
    kernel, ks = one_stage(flat(4, 16, grid=80 * 8))
    _, scalar = one_stage(flat(1, 16, grid=80 * 8))
    scalar_kernel = fake_kernel(flat(1, 16, grid=80 * 8))
    a, b = run(kernel, ks), run(scalar_kernel, scalar)
    assert a.breakdown["memory_us"] == pytest.approx(b.breakdown["memory_us"])


def l2_served(mapping):
    """A one-stage kernel whose every read the L2 serves (partials an earlier kernel left there)."""
    kernel, ks = one_stage(mapping)
    s = ks.stages[0]
    s.l2_read_bytes = float(32 * s.global_sectors_read)
    return kernel, ks


def test_latency_bound_l2_hits_wait_the_l2_round_trip(monkeypatch):
    """Two blocks summing partials from the L2 are latency-bound: their hits cost the L2's round trip
    (``l2_latency_ns``) per round of loads, whatever DRAM's latency, and the warps that would saturate the L2
    follow Little's law with the L2's bandwidth and the hits each warp keeps in flight."""
    m = flat(4, 4, grid=2)
    c = constants(V100)
    kernel, ks = l2_served(m)
    s = ks.stages[0]
    b = 32 * m.per_thread * s.l2_read_bytes / s.elements
    assert cost.warp_l2_bytes_in_flight(c, m, s) == pytest.approx(max(b, c["bytes_in_flight_per_warp"]))
    base = run(kernel, ks).breakdown["l2_us"]
    assert base > 0                                             # (its stores go to DRAM: memory_us)
    resident = 2 * m.block // 32
    assert resident < cost.saturating_l2_warps(c, b)
    assert base == pytest.approx(s.l2_read_bytes / 2 * cost.saturating_l2_warps(c, b) / (m.block // 32)
                                 / (c["l2_bandwidth_gbs"] * 1e3))
    for field, scale, want in (("dram_latency_ns", 3.0, 1.0), ("l2_latency_ns", 2.0, 2.0)):
        monkeypatch.setitem(cost.COST_CONSTANTS, "V100", {**cost.COST_CONSTANTS["V100"], field: c[field] * scale})
        kernel, ks = l2_served(m)
        assert run(kernel, ks).breakdown["l2_us"] == pytest.approx(want * base), field
        monkeypatch.undo()


def test_saturated_l2_hits_cost_their_bytes_over_the_l2_bandwidth(monkeypatch):
    """With more warps than the L2 needs in flight, hits cost bytes over ``l2_bandwidth_gbs``: no latency."""
    m = flat(4, 4, grid=80 * 64)
    kernel, ks = l2_served(m)
    s = ks.stages[0]
    c = constants(V100)
    occ = cost.residency(V100, ks)
    resident = min(ks.grid, occ.blocks_per_wave) * occ.warps_per_block
    assert resident > cost.saturating_l2_warps(c, cost.warp_l2_bytes_in_flight(c, m, s))
    got = run(kernel, ks).breakdown["l2_us"]
    per_block = s.l2_read_bytes / ks.grid * resident / (m.block // 32) / (c["l2_bandwidth_gbs"] * 1e3)
    assert got == pytest.approx(per_block * ks.grid / occ.blocks_per_wave)
    monkeypatch.setitem(cost.COST_CONSTANTS, "V100", {**cost.COST_CONSTANTS["V100"], "l2_latency_ns": c["l2_latency_ns"] * 2})
    kernel, ks = l2_served(m)
    assert run(kernel, ks).breakdown["l2_us"] == pytest.approx(got)


def test_simulated_flat_plan_charges_its_vectors():
    """bias+GELU's one flat kernel as planned (vectors of 4, several per thread): the memory term the
    executor's counters give is the formula's with the plan's bytes in flight, not the preset's."""
    g = asim.workload("bias_gelu", rows=64, cols=3072)
    plan = asim.compile(g, "xla", "V100")
    (k,) = plan.generated
    m = k.stages[0].mapping
    assert m.vector == 4 and m.per_thread >= m.vector
    (ks,) = asim.simulate(plan, workload_inputs(g, 0)).stats.kernels
    s = ks.stages[0]
    c = constants(V100)
    b = warp_bytes_in_flight(c, m, s)
    # the bytes DRAM serves: x's, not the bias's repeats (the L1 serves those: they keep nothing in flight)
    assert s.l1_read_bytes > 0
    from_dram = s.global_bytes_read - s.l1_read_bytes - s.l2_read_bytes
    assert b == pytest.approx(32 * m.per_thread * max(from_dram, s.global_bytes_written) / s.elements)
    assert b > c["bytes_in_flight_per_warp"]
    planned = cost.stage_terms(V100, ks, k)[0]["memory_us"]
    bare = cost.stage_terms(V100, ks)[0]["memory_us"]          # the preset's one load per warp
    occ = cost.residency(V100, ks)
    resident = min(ks.grid, occ.blocks_per_wave) * occ.warps_per_block
    assert resident < saturating_warps(c)                       # latency-bound for scalar code: the term matters
    assert bare / planned == pytest.approx(max(resident, saturating_warps(c)) / max(resident, saturating_warps(c, b)))
    assert bare / planned > 1.5
    assert ks.breakdown["memory_us"] == pytest.approx(planned)  # what simulate reports: the plan's


# ---------------------------------------------------------------------------
# spills
# ---------------------------------------------------------------------------

def test_spills_are_charged_through_l1():
    c = constants(H100)
    kernel, ks = one_stage(flat(4, 16, grid=132 * 8), machine=machine(spill_stores=8, spill_loads=16))
    clean_kernel, clean = one_stage(flat(4, 16, grid=132 * 8), machine=machine())
    ks, clean = run(kernel, ks, H100), run(clean_kernel, clean, H100)
    assert "spill_us" not in clean.breakdown
    occ = cost.residency(H100, ks)
    per_sm = min(occ.blocks_per_sm, ceil(min(ks.grid, occ.blocks_per_wave) / c["sms"]))
    block = 24 * 256 * per_sm / (c["shared_bytes_per_clock"] * c["clock_ghz"] * 1e3)
    frac = ks.grid / min(ks.grid, occ.blocks_per_wave)
    assert ks.breakdown["spill_us"] == pytest.approx(block * frac)
    assert block > 0
    assert ks.predicted_us - clean.predicted_us == pytest.approx(block * ks.waves)   # tail included
    assert sum(ks.breakdown.values()) == pytest.approx(ks.predicted_us)
    assert "spill" in cost.format_breakdown(ks)


def test_a_plan_that_spills_is_charged_in_simulate():
    """A real plan given ptxas's numbers by hand (as apply_compiler records them): simulate charges the spill."""
    g = asim.workload("softmax", rows=64, cols=3000)
    plan = asim.compile(g, "astitch", "H100")
    k = plan.kernels[0]
    res = machine(spill_stores=8, spill_loads=16)
    spilled = replace(plan, kernels=[replace(k, machine=replace(res, shared_static=k.shared_bytes,
                                                                registers=k.registers_per_thread,
                                                                max_registers=k.registers_per_thread))])
    inputs = workload_inputs(g, 0)
    (before,) = asim.simulate(plan, inputs).stats.kernels
    (after,) = asim.simulate(spilled, inputs).stats.kernels
    assert "spill_us" not in before.breakdown
    assert after.breakdown["spill_us"] > 0
    assert after.predicted_us == pytest.approx(before.predicted_us + after.waves * cost.spill_block_us(
        plan.gpu, spilled.kernels[0], after))
    assert "24 B spilled" in str(spilled)


# ---------------------------------------------------------------------------
# instruction issue
# ---------------------------------------------------------------------------

def test_issue_floor_from_counted_instructions():
    """A kernel whose counted SASS takes longer to issue than its memory: the block lasts its issue time, and
    over many waves the kernel takes ``instructions x threads / 32 / (SMs x 4 x clock)``."""
    c = constants(H100)
    grid = 132 * 8 * 10
    kernel, ks = one_stage(flat(4, 16, grid=grid), machine=machine(instructions=2000))
    ks = run(kernel, ks, H100)
    assert ks.breakdown["issue_us"] > 0
    issue_total = 2000 * grid * 256 / 32 / (H100.sms * H100.sm_partitions * c["clock_ghz"] * 1e3)
    body = ks.predicted_us - ks.breakdown["launch_us"] - ks.breakdown["memset_us"]
    occ = cost.residency(H100, ks)
    assert body == pytest.approx(issue_total * ks.waves * occ.blocks_per_wave / grid)
    assert body >= issue_total * (1 - 1e-9)
    assert sum(ks.breakdown.values()) == pytest.approx(ks.predicted_us)
    # a count below the other terms changes nothing: the key is there, its value 0
    few_kernel, few = one_stage(flat(4, 16, grid=grid), machine=machine(instructions=10))
    none_kernel, none = one_stage(flat(4, 16, grid=grid), machine=machine())
    few, none = run(few_kernel, few, H100), run(none_kernel, none, H100)
    assert few.breakdown["issue_us"] == 0 and "issue_us" not in none.breakdown
    assert few.predicted_us == pytest.approx(none.predicted_us)


def test_thread_instructions_count_kept_loops_per_trip():
    m = ThreadMapping("rows", (64, 3000), ((0,), (1,)), 1024, 64, threads_per_row=1024)
    k = fake_kernel(m, machine(instructions=500, loop=40))
    assert m.elements_per_thread == 3
    assert thread_instructions(k) == 500 - 40 + 40 * 3
    assert thread_instructions(SimpleNamespace(stages=[], machine=machine())) is None
    vec = fake_kernel(flat(4, 16, size=80 * 256 * 16 * 3), machine(instructions=100, loop=20))
    assert thread_instructions(vec) == 100 - 20 + 20 * 3               # 3 rounds of 16 elements


def test_issue_term_shown_in_print_plan():
    res = machine(instructions=873, loop=4)
    assert "873 SASS instructions (4 in loops)" in res.describe()
    assert "SASS" not in machine().describe()
    assert MachineResources.from_dict(res.to_dict()) == res
    # a record from a version with a field this one lacks says so (it used to call the entry malformed)
    with pytest.raises(AStitchError, match=r"\['a_later_field'\] this version of astitch-sim does not know"):
        MachineResources.from_dict({**res.to_dict(), "a_later_field": 1})
    with pytest.raises(AStitchError, match="malformed"):
        MachineResources.from_dict({k: v for k, v in res.to_dict().items() if k != "registers"})
    old = {k: v for k, v in res.to_dict().items() if not k.startswith("sass")}     # a plan written before
    assert MachineResources.from_dict(old).sass_instructions is None


# ---------------------------------------------------------------------------
# ptxas: the real spilling case (no GPU needed)
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_astitch_log_softmax_64x32000_spills_on_h100_and_is_charged():
    """ptxas at the register cap of a 1024-thread block (64) spills 8 B per thread of the stitched log-softmax,
    however few trips' loads are in flight; apply_compiler records the bytes and the SASS count, and the SIMT
    model charges both terms from them (the issue term may be 0: not issue-bound).  (Softmax at <64,30000>
    spilled too until row vectors and the launch search gave it 512-thread blocks and room for 122 registers;
    layer norm at that shape until apply_compiler loaded its trips one at a time: the next test.)"""
    require_disassembler()
    from benchmarks.applied_plans import apply_all
    g = asim.workload("log_softmax", rows=64, cols=32000)
    ((plan, err),) = apply_all([asim.compile(g, "astitch", "H100")])
    assert err is None, err
    assert any("fewer did not spill less" in n for n in plan.kernels[0].notes), plan.kernels[0].notes
    (k,) = plan.kernels
    m = k.machine
    assert m.spills > 0 and m.sass_instructions > 0, m
    assert f"{m.spills} B spilled" in str(plan) and f"{m.sass_instructions} SASS instructions" in str(plan)
    (ks,) = asim.simulate(plan, workload_inputs(g, 0)).stats.kernels
    c = constants(H100)
    occ = cost.residency(H100, ks)
    per_sm = min(occ.blocks_per_sm, ceil(min(ks.grid, occ.blocks_per_wave) / c["sms"]))
    block = m.spills * k.block * per_sm / (c["shared_bytes_per_clock"] * c["clock_ghz"] * 1e3)
    assert block > 0 and ks.breakdown["spill_us"] == pytest.approx(block * ks.grid / min(ks.grid, occ.blocks_per_wave))
    assert "issue_us" in ks.breakdown
    assert cost.issue_block_us(H100, k, ks) == pytest.approx(
        thread_instructions(k) * k.block / 32 * per_sm / (H100.sm_partitions * c["clock_ghz"] * 1e3))


@pytest.mark.slow
def test_a_row_kernel_that_spills_at_its_blocks_cap_loads_fewer_trips_at_a_time():
    """Layer norm <64,30000> under astitch: 1024 lanes per row, 8 trips of 4-element vectors, the row kept in
    registers across three stages.  With every trip's loads first ptxas (sm_90, 64-register cap) spilled 520 B
    per thread; apply_compiler tries 4, 2, 1 trips at a time and keeps the first that does not spill, records it
    on every row stage (``load_trips``), says so, and the cost model counts that many trips in flight."""
    require_disassembler()
    from benchmarks.applied_plans import apply_all
    from astitch_sim.plan.loads_in_flight import trips_in_flight
    from astitch_sim.simt.cost import elements_in_flight
    g = asim.workload("layernorm", rows=64, cols=30000)
    before = asim.compile(g, "astitch", "H100")
    ((plan, err),) = apply_all([before])
    assert err is None, err
    (k,) = plan.kernels
    assert k.block == 1024 and k.machine.spills == 0, k.machine
    groups = {trips_in_flight(s.mapping) for s in k.stages}
    assert len(groups) == 1 and groups < {1, 2, 4}, groups
    (group,) = groups
    assert all(s.mapping.load_trips == group and elements_in_flight(s.mapping) == 4 * group for s in k.stages)
    assert all(trips_in_flight(s.mapping) == 8 for s in before.kernels[0].stages)
    (note,) = [n for n in k.notes if "load_trips=" in n]
    assert "spilled" in note and f"load {group} trip(s) at a time" in note and "no spill" in note, note
    assert f"loads {group} trip(s) at a time" in str(plan)
    x = workload_inputs(g, 0)
    for got, want in zip(asim.simulate(plan, x).outputs, asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_thread_instructions_take_the_trips_ptxas_code_makes_when_counted():
    """``sass_loop_trips`` (the source's accesses against the SASS's, ``gpu_backend/machine/source_counts.py``)
    replaces the one-trip-per-element guess: ptxas unrolls the loops it keeps."""
    from dataclasses import replace
    m = ThreadMapping("rows", (64, 3000), ((0,), (1,)), 1024, 64, threads_per_row=1024)
    res = replace(machine(instructions=500, loop=40), sass_loop_trips=0.75)
    assert thread_instructions(fake_kernel(m, res)) == 500 - 40 + 40 * 0.75
    assert "(40 in loops, 0.75 trips)" in res.describe()
    assert MachineResources.from_dict(res.to_dict()) == res
    # a record from a version with a field this one lacks says so (it used to call the entry malformed)
    with pytest.raises(AStitchError, match=r"\['a_later_field'\] this version of astitch-sim does not know"):
        MachineResources.from_dict({**res.to_dict(), "a_later_field": 1})
    with pytest.raises(AStitchError, match="malformed"):
        MachineResources.from_dict({k: v for k, v in res.to_dict().items() if k != "registers"})
