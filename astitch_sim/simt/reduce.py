"""How a reduction runs on the SIMT machine: per thread, then per task, then per split.

Three levels, each in the order real code runs them, so float32 results drift
from numpy's pairwise sum exactly as a GPU's would:

1. **per thread**: every thread starts from the reducer's identity and folds in
   its elements in loop-iteration order (``inner`` trips of its task);
2. **per task, across threads**, as the stage's ``reduce_scheme`` says
   (``astitch_sim/plan/reduce_scheme.py``): ``tree`` -- the task's ``lanes`` partials go
   through a shared-memory tree, lane ``j`` combines lane ``j + h`` while ``h`` halves
   (``for (s = n/2; s > 0; s >>= 1) if (tid < s) buf[tid] += buf[tid + s]``);
   ``shuffle`` -- an xor butterfly inside each warp (for a power-of-two lane count
   lane 0 folds the very pairs of the tree), and for a task of ``W`` warps a second
   butterfly over the warp totals padded with the identity to a power of two;
3. **per task, across split blocks** (task splitting): ``atomic`` -- each split
   block's first thread atomically folds its partial into a result buffer the
   runtime filled with the reduce's init value; ``grid_barrier`` -- partials go
   to a global scratch, a grid barrier, and every split block folds all of them.

Unsplit tasks fold the init value in at the end (``op(result, init)``, like
XLA's reduce semantics and the numpy reference).  An argmax/argmin folds
(value, index) pairs the same way, every level on both arrays at once.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import cast, numpy_dtype
from ..plan.reduce_scheme import WARP
from ..ir.reducers import reducer
from ..plan.vocabulary import ReduceScheme


def identity(node) -> tuple:
    """The values a thread's accumulator starts from (one per reduced input; holes in the tree hold them)."""
    return reducer(node).identity([numpy_dtype(x.dtype) for x in node.operands[:len(node.operands) // 2]])


def lay_out(values: np.ndarray, layout: tuple, geom, m, ident) -> np.ndarray:
    """Scatter the reduce input into ``[task, part, inner, lane]`` (holes hold the identity)."""
    task, part, inner, lane, lanes = layout
    T, S, I = m.rows, m.splits, m.inner_iterations
    width = S * I * lanes
    pos = (part * I + inner) * lanes + lane
    if not geom.separable:
        dense = np.full((T, width), ident, dtype=values.dtype)
        dense.reshape(-1)[task * width + pos] = geom.full(values)
        return dense.reshape(T, S, I, lanes)
    p0, p1 = geom.parts
    v = np.broadcast_to(values, geom.shape)
    v = np.transpose(v, list(p0) + list(p1)).reshape(len(task), len(pos))
    every_task = np.array_equal(task, np.arange(T))
    runs = _contiguous_runs(pos)
    if runs is None:                                # scattered positions: one fancy-indexed scatter
        dense = np.full((T, width), ident, dtype=values.dtype)
        dense[np.ix_(task, pos)] = v
    elif every_task and runs == [(0, 0, width)]:
        return v.reshape(T, S, I, lanes)            # already in place, no holes: nothing to copy
    elif every_task:                                # e.g. one run per split of a row: block copies, and the
        dense = np.empty((T, width), dtype=values.dtype)     # identity only in the holes between runs
        end = 0
        for src, dst, n in sorted(runs, key=lambda r: r[1]):
            dense[:, end:dst] = ident
            dense[:, dst:dst + n] = v[:, src:src + n]
            end = dst + n
        dense[:, end:] = ident
    else:
        dense = np.full((T, width), ident, dtype=values.dtype)
        for src, dst, n in runs:
            dense[task, dst:dst + n] = v[:, src:src + n]
    return dense.reshape(T, S, I, lanes)


#: at most this many contiguous runs of positions are copied run by run (more: one fancy-indexed scatter)
MAX_RUNS = 64


def _contiguous_runs(pos: np.ndarray):
    """``(start in pos, first position, length)`` for each run of consecutive positions in ``pos``
    (positions are distinct), or None if there are more than :data:`MAX_RUNS` runs."""
    if pos.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(pos) != 1) + 1
    if breaks.size >= MAX_RUNS:
        return None
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [pos.size]))
    return [(int(s), int(pos[s]), int(e - s)) for s, e in zip(starts, ends)]


def per_thread(dense: tuple, combine, ident: tuple) -> tuple:
    """Each thread folds its elements in iteration order -> ``[task, part, lane]`` per value."""
    # the identity stays a 0-d array: numpy broadcasts it in the first combine (same values, one pass less)
    acc = tuple(np.asarray(i, dtype=d.dtype).reshape(()) for i, d in zip(ident, dense))
    for i in range(dense[0].shape[2]):
        acc = combine(acc, tuple(d[:, :, i, :] for d in dense))
    shape = dense[0][:, :, 0, :].shape
    return tuple(np.broadcast_to(np.asarray(a, dtype=d.dtype), shape) for a, d in zip(acc, dense))


#: elements of one block of tasks the tree works on at a time (a few hundred KB: it stays in cache)
TREE_BLOCK = 1 << 16


def tree_steps(lanes: int) -> int:
    """Halving steps of a tree over ``lanes`` partials (``ceil(log2(lanes))``)."""
    steps = 0
    while lanes > 1:
        lanes, steps = (lanes + 1) // 2, steps + 1
    return steps


def tree(acc: tuple, combine) -> tuple:
    """Shared-memory tree over the last axis (lanes) -> ``[task, part]`` per value; returns the step count too.

    Lane ``j`` combines lane ``j + h`` while ``h`` halves.  The work goes through blocks of
    tasks small enough to stay in cache, each turned lanes-first (one contiguous row per lane),
    so a step combines two contiguous blocks of rows: the same pairs in the same order as the
    GPU's tree, at numpy's full speed even for 750000 tasks of 32 lanes."""
    lanes, lead = acc[0].shape[-1], acc[0].shape[:-1]
    flat = [np.ascontiguousarray(a).reshape(-1, lanes) for a in acc]
    out = [np.empty(f.shape[0], dtype=f.dtype) for f in flat]
    chunk = max(1, TREE_BLOCK // max(lanes, 1))
    for s in range(0, flat[0].shape[0], chunk):
        rows = [np.ascontiguousarray(f[s:s + chunk].T) for f in flat]
        n = lanes
        while n > 1:
            h = (n + 1) // 2
            merged = combine(tuple(r[:n - h] for r in rows), tuple(r[h:n] for r in rows))
            merged = [np.asarray(m, dtype=r.dtype) for m, r in zip(merged, rows)]
            rows = merged if n - h == h else [np.concatenate([m, r[n - h:h]]) for m, r in zip(merged, rows)]
            n = h
        for o, r in zip(out, rows):
            o[s:s + chunk] = r[0]
    return tuple(o.reshape(lead) for o in out), tree_steps(lanes)


def shuffle(acc: tuple, combine, ident: tuple) -> tuple:
    """The shuffle scheme over the last axis (lanes) -> ``[task, part]`` per value; returns the step counts too.

    A butterfly's lane 0 folds what the tree folds over a power-of-two lane count, so a task of at
    most one warp is the tree; a task of ``W`` warps is the tree over each warp's 32 lanes, then the
    tree over the ``W`` warp totals padded with the identity to ``P`` (a power of two) -- exactly the
    lanes the second butterfly reads (lane ``l < W``: warp ``l``'s total, else the identity)."""
    lanes = acc[0].shape[-1]
    if lanes <= WARP:
        out, steps = tree(acc, combine)
        return out, (steps, 0)
    lead, w = acc[0].shape[:-1], lanes // WARP
    per_warp, steps = tree(tuple(a.reshape(lead + (w, WARP)) for a in acc), combine)
    p = 1 << (w - 1).bit_length()
    padded = tuple(np.concatenate([t, np.broadcast_to(np.asarray(i, dtype=t.dtype), lead + (p - w,))], axis=-1)
                   for t, i in zip(per_warp, ident))
    out, steps2 = tree(padded, combine)
    return out, (steps, steps2)


def combine_splits(partial: tuple, init: tuple, combine, how: str) -> tuple:
    """Across split blocks: ``[task, part]`` -> ``[task]`` per value (see the module docstring)."""
    S = partial[0].shape[1]
    col = lambda p: tuple(x[:, p] for x in partial)     # noqa: E731
    if S == 1:
        return combine(col(0), tuple(np.broadcast_to(i, partial[0].shape[:1]) for i in init))
    if how == "atomic":
        out = tuple(np.broadcast_to(i, x.shape[:1]).astype(x.dtype) for i, x in zip(init, partial))
        for p in range(S):                        # atomics land in part order
            out = combine(out, col(p))
        return out
    out = col(0)
    for p in range(1, S):
        out = combine(out, col(p))
    return combine(out, tuple(np.broadcast_to(i, out[0].shape) for i in init))


def run_reduce(node, values, init, geom, scheme=ReduceScheme.TREE) -> dict:
    """All three levels for one reduce node; returns its result (the ``result`` component) and the work's shape.

    ``values``: the reduced input(s) at the stage's elements (a tuple for argmax/argmin);
    ``init``: the init value(s); ``scheme``: the stage's ``reduce_scheme`` (``steps`` is then the
    tree's step count, or the two butterflies' step counts)."""
    m = geom.mapping
    red = reducer(node)
    n = len(node.operands) // 2
    values = values if isinstance(values, tuple) else (values,)
    init = init if isinstance(init, tuple) else (init,)
    dtypes = [numpy_dtype(x.dtype) for x in node.operands[:n]]
    values = tuple(np.asarray(v).astype(d, copy=False) for v, d in zip(values, dtypes))
    ident = identity(node)
    layout = geom.reduce_layout()
    dense = tuple(lay_out(v, layout, geom, m, i) for v, i in zip(values, ident))
    with np.errstate(all="ignore"):
        acc = per_thread(dense, red.combine, ident)
        if scheme is ReduceScheme.SHUFFLE:
            partial, steps = shuffle(acc, red.combine, ident)
        else:
            partial, steps = tree(acc, red.combine)
        init = tuple(np.asarray(i, dtype=d) for i, d in zip(init, dtypes))
        result = combine_splits(partial, init, red.combine, m.combine)
    k = node.attrs.get("result", 0)
    result = cast(np.asarray(result[k], dtype=dtypes[k]), node.dtype)
    partial = cast(np.asarray(partial[k], dtype=dtypes[k]), node.dtype)
    return {"result": result.reshape(node.shape), "partial": partial, "lanes": layout[4], "steps": steps}
