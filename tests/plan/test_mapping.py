"""Thread mappings: every element is computed by exactly one (block, thread, iteration)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from astitch_sim import AStitchError, ThreadMapping


def _assert_bijective(m):
    flat = np.arange(m.size)
    block, thread, it = m.locate(flat)
    assert block.min() >= 0 and block.max() < m.grid
    assert thread.min() >= 0 and thread.max() < m.block
    key = (block * m.block + thread) * (m.elements_per_thread + 1) + it
    assert len(np.unique(key)) == m.size, "two elements share a thread-iteration"
    assert it.max() < m.elements_per_thread


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 70), tpr_pow=st.integers(0, 6), grid=st.integers(1, 9),
       splits=st.sampled_from([1, 2, 4]))
def test_rows_mapping_covers_each_element_once(rows, cols, tpr_pow, grid, splits):
    tpr = 2 ** tpr_pow
    block = tpr * 2
    m = ThreadMapping("rows", (rows, cols), ((0,), (1,)), block=block, grid=grid * splits, threads_per_row=tpr,
                      splits=splits, combine="atomic" if splits > 1 else "none")
    m.check()
    _assert_bijective(m)
    # a split row is handled by `splits` consecutive blocks
    b, _, _ = m.locate(np.arange(m.size))
    first = b.reshape(rows, cols)[:, 0]
    assert np.all((b.reshape(rows, cols) - first[:, None] >= 0) & (b.reshape(rows, cols) - first[:, None] < splits))


@settings(max_examples=60, deadline=None)
@given(outer=st.integers(1, 4), red=st.integers(1, 50), cols=st.integers(1, 70), lanes=st.sampled_from([4, 8, 32]),
       rows_lanes=st.sampled_from([1, 2, 4]), grid=st.integers(1, 5), splits=st.sampled_from([1, 2]),
       vec=st.sampled_from([1, 2, 4]))
def test_columns_mapping_covers_each_element_once(outer, red, cols, lanes, rows_lanes, grid, splits, vec):
    """Every element once, whatever the tiles, splits and vectors of adjacent columns (a lane's ``vec`` columns
    at consecutive iterations, one vector per reduced row)."""
    cols *= vec
    m = ThreadMapping("columns", (outer, red, cols), ((0,), (1,), (2,)), block=lanes * rows_lanes,
                      grid=grid * splits, threads_per_row=lanes, splits=splits,
                      combine="atomic" if splits > 1 else "none", per_thread=vec, vector=vec)
    _assert_bijective(m)
    if vec > 1:                  # a vector: one thread, consecutive iterations, adjacent columns
        b, t, it = (a.reshape(outer, red, cols // vec, vec) for a in m.locate(np.arange(m.size)))
        assert (b == b[..., :1]).all() and (t == t[..., :1]).all()
        assert (it - it[..., :1] == np.arange(vec)).all() and (it[..., 0] % vec == 0).all()
    assert np.array_equal(m.task_of(np.arange(m.size)).reshape(outer, red, cols),
                          np.broadcast_to((np.arange(outer)[:, None] * cols + np.arange(cols))[:, None, :],
                                          (outer, red, cols)))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 5000), block=st.sampled_from([32, 128, 256]), grid=st.integers(1, 20))
def test_flat_grid_stride(n, block, grid):
    m = ThreadMapping("flat", (n,), ((0,),), block=block, grid=grid)
    _assert_bijective(m)
    assert m.task_iterations == -(-n // (block * grid))


def test_paper_mappings_described():
    m = ThreadMapping("rows", (750000, 32), ((0,), (1,)), block=1024, grid=160, threads_per_row=32)
    assert m.rows_per_block == 32 and m.task_iterations == -(-750000 // (160 * 32))
    assert "horizontal packing" in m.describe() and "vertical packing" in m.describe()
    s = ThreadMapping("rows", (64, 30000), ((0,), (1,)), block=1024, grid=128, threads_per_row=1024, splits=2,
                      combine="atomic")
    assert "task splitting" in s.describe()


def test_bad_mappings_raise():
    with pytest.raises(AStitchError, match="partition"):
        ThreadMapping("rows", (4, 8), ((0,), (0,)), block=32, grid=1, threads_per_row=8)
    with pytest.raises(AStitchError, match="unknown mapping kind"):
        ThreadMapping("diagonal", (4,), ((0,),), block=32, grid=1)
    with pytest.raises(AStitchError, match="combining"):
        ThreadMapping("rows", (4, 8), ((0,), (1,)), block=32, grid=2, threads_per_row=8, splits=2).check()
    with pytest.raises(AStitchError, match="divide"):
        ThreadMapping("rows", (4, 8), ((0,), (1,)), block=32, grid=1, threads_per_row=12).check()


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(["flat", "rows", "columns"]), a=st.integers(1, 300), b=st.integers(1, 300),
       outer=st.integers(1, 3), block_pow=st.integers(5, 8), tpr_pow=st.integers(0, 8), vec=st.sampled_from([1, 2, 4]),
       grid=st.integers(1, 400), splits=st.sampled_from([1, 2, 3, 4, 8]))
def test_busy_blocks_are_the_blocks_locate_gives_work(kind, a, b, outer, block_pow, tpr_pow, vec, grid, splits):
    """busy_blocks (what the cost model charges an imbalanced stage on) counts exactly the blocks that
    own at least one element, for every kind, with splits that leave some parts empty (5 rows over 4); and
    busy_threads the threads that do."""
    block = 2 ** block_pow
    if kind == "flat":
        m = ThreadMapping("flat", (a * b,), ((0,),), block=block, grid=grid, per_thread=vec, vector=vec)
    elif kind == "rows":
        m = ThreadMapping("rows", (a, b), ((0,), (1,)), block=block, grid=max(splits, grid // splits * splits),
                          threads_per_row=min(block, 2 ** tpr_pow), splits=splits,
                          combine="atomic" if splits > 1 else "none", per_thread=vec, vector=vec)
    else:
        cv = vec if b % vec == 0 else 1
        m = ThreadMapping("columns", (outer, a, b), ((0,), (1,), (2,)), block=block,
                          grid=max(splits, grid // splits * splits), threads_per_row=min(32, block), splits=splits,
                          combine="atomic" if splits > 1 else "none", per_thread=cv, vector=cv)
    blocks, threads, _ = m.locate(np.arange(m.size))
    assert m.busy_blocks == len(np.unique(blocks))
    # busy_threads (the cost model's warps with loads in flight): never fewer than the threads that own an
    # element; more only where a split's last chunk is shorter than the others (its lanes are counted as full)
    owners = len(set(zip(blocks.tolist(), threads.tolist(), strict=True)))
    assert owners <= m.busy_threads <= 2 * owners
    if splits == 1:
        assert m.busy_threads == owners


def test_a_column_stage_of_few_tiles_in_a_big_grid_keeps_most_blocks_idle():
    """The layer-norm backward the first GPU window measured at 3.6 ms: 768 columns are 24 tiles of 32; in a
    16384-block kernel, unsplit, 24 blocks do the whole column reduction."""
    m = ThreadMapping("columns", (1, 16384, 768), ((0,), (1,), (2,)), block=128, grid=16384, threads_per_row=32)
    assert m.busy_blocks == 24
    split = ThreadMapping("columns", (1, 16384, 768), ((0,), (1,), (2,)), block=128, grid=16384, threads_per_row=32,
                          splits=64, combine="atomic")
    assert split.busy_blocks == 24 * 64


def _locate_by_the_definition(m, flat):
    """``locate`` written with a plain ``//`` and ``%`` per step, dims unravelled one by one: what the faster
    code (shifts for powers of two, no step for a divisor of 1, one unravel by the groups' extents) must equal."""
    multi, rest = [], np.asarray(flat, dtype=np.int64)
    for extent in reversed(m.domain):
        multi.insert(0, rest % extent)
        rest = rest // extent
    view = []
    for g in m.groups:
        c = np.zeros_like(rest)
        for d in g:
            c = c * m.domain[d] + multi[d]
        view.append(c)
    if m.kind == "rows":
        r, c = view
        outer, slot = r // m.slots, r % m.slots
        part, within = c // m.chunk, c % m.chunk
        q, j = within // m.vector, within % m.vector
        block = (slot // m.rows_per_block) * m.splits + part
        thread = (slot % m.rows_per_block) * m.threads_per_row + q % m.threads_per_row
        return block, thread, outer * m.inner_iterations + (q // m.threads_per_row) * m.vector + j
    o, red, c = view
    col = o * m.extent(2) + c
    tile, lane_c = col // m.threads_per_row, col % m.threads_per_row
    outer, tslot = tile // m.slots, tile % m.slots
    part, within = red // m.chunk, red % m.chunk
    return (tslot * m.splits + part, (within % m.rows_per_block) * m.threads_per_row + lane_c,
            outer * m.inner_iterations + within // m.rows_per_block)


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(["rows", "columns"]), dims=st.lists(st.integers(1, 12), min_size=2, max_size=4),
       split_at=st.integers(1, 3), tpr=st.sampled_from([1, 2, 3, 4, 8, 32]), rows_per_block=st.integers(1, 5),
       grid=st.integers(1, 9), splits=st.integers(1, 3), vec=st.sampled_from([1, 2, 4]), shuffled=st.booleans())
def test_locate_takes_the_cheapest_arithmetic_and_gives_the_definitions_answer(kind, dims, split_at, tpr,
                                                                                rows_per_block, grid, splits, vec,
                                                                                shuffled):
    """Random rows and columns mappings (powers of two and not, divisors of 1, groups in and out of dim order):
    ``locate`` equals the step-by-step definition on every element, each output an int64 array shaped like
    the input."""
    rank = len(dims)
    order = list(range(rank))[::-1] if shuffled else list(range(rank))
    if kind == "rows":
        k = min(split_at, rank - 1)
        groups = (tuple(sorted(order[:k])), tuple(order[k:]) if not shuffled else tuple(sorted(order[k:])))
    else:
        groups = ((0,), (1,), tuple(range(2, rank))) if rank > 2 else ((), (0,), (1,))
    splits = splits if grid % splits == 0 else 1
    block = tpr * rows_per_block
    try:
        m = ThreadMapping(kind, tuple(dims), groups, block, grid, threads_per_row=tpr, splits=splits,
                          combine="atomic" if splits > 1 else "none",
                          per_thread=vec if kind == "rows" else 1, vector=vec if kind == "rows" else 1)
        m.check()
    except AStitchError:
        assume(False)   # a mapping the checks refuse (a vector past the row's end, ...): not a case
    flat = np.arange(m.size, dtype=np.int64).reshape(-1, 1)[::-1]      # 2-D, reversed: any index array
    for got, want in zip(m.locate(flat), _locate_by_the_definition(m, flat), strict=True):
        assert isinstance(got, np.ndarray) and got.shape == flat.shape
        np.testing.assert_array_equal(got, want)


def _grid_stride_loop(m, size):
    """A flat mapping run as the kernel runs it, loop by loop: round ``r``, unrolled step ``k``, global thread
    ``g`` (block ``g // block``, thread ``g % block``), lane ``v`` of its vector take element
    ``((r * unroll + k) * grid * block + g) * vector + v`` in iteration ``r * per_thread + k * vector + v``.
    Returns ``(block, thread, iteration)`` of every element of the domain."""
    out = np.full((3, size), -1, dtype=np.int64)
    total, rnd = m.grid * m.block, 0
    while rnd * total * m.per_thread < size:
        for k in range(m.unroll):
            for g in range(total):
                for v in range(m.vector):
                    e = ((rnd * m.unroll + k) * total + g) * m.vector + v
                    if e < size:
                        out[:, e] = (g // m.block, g % m.block, rnd * m.per_thread + k * m.vector + v)
        rnd += 1
    return out


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 700), block=st.sampled_from([1, 3, 32, 64]), grid=st.integers(1, 5),
       vec=st.sampled_from([1, 2, 4]), unroll=st.integers(1, 3))
def test_flat_locate_is_the_grid_stride_loop(size, block, grid, vec, unroll):
    """A flat mapping's ``locate`` is the grid-stride loop the kernel runs (rounds, unrolled vectors, lanes),
    element for element: the simulator counts a flat geometry's accesses on that loop's runs
    (``memory.count_flat``) without locating its elements, on the strength of this test."""
    m = ThreadMapping("flat", (size,), ((0,),), block, grid, per_thread=vec * unroll, vector=vec)
    want = _grid_stride_loop(m, size)
    assert (want >= 0).all()                            # the loop reaches every element
    got = m.locate(np.arange(size, dtype=np.int64))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=150, deadline=None)
@given(rows=st.integers(1, 3000), cols=st.sampled_from([1, 4, 8, 12, 32, 96]), tpr=st.sampled_from([1, 2, 4, 8, 32]),
       rows_per_block=st.sampled_from([1, 2, 3, 4, 16, 128]), grid=st.integers(1, 40), splits=st.integers(1, 3),
       vec=st.sampled_from([1, 2, 4]), task_dims=st.sampled_from([1, 2]))
def test_row_starts_are_where_locate_puts_each_rows_first_element(rows, cols, tpr, rows_per_block, grid, splits, vec,
                                                                  task_dims):
    """``row_starts`` (a block's first row located, plus a row within a block) is ``locate`` of every row's first
    element, in order: rows packed several to a block, a grid that loops over the rows (fewer slots than rows),
    a grid that has more, split rows, vectors, two task dims."""
    splits = splits if grid % splits == 0 else 1
    domain = (rows, cols) if task_dims == 1 else (2, -(-rows // 2), cols)
    groups = ((0,), (1,)) if task_dims == 1 else ((0, 1), (2,))
    try:
        m = ThreadMapping("rows", domain, groups, tpr * rows_per_block, grid, threads_per_row=tpr, splits=splits,
                          combine="atomic" if splits > 1 else "none", per_thread=vec, vector=vec)
        m.check()
    except AStitchError:
        assume(False)
    n_rows = m.size // m.extent(1)
    for got, want in zip(m.row_starts(), m.locate(np.arange(n_rows, dtype=np.int64) * m.extent(1)), strict=True):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_row_starts_needs_rows_in_order():
    with pytest.raises(AStitchError, match="row_starts needs a rows mapping"):
        ThreadMapping("rows", (4, 8), ((1,), (0,)), 32, 4, threads_per_row=8).row_starts()


def test_lanes_are_contiguous_where_they_step_along_the_innermost_dims():
    """``lanes_contiguous``: does a warp's neighbouring lanes take neighbouring elements?  The planner adopts a
    mapping of another shape for an elementwise stage only then (its loads and stores stay coalesced)."""
    from astitch_sim.plan.mapping import lanes_contiguous
    assert lanes_contiguous("flat", (6, 5), ((0, 1),))
    assert lanes_contiguous("rows", (2, 32, 10240), ((0, 1), (2,)))              # a group norm's view, rows
    assert lanes_contiguous("columns", (16, 64, 96), ((0,), (1,), (2,)))         # columns along the innermost dim
    assert not lanes_contiguous("rows", (8, 64, 64, 32, 10), ((0, 3), (1, 2, 4)))   # dim 3 between the row's dims
    assert not lanes_contiguous("columns", (8, 64, 64, 32, 10), ((0, 3), (1, 2, 4), ()))  # lanes over (n, g)
    assert not lanes_contiguous("columns", (64, 96, 16), ((0,), (2,), (1,)))     # columns not the innermost
    # with random groups, the answer is exactly: neighbouring lanes' elements are neighbours in memory
    rng = np.random.default_rng(0)
    for _ in range(200):
        rank = int(rng.integers(2, 5))
        domain = tuple(int(d) for d in rng.integers(2, 4, rank))
        dims = [int(d) for d in rng.permutation(rank)]
        cut = int(rng.integers(1, rank))
        groups = (tuple(sorted(dims[:cut])), tuple(sorted(dims[cut:])))
        m = ThreadMapping("rows", domain, groups, block=64, grid=1, threads_per_row=64)
        first_row = m.first_element_of_task(np.zeros(1, np.int64))[0]
        cols = np.arange(m.cols)
        flat = np.array([np.flatnonzero((m.task_of(np.arange(m.size)) == 0)
                                        & (m.view_index(np.arange(m.size))[1] == c))[0] for c in cols])
        assert flat[0] == first_row
        assert lanes_contiguous("rows", domain, groups) == bool(np.all(np.diff(flat) == 1)), (domain, groups)


def test_a_sealed_mappings_derived_numbers_are_worked_out_once():
    """While a planner builds a mapping its derived numbers follow every field change; once sealed (fields
    frozen) each is worked out once and kept; a changed copy works its own out."""
    m = ThreadMapping("rows", (64, 30000), ((0,), (1,)), 1024, 64, threads_per_row=1024, per_thread=4, vector=4)
    assert m.slots == 64 and m.extent(1) == 30000 and m.trips == 8
    m.grid, m.splits = 128, 2
    assert m.slots == 64 and m.chunk == 15000 and m.trips == 4
    m.seal()
    assert (m.slots, m.chunk, m.trips, m.extents) == (64, 15000, 4, (64, 30000))
    assert {k: v for k, v in vars(m).items() if k.startswith("_once_")} == \
        {"_once_slots": 64, "_once_rows_per_block": 1, "_once_chunk": 15000, "_once_cols": 30000,
         "_once_extents": (64, 30000), "_once_trips": 4}
    other = dataclasses.replace(m, grid=64, splits=1)
    assert not other.sealed and other.slots == 64 and other.chunk == 30000
