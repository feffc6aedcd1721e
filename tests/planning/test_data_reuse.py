"""Issue 13, items 3 and 4: AStitch reads each input once where the paper's data reuse allows it.

* Sibling reductions of one input (group norm's sum and sum of squares) share a stage, as XLA's
  multi-output fusion shares a kernel: the input is read once for all of them.
* Hierarchical data reuse of loads: an input a thread loads in one stage and reads again, at the same
  elements, in a later stage under the same mapping stays in its registers -- within the register
  budget for values carried across stages; over it, the plan re-reads and its notes say why.

Bytes come from the SIMT model's counters and are compared with the input's own size.
"""
import json
import os
import re

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from anchor import TESTS_FILE

HERE = os.path.dirname(TESTS_FILE)
MiB = 1 << 20


def group_norm(n, h, w, c, groups, eps=1e-6):
    """flax.linen.GroupNorm as JAX lowers it (tests/fixtures/hlo/groupnorm.hlo): NHWC, statistics over
    (H, W, C/G) of ``reshape(x, [N, H, W, G, C/G])``, var = E[x^2] - E[x]^2."""
    g = asim.Graph("group_norm")
    x = g.parameter("x", (n, h, w, c))
    scale = g.parameter("scale", (c,))
    bias = g.parameter("bias", (c,))
    xg = g.reshape(x, (n, h, w, groups, c // groups), name="xg")
    count = g.broadcast(g.constant(float(h * w * c // groups), "f32", name="count"), (n, groups), (), name="count.b")
    mean = g.divide(g.reduce(xg, (1, 2, 4), name="sum"), count, name="mean")
    meansq = g.divide(g.reduce(g.multiply(xg, xg, name="sq"), (1, 2, 4), name="sumsq"), count, name="meansq")
    var = g.subtract(meansq, g.multiply(mean, mean, name="mean2"), name="var")
    rstd = g.rsqrt(g.add(var, g.broadcast(g.constant(eps, "f32", name="eps"), (n, groups), (), name="eps.b"),
                         name="var_eps"), name="rstd")

    def per_channel(v, name):      # [N, G] -> [N, H, W, C]: each group's value over its C/G channels
        b = g.broadcast(v, (n, groups, c // groups), (0, 1), name=name + ".g")
        return g.broadcast(g.reshape(b, (n, c), name=name + ".c"), (n, h, w, c), (0, 3), name=name + ".b")

    xc = g.subtract(x, per_channel(mean, "mean"), name="xc")
    y = g.multiply(xc, per_channel(rstd, "rstd"), name="y")
    y = g.multiply(y, g.broadcast(scale, (n, h, w, c), (3,), name="scale.b"), name="scaled")
    out = g.add(y, g.broadcast(bias, (n, h, w, c), (3,), name="bias.b"), name="out")
    g.set_outputs(out)
    return g


def group_norm_nchw(n, c, h, w, groups, eps=1e-6):
    """torch.nn.GroupNorm as astitch-sim's PyTorch import decomposes it (``native_group_norm``): statistics over
    ``x`` viewed as ``[N, G, C/G * H * W]`` (two passes: the mean, then the mean of squared deviations), the
    normalisation over that view, reshaped back to ``[N, C, H, W]`` for the per-channel affine."""
    g = asim.Graph("group_norm_nchw")
    x = g.parameter("x", (n, c, h, w))
    weight, bias = g.parameter("weight", (c,)), g.parameter("bias", (c,))
    view = (n, groups, c // groups * h * w)
    xg = g.reshape(x, view, name="xg")

    def mean_of(v, name):
        total = g.reduce(v, (2,), name=name + "_sum")
        count = g.broadcast(g.constant(float(view[2]), "f32", name=name + "_n"), (n, groups), (), name=name + "_nb")
        return g.broadcast(g.divide(total, count, name=name), view, (0, 1), name=name + "_b")
    centred = g.subtract(xg, mean_of(xg, "mean"), name="centred")
    var = mean_of(g.multiply(centred, centred, name="sq"), "var")
    eps_b = g.broadcast(g.constant(eps, "f32", name="eps"), view, (), name="eps_b")
    normed = g.multiply(centred, g.rsqrt(g.add(var, eps_b, name="var_eps"), name="rstd"), name="normed")
    y = g.reshape(normed, (n, c, h, w), name="y")
    y = g.multiply(y, g.broadcast(weight, (n, c, h, w), (1,), name="weight_b"), name="scaled")
    g.set_outputs(g.add(y, g.broadcast(bias, (n, c, h, w), (1,), name="bias_b"), name="out"))
    return g


def _inputs(g, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape).astype(np.float32) for p in g.inputs]


def _stage_reads(res):
    return [(s.stage, s.global_bytes_read) for k in res.stats.kernels for s in k.stages]


def _close(out, ref, rtol=1e-4, atol=1e-4):
    for o, r in zip(out, ref, strict=True):
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)


# -- item 3: sibling reductions -------------------------------------------------------------------

@pytest.mark.parametrize("shape", [dict(n=2, h=4, w=4, c=16, groups=4), dict(n=4, h=16, w=16, c=64, groups=8)])
def test_group_norm_statistics_share_one_stage_and_read_x_once(shape):
    """The raw stitch plan (never_behind=False): at the larger shape never-behind keeps XLA's kernels,
    whose elementwise kernel, in full blocks of 4-element vectors, now reads its broadcast statistics
    as few times as the stitched stage does, so the split combine's few extra bytes (3840 of 0.8 MB)
    decide against stitching -- the bytes-only rule issue 28 asks to replace by predicted time."""
    g = group_norm(**shape)
    plan = asim.compile(g, "astitch", "V100", never_behind=False)
    (k,) = plan.generated
    reducing = [s for s in k.stages if s.reduces]
    assert len(reducing) == 1 and set(reducing[0].reduces) == {"sum", "sumsq"}, str(plan)
    ins = _inputs(g)
    res = asim.simulate(plan, ins)
    x_bytes = g["x"].nbytes
    # the one sibling group reads x exactly once (the later elementwise stage reads it again: other mapping);
    # a split statistic is read back from global memory after its grid barrier, by each block that holds it
    read_back = 2 * k.grid * g["sum"].nbytes if reducing[0].mapping.splits > 1 else 0
    assert x_bytes <= _stage_reads(res)[0][1] <= x_bytes + read_back
    _close(res.outputs, asim.reference(g, ins))


def test_an_input_read_again_under_another_mapping_is_said_so():
    """Issue 28: the group norm's statistics map x as the reduction's 5-D view, its normalisation as the 4-D
    output (the 5-D view's columns stride through memory: ``plan.mapping.lanes_contiguous``; a view whose rows
    run along memory is shared: the test above), so the normalisation loads x again.  The plan says so, naming
    both mappings and why (at 8x64x64x320 x is 40 MiB, more than an H100's whole register file: no mapping could
    keep it on chip between the stages)."""
    g = group_norm(n=4, h=16, w=16, c=64, groups=8)
    plan = asim.compile(g, "astitch", "H100", never_behind=False)
    (k,) = plan.generated
    assert len(k.stages) == 2 and k.stages[0].mapping != k.stages[1].mapping
    (note,) = [n for n in k.notes if n.startswith("no data reuse of input x:")]
    assert "4x16x16x8x8" in note and "4x16x16x64" in note and "stage 1 loads x from global memory again" in note
    # the statistics' columns run over (n, g), 8 floats apart: an elementwise stage does not take such a mapping
    assert "stage 0's lanes stride through memory (neighbouring lanes step along dims (0, 3)" in note
    assert note in str(plan)                                           # print(plan) shows it
    # a layernorm's stages share one mapping: x is kept in registers, nothing to say
    ln = asim.compile(asim.workload("layernorm", rows=64, cols=256), "astitch", "H100").generated[0]
    assert not [n for n in ln.notes if n.startswith("no data reuse")]
    assert any(n.startswith("hierarchical data reuse: input x is loaded once") for n in ln.notes)


@pytest.mark.parametrize("shape", [dict(n=2, c=16, h=3, w=5, groups=4), dict(n=2, c=320, h=32, w=32, groups=32)])
def test_group_norm_over_a_view_shares_its_mapping_and_reads_x_once(shape):
    """A PyTorch group norm: statistics over ``x`` viewed as ``[N, G, rest]``, the affine over ``[N, C, H, W]``.
    The affine's stage takes the statistics' row mapping (its ops are that domain reshaped: ``flatindex.reshapes``;
    the rows run along contiguous memory), so every stage gives each element to the same thread: ``x`` is loaded
    once and kept in registers, and the kernel moves ``x`` in and ``out`` back, nothing else of their size
    (before, the affine's own flat mapping made it load ``x`` again: issue 28).  The second shape is diffusers'
    ResnetBlock2D at 32x32 latents."""
    g = group_norm_nchw(**shape)
    plan = asim.compile(g, "astitch", "H100")
    (k,) = plan.generated
    view = (shape["n"], shape["groups"], g["x"].size // (shape["n"] * shape["groups"]))
    assert [s.mapping.domain for s in k.stages] == [view] * len(k.stages) and len(k.stages) == 3, str(plan)
    assert all(s.mapping == k.stages[0].mapping for s in k.stages)
    assert k.stages[-1].dominant == "out" and g["out"].shape != view      # computed over the view, stored as itself
    assert any(n.startswith("hierarchical data reuse: input x is loaded once") for n in k.notes), str(plan)
    assert not [n for n in k.notes if n.startswith("no data reuse")]
    (why,) = [n for n in k.notes if n.startswith("adaptive thread mapping over a view: stage 2 computes out")]
    assert why in str(plan)                                                # print(plan) says what it decided
    ins = _inputs(g)
    res = asim.simulate(plan, ins)
    def x_read(r):         # bytes of x's sectors read, every stage of every kernel
        return 32 * sum(s.tensors["x"].read_sectors for k in r.stats.kernels for s in k.stages if "x" in s.tensors)
    if view[2] * 4 % 32 == 0:                       # rows start on sector boundaries: each sector read once
        assert x_read(res) == g["x"].nbytes
        assert res.stats.global_bytes_read < 1.01 * g["x"].nbytes          # weight and bias: a few per block
    else:                                           # a sector two rows share is read for each
        assert x_read(res) <= g["x"].nbytes + 32 * view[0] * view[1]
    assert res.stats.global_bytes_written == g["out"].nbytes
    assert x_read(asim.simulate(asim.compile(g, "xla", "H100"), ins)) >= 2 * g["x"].nbytes    # XLA: once per kernel
    _close(res.outputs, asim.reference(g, ins))


@pytest.mark.slow
@pytest.mark.parametrize("shape", [dict(n=8, c=320, h=64, w=64, groups=32), dict(n=16, c=96, h=61, w=67, groups=24)])
def test_group_norm_over_a_view_at_real_sizes(shape):
    """The stage over a view at real sizes (10.5M elements, rows of 40960; 6.3M elements of odd extents, rows of
    16348): index arithmetic past 2^13 and 2^16 elements, every output element against the numpy reference."""
    g = group_norm_nchw(**shape)
    plan = asim.compile(g, "astitch", "H100")
    (k,) = plan.generated
    assert k.stages[-1].dominant == "out" and k.stages[-1].mapping.domain != g["out"].shape, str(plan)
    ins = _inputs(g)
    _close(asim.simulate(plan, ins).outputs, asim.reference(g, ins), rtol=1e-5, atol=1e-5)


def test_a_value_computed_over_a_view_is_computed_once():
    """``exp`` of a softmax's ``[N, C, H, W]`` input, in a stage over the statistics' ``[N, G, rest]`` view, is read
    by the next stage (over the same view) from where it was made: computed at every element of its stage
    (``flatindex.reshapes``), not recomputed (an expensive op: one exponential per element in all)."""
    g = asim.Graph("exp_over_a_view")
    x = g.parameter("x", (2, 8, 3, 4))
    view = (2, 2, 48)
    v = g.reshape(x, view, name="v")
    c = g.subtract(v, g.broadcast(g.reduce(v, (2,), reducer="max", name="m"), view, (0, 1), name="mb"), name="c")
    e = g.exponential(g.reshape(c, x.shape, name="y"), name="e")
    ev = g.reshape(e, view, name="ev")
    out = g.divide(ev, g.broadcast(g.reduce(ev, (2,), name="s"), view, (0, 1), name="sb"), name="out")
    g.set_outputs(g.reshape(out, x.shape, name="o4"), e)
    plan = asim.compile(g, "astitch", "H100")
    assert sum("e" in s.ops for k in plan.generated for s in k.stages) == 1, str(plan)
    ins = _inputs(g)
    res = asim.simulate(plan, ins)
    once = sum(n.opdef.flops * n.size for n in g if n.opdef.cost == "expensive")     # exp and the divide, once each
    assert sum(s.expensive_flops for k in res.stats.kernels for s in k.stages) == once
    _close(res.outputs, asim.reference(g, ins))


def test_a_value_of_the_domains_size_reached_through_a_transpose_is_recomputed_not_read_back():
    """Only a stage's dominant is taken as computed at every element of a domain it is a reshape of: an op of
    ``[4, 2, 8, 16]`` in a stage over the transposed ``[8, 16, 4, 2]`` output has the domain's size but not its
    elements' places, so a later stage recomputes it as before, rather than read it back from global memory
    through a grid barrier (``tests/fixtures/hlo/chain_1.hlo``: 13.0 KiB and no grid barrier, against 24.5 KiB
    and one when it was read back)."""
    g = asim.from_hlo(open(os.path.join(HERE, "fixtures", "hlo", "chain_1.hlo")).read())
    (k,) = asim.compile(g, "astitch", "H100").generated
    assert k.global_barriers == 0 and not any(v.space == "global" and v.stage >= 0 and not v.output
                                            for v in k.values.values()), k


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_a_stage_of_another_size_recomputing_a_view_value_plans_and_runs(strategy):
    """A later stage of another size (a concatenate of the result) reads what a stage over a view computed: no
    root of it there gets the later stage's index (the planner crashed on a rank mismatch)."""
    g = asim.Graph("view_then_concatenate")
    p = g.parameter("p", (37,))
    v = g.reshape(p, (1, 37), name="v")
    c = g.subtract(v, g.broadcast(g.reduce(v, (1,), name="r"), (1, 37), (0,), name="b"), name="c")
    o = g.multiply(g.reshape(c, (37,), name="back"), p, name="o")
    g.set_outputs(o, g.concatenate([o, o], 0, name="cat"))
    ins = _inputs(g)
    _close(asim.simulate(asim.compile(g, strategy, "H100"), ins).outputs, asim.reference(g, ins))


def test_group_norm_fixture_from_jax_reads_x_once_per_sibling_group():
    g = asim.from_hlo(open(os.path.join(HERE, "fixtures", "hlo", "groupnorm.hlo")).read())
    plan = asim.compile(g, "astitch", "V100")
    (k,) = plan.generated
    assert [len(s.reduces) for s in k.stages] == [2, 0], str(plan)
    ins = _inputs(g)
    res = asim.simulate(plan, ins)
    x = g.inputs[0]
    assert _stage_reads(res)[0] == (0, x.nbytes)
    # x is read once by the statistics and once by the normalisation: twice in all, not three times
    x_reads = sum(b for _, b in _stage_reads(res)) - sum(p.nbytes for p in g.inputs[1:])
    assert x_reads == 2 * x.nbytes
    _close(res.outputs, asim.reference(g, ins))


def test_a_sibling_that_needs_the_first_reduce_result_gets_its_own_stage():
    """layernorm's variance needs the mean: not a sibling (merging would read the mean too early)."""
    g = asim.workload("layernorm", rows=64, cols=64)          # small enough that no estimate reaches the cap
    k = asim.compile(g, "astitch", "V100").generated[0]
    assert [s.reduces for s in k.stages if s.reduces] == [("mean_sum",), ("var_sum",)]


# -- item 4: inputs kept in registers ------------------------------------------------------------

def test_bert_layernorm_reads_x_from_global_memory_once():
    g = asim.workload("layernorm", rows=16384, cols=768)
    plan = asim.compile(g, "astitch", "V100")
    (k,) = plan.generated
    v = k.values["x"]
    assert (v.space, v.loaded_in, v.read_later) == ("register", 0, (1,))
    text = str(plan)
    assert "(input loaded once, kept in registers)" in text and "hierarchical data reuse: input x" in text
    ins = workload_inputs(g)
    res = asim.simulate(plan, ins)
    x_bytes = g["x"].nbytes
    reads = dict(_stage_reads(res))
    assert reads[0] == x_bytes and reads[1] == 0, reads      # stage 1 takes x from registers
    assert res.stats.kernels[0].stages[1].register_reuse >= g["x"].size
    # x read once, out written once, gamma and beta once per block (was 144 MiB before the rows were read in
    # vectors with a register budget for them, 192 MiB with x read in stages 0 and 1)
    assert res.stats.global_bytes == 2 * x_bytes + k.grid * (g["gamma"].nbytes + g["beta"].nbytes)
    _close(res.outputs, asim.reference(g, ins))

    # the what-if switch that forbids register reuse keeps no input either: x is read again (at least)
    # (a what-if switch turns the launch search off: compare with the same kernel at the paper's launch)
    off_plan = asim.compile(g, "astitch", "V100", register_reuse=False)
    assert off_plan.generated[0].values["x"].loaded_in == -1
    paper = asim.simulate(asim.compile(g, "astitch", "V100", launch_search=False), ins).stats
    assert asim.simulate(off_plan, ins).stats.global_bytes >= paper.global_bytes + x_bytes


def test_over_the_register_budget_the_input_is_read_again_and_the_plan_says_why():
    # 16384-long rows: 512 lanes per row, 8 vectors of 4 each (32 values); xc and x would need 64 registers,
    # over the 48 a vectored row kernel may carry across stages
    g = asim.workload("layernorm", rows=256, cols=16384)
    plan = asim.compile(g, "astitch", "V100")
    (k,) = plan.generated
    assert k.values["x"].space == "global" and k.values["x"].loaded_in == -1
    assert k.values["xc"].space == "register"
    text = str(plan)
    assert "over the budget of 48" in text and "input x is not kept in registers" in text
    ins = workload_inputs(g)
    res = asim.simulate(plan, ins)
    reads = dict(_stage_reads(res))
    assert reads[0] == reads[1] == g["x"].nbytes              # read again, as the note says
    _close(res.outputs, asim.reference(g, ins))


def test_kept_inputs_count_in_the_register_estimate():
    from astitch_sim.planning.kernel_builder import assemble_kernel
    g = asim.workload("layernorm", rows=64, cols=64)          # small enough that no estimate reaches the cap
    k = asim.compile(g, "astitch", "V100").generated[0]
    stages = [asim.Stage(s.dominant, list(s.ops), s.mapping, epilogue=list(s.epilogue)) for s in k.stages]
    kept = assemble_kernel(g, "k", stages, asim.gpu("V100"), {"out"}, stitch=True, keep_inputs=True)
    stages = [asim.Stage(s.dominant, list(s.ops), s.mapping, epilogue=list(s.epilogue)) for s in k.stages]
    plain = assemble_kernel(g, "k", stages, asim.gpu("V100"), {"out"}, stitch=True)
    per_thread = k.stages[0].mapping.elements_per_thread
    assert kept.values["x"].loaded_in == 0 and plain.values["x"].loaded_in == -1
    assert kept.registers_per_thread - plain.registers_per_thread == 2 * per_thread


def test_a_plan_with_a_kept_input_round_trips_through_json_and_bad_edits_are_refused():
    g = asim.workload("rmsnorm", rows=32, cols=128)
    plan = asim.compile(g, "astitch", "V100")
    back = asim.Plan.from_json(plan.to_json())
    assert back.kernels[0].values["x"].loaded_in == 0
    ins = workload_inputs(g)
    assert asim.simulate(back, ins).stats.global_bytes == asim.simulate(plan, ins).stats.global_bytes
    d = json.loads(plan.to_json())
    d["kernels"][0]["values"]["x"]["loaded_in"] = 5
    with pytest.raises(asim.AStitchError, match="loaded_in=5"):
        asim.Plan.from_dict(d).validate()
    # plans without kept inputs write no loaded_in at all (their JSON is what it was)
    xla = json.loads(asim.compile(g, "xla", "V100").to_json())
    assert all("loaded_in" not in v for k in xla["kernels"] for v in k["values"].values())


def test_transfers_say_the_loading_stage_reads_global_and_the_later_one_registers():
    g = asim.workload("layernorm", rows=64, cols=256)
    t = asim.compile(g, "astitch", "V100").transfers()
    assert ("x", "mean_sum", 0, "global") in t and ("x", "xc", 0, "register") in t


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("name,shape", [("layernorm", dict(rows=300, cols=1000)), ("softmax", dict(rows=33, cols=70)),
                                        ("rmsnorm", dict(rows=9000, cols=64))])
def test_every_strategy_still_matches_numpy(strategy, name, shape):
    g = asim.workload(name, **shape)
    ins = workload_inputs(g)
    _close(asim.simulate(asim.compile(g, strategy, "V100"), ins).outputs, asim.reference(g, ins))


# -- the Numba backend in the CUDA simulator (tiny shapes) ------------------------------------------

@pytest.fixture(scope="module")
def cudasim():
    """The Numba backend: on a GPU, or (tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1 without one) Numba's simulator."""
    import gpu_backend
    return gpu_backend


@pytest.mark.parametrize("graph", ["layernorm", "group_norm", "groupnorm_fixture", "softmax"])
def test_numba_backend_runs_sibling_stages_and_kept_inputs(cudasim, graph):
    if graph == "group_norm":
        g = group_norm(n=2, h=2, w=3, c=8, groups=2)
    elif graph == "groupnorm_fixture":
        g = asim.from_hlo(open(os.path.join(HERE, "fixtures", "hlo", "groupnorm.hlo")).read())
    else:
        g = asim.workload(graph, rows=5, cols=40)
    plan = asim.compile(g, "astitch", "V100")
    src = cudasim.generate_source(plan)
    if graph in ("layernorm", "softmax"):
        assert "keep input x in registers for a later stage" in src and re.search(r"= \(r_x\[\w+\] - ", src)
    if graph == "group_norm":
        assert "accumulate sum " in src and "accumulate sumsq " in src
    ins = _inputs(g)
    _close(cudasim.run(plan, ins), asim.reference(g, ins))
