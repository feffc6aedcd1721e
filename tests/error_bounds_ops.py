"""The oracle's rules for the ops real model code adds (issue 9, point 3): indexed loads and library ops.

``error_bounds.ExactEvaluation`` calls these for ``gather``, ``dynamic-slice``,
``dynamic-update-slice`` (evaluated at an index, like a slice), and for argmax /
argmin reduces, ``reduce-window``, ``sort``, ``topk`` and ``scatter``
(materialised whole, like a reduce).  As for the rest of the oracle, each op is
written again from XLA's semantics -- not with ``astitch_sim.ir.indexed``,
``sorting``, ``scatter`` or ``windows``, which the SIMT model and the Numba
backend run -- so that a bug there cannot make the oracle agree with it:

* **gather** and **dynamic slices** clamp their start indices into the operand;
  an output element is one operand element (exact: its ``X``, ``B``, ``O``);
  where an index itself is uncertain (``B > 0``) there is no claim.
* **argmax/argmin** (a reduce of (value, index) pairs): the first NaN, else the
  first best value (ties to the lower index); the init pair takes part.  The
  index is claimed where every element of the row is exact, or the winner's
  interval lies strictly beyond every other element's; the value is the row's
  max (1-Lipschitz: ``B = max B``; ``+0``/``-0`` may come out either way).
* **reduce-window**: output ``o`` folds, in window order, the elements at
  ``o * stride + w - pad_low`` inside the operand, starting from the init value;
  a float sum of ``n`` terms is bounded by ``gamma_(n+1)`` (a sequential fold in
  any order; f16/bf16 steps may round to their own type);
* **sort** (JAX's comparator: ``-0 == 0``, NaNs last, stable; lexicographic over
  the keys) and **topk** (IEEE total order, ties to the lower index; a computed row
  with a NaN is never certain: the sign of a computed NaN is unspecified): a row whose
  order is certain (every key exact, or consecutive sorted intervals strictly
  apart) is permuted exactly; otherwise the sorted key itself is still claimed
  (sorting is 1-Lipschitz in the max norm) and the carried operands are not;
* **scatter**: an update whose window does not fit is dropped; the rest fold
  into their element in order (``assign``: the last wins); a float sum of ``c``
  colliding updates is bounded like a sum of ``c + 1`` terms.
"""
from __future__ import annotations

import itertools
from math import prod

import numpy as np

from astitch_sim.ir.dtypes import cast, is_float
from error_bounds import BIGGEST, TINY, U, Val

INDEXED_OPS = ("gather", "dynamic-slice", "dynamic-update-slice")
WHOLE_OPS = ("reduce-window", "sort", "topk", "scatter")


def is_pair_reduce(node) -> bool:
    return node.op == "reduce" and len(node.operands) == 4


# -- indexed loads (evaluated at an index) -------------------------------------------------------------------

def _index(ev, node, where):
    """Integer values of index operand ``node`` at ``where``: (int64 values, exact?, order-sensitive?)."""
    v = ev.at(node, where)
    return np.asarray(v.X).astype(np.int64), np.asarray(v.B) == 0, np.asarray(v.O)


def _moved(v: Val, sure, O) -> Val:
    return Val(v.X, np.where(sure, v.B, np.inf), np.asarray(v.O) | O)


def gather_at(ev, node, idx) -> Val:
    x, ind = node.operands
    a = node.attrs
    ivd, S = a["index_vector_dim"], ind.rank
    offset = list(a["offset_dims"])
    batch_pos = [idx[d] for d in range(node.rank) if d not in offset]      # the output's batch dims, in order
    pos_of = dict(zip([d for d in range(S) if d != ivd], batch_pos, strict=True))       # ... are the indices' dims but ivd
    start, sure, O = {}, np.ones((), bool), np.zeros((), bool)
    for k, d in enumerate(a["start_index_map"]):
        where = tuple(np.asarray(k) if s == ivd else pos_of[s] for s in range(S))
        val, ok, o = _index(ev, ind, where)
        start[d] = np.clip(val, 0, x.shape[d] - a["slice_sizes"][d])
        sure, O = sure & ok, O | o
    for od, sd in zip(a["operand_batching_dims"], a["start_indices_batching_dims"], strict=True):
        start[od] = pos_of[sd]
    window = [d for d in range(x.rank) if d not in a["collapsed_slice_dims"] and d not in a["operand_batching_dims"]]
    src = [start.get(d, np.zeros((), np.int64)) for d in range(x.rank)]
    for d, od in zip(window, offset, strict=True):
        src[d] = src[d] + idx[od]
    return _moved(ev.at(x, tuple(src)), sure, O)


def _starts(ev, node, first, sizes):
    x = node.operands[0]
    out, sure, O = [], np.ones((), bool), np.zeros((), bool)
    for d, (n, s) in enumerate(zip(x.shape, sizes, strict=True)):
        val, ok, o = _index(ev, node.operands[first + d], ())
        out.append(np.clip(val, 0, n - s))
        sure, O = sure & ok, O | o
    return out, sure, O


def dynamic_slice_at(ev, node, idx) -> Val:
    starts, sure, O = _starts(ev, node, 1, node.attrs["slice_sizes"])
    return _moved(ev.at(node.operands[0], tuple(s + i for s, i in zip(starts, idx, strict=True))), sure, O)


def dynamic_update_slice_at(ev, node, idx) -> Val:
    x, upd = node.operands[:2]
    starts, sure, O = _starts(ev, node, 2, upd.shape)
    old = ev.at(x, tuple(idx))
    if upd.size == 0:
        return _moved(old, sure, O)
    inside = np.ones((), bool)
    for i, s, n in zip(idx, starts, upd.shape, strict=True):
        inside = inside & (i >= s) & (i < s + n)
    new = ev.at(upd, tuple(np.clip(i - s, 0, n - 1) for i, s, n in zip(idx, starts, upd.shape, strict=True)))
    v = Val(*(np.where(inside, a, b) for a, b in zip((new.X, new.B, new.O), (old.X, old.B, old.O), strict=True)))
    return _moved(v, sure, O)


INDEXED_AT = {"gather": gather_at, "dynamic-slice": dynamic_slice_at,
              "dynamic-update-slice": dynamic_update_slice_at}


# -- whole ops ----------------------------------------------------------------------------------------------

def _whole(ev, node) -> Val:
    v = ev._whole_value(node)
    return Val(np.asarray(v.X), np.broadcast_to(np.asarray(v.B, np.float64), node.shape),
               np.broadcast_to(np.asarray(v.O, bool), node.shape))


def _rows(a, dims):
    """``a`` with ``dims`` moved last and flattened into one: (kept..., n)."""
    kept = [d for d in range(a.ndim) if d not in dims]
    moved = np.transpose(a, kept + list(dims))
    return moved.reshape(moved.shape[:len(kept)] + (prod(a.shape[d] for d in dims),))


def _gammas(depth, u):
    """Higham's gamma_d for an array of depths (inf where d u >= 1)."""
    d = np.asarray(depth, np.float64) * u
    with np.errstate(divide="ignore"):
        return np.where(d < 1, d / (1 - d), np.inf)


def pair_reduce(ev, node) -> Val:
    """argmax / argmin, exactly as XLA's region folds (value, index) pairs."""
    x, ind, ix, ii = node.operands
    dims = tuple(node.attrs["dimensions"])
    vx, vi = _whole(ev, x), _whole(ev, ind)
    cx, ci = ev.at(ix, ()), ev.at(ii, ())
    X = _rows(vx.X, dims)
    kept = X.shape[:-1]

    def with_init(rows, init):
        return np.concatenate([rows, np.broadcast_to(np.asarray(init, rows.dtype), kept + (1,))], axis=-1)

    X = with_init(X, cx.X)
    B = with_init(_rows(vx.B, dims), cx.B)
    O = with_init(_rows(vx.O, dims), cx.O)
    I = with_init(_rows(vi.X, dims).astype(np.int64), np.asarray(ci.X).astype(np.int64))
    IB = with_init(_rows(vi.B, dims), ci.B)
    IO = with_init(_rows(vi.O, dims), ci.O)
    flt = is_float(x.dtype)
    nan = np.isnan(X) if flt else np.zeros(X.shape, bool)
    best = node.attrs["reducer"] == "argmax"
    if flt:
        value_key = np.where(nan, 0.0, -X if best else X)
    else:
        wide = X.astype(np.int64)
        value_key = ~wide if best else wide
    order = np.lexsort((I, value_key, ~nan), axis=-1)        # NaN first, then best value, then lower index
    pick = order[..., :1]
    Xw = np.take_along_axis(X, pick, -1)[..., 0]
    Iw = np.take_along_axis(I, pick, -1)[..., 0]
    Bw = np.take_along_axis(B, pick, -1)[..., 0]
    exact_row = np.all(B == 0, axis=-1) & np.all(IB == 0, axis=-1)
    # the winner is certain where its interval lies strictly beyond every other element's
    others_hi = np.where(np.arange(X.shape[-1]) == pick, -np.inf, (X + B) if best else -(X - B))
    with np.errstate(invalid="ignore"):
        win_lo = (Xw - Bw) if best else -(Xw + Bw)
        clear = (~np.any(nan, axis=-1)) & (win_lo > np.max(others_hi, axis=-1, initial=-np.inf)) \
            & np.all(IB == 0, axis=-1)
    sure = exact_row | clear
    Orow = np.any(O, axis=-1) | np.any(IO, axis=-1)
    if node.attrs.get("result", 0) == 1:
        out = cast(Iw, node.dtype)
        return Val(out, np.where(sure, 0.0, np.inf), Orow)
    if not flt:
        return Val(cast(Xw, node.dtype), np.where(sure, 0.0, np.inf), Orow)
    lip = np.where(np.any(nan, axis=-1), np.inf, np.max(B, axis=-1))
    Bv = np.where(exact_row, 0.0, lip)
    return Val(Xw, Bv, Orow | (Xw == 0))


# -- reduce-window --------------------------------------------------------------------------------------------

def _fold_rule(reducer, dt):
    return {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
            "and": np.logical_and, "or": np.logical_or}[reducer]


def reduce_window(ev, node) -> Val:
    x, init = node.operands
    a = node.attrs
    dt, reducer = node.dtype, a["reducer"]
    flt = is_float(dt)
    vx = _whole(ev, x)
    iv = ev.at(init, ())
    f = _fold_rule(reducer, dt)
    out_idx = np.indices(node.shape, sparse=True) if node.rank else ()
    X = np.full(node.shape, iv.X, dtype=np.float64 if flt else vx.X.dtype)
    mags = np.full(node.shape, abs(float(iv.X)) + float(iv.B)) if flt else None
    sumB = np.full(node.shape, float(iv.B))
    maxB = np.full(node.shape, float(iv.B))
    prodm = np.full(node.shape, abs(float(iv.X)) + float(iv.B)) if flt else None
    O = np.full(node.shape, bool(iv.O))
    count = np.ones(node.shape, np.int64)                       # the init value is a term
    with np.errstate(all="ignore"):
        for w in itertools.product(*(range(s) for s in a["window_dimensions"])):
            src = [o * s + wi - lo for o, s, wi, lo in zip(out_idx, a["window_strides"], w, a["padding_low"], strict=True)]
            ok = np.ones(node.shape, bool)
            for s, n in zip(src, x.shape, strict=True):
                ok = ok & (s >= 0) & (s < n)
            if not ok.any():
                continue
            at = tuple(np.clip(s, 0, n - 1) for s, n in zip(src, x.shape, strict=True))
            xv, bv, ov = vx.X[at], vx.B[at], vx.O[at]
            X = np.where(ok, f(X, xv), X).astype(X.dtype, copy=False)
            sumB = np.where(ok, sumB + bv, sumB)
            maxB = np.where(ok, np.maximum(maxB, bv), maxB)
            O = np.where(ok, O | ov, O)
            count = count + ok
            if flt:
                mags = np.where(ok, mags + np.abs(xv) + bv, mags)
                prodm = np.where(ok, prodm * (np.abs(xv) + bv), prodm)
        if not flt:
            return Val(X, np.where(maxB == 0, 0.0, np.inf), O)
        if reducer in ("max", "min"):
            return Val(X, maxB, O | (X == 0))
        g = _gammas(count, U[dt])           # f16/bf16: each step may round to the type itself
        if reducer == "sum":
            B = sumB + g * mags + count * TINY[dt]
            big = mags
        else:
            B = prodm * (1 + g) - np.abs(X) + count * TINY[dt]
            big = prodm
        B = np.where(big * (1 + g) > BIGGEST[dt], np.inf, B)
        return Val(X, B, np.ones(node.shape, bool))


# -- sort and topk ----------------------------------------------------------------------------------------------

def _order_keys(X, order):
    """Keys (for np.lexsort, least significant first) whose ascending order is ``order`` on ``X``."""
    if X.dtype.kind not in "f":
        v = X.astype(np.int64)
        return [~v if order.startswith("desc") else v]
    nan = np.isnan(X)
    neg = np.signbit(X)
    val = np.where(nan, 0.0, X)
    if order in ("asc", "desc"):                   # JAX: -0 == 0, every NaN one NaN, NaNs last (asc)
        val = val + 0.0                            # -0.0 + 0.0 is +0.0
        cls = nan.astype(np.int64)
        zero_sign = np.zeros(X.shape, np.int64)
    else:                                          # IEEE total order: -NaN < -inf < ... < -0 < +0 < ... < +NaN
        cls = np.where(nan, np.where(neg, 0, 2), 1)
        zero_sign = np.where((X == 0) & ~neg, 1, 0)
    if order.startswith("desc"):
        return [-zero_sign, -val, -cls]
    return [zero_sign, val, cls]


def _certain_order(Xs, Bs, sure_exact):
    """Rows (last axis, already in sorted order) whose order no evaluation within the bounds can change."""
    lo, hi = Xs - Bs, Xs + Bs
    with np.errstate(invalid="ignore"):
        pair_ok = ((Bs[..., :-1] == 0) & (Bs[..., 1:] == 0)) | (hi[..., :-1] < lo[..., 1:]) | (hi[..., 1:] < lo[..., :-1])
    return sure_exact | np.all(pair_ok, axis=-1)


def _sorted(ev, node, keys, orders, dim, carried):
    """Sort rows along ``dim`` by ``keys`` (Vals, first key first): (perm, certain rows, row O, key values)."""
    ks = [Val(np.moveaxis(k.X, dim, -1), np.moveaxis(k.B, dim, -1), np.moveaxis(k.O, dim, -1)) for k in keys]
    lex = []
    for k, o in reversed(list(zip(ks, orders, strict=True))):
        lex += _order_keys(k.X, o)
    n = ks[0].X.shape[-1]
    shape = ks[0].X.shape
    perm = np.lexsort([np.broadcast_to(np.arange(n), shape)] + lex, axis=-1) if n else np.zeros(shape, np.int64)
    exact = np.ones(shape[:-1], bool)
    zero_sign_unsure = None
    for k, o in zip(ks, orders, strict=True):
        # a zero from an order-sensitive evaluation may be -0 or +0: total orders tell them apart
        zs = k.O & (k.X == 0) if o.endswith("total") else np.zeros(k.X.shape, bool)
        zero_sign_unsure = zs if zero_sign_unsure is None else zero_sign_unsure
        exact &= ~np.any((k.B > 0) | zs, axis=-1)
    first = ks[0]
    flt = first.X.dtype.kind == "f"
    nan_row = np.any(np.isnan(first.X), axis=-1) if flt else np.zeros(shape[:-1], bool)
    if len(ks) == 1 and n > 1:
        Xs = np.take_along_axis(first.X.astype(np.float64), perm, -1)
        Beff = np.where(zero_sign_unsure, 1e-300, first.B)
        Bs = np.take_along_axis(Beff, perm, -1)
        certain = exact | (_certain_order(Xs, Bs, exact) & ~nan_row)
    else:
        certain = exact | (n <= 1)
    O = np.zeros(shape[:-1], bool)
    for v in ks + carried:
        O |= np.any(v.O, axis=-1)
    return perm, certain, O, ks[0], nan_row


def _permuted(v, perm, certain, O, key, nan_row, is_key, k=None):
    Xp = np.take_along_axis(v.X, perm, -1)
    Bp = np.take_along_axis(v.B, perm, -1)
    if k is not None:
        Xp, Bp = Xp[..., :k], Bp[..., :k]
    Bout = np.where(certain[..., None], Bp, np.inf)
    if is_key:                                     # sorting is 1-Lipschitz in the max norm
        lip = np.where(nan_row, np.inf, np.max(key.B, axis=-1, initial=0.0))
        Bout = np.where(certain[..., None], Bp, lip[..., None])
    return Xp, Bout, np.broadcast_to(O[..., None], Xp.shape)


def sort(ev, node) -> Val:
    a = node.attrs
    dim, orders, r = a["dimension"], a["orders"], a["result"]
    vals = [_whole(ev, o) for o in node.operands]
    keys = [v for v, o in zip(vals, orders, strict=True) if o]
    korders = [o for o in orders if o]
    carried = [Val(np.moveaxis(v.X, dim, -1), np.moveaxis(v.B, dim, -1), np.moveaxis(v.O, dim, -1)) for v in vals]
    perm, certain, O, key, nan_row = _sorted(ev, node, keys, korders, dim, carried)
    is_key = len(keys) == 1 and bool(orders[r])
    X, B, Os = _permuted(carried[r], perm, certain, O, key, nan_row, is_key)
    return Val(np.moveaxis(X, -1, dim), np.moveaxis(B, -1, dim), np.moveaxis(Os, -1, dim))


def topk(ev, node) -> Val:
    a = node.attrs
    x = node.operands[0]
    vx = _whole(ev, x)
    order = "desc_total" if a["largest"] else "asc_total"
    perm, certain, O, key, nan_row = _sorted(ev, node, [vx], [order], x.rank - 1, [])
    if x.op != "parameter":
        # IEEE 754 leaves the sign of a NaN that arithmetic makes or passes on unspecified (x86 makes -NaN,
        # CUDA +NaN; a sum's NaN takes the sign of whichever NaN operand its order meets first), and the
        # total order tells -NaN from +NaN: a computed row with a NaN has no certain order.  (Found as top-1
        # of x - sum(x) over f32[65537]: index 0 when the sum's NaN is +NaN, the first +NaN input when -NaN.)
        certain = certain & ~nan_row
    if a["result"] == 1:
        idx = np.broadcast_to(np.arange(x.shape[-1]), perm.shape)
        v = Val(idx, np.zeros(perm.shape), np.zeros(perm.shape, bool))
        X, B, Os = _permuted(v, perm, certain, O, key, nan_row, False, a["k"])
        return Val(X.astype(np.int32), B, Os)
    X, B, Os = _permuted(key, perm, certain, O, key, nan_row, True, a["k"])
    return Val(X, B, Os)


# -- scatter -------------------------------------------------------------------------------------------------

def scatter(ev, node) -> Val:
    x, ind, upd = node.operands
    a = node.attrs
    dt, comb = node.dtype, a["combiner"]
    flt = is_float(dt)
    vx, vi, vu = _whole(ev, x), _whole(ev, ind), _whole(ev, upd)
    uwd = list(a["update_window_dims"])
    order = [d for d in range(upd.rank) if d not in uwd] + uwd       # scatter dims first, then the window
    n_upd = upd.size
    U_ = [np.moveaxis(g, order, range(upd.rank)).reshape(-1) if upd.rank else g.reshape(-1)
          for g in np.indices(upd.shape)] if upd.rank else []
    ivd, S = a["index_vector_dim"], ind.rank
    scat = [d for d in range(upd.rank) if d not in uwd]
    pos_of = dict(zip([d for d in range(S) if d != ivd], [U_[d] for d in scat], strict=True))
    start, sure = {}, np.ones(n_upd, bool)
    for k, d in enumerate(a["scatter_dims_to_operand_dims"]):
        where = tuple(np.full(n_upd, k) if s == ivd else pos_of[s] for s in range(S))
        start[d] = vi.X[where].astype(np.int64) if S else np.full(n_upd, int(vi.X))
        sure &= (vi.B[where] == 0) if S else bool(vi.B == 0)
    batching = dict(zip(a["input_batching_dims"], a["scatter_indices_batching_dims"], strict=True))
    window = [d for d in range(x.rank) if d not in a["inserted_window_dims"] and d not in batching]
    extent = {w: upd.shape[u] for w, u in zip(window, uwd, strict=True)}
    fits = np.ones(n_upd, bool)
    target = []
    for d in range(x.rank):
        base = pos_of[batching[d]] if d in batching else start.get(d, np.zeros(n_upd, np.int64))
        if d in start:
            fits &= (base >= 0) & (base + extent.get(d, 1) <= x.shape[d])
        off = U_[uwd[window.index(d)]] if d in extent else 0
        target.append(base + off)
    keep = np.flatnonzero(fits)
    flat = np.zeros(keep.size, np.int64)
    for t, n in zip(target, x.shape, strict=True):
        flat = flat * n + t[keep]
    ux = (np.moveaxis(vu.X, order, range(upd.rank)).reshape(-1) if upd.rank else vu.X.reshape(-1))[keep]
    ub = (np.moveaxis(vu.B, order, range(upd.rank)).reshape(-1) if upd.rank else vu.B.reshape(-1))[keep]
    uo = (np.moveaxis(vu.O, order, range(upd.rank)).reshape(-1) if upd.rank else vu.O.reshape(-1))[keep]
    X = np.array(vx.X, copy=True).reshape(-1)
    B = np.array(vx.B, np.float64).reshape(-1)
    O = np.array(vx.O, bool).reshape(-1)
    if not np.all(sure):                                   # an update whose place is uncertain: no claim at all
        return Val(X.reshape(node.shape), np.full(node.shape, np.inf), np.ones(node.shape, bool))
    with np.errstate(all="ignore"):
        if comb == "assign":
            for t, xv, bv, ov in zip(flat, ux, ub, uo, strict=True):   # in order: the last update of an element wins
                X[t], B[t], O[t] = xv, bv, ov
            return Val(X.reshape(node.shape), B.reshape(node.shape), O.reshape(node.shape))
        count = np.zeros(X.size, np.int64)
        np.add.at(count, flat, 1)
        hit = count > 0
        if not flt:
            if comb in ("sum", "prod", "max", "min"):
                ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[comb]
                ufunc.at(X, flat, ux.astype(X.dtype))
            else:
                ufunc = np.logical_and if comb == "and" else np.logical_or
                ufunc.at(X, flat, ux)
            maxB = B.copy()
            np.maximum.at(maxB, flat, ub)
            np.logical_or.at(O, flat, uo)
            return Val(X.reshape(node.shape), np.where(maxB == 0, 0.0, np.inf).reshape(node.shape),
                       O.reshape(node.shape))
        np.logical_or.at(O, flat, uo)
        if comb in ("max", "min"):
            (np.maximum if comb == "max" else np.minimum).at(X, flat, ux)
            np.maximum.at(B, flat, ub)
            return Val(X.reshape(node.shape), B.reshape(node.shape), (O | (hit & (X == 0))).reshape(node.shape))
        g = _gammas(count + 1, U[dt])       # f16/bf16: each update may round to the type itself
        if comb == "sum":
            mags = np.abs(X) + B
            np.add.at(mags, flat, np.abs(ux) + ub)
            sumB = B.copy()
            np.add.at(sumB, flat, ub)
            np.add.at(X, flat, ux)
            Bn = sumB + g * mags + (count + 1) * TINY[dt]
            big = mags
        else:
            mags = np.abs(X) + B
            np.multiply.at(mags, flat, np.abs(ux) + ub)
            np.multiply.at(X, flat, ux)
            Bn = mags * (1 + g) - np.abs(X) + (count + 1) * TINY[dt]
            big = mags
        Bn = np.where(big * (1 + g) > BIGGEST[dt], np.inf, Bn)
        B = np.where(hit, Bn, B)
        O = O | hit
        return Val(X.reshape(node.shape), B.reshape(node.shape), O.reshape(node.shape))


WHOLE = {"reduce-window": reduce_window, "sort": sort, "topk": topk, "scatter": scatter}


def whole(ev, node) -> Val:
    """A library op or argmax/argmin over its whole output."""
    if is_pair_reduce(node):
        return pair_reduce(ev, node)
    return WHOLE[node.op](ev, node)


def order_sensitive_op(node) -> bool:
    """Ops here whose float result depends on the order of a fold (held to the bound, not to the reference)."""
    if node.op == "reduce-window":
        return is_float(node.dtype) and node.attrs["reducer"] in ("sum", "prod")
    if node.op == "scatter":
        return is_float(node.dtype) and node.attrs["combiner"] in ("sum", "prod")
    return False


