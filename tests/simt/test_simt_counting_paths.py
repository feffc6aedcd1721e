"""The SIMT model's fast counting paths give exactly the plain counts (issue 14's speed work).

Each fast path is checked against the definition it shortcuts, on geometries built to
reach its corners: grid-stride loops with several trips, rows shorter than a warp, rows
that are not a multiple of 32, rows longer than a whole trip of the grid, unaligned bases.
"""
import numpy as np
import pytest

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


@pytest.mark.parametrize("tasks,lanes", [(1, 1), (5, 1), (7, 32), (3000, 32), (100, 7), (40, 1024), (0, 16)])
def test_blocked_tree_combines_the_gpu_pairs(monkeypatch, tasks, lanes):
    """The blocked lanes-first tree folds exactly the pairs of ``buf[j] += buf[j + h]``, bit for bit."""
    monkeypatch.setattr(reduce, "TREE_BLOCK", 256)   # many blocks, a partial last one
    rng = np.random.default_rng(lanes)
    a = (rng.standard_normal((tasks, 2, lanes)) * 10.0 ** rng.integers(-6, 6, (tasks, 2, lanes))).astype(np.float32)
    want = a.copy()
    n, steps = lanes, 0
    while n > 1:                                     # the GPU's loop, lane by lane
        h = (n + 1) // 2
        for j in range(n - h):
            want[..., j] = want[..., j] + want[..., j + h]
        n, steps = h, steps + 1
    (got,), got_steps = reduce.tree((a,), lambda x, y: (np.add(x[0], y[0]),))
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


@pytest.mark.parametrize("W", [np.array([], np.int64), np.array([3, 3, 1, 1, 3, 2, 2]), np.arange(10) // 3,
                               np.tile(np.arange(5), 100)])
def test_distinct_count_is_the_number_of_distinct_values(W):
    assert memory.distinct_count(W) == np.unique(W).size
