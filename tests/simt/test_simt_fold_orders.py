"""A thread's fold, however the SIMT model runs it, gives the bits of the fold in the GPU's order.

``reduce.per_thread`` folds each thread's elements from the reducer's identity.  ``sum`` and ``prod`` fold in
iteration order (the GPU's: float rounding depends on it), into their first result in place; ``max``, ``min``,
``and`` and ``or`` (``Reducer.any_order``: exact, no rounding) fold with one ``ufunc.reduce`` over the trips and
then a dealt row's vector elements.  A dealt row whose vectors leave its lanes' last trip part empty is folded as
:class:`reduce.Trips`: the full trips a view of the row, the last trip a padded copy.  Each is checked here
against the plain fold (the reducer's ``combine`` applied step by step, a new array per step) on random layouts
of every form, with NaNs and infinities, for floats, integers and bools.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from astitch_sim.ir.reducers import REDUCERS
from astitch_sim.simt import reduce

ONE_VALUE = [r for r in REDUCERS.values() if r.values == 1]


def plain(red):
    """The reducer folded step by step through its ``combine`` (no in-place accumulator, no ``ufunc.reduce``)."""
    return dataclasses.replace(red, ufunc=None, any_order=False)


def _values(rng, shape, dtype, specials: bool) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.9
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)
    a = (rng.standard_normal(shape) * 100).astype(dtype)
    a[a == 0] = 1                       # (the sign of a zero max is either, as XLA's: reducers.py)
    if specials and a.size:
        flat = a.reshape(-1)
        for v in (np.nan, np.inf, -np.inf):
            flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = v
    return a


def _layout(rng, form: str, dtype, specials: bool):
    """A random reduce layout of ``form``: the ``[task, part, inner, lane]`` layout, a dealt row's ``[task, part,
    trip, lane, j]`` view, or :class:`reduce.Trips` of a view and a padded last trip."""
    n, S, lanes = (int(rng.integers(1, k)) for k in (6, 4, 40))
    if form == "layout":
        return _values(rng, (n, S, int(rng.integers(0, 9)), lanes), dtype, specials)
    trips, V = int(rng.integers(1, 6)), int(rng.choice([2, 4, 8]))
    view = _values(rng, (n, S, trips, lanes, V), dtype, specials)
    if form == "dealt":
        return view
    return reduce.Trips((view[:, :, :-1], _values(rng, (n, S, 1, lanes, V), dtype, specials)))


DTYPES = [np.float32, np.float16, np.float64, np.int32, np.uint8, np.bool_]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), form=st.sampled_from(["layout", "dealt", "trips"]),
       red=st.sampled_from(ONE_VALUE), dtype=st.sampled_from(DTYPES), specials=st.booleans())
def test_every_fold_gives_the_plain_folds_bits(seed, form, red, dtype, specials):
    rng = np.random.default_rng(seed)
    dense = _layout(rng, form, dtype, specials)
    ident = red.identity([np.dtype(dtype)])
    with np.errstate(all="ignore"):              # (overflow to inf, inf - inf: as the model's fold allows)
        got = reduce.per_thread((dense,), red, ident)
        want = reduce.per_thread((dense,), plain(red), ident)
    assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
    assert np.array_equal(got[0], want[0], equal_nan=np.dtype(want[0].dtype).kind == "f"), (red.name, form, dtype)


@pytest.mark.parametrize("name", ["sum", "prod"])
def test_a_rounding_fold_runs_in_iteration_order(name):
    """``sum`` and ``prod`` are not folded in any order: a fold that took the trips first (as ``any_order`` does)
    rounds differently on these values, and the model's fold still gives the plain fold's bits."""
    red = REDUCERS[name]
    assert not red.any_order
    rng = np.random.default_rng(7)
    view = (1 + rng.standard_normal((3, 1, 5, 32, 4)) * (1e-3 if name == "prod" else 1e4)).astype(np.float32)
    ident = red.identity([np.dtype(np.float32)])
    got = reduce.per_thread((view,), red, ident)[0]
    assert np.array_equal(got, reduce.per_thread((view,), plain(red), ident)[0])
    trips_first = dataclasses.replace(red, any_order=True)
    assert not np.array_equal(got, reduce.per_thread((view,), trips_first, ident)[0]), \
        "the orders agree on these values: the test would not see a fold in the wrong order"


def test_trips_fold_as_the_whole_padded_row():
    """:class:`reduce.Trips` (the full trips a view, the last trip padded) folds to what the whole row padded
    with the identity folds to, for every reducer."""
    rng = np.random.default_rng(3)
    for red in ONE_VALUE:
        dtype = np.bool_ if red.name in ("and", "or") else np.float32
        ident = red.identity([np.dtype(dtype)])
        whole = _values(rng, (4, 2, 6, 32, 4), dtype, specials=red.name in ("max", "min"))
        whole[:, :, -1, 20:] = ident[0]                           # the lanes the last trip leaves empty
        pieces = reduce.Trips((whole[:, :, :-1], whole[:, :, -1:].copy()))
        with np.errstate(all="ignore"):
            got, want = (reduce.per_thread((d,), red, ident)[0] for d in (pieces, whole))
        assert np.array_equal(got, want, equal_nan=True), red.name


SPLIT_DTYPES = [np.float32, np.float16, np.float64, np.int32, np.bool_]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), red=st.sampled_from(ONE_VALUE), dtype=st.sampled_from(SPLIT_DTYPES),
       how=st.sampled_from(["atomic", "grid_barrier"]), specials=st.booleans())
def test_split_parts_combine_in_part_order(seed, red, dtype, how, specials):
    """The parts of a split task combine with one ``ufunc.accumulate`` down the parts: the bits of the
    part-by-part loop (the atomics' order, or the grid barrier's fold then the init) for every reducer."""
    if red.name in ("and", "or"):
        dtype = np.bool_                          # (the logical reducers reduce pred)
    rng = np.random.default_rng(seed)
    T, S = int(rng.integers(1, 40)), int(rng.integers(2, 300))
    partial = (_values(rng, (T, S), dtype, specials),)
    init = (np.asarray(_values(rng, (1,), dtype, False)[0]),)
    with np.errstate(all="ignore"):
        got = reduce.combine_splits(partial, init, red, how)
        want = reduce.combine_splits(partial, init, plain(red), how)
    assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape == (T,)
    assert np.array_equal(got[0], want[0], equal_nan=np.dtype(dtype).kind == "f"), (red.name, how, dtype)


def test_split_parts_are_not_reassociated():
    """A sum of 256 float32 parts whose pairwise sum (numpy's ``add.reduce`` along a row) rounds differently
    from the in-order fold: the combine gives the in-order fold's bits, in both modes."""
    red = REDUCERS["sum"]
    rng = np.random.default_rng(11)
    partial = ((rng.standard_normal((1, 256)) * 1e4).astype(np.float32),)
    init = (np.float32(0.1),)
    for how in ("atomic", "grid_barrier"):
        got = reduce.combine_splits(partial, init, red, how)[0]
        want = reduce.combine_splits(partial, init, plain(red), how)[0]
        assert np.array_equal(got, want)
    pairwise = np.add(np.add.reduce(partial[0], axis=1), init[0])
    assert not np.array_equal(pairwise, want), "the orders agree on these values: the test would not see one"
