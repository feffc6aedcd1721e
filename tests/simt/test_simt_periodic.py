"""Rows packed several to a warp are counted one block's rows at a time (``simt/periodic.py``), exactly; and an
index through a reshape is split per dim (``geometry.additive_parts``, ``memory.sums_distinct``).

Every counter of the periodic path is compared with the dense count (the definition: every lane access of
the domain), on rows mappings with 1-16 lanes per row, vectors, split rows, vertical packing, a partly filled
last block, several task dims, unaligned bases, masks and the access patterns of real kernels (the row
itself, a broadcast row vector, a per-row value, a strided and a transposed read); and on the paper's DIEN
softmax, whose simulation the path exists for.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.simt import geometry, memory
from astitch_sim.simt.memory import Access

# domain, task groups, block, grid, threads_per_row, splits, vector
MAPPINGS = {
    "dien-like, partial last block": ((3001, 32), ((0,), (1,)), 256, 94, 8, 1, 4),
    "vertical packing, whole periods": ((3200, 32), ((0,), (1,)), 128, 10, 8, 1, 4),
    "vertical packing, ragged end": ((3000, 32), ((0,), (1,)), 128, 10, 8, 1, 4),
    "grid-stride, partial last block in a block of earlier trips": ((1000, 32), ((0,), (1,)), 256, 7, 8, 1, 4),
    "grid-stride, scalar lanes, partial block of earlier trips": ((777, 16), ((0,), (1,)), 128, 5, 4, 1, 1),
    "16 lanes, two trips of pairs": ((1000, 64), ((0,), (1,)), 64, 63, 16, 1, 2),
    "split rows": ((500, 64), ((0,), (1,)), 64, 126, 8, 2, 4),
    "scalar lanes, three trips": ((2000, 12), ((0,), (1,)), 32, 250, 4, 1, 1),
    "a thread per row": ((5000, 8), ((0,), (1,)), 128, 40, 1, 1, 4),
    "two task dims": ((12, 250, 32), ((0, 1), (2,)), 256, 94, 8, 1, 4),
}


def _geometry(monkeypatch, name):
    monkeypatch.setattr(geometry, "SEPARABLE_MIN", 1)
    domain, (tasks, row), block, grid, tpr, splits, vector = MAPPINGS[name]
    m = ThreadMapping("rows", domain, (tasks, row), block=block, grid=grid, threads_per_row=tpr, splits=splits,
                      per_thread=vector, vector=vector)
    g = geometry.Geometry(m)
    assert g.separable and g.X is None
    return g


def _accesses(g):
    """name -> (terms, mask) over the geometry's domain: what real kernels read."""
    *task_idx, col = g.idx
    rows = task_idx[0] * g.shape[1] + task_idx[1] if len(task_idx) == 2 else task_idx[0]
    C = g.shape[-1]
    return {
        "the row": [rows * C, col],
        "row vector (gamma)": [col],
        "per-row value": [rows],
        "a batch's row (attention mask)": [(rows // 4) * C, col],
        "strided": [rows * (C + 3), col * 2],
        "transposed": [col * int(np.prod(g.shape[:-1])), rows],
        "one term over both": [rows * C + col],
        "not a sum": [(rows * 7 + col * 13) % 101],
        "a scalar (broadcast)": [],
    }, {
        "none": None,
        "columns": col % 3 > 0,
        "even rows": rows % 2 == 0,
        "first half": rows < int(np.prod(g.shape[:-1])) // 2,
    }


@pytest.mark.parametrize("name", list(MAPPINGS))
@pytest.mark.parametrize("space,itemsize,base,dedup", [("global", 4, 0, True), ("global", 4, 256 + 12, False),
                                                      ("global", 2, 512, True), ("shared", 4, 64, False)])
def test_periodic_count_equals_the_dense_count(monkeypatch, name, space, itemsize, base, dedup):
    g = _geometry(monkeypatch, name)
    terms, masks = _accesses(g)
    for tname, t in terms.items():
        for mname, mask in masks.items():
            acc = Access(space, "read", "x", itemsize, base, t, mask=mask, dedup=dedup)
            assert memory.count(g, acc) == memory.count_dense(g, acc), (tname, mname)


def test_the_periodic_path_is_taken_where_it_should_be(monkeypatch):
    """Not a vacuous comparison: the row (as two terms, or as one over both task and row dims), a broadcast row
    vector, a per-row value and a scalar take the path, with and without the partly filled last block; an index that is
    not a sum of a task part and a row part does not."""
    for name in ("dien-like, partial last block", "vertical packing, whole periods", "two task dims",
                 "grid-stride, partial last block in a block of earlier trips"):
        g = _geometry(monkeypatch, name)
        terms, _ = _accesses(g)
        for tname in ("the row", "one term over both", "row vector (gamma)", "per-row value",
                      "a batch's row (attention mask)", "a scalar (broadcast)"):
            monkeypatch.setattr(memory, "PATHS", dict.fromkeys(memory.PATHS, 0))
            memory.count(g, Access("global", "read", "x", 4, 0, terms[tname], dedup=True))
            assert memory.PATHS.get("periodic") == 1, (name, tname)
        monkeypatch.setattr(memory, "PATHS", dict.fromkeys(memory.PATHS, 0))
        memory.count(g, Access("global", "read", "x", 4, 0, terms["not a sum"], dedup=True))
        assert memory.PATHS["dense"] == 1 and not memory.PATHS.get("periodic")


def test_dien_softmax_counts_are_the_dense_counts(monkeypatch):
    """The paper's DIEN shape at a size the dense count finishes quickly: every strategy's counters with the
    periodic path equal those without it, and the stitched plan's row stages take it."""
    g = asim.workload("softmax", rows=20001, cols=32)
    ins = workload_inputs(g, 0)
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        monkeypatch.setattr(memory, "PATHS", dict.fromkeys(memory.PATHS, 0))
        fast = asim.simulate(plan, ins)
        taken = memory.PATHS.get("periodic", 0)
        monkeypatch.setattr(memory, "_count_periodic", lambda geom, acc: None)
        slow = asim.simulate(plan, ins)
        monkeypatch.undo()
        assert fast.stats == slow.stats, strategy
        for a, b in zip(fast.outputs, slow.outputs, strict=True):
            np.testing.assert_array_equal(a, b)
        if strategy == "astitch":
            assert taken > 0


@settings(deadline=None)
@given(st.integers(-50, 50), st.integers(1, 40), st.integers(1, 12),
       st.lists(st.integers(-2000, 2000), min_size=1, max_size=40, unique=True))
def test_sums_distinct_is_never_wrong(a, q, n, Q):
    """``memory.sums_distinct`` (a progression plus a set): whenever it says every sum is distinct, they are
    (checked by listing them); and for the reshape-split index it is built for it says so."""
    P, Q = a + q * np.arange(n), np.array(Q)
    sums = (P[:, None] + Q[None, :]).ravel()
    if memory.sums_distinct(P, Q):
        assert np.unique(sums).size == sums.size


def test_sums_distinct_sees_a_reshaped_index():
    d0, d1, d2 = np.arange(32), np.arange(512), np.arange(3072)
    assert memory.sums_distinct(d1 * 3072, (d0[:, None] * 512 * 3072 + d2[None, :]).ravel())
    assert not memory.sums_distinct(d1 * 3072, (d0[:, None] * 511 * 3072 + d2[None, :]).ravel())


@settings(deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.booleans(), st.integers(0, 5))
def test_additive_parts_add_up_or_decline(n0, n1, n2, additive, seed):
    """``geometry.additive_parts(a, dims)``: parts over ``dims`` and over the rest whose sum is ``a``, or None
    exactly when no such parts exist."""
    rng = np.random.default_rng(seed)
    f, g = rng.integers(-9, 9, (n0, 1, n2)), rng.integers(-9, 9, (1, n1, 1))
    a = f + g if additive else f * g + rng.integers(-9, 9, (n0, n1, n2))
    parts = geometry.additive_parts(a, (1,), 3)
    if parts is None:
        assert not additive
        return
    pa, pb = parts
    assert set(geometry.support(pa, 3)) <= {1} and set(geometry.support(pb, 3)) <= {0, 2}
    np.testing.assert_array_equal(np.broadcast_to(pa + pb, a.shape), a)


def test_a_scalar_read_in_rows_packed_to_a_warp():
    """Regression: a scalar added to every element of short rows packed several to a warp (``x + s``, then the
    row sums) crashed four strategies' simulation with an AttributeError (the periodic count's view of one
    period could not keep what the one-value-per-line count derives from it).  Now every strategy simulates it
    and matches the reference."""
    g = asim.Graph("scalar_in_packed_rows")
    x, s = g.parameter("x", (32, 32)), g.parameter("s", ())
    r = g.reduce(g.add(x, g.broadcast(s, (32, 32), name="sb"), name="y"), (1,), "sum", name="r")
    g.set_outputs([r])
    ins = [np.arange(32 * 32, dtype=np.float32).reshape(32, 32) / 7, np.float32(2.5)]
    want = asim.reference(g, ins)[0]
    for strategy in asim.STRATEGIES:
        res = asim.simulate(asim.compile(g, strategy, "H100"), ins)
        np.testing.assert_allclose(res.outputs[0], want, rtol=1e-6, err_msg=strategy)
