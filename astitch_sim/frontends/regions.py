"""What an HLO region *computes*: argmax/argmin reducers and sort comparators, identified by probing.

A variadic reduce or a sort carries a small computation (its ``to_apply``
region): JAX's argmax region is a dozen compares and selects, its sort
comparator canonicalises zeros and NaNs before a TOTALORDER compare.  Matching
such regions instruction by instruction would break with every change in how
JAX writes them.  Instead the importer turns the region into a little Graph and
*runs* it (with the numpy reference) on probe values -- NaNs of both signs,
infinities, signed zeros, ties -- and checks the answers against the exact
semantics of each candidate (:mod:`astitch_sim.ir.reducers`,
:mod:`astitch_sim.ir.sorting`).  A region is accepted only if it agrees on every
probe; anything else is reported, so an unusual region is an error, never a
silently different meaning.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ir.dtypes import is_float, numpy_dtype
from ..ir.reducers import PAIR_REDUCERS, REDUCERS
from ..ir.sorting import sort_keys


def probe_values(dtype: str) -> list:
    """Values that exercise every rule of an order: NaNs, infinities, signed zeros, extremes, ties."""
    if dtype == "pred":
        return [False, True]
    dt = numpy_dtype(dtype)
    if is_float(dtype):
        return [dt.type(v) for v in (np.nan, -np.nan, -np.inf, -2.5, -1.0, -0.0, 0.0, 1.0, 2.5, np.inf)]
    info = np.iinfo(dt)
    return [dt.type(v) for v in sorted({int(info.min), -2 if info.min < 0 else 0, 0, 1, 2, int(info.max)})]


def _run(region, args) -> list:
    from ..ir.reference import reference
    return reference(region, [np.asarray(a) for a in args])


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" and np.isnan(a) and np.isnan(b):
        return True
    return bool(a == b) and (a.dtype.kind != "f" or a != 0 or np.signbit(a) == np.signbit(b))


def identify_pair_reducer(region, value_dtype: str, index_dtype: str):
    """``argmax`` or ``argmin`` if the 4-parameter region folds (value, index) pairs that way, else None.

    Probed as XLA folds: the accumulator (params 0, 1) holds the earlier element (lower index).
    The value component is not compared where +0 and -0 tie (see reducers.py).
    """
    if len(region.inputs) != 4 or len(region.outputs) != 2:
        return None
    vals = probe_values(value_dtype)
    idt = numpy_dtype(index_dtype)
    for name in PAIR_REDUCERS:
        red = REDUCERS[name]
        ok = True
        for (av, bv), (ai, bi) in itertools.product(itertools.product(vals, vals), ((0, 1), (1, 5))):
            a = (np.asarray(av), idt.type(ai))
            b = (np.asarray(bv), idt.type(bi))
            got = _run(region, [a[0], a[1], b[0], b[1]])
            want = red.combine(tuple(np.asarray(x) for x in a), tuple(np.asarray(x) for x in b))
            zero_tie = value_dtype != "pred" and is_float(value_dtype) and av == 0 and bv == 0
            if not _same(got[1], want[1]) or (not zero_tie and not _same(got[0], want[0])):
                ok = False
                break
        if ok:
            return name
    return None


def _less(orders, lhs, rhs) -> bool:
    for o, a, b in zip(orders, lhs, rhs):
        if not o:
            continue
        ka, kb = sort_keys(np.asarray(a), o), sort_keys(np.asarray(b), o)
        if ka != kb:
            return bool(ka < kb)
    return False


def identify_sort_orders(region, dtypes):
    """The order of each operand (``asc``, ``desc``, ``asc_total``, ``desc_total``, or '' if not a key),
    if the comparator region is a lexicographic order over its keys in operand order; else None."""
    n = len(dtypes)
    if len(region.inputs) != 2 * n or len(region.outputs) != 1 or region.outputs[0].dtype != "pred":
        return None
    probes = [probe_values(t) for t in dtypes]
    base = [p[len(p) // 2] for p in probes]

    def lt(lhs, rhs):
        args = [v for pair in zip(lhs, rhs) for v in pair]
        return bool(_run(region, args)[0])

    orders = []
    for j, t in enumerate(dtypes):
        small, big = (False, True) if t == "pred" else (numpy_dtype(t).type(1), numpy_dtype(t).type(2))
        lo = list(base)
        hi = list(base)
        lo[j], hi[j] = small, big
        up, down = lt(lo, hi), lt(hi, lo)
        if up == down:
            orders.append("")
            continue
        order = "asc" if up else "desc"
        if t != "pred" and is_float(t):
            z = numpy_dtype(t).type
            neg, pos = list(base), list(base)
            neg[j], pos[j] = z(-0.0), z(0.0)
            if lt(neg, pos) if up else lt(pos, neg):
                order += "_total"
        orders.append(order)
    if not any(orders):
        return None
    rng = np.random.default_rng(0)
    for _ in range(300):
        lhs = [probes[j][rng.integers(len(probes[j]))] for j in range(n)]
        rhs = [probes[j][rng.integers(len(probes[j]))] if rng.random() < 0.7 else lhs[j] for j in range(n)]
        if lt(lhs, rhs) != _less(orders, lhs, rhs):
            return None
    return tuple(orders)
