"""The reduction scheme (astitch_sim/plan/reduce_scheme.py): warp shuffles by default, the paper's tree as a what-if.

Checked four ways: the planner's decision (recorded, printed, serialized, validated, the same for every
strategy); the SIMT model (same values as the reference, the tree and the shuffle agree, the counters
say where the barriers went); the generated kernels under Numba's CUDA simulator (warp per row, several
warps per row, rows shorter than a warp, argmax pairs, split rows, vertical packing, integer and bool
accumulators); and the two schemes against each other, bit for bit where their fold order is the same.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim import AStitchError
from astitch_sim.ir.graph import Graph
from astitch_sim.planning.kernel_builder import assemble_kernel
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.plan.plan import Plan, Stage
from astitch_sim.plan.reduce_scheme import butterfly, choose, tree_barriers
from astitch_sim.plan.vocabulary import ReduceScheme
from anchor import TESTS_FILE
from tiers import fast_share

SCHEMES = ("shuffle", "tree")


# -- helpers --------------------------------------------------------------------------------------------------
def remap(plan: Plan, block: int, grid: int, tpr: int, splits: int = 1, combine: str = "none",
          scheme: str = "shuffle") -> Plan:
    """``plan`` with every rows stage re-mapped (block x grid, ``tpr`` threads per row), rebuilt by the
    compiler's own ``assemble_kernel`` preferring ``scheme`` (scheme, values, barriers, scratch)."""
    kernels = []
    for k in plan.kernels:
        if k.kind != "generated":
            kernels.append(k)
            continue
        stages = []
        for s in k.stages:
            m = s.mapping
            if m.kind == "rows":
                m = ThreadMapping("rows", m.domain, m.groups, block=block, grid=grid, threads_per_row=tpr,
                                  splits=splits, combine=combine if splits > 1 else "none")
            else:
                m = ThreadMapping("flat", m.domain, m.groups, block=block, grid=grid)
            stages.append(Stage(s.dominant, list(s.ops), m, list(s.epilogue)))
        kernels.append(assemble_kernel(plan.graph, k.name, stages, plan.gpu, set(k.outputs),
                                       stitch=len(stages) > 1, plan_vectors=False, reduce_scheme=scheme))
    return Plan(plan.graph, plan.strategy, plan.gpu, kernels, list(plan.notes)).validate()


def close(got, want, tol=1e-5):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol, equal_nan=True)
        else:
            np.testing.assert_array_equal(a, b)


def argmax_graph(rows, cols):
    g = Graph("argmax_rows")
    x = g.parameter("x", (rows, cols))
    g.set_outputs(g.argmax(x, 1, name="amax"), g.reduce(x, (1,), reducer="max", name="rmax"))
    return g


def int_graph(rows, cols):
    g = Graph("int_rows")
    x = g.parameter("x", (rows, cols), "s32")
    b = g.parameter("b", (rows, cols), "pred")
    g.set_outputs(g.reduce(x, (1,), name="isum"), g.reduce(b, (1,), reducer="or", name="any"))
    return g


# -- the planner's decision -------------------------------------------------------------------------------------
def test_every_strategy_gets_the_same_rule_and_the_tree_on_request():
    g = asim.workload("layernorm", rows=64, cols=768)
    for strategy in asim.STRATEGIES:
        for scheme in SCHEMES:
            p = asim.compile(g, strategy, "H100", reduce_scheme=scheme)
            stages = [s for k in p.generated for s in k.stages if s.reduces]
            assert stages, strategy
            for s in stages:
                assert s.reduce_scheme == choose(s, scheme)[0] == scheme, (strategy, scheme)
                assert s.reduce_why
            assert p.options == ({} if scheme == "shuffle" else {"reduce_scheme": "tree"})


def test_rule_table():
    def stage(kind, block, tpr, domain=(64, 768)):
        groups = ((0,), (1,)) if kind == "rows" else ((), (0,), (1,))
        m = ThreadMapping(kind, domain, groups, block=block, grid=4, threads_per_row=tpr)
        return Stage("r", ["r"], m, reduces=("r",))
    assert choose(stage("rows", 256, 32))[0] is ReduceScheme.SHUFFLE          # warp per row
    assert choose(stage("rows", 256, 8))[0] is ReduceScheme.SHUFFLE           # 4 rows per warp
    assert choose(stage("rows", 768, 768))[0] is ReduceScheme.SHUFFLE         # 24 warps per row
    assert choose(stage("rows", 256, 1))[0] is ReduceScheme.NONE              # a thread per row
    assert "neither" in choose(stage("rows", 288, 24))[1]                     # rows straddle warps: tree
    assert choose(stage("rows", 48, 16))[0] is ReduceScheme.TREE              # not whole warps
    assert "column" in choose(stage("columns", 256, 32))[1]
    assert choose(stage("rows", 256, 32), "tree")[0] is ReduceScheme.TREE
    assert butterfly(32) == (16, 8, 4, 2, 1) and butterfly(3) == (2, 1) and butterfly(1) == ()
    assert tree_barriers(32) == 6 and tree_barriers(768) == 11


def test_printed_serialized_and_old_json_loads_as_tree():
    g = asim.workload("softmax", rows=64, cols=32)
    p = asim.compile(g, "astitch", "H100")
    assert "reduce: shuffle (a row's 8 lanes lie in one warp" in str(p)
    q = asim.Plan.from_json(p.to_json())
    assert q.to_json() == p.to_json()
    # a plan written before schemes were recorded: what the tree plan writes, without the new keys
    tp = asim.compile(g, "astitch", "H100", reduce_scheme="tree")
    d = json.loads(tp.to_json())
    d["options"] = {}
    for k in d["kernels"]:
        for s in k["stages"]:
            del s["reduce_scheme"], s["reduce_why"]
    old = asim.Plan.from_dict(d).validate()
    assert [s.reduce_scheme for s in old.kernels[0].stages if s.reduces] == ["tree"] * 2
    assert old.kernels[0].scratch_bytes == tp.kernels[0].scratch_bytes > p.kernels[0].scratch_bytes == 0
    close(asim.simulate(old, asim.random_inputs(g, seed=1)).outputs,
          asim.simulate(tp, asim.random_inputs(g, seed=1)).outputs, 0)


def test_bad_choices_are_refused():
    g = asim.workload("softmax", rows=64, cols=32)
    with pytest.raises(AStitchError, match="unknown reduction scheme 'warp'"):
        asim.compile(g, "xla", "H100", reduce_scheme="warp")
    with pytest.raises(AStitchError, match="not a choice"):
        asim.compile(g, "xla", "H100", reduce_scheme="none")
    p = asim.compile(g, "xla", "H100")
    with pytest.raises(AStitchError, match="no reduction task has several threads|use 'shuffle' or 'tree'"):
        p.with_stage(0, 0, reduce_scheme="none").validate()
    fig7 = asim.compile(asim.workload("paper_fig7", n=8, c=16), "xla", "H100")
    col = next(i for i, k in enumerate(fig7.kernels) if k.kind == "generated" and k.stages[0].mapping.kind == "columns"
               and k.stages[0].reduces)
    with pytest.raises(AStitchError, match="reduces by shuffle, but a column"):
        fig7.with_stage(col, 0, reduce_scheme="shuffle").validate()
    t = asim.compile(g, "xla", "H100", reduce_scheme="tree")
    with pytest.raises(AStitchError, match="scratch"):
        t.with_kernel(0, scratch_bytes=0, shared_bytes=0).validate()


# -- the SIMT model ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("workload,shape", [("softmax", dict(rows=64, cols=32)), ("layernorm", dict(rows=16, cols=768)),
                                            ("paper_fig7", dict(n=8, c=16)), ("cross_entropy", dict(rows=32, cols=64))])
def test_simt_every_strategy_matches_reference_under_both_schemes(workload, shape):
    g = asim.workload(workload, **shape)
    inputs = asim.random_inputs(g, seed=3)
    want = asim.reference(g, inputs)
    for strategy in asim.STRATEGIES:
        for scheme in SCHEMES:
            r = asim.simulate(asim.compile(g, strategy, "H100", reduce_scheme=scheme), inputs)
            close(r.outputs, want, 1e-4)


def test_simt_rows_within_a_warp_give_identical_values_and_no_barrier():
    g = asim.workload("softmax", rows=256, cols=32)
    inputs = asim.random_inputs(g, seed=5)
    got = {s: asim.simulate(asim.compile(g, "astitch", "H100", reduce_scheme=s), inputs) for s in SCHEMES}
    for a, b in zip(got["shuffle"].outputs, got["tree"].outputs, strict=True):
        np.testing.assert_array_equal(a, b)            # the butterfly's lane 0 folds the tree's pairs
    sh, tr = got["shuffle"].stats, got["tree"].stats
    assert sh.reduction_barriers == 0 and tr.reduction_barriers > 0
    k = asim.compile(g, "astitch", "H100").kernels[0]
    m = k.stages[0].mapping
    # 2 reduces (max, sum), log2(lanes per row) steps each, in every warp of every block on every trip
    assert m.threads_per_row == 8 and len(butterfly(8)) == 3      # 8 lanes x 4-element vectors per row
    assert sh.shuffles == 2 * 3 * (m.block // 32) * m.grid * m.task_iterations
    assert tr.shuffles == 0
    assert sh.shared_bytes < tr.shared_bytes


def test_simt_rows_of_several_warps_pay_one_barrier_per_trip():
    g = asim.workload("layernorm", rows=32, cols=4096)          # 1024 vectors of 4 per row: 4 warps per row
    inputs = asim.random_inputs(g, seed=2)
    for strategy in ("xla", "astitch"):
        sh = asim.simulate(asim.compile(g, strategy, "H100"), inputs)
        tr = asim.simulate(asim.compile(g, strategy, "H100", reduce_scheme="tree"), inputs)
        plan = asim.compile(g, strategy, "H100")
        want = sum(s.mapping.grid * s.mapping.task_iterations for k in plan.generated for s in k.stages
                   if s.reduces)
        lanes = {s.mapping.threads_per_row for k in plan.generated for s in k.stages if s.reduces}
        assert lanes == {128}        # 4 warps per row, 8 vector trips per lane (astitch split each row over 4
        #                              blocks of 1024 until a lane's trips counted as loads in flight)
        assert sh.stats.reduction_barriers == want
        assert tr.stats.reduction_barriers > 5 * want          # 8 per trip of 128 lanes
        for ks in sh.stats.kernels:
            for st in ks.stages:
                assert st.tree_barriers == 0 and st.shared_bank_conflicts == 0
        assert sh.stats.predicted_us < tr.stats.predicted_us
        close(sh.outputs, tr.outputs, 1e-5)


# -- the generated kernels under the CUDA simulator ------------------------------------------------------------
gpu_backend = pytest.importorskip("gpu_backend")


def run_gpu(plan, inputs):
    from gpu_backend.launch.plans import execute
    return execute(plan, inputs)[0]


MAPPINGS = [  # (block, grid, threads per row, splits, combine): what each exercises
    (128, 2, 32, 1, "none"),          # a warp per row, 4 rows per block, vertical packing (rows > slots)
    (64, 2, 8, 1, "none"),            # rows shorter than a warp: 4 rows per warp
    (256, 2, 128, 1, "none"),         # 4 warps per row: warp totals, one barrier, buffers alternating
    (192, 1, 96, 1, "none"),          # 3 warps per row: the second butterfly pads to 4 lanes
    (64, 4, 64, 2, "atomic"),         # split rows, atomic combine
    (64, 4, 64, 2, "grid_barrier"),   # split rows, partials and a grid barrier
]


@pytest.mark.parametrize("block,grid,tpr,splits,combine", MAPPINGS)
def test_generated_shuffle_reductions_match_reference_and_tree(block, grid, tpr, splits, combine):
    g = asim.workload("row_reduce", rows=12, cols=200)
    inputs = asim.random_inputs(g, seed=7)
    want = asim.reference(g, inputs)
    base = asim.compile(g, "xla", "H100")
    got = {}
    for scheme in SCHEMES:
        plan = remap(base, block, grid, tpr, splits, combine, scheme)
        if splits == 1:
            assert plan.kernels[0].stages[0].reduce_scheme == scheme
        got[scheme] = run_gpu(plan, inputs)
        close(got[scheme], want)
        close(asim.simulate(plan, inputs).outputs, want)
    if tpr <= 32:
        for a, b in zip(got["shuffle"], got["tree"], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("tpr", [32, 8, 128])
def test_generated_argmax_pairs_and_integer_accumulators(tpr):
    for g, seed in ((argmax_graph(8, 100), 1), (int_graph(8, 100), 2)):
        inputs = asim.random_inputs(g, seed=seed)
        if g.name == "argmax_rows":
            inputs[0][3, 17] = inputs[0][3, 60] = 50.0          # a tie: the lower index wins
            inputs[0][5, 90] = np.nan                             # NaN first
        plan = remap(asim.compile(g, "xla", "H100"), 128, 2, tpr)
        assert {s.reduce_scheme for k in plan.generated for s in k.stages} == {ReduceScheme.SHUFFLE}
        want = asim.reference(g, inputs)
        close(run_gpu(plan, inputs), want)
        close(asim.simulate(plan, inputs).outputs, want)


#: the fast tier's share (tests/tiers.py): the stitcher and inductor; every strategy's shuffles also run in the fast
#: tier through tests/gpu_backend's workload matrix (layernorm under every strategy)
@pytest.mark.parametrize("strategy", fast_share(asim.STRATEGIES, lambda s: s in ("astitch", "inductor")))
def test_generated_every_strategy_matches_reference_with_shuffles(strategy):
    for name, shape in (("softmax", dict(rows=4, cols=64)), ("layernorm", dict(rows=4, cols=32)),
                        ("cross_entropy", dict(rows=4, cols=32))):
        g = asim.workload(name, **shape)
        inputs = asim.random_inputs(g, seed=4)
        plan = asim.compile(g, strategy, "H100")
        assert any(s.reduce_scheme is ReduceScheme.SHUFFLE for k in plan.generated for s in k.stages)
        close(run_gpu(plan, inputs), asim.reference(g, inputs))


def test_generated_code_has_one_barrier_per_trip_and_shuffles():
    from gpu_backend.launch.plans import compile_plan
    g = asim.workload("layernorm", rows=8, cols=256)
    sh = compile_plan(remap(asim.compile(g, "xla", "H100"), 256, 2, 256, scheme="shuffle")).generated.source
    tr = compile_plan(remap(asim.compile(g, "xla", "H100"), 256, 2, 256, scheme="tree")).generated.source
    assert sh.count("shfl_xor(") == 2 * (5 + 3) and tr.count("shfl_xor(") == 0
    assert sh.count("cuda.syncthreads()") < tr.count("cuda.syncthreads()")
    assert "while n > 1:" in tr and "while n > 1:" not in sh


def mixed_width_graph(rows, cols):
    """A row max of f32, then a row sum of f64 that reads it: two tree stages whose partials differ in width."""
    g = Graph("mixed_width_rows")
    x = g.parameter("x", (rows, cols))
    m = g.reduce(x, (1,), reducer="max", name="m")
    d = g.convert(g.subtract(x, g.broadcast(m, (rows, cols), (0,)), name="d"), "f64", name="d64")
    g.set_outputs(m, g.reduce(d, (1,), name="s64"))
    return g


def test_tree_scratch_is_one_word_per_thread_the_kernels_widest_partial():
    """f32 partials sit at a 4-byte stride: a warp's stores and loads hit 32 banks, not 16 twice (the 8-byte
    stride the paper's tree used).  A kernel that also folds f64 partials keeps every slot at 8 bytes per
    thread, so its later stage never writes bytes a lagging thread of the earlier one still reads; both
    kernels match the reference in the CUDA simulator."""
    from gpu_backend.launch.plans import compile_plan
    g = asim.workload("column_reduce", rows=64, cols=96)
    plan = asim.compile(g, "xla", "H100")
    src = compile_plan(plan).generated.source
    assert "partial at [t] (4 bytes per thread)" in src and "[tid * 2]" not in src
    inputs = asim.random_inputs(g, seed=3)
    close(run_gpu(plan, inputs), asim.reference(g, inputs))
    # the SIMT model counts what the layout costs: no conflict at 4 bytes, a second wavefront at 8
    assert asim.simulate(plan, inputs).stats.kernels[0].stages[0].shared_bank_conflicts == 0

    g = mixed_width_graph(8, 256)
    plan = asim.compile(g, "astitch", "H100", reduce_scheme="tree")
    (k,) = plan.generated
    assert [s.reduce_scheme for s in k.stages] == [ReduceScheme.TREE] * 2
    src = compile_plan(plan).generated.source
    assert "float32 partial at [t * 2] (8 bytes per thread)" in src
    assert "float64 partial at [t] (8 bytes per thread)" in src
    inputs = asim.random_inputs(g, seed=5)
    close(run_gpu(plan, inputs), asim.reference(g, inputs), tol=1e-6)
    stages = asim.simulate(plan, inputs).stats.kernels[0].stages
    assert all(st.shared_bank_conflicts > 0 for st in stages)      # the f32 max too: it sits in 8-byte words


def dtype_graph(dt):
    g = Graph("t_" + dt)
    x = g.parameter("x", (8, 256), dt)
    outs = [g.reduce(x, (1,), reducer="or" if dt == "pred" else "max", name="r")]
    if dt != "pred":
        outs.append(g.reduce(x, (1,), name="s"))
    if dt in ("f32", "bf16"):
        outs.append(g.argmax(x, 1, name="am"))
    g.set_outputs(*outs)
    return g


@pytest.mark.slow      # 7-10 s of Numba's real compiler: the full tier (random graphs type-check in both)
def test_shuffles_type_check_with_numbas_real_compiler_for_every_register_type(tmp_path):
    """Numba shuffles only 32/64-bit signed ints and floats: the others go through ``SHUFFLE_AS``. Numba's
    real compiler (not the simulator) must accept every generated shuffle, in one warp and across warps."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(TESTS_FILE).resolve().parent.parent
    paths = []
    for dt in ("f32", "f64", "s8", "s64", "u8", "u32", "u64", "bf16", "pred"):
        for tpr in (32, 128):
            plan = remap(asim.compile(dtype_graph(dt), "xla", "H100"), 256, 4, tpr)
            assert {s.reduce_scheme for k in plan.generated for s in k.stages} == {ReduceScheme.SHUFFLE}
            path = tmp_path / f"{dt}_{tpr}.json"
            path.write_text(plan.to_json())
            paths.append(str(path))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-m", "gpu_backend.machine.typecheck", *paths], capture_output=True, text=True,
                       env=env, cwd=root, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.count("ok ") == len(paths)
