"""The SIMT model's fast counting paths give exactly the plain counts (issue 14's speed work).

Each fast path is checked against the definition it shortcuts, on geometries built to
reach its corners: grid-stride loops with several trips, rows shorter than a warp, rows
that are not a multiple of 32, rows longer than a whole trip of the grid, unaligned bases.
"""
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from astitch_sim.ir.flatindex import row_major_strides
from astitch_sim.ir.index_rules import reshape_index
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.simt import geometry, memory, reduce
from astitch_sim.simt.memory import Access

FLAT_CASES = [  # rows, cols, block, grid
    (64, 30000, 1024, 1875),      # the paper's <64,30000>, one trip
    (64, 30000, 256, 40),         # many trips; a row spans several blocks and trips
    (3000, 20, 128, 7),           # rows shorter than a warp
    (517, 33, 64, 5),             # odd everything
    (8, 100000, 512, 3),          # a row longer than a trip of the whole grid
]


def _flat_geometry(monkeypatch, rows, cols, block, grid):
    monkeypatch.setattr(geometry, "SEPARABLE_MIN", 1)
    m = ThreadMapping("flat", (rows, cols), ((0, 1),), block=block, grid=grid)
    g = geometry.Geometry(m)
    assert g.flat
    return g


def _plain(monkeypatch, geom, acc):
    monkeypatch.setattr(memory, "FLAT_STRUCTURED", False)
    try:
        return memory.count_flat(geom, acc)
    finally:
        monkeypatch.setattr(memory, "FLAT_STRUCTURED", True)


@pytest.mark.parametrize("rows,cols,block,grid", FLAT_CASES)
@pytest.mark.parametrize("itemsize,base,stride", [(4, 0, 1), (4, 256 + 12, 1), (8, 512, 3), (2, 0, 16)])
@pytest.mark.parametrize("dedup", [True, False])
def test_row_broadcast_flat_count_is_exact(monkeypatch, rows, cols, block, grid, itemsize, base, stride, dedup):
    """A row statistic read at every element of a grid-stride loop: the O(warps) count equals the plain one."""
    geom = _flat_geometry(monkeypatch, rows, cols, block, grid)
    acc = Access("global", "read", "stat", itemsize, base, [geom.idx[0] * stride], dedup=dedup)
    fast = memory.count_flat_outer(geom, acc)
    assert fast is not None
    assert fast == _plain(monkeypatch, geom, acc)


@pytest.mark.parametrize("rows,cols,block,grid", [(64, 4096, 256, 40), (8, 100000, 512, 3), (30, 64, 32, 7),
                                                 (16, 1024, 256, 64)])
@pytest.mark.parametrize("mask", [False, True])
def test_column_broadcast_flat_count_is_exact(monkeypatch, rows, cols, block, grid, mask):
    """A per-column vector (a bias) read at every element of a grid-stride loop over several trips: the
    blocks' covered columns, merged interval by interval, give the plain count's distinct elements."""
    geom = _flat_geometry(monkeypatch, rows, cols, block, grid)
    j = geom.idx[1]
    acc = Access("global", "read", "bias", 4, 256, [j], mask=(j % 3 > 0) if mask else None, dedup=True)
    monkeypatch.setattr(memory, "PATHS", dict.fromkeys(memory.PATHS, 0))
    fast = memory.count_flat(geom, acc)
    assert memory.PATHS.get("flat_structured", 0) == 1
    assert fast == _plain(monkeypatch, geom, acc)


@pytest.mark.parametrize("rows,cols,block,grid", [(300, 16, 64, 5), (100, 8, 32, 3), (7, 4, 32, 1)])
@pytest.mark.parametrize("mask", [False, True])
def test_column_broadcast_over_rows_shorter_than_a_warp_is_exact(monkeypatch, rows, cols, block, grid, mask):
    """A per-column vector over rows shorter than a warp (a warp reads several rows): every warp reads the
    same addresses, so two warps are counted (the short-period path), and the counters are the plain ones."""
    geom = _flat_geometry(monkeypatch, rows, cols, block, grid)
    j = geom.idx[1]
    monkeypatch.setattr(memory, "PATHS", {})
    for acc in (Access("global", "read", "bias", 4, 256, [j], mask=(j % 3 > 0) if mask else None, dedup=True),
                Access("global", "read", "bias", 2, 6, [j * 5], dedup=False)):
        fast = memory.count_flat(geom, acc)
        assert fast == _plain(monkeypatch, geom, acc)
    assert memory.PATHS == {"flat_short_period": 2}


@pytest.mark.parametrize("rows,cols,block,grid,splits,vector", [
    (512, 128, 128, 16, 8, 2),      # 2 tiles of 64 columns, each split over 8 blocks
    (300, 96, 64, 4, 4, 4),         # 1 tile of 128 columns over 96: idle lanes; 300 rows over 4 splits
    (256, 64, 256, 6, 3, 1),        # scalar lanes, 2 tiles of 32, 3 splits
])
def test_a_split_column_mapping_counts_its_reads_separably_and_exactly(monkeypatch, rows, cols, block, grid, splits,
                                                                        vector):
    """A column mapping whose reduced dim is split: a block is ``split + splits * tile``, the splits in the tiles'
    gaps, so a row statistic (layer-norm backward's ``mean[r]``, read by every column lane) is counted on the
    separable lines, not on every lane access, and its counters are the dense count's."""
    monkeypatch.setattr(geometry, "SEPARABLE_MIN", 1)
    m = ThreadMapping("columns", (rows, cols), ((), (0,), (1,)), block=block, grid=grid, threads_per_row=32,
                      splits=splits, combine="atomic", per_thread=vector, vector=vector)
    m.check()
    geom = geometry.Geometry(m)
    assert geom.separable
    i, j = geom.idx
    for acc in (Access("global", "read", "mean", 4, 0, [i], dedup=True),
                Access("global", "read", "gamma", 4, 256, [j], dedup=True),
                Access("global", "read", "x", 4, 0, [i * cols, j], dedup=True, identity=True)):
        monkeypatch.setattr(memory, "PATHS", dict.fromkeys(memory.PATHS, 0))
        assert memory.count(geom, acc) == memory.count_dense(geom, acc), acc.node
        assert memory.PATHS["dense"] == 0, (acc.node, memory.PATHS)


@pytest.mark.parametrize("block,grid,vector", [(256, 12, 4), (128, 5, 1)])
def test_a_value_per_group_of_rows_and_column_counts_separably_and_exactly(monkeypatch, block, grid, vector):
    """Attention's ``mask[batch, key]`` read by every head's query rows: the X part (``batch * keys``) repeats
    over a batch's rows and its blocks repeat over a block's rows, yet a (block, element) pair still names its
    halves (the distinct batch offsets lie a whole key row apart), so the separable count serves it exactly."""
    monkeypatch.setattr(geometry, "SEPARABLE_MIN", 1)
    rows, keys = 96, 128
    m = ThreadMapping("rows", (rows, keys), ((0,), (1,)), block=block, grid=grid, threads_per_row=32,
                      per_thread=vector, vector=vector)
    geom = geometry.Geometry(m)
    i, j = geom.idx
    acc = Access("global", "read", "mask", 4, 0, [(i // 24) * keys, j], dedup=True)
    monkeypatch.setattr(memory, "PATHS", dict.fromkeys(memory.PATHS, 0))
    assert memory.count(geom, acc) == memory.count_dense(geom, acc)
    assert memory.PATHS["separable"] == 1 and memory.PATHS["dense"] == 0, memory.PATHS


def test_row_broadcast_flat_count_declines_what_it_cannot_shortcut(monkeypatch):
    geom = _flat_geometry(monkeypatch, 64, 3000, 256, 40)
    backwards = Access("global", "read", "stat", 4, 0, [(63 - geom.idx[0]) * 1], dedup=True)
    masked = Access("global", "read", "stat", 4, 0, [geom.idx[0]], mask=geom.idx[1] < 7, dedup=True)
    per_element = Access("global", "read", "x", 4, 0, [geom.idx[0] * 3000, geom.idx[1]], dedup=True)
    for acc in (backwards, masked, per_element):
        assert memory.count_flat_outer(geom, acc) is None
    # the general path still counts them (the one count() takes)
    assert memory.count(geom, backwards) == _plain(monkeypatch, geom, backwards)


def _bank_conflicts_by_sort(W, A, itemsize):
    """The definition, warp by warp: for each bank the distinct words a warp touches; max - 1 extra."""
    total = 0
    for w in np.unique(W):
        words = set()
        for a in A[W == w]:
            for k in range(max(1, itemsize // 4)):
                words.add(a // 4 + k)
        banks = {}
        for word in words:
            banks.setdefault(word % 32, set()).add(word)
        total += max(len(v) for v in banks.values()) - 1
    return total


@pytest.mark.parametrize("itemsize", [2, 4, 8])
def test_bank_conflicts_one_access_per_warp(itemsize):
    rng = np.random.default_rng(3)
    W = rng.permutation(500)                         # every warp instruction has one lane
    A = rng.integers(0, 1 << 14, 500) * itemsize
    assert memory.bank_conflicts(W, A, itemsize) == _bank_conflicts_by_sort(W, A, itemsize) == 0
    W2 = np.repeat(np.arange(250), 2)                # two lanes per warp: the sorting path
    assert memory.bank_conflicts(W2, A, itemsize) == _bank_conflicts_by_sort(W2, A, itemsize)


@pytest.mark.parametrize("seed", range(6))
def test_bank_conflicts_narrow_warps_skip_the_sort(seed):
    """Warps whose words lie within 32 consecutive words (a broadcast, a contiguous row) cost nothing and
    are left out of the sort; the others are counted as before: mixed warps of every kind, lanes in runs
    (the fast path) or shuffled (the sort over everything), every item size."""
    rng = np.random.default_rng(seed)
    warps = 300
    lanes = rng.integers(1, 33, warps)
    W = np.repeat(np.arange(warps), lanes)
    kind = np.repeat(rng.integers(0, 4, warps), lanes)
    lane = np.concatenate([np.arange(n) for n in lanes])
    itemsize = int(rng.choice([2, 4, 8, 16]))
    A = np.select([kind == 0, kind == 1, kind == 2],
                  [np.repeat(rng.integers(0, 1 << 12, warps), lanes) * 4,            # broadcast
                   (np.repeat(rng.integers(0, 1 << 10, warps), lanes) + lane) * itemsize,   # contiguous
                   lane * 32 * 4 * rng.integers(1, 3)],                             # strided: conflicts
                  rng.integers(0, 1 << 12, W.size) * itemsize).astype(np.int64)     # scattered
    want = _bank_conflicts_by_sort(W, A, itemsize)
    assert want > 0
    assert memory.bank_conflicts(W, A, itemsize) == want
    shuffled = rng.permutation(W.size)
    assert memory.bank_conflicts(W[shuffled], A[shuffled], itemsize) == want


@pytest.mark.parametrize("first", [None, 0.0])
@pytest.mark.parametrize("tasks,lanes", [(1, 1), (5, 1), (7, 32), (3000, 32), (100, 7), (40, 1024), (0, 16),
                                         (300, 41), (200, 23), (90, 17)])
def test_blocked_tree_combines_the_gpu_pairs(monkeypatch, tasks, lanes, first):
    """The blocked tree folds exactly the pairs of ``buf[j] += buf[j + h]``, bit for bit: its first halvings on
    the tasks' rows as they lie (halves of at least ``TREE_SIDE_BY_SIDE`` lanes, an odd lane count's middle
    lane carried: 41, 23, 17), the rest lanes-first; ``first``: the identity folded into every lane before (a
    0.0 start turns a -0.0 element into +0.0: the first task, all -0.0, sums to +0.0 only if it is added)."""
    monkeypatch.setattr(reduce, "TREE_BLOCK", 256)   # many blocks, a partial last one
    rng = np.random.default_rng(lanes)
    a = (rng.standard_normal((tasks, 2, lanes)) * 10.0 ** rng.integers(-6, 6, (tasks, 2, lanes))).astype(np.float32)
    a[rng.random(a.shape) < 0.1] = -0.0
    a[:1] = -0.0
    want = a.copy() if first is None else (np.float32(first) + a)
    n, steps = lanes, 0
    while n > 1:                                     # the GPU's loop, lane by lane
        h = (n + 1) // 2
        for j in range(n - h):
            want[..., j] = want[..., j] + want[..., j + h]
        n, steps = h, steps + 1
    (got,), got_steps = reduce.tree((a,), lambda x, y: (np.add(x[0], y[0]),), None if first is None else (first,))
    assert got_steps == steps and got.shape == (tasks, 2) and got.dtype == np.float32
    assert got.tobytes() == want[..., 0].tobytes()


def _plain_pairs(W, S):
    """The definition: distinct (W, S) pairs and distinct W, by numpy's unique."""
    pairs = np.unique(np.stack([W, S]), axis=1).shape[1] if W.size else 0
    return pairs, np.unique(W).size


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", [(20000, 300, 50), (5000, 40, 100000), (9000, 2, 3)])
def test_distinctpairs_by_table_and_by_sort_agree_with_the_definition(monkeypatch, seed, shape):
    """The presence table (small pair ranges) and the sort (large ones) both count exactly; warps
    recur run after run as in a columns stage, so the linear-time shortcut does not apply."""
    n, wspan, sspan = shape
    rng = np.random.default_rng(seed)
    W = np.repeat(rng.integers(0, wspan, n // 4), 4)
    S = rng.integers(-sspan, sspan, W.size)
    want = _plain_pairs(W, S)
    assert memory.distinct_pairs(W, S) == want
    monkeypatch.setattr(memory, "TABLE_MIN_ACCESSES", 0)
    assert memory.pairs_by_table(W, S) is not None or wspan * 2 * sspan > memory.TABLE_PER_ACCESS * W.size
    assert memory.distinct_pairs(W, S) == want            # the table wherever the range allows
    monkeypatch.setattr(memory, "TABLE_PER_ACCESS", 0)
    assert memory.pairs_by_table(W, S) is None           # the sort path, forced
    assert memory.distinct_pairs(W, S) == want


@pytest.mark.parametrize("case", ["one lane per warp", "repeat past the first 64", "repeat at the start"])
def test_distinctpairs_of_lanes_in_warps_of_their_own(monkeypatch, case):
    """Every lane in a warp instruction of its own (``W`` increasing: a reduction's results, each stored by its
    row's first thread) is counted in one comparison, ``(n, n)``, without the runs, table or sort; one repeated
    warp anywhere takes the general count, which agrees with the definition."""
    rng = np.random.default_rng(3)
    W = np.cumsum(rng.integers(1, 5, 20000))
    if case == "repeat past the first 64":
        W[5000] = W[4999]
    elif case == "repeat at the start":
        W[1] = W[0]
    S = rng.integers(0, 1 << 30, W.size)
    want = _plain_pairs(W, S)
    if case == "one lane per warp":
        monkeypatch.setattr(memory, "all_distinct", lambda a: pytest.fail("the general count ran"))
        assert want == (W.size, W.size)
    assert memory.distinct_pairs(W, S) == want


@pytest.mark.parametrize("W", [np.array([], np.int64), np.array([3, 3, 1, 1, 3, 2, 2]), np.arange(10) // 3,
                               np.tile(np.arange(5), 100)])
def test_distinct_count_is_the_number_of_distinct_values(W):
    assert memory.distinct_count(W) == np.unique(W).size


def _vectors_by_definition(geom, acc):
    """Issue 27's vector count as first written: every address of the domain at once (full-size
    arrays).  The shortcuts in ``memory.count_flat_vectors`` must give exactly these counters.  A domain
    that is not a whole number of vectors ends in a scalar tail: one instruction and sector per distinct
    address of the elements after the last whole vector."""
    m = geom.mapping
    s, n_all, V = acc.itemsize, geom.size, m.vector
    whole = n_all - n_all % V
    span = 32 * V
    rows = -(-whole // span)
    F = acc.flat(geom)
    sel = geom.full(acc.mask) if acc.mask is not None else None
    n = int(sel.sum()) if sel is not None else n_all
    out = {"n": n, "bytes": 0, "sectors": 0, "requests": 0, "conflicts": 0}
    if n == 0:
        return out
    S = np.full(rows * span, memory.BIG, dtype=np.int64)
    S[:whole] = (acc.base + s * F[:whole]) // memory.SECTOR
    if sel is not None:
        S[:whole][~sel[:whole]] = memory.BIG
    if memory.lane_class(F[:whole], V, acc.base // s if acc.base % s == 0 else 1) == "scattered":
        S = S.reshape(rows, 32, V).transpose(0, 2, 1).reshape(-1, 32)
    else:
        S = S.reshape(rows, span)
    out["sectors"], out["requests"] = memory.rows_distinct(S)
    tail = len(set(F[whole:][sel[whole:]].tolist() if sel is not None else F[whole:].tolist()))
    out["sectors"] += tail
    out["requests"] += tail
    if acc.dedup and not acc.identity:
        B = ((np.arange(n_all, dtype=np.int64) // V) % (m.grid * m.block)) // m.block
        keys = set(zip((B if sel is None else B[sel]).tolist(), (F if sel is None else F[sel]).tolist(), strict=True))
        out["bytes"] = s * len(keys)
    else:
        out["bytes"] = s * n
    return out


VECTOR_CASES = [  # rows, cols, block, grid, vector, unroll
    (64, 3000, 256, 40, 4, 1),      # many trips, a row spans several blocks
    (64, 3000, 128, 7, 4, 2),       # unrolled: two vectors per thread per round
    (300, 20, 64, 5, 4, 1),         # rows shorter than a warp's span
    (37, 66, 64, 3, 2, 1),          # odd rows, 2-wide
    (8, 1000, 32, 9, 4, 1),         # rows not a multiple of the warp span
    (5, 30, 32, 2, 4, 1),           # 150 elements: vectors across rows, a scalar tail of 2
    (7, 3, 32, 1, 4, 2),            # 21 elements: ... in one warp row, a tail of 1, unrolled
    (37, 101, 64, 3, 4, 2),         # 3737 elements: many rounds, a tail of 1
    (16, 256, 32, 4, 4, 1),         # rows a multiple of the warp span: the outer x inner shortcut
    (24, 128, 64, 600, 4, 1),       # ... in one trip of the grid
    (200, 64, 256, 5, 4, 1),        # two rows per warp row (batch norm's columns): the short-period shortcut
    (96, 32, 64, 3, 4, 2),          # ... four rows per warp row, unrolled
    (50, 16, 32, 3, 2, 1),          # ... a last warp row half full
    (3, 16, 32, 1, 4, 1),           # ... the whole domain shorter than a warp row
]


def _vector_accesses(geom):
    i, j = geom.idx
    rows, cols = geom.shape
    yield Access("global", "read", "x", 4, 0, [i * cols, j], dedup=True, identity=True)
    yield Access("global", "read", "x", 4, 256, [i * cols, j], dedup=True, identity=True)
    yield Access("global", "write", "y", 2, 512, [i * cols, j], identity=True)
    yield Access("global", "read", "stat", 4, 768, [i], dedup=True)                 # row statistic
    yield Access("global", "read", "stat", 8, 1024, [i * 3], dedup=False)
    yield Access("global", "read", "gamma", 4, 256, [j], dedup=True)                # column broadcast
    yield Access("global", "read", "gamma", 4, 256, [j], mask=j % 5 > 0, dedup=True)
    yield Access("global", "read", "gamma2", 4, 0, [j // 2], dedup=True)            # not one element per lane
    yield Access("global", "read", "xt", 4, 0, [j * rows, i], dedup=True)           # transposed
    yield Access("global", "read", "x", 4, 0, [i * cols, j], mask=j < 7, dedup=True)
    yield Access("global", "read", "x", 4, 4, [i * cols, j], dedup=True)            # unaligned vectors
    yield Access("global", "read", "back", 4, 0, [(rows - 1 - i)], dedup=True)      # rows backwards
    yield Access("global", "read", "pad", 4, 0, [i * (cols + 1), j], dedup=True)    # rows of a padded tensor
    yield Access("global", "read", "pad", 4, 0, [i * (cols + 2), j], mask=i % 3 > 0, dedup=True)
    # element indices below zero (an offset from the buffer's base): distinct pairs must not collide
    yield Access("global", "read", "off", 4, 4 * 5120, [i * (cols + 3) - 5120, j], dedup=True)
    yield Access("global", "read", "off", 4, 4 * 64, [(rows - 1 - i) - 64, j // 3], dedup=True)
    yield Access("global", "read", "lr", 4, 1024 + 4, [], dedup=True)                # one scalar for all
    yield Access("global", "read", "lr", 2, 6, [7], dedup=False)


@pytest.mark.parametrize("rows,cols,block,grid,vector,unroll", VECTOR_CASES)
@pytest.mark.parametrize("chunk", [1 << 21, 4096])
def test_vector_counts_equal_the_full_size_definition(monkeypatch, rows, cols, block, grid, vector, unroll, chunk):
    """Every way ``count_flat_vectors`` counts (the identity formula, the row-statistic shortcut, the
    chunked addresses: one chunk and many) gives the counters of the full-size definition."""
    monkeypatch.setattr(geometry, "SEPARABLE_MIN", 1)
    monkeypatch.setattr(memory, "VECTOR_CHUNK", chunk)
    m = ThreadMapping("flat", (rows, cols), ((0, 1),), block=block, grid=grid,
                      per_thread=vector * unroll, vector=vector)
    geom = geometry.Geometry(m)
    assert geom.flat
    monkeypatch.setattr(memory, "PATHS", {})
    for acc in _vector_accesses(geom):
        assert memory.count_flat_vectors(geom, acc) == _vectors_by_definition(geom, acc), acc.node
    # the column broadcasts (one element per column: 2 of the accesses) over rows a warp row holds whole
    # several times take the short-period path
    short = cols < 32 * vector and (32 * vector) % cols == 0
    assert memory.PATHS.get("flat_short_period", 0) == (2 if short else 0), memory.PATHS


def test_vector_counts_never_build_a_domain_sized_array(monkeypatch):
    """log_softmax at 8192x32000 read through 4-wide vectors held 14 GB before the count was chunked:
    here a domain of 16 chunks is counted with no array of more than a chunk's elements."""
    monkeypatch.setattr(geometry, "SEPARABLE_MIN", 1)
    monkeypatch.setattr(memory, "VECTOR_CHUNK", 1 << 18)
    rows, cols = 128, 32768
    m = ThreadMapping("flat", (rows, cols), ((0, 1),), block=256, grid=528, per_thread=4, vector=4)
    geom = geometry.Geometry(m)
    largest = []
    real_full = np.full

    def watched_full(shape, *a, **k):
        arr = real_full(shape, *a, **k)
        largest.append(arr.size)
        return arr
    monkeypatch.setattr(memory.np, "full", watched_full)
    monkeypatch.setattr(geom, "full", lambda a: pytest.fail("a domain-sized broadcast"), raising=False)
    i, j = geom.idx
    for acc in (Access("global", "read", "x", 4, 0, [i * cols, j], dedup=True, identity=True),
                Access("global", "read", "stat", 4, 0, [i], dedup=True),
                Access("global", "read", "gamma", 4, 0, [j], dedup=True),
                Access("global", "read", "x", 4, 0, [i * cols, j], mask=j < 7, dedup=True)):
        out = memory.count_flat_vectors(geom, acc)
        assert out["n"] > 0
    assert max(largest, default=0) <= memory.VECTOR_CHUNK


def test_vector_counts_combine_the_chunks_lane_classes(monkeypatch):
    """One chunk uniform (a row statistic), the next contiguous (the rows themselves): over the whole
    domain the vectors are neither, so every vector slot is its own instruction, as in the definition."""
    monkeypatch.setattr(geometry, "SEPARABLE_MIN", 1)
    monkeypatch.setattr(memory, "VECTOR_CHUNK", 4096)
    m = ThreadMapping("flat", (32, 256), ((0, 1),), block=32, grid=8, per_thread=4, vector=4)
    geom = geometry.Geometry(m)
    i, j = geom.idx
    mixed = Access("global", "read", "mixed", 4, 0, [np.where(i < 16, i + 0 * j, i * 256 + j)], dedup=True)
    want = _vectors_by_definition(geom, mixed)
    assert memory.count_flat_vectors(geom, mixed) == want
    assert want["requests"] == 8192 // 32       # one scalar instruction per warp and vector slot


def test_scattered_row_vectors_classifies_the_row_once_for_every_alignment():
    """``scattered_row_vectors`` answers, for all of the X part's alignments at once, what asking
    ``lane_class`` once per alignment answers (uniform, contiguous, misaligned, scattered rows)."""
    from types import SimpleNamespace

    from astitch_sim.ir.flatindex import distinct
    from astitch_sim.simt.memory import scattered_row_vectors, lane_class
    geom = SimpleNamespace(vector=4, mapping=SimpleNamespace(kind="rows"))
    rows = {"uniform": np.repeat(np.arange(8), 4), "contiguous": np.arange(32), "shifted": np.arange(32) + 1,
            "scattered": np.arange(32)[::-1].copy(), "ragged": np.arange(30)}
    seen = set()
    for F_Y in rows.values():
        for F_X in (np.array([0, 4, 8]), np.array([0, 2]), np.array([3]), np.zeros(0, np.int64)):
            for base in (0, 64, 68, 3):
                acc = SimpleNamespace(itemsize=4, base=base)
                base_elems = base // 4 if base % 4 == 0 else 1
                want = any(lane_class(F_Y, 4, int(b)) == "scattered" for b in distinct((F_X + base_elems) % 4))
                got = scattered_row_vectors(geom, acc, F_X, F_Y)
                assert got == want, (F_Y, F_X, base)
                seen.add(got)
    assert seen == {True, False}


@settings(max_examples=300, deadline=None)
@given(W=st.lists(st.integers(0, 6), min_size=1, max_size=80).map(sorted),
       S=st.lists(st.integers(0, 4), min_size=80, max_size=80))
def test_mixed_runs_finds_a_warp_whose_sectors_go_both_ways(W, S):
    """``memory.mixed_runs`` (an OR over each warp run's steps) against its definition: the warp runs
    numbered, and some run number among both the rising and the falling steps."""
    W, S = np.array(W), np.array(S[:len(W)])
    chg = W[1:] != W[:-1]
    up, down = (S[1:] > S[:-1]) & ~chg, (S[1:] < S[:-1]) & ~chg
    run = np.cumsum(chg)
    assert memory.mixed_runs(chg, up, down) == bool(set(run[up].tolist()) & set(run[down].tolist()))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(batch=st.integers(1, 4), heads=st.integers(1, 3), queries=st.sampled_from([1, 8, 16]),
       keys=st.sampled_from([8, 32, 128]), block=st.sampled_from([32, 64, 128]), grid=st.integers(1, 9),
       vector=st.sampled_from([1, 2, 4]), unroll=st.sampled_from([1, 2]), stride=st.sampled_from([None, 1, 3]),
       per_head=st.booleans())
def test_an_offset_per_group_of_rows_plus_a_repeating_inner_part_counts_exactly(
        batch, heads, queries, keys, block, grid, vector, unroll, stride, per_head):
    """Attention's ``mask[batch, key]`` read at every ``(batch, head, query, key)`` by a grid-stride loop whose
    block holds trips in several batches (unrolled vectors): the outer offset ``batch * stride`` (or one per
    batch and head) is constant over runs of rows, the inner part repeats every ``keys``.  A block's distinct
    elements are counted per offset from the residues its trips cover, and every counter equals the
    full-size definition's (``stride`` None: offsets too close together, which the shortcut must decline)."""
    shape = (batch, heads, queries, keys)
    m = ThreadMapping("flat", shape, ((0, 1, 2, 3),), block=block, grid=grid, per_thread=vector * unroll,
                      vector=vector)
    with mock.patch.object(geometry, "SEPARABLE_MIN", 1), mock.patch.object(memory, "PATHS", {}):
        geom = geometry.Geometry(m)
        b, h, _, k = geom.idx
        outer = (b * heads + h) if per_head else b
        acc = Access("global", "read", "mask", 4, 256, [outer * (keys * stride if stride else 1), k], dedup=True)
        assert memory.count_flat_vectors(geom, acc) == _vectors_by_definition(geom, acc)
        TAKEN.append(memory.PATHS.get("outer_and_period", 0))


#: per example of the test above, whether the shortcut counted it (the test below checks it was exercised)
TAKEN: list = []


def test_the_offset_per_group_shortcut_was_exercised():
    """The property test above is no test of the shortcut unless the shortcut counted many of its examples."""
    if not TAKEN:
        test_an_offset_per_group_of_rows_plus_a_repeating_inner_part_counts_exactly()
    assert sum(TAKEN) >= 8, TAKEN


def test_attention_masks_offset_per_batch_takes_the_shortcut(monkeypatch):
    """At attention's own shape (16 x 12 x 128 x 128, blocks of 256 threads with two unrolled vectors each) the
    mask's (block, element) pairs are counted per batch, not address by address (the chunked count took 80 ms
    of a 115 ms simulation), and exactly: a block's trip holds 8 whole key rows, so its pairs are its (block,
    batch offset) pairs times the 128 keys (``whole_rows``); with that path off, from the keys each trip covers
    (``outer_and_period``)."""
    m = ThreadMapping("flat", (16, 12, 128, 128), ((0, 1, 2, 3),), block=256, grid=1536, per_thread=8, vector=4)
    geom = geometry.Geometry(m)
    b, _, _, k = geom.idx
    acc = Access("global", "read", "mask", 4, 12582912, [b * 128, k], dedup=True)
    monkeypatch.setattr(memory, "PATHS", {})
    fast = memory.count_flat_vectors(geom, acc)
    assert memory.PATHS.get("whole_rows") == 1, memory.PATHS
    with monkeypatch.context() as off:
        off.setattr(memory, "whole_rows_pairs", lambda *a: None)
        assert memory.count_flat_vectors(geom, acc) == fast
    assert memory.PATHS.get("outer_and_period") == 1, memory.PATHS
    # a block's two trips lie in batches b and b + 8: 128 distinct keys each, so 2 x 128 elements per block
    assert fast["bytes"] == 4 * 1536 * 2 * 128
    assert fast == _vectors_by_definition(geom, acc)


@pytest.mark.parametrize("domain,groups,block,grid,splits,vector", [
    ((64, 256), ((), (0, 1)), 256, 16, 16, 4),        # a whole-tensor sum over 16 blocks: parts of 4 rows
    ((96, 128), ((), (0, 1)), 128, 32, 32, 1),        # ... 32 blocks of 3 rows, scalar lanes
    ((1, 65536), ((0,), (1,)), 1024, 64, 64, 4),      # global_norm's one long row: each part cuts the dim
    ((4, 8, 1024), ((0,), (1, 2)), 256, 8, 2, 4),     # 4 rows of [8, 1024], each over 2 blocks of 4 x 1024
])
def test_a_split_row_counts_on_its_parts_exactly(monkeypatch, domain, groups, block, grid, splits, vector):
    """A rows mapping whose rows ``splits`` blocks share: the geometry locates its row as the parts' starts
    plus one part (the same block, thread and iteration as ``locate`` everywhere), and its accesses are
    counted over the parts (``Geometry.refined``: a part is one block, so the cut dim's outer half joins the
    dims a warp never spans) with the dense count's counters."""
    monkeypatch.setattr(geometry, "SEPARABLE_MIN", 1)
    m = ThreadMapping("rows", domain, groups, block=block, grid=grid, threads_per_row=block, splits=splits,
                      combine="atomic", per_thread=vector, vector=vector)
    m.check()
    geom, dense = geometry.Geometry(m), geometry.Geometry(m, dense=True)
    assert geom.separable and geom.refined is not None and geom.part_cut() is not None
    for name in ("block", "thread", "iteration"):
        assert np.array_equal(np.broadcast_to(getattr(geom, name), geom.shape), getattr(dense, name)), name
    idx = geom.idx
    strides = [int(np.prod(domain[k + 1:])) for k in range(len(domain))]
    own = [i * s for i, s in zip(idx, strides, strict=True)]
    accesses = [Access("global", "read", "x", 4, 0, own, dedup=True, identity=True),
                Access("global", "write", "y", 2, 4096, own, identity=True),
                Access("global", "read", "stat", 4, 256, [idx[0]], dedup=True),
                Access("global", "read", "gamma", 4, 512, [idx[-1]], dedup=True),
                Access("global", "read", "x", 4, 0, own, mask=idx[-1] % 3 > 0, dedup=True),
                Access("global", "read", "scalar", 4, 0, [np.zeros((1,) * len(domain), np.int64)], dedup=True),
                Access("shared", "read", "factor", 4, 16, [np.zeros((1,) * len(domain), np.int64)])]
    for acc in accesses:
        monkeypatch.setattr(memory, "PATHS", dict.fromkeys(memory.PATHS, 0))
        assert memory.count(geom, acc) == memory.count_dense(dense, acc), acc.node
        # a mask along the cut dim does not split over the parts: that access is counted on the whole row
        assert memory.PATHS.get("refined") == (0 if acc.mask is not None and np.shape(acc.mask)[geom.refined.cut] > 1
                                               else 1), (acc.node, memory.PATHS)


@pytest.mark.parametrize("kind,domain,groups,node_shape", [
    ("rows", (512, 8192), ((0,), (1,)), (4096, 1024)),          # Inductor's view of a [4096, 1024] sum
    ("rows", (64, 3, 100), ((0,), (1, 2)), (192, 100)),
    ("flat", (96, 40), ((0, 1),), (3840,)),
    ("columns", (32, 128, 1024), ((), (1,), (0, 2)), (4096, 1024))])
@pytest.mark.parametrize("kind_of_access", ["read", "write"])
def test_a_reshaped_node_at_its_own_index_counts_as_the_domains_own_index(kind, domain, groups, node_shape,
                                                                           kind_of_access):
    """A node that is the domain reshaped, read or written at its own index, is counted through the domain's own
    index (a term per dim: ``KernelRun._global_access``) instead of its reshaped index (domain-sized arrays):
    the same flat element at every element, so the same counters on whichever counting path each takes."""
    extra = dict(threads_per_row=32) if kind == "columns" else \
        dict(threads_per_row=256) if kind == "rows" else {}
    m = ThreadMapping(kind, domain, groups, block=256, grid=64, **extra)
    geom = geometry.Geometry(m)
    reshaped = reshape_index(geom.idx, domain, node_shape)
    via_node = [np.asarray(a, np.int64) * s for a, s in zip(reshaped, row_major_strides(node_shape), strict=True)]
    via_domain = [np.asarray(a, np.int64) * s for a, s in zip(geom.idx, row_major_strides(domain), strict=True)]
    assert max(np.size(t) for t in via_node) > max(np.size(t) for t in via_domain)    # (the point of it)
    for dedup in ((True, False) if kind_of_access == "read" else (False,)):
        want = memory.count(geom, Access("global", kind_of_access, "x", 4, 512, via_node, dedup=dedup, identity=True))
        got = memory.count(geom, Access("global", kind_of_access, "x", 4, 512, via_domain, dedup=dedup, identity=True))
        assert got == want


@settings(max_examples=100, deadline=None)
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=4), seed=st.integers(0, 1000),
       dtype=st.sampled_from([bool, np.int8]))
def test_a_masks_count_is_its_broadcasts(shape, seed, dtype):
    """``Geometry.count`` of a mask over fewer dims than the domain (counted as it is, times its repeats) is the
    count of its broadcast over the domain, empty domains and non-boolean masks included."""
    m = ThreadMapping("flat", tuple(shape), (tuple(range(len(shape))),), block=32, grid=4)
    geom = geometry.Geometry(m, dense=True)
    rng = np.random.default_rng(seed)
    mask_shape = tuple(n if rng.random() < 0.5 else 1 for n in shape)[rng.integers(0, len(shape) + 1):]
    mask = (rng.random(mask_shape) < 0.5).astype(dtype)
    assert geom.count(mask) == int(np.broadcast_to(mask, geom.shape).sum())


@settings(max_examples=300, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), seed=st.integers(0, 2 ** 32 - 1))
def test_terms_injective_only_says_yes_for_an_index_that_names_each_element_once(shape, seed):
    """``terms_injective`` against the definition (the broadcast sum's distinct values): never yes where two
    domain elements share an index, and yes for mixed-radix steps in any order and sign (a transpose's, a
    slice's, a reversal's) -- the steps drawn near the radix boundaries, where a collision is one step away."""
    rng = np.random.default_rng(seed)
    rank = len(shape)
    radix, terms = 1, []
    for k in rng.permutation(rank):
        step = int(radix + rng.integers(-1, 2)) * int(rng.choice([1, -1]))
        line = np.arange(shape[k], dtype=np.int64) * step + int(rng.integers(-3, 4))
        if rng.random() < 0.2:                     # a repeat or a gather: not a progression
            line = rng.integers(0, 5, shape[k])
        if rng.random() < 0.3 and shape[k] > 1:    # split over two terms of one dim
            terms.append((line // 2).reshape([-1 if d == k else 1 for d in range(rank)]))
            line = line - line // 2
        terms.append(line.reshape([-1 if d == k else 1 for d in range(rank)]))
        radix *= shape[k]
    if rng.random() < 0.2:                          # a term over two dims
        terms.append(rng.integers(0, 3, shape).astype(np.int64))
    if rng.random() < 0.2 and rank > 1:             # ... a progression once flattened (a row-major own index)
        terms.append(np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) * int(rng.integers(-2, 3)))
    F = sum(np.broadcast_to(t, shape) for t in terms).ravel()
    if memory.terms_injective(terms, tuple(shape)):
        assert np.unique(F).size == F.size, (terms, shape)


def test_terms_injective_answers_yes_for_a_transposed_read():
    """The key-major ``[b, h, d, s]`` tensor read at ``[b, s, h, d]`` (grouped-query attention's values),
    and no for a broadcast along one dim or a dim left out."""
    b, s, h, d = np.ogrid[:2, :256, :32, :64]
    assert memory.terms_injective([b * 524288, h * 16384, d * 256, s], (2, 256, 32, 64))
    assert not memory.terms_injective([b * 524288, h * 16384, d * 256], (2, 256, 32, 64))
    assert not memory.terms_injective([b * 524288, h * 16384, d * 256, s // 2], (2, 256, 32, 64))
    assert not memory.terms_injective([b * 524288, h * 16384, d * 255, s], (2, 256, 32, 64))
    # a term over two dims is a progression once flattened, but not one step per dim: 3*i + j + 2*j repeats
    assert not memory.terms_injective([np.arange(6).reshape(2, 3), np.arange(3) * 2], (2, 3))


def _lane_class_by_definition(F, V, base_elems=0):
    if V <= 1 or F.size % V:
        return "scattered"
    G = F.reshape(-1, V)
    if (G == G[:, :1]).all():
        return "uniform"
    if ((G - G[:, :1]) == np.arange(V)).all() and not ((G[:, 0] + base_elems) % V).any():
        return "contiguous"
    return "scattered"


@settings(max_examples=300, deadline=None)
@given(V=st.sampled_from([1, 2, 4, 8]), rows=st.integers(0, 40), kind=st.sampled_from(["uniform", "contiguous",
                                                                                       "scattered"]),
       spoil=st.integers(-1, 200), base=st.integers(0, 9), seed=st.integers(0, 2 ** 32 - 1))
def test_lane_class_is_its_definition(V, rows, kind, spoil, base, seed):
    """The first vector's early answer changes nothing: uniform, contiguous or scattered vectors, one element
    (the first vector's or a later one's) spoiled, any alignment."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, 50, rows) * (V if rng.random() < 0.7 else 1)
    lanes = {"uniform": np.zeros(V, np.int64), "contiguous": np.arange(V),
             "scattered": rng.integers(0, 3, V)}[kind]
    F = (starts[:, None] + lanes[None, :]).ravel()
    if 0 <= spoil < F.size:
        F[spoil] += 1
    assert memory.lane_class(F, V, base) == _lane_class_by_definition(F, V, base)


@pytest.mark.parametrize("rows,cols,block,grid", FLAT_CASES + [(1, 7, 256, 4), (3, 100, 64, 1), (2, 1024, 256, 2)])
@pytest.mark.parametrize("terms", [[], [5], [np.int64(3), np.zeros((1, 1), np.int64)]])
@pytest.mark.parametrize("dedup", [True, False])
def test_a_scalar_read_at_every_element_counts_as_the_plain_count(monkeypatch, rows, cols, block, grid, terms, dedup):
    """One address read by every thread of a grid-stride loop (a dynamic slice's start): a sector and a request
    per warp instruction, one element per block that runs any -- the plain count's answer, over one trip or
    many, a last trip partly filled, fewer elements than a block; a masked read is left to the other paths."""
    geom = _flat_geometry(monkeypatch, rows, cols, block, grid)
    acc = Access("global", "read", "start", 4, 256 + 4, terms, dedup=dedup)
    assert memory.count_flat_uniform(geom, acc) == _plain(monkeypatch, geom, acc)
    masked = Access("global", "read", "start", 4, 256, terms, geom.idx[1] < 3, dedup=dedup)
    assert memory.count_flat_uniform(geom, masked) is None
