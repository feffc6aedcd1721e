"""Flat <-> multi-index arithmetic, independent of numpy's unravel_index (broken in numpy 2.3/2.4).

``np.unravel_index`` on an index array shaped (N, 1) with N > 8192 returned 8192
for every element past 8192, so every strategy gave silently wrong values for a
reshape (and so a norm or softmax) over more than 8192 rows.
"""
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import astitch_sim as asim
from astitch_sim.ir.flatindex import distinct, divmod_by, ravel, strided_view, unravel
from anchor import TESTS_FILE

ROOT = pathlib.Path(TESTS_FILE).resolve().parents[1]


@settings(max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=4),
       layout=st.sampled_from(["flat", "column", "row", "grid"]), seed=st.integers(0, 2 ** 16))
def test_unravel_then_ravel_is_identity_and_matches_python(shape, layout, seed):
    size = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    flat = rng.integers(0, size, 64)
    flat = {"flat": flat, "column": flat.reshape(-1, 1), "row": flat.reshape(1, -1),
            "grid": flat.reshape(8, 8)}[layout]
    multi = unravel(flat, shape)
    assert all(m.shape == flat.shape for m in multi)
    assert np.array_equal(ravel(multi, shape), flat)
    for f, *idx in zip(flat.ravel(), *(m.ravel() for m in multi), strict=True):
        expect, rest = [], int(f)
        for extent in reversed(shape):
            rest, r = divmod(rest, extent)
            expect.append(r)
        assert list(idx) == expect[::-1]


@pytest.mark.parametrize("shape", [(1, 1024, 32, 128), (4, 1, 8, 2), (3, 5, 7), (2, 1, 1, 6, 64), (16,)])
def test_unravel_is_the_floored_divmod_for_every_extent_and_any_value(shape):
    """Extent-1 and power-of-two dims take a shortcut (no division); the numbers are the floored divmod's
    for values past the end and negative ones too, not only in-range indices."""
    rng = np.random.default_rng(7)
    flat = np.concatenate([np.arange(-70, 70), rng.integers(-10 ** 12, 10 ** 12, 500)]).reshape(10, -1)
    want, rest = [], flat.copy()
    for extent in reversed(shape):
        rest, r = np.divmod(rest, extent)
        want.append(r)
    got = unravel(flat, shape)
    assert len(got) == len(shape)
    for g, w in zip(got, want[::-1], strict=True):
        assert g.dtype == np.int64 and g.shape == flat.shape and np.array_equal(g, w)


def test_unravel_past_numpy_iterator_buffer():
    """The exact shape that broke numpy 2.4: a (N, 1) column of indices, N > 8192."""
    n = 20000
    col = np.arange(n).reshape(-1, 1)
    (rows, zeros) = unravel(col, (n, 1))
    assert np.array_equal(rows.ravel(), np.arange(n))
    assert not zeros.any()


def test_scalar_and_empty_shapes():
    assert unravel(np.arange(3), ()) == ()
    assert int(ravel((), ())) == 0
    assert [a.tolist() for a in unravel(np.array([0]), (0, 4))] == [[0], [0]]


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_reshape_past_8192_rows_gives_right_values(strategy):
    """The issue's minimal repro: reshape f32[N] -> f32[N,1] with N > 8192, every strategy."""
    n = 20000
    g = asim.Graph("reshape_repro")
    x = g.parameter("x", (n,), "f32")
    g.set_outputs(g.negate(g.reshape(x, (n, 1))))
    inputs = [np.arange(n, dtype=np.float32)]
    out = asim.simulate(asim.compile(g, strategy, "H100"), inputs).outputs[0]
    assert np.array_equal(out, asim.reference(g, inputs)[0])


def test_no_module_uses_numpys_unravel_index():
    """Keep every index computation on flatindex: a reintroduced np.unravel_index would be silently wrong."""
    offenders = [str(p.relative_to(ROOT)) for pkg in ("astitch_sim", "gpu_backend", "app", "benchmarks")
                 for p in (ROOT / pkg).rglob("*.py") if "np.unravel_index(" in p.read_text()
                 or "np.ravel_multi_index(" in p.read_text()]
    assert not offenders, f"use astitch_sim.ir.flatindex instead of numpy's index helpers in {offenders}"


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 3000), span=st.sampled_from([1, 3, 100, 5000, 1 << 20, 1 << 40]), lo=st.integers(-1000, 1000),
       dtype=st.sampled_from(["int64", "int32", "int8", "uint8", "uint16", "uint32", "uint64", "int16"]),
       seed=st.integers(0, 1000))
def test_distinct_is_np_unique_whether_it_sorts_or_marks_a_table(n, span, lo, dtype, seed):
    """Both ways (a table over a narrow range of values, a sort over a wide one) give ``np.unique``, in the
    array's dtype, at the dtypes' edges too (an int8's range overflows int8)."""
    info = np.iinfo(dtype)
    lo = max(int(info.min), min(lo, int(info.max)))
    hi = min(int(info.max), lo + span)
    a = np.random.default_rng(seed).integers(lo, hi, n, endpoint=True, dtype=np.dtype(dtype))
    got = distinct(a)
    np.testing.assert_array_equal(got, np.unique(a))
    assert got.dtype == a.dtype


def test_distinct_answers_increasing_values_without_a_sort(monkeypatch):
    """Values already increasing and too sparse for the table (a row's start offsets, ``r * 32``) are their
    own answer, a copy (the caller may write to it), with no sort; values out of order still sort."""
    rows = np.arange(750, dtype=np.int64) * 32
    def no_sort(*a, **k):
        raise AssertionError("sorted")
    monkeypatch.setattr(np, "sort", no_sort)
    for a in (rows, rows.astype(np.int32), rows.reshape(25, 30)):
        got = distinct(a)
        np.testing.assert_array_equal(got, rows)
        assert got.dtype == a.dtype and not np.shares_memory(got, a)
    with pytest.raises(AssertionError, match="sorted"):
        distinct(rows[::-1].copy())                 # (decreasing: the sort, not the shortcut)


def test_distinct_is_np_unique_by_sorting():
    rng = np.random.default_rng(0)
    for a in (np.array([], np.int64), np.array([5]), rng.integers(-50, 50, 1000), rng.integers(0, 1 << 40, 50000),
              np.arange(10)[::-1].copy(), np.zeros((3, 4), np.int32)):
        got = distinct(a)
        np.testing.assert_array_equal(got, np.unique(a))
        assert got.dtype == np.asarray(a).dtype


def _factor_shapes():
    """(shape, operand shape) pairs of equal size: the operand's extents are products of the shape's prime
    factors regrouped, with dims of extent 1 sprinkled in (a reshape's possible operands)."""
    def regroup(shape, cuts, ones):
        primes = [p for e in shape for p in _primes(e)]
        cuts = sorted({c % (len(primes) + 1) for c in cuts})
        parts = [primes[a:b] for a, b in zip([0] + cuts, cuts + [len(primes)], strict=True)]
        src = [int(np.prod(p)) for p in parts if p] or [1]
        for o in ones:
            src.insert(o % (len(src) + 1), 1)
        return tuple(shape), tuple(src)
    return st.builds(regroup, st.lists(st.sampled_from([1, 2, 3, 4, 5, 6, 8, 12]), max_size=4),
                     st.lists(st.integers(0, 8), max_size=3), st.lists(st.integers(0, 4), max_size=2))


def _primes(n):
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@settings(max_examples=300, deadline=None)
@given(shapes=_factor_shapes())
def test_reshape_index_by_dim_groups_equals_the_flat_position(shapes):
    """A reshape's operand index, computed group by group of equal-size dims (so an index that varies along few
    dims stays small), is the element at the same row-major position, as through one flat number; and an
    index shaped like ``np.ogrid`` stays that small instead of growing to the whole domain."""
    from types import SimpleNamespace
    from astitch_sim.ir.index_rules import dim_groups, same_flat_position
    shape, src = shapes
    node = SimpleNamespace(shape=shape, rank=len(shape), operands=[SimpleNamespace(shape=src)])
    idx = tuple(np.arange(e).reshape([e if d == k else 1 for d in range(len(shape))]) for k, e in enumerate(shape))
    got, mask = same_flat_position(node, 0, idx)
    want = unravel(ravel(idx, shape), src) if shape else unravel(np.zeros((), np.int64), src)
    assert mask is None and len(got) == len(want) == len(src)
    full = tuple(shape)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(np.broadcast_to(a, full), np.broadcast_to(b, full))
    groups = dim_groups(shape, src)
    assert groups is not None
    assert [k for o, _ in groups for k in o] == list(range(len(shape)))
    assert [k for _, s in groups for k in s] == list(range(len(src)))
    if len(groups) > 1:                          # at least one operand dim depends on fewer than all output dims
        assert min(np.size(a) for a in got) < max(int(np.prod(shape)), 1) or int(np.prod(shape)) == 1


def test_dim_groups_of_a_split_leading_dim_and_of_shapes_that_do_not_split():
    from astitch_sim.ir.index_rules import dim_groups
    assert dim_groups((32, 512, 3072), (16384, 3072)) == [([0, 1], [0]), ([2], [1])]
    assert dim_groups((6, 4), (4, 6)) == [([0, 1], [0, 1])]          # no finer split: one group, via the flat number
    assert dim_groups((0, 4), (4, 0)) is None                        # no element: the flat path


@settings(max_examples=200, deadline=None)
@given(shapes=_factor_shapes())
def test_a_reshape_index_walks_its_operand_in_order(shapes):
    """The index a reshape reads its operand at (``same_flat_position``, over the output's own index) reads it in
    row-major order: ``walks_in_order`` says so, and the operand's memory reshaped is what the gather reads."""
    from types import SimpleNamespace
    from astitch_sim.ir.flatindex import walks_in_order
    from astitch_sim.ir.index_rules import same_flat_position
    shape, src = shapes
    node = SimpleNamespace(shape=shape, rank=len(shape), operands=[SimpleNamespace(shape=src)])
    idx = tuple(np.arange(e).reshape([e if d == k else 1 for d in range(len(shape))]) for k, e in enumerate(shape))
    got, _ = same_flat_position(node, 0, idx)
    assert walks_in_order(got, src, shape)
    x = np.arange(int(np.prod(src)), dtype=np.float32).reshape(src)
    assert np.array_equal(x[tuple(got)] if src else x, x.reshape(shape))


def test_what_does_not_walk_in_order_is_said_so():
    from astitch_sim.ir.flatindex import walks_in_order
    i, j = np.ogrid[:6, :4]
    assert walks_in_order((i, j), (6, 4), (6, 4))
    assert walks_in_order((i * 4 + j,), (24,), (6, 4))                          # the flat number itself
    assert not walks_in_order((j, i), (4, 6), (6, 4))                          # a transpose
    assert not walks_in_order((5 - i, j), (6, 4), (6, 4))                      # rows reversed
    assert not walks_in_order((i + 1, j), (7, 4), (6, 4))                      # a slice: sizes differ
    assert not walks_in_order((i * 4 + j + 1,), (25,), (6, 4))
    assert not walks_in_order((i // 2, j), (3, 4), (6, 4))                     # a broadcast: fewer elements
    assert not walks_in_order(((i * 4 + j) % 24 * 0 + (i * j) % 24,), (24,), (6, 4))   # not a sum of lines
    assert not walks_in_order((i, j), (6, 4, 1), (6, 4))                       # an index per dim, or no answer


def test_a_tensor_is_the_domain_reshaped_when_it_has_as_many_elements():
    """``reshapes``: a stage over the domain may compute an op of that shape at every element (its own index the
    domain's reshaped).  A scalar or an empty tensor never is; a tensor of another size never is."""
    from astitch_sim.ir.flatindex import reshapes
    assert reshapes((2, 32, 10240), (2, 320, 32, 32))          # a PyTorch group norm's view and its input
    assert reshapes((8, 64, 64, 32, 10), (8, 64, 64, 320))     # a JAX group norm's
    assert reshapes((4, 6), (4, 6)) and reshapes((0, 3), (0, 3))
    assert not reshapes((4, 6), (4, 5)) and not reshapes((4, 6), (24, 2))
    assert not reshapes((1,), ()) and not reshapes((), (1,))   # a scalar: the evaluator reads those at ()
    assert not reshapes((0, 3), (3, 0))


@settings(max_examples=200, deadline=None)
@given(shapes=_factor_shapes())
def test_an_ops_own_index_in_a_reshaped_domain_is_its_element_at_the_same_flat_position(shapes):
    """``reshape_index``: the index into ``src`` at each element of ``shape`` (broadcastable arrays, as the SIMT
    model holds a domain's index) is the element at the same row-major position, whatever the two shapes."""
    from astitch_sim.ir.index_rules import reshape_index
    shape, src = shapes
    idx = tuple(np.arange(e).reshape([e if d == k else 1 for d in range(len(shape))]) for k, e in enumerate(shape))
    got = reshape_index(idx, shape, src)
    assert len(got) == len(src)
    flat = ravel([np.broadcast_to(a, shape) for a in got], src) if src else np.zeros(shape, np.int64)
    assert np.array_equal(np.broadcast_to(flat, shape), np.arange(int(np.prod(shape))).reshape(shape))
    assert reshape_index(idx, shape, shape) == idx


@pytest.mark.parametrize("shape", [(1, 1024, 32, 128), (750000, 32), (3, 5, 7), (2, 1, 1, 6, 64)])
def test_in_range_unravel_skips_only_the_outermost_division(shape):
    """Numbers inside the array: the outermost index is what the inner dims leave, the same as dividing."""
    size = int(np.prod(shape))
    flat = np.concatenate([np.arange(min(size, 5000)), np.random.default_rng(3).integers(0, size, 5000)])
    for a, b in zip(unravel(flat, shape, in_range=True), unravel(flat, shape), strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("d", [1, 2, 7, 32, 750016])
def test_divmod_by_with_a_bound_is_the_floored_divmod(d):
    """A bound at most the divisor: quotient 0 and the values themselves, with no pass; any other bound
    changes nothing."""
    for bound in (1, d, d + 1, 3 * d + 5):
        a = np.arange(bound, dtype=np.int64)
        q, r = divmod_by(a, d, bound=bound)
        assert np.array_equal(np.broadcast_to(q, a.shape), a // d) and np.array_equal(np.broadcast_to(r, a.shape), a % d)


def _index_lines(draw_kind, rng, n, extent):
    """One index line of ``n`` values inside ``[0, extent)``: a progression (slice, reversal), a constant
    (broadcast) or arbitrary values (a gather along the dim)."""
    if draw_kind == "constant" or n == 1:
        return np.full(n, rng.integers(0, extent))
    if draw_kind == "step":
        step = int(rng.choice([s for s in (-3, -2, -1, 1, 2, 3) if abs(s) * (n - 1) < extent] or [0]))
        if step == 0:
            return np.full(n, rng.integers(0, extent))
        lo = (n - 1) * -step if step < 0 else 0
        hi = extent - (n - 1) * step if step > 0 else extent
        start = int(rng.integers(lo, hi))
        return start + step * np.arange(n)
    return rng.integers(0, extent, n)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), rank=st.integers(1, 4), tensor_rank=st.integers(1, 4))
def test_strided_view_is_the_gather_or_says_it_is_not(seed, rank, tensor_rank):
    """``strided_view(arr, idx)`` broadcast over the domain equals numpy's gather ``arr[idx]`` whenever it
    answers; it answers for slices, reversals, transposes and broadcasts with one arbitrary line among them,
    and refuses two arbitrary lines or an index over two domain dims."""
    rng = np.random.default_rng(seed)
    domain = tuple(int(n) for n in rng.integers(1, 7, rank))
    arr = rng.standard_normal(tuple(int(n) for n in rng.integers(1, 9, tensor_rank)))
    dims = list(rng.permutation(rank))
    idx, arbitrary, mixed = [], 0, False
    for d in range(tensor_rank):
        kind = rng.choice(["constant", "step", "step", "any"])
        if kind == "constant" or not dims:
            line = _index_lines("constant", rng, 1, arr.shape[d])
            idx.append(line.reshape((1,) * rank))
            continue
        k = int(dims.pop())
        line = _index_lines(kind, rng, domain[k], arr.shape[d])
        shape = [1] * rank
        shape[k] = domain[k]
        a = line.reshape(shape)
        if rng.random() < 0.1 and rank > 1:      # an index over two domain dims: never a view
            other = (k + 1) % rank
            a = a + np.zeros([domain[j] if j == other else 1 for j in range(rank)], dtype=np.int64)
            mixed = mixed or domain[other] > 1
        arbitrary += kind == "any" and not np.array_equal(line, line[0] + (line[1] - line[0] if line.size > 1 else 0)
                                                          * np.arange(line.size))
        idx.append(a)
    want = arr[tuple(idx)]
    got = strided_view(arr, tuple(idx), rank)
    if got is None:
        assert arbitrary > 1 or mixed, "a slice, transpose or broadcast with at most one gathered line is a view"
        return
    assert np.array_equal(np.broadcast_to(got, np.broadcast_shapes(got.shape, want.shape)),
                          np.broadcast_to(want, np.broadcast_shapes(got.shape, want.shape)))
    assert got.ndim == rank


def test_strided_view_keeps_memory_and_refuses_what_is_outside():
    """A transpose and a reversed slice share the tensor's memory; an index past the end is left to numpy."""
    arr = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    i = np.indices((4, 3, 2), sparse=True)                     # domain [4, 3, 2]: the tensor transposed
    view = strided_view(arr, (i[2], i[1], i[0][::-1]), 3)
    assert np.shares_memory(view, arr) and np.array_equal(view, arr.transpose(2, 1, 0)[::-1])
    assert strided_view(arr, (i[2], i[1], i[0] + 1), 3) is None


@pytest.mark.parametrize("shape,src,sizes", [
    ((4096, 1024), (1024, 4096), (4096, 4096 * 1024)),       # an optimizer state read as its transpose's shape
    ((8, 12), (4, 24), (8, 96)),
    ((2, 3, 4), (6, 4), (6, 4)),                              # (groups: nothing to refine)
    ((16, 4), (4, 16), (16, 64)),
    ((6, 10), (4, 15), (60, 60)),                             # 10 does not divide 15: through the flat position
])
def test_a_reshape_index_goes_through_the_factors_both_shapes_share(shape, src, sizes):
    """``[4096, 1024]`` read as ``[1024, 4096]`` is ``[1024, 4, 1024]`` either way: the first index is ``i0 // 4``
    (as large as dim 0), the second ``(i0 % 4) * 1024 + i1`` -- the element at the same row-major position, with
    no flat number of the whole domain divided again; shapes whose boundaries do not nest go through it."""
    from astitch_sim.ir.index_rules import reshape_index
    idx = tuple(np.indices(shape, sparse=True))
    got = reshape_index(idx, shape, src)
    want = unravel(ravel(idx, shape), src)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(np.broadcast_to(a, shape), b)
    assert tuple(int(np.size(a)) for a in got) == sizes


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), rows=st.integers(1, 300), cols=st.integers(1, 700))
def test_is_sum_compares_block_by_block_what_the_whole_sum_would(seed, rows, cols):
    """``is_sum`` (compared a block of rows at a time) says what ``array_equal`` of the whole sum says: for a
    true sum, for one element off anywhere, and for parts of another shape."""
    from astitch_sim.ir import flatindex
    rng = np.random.default_rng(seed)
    p0, p1 = rng.integers(-50, 50, (rows, 1)), rng.integers(-50, 50, (1, cols))
    a = p0 + p1
    old = flatindex.SUM_BLOCK
    try:
        flatindex.SUM_BLOCK = 97                    # many blocks, not aligned to the rows
        assert flatindex.is_sum(a, [p0, p1]) and flatindex.is_sum(a, [p0, p1[0]])
        b = a.copy()
        b[rng.integers(rows), rng.integers(cols)] += 1
        assert not flatindex.is_sum(b, [p0, p1])
        assert not flatindex.is_sum(a, [p0[:1], p1]) or rows == 1
    finally:
        flatindex.SUM_BLOCK = old
