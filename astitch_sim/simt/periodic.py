"""Rows packed several to a warp: count one block's rows and multiply.

The separable count (``memory.py``) rests on one fact: in a ``rows`` mapping whose
rows take a multiple of 32 lanes, a warp instruction never spans two rows, so every
row repeats the first row's pattern (its start address aside) and one row per
alignment class is counted.  Row vectors (issue 27) break that fact for short rows:
softmax <750000,32> gives each row 8 lanes of 4-element vectors, so one warp
serves 4 rows, and every access fell back to the dense count over all 24M lane
accesses (seconds per access, most of a simulation of the paper's DIEN shape).

A coarser repetition survives.  A block serves ``rows_per_block`` consecutive
tasks in each trip (its *period*); the next period is the same block shape one
block (or one trip) later: its ``(block, thread, iteration)`` are the first
period's plus offsets, and an address term that is affine along the tasks moves
by an offset too.  So a period plays the separable count's row (``X`` = which
period, ``Y`` = the period's own tasks x the row) and :func:`memory._count_separable`
counts one period per alignment class.  What is checked, not assumed:

* every period is a translate of the first (block, thread and iteration, and each
  address term over the task dims), thread offsets whole warps and iteration
  offsets whole vectors, so each period's warp instructions are the first's,
  renumbered;
* the periods' warp instructions are disjoint (renumbered far enough apart);
* the tasks after the last whole period (a partly filled last block) are counted
  densely on their own few elements and added -- only when their warp
  instructions are disjoint from the periods' (then sectors, requests and bank
  conflicts, all per warp instruction, add up).  Their block may be one the
  periods use too (a grid-stride loop's last trip): the (block, element) pairs
  both read are then counted once, from the few periods of that block.

Anything else (a term over both task and row dims that is not a sum of a part over
each, a mask over both, a mapping whose periods are not translates) answers None and
the caller counts densely, as before.
"""
from __future__ import annotations

import weakref
from types import SimpleNamespace

import numpy as np

from ..ir.flatindex import distinct
from .geometry import WARP, Geometry, additive_parts, support


def _translate_offsets(line: np.ndarray, P: int, n: int):
    """``line[p*P + j] == line[j] + off[p]`` for the ``n`` whole periods: ``off`` (or None if not)."""
    A = line[:n * P].reshape(n, P)
    off = A[:, 0] - A[0, 0]
    if not np.array_equal(A - off[:, None], np.broadcast_to(A[0], A.shape)):
        return None
    return off


def split(geom, acc):
    """``(view, F_X, F_Y, mx, my, rest)`` for the separable count (``memory.py``) over the periods of ``geom``
    (``view``: what that count asks of a geometry; ``rest``: the lane arrays -- ``W``, ``F``, ``block``,
    ``iteration``, ``sel`` -- of the tasks after the last whole period, or None), or None when the periods do
    not repeat (module docstring).  What depends on the geometry alone is worked out once per geometry
    (:func:`_periods`); each access adds its own index terms and mask."""
    per = _periods(geom)
    if per is None:
        return None
    p0, p1 = geom.parts
    terms = _terms(geom, acc, p0, p1, per.P, per.n)
    if terms is None:
        return None
    F_X, F_Y, rows_of, cols_of = terms
    masks = _mask(geom, acc.mask, p0, p1, per.P, per.n)
    if masks is None:
        return None
    my, mask_rows, mask_cols = masks
    rest = None
    if per.rest is not None:
        tasks = per.rest.tasks
        F = (rows_of(tasks)[:, None] + cols_of[None, :]).ravel()
        sel = None
        if mask_rows is not None or mask_cols is not None:
            r = mask_rows[tasks] if mask_rows is not None else np.ones(tasks.size, bool)
            c = mask_cols if mask_cols is not None else np.ones(per.C, bool)
            sel = (r[:, None] & c[None, :]).ravel()
        rest = SimpleNamespace(W=per.rest.W, F=F, block=per.rest.block, iteration=per.rest.iteration, sel=sel,
                               shares_blocks=per.rest.shared.size > 0,
                               shared_pairs=lambda: _shared_pairs(per, F_X, F_Y, my))
    return per.view, F_X, F_Y, None, my, rest


def _shared_pairs(per, F_X, F_Y, my):
    """``(block, element)`` of every lane access of the whole periods that share a block with the partial one
    (a few periods: one per earlier trip of those blocks), for the byte count's union."""
    B_X, B_Y = per.view.block_parts()
    p = per.rest.shared
    blocks = (B_X[p][:, None] + B_Y[None, :]).ravel()
    elems = (F_X[p][:, None] + F_Y[None, :]).ravel()
    if my is not None:
        keep = np.broadcast_to(my[None, :], (p.size, my.size)).ravel()
        blocks, elems = blocks[keep], elems[keep]
    return blocks, elems


#: per geometry, its periods (or None): every access of a stage shares them
_PERIODS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_NONE = object()


def _periods(geom):
    """The periods of a rows geometry packing several rows to a warp -- ``P`` tasks each, ``n`` whole ones --
    with the separable count's view of one period and the partly filled last block's lane arrays; None when
    they do not repeat, or when the last block's warps or block meet a whole period's."""
    got = _PERIODS.get(geom, _NONE)
    if got is _NONE:
        got = _PERIODS[geom] = _find_periods(geom)
    return got


def _find_periods(geom):
    m = geom.mapping
    if not geom.separable or geom.X is not None or m.kind != "rows":
        return None
    p0, p1 = geom.parts
    R = int(np.prod([geom.shape[k] for k in p0])) if p0 else 1
    C = int(np.prod([geom.shape[k] for k in p1])) if p1 else 1
    P = m.rows_per_block
    n = R // P
    if n < 2:
        return None
    lines0, lines1 = geom.split_lines()
    offs = [_translate_offsets(a, P, n) for a in lines0]
    if any(o is None for o in offs):
        return None
    d_b, d_t, d_it = offs
    V = geom.vector
    if (d_t % WARP).any() or (d_it % V).any():
        return None
    d_W = geom.warp_ids(d_b, d_t, d_it)
    period = [(a[:P, None] + b[None, :]).ravel() for a, b in zip(lines0, lines1)]
    W_Y = geom.warp_ids(*period)
    if not _apart(d_W, W_Y):
        return None
    parts = (lines0[0][:n * P:P], period[0] - lines0[0][0])
    view = PeriodView(W_Y=W_Y, vector=V, mapping=m, block_parts=lambda: parts, _cache={})
    rest = None
    if n * P < R:
        tasks = np.arange(n * P, R)
        b, t, it = ((a[tasks, None] + c[None, :]).ravel() for a, c in zip(lines0, lines1))
        W = geom.warp_ids(b, t, it)
        if _meets(W, d_W, W_Y):
            return None                       # the partial block shares a warp instruction with a whole period
        rest = SimpleNamespace(tasks=tasks, W=W, block=b, iteration=it, shared=_meets_blocks(b, *parts))
    return SimpleNamespace(P=P, n=n, C=C, view=view, rest=rest)


class PeriodView(SimpleNamespace):
    """What the separable count asks of a geometry, for one period: its warp numbers ``W_Y``, ``vector``,
    ``mapping``, ``block_parts``, and ``cached`` (the geometry's own memo, over this view's ``_cache``: what a
    count derives from the period alone, such as its distinct warp instructions)."""
    cached = Geometry.cached


def _meets(W: np.ndarray, d_W: np.ndarray, W_Y: np.ndarray) -> bool:
    """Is any of ``W`` (the partial block's few warp instructions) some period's ``d_W[p] + W_Y[q]``?  Only the
    periods whose offset puts ``w`` within ``W_Y``'s range are asked (a sorted search per warp instruction)."""
    offsets, Y = np.sort(d_W), distinct(W_Y)
    if Y.size == 0:
        return False
    for w in distinct(W).tolist():
        near = offsets[np.searchsorted(offsets, w - Y[-1]):np.searchsorted(offsets, w - Y[0], side="right")]
        if np.isin(w - near, Y).any():
            return True
    return False


def _meets_blocks(b: np.ndarray, B_X: np.ndarray, B_Y: np.ndarray) -> np.ndarray:
    """The whole periods ``p`` that run in a block of ``b`` (period ``p``'s blocks are ``B_X[p] + B_Y``): in a
    grid-stride loop the partial last block is also a block of earlier trips, whose periods it may read again."""
    starts = (distinct(b)[:, None] - distinct(B_Y)[None, :]).ravel()
    return np.flatnonzero(np.isin(B_X, starts))


def _apart(d_W: np.ndarray, W_Y: np.ndarray) -> bool:
    """Distinct period offsets spaced more than one period's range of warp instructions apart."""
    if W_Y.size == 0:
        return True
    gaps = np.diff(np.sort(d_W))
    return bool(gaps.size == 0 or int(gaps.min()) > int(W_Y.max() - W_Y.min()))


def _terms(geom, acc, p0, p1, P, n):
    """The access's element index as ``F_X`` (per period) + ``F_Y`` (over one period's tasks x the row), and,
    for the tasks after the whole periods, ``rows_of(tasks)`` + ``cols_of``; None if a term mixes the dims."""
    R = geom.part_shape(p0)
    row_sum = np.zeros(int(np.prod(R)), np.int64)
    col_sum = np.zeros(int(np.prod(geom.part_shape(p1))), np.int64)
    for t in acc.terms:
        s = set(support(t, geom.rank))
        if s <= set(p1):
            col_sum = col_sum + geom.flat_part(t, p1)
        elif s <= set(p0):
            row_sum = row_sum + geom.flat_part(t, p0)
        else:
            parts = additive_parts(t, p0, geom.rank)
            if parts is None:
                return None
            row_sum = row_sum + geom.flat_part(parts[0], p0)
            col_sum = col_sum + geom.flat_part(parts[1], p1)
    off = _translate_offsets(row_sum, P, n)
    if off is None:
        return None
    F_X = row_sum[0] + off
    F_Y = ((row_sum[:P] - row_sum[0])[:, None] + col_sum[None, :]).ravel()
    return F_X, F_Y, (lambda tasks: row_sum[tasks]), col_sum


def _mask(geom, mask, p0, p1, P, n):
    """``(my, mask_rows, mask_cols)``: the mask over one period (the same in every period), and its task and
    row parts for the tasks after the whole periods; ``(None, None, None)`` for no mask; None if it mixes the
    dims or differs between periods."""
    if mask is None:
        return None, None, None
    s = set(support(mask, geom.rank))
    C = int(np.prod(geom.part_shape(p1)))
    if s <= set(p1):
        cols = geom.flat_part(mask, p1).astype(bool)
        return np.broadcast_to(cols[None, :], (P, C)).ravel(), None, cols
    if s <= set(p0):
        rows = geom.flat_part(mask, p0).astype(bool)
        A = rows[:n * P].reshape(n, P)
        if not (A == A[:1]).all():
            return None
        return np.broadcast_to(rows[:P, None], (P, C)).ravel(), rows, None
    return None
