"""Column (reduction) stages read vectors of adjacent columns: planned once for every strategy
(``astitch_sim/plan/column_vectors.py``), recorded in the Plan, followed by the SIMT model and the code
generator (CUDA simulator, and Numba's real compiler in the full tier)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as hs

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.plan.plan import Plan, Stage
from astitch_sim.plan.vocabulary import Space
from astitch_sim.planning.kernel_builder import assemble_kernel
from astitch_sim.simt.cost import elements_in_flight

STITCHERS = ("unfused", "xla", "tvm", "fusionstitching", "astitch")


def _columns(plan):
    return [st for k in plan.kernels if k.kind == "generated" for st in k.stages if st.mapping.kind == "columns"]


def _col_reduce(shape, dtype="f32", argmax=False):
    g = asim.Graph("c")
    x = g.parameter("x", shape, dtype)
    g.set_outputs(g.argmax(x, 0, name="s") if argmax else g.reduce(x, (0,), "sum", name="s"))
    return g


def _remap(plan, make, kinds=("columns",)):
    """``plan`` with each generated kernel's stages of the given kinds remapped by ``make(mapping)`` (the compiler's
    own bookkeeping redoes the values, barriers and shared layout; no vectors planned on top)."""
    kernels = []
    for k in plan.kernels:
        if k.kind != "generated" or not any(s.mapping.kind in kinds for s in k.stages):
            kernels.append(k)
            continue
        stages = [Stage(s.dominant, list(s.ops), make(s.mapping) if s.mapping.kind in kinds else s.mapping,
                        list(s.epilogue)) for s in k.stages]
        kernels.append(assemble_kernel(plan.graph, k.name, stages, plan.gpu, set(k.outputs), stitch=len(stages) > 1,
                                       plan_vectors=False))
    return Plan(plan.graph, plan.strategy, plan.gpu, kernels, list(plan.notes)).validate()


def columns(block, grid, lanes, splits=1, combine="none", vector=1, load_trips=0):
    def make(m):
        return ThreadMapping("columns", m.domain, m.groups, block=block, grid=grid, threads_per_row=lanes,
                             splits=splits, combine=combine if splits > 1 else "none", per_thread=vector,
                             vector=vector, load_trips=load_trips)
    return make


# -- the decision --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", STITCHERS)
def test_a_column_reduction_reads_128_bit_vectors_under_every_strategy(strategy):
    """column_reduce 16384x3072 (the paper's shape): 32 column lanes x 4 adjacent columns (tiles of 128), the
    reduced dim split 4 times finer so the kernel keeps its 192 blocks, 4 rows' vectors in flight per lane; the
    same mapping under every strategy that draws this kernel."""
    plan = asim.compile(asim.workload("column_reduce", rows=16384, cols=3072), strategy, "H100")
    (st,) = _columns(plan)
    m = st.mapping
    assert (m.vector, m.per_thread, m.threads_per_row, m.tile_width, m.tiles) == (4, 4, 32, 128, 24)
    assert (m.grid, m.splits, m.busy_blocks, m.load_trips) == (192, 8, 192, 4)
    assert elements_in_flight(m) == 16
    assert st.scratch_slots == 4                     # one tree slot per column of the lane's vector
    text = str(plan)
    assert "4-element vectors of adjacent columns per lane (tiles of 128), loads 4 reduced rows at a time" in text
    assert "128-bit vectors across 4 adjacent columns per lane, the reduced dim split 8 ways instead of 2" in text


def test_64_columns_take_vectors_of_two_and_say_why_not_four():
    plan = asim.compile(asim.workload("batchnorm_train", rows=65536, cols=64), "xla", "H100")
    for st in _columns(plan):
        m = st.mapping
        assert (m.vector, m.tiles, m.splits, m.grid) == (2, 1, 256, 256)
        assert "64-bit vectors across 2 adjacent columns" in m.vector_why
        assert "vectors of 4: tiles of 128 columns would idle more lanes over 64 columns than tiles of 32" \
            in m.vector_why


def test_stitched_column_stages_share_one_vector_mapping_and_their_regional_slots():
    """AStitch's batch norm: three column stages in one cooperative kernel; they keep one mapping (values cross
    stages in registers at the same iteration), its grid, and Regional slots for a tile of 64 columns."""
    plan = asim.compile(asim.workload("batchnorm_train", rows=65536, cols=64), "astitch", "H100")
    (k,) = plan.kernels
    assert len(k.stages) == 3 and len({id(st.mapping) for st in k.stages}) == 1
    m = k.stages[0].mapping
    assert (m.vector, m.grid, m.splits) == (2, 256, 256)
    regional = [v for v in k.values.values() if v.space is Space.SHARED]
    assert regional and all(v.nbytes == m.tile_width * m.task_iterations * 4 for v in regional)


def test_a_column_stage_beside_row_stages_reads_vectors_in_the_kernels_launch():
    """Layer-norm backward under astitch: one kernel of two row stages and the dgamma/dbeta column stage, 16384
    blocks of 128 threads.  The column stage takes 4 adjacent columns per lane and a 4 times finer split within
    the same grid (6 tiles of 128 columns x 256 splits: as many busy blocks as 24 tiles x 64)."""
    plan = asim.compile(asim.workload("layernorm_backward", rows=16384, cols=768), "astitch", "H100")
    (k,) = plan.kernels
    (st,) = _columns(plan)
    m = st.mapping
    assert (k.grid, k.block) == (16384, 128) and any(s.mapping.kind == "rows" for s in k.stages)
    assert (m.vector, m.tiles, m.splits, m.grid, m.trips) == (4, 6, 256, 16384, 16)


def test_tiny_column_stages_stay_scalar_where_vectors_would_idle_blocks():
    """Figure 7's 256 x 128 column sum: 4 tiles of 32 columns on 4 blocks (astitch) or 8 (xla: split in 2); a tile
    of 64 or 128 columns would keep fewer blocks busy, and the lanes' 4 trips cannot be split finer."""
    for strategy in ("astitch", "xla"):
        plan = asim.compile(asim.workload("paper_fig7"), strategy, "H100")
        cols = _columns(plan)
        assert cols and all(st.mapping.vector == 1 for st in cols)
        assert all("scalar: vectors of 4: 1 tile(s) of 128 columns would keep" in st.mapping.vector_why
                   for st in cols)


def test_an_unsplit_plan_takes_vectors_only_where_every_sm_keeps_a_block():
    """Inductor's split column reduction: its first kernel (98304 tasks of 512 rows, unsplit) has tiles enough to
    keep every SM busy, each thread with 4x the loads; its second (3072 columns of 32 partials) would fall from 96
    busy blocks to 24, leaving SMs idle, so it stays scalar and says so."""
    plan = asim.compile(asim.workload("column_reduce", rows=16384, cols=3072), "inductor", "H100")
    first, second = _columns(plan)
    assert (first.mapping.vector, first.mapping.splits, first.mapping.grid) == (4, 1, 768)
    assert second.mapping.vector == 1
    assert "24 tile(s) of 128 columns would keep 24 blocks busy where 96 were planned" in second.mapping.vector_why


def test_a_tree_scratch_past_shared_memory_narrows_the_vector():
    """An argmax over columns combines (value, index) pairs: 4 columns per lane would need 64 KiB of tree scratch
    in a 1024-thread block; the plan says so."""
    plan = asim.compile(_col_reduce((4096, 1024), argmax=True), "xla", "H100")
    (st,) = _columns(plan)
    assert "the tree's scratch for 4 columns per lane would take 64 KiB of the block's 48 KiB" in \
        st.mapping.vector_why


def test_columns_that_do_not_end_in_the_innermost_dim_or_an_odd_extent_stay_scalar():
    plan = asim.compile(_col_reduce((4096, 1026)), "xla", "H100")
    (st,) = _columns(plan)
    assert st.mapping.vector == 1 and "innermost extent 1026 is not a multiple of 4" in st.mapping.vector_why


# -- where each element goes ---------------------------------------------------------------------------------

def test_locate_gives_a_lane_adjacent_columns_one_iteration_each():
    m = ThreadMapping("columns", (24, 16), ((), (0,), (1,)), block=8, grid=4, threads_per_row=2, splits=2,
                      combine="atomic", per_thread=4, vector=4)
    m.check()
    assert (m.tile_width, m.tiles, m.trips, m.inner_iterations, m.folds_per_task) == (8, 2, 3, 12, 3)
    e = np.arange(m.size)
    b, t, it = m.locate(e)
    pairs = set(zip(b.tolist(), t.tolist(), it.tolist(), strict=True))
    assert len(pairs) == m.size                          # every element once
    r, c = e // 16, e % 16
    # columns 0..3 on lane 0, 4..7 on lane 1 of tile 0; tile 1 on the next blocks; row r on row lane r % 4
    assert (t == (r % 12) % 4 * 2 + (c % 8) // 4).all()
    assert (b == (c // 8) * 2 + r // 12).all()
    assert (it == ((r % 12) // 4) * 4 + c % 4).all()      # trip down the column, then the column in the vector


# -- the SIMT model ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows,cols", [(256, 512), (100, 384)])
def test_simt_counts_a_column_vector_as_one_request_per_warp(rows, cols):
    """The same tiles of 32 column lanes read 1 or 4 adjacent columns per lane: the sectors are the same, the
    reads of x take a quarter of the warp instructions, the values are the reference's."""
    g = _col_reduce((rows, cols))
    base = asim.compile(g, "xla", "H100")
    x = workload_inputs(g, 0)
    stats = {}
    for v in (1, 4):
        plan = _remap(base, columns(256, -(-cols // (32 * v)), 32, vector=v))
        res = asim.simulate(plan, x)
        for got, want in zip(res.outputs, asim.reference(g, x), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        stats[v] = res.stats.kernels[0].stages[0]
    assert stats[4].global_sectors_read == stats[1].global_sectors_read
    assert stats[4].global_bytes_read == stats[1].global_bytes_read == rows * cols * 4
    # x: one instruction per 32 elements against one per 128; the results' stores are as many in both (a lane's
    # 4 columns are 4 stores, a quarter of the lanes store)
    assert stats[1].global_requests - stats[4].global_requests == rows * cols // 32 - rows * cols // 128


# -- the generated code (CUDA simulator) ---------------------------------------------------------------------

#: hand-made column-vector plans for what the planner draws only at big sizes: splits (atomic, grid barrier),
#: vertical packing, several rows' loads per round with a guarded last round, the stitched batch norm (Regional
#: and register values across three column stages), an unsplit column reduction, f16 and f64 vectors
HAND_MADE = {
    "stitched_split_atomic": ("batchnorm_train", dict(rows=24, cols=8), columns(16, 4, 2, 2, "atomic", 4)),
    "stitched_split_grid_barrier": ("batchnorm_train", dict(rows=24, cols=8),
                                    columns(16, 4, 2, 2, "grid_barrier", 2)),
    "stitched_vertical": ("batchnorm_train", dict(rows=24, cols=16), columns(8, 1, 2, vector=2)),
    "stitched_rows_in_flight": ("batchnorm_train", dict(rows=40, cols=8), columns(16, 4, 2, 2, "atomic", 4, 3)),
    "unsplit_rows_in_flight": ("column_reduce", dict(rows=20, cols=24), columns(16, 3, 2, vector=4, load_trips=2)),
}


def hand_made(name, strategy):
    w, shape, make = HAND_MADE[name]
    g = asim.workload(w, **shape)
    return g, _remap(asim.compile(g, strategy, "H100"), make)


@pytest.mark.parametrize("name", list(HAND_MADE))
@pytest.mark.parametrize("strategy", ["astitch", "xla"])
def test_generated_column_vectors_match_the_reference_and_place_elements_as_locate_does(name, strategy):
    """Numba's CUDA simulator and the SIMT model both give the reference's values; the probe build records who
    stores each element of every domain-shaped output (the stitched batch norm's y) and it is what locate says."""
    pytest.importorskip("numba")
    import gpu_backend
    from gpu_backend.launch.plans import execute
    g, plan = hand_made(name, strategy)
    cols = _columns(plan)
    assert cols and all(st.mapping.vector > 1 for st in cols)
    x = workload_inputs(g, 0)
    V = cols[0].mapping.vector
    assert f"ldg{V}(g_" in gpu_backend.generate_source(plan)
    want = asim.reference(g, x)
    for got, ref in zip(gpu_backend.run(plan, x), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    for got, ref in zip(asim.simulate(plan, x).outputs, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    _, probes = execute(plan, x, probe=True)
    for (ki, node), arr in probes.items():
        stage = next(s for s in plan.kernels[ki].stages if node in s.ops)
        m = stage.mapping
        block, thread, it = m.locate(np.arange(m.size))
        np.testing.assert_array_equal(arr[:m.size], (block * m.block + thread) * m.elements_per_thread + it,
                                      err_msg=f"{name}: {node}")
    assert probes or _only_task_outputs(g)


def _only_task_outputs(g) -> bool:
    """column_reduce's only output is the reduce (one value per column): no element store to probe."""
    return all(len(o.shape) < 2 for o in g.outputs)


@settings(max_examples=12, deadline=None)
@given(workload=hs.sampled_from(["column_reduce", "batchnorm_train"]), rows=hs.integers(1, 40),
       vec_cols=hs.integers(1, 5), vector=hs.sampled_from([2, 4]), lanes=hs.sampled_from([1, 2, 4, 8]),
       row_lanes=hs.sampled_from([1, 2, 4]), tiles_per_block=hs.integers(1, 3), split=hs.sampled_from([1, 2, 3]),
       combine=hs.sampled_from(["atomic", "grid_barrier"]), load_trips=hs.integers(0, 4))
def test_random_column_vector_plans_match_the_reference(workload, rows, vec_cols, vector, lanes, row_lanes,
                                                        tiles_per_block, split, combine, load_trips):
    """Random column-vector mappings (ragged chunks and tiles, splits of either combine, vertical packing, rows'
    loads grouped or not) of a column sum and of the stitched batch norm (Regional and register values across
    its three column stages): the SIMT model and the Numba kernels (CUDA simulator) give the reference's values,
    and every output element is stored where locate says."""
    pytest.importorskip("numba")
    import gpu_backend
    from gpu_backend.launch.plans import execute
    cols = vec_cols * vector
    tiles = -(-cols // (lanes * vector))
    grid = max(1, -(-tiles // tiles_per_block)) * split
    g = asim.workload(workload, rows=rows, cols=cols)
    plan = _remap(asim.compile(g, "astitch", "H100"),
                  columns(lanes * row_lanes, grid, lanes, split, combine, vector, load_trips))
    x = workload_inputs(g, 0)
    want = asim.reference(g, x)
    for got, ref in zip(asim.simulate(plan, x).outputs, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    outs, probes = execute(plan, x, probe=True)
    for got, ref in zip(gpu_backend.run(plan, x), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    for (ki, node), arr in probes.items():
        m = next(s for s in plan.kernels[ki].stages if node in s.ops).mapping
        block, thread, it = m.locate(np.arange(m.size))
        np.testing.assert_array_equal(arr[:m.size], (block * m.block + thread) * m.elements_per_thread + it)


@pytest.mark.parametrize("lanes,vector", [(8, 4), (32, 2)])
def test_generated_column_vectors_beside_row_stages_match_the_reference(lanes, vector):
    """Layer-norm backward in one stitched kernel of 32-thread blocks: two row stages read in vectors, and the
    dgamma/dbeta column stage remapped to ``lanes`` column lanes of ``vector`` adjacent columns each (8 lanes:
    a warp spans 4 row lanes, the SIMT model's dense count) within the kernel's grid of 8 blocks."""
    pytest.importorskip("numba")
    import gpu_backend
    g = asim.workload("layernorm_backward", rows=8, cols=256)
    base = asim.compile(g, "astitch", "H100", max_block_threads=32, task_splitting=False, never_behind=False)
    tiles = 256 // (lanes * vector)
    plan = _remap(base, columns(32, 8, lanes, splits=8 // tiles, combine="atomic", vector=vector))
    (k,) = plan.kernels
    assert any(st.mapping.kind == "rows" and st.mapping.vector > 1 for st in k.stages)
    (st,) = _columns(plan)
    assert st.mapping.vector == vector and k.grid == 8
    x = workload_inputs(g, 0)
    want = asim.reference(g, x)
    for got, ref in zip(gpu_backend.run(plan, x), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    for got, ref in zip(asim.simulate(plan, x).outputs, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,width", [("f16", 8), ("f64", 2)])
def test_narrow_and_wide_types_size_the_column_vector(dtype, width):
    """The width is 128 bits of the widest type the stage reads along the columns: 8 f16 columns or 2 f64 columns
    per lane (an astitch plan: its split combines through a grid barrier where f16 has no atomic)."""
    pytest.importorskip("numba")
    import gpu_backend
    g = _col_reduce((64, 512), dtype)
    plan = _remap(asim.compile(g, "astitch", "H100"), columns(64, 4, 32, 2, "grid_barrier", width))
    (st,) = _columns(plan)
    assert st.mapping.vector == width
    x = workload_inputs(g, 0)
    tol = 2e-2 if dtype == "f16" else 1e-9
    want = asim.reference(g, x)
    for got, ref in zip(gpu_backend.run(plan, x), want, strict=True):
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol * 8)
    for got, ref in zip(asim.simulate(plan, x).outputs, want, strict=True):
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol * 8)


@pytest.mark.slow      # Numba's real compiler: the full tier
def test_column_vector_kernels_type_check_with_the_real_compiler(tmp_path):
    """The planner's column-vector kernels (column_reduce under xla and inductor, the stitched batch norm, an f16
    column sum) pass Numba's real type inference and lowering (no GPU, ``gpu_backend.machine.typecheck``)."""
    from test_vector_width import assert_plans_typecheck
    pytest.importorskip("numba")
    plans = [asim.compile(asim.workload("column_reduce", rows=16384, cols=3072), "xla", "H100"),
             asim.compile(asim.workload("column_reduce", rows=16384, cols=3072), "inductor", "H100"),
             asim.compile(asim.workload("batchnorm_train", rows=65536, cols=64), "astitch", "H100"),
             asim.compile(_col_reduce((4096, 1024), "f16"), "astitch", "H100")]
    assert all(any(st.mapping.vector > 1 for st in _columns(plan)) for plan in plans)
    assert_plans_typecheck(plans, tmp_path)


def test_fewer_rows_loaded_at_a_time_where_apply_compiler_asks():
    """``apply_compiler`` lowers ``load_trips`` where a kernel spills at its block's register cap
    (``plan/loads_in_flight.py``); a column lane's rows loaded together are the same field: halving it halves the
    rows whose vectors a round loads, the cost model's elements in flight follow, and the values stay the
    reference's (CUDA simulator and SIMT model)."""
    pytest.importorskip("numba")
    import gpu_backend
    from astitch_sim.plan.loads_in_flight import groups_to_try, trips_in_flight, with_load_trips
    g = asim.workload("column_reduce", rows=512, cols=64)
    base = _remap(asim.compile(g, "xla", "H100"), columns(64, 2, 8, 2, "atomic", 4, 4))
    (k,) = base.kernels
    assert trips_in_flight(k.stages[0].mapping) == 4 and groups_to_try(k) == [2, 1]
    for group in (2, 1):
        plan = Plan(g, base.strategy, base.gpu, [with_load_trips(k, group)], list(base.notes)).validate()
        m = plan.kernels[0].stages[0].mapping
        assert (m.load_trips, trips_in_flight(m), elements_in_flight(m)) == (group, group, 4 * group)
        src = gpu_backend.generate_source(plan)
        assert (f"; {group} rows' loads per round" in src) == (group > 1)
        x = workload_inputs(g, 0)
        for got, want in zip(gpu_backend.run(plan, x), asim.reference(g, x), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        for got, want in zip(asim.simulate(plan, x).outputs, asim.reference(g, x), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
