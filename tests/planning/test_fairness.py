"""Every strategy gets the same code quality: the same kernel gets the same registers, occupancy and
predicted time whichever strategy produced it, so a speedup of astitch over xla comes from stitching.

A flat elementwise graph (bias+GELU, swiglu, the Adam step) is one loop kernel under xla, tvm,
fusionstitching and astitch alike; before issue 27's fairness fix astitch's assume-relax-apply capped
that identical kernel at its 32 assumed registers (the others kept the 60 or 36 its code needs), and the
SIMT model predicted bias+GELU 1.54x faster on V100 for it.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import astitch_sim as asim
from astitch_sim.hardware.gpus import GPUS
from astitch_sim.plan.machine import MachineResources, blocks_per_wave
from astitch_sim.frontends.workloads import workload_inputs

#: every strategy that makes the graph one loop kernel
ONE_LOOP = ("xla", "tvm", "fusionstitching", "inductor", "astitch")
#: flat graphs at small sizes (the SIMT model runs every element) that still vectorize with several
#: elements in flight: bias+GELU's 16 per thread estimate 60 registers, Adam's 4 estimate 36.  TVM has
#: no multi-output fusion: Adam's three updates are several kernels there (not the same kernel)
FLAT = [("bias_gelu", dict(rows=512, cols=3072), ONE_LOOP), ("swiglu", dict(rows=256, cols=2048), ONE_LOOP),
        ("adam_step", dict(size=1 << 18), tuple(s for s in ONE_LOOP if s != "tvm"))]


def _launch(k):
    """What decides a kernel's speed apart from its counters: launch shape, mapping, registers."""
    return [(k.grid, k.block, k.registers_per_thread, k.shared_bytes, k.cooperative)] + \
        [(s.mapping.kind, s.mapping.per_thread, s.mapping.vector, s.mapping.elements_per_thread) for s in k.stages]


def _code(k):
    """What the code generator makes of a kernel, whatever its launch shape: registers, shared memory,
    and per stage the mapping kind, vector width and elements per thread per round."""
    return [(k.registers_per_thread, k.shared_bytes, k.cooperative)] + \
        [(s.mapping.kind, s.mapping.per_thread, s.mapping.vector) for s in k.stages]


@pytest.mark.parametrize("gpu", sorted(GPUS))
@pytest.mark.parametrize("name,shape,strategies", FLAT, ids=[w for w, _, _ in FLAT])
def test_a_flat_graph_is_the_same_kernel_under_every_loop_strategy(name, shape, strategies, gpu):
    g = asim.workload(name, **shape)
    plans = {s: asim.compile(g, s, gpu) for s in strategies}
    ref = plans["xla"]
    (kx,) = ref.generated
    assert kx.registers_per_thread > 32, "the case must hold more in flight than astitch's 32 assumed registers"
    inputs = workload_inputs(g, 0)
    want = asim.simulate(ref, inputs).stats
    for s, plan in plans.items():
        (k,) = plan.generated
        if s == "fusionstitching" and _launch(k) != _launch(kx):
            # FusionStitching's own launch search (its design, README): the same code, another grid and block,
            # kept only because the cost model prices it faster by min_gain -- say so and check it
            assert _code(k) == _code(kx)
            assert any("fastest of" in n and "legal schedules" in n for n in k.notes), k.notes
            assert asim.simulate(plan, inputs).stats.predicted_us < want.predicted_us
            continue
        assert _launch(k) == _launch(kx), s
        assert blocks_per_wave(plan.gpu, k) == blocks_per_wave(ref.gpu, kx), s
        got = asim.simulate(plan, inputs).stats
        assert got.global_bytes == want.global_bytes, s
        assert got.predicted_us == pytest.approx(want.predicted_us, rel=1e-9), s


def test_astitch_says_why_a_kernel_that_stitches_nothing_keeps_its_registers():
    plan = asim.compile(asim.workload("bias_gelu"), "astitch", "V100")      # 16384x3072: 16 in flight
    (k,) = plan.generated
    assert k.registers_per_thread == 60
    note = next(n for n in k.notes if n.startswith("assume-relax-apply"))
    assert "nothing stitched" in note and "keeps the 60" in note and "640 -> 320 blocks per wave" in note
    assert "keeps the 60" in str(plan)


def test_a_stitched_kernel_keeps_the_assumed_wave():
    """The cap stays where stitching rests on it: layer norm's stitched kernel keeps the wave of 32 registers."""
    plan = asim.compile(asim.workload("layernorm"), "astitch", "V100")
    (k,) = plan.generated
    assert len(k.stages) > 1
    assert plan.gpu.blocks_per_wave(k.block, k.shared_bytes, k.registers_per_thread) == \
        plan.gpu.blocks_per_wave(k.block, k.shared_bytes, 32)


def test_an_estimate_a_block_cannot_hold_is_capped_for_every_strategy():
    """1024 threads x 68 registers fit on no SM: the hardware's rule caps the estimate, the note says so."""
    gpu = asim.gpu("V100")
    assert gpu.max_registers_for_block(1024) == 64
    assert gpu.max_registers_for_block(256) == gpu.max_registers_per_thread
    with pytest.raises(asim.AStitchError):
        gpu.max_registers_for_block(4096)


@pytest.mark.parametrize("strategy", ["xla", "astitch"])
def test_occupancy_follows_the_registers_ptxas_used_not_the_cap(strategy):
    """Adam's loop kernel: ptxas fits it in 32 registers under a cap of 36; the SM holds blocks by the 32."""
    g = asim.workload("adam_step", size=1 << 18)
    plan = asim.compile(g, strategy, "H100")
    (k,) = plan.generated
    assert k.registers_per_thread == 36
    res = MachineResources(arch="sm_90", tool="test", registers=32, spill_stores=0, spill_loads=0, stack=0,
                           shared_static=k.shared_bytes, shared_runtime=0, max_registers=36)
    applied = replace(plan, kernels=[replace(k, machine=res)])
    (ks,) = asim.simulate(applied, workload_inputs(g, 0)).stats.kernels
    assert ks.registers_per_thread == 32
    assert ks.blocks_per_wave == plan.gpu.blocks_per_wave(k.block, k.shared_bytes, 32) > \
        plan.gpu.blocks_per_wave(k.block, k.shared_bytes, 36)
