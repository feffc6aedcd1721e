"""Tests for the SIMT model's executor: values, counters, wrong plans, errors.

Values: every catalog workload (small shapes, and medium shapes that exercise
task splitting, vertical packing, column splits, the separable and flat counting
paths) and every HLO fixture, under all four strategies, equal the numpy
reference / JAX's outputs.  Tolerance, |got - want| <= atol + rtol*|want| with
atol scaled by max(1, max|want|): f32 rtol 1e-5, atol 1e-6 -- the simulator
sums in a GPU's order (per thread, then a tree), numpy pairwise, so a few ulps
differ; the fixtures use test_hlo's tolerances (f16/bf16 looser).

Counters are checked against numbers worked out by hand in the comments.
"""
from __future__ import annotations

import re
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim import AStitchError
from astitch_sim.ir.dtypes import bf16_bits_to_f32
from astitch_sim.simt import geometry, memory
from astitch_sim.frontends.workloads import workload_inputs
from anchor import TESTS_FILE

FIXTURES = Path(TESTS_FILE).parent / "fixtures" / "hlo"
UNSUPPORTED = {"argmax_variadic_reduce"}            # the importer refuses it (see test_hlo)
FIXTURE_NAMES = sorted(p.stem for p in FIXTURES.glob("*.hlo") if p.stem not in UNSUPPORTED)

SMALL = {
    "layernorm": dict(rows=5, cols=12), "rmsnorm": dict(rows=5, cols=12), "batchnorm_train": dict(rows=20, cols=6),
    "layernorm_backward": dict(rows=5, cols=12), "global_norm": dict(rows=6, cols=7),
    "softmax": dict(rows=4, cols=33), "attention_softmax": dict(batch=2, heads=3, seq=5),
    "log_softmax": dict(rows=4, cols=33), "cross_entropy": dict(rows=6, cols=10), "bias_gelu": dict(rows=4, cols=9),
    "swiglu": dict(rows=4, cols=9), "adam_step": dict(size=50), "paper_fig7": dict(n=4, c=6),
    "row_reduce": dict(rows=30, cols=32), "column_reduce": dict(rows=30, cols=7),
}
#: shapes big enough for the interesting mappings; (workload, shape, gpu, feature the astitch plan must show)
MEDIUM = [
    ("softmax", dict(rows=4, cols=3000), "H100", "row split, atomic"),
    ("global_norm", dict(rows=128, cols=128), "H100", "row split, atomic"),
    ("cross_entropy", dict(rows=6000, cols=40), "V100", "vertical packing"),
    ("batchnorm_train", dict(rows=2048, cols=64), "H100", "column split"),
    ("layernorm", dict(rows=256, cols=768), "H100", "separable"),
    ("attention_softmax", dict(batch=2, heads=4, seq=128), "H100", "separable"),
    ("bias_gelu", dict(rows=64, cols=1024), "H100", "flat"),
    ("paper_fig7", {}, "V100", "column split"),
]
F32 = (1e-5, 1e-6)


def close(got, want, tol=F32, where=""):
    assert got.shape == want.shape, where
    if want.dtype.kind == "f":
        want64 = want.astype(np.float64)
        finite = np.isfinite(want64)
        scale = max(1.0, float(np.abs(want64[finite]).max())) if finite.any() else 1.0
        np.testing.assert_allclose(got.astype(np.float64), want64, rtol=tol[0], atol=tol[1] * scale,
                                   equal_nan=True, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def run(g, strategy, gpu="H100", inputs=None, options=None, **kw):
    x = workload_inputs(g, 0) if inputs is None else inputs
    return asim.simulate(asim.compile(g, strategy, gpu, **(options or {})), x, **kw), x


# ---------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_catalog_small_matches_reference(name, strategy):
    g = asim.workload(name, **SMALL[name])
    res, x = run(g, strategy)
    for node, got, want in zip(g.outputs, res.outputs, asim.reference(g, x), strict=True):
        close(got, want, where=f"{name} {strategy} {node.name}")


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("name,shape,gpu,feature", MEDIUM, ids=[m[0] for m in MEDIUM])
def test_catalog_medium_matches_reference(name, shape, gpu, feature, strategy):
    g = asim.workload(name, **shape)
    res, x = run(g, strategy, gpu)
    for node, got, want in zip(g.outputs, res.outputs, asim.reference(g, x), strict=True):
        close(got, want, where=f"{name} {strategy} {node.name}")


@pytest.mark.parametrize("name,shape,gpu,feature", MEDIUM, ids=[m[0] for m in MEDIUM])
def test_medium_shapes_exercise_the_mappings_they_claim(name, shape, gpu, feature):
    # the paper's launch rules, which these shapes were chosen to exercise (the launch search may drop a split)
    plan = asim.compile(asim.workload(name, **shape), "astitch", gpu, launch_search=False)
    maps = [s.mapping for k in plan.generated for s in k.stages]
    has = {
        "row split, atomic": any(m.kind == "rows" and m.splits > 1 and m.combine == "atomic" for m in maps),
        "vertical packing": any(m.task_iterations > 1 for m in maps),
        "column split": any(m.kind == "columns" and m.splits > 1 for m in maps),
        "separable": any(geometry.Geometry(m).separable for m in maps),
        "flat": any(geometry.Geometry(m).flat for m in maps),
    }
    assert has[feature], (name, feature, [m.describe() for m in maps])


def split_prod_graph(rows: int = 2, cols: int = 4096, noise: float = 1e-3):
    """Few long rows with a prod reduce: astitch splits them and combines with a grid barrier (values near 1,
    ``noise`` apart, so the product stays finite)."""
    g = asim.Graph("split_prod")
    x = g.parameter("x", (rows, cols))
    p = g.reduce(x, 1, "prod", name="p")
    m = g.reduce(x, 1, "max", name="m")
    g.set_outputs(g.multiply(x, g.broadcast(p, (rows, cols), (0,)), name="y"), m, p)
    x = (1 + noise * np.random.default_rng(0).standard_normal((rows, cols))).astype(np.float32)
    return g, [x]


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_grid_barrier_combine_matches_reference(strategy):
    g, x = split_prod_graph()
    # astitch's raw stitch plan: by default never-behind keeps XLA's kernels on a graph this small (its three
    # grid barriers are predicted slower than XLA's two kernels); this test is about the split itself
    opts = {"never_behind": False, "launch_search": False} if strategy == "astitch" else {}
    res = asim.simulate(asim.compile(g, strategy, "H100", **opts), x)
    if strategy == "astitch":
        m = res.plan.kernels[0].stages[0].mapping
        assert m.splits > 1 and m.combine == "grid_barrier"
        st = res.stats.kernels[0].stages[0]
        # one grid barrier after the partials are written, one after the combine (the kernel reads p again),
        # and the stage's barrier_after: the three grid.sync() the Numba backend writes
        assert st.grid_barriers == 3 == res.plan.kernels[0].global_barriers and st.atomics == 0
        assert res.plan.kernels[0].stages[0].grid_syncs == 2
    for node, got, want in zip(g.outputs, res.outputs, asim.reference(g, x), strict=True):
        close(got, want, tol=(2e-5, 1e-6), where=f"{strategy} {node.name}")   # a prod of 4096 factors


def _npz_list(z, prefix):
    keys = sorted((k for k in z.files if re.fullmatch(prefix + r"\d+", k)), key=lambda k: int(k[len(prefix):]))
    return [z[k] for k in keys]


def _fixture_tol(g):
    dtypes = {n.dtype for n in g}
    return (1.6e-2, 1.6e-2) if "bf16" in dtypes else (2e-3, 2e-3) if "f16" in dtypes else (2e-5, 2e-6)


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_hlo_fixture_matches_jax(fixture, strategy):
    g = asim.from_hlo_file(FIXTURES / f"{fixture}.hlo")
    with np.load(FIXTURES / f"{fixture}.npz") as z:
        inputs, wants = _npz_list(z, "in"), _npz_list(z, "out")
    res = asim.simulate(asim.compile(g, strategy, "H100"), inputs)
    for i, (got, want, node) in enumerate(zip(res.outputs, wants, g.outputs, strict=True)):
        if want.dtype.kind == "V" or (node.dtype == "bf16" and want.dtype == np.uint16):
            want = bf16_bits_to_f32(want)
        close(got, want.astype(got.dtype) if node.dtype not in ("f32", "f64", "f16", "bf16") else want,
              tol=_fixture_tol(g), where=f"{fixture} {strategy} out{i}")


def test_library_kernel_is_a_matmul_with_its_traffic():
    g = asim.Graph("mm")
    a, b = g.parameter("a", (8, 16)), g.parameter("b", (16, 4))
    g.set_outputs(g.add(g.dot(a, b, name="mm"), 1.0))
    res, x = run(g, "xla")
    close(res.outputs[0], asim.reference(g, x)[0])
    ks = next(k for k in res.stats.kernels if k.kind == "library")
    assert ks.library_flops == 2 * 8 * 4 * 16
    assert ks.library_bytes == 4 * (8 * 16 + 16 * 4 + 8 * 4) and ks.library_bytes_written == 4 * 8 * 4
    assert ks.global_bytes_read == 4 * (8 * 16 + 16 * 4) and ks.global_bytes_written == 4 * 8 * 4


# ---------------------------------------------------------------------------
# counters, by hand
# ---------------------------------------------------------------------------

def test_unfused_add_of_two_vectors():
    """1000 f32 + 1000 f32 -> 1000 f32: reads 8000 bytes, writes 4000.

    Flat mapping, 256-thread blocks, 4-element vectors (the planner's width for f32:
    128-bit accesses): 1000 elements are 250 vectors, 7 full warps of 32 vectors
    (128 floats = 512 bytes = 16 sectors) and one of 26 vectors (104 floats = 13
    sectors; buffers are 256-byte aligned): 125 sectors per access, as with scalar
    accesses, but 8 warp instructions per access instead of 32: 2 loads + 1 store = 24.
    """
    g = asim.Graph("add")
    g.set_outputs(g.add(g.parameter("x", (1000,)), g.parameter("y", (1000,)), name="z"))
    res, x = run(g, "unfused")
    close(res.outputs[0], x[0] + x[1])
    s = res.stats
    assert (s.kernel_launches, s.global_bytes_read, s.global_bytes_written) == (1, 8000, 4000)
    st = s.kernels[0].stages[0]
    assert asim.compile(g, "unfused", "H100").kernels[0].stages[0].mapping.vector == 4
    assert (st.global_sectors_read, st.global_sectors_written, st.global_requests) == (250, 125, 24)
    assert (st.flops, st.shared_bytes_read, st.atomics) == (1000, 0, 0)


def test_row_reduce_under_xla():
    """row_reduce 4x32 (sum of x*x per row) under the paper's xla (``fusion_rules="tf-2.6"``): one 32-thread
    block per row (one row per block, a lane per element: 8 vectors of 4 would leave 24 lanes idle,
    ``plan/row_vectors.py``).

    Reads: 4 rows x 32 floats = 512 bytes; each row is one warp of 128 contiguous
    bytes = 4 sectors -> 16 sectors, 4 requests.  Writes: one float per row by
    thread 0 of its block: 16 bytes, 4 sectors, 4 requests.  Flops: x*x 128, the
    per-thread adds 128, the tree 31 per row (124), folding in the init 4 -> 384.
    The row's 32 lanes are one warp, so by default (reduce_scheme shuffle) they combine with
    5 shfl_xor steps per block and no shared memory, no barrier.  Under the what-if tree:
    tree scratch per row writes 32 partials + 31 sums, reads 2*31 (floats); 5 tree
    steps + 1 barrier per block.
    """
    g = asim.workload("row_reduce", rows=4, cols=32)
    x = workload_inputs(g, 0)
    for scheme in ("shuffle", "tree"):
        res = asim.simulate(asim.compile(g, "xla", "H100", reduce_scheme=scheme, fusion_rules="tf-2.6"), x)
        close(res.outputs[0], asim.reference(g, x)[0])
        (ks,) = res.stats.kernels
        (st,) = ks.stages
        assert (ks.grid, ks.block) == (4, 32)
        assert (st.global_bytes_read, st.global_sectors_read) == (512, 16)
        assert (st.global_bytes_written, st.global_sectors_written, st.global_requests) == (16, 4, 8)
        assert st.flops == 384
        if scheme == "tree":
            assert (st.shared_bytes_written, st.shared_bytes_read) == (4 * 4 * 63, 4 * 4 * 62)
            assert (st.tree_barriers, st.shared_bank_conflicts, st.shuffles) == (4 * 6, 0, 0)
        else:
            assert (st.shared_bytes_written, st.shared_bytes_read) == (0, 0)
            assert (st.tree_barriers, st.shuffle_barriers, st.shuffles) == (0, 0, 4 * 5)


def test_regional_value_shared_traffic():
    """layernorm 4x32 under astitch: one block, 4 rows x 8 lanes x one 4-element vector.

    Under the what-if tree, mean and n.bcast (stage 0 epilogue) and rstd (stage 1)
    are Regional: one float per row stored by the row's first thread (16 bytes
    each); mean is read by every element of stage 1 (128 x 4 = 512 bytes), rstd by
    every element of stage 2, n.bcast once per row by stage 1's epilogue (16).  A warp
    reads one address (its row's value): no bank conflicts.  Each reduction tree moves
    4 rows x 15 writes and 14 reads of floats on top, and a block barrier follows
    stages 0 and 1.  Under the default shuffle a row's 8 lanes lie in one warp: the
    butterfly leaves every lane with the row's total, each lane computes the epilogue
    and keeps mean, n.bcast and rstd in its registers (plan/task_registers.py): no
    shared byte, no block barrier; the reads become register reads.
    """
    g = asim.workload("layernorm", rows=4, cols=32)
    tree = asim.simulate(asim.compile(g, "astitch", "H100", reduce_scheme="tree"), workload_inputs(g, 0))
    tst = tree.stats.kernels[0].stages
    tree_w, tree_r = 4 * 4 * 15, 4 * 4 * 14
    assert (tst[0].shared_bytes_written, tst[0].shared_bytes_read) == (tree_w + 16 + 16, tree_r)
    assert (tst[1].shared_bytes_written, tst[1].shared_bytes_read) == (tree_w + 16, tree_r + 512 + 16)
    assert (tst[2].shared_bytes_written, tst[2].shared_bytes_read) == (0, 512)
    assert all(s.shared_bank_conflicts == 0 for s in tst)
    assert [s.block_barriers for s in tst] == [1, 1, 0]
    assert tst[1].register_reuse == 128 and tst[2].register_reuse == 128     # x, then xc, per element
    res, _ = run(g, "astitch")
    st = res.stats.kernels[0].stages
    assert all((s.shared_bytes_written, s.shared_bytes_read, s.block_barriers) == (0, 0, 0) for s in st)
    # stage 1 reads x and mean at each of its 128 elements and n.bcast once per row (its epilogue);
    # stage 2 reads xc and rstd at each element
    assert (st[1].register_reuse, st[2].register_reuse) == (128 + 128 + 4, 128 + 128)
    # x is read once, by stage 0, which keeps it in registers for stage 1 (hierarchical data reuse of the
    # load; stage 2 has xc in registers); gamma and beta are read by stage 2; out is written once
    assert [s.global_bytes_read for s in st] == [512, 0, 128 + 128]
    assert res.stats.global_bytes_written == 512
    for got, want in zip(res.outputs, asim.reference(g, workload_inputs(g, 0)), strict=True):
        close(got, want)


def test_a_broadcast_read_by_a_warp_costs_one_sector():
    """x[4,32] + b[4] broadcast along rows: the block (all 128 elements) fetches each of b's 4 elements
    once: 16 bytes.  With 4-element vectors one warp instruction covers all 4 rows (32 threads x 4
    elements): x is 16 sectors, b's 4 elements one sector of that one warp instruction (one scalar
    load per vector, all in one sector); scalar, 4 warps of one row each would read 4 sectors of b."""
    g = asim.Graph("bcast")
    x, b = g.parameter("x", (4, 32)), g.parameter("b", (4,))
    g.set_outputs(g.add(x, g.broadcast(b, (4, 32), (0,)), name="y"))
    res, _ = run(g, "xla")
    st = res.stats.kernels[0].stages[0]
    assert st.global_bytes_read == 512 + 16
    assert asim.compile(g, "xla", "H100").kernels[0].stages[0].mapping.vector == 4
    assert st.global_sectors_read == 16 + 1          # x: 16 sectors; b: one warp instruction, 1 sector


def test_transposed_read_is_uncoalesced():
    """y = transpose(x) for x[32,32]: the stores are 4-element vectors (128 bits), x is read transposed so
    its loads stay scalar (one per element, the plan says why).  A scalar load instruction's 32 lanes are
    8 vectors along y's row x 4 rows of y: 8 columns of x at a 128-byte stride, 8 sectors where a
    contiguous read of 32 floats needs 4; 32 such instructions, 256 sectors (x is 128 sectors)."""
    g = asim.Graph("tr")
    g.set_outputs(g.add_node("negate", (g.transpose(g.parameter("x", (32, 32)), (1, 0)),), name="y"))
    res, x = run(g, "xla")
    close(res.outputs[0], asim.reference(g, x)[0])
    st = res.stats.kernels[0].stages[0]
    m = asim.compile(g, "xla", "H100").kernels[0].stages[0].mapping
    assert m.vector == 4 and "x is read transposed" in m.vector_why
    assert (st.global_sectors_read, st.global_sectors_written) == (32 * 8, 32 * 4)
    assert st.global_requests == 32 + 8           # 32 scalar loads, 8 vector stores
    assert st.global_bytes_read == 4096


def test_addresses_follow_the_buffer_layout():
    """A column-major parameter ({0,1}) read in row-major element order: its elements are not consecutive
    along a vector, so it is read one element per load (the store is 4-element vectors); a load's 32
    lanes are 8 vectors x 4 rows: 8 columns of p 128 bytes apart, 8 sectors (32 contiguous floats
    would be 4); the trace shows element (0, 1) of p at byte 128."""
    g = asim.from_hlo("HloModule m\nENTRY e {\n  p = f32[32,32]{0,1} parameter(0)\n"
                      "  ROOT n = f32[32,32]{1,0} negate(p)\n}")
    x = np.arange(1024, dtype=np.float32).reshape(32, 32)
    res = asim.simulate(asim.compile(g, "xla", "H100"), [x])
    np.testing.assert_array_equal(res.outputs[0], -x)
    st = res.stats.kernels[0].stages[0]
    assert (st.global_sectors_read, st.global_sectors_written, st.global_bytes_read) == (32 * 8, 128, 4096)
    ev = [e for e in asim.simulate(asim.compile(g, "xla", "H100"), [x], trace=True).trace.by_thread(0, 0).events
          if e.node == "p" and e.iteration == 1]          # thread 0's vector is elements (0, 0..3)
    assert [(e.element, e.address) for e in ev] == [((0, 1), 128)]


def test_tvm_recomputation_is_counted():
    """TVM fuses power.1 into its consumers and recomputes it for every element of its broadcast."""
    g = asim.workload("paper_fig7", n=4, c=6)
    res, _ = run(g, "tvm")
    plan = res.plan
    k = next(i for i, k in enumerate(plan.kernels) if "power.1" in k.stages[0].recompute)
    st = res.stats.kernels[k].stages[0]
    factor = plan.kernels[k].stages[0].recompute["power.1"]
    assert factor == 6
    assert st.recomputed_flops >= 24 * 16 * (factor - 1) // factor     # power: 16 flops at 24 elements
    assert st.expensive_flops >= 24 * 16


def test_astitch_never_moves_more_global_bytes_than_xla():
    for name, shape in SMALL.items():
        g = asim.workload(name, **shape)
        x = workload_inputs(g, 0)
        b = {s: asim.simulate(asim.compile(g, s, "H100"), x).stats.global_bytes for s in ("xla", "astitch")}
        assert b["astitch"] <= b["xla"], (name, b)


def test_separable_and_flat_counting_agree_with_dense(monkeypatch):
    """The fast counting paths (one line per alignment class; contiguous runs) are exact."""
    cases = [("layernorm", dict(rows=64, cols=768), "astitch"), ("softmax", dict(rows=4, cols=3000), "astitch"),
             ("batchnorm_train", dict(rows=1024, cols=64), "astitch"), ("bias_gelu", dict(rows=16, cols=3072), "xla"),
             ("attention_softmax", dict(batch=1, heads=2, seq=128), "xla"),
             ("attention_softmax", dict(batch=3, heads=2, seq=128), "xla")]      # mask[batch, key]: 3 batches
    for name, shape, strategy in cases:
        g = asim.workload(name, **shape)
        plan, x = asim.compile(g, strategy, "H100"), workload_inputs(g, 0)
        got = {}
        for mode, limit in (("fast", 1 << 10), ("dense", 1 << 60)):
            monkeypatch.setattr(geometry, "SEPARABLE_MIN", limit)
            memory.PATHS.update(separable=0, dense=0, flat=0)
            r = asim.simulate(plan, x)
            got[mode] = ([asdict(s) for k in r.stats.kernels for s in k.stages], dict(memory.PATHS))
        assert got["fast"][0] == got["dense"][0], name
        assert got["fast"][1]["separable"] + got["fast"][1]["flat"] > 0, name


def test_stats_totals_and_waves():
    g = asim.workload("softmax", rows=4, cols=3000)
    res, _ = run(g, "astitch", options={"launch_search": False})      # the paper's launch: rows split over blocks
    s = res.stats
    assert s.kernel_launches == 1 and s.grid_barriers == res.plan.kernels[0].global_barriers == 2
    ks = s.kernels[0]
    assert ks.waves == 1 and ks.blocks_per_wave >= ks.grid
    assert ks.memset_bytes == 2 * 4 * 4                   # two split reduces' result buffers (4 rows)
    assert s.global_bytes == s.global_bytes_read + s.global_bytes_written
    splits = res.plan.kernels[0].stages[0].mapping.splits
    assert splits > 1 and sum(st.atomics for st in ks.stages) == 2 * 4 * splits   # 2 reduces x 4 rows x splits


# ---------------------------------------------------------------------------
# wrong plans give wrong values
# ---------------------------------------------------------------------------

@pytest.mark.wrong_values
def test_overlapping_shared_slots_give_wrong_values():
    """Put rstd on mean's shared slot while mean is still needed: the plan lies, the output shows it."""
    g = asim.workload("layernorm", rows=4, cols=32)
    plan = asim.compile(g, "astitch", "H100", reduce_scheme="tree")      # the tree: mean and rstd are Regional
    vals = plan.kernels[0].values
    plan = plan.with_value(0, "n.bcast", offset=vals["mean"].offset)   # n.bcast and mean written to one slot
    x = workload_inputs(g, 0)
    got = asim.simulate(plan, x).outputs[0]
    assert not np.allclose(got, asim.reference(g, x)[0], atol=1e-3)


@pytest.mark.wrong_values
def test_register_value_read_by_another_thread_gives_wrong_values():
    """Stage 2 reads xc from registers; remap stage 2 so other threads run those elements.  (Under the tree:
    rstd is Regional, read by the right block; under the shuffle it would sit in registers too, and the
    validator refuses a per-task register value read by other threads: plan/task_registers.py.)"""
    g = asim.workload("layernorm", rows=4, cols=64)
    plan = asim.compile(g, "astitch", "H100", reduce_scheme="tree")
    s2 = plan.kernels[0].stages[2]
    m = s2.mapping
    assert plan.kernels[0].values["xc"].space == "register"
    plan = plan.with_stage(0, 2, mapping=replace(m, threads_per_row=m.threads_per_row // 2))
    x = workload_inputs(g, 0)
    got = asim.simulate(plan, x).outputs[0]
    assert not np.allclose(got, asim.reference(g, x)[0], atol=1e-3, equal_nan=True)


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------

def test_bad_inputs_are_astitch_errors():
    g = asim.workload("layernorm", rows=4, cols=32)
    plan = asim.compile(g, "astitch", "H100")
    x = workload_inputs(g, 0)
    with pytest.raises(AStitchError, match="takes 3 input"):
        asim.simulate(plan, x[:2])
    with pytest.raises(AStitchError, match="shape"):
        asim.simulate(plan, [x[0][:2], x[1], x[2]])
    with pytest.raises(AStitchError, match="dtype"):
        asim.simulate(plan, [x[0].astype(np.float64), x[1], x[2]])
    with pytest.raises(AStitchError, match="needs a Plan"):
        asim.simulate(g, x)


def test_missing_barrier_is_refused_without_trace():
    g = asim.workload("layernorm", rows=4, cols=32)
    plan = asim.compile(g, "astitch", "H100", reduce_scheme="tree").with_stage(0, 0, barrier_after="none")
    with pytest.raises(AStitchError, match="no block barrier"):
        asim.simulate(plan, workload_inputs(g, 0))


def test_public_api():
    assert asim.simulate is asim.simt.simulate and "simulate" in asim.__all__ and "SimResult" in asim.__all__
    res, _ = run(asim.workload("softmax", rows=4, cols=33), "xla")
    assert isinstance(res, asim.SimResult) and res.plan.strategy == "xla"
    assert res.trace is None and res.races == [] and "kernels" in repr(res)
    assert res.timeline is not None


BF16_ROWMAX = """HloModule m
mx {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT c = bf16[] maximum(a, b)
}
ENTRY e {
  x = bf16[6,64]{1,0} parameter(0)
  init = bf16[] constant(-inf)
  m = bf16[6]{0} reduce(x, init), dimensions={1}, to_apply=mx
  mb = bf16[6,64]{1,0} broadcast(m), dimensions={0}
  y = bf16[6,64]{1,0} subtract(x, mb)
  ROOT t = (bf16[6,64]{1,0}, bf16[6]{0}) tuple(y, m)
}"""


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f64", "s32", "s8", "pred"])
def test_regional_values_of_every_width(dtype):
    """A row max (row or, for pred) kept in shared memory (the what-if tree) and read back by every element of
    the row: 2-byte bf16 is stored as its 16 high bits, 1-byte pred as a byte, f64 in 8-byte slots.  Under
    the default shuffle every lane keeps it in registers: the same values, no shared byte."""
    if dtype == "bf16":        # (built from HLO: the builder's bf16 scalar constants come out as [1])
        g = asim.from_hlo(BF16_ROWMAX)
    else:
        g = asim.Graph(f"rowmax_{dtype}")
        x = g.parameter("x", (6, 64), dtype)
        red = g.reduce(x, 1, "or" if dtype == "pred" else "max", name="m")
        m = g.broadcast(red, (6, 64), (0,))
        g.set_outputs(g.add_node("xor" if dtype == "pred" else "subtract", (x, m), name="y"), red)
    plan = asim.compile(g, "astitch", "H100", reduce_scheme="tree")
    assert plan.kernels[0].values["m"].space == "shared"
    inputs = asim.random_inputs(g, 3)
    res = asim.simulate(plan, inputs)
    for got, want in zip(res.outputs, asim.reference(g, inputs), strict=True):
        np.testing.assert_array_equal(got, want)
    st = res.stats.kernels[0].stages
    size = {"bf16": 2, "f16": 2, "f64": 8, "s32": 4, "s8": 1, "pred": 1}[dtype]
    assert st[1].shared_bytes_read == size * 6 * 64
    shuffle = asim.compile(g, "astitch", "H100")
    assert shuffle.kernels[0].values["m"].space == "register"
    res = asim.simulate(shuffle, inputs)
    for got, want in zip(res.outputs, asim.reference(g, inputs), strict=True):
        np.testing.assert_array_equal(got, want)
    st = res.stats.kernels[0].stages
    assert st[1].shared_bytes_read == 0 and st[1].register_reuse >= 6 * 64


def _adam_count_update():
    """An optimizer step with a step count, as optax writes it: the new count is a graph output, a scalar of
    the inputs, and the bias correction ``1 - 0.9 ** count`` scales an update computed once per column of
    a column-reduced gradient -- so the count lands in the reduction's epilogue, computed once per task."""
    g = asim.Graph("count_in_epilogue")
    x = g.parameter("x", (4, 32, 64))
    p = g.parameter("p", (64,))
    c = g.parameter("c", ())
    s = g.reduce(x, (0, 1), name="colsum")
    c1 = g.add(c, g.constant(1.0, "f32", name="one"), name="c1")
    bc = g.subtract(g.constant(1.0, "f32", name="one2"), g.power(g.constant(0.9, "f32", name="b1"), c1, name="pw"),
                    name="bc")
    g.set_outputs(g.subtract(p, g.divide(s, g.broadcast(bc, (64,), (), name="bc.b"), name="upd"), name="newp"), c1)
    return g


@pytest.mark.parametrize("options", [{}, {"global_stitching": False}, {"never_behind": False}])
def test_a_scalar_output_computed_in_a_task_epilogue_is_stored_once(options):
    """Every task of the stage computes the same scalar and stores it to its one element (the generated code
    does the same); the model stored the task array into a 0-d buffer and crashed with a ValueError, inside
    ``asim.compile`` (never-behind runs the plan)."""
    g = _adam_count_update()
    plan = asim.compile(g, "astitch", "H100", **options)
    (k,) = plan.generated
    assert any("c1" in s.epilogue for s in k.stages if s.task_shape == (64,)), str(plan)
    inputs = asim.random_inputs(g, 1)
    res = asim.simulate(plan, inputs)
    ref = asim.reference(g, inputs)
    assert [o.shape for o in res.outputs] == [(64,), ()]
    for got, want in zip(res.outputs, ref, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    import gpu_backend                    # the Numba backend follows the same plan (CUDA simulator without a GPU)
    for got, want in zip(gpu_backend.run(plan, inputs), ref, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_a_reduce_over_a_dim_of_one_element_at_a_separable_size(strategy):
    """Rows of one element (a sum over a dim of extent 1, 40000 of them: the separable geometry, one thread per
    row, one trip): every remainder in the reduce layout is by 1, and each element must still take its own
    layout position (a scalar 0 there once crashed the fold).  The sum is the element plus 0."""
    hlo = """
HloModule m
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[40000,1] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[40000] reduce(x, z), dimensions={1}, to_apply=add
}
"""
    g = asim.from_hlo(hlo)
    x = np.random.default_rng(0).standard_normal((40000, 1)).astype(np.float32)
    res = asim.simulate(asim.compile(g, strategy, "H100"), [x])
    assert np.array_equal(res.outputs[0], x[:, 0] + np.float32(0))


@pytest.mark.parametrize("strategy,shared", [("unfused", False), ("astitch", True)])
def test_a_kernels_shared_memory_is_made_only_where_a_value_is_kept_there(monkeypatch, strategy, shared):
    """Every block's shared memory is made when a value is first kept there: global norm's stitched kernel keeps
    ``factor`` in shared memory (made, and the outputs right), its unfused kernels keep nothing there (none made:
    the unfused DIEN row sum's 750000 blocks filled 12 MB per simulation)."""
    from astitch_sim.plan.vocabulary import Space
    from astitch_sim.simt import executor
    made = []
    prop = executor.KernelRun.smem
    monkeypatch.setattr(executor.KernelRun, "smem", property(lambda run: made.append(run.kernel.name) or prop.fget(run)))
    g = asim.workload("global_norm")                   # (its default 1M elements: split over 256 blocks)
    x = workload_inputs(g, 0)
    plan = asim.compile(g, strategy, "H100")
    assert any(v.space == Space.SHARED for k in plan.kernels for v in k.values.values()) == shared
    res = asim.simulate(plan, x)
    assert bool(made) == shared
    np.testing.assert_allclose(res.outputs[0], asim.reference(g, x)[0], rtol=1e-6)
