"""What-if options of the astitch strategy: each switch changes the plan the way compile's docstring
says, every switched plan still computes the reference, and bad options are AStitchErrors."""
from pathlib import Path

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from anchor import TESTS_FILE

SWITCHES = [{"horizontal_packing": False}, {"vertical_packing": False}, {"task_splitting": False},
            {"regional_stitching": False}, {"global_stitching": False}, {"register_reuse": False},
            {"max_block_threads": 128}, {"global_stitching": False, "regional_stitching": False},
            {"regional_stitching": False, "vertical_packing": False}]

CASES = [("paper_fig7", {}), ("softmax", {"rows": 64, "cols": 30000}), ("softmax", {"rows": 7500, "cols": 32}),
         ("layernorm", {"rows": 512, "cols": 768}), ("batchnorm_train", {"rows": 4096, "cols": 64}),
         ("global_norm", {"rows": 256, "cols": 256}), ("layernorm_backward", {"rows": 256, "cols": 768}),
         ("cross_entropy", {"rows": 64, "cols": 3000}), ("attention_softmax", {"batch": 2, "heads": 2, "seq": 64})]


def _check_close(outs, ref):
    for o, r in zip(outs, ref, strict=True):
        o, r = np.asarray(o, np.float64), np.asarray(r, np.float64)
        # the scale from the finite reference values: random optimizer inputs give NaN (sqrt of a negative
        # second moment) where the reference has NaN too, and a NaN atol would demand bit-equal values elsewhere
        scale = np.abs(r[np.isfinite(r)]).max(initial=0.0)
        np.testing.assert_allclose(o, r, rtol=2e-5, atol=2e-5 * (1 + scale))


@pytest.mark.parametrize("name,shape", CASES, ids=[f"{n}-{'x'.join(map(str, s.values())) or 'default'}"
                                                   for n, s in CASES])
def test_every_switched_plan_simulates_to_the_reference(name, shape):
    g = asim.workload(name, **shape)
    inputs = workload_inputs(g)
    ref = asim.reference(g, inputs)
    for opts in SWITCHES:
        plan = asim.compile(g, strategy="astitch", gpu="V100", **opts)
        assert plan.options == opts
        _check_close(asim.simulate(plan, inputs).outputs, ref)


def _rows_stage(plan):
    return next(s for k in plan.kernels for s in k.stages if s.mapping.kind == "rows")


def test_no_horizontal_packing_gives_one_row_per_block_like_xla():
    g = asim.workload("row_reduce", rows=750000, cols=32)
    packed = _rows_stage(asim.compile(g, "astitch", "V100")).mapping
    assert packed.rows_per_block == 128 and packed.block == 1024     # 8 lanes x 4-element vectors per row
    m = _rows_stage(asim.compile(g, "astitch", "V100", horizontal_packing=False)).mapping
    assert (m.grid, m.block, m.rows_per_block) == (750000, 32, 1)


def test_no_global_stitching_cuts_figure7_into_kernels_without_grid_barriers():
    g = asim.workload("paper_fig7")
    paper = asim.compile(g, "astitch", "V100", launch_search=False)       # the paper's launch: Figure 7
    assert len(paper.kernels) == 1 and paper.kernels[0].global_barriers == 2
    plan = asim.compile(g, "astitch", "V100", global_stitching=False)
    assert len(plan.kernels) == 3
    assert all(k.global_barriers == 0 for k in plan.kernels)
    assert not any(v.scheme == "global" and v.stage >= 0 and not v.output
                   for k in plan.kernels for v in k.values.values())
    # power.1 and reduce.2 now leave their kernels through global memory, as kernel outputs
    outputs = {n for k in plan.kernels for n in k.outputs}
    assert {"power.1", "reduce.2", "multiply.1"} <= outputs


def test_no_task_splitting_keeps_each_long_row_in_one_block():
    g = asim.workload("softmax", rows=8, cols=65536)
    split = asim.compile(g, "astitch", "H100")        # 8 long rows: the launch search keeps a split
    assert max(s.mapping.splits for s in split.kernels[0].stages) > 1
    plan = asim.compile(g, "astitch", "H100", task_splitting=False)
    assert all(s.mapping.splits == 1 for k in plan.kernels for s in k.stages)
    assert plan.kernels[0].grid == 8
    assert not any("task splitting" in n for n in plan.kernels[0].notes)
    assert any("task splitting" in n for n in split.kernels[0].notes)


def test_no_regional_stitching_keeps_values_out_of_shared_memory():
    g = asim.workload("layernorm", rows=512, cols=768)
    # the paper's tree leaves a row's total on its first lane: mean and rstd cross stages in shared memory
    tree = asim.compile(g, "astitch", "V100", reduce_scheme="tree")
    assert any(v.space == "shared" for v in tree.kernels[0].values.values())
    plan = asim.compile(g, "astitch", "V100", regional_stitching=False, reduce_scheme="tree")
    assert not any(v.space == "shared" for k in plan.kernels for v in k.values.values())
    assert plan.kernels[0].global_barriers > 0
    # the shuffle leaves it in every lane: registers, neither shared memory nor a barrier, Regional on or off
    for shuffle in (asim.compile(g, "astitch", "V100"), asim.compile(g, "astitch", "V100", regional_stitching=False)):
        k = shuffle.kernels[0]
        assert k.values["mean"].space == k.values["rstd"].space == "register" and k.global_barriers == 0
        assert all(s.barrier_after == "none" for s in k.stages)


def test_no_register_reuse_recomputes_instead_of_keeping_values_in_registers():
    g = asim.workload("paper_fig7")
    kept = asim.compile(g, "astitch", "V100").kernels[0]
    assert kept.values["broadcast.2"].space == "register" and "kept in registers" in kept.values["broadcast.2"].why
    assert "broadcast.2" not in kept.stages[2].ops
    plan = asim.compile(g, "astitch", "V100", register_reuse=False)
    assert "broadcast.2" in plan.kernels[0].stages[2].ops          # recomputed where it is needed
    for k in plan.kernels:
        for s_index, s in enumerate(k.stages):
            for n in list(s.ops) + list(s.epilogue):
                for o in plan.graph[n].operands:
                    v = k.values.get(o.name)
                    if v is not None and v.space == "register" and v.stage >= 0:
                        assert v.stage == s_index or o.name in s.ops, f"{o.name} crosses stages in registers"


def test_no_vertical_packing_refuses_a_grid_barrier_over_more_than_one_wave():
    g = asim.workload("softmax", rows=75000, cols=32)      # 128 rows per block (8 lanes x 4-element vectors)
    # the paper's tree: the row max and sum cross stages in memory (a shuffle keeps them in every lane's registers)
    capped = asim.compile(g, "astitch", "V100", regional_stitching=False, reduce_scheme="tree")
    wave = asim.gpu("V100").blocks_per_wave(capped.kernels[0].block, capped.kernels[0].shared_bytes,
                                            capped.kernels[0].registers_per_thread)
    assert capped.kernels[0].global_barriers and capped.kernels[0].grid <= wave
    plan = asim.compile(g, "astitch", "V100", regional_stitching=False, vertical_packing=False, reduce_scheme="tree")
    assert len(plan.kernels) > 1 and all(k.global_barriers == 0 for k in plan.kernels)
    assert all(k.grid > wave for k in plan.kernels)
    assert "vertical packing off" in plan.kernels[0].notes[0]


def test_vertical_packing_off_changes_nothing_when_the_grid_fits_one_wave():
    g = asim.workload("paper_fig7")      # a switch shows the paper's launch rules: compared with them
    assert asim.compile(g, "astitch", "V100", vertical_packing=False).to_dict()["kernels"] == \
        asim.compile(g, "astitch", "V100", launch_search=False).to_dict()["kernels"]


def test_block_size_cap():
    g = asim.workload("layernorm", rows=256, cols=16384)        # long rows: the paper's rule keeps 512 lanes per row
    plan = asim.compile(g, "astitch", "V100", max_block_threads=128)
    assert all(k.block <= 128 for k in plan.kernels)
    assert asim.compile(g, "astitch", "V100", launch_search=False).kernels[0].block == 512


def test_options_are_recorded_printed_and_round_trip_through_json():
    g = asim.workload("paper_fig7")
    plan = asim.compile(g, "astitch", "V100", global_stitching=False, max_block_threads=256)
    assert plan.options == {"global_stitching": False, "max_block_threads": 256}
    assert "what-if: global_stitching=False, max_block_threads=256" in str(plan)
    back = asim.Plan.from_json(plan.to_json())
    assert back.options == plan.options and back.to_json() == plan.to_json()
    assert asim.compile(g, "astitch", "V100").options == {}
    assert asim.compile(g, "astitch", "V100", task_splitting=True).options == {}


@pytest.mark.parametrize("kwargs,words", [
    ({"horizontal_packin": False}, ["unknown astitch option", "horizontal_packing", "global_stitching",
                                    "max_block_threads"]),
    ({"global_stitching": "no"}, ["global_stitching must be True or False"]),
    ({"max_block_threads": 100}, ["power of two from 32 to 1024"]),
    ({"max_block_threads": 2048}, ["power of two from 32 to 1024"]),
    ({"max_block_threads": True}, ["power of two"]),
    ({"assumed_registers": 8}, ["assumed_registers must be an integer from 16 to 255"]),
    ({"assumed_registers": 40.0}, ["assumed_registers must be an integer"]),
])
def test_bad_options_are_astitch_errors(kwargs, words):
    with pytest.raises(asim.AStitchError) as e:
        asim.compile(asim.workload("paper_fig7"), "astitch", "V100", **kwargs)
    for w in words:
        assert w in str(e.value)


def test_options_belong_to_their_strategy():
    with pytest.raises(asim.AStitchError,
                       match="strategy 'tvm' takes none .strategies with options: xla, fusionstitching, astitch"):
        asim.compile(asim.workload("paper_fig7"), "tvm", "V100", global_stitching=False)
    with pytest.raises(asim.AStitchError, match="unknown xla option.s. 'global_stitching'; the what-if options are: "
                                                "fusion_rules"):
        asim.compile(asim.workload("paper_fig7"), "xla", "V100", global_stitching=False)


def test_xla_fusion_rules_are_recorded_printed_and_round_trip_through_json():
    """The paper-era XLA is a what-if setting of the xla strategy (strategies/xla_options.py)."""
    g = asim.workload("paper_fig7")
    plan = asim.compile(g, "xla", "V100", fusion_rules="tf-2.6")
    assert plan.options == {"fusion_rules": "tf-2.6"}
    text = str(plan)
    assert "what-if: fusion_rules=tf-2.6" in text and "fusion rules tf-2.6" in text
    back = asim.Plan.from_json(plan.to_json())
    assert back.options == plan.options and back.to_json() == plan.to_json()
    default = asim.compile(g, "xla", "V100")
    assert default.options == {} and "fusion rules openxla-2024" in str(default)
    assert asim.compile(g, "xla", "V100", fusion_rules="openxla-2024").options == {}
    with pytest.raises(asim.AStitchError, match="fusion_rules must be one of 'openxla-2024', 'tf-2.6'"):
        asim.compile(g, "xla", "V100", fusion_rules="tf-1.15")


def test_options_help_covers_every_option():
    from astitch_sim.planning.strategies.xla_options import XlaOptions
    doc = asim.compile.__doc__
    for options in (asim.AStitchOptions, XlaOptions):
        assert set(options.HELP) == set(options.known())
        assert all(name in doc for name in options.known())


def test_transfers_name_the_space_each_edge_uses():
    g = asim.workload("paper_fig7")
    astitch = {(a, b): s for a, b, _, s in asim.compile(g, "astitch", "V100").transfers()}
    assert astitch[("add.1", "reduce.1")] == "register"
    assert astitch[("power.1", "broadcast.2")] == "global"
    assert astitch[("broadcast.2", "multiply.1")] == "register"
    assert astitch[("param.1", "add.1")] == "global"
    xla = {(a, b): s for a, b, _, s in asim.compile(g, "xla", "V100").transfers()}
    assert xla[("reduce.1", "divide.1")] == "global"          # a reduce result leaves its XLA kernel
    sm = asim.compile(asim.workload("layernorm", rows=512, cols=768), "astitch", "V100")
    assert "shared" in {s for *_, s in sm.transfers()}


def test_every_value_says_why_it_lives_where_it_does():
    for strategy in asim.STRATEGIES:
        plan = asim.compile(asim.workload("layernorm", rows=512, cols=768), strategy, "V100")
        for k in plan.generated:
            for v in k.values.values():
                assert v.why, (strategy, k.name, v.node)
                assert ("global memory" in v.why) == (v.space == "global" or v.output), v.why


@pytest.mark.parametrize("opts", [{"global_stitching": False}, {"register_reuse": False},
                                  {"horizontal_packing": False, "task_splitting": False}])
def test_switched_plans_run_in_the_numba_backend(opts):
    import gpu_backend
    g = asim.workload("paper_fig7", n=8, c=64)
    inputs = workload_inputs(g)
    plan = asim.compile(g, "astitch", "V100", **opts)
    _check_close(gpu_backend.run(plan, inputs), asim.reference(g, inputs))


def test_assumed_registers_is_a_planning_input_not_a_switch():
    """More assumed registers: fewer resident blocks, so a grid-barrier kernel's grid shrinks; past 64 per
    thread a 1024-thread block no longer fits an SM's register file and the planner takes smaller blocks.
    It is what apply_compiler re-plans with, so never-behind still applies (it is no what-if switch)."""
    g = asim.workload("global_norm", rows=1024, cols=1024)
    base = asim.compile(g, "astitch", "H100")
    more = asim.compile(g, "astitch", "H100", assumed_registers=64)
    assert more.options == {"assumed_registers": 64}
    assert not any(n.startswith("what-if") for n in more.notes)
    assert any("never behind XLA" in n and "not applied" not in n for n in more.notes)
    (kb,), (km,) = base.kernels, more.kernels
    assert km.global_barriers and km.grid < kb.grid
    assert km.grid <= more.gpu.blocks_per_wave(km.block, km.shared_bytes, km.registers_per_thread)
    huge = asim.compile(g, "astitch", "H100", assumed_registers=128, never_behind=False)
    assert all(k.block <= 512 for k in huge.kernels)
    x = workload_inputs(g, 0)
    for p in (more, huge):
        for got, want in zip(asim.simulate(p, x).outputs, asim.reference(g, x), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


HLO_FIXTURES = sorted(p.stem for p in (Path(TESTS_FILE).parent / "fixtures" / "hlo").glob("*.hlo"))


@pytest.mark.parametrize("name", HLO_FIXTURES)
def test_every_switch_on_every_hlo_fixture_simulates_to_the_reference(name):
    """What the explorer's What-if view lets a user do to any fixture.  Cut without Global stitching, a scope's
    later kernel recomputes a cheap op of the earlier one and reads that op's operand from global memory:
    the earlier kernel must write it (chain_0, chain_5 read a value no kernel had written)."""
    g = asim.from_hlo_file(Path(TESTS_FILE).parent / "fixtures" / "hlo" / f"{name}.hlo")
    inputs = asim.random_inputs(g, 0)
    ref = asim.reference(g, inputs)
    for opts in SWITCHES:
        _check_close(asim.simulate(asim.compile(g, "astitch", "H100", **opts), inputs).outputs, ref)


@pytest.mark.slow
@pytest.mark.parametrize("name, opts", [
    ("gpt_forward", {"global_stitching": False, "regional_stitching": False}),
    ("gqa_attention", {"global_stitching": False, "regional_stitching": False}),
    ("gqa_attention", {"regional_stitching": False, "vertical_packing": False})])
def test_switched_model_fixtures_write_what_their_later_kernels_read(name, opts):
    g = asim.from_hlo_file(Path(TESTS_FILE).parent / "fixtures" / "models" / f"{name}.hlo")
    inputs = asim.random_inputs(g, 0)
    _check_close(asim.simulate(asim.compile(g, "astitch", "H100", **opts), inputs).outputs, asim.reference(g, inputs))
