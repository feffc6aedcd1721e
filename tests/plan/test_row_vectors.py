"""Row (reduction) kernels read in vectors, with lanes per row from the vector count: planned once for every
strategy, recorded in the Plan, followed by the SIMT model and the code generator (CUDA simulator)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import astitch_sim as asim
from anchor import TESTS_FILE
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.plan.plan import Plan, Stage
from astitch_sim.plan.row_vectors import MAX_TRIPS, lanes_per_row
from astitch_sim.plan.vocabulary import ReduceScheme, Space
from astitch_sim.planning.kernel_builder import assemble_kernel


def _rows(plan):
    return [st for k in plan.kernels if k.kind == "generated" for st in k.stages if st.mapping.kind == "rows"]


def _row_sum(shape, dtype="f32", sliced=None, transposed=False):
    """sum over the last dim of ``x`` (+ ``y``): ``sliced`` reads ``x`` through a slice from an offset,
    ``transposed`` adds a transposed square ``y``."""
    g = asim.Graph("r")
    x = g.parameter("x", shape if sliced is None else sliced[0], dtype)
    if sliced is not None:
        x = g.slice(x, sliced[1], [s + n for s, n in zip(sliced[1], shape, strict=True)], name="xs")
    if transposed:
        y = g.parameter("y", shape, dtype)
        x = g.add(x, g.transpose(y, (1, 0), name="yt"), name="xy")
    g.set_outputs(g.reduce(x, (len(shape) - 1,), "sum", name="s"))
    return g


# -- the decision --------------------------------------------------------------------------------------------

def test_layernorm_768_is_a_warp_per_row_of_128_bit_vectors_kept_in_registers():
    """The issue's layernorm <N,768>: each lane 6 x 128-bit loads, shuffle sums with no block barrier, x and xc
    kept in registers between the reductions and their broadcast consumers; print(plan) says so."""
    g = asim.workload("layernorm", rows=16384, cols=768)
    plan = asim.compile(g, "astitch", "H100")
    (k,) = plan.kernels
    ms = {id(st.mapping) for st in k.stages}
    assert len(ms) == 1
    m = k.stages[0].mapping
    assert (m.vector, m.threads_per_row, m.trips, m.per_thread) == (4, 32, 6, 4)
    assert m.grid * m.rows_per_block >= 16384
    for st in k.stages[:2]:
        assert st.reduce_scheme is ReduceScheme.SHUFFLE and "no barrier" in st.reduce_why
    assert k.values["x"].space is Space.REGISTER and k.values["x"].loaded_in == 0
    assert k.values["xc"].space is Space.REGISTER
    text = str(plan)
    assert "128-bit vectors along the row (768 = 192 x 4): a warp per row, 6 trip(s) per lane" in text
    assert "register reuse: the row stages read in vectors" in text


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_every_strategy_gets_the_same_row_vectors(strategy):
    """The same rule for every strategy; rows per block stay the strategy's: packed rows are 8 lanes x 4
    elements (4 rows per warp); XLA's one row per block stays a warp of 32 lanes, one element each (8 vectors
    would leave 24 lanes idle), and says so."""
    g = asim.workload("softmax", rows=750000, cols=32)
    rows = _rows(asim.compile(g, strategy, "H100"))
    ms = {(st.mapping.vector, st.mapping.threads_per_row, st.mapping.rows_per_block > 1) for st in rows}
    assert ms in ({(4, 8, True)}, {(1, 32, False)})
    if ms == {(1, 32, False)}:
        assert all("would leave 24 of the block's 32 lanes idle" in st.mapping.vector_why for st in rows)


def test_one_row_per_block_stays_one_row_per_block():
    """The paper's XLA and AStitch's what-if without horizontal packing: the block shrinks to the row's lanes."""
    g = asim.workload("layernorm", rows=16384, cols=768)
    for plan in (asim.compile(g, "xla", "H100", fusion_rules="tf-2.6"),
                 asim.compile(g, "astitch", "H100", horizontal_packing=False)):
        for st in _rows(plan):
            m = st.mapping
            assert (m.rows_per_block, m.block, m.threads_per_row, m.vector, m.trips) == (1, 32, 32, 4, 6)
            assert "one row per block, as planned" in m.vector_why


@pytest.mark.parametrize("vectors,block,want", [(192, 1024, 32), (8, 1024, 8), (1024, 1024, 128),
                                                (7500, 1024, 1024), (20000, 1024, 1024), (3, 64, 4), (192, 768, 32)])
def test_lanes_per_row(vectors, block, want):
    tpr = lanes_per_row(vectors, block, 1, 1024)
    assert tpr == want and block % tpr == 0
    assert tpr == block or -(-vectors // tpr) <= MAX_TRIPS


@pytest.mark.parametrize("cols,want,why", [(34, 2, "not a multiple of 4"), (33, 1, "is odd")])
def test_an_extent_the_vector_does_not_divide_narrows_it_and_says_why(cols, want, why):
    (st,) = _rows(asim.compile(_row_sum((6, cols)), "astitch", "H100", never_behind=False))
    assert st.mapping.vector == want and why in st.mapping.vector_why and why in str(st.mapping.describe())


def test_fallbacks_say_why():
    (st,) = _rows(asim.compile(_row_sum((4, 36), sliced=((4, 40), (0, 3))), "astitch", "H100", never_behind=False))
    assert st.mapping.vector == 4 and "x is sliced from offset 3, not a multiple of 4" in st.mapping.vector_why
    (st,) = _rows(asim.compile(_row_sum((8, 8), transposed=True), "astitch", "H100", never_behind=False))
    assert st.mapping.vector == 4 and "y is read transposed" in st.mapping.vector_why
    plan = asim.compile(asim.workload("paper_fig7"), "astitch", "H100")          # row and column stages
    (k,) = plan.kernels
    (row,) = [st for st in k.stages if st.mapping.kind == "rows"]
    assert row.mapping.vector == 1 and row.mapping.threads_per_row == 256
    assert "64 vectors of 4 would leave some of the row's 256 planned lanes idle" in row.mapping.vector_why
    assert "also has columns stages, so its launch stays as planned" in row.mapping.vector_why


def test_row_stages_beside_a_column_stage_read_in_vectors_in_the_planned_launch():
    """Layer-norm backward's stitched kernel: two row stages and the dgamma/dbeta column stage share one launch.
    The row stages keep their lanes and grid and read each row in 128-bit vectors (192 per 768-row over 128
    lanes: 2 trips); the column stage keeps the launch too (its own vectors of adjacent columns:
    ``test_column_vectors.py``); the kernel's values cross stages as before."""
    g = asim.workload("layernorm_backward", rows=16384, cols=768)
    plan = asim.compile(g, "astitch", "H100")        # the launch search's 16384 blocks of 128 threads
    (k,) = plan.kernels
    rows = [st for st in k.stages if st.mapping.kind == "rows"]
    cols = [st for st in k.stages if st.mapping.kind == "columns"]
    assert len(rows) == 2 and cols
    for st in rows:
        m = st.mapping
        assert (m.vector, m.per_thread, m.grid, m.block) == (4, 4, k.grid, k.block)
        assert m.threads_per_row == 128 and m.trips == 2
        assert "also has columns stages, so its launch stays as planned" in m.vector_why
        assert "128-bit vectors along the row (768 = 192 x 4)" in m.vector_why
    assert all((st.mapping.grid, st.mapping.block) == (k.grid, k.block) for st in cols)
    assert "so its launch stays as planned: 128 lanes per row, 2 trip(s) per lane" in str(plan)
    # the paper's launch (two rows of 512 lanes per 1024-thread block): 192 vectors would idle lanes
    (paper,) = asim.compile(g, "astitch", "H100", launch_search=False).kernels
    assert all(st.mapping.vector == 1 and "would leave some of the row's 512 planned lanes idle" in
               st.mapping.vector_why for st in paper.stages if st.mapping.kind == "rows")


def test_dtype_sets_the_row_width():
    for dtype, want in (("f16", 8), ("bf16", 8), ("f64", 2), ("f32", 4)):
        (st,) = _rows(asim.compile(_row_sum((4, 64), dtype), "astitch", "H100", never_behind=False))
        assert st.mapping.vector == want, dtype


def test_the_plan_names_the_real_access_width():
    """A bf16 layer norm computes in f32 but reads and writes bf16: eight 2-byte elements are a 128-bit access,
    and the plan says 128, never 256 (the width is sized by the tensors accessed in vectors, and so is the label)."""
    import re
    path = Path(TESTS_FILE).parent / "fixtures" / "hlo" / "convert_bf16_layernorm.hlo"
    g = asim.from_hlo(path.read_text())
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "A100")
        bits = [int(b) for k in plan.generated for st in k.stages
                for b in re.findall(r"(\d+)-bit vectors", st.mapping.vector_why)]
        assert all(b <= 128 for b in bits), (strategy, bits)
        if strategy in ("astitch", "fusionstitching"):       # their row kernels read in vectors
            assert bits, strategy


def test_values_carried_in_registers_do_not_narrow_the_vectors():
    """The bf16 layer norm keeps its f32 row in registers for the second stage under astitch: the vectors are
    sized by what goes to memory (bf16: 8 per 128-bit access), as under fusionstitching, which converts the
    input again instead.  Without register reuse no value may stay in registers, and the f32 ones size it."""
    path = Path(TESTS_FILE).parent / "fixtures" / "hlo" / "convert_bf16_layernorm.hlo"
    g = asim.from_hlo(path.read_text())
    (a,), (f,) = (asim.compile(g, s, "A100").generated for s in ("astitch", "fusionstitching"))
    assert a.stages[0].mapping.vector == f.stages[0].mapping.vector == 8
    assert "values carried in registers from an earlier stage do not narrow them" in a.stages[0].mapping.vector_why
    carried = [v for n, v in a.values.items() if v.stage == 0 and 1 in v.read_later and g[n].dtype == "f32"]
    assert carried and all(v.space == Space.REGISTER for v in carried)
    (off,) = asim.compile(g, "astitch", "A100", register_reuse=False, never_behind=False).generated
    assert off.stages[0].mapping.vector == 4       # no value may stay in registers: the f32 ones size the vector
    x = asim.random_inputs(g)
    res = asim.simulate(asim.compile(g, "astitch", "A100"), x)
    for got, want in zip(res.outputs, asim.reference(g, x), strict=True):     # bf16 outputs: a rounding apart
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_locate_puts_a_row_vector_on_one_lane():
    m = ThreadMapping("rows", (4, 40), ((0,), (1,)), block=32, grid=1, threads_per_row=8, per_thread=4, vector=4)
    m.check()
    assert (m.trips, m.inner_iterations, m.elements_per_thread) == (2, 8, 8)
    b, t, it = m.locate(np.arange(160))
    assert list(t[:5]) == [0, 0, 0, 0, 1] and list(it[:4]) == [0, 1, 2, 3]
    assert t[32] == 0 and it[32] == 4                    # the lane's second vector: 8 lanes x 4 elements on
    assert t[40] == 8                                    # the next row: the next 8 lanes
    assert len(set(zip(b.tolist(), t.tolist(), it.tolist(), strict=True))) == 160


def test_bad_row_vectors_are_refused():
    with pytest.raises(asim.AStitchError, match="must equal vector"):
        ThreadMapping("rows", (8, 64), ((0,), (1,)), block=64, grid=8, threads_per_row=64, per_thread=8,
                      vector=4).check()
    with pytest.raises(asim.AStitchError, match="does not divide a split"):
        ThreadMapping("rows", (8, 72), ((0,), (1,)), block=16, grid=32, threads_per_row=16, per_thread=8,
                      vector=8, splits=4, combine="atomic").check()
    with pytest.raises(asim.AStitchError, match="innermost dim"):
        ThreadMapping("rows", (8, 64), ((1,), (0,)), block=8, grid=64, threads_per_row=8, per_thread=4,
                      vector=4).check()
    with pytest.raises(asim.AStitchError, match="columns to end in the innermost dim"):   # a reduce over the last dim
        ThreadMapping("columns", (8, 64, 4), ((0,), (2,), (1,)), block=64, grid=1, threads_per_row=32,
                      per_thread=4, vector=4).check()


# -- the SIMT model ------------------------------------------------------------------------------------------

def _remap(plan, make):
    kernels = []
    for k in plan.kernels:
        stages = [Stage(s.dominant, list(s.ops), make(s.mapping), list(s.epilogue)) for s in k.stages]
        kernels.append(assemble_kernel(plan.graph, k.name, stages, plan.gpu, set(k.outputs),
                                       stitch=len(stages) > 1, plan_vectors=False))
    return Plan(plan.graph, plan.strategy, plan.gpu, kernels, list(plan.notes)).validate()


@pytest.mark.parametrize("rows,cols,tpr", [(64, 768, 32), (16, 32, 8), (2048, 32, 8), (48, 1024, 64)])
def test_simt_counts_a_row_vector_as_one_request_per_warp(rows, cols, tpr):
    """The same rows and lanes read as 4-element vectors or one element at a time: the sectors are the same,
    the reads of x take a quarter of the warp instructions, the values are the reference's."""
    g = _row_sum((rows, cols))
    base = asim.compile(g, "xla", "H100")
    x = workload_inputs(g, 0)
    stats = {}
    for v in (1, 4):
        def make(m, v=v):
            return ThreadMapping("rows", m.domain, m.groups, block=256, grid=-(-rows // (256 // tpr)),
                                 threads_per_row=tpr, per_thread=v, vector=v)
        plan = _remap(base, make)
        res = asim.simulate(plan, x)
        for got, want in zip(res.outputs, asim.reference(g, x), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        stats[v] = res.stats.kernels[0].stages[0]
    assert stats[4].global_sectors_read == stats[1].global_sectors_read
    # x: rows*cols/32 scalar instructions vs a quarter of them; the result store is the same in both
    store = stats[1].global_requests - rows * cols // 32
    assert stats[4].global_requests - store == rows * cols // 32 // 4
    assert stats[4].shuffles == stats[1].shuffles and stats[4].shuffle_barriers == stats[1].shuffle_barriers


def test_simt_counts_a_scattered_read_one_instruction_per_element():
    """x + transpose(y) read in 4-element row vectors: x one vector load per 4, y one load per element."""
    g = _row_sum((64, 64), transposed=True)
    plan = asim.compile(g, "astitch", "H100", never_behind=False)
    (st,) = _rows(plan)
    assert st.mapping.vector == 4
    x = workload_inputs(g, 0)
    res = asim.simulate(plan, x)
    for got, want in zip(res.outputs, asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    s = res.stats.kernels[0].stages[0]
    m = st.mapping
    tpr, rows_per_warp = m.threads_per_row, max(1, 32 // m.threads_per_row)
    stores = 64 // rows_per_warp                          # one warp instruction stores its rows' totals
    vec = 64 * max(1, tpr // 32) // rows_per_warp * m.trips   # x: one per warp per trip
    assert s.global_requests == vec + 4 * vec + stores    # y: one per element of each vector


# -- the code generator (CUDA simulator) ---------------------------------------------------------------------

@pytest.mark.parametrize("workload,shape", [
    ("layernorm", dict(rows=5, cols=96)),      # a warp per row, 3 vectors... of which lanes 24..31 idle
    ("softmax", dict(rows=7, cols=36)),        # 9 vectors per row: 16 lanes, 7 idle (36 is not a multiple of 16)
    ("softmax", dict(rows=6, cols=8)),         # a row shorter than a warp: 2 lanes per row
    ("rmsnorm", dict(rows=2, cols=1024)),      # several warps per row (cross-warp shuffle, one barrier), split rows
    ("log_softmax", dict(rows=4, cols=34)),    # 2-element vectors
    ("softmax", dict(rows=3, cols=33)),        # scalar: 33 is odd
])
@pytest.mark.parametrize("strategy", ["astitch", "xla"])
def test_generated_row_vectors_match_the_reference(workload, shape, strategy):
    pytest.importorskip("numba")
    import gpu_backend
    g = asim.workload(workload, **shape)
    x = workload_inputs(g, 0)
    plan = asim.compile(g, strategy, "H100")
    rows = _rows(plan)
    assert rows
    src = gpu_backend.generate_source(plan)
    V = rows[0].mapping.vector
    assert (f"ldg{V}(g_x" in src) == (V > 1)
    for got, want in zip(gpu_backend.run(plan, x), asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("graph", [
    lambda: _row_sum((4, 36), sliced=((4, 40), (0, 3))),     # an odd slice offset: scalar loads in vector rows
    lambda: _row_sum((8, 8), transposed=True),               # a transposed operand: scalar loads of y
    lambda: _row_sum((5, 64), "f16"), lambda: _row_sum((5, 64), "bf16"), lambda: _row_sum((3, 8), "f64"),
])
def test_generated_row_vectors_with_fallback_reads_and_narrow_types(graph):
    pytest.importorskip("numba")
    import gpu_backend
    g = graph()
    x = workload_inputs(g, 0)
    plan = asim.compile(g, "astitch", "H100", never_behind=False)
    (st,) = _rows(plan)
    assert st.mapping.vector > 1
    tol = 2e-2 if any(n.dtype in ("f16", "bf16") for n in g) else 1e-5
    for got, want in zip(gpu_backend.run(plan, x), asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol * 8)
    for got, want in zip(asim.simulate(plan, x).outputs, asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol * 8)


def test_split_rows_read_in_vectors_match_the_reference():
    """A row split over blocks (atomic combine) read in vectors, several trips per lane, a guarded last trip."""
    pytest.importorskip("numba")
    import gpu_backend
    g = asim.workload("softmax", rows=4, cols=200)
    base = asim.compile(g, "xla", "H100")

    def make(m):
        reduces = m.domain == (4, 200)
        return ThreadMapping("rows", m.domain, m.groups, block=8, grid=8, threads_per_row=8, per_thread=4, vector=4,
                             splits=2, combine="atomic") if reduces else m
    kernels = []
    for k in base.kernels:
        if k.stages[0].mapping.kind != "rows":
            kernels.append(k)
            continue
        stages = [Stage(s.dominant, list(s.ops), make(s.mapping), list(s.epilogue)) for s in k.stages]
        kernels.append(assemble_kernel(g, k.name, stages, base.gpu, set(k.outputs), stitch=False, plan_vectors=False))
    plan = Plan(g, base.strategy, base.gpu, kernels, list(base.notes)).validate()
    assert any(st.mapping.splits == 2 and st.mapping.trips == 4 for st in _rows(plan))
    x = workload_inputs(g, 0)
    for got, want in zip(gpu_backend.run(plan, x), asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(asim.simulate(plan, x).outputs, asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow      # 7-10 s of Numba's real compiler: the full tier (random graphs type-check in both)
def test_row_vector_kernels_type_check_with_the_real_compiler(tmp_path):
    """Row-vector kernels (stitched warp-per-row layernorm, 8-lane DIEN softmax rows, a split row, f16/bf16
    vectors, scalar loads of an odd slice inside vector rows) pass Numba's real type inference and lowering
    (no GPU: ``gpu_backend.machine.typecheck`` in a subprocess without the simulator)."""
    from test_vector_width import assert_plans_typecheck
    pytest.importorskip("numba")
    plans = [asim.compile(asim.workload("layernorm", rows=16384, cols=768), "astitch", "H100"),
             asim.compile(asim.workload("softmax", rows=750000, cols=32), "astitch", "H100"),
             asim.compile(asim.workload("softmax", rows=64, cols=30000), "astitch", "H100"),
             asim.compile(_row_sum((5, 64), "f16"), "astitch", "H100", never_behind=False),
             asim.compile(_row_sum((5, 64), "bf16"), "astitch", "H100", never_behind=False),
             asim.compile(_row_sum((4, 36), sliced=((4, 40), (0, 3))), "astitch", "H100", never_behind=False)]
    assert all(any(st.mapping.vector > 1 for st in _rows(plan)) for plan in plans)
    assert_plans_typecheck(plans, tmp_path)


def test_more_trips_than_are_written_out_loop_one_vector_per_round():
    """9 trips per lane (over MAX_TRIPS): one loop round per vector, the last round guarded (274 vectors, 32 lanes)."""
    pytest.importorskip("numba")
    import gpu_backend
    g = asim.workload("softmax", rows=3, cols=1096)
    base = asim.compile(g, "xla", "H100")
    kernels = []
    for k in base.kernels:
        m = k.stages[0].mapping
        if m.kind == "rows":
            m = ThreadMapping("rows", m.domain, m.groups, block=64, grid=2, threads_per_row=32, per_thread=4,
                              vector=4)
        stages = [Stage(s.dominant, list(s.ops), m, list(s.epilogue)) for s in k.stages]
        kernels.append(assemble_kernel(g, k.name, stages, base.gpu, set(k.outputs), stitch=False, plan_vectors=False))
    plan = Plan(g, base.strategy, base.gpu, kernels, list(base.notes)).validate()
    assert any(st.mapping.trips == 9 > MAX_TRIPS for st in _rows(plan))
    assert "for inner in range(9):  # one vector of the row per trip" in gpu_backend.generate_source(plan)
    x = workload_inputs(g, 0)
    for got, want in zip(gpu_backend.run(plan, x), asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(asim.simulate(plan, x).outputs, asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gpu, sms", [("V100", 80), ("H100", 132)])
def test_narrower_vector_rows_do_not_leave_sms_idle(gpu, sms):
    """Layernorm 512x768 under the paper's launch (1024-thread blocks): a warp per row packed into the planned
    block would put 32 rows in each and leave 16 blocks for 80 or 132 SMs (predicted 53.9 us against XLA's 27.6
    on V100, so never-behind fell back to XLA's kernels).  The planned rows per block stay, the block shrinks to
    their lanes, and the grid keeps every SM busy."""
    plan = asim.compile(asim.workload("layernorm", rows=512, cols=768), "astitch", gpu, launch_search=False,
                        never_behind=False)
    (k,) = plan.kernels
    m = k.stages[0].mapping
    assert m.threads_per_row == 32 and m.vector == 4
    assert k.grid >= sms and k.block == m.rows_per_block * m.threads_per_row < 1024


@pytest.mark.parametrize("gpu", ["V100", "H100"])
def test_launch_search_note_names_the_block_the_kernel_runs(gpu):
    """Row vectors shrink a block to its rows' lanes (softmax <64,512>: 1024 threads asked, 64 run): the launch
    search's note names the block it asked for and the threads the kernel launches, so what the note says and
    what ``print(plan)``'s kernel line says agree."""
    plan = asim.compile(asim.workload("softmax", rows=64, cols=512), "astitch", gpu)
    notes = [(k, n) for k in plan.kernels for n in k.notes if n.startswith("launch search: chose")]
    assert notes
    for k, note in notes:
        chosen = note.split(";")[0]
        assert (f"block {k.block} x grid {k.grid}," in chosen
                or f"(launched with {k.block} threads) x grid {k.grid}," in chosen), (str(k.block), note)
    paper = next(n for _, n in notes).split("priced: ", 1)[1].split(";")[0]
    assert "(paper's rule)" in paper and "block 1024 (launched with 64 threads)" in paper, paper


def test_todays_xla_keeps_its_packed_block_and_packs_more_rows():
    """Today's XLA plans layernorm 16384x768's reductions as 4 rows of 64 threads in 256-thread blocks
    (``common.xla_packed_rows``); read in 128-bit vectors a row needs one warp, so the block keeps its 256
    threads and holds 8 rows -- the same packing rule as every strategy that packs rows."""
    g = asim.workload("layernorm", rows=16384, cols=768)
    for st in _rows(asim.compile(g, "xla", "H100")):
        m = st.mapping
        assert (m.rows_per_block, m.block, m.threads_per_row, m.vector, m.trips) == (8, 256, 32, 4, 6)
        assert "one row per block" not in m.vector_why


@pytest.mark.parametrize("shape", [dict(rows=8, cols=256), dict(rows=8, cols=136), dict(rows=12, cols=258)])
def test_generated_row_vectors_beside_a_column_stage_match_the_reference(shape):
    """Layer-norm backward in one stitched kernel of 32-thread blocks: its row stages read in vectors (4, 4 with a
    partial last trip of 34 vectors over 32 lanes, 2) beside the scalar dgamma/dbeta column stage; the Numba
    kernels (CUDA simulator) and the SIMT model both match the reference."""
    pytest.importorskip("numba")
    import gpu_backend
    g = asim.workload("layernorm_backward", **shape)
    x = workload_inputs(g, 0)
    plan = asim.compile(g, "astitch", "H100", max_block_threads=32, task_splitting=False, never_behind=False)
    (k,) = plan.kernels
    kinds = [st.mapping.kind for st in k.stages]
    assert "columns" in kinds and all(st.mapping.vector > 1 for st in k.stages if st.mapping.kind == "rows")
    src = gpu_backend.generate_source(plan)
    V = next(st.mapping.vector for st in k.stages if st.mapping.kind == "rows")
    assert f"ldg{V}(" in src
    for got, want in zip(gpu_backend.run(plan, x), asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for got, want in zip(asim.simulate(plan, x).outputs, asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("workload", ["layernorm", "softmax"])
@pytest.mark.parametrize("group", [3, 1])
def test_trips_loaded_a_group_at_a_time_match_the_reference(workload, group):
    """``load_trips`` (``astitch_sim/plan/loads_in_flight.py``: what ``apply_compiler`` sets where every trip's
    loads at once would spill): a stitched kernel whose lanes keep their row in registers across stages, 8 trips
    of 4-element vectors (250 vectors over 32 lanes: the last trip guarded), loaded ``group`` trips at a time.
    The plan records and prints it, the code issues the trips' loads in those groups, the cost model counts
    that many in flight, and the CUDA simulator and the SIMT model still give the reference's values."""
    pytest.importorskip("numba")
    import gpu_backend
    from astitch_sim.plan.loads_in_flight import groups_to_try, trips_in_flight, with_load_trips
    from astitch_sim.simt.cost import elements_in_flight
    g = asim.workload(workload, rows=3, cols=1000)
    base = asim.compile(g, "astitch", "H100")
    (k,) = base.kernels
    assert {st.mapping.trips for st in k.stages} == {8} and len(k.stages) > 1
    assert groups_to_try(k) == [4, 2, 1] and trips_in_flight(k.stages[0].mapping) == 8
    plan = Plan(g, base.strategy, base.gpu, [with_load_trips(k, group)], list(base.notes)).validate()
    again = Plan.from_json(plan.to_json())
    for st in [*plan.kernels[0].stages, *again.kernels[0].stages]:
        assert st.mapping.load_trips == group and trips_in_flight(st.mapping) == group
        assert elements_in_flight(st.mapping) == 4 * group
    assert f"loads {group} trip(s) at a time" in str(plan)
    src = gpu_backend.generate_source(plan)
    assert f"{group} trip(s)' loads at a time" in src and "every trip's loads first" not in src
    body = src[src.index("def stitch_0_out"):]
    # stage 0's first load of trip ``group`` (the next group) comes after the first trip's computation
    loads = [i for i, line in enumerate(body.splitlines()) if "ldg4(g_x" in line]
    first_use = next(i for i, line in enumerate(body.splitlines()) if "x_v[0]" in line)
    assert sum(i < first_use for i in loads) == group, (loads, first_use)
    x = workload_inputs(g, 0)
    for got, want in zip(gpu_backend.run(plan, x), asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(asim.simulate(plan, x).outputs, asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_load_trips_only_groups_row_vectors():
    m = ThreadMapping("rows", (4, 64), ((0,), (1,)), 32, 4, threads_per_row=32)
    from dataclasses import replace
    with pytest.raises(asim.AStitchError, match="above 0 only on a rows or columns mapping with vectors"):
        replace(m, load_trips=2).check()
    for bad in ("2", -1):
        with pytest.raises(asim.AStitchError, match="a whole number of trips >= 0"):
            replace(m, vector=4, per_thread=4, threads_per_row=8, load_trips=bad).check()
    vec = replace(m, vector=4, per_thread=4, threads_per_row=8, load_trips=1)
    vec.check()
    assert vec == replace(vec, load_trips=0)       # how loads are scheduled, not which element goes where
