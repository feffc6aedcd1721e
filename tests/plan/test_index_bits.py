"""The planner's index width (astitch_sim/plan/index_bits.py): 32-bit index math where every index fits, 64 past 2**31.

The decision is the planner's, the same for every strategy, recorded on each generated kernel
(``Kernel.index_bits``), shown by ``print(plan)``, kept by the plan JSON and checked by
``Plan.validate``.  The code generator follows it (tests/gpu_backend/test_gpu_backend.py runs the kernels).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim import AStitchError
from astitch_sim.plan.index_bits import LIMIT_32, largest_index
from astitch_sim.plan.plan import Plan

#: 2_147_482_446 elements (a tensor holds fewer than 2**31), rows of 32769: the row loops' positions pass 2**31
BIG = {"rows": 65534, "cols": 32769}


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_paper_sizes_get_32_bit_index_math(strategy):
    plan = asim.compile(asim.workload("layernorm"), strategy, "H100")
    gen = [k for k in plan.kernels if k.kind == "generated"]
    assert gen and all(k.index_bits == 32 for k in gen)
    assert str(plan).count("index=32-bit") == len(gen)


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_past_two_to_the_31_elements_every_strategy_goes_64_bit(strategy):
    g = asim.workload("softmax", **BIG)
    plan = asim.compile(g, strategy, "H100")
    gen = [k for k in plan.kernels if k.kind == "generated"]
    for k in gen:
        big = largest_index(g, k.stages, list(k.values) + list(k.inputs), k.grid, k.block)
        assert k.index_bits == (64 if big >= LIMIT_32 else 32), k.name
    assert any(k.index_bits == 64 for k in gen)
    assert "index=64-bit" in str(plan)


def test_the_rule_counts_thread_positions_not_only_tensors():
    """A kernel's loops may form indices past its tensors (the guard's overshoot): the rule counts them."""
    plan = asim.compile(asim.workload("layernorm", rows=3, cols=33), "astitch", "H100")
    k = plan.kernels[0]
    g = plan.graph
    positions = max(k.grid * k.block * s.mapping.elements_per_thread for s in k.stages)
    assert positions > max(int(np.prod(g[n].shape)) for n in k.values)      # this kernel overshoots its tensors
    assert largest_index(g, k.stages, list(k.values), k.grid, k.block) >= positions


def test_json_round_trip_keeps_the_width_and_older_json_means_64():
    plan = asim.compile(asim.workload("softmax", rows=4, cols=64), "astitch", "H100")
    d = json.loads(plan.to_json())
    assert Plan.from_dict(d).kernels[0].index_bits == 32
    del d["kernels"][0]["index_bits"]             # a plan written before the field: the safe width
    assert Plan.from_dict(d).kernels[0].index_bits == 64


@pytest.mark.parametrize("bits, why", [(16, "index_bits must be one of"), ("32", "index_bits must be one of")])
def test_a_width_that_is_not_32_or_64_is_refused(bits, why):
    d = json.loads(asim.compile(asim.workload("softmax", rows=4, cols=64), "xla", "H100").to_json())
    d["kernels"][0]["index_bits"] = bits
    with pytest.raises(AStitchError, match=why):
        Plan.from_dict(d).validate()


def test_32_bits_on_a_kernel_past_two_to_the_31_is_refused():
    d = json.loads(asim.compile(asim.workload("softmax", **BIG), "xla", "H100").to_json())
    d["kernels"][0]["index_bits"] = 32
    with pytest.raises(AStitchError, match=r"index_bits=32 but the kernel forms indices up to \d+ .*set index_bits=64"):
        Plan.from_dict(d).validate()
