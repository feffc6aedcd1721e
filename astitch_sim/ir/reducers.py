"""Reducers: what a ``reduce`` (and a ``reduce-window``) folds its elements with.

One row per reducer.  Most fold one value (``sum``, ``max``...): XLA's reduce
region is one binary op of its two parameters.  ``argmax`` and ``argmin`` fold
*pairs* ``(value, index)``: JAX lowers ``jnp.argmax(x, axis)`` to a variadic
reduce of ``x`` and an ``iota`` along the axis, whose region picks the larger
value, the first NaN, and on ties the lower index.  Such a reduce node has four
operands ``(x, iota, init_x, init_index)`` and returns one component of the pair
(attr ``result``: 0 the value, 1 the index); the importer makes one node per
tuple element that is used.

Each row gives
  * ``values``: 1, or 2 for a pair reducer;
  * ``region_op``: the binary op of a one-value region (``add`` for sum...);
  * ``atomic``: the CUDA atomic a task split over blocks may combine its
    partials with (``add``, ``max``, ``min``: ``cuda.atomic.<atomic>``), or None
    (partials then combine through global scratch and a grid barrier);
  * ``scalar``: the one-value combine as a scalar expression template over
    ``{0}`` and ``{1}``, which code generators (Numba) emit per step, like the
    op table's ``scalar`` column; None for pair reducers (the backend's
    prelude has their compare-and-take helpers);
  * ``splittable``: may a task be split over blocks at all (pair reducers are not:
    their partial pairs would need a two-value combine across blocks);
  * ``combine(a, b)``: numpy, on tuples of arrays (one per value); exact and
    commutative, so any association order (a GPU tree, a split) gives the same
    result as XLA's in-order fold -- except float rounding of ``sum``/``prod``;
  * ``identity(dtypes)``: the tuple a thread's accumulator starts from; holes in
    a reduction tree hold it, so it must never win (index ``INT_MAX`` for argmax);
  * ``ufunc``: a one-value reducer's numpy ufunc (``combine`` is it on one-tuples),
    so a fold may run it in place or as one ``ufunc.reduce``;
  * ``any_order``: folding in any order gives the same result bit for bit (``max``,
    ``min``, ``and``, ``or``: no rounding; signed zeros as below), so the SIMT model
    may fold a thread's elements in whatever order numpy runs fastest; ``sum`` and
    ``prod`` must fold in the GPU's order.

Argmax, exactly: NaN beats any number, two NaNs or two equal values keep the
lower index (so the result is the *first* maximum, or the first NaN, as JAX
returns).  The value component is the NaN-propagating maximum; when ``+0`` and
``-0`` tie, XLA's in-order fold may return either sign of zero (its region
takes the later value on a tie), we return the one at the chosen index.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np


@dataclass(frozen=True)
class Reducer:
    name: str
    values: int
    region_op: Optional[str]
    atomic: Optional[str]
    combine: Callable
    identity: Callable
    scalar: Optional[str] = None
    #: its scalar template on two bools gives a bool (``_max``, ``&``), so generated code needs no cast
    scalar_keeps_bool: bool = False
    ufunc: Optional[np.ufunc] = None
    any_order: bool = False

    @property
    def splittable(self) -> bool:
        return self.values == 1


def _max_of(dtype):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.array(True)
    if dt.kind == "f":
        return np.array(np.inf, dt)
    return np.array(np.iinfo(dt).max, dt)


def _min_of(dtype):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.array(False)
    if dt.kind == "f":
        return np.array(-np.inf, dt)
    return np.array(np.iinfo(dt).min, dt)


def _one(ufunc):
    return lambda a, b: (ufunc(a[0], b[0]),)


def _isnan(x):
    return np.isnan(x) if x.dtype.kind == "f" else np.zeros(np.shape(x), bool)


def _arg_combine(better):
    """(value, index) pairs: NaN first, then ``better`` values, ties to the lower index."""
    def combine(a, b):
        av, ai = a
        bv, bi = b
        an, bn = _isnan(av), _isnan(bv)
        with np.errstate(invalid="ignore"):
            take_b = np.where(an | bn, (bn & ~an) | (an & bn & (bi < ai)),
                              better(bv, av) | ((bv == av) & (bi < ai)))
        return np.where(take_b, bv, av).astype(av.dtype, copy=False), np.where(take_b, bi, ai).astype(ai.dtype, copy=False)
    return combine


def _one_value(name, region_op, atomic, ufunc, identity, scalar, keeps_bool=False, any_order=False) -> Reducer:
    """A one-value reducer: its region is the binary op ``ufunc``."""
    return Reducer(name, 1, region_op, atomic, _one(ufunc), identity, scalar, keeps_bool, ufunc, any_order)


ROWS = [
    _one_value("sum", "add", "add", np.add, lambda dts: (np.zeros((), dts[0]),), "({0} + {1})"),
    _one_value("max", "maximum", "max", np.maximum, lambda dts: (_min_of(dts[0]),), "_max({0}, {1})", True, True),
    _one_value("min", "minimum", "min", np.minimum, lambda dts: (_max_of(dts[0]),), "_min({0}, {1})", True, True),
    _one_value("prod", "multiply", None, np.multiply, lambda dts: (np.ones((), dts[0]),), "({0} * {1})"),
    _one_value("and", "and", None, np.logical_and, lambda dts: (np.array(True),), "({0} & {1})", True, True),
    _one_value("or", "or", None, np.logical_or, lambda dts: (np.array(False),), "({0} | {1})", True, True),
    Reducer("argmax", 2, None, None, _arg_combine(np.greater), lambda dts: (_min_of(dts[0]), _max_of(dts[1]))),
    Reducer("argmin", 2, None, None, _arg_combine(np.less), lambda dts: (_max_of(dts[0]), _max_of(dts[1]))),
]

REDUCERS: dict[str, Reducer] = {r.name: r for r in ROWS}
#: binary op in a one-value region -> the reducer it means
REDUCER_OF_OP = {r.region_op: r.name for r in ROWS if r.region_op}
#: reducers XLA's argmax/argmin regions are checked against (``regions.py``)
PAIR_REDUCERS = tuple(r.name for r in ROWS if r.values == 2)


def reducer(node) -> Reducer:
    return REDUCERS[node.attrs["reducer"]]


#: element types a kernel can combine with atomics (CUDA atomicAdd/Max/Min on 32- and 64-bit integers and
#: floats).  16-bit floats have an atomicAdd on recent GPUs but no atomicMax/Min, 8- and 16-bit integers and
#: pred none, and Numba exposes none of them: split reductions of those types combine another way.
ATOMIC_DTYPES = ("f32", "f64", "s32", "s64", "u32", "u64")


def has_atomic(node) -> bool:
    """Can the partial results of reduce ``node`` from several blocks be combined with atomics?

    Both the reducer (sum, max, min have one; prod, and, or, argmax do not) and the
    element type (``ATOMIC_DTYPES``) must allow it."""
    return reducer(node).atomic is not None and node.dtype in ATOMIC_DTYPES


def reduce_inputs(node) -> tuple:
    """The arrays a reduce folds (one, or two for argmax): the first half of its operands."""
    return node.operands[:len(node.operands) // 2]


def reduce_inits(node) -> tuple:
    """Its init values (scalars): the second half of its operands."""
    return node.operands[len(node.operands) // 2:]


def fold_tree(values: tuple, axis: int, combine, identity: tuple) -> tuple:
    """Fold ``values`` (tuple of equal-shape arrays) along ``axis`` by halving (an exact, vectorised tree)."""
    vals = [np.moveaxis(np.asarray(v), axis, -1) for v in values]
    n = vals[0].shape[-1]
    if n == 0:
        return tuple(np.broadcast_to(i, vals[0].shape[:-1]).astype(i.dtype) for i in identity)
    while n > 1:
        h = (n + 1) // 2
        lo = tuple(v[..., :n - h] for v in vals)
        hi = tuple(v[..., h:n] for v in vals)
        merged = combine(lo, hi)
        vals = [np.concatenate([m, v[..., n - h:h]], axis=-1) for m, v in zip(merged, vals)]
        n = h
    return tuple(v[..., 0] for v in vals)
