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

What the levels count (shuffles, tree steps, barriers) depends on the lane count only, so two
shortcuts compute the same values with less work: a reducer exact in any order (``max``, ``min``,
``and``, ``or``) over tasks that are whole rows does levels 1 and 2 in one ``ufunc.reduce`` per row
(:func:`reduce_rows_in_any_order`), and a thread's one element (one inner iteration) goes to the
tree as it lies, which folds the identity in (:class:`Unfolded`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import cast, numpy_dtype
from ..plan.reduce_scheme import WARP
from ..ir.reducers import reducer
from ..plan.vocabulary import ReduceScheme


def identity(node) -> tuple:
    """The values a thread's accumulator starts from (one per reduced input; holes in the tree hold them)."""
    return reducer(node).identity([numpy_dtype(x.dtype) for x in node.operands[:len(node.operands) // 2]])


#: a reduce over more input elements than this lays its input out and folds it per thread a block of tasks at
#: a time (every step is per task, so the result is the same bit for bit): laid out whole, a 262M-element
#: reduce (log_softmax 8192x32000) would copy its input into a second gigabyte; below it one pass is cheaper
LAYOUT_CHUNK = 1 << 22

#: the bytes of layout a thread's fold takes through all its steps before the next block (:func:`per_thread`):
#: about what a core's L2 cache holds
FOLD_BLOCK_BYTES = 1 << 20


def lay_out_chunks(values: np.ndarray, geom, m, ident, chunk=LAYOUT_CHUNK):
    """The reduce input scattered into ``[task, part, inner, lane]`` (holes hold the identity), a block of tasks
    at a time: yields ``(tasks, dense)``, ``dense`` the layout of the tasks ``tasks`` names (a slice or an index
    array into the task axis), which are distinct across the blocks -- or, for rows whose vectors are dealt to
    their lanes, the rows' own ``[task, part, trip, lane, j]`` view (``dealt_vectors``).  Blocks hold about
    ``chunk`` elements (whole tasks); ``chunk=None``: one block, every task.  Tasks no element of a separable
    domain reaches are in no block (their row is all identity)."""
    T, S, I = m.rows, m.splits, m.folds_per_task
    width = S * I * geom.layout_lanes
    if not geom.separable:
        task, lanes, pos = geom.layout_tasks(), geom.layout_lanes, geom.layout_positions()
        dense = np.full((T, width), ident, dtype=values.dtype)
        dense.reshape(-1)[task * width + pos] = geom.full(values)
        yield slice(0, T), dense.reshape(T, S, I, lanes)
        return
    form, task, lanes = layout_form(geom), geom.layout_tasks(), geom.layout_lanes
    pos, every_task, dealt, runs = form.pos, form.every_task, form.dealt, form.runs
    p0, p1 = geom.parts
    v = np.transpose(np.broadcast_to(values, geom.shape), list(p0) + list(p1))
    # the sources only where positions are gathered (a pass over a 4M-element row otherwise unused)
    gathered = dealt is None and (runs is None or len(runs) > FEW_RUNS)
    source, holes = _sources(pos, width) if gathered else (None, None)
    # blocks of whole tasks along the first task dim (a view of it; only the block is reshaped or copied)
    lead = v.shape[0] if p0 else 1
    per_lead = max(1, len(task) // max(lead, 1))
    # blocks bound the copies and keep a fold's accumulators in cache across its steps: the rows as they lie,
    # folded in one step (one element per thread and task: <750000,32> over 32-thread blocks), gain from neither
    one_step = I == 1 and every_task and runs == [(0, 0, width)]
    step = lead if one_step or chunk is None or not p0 else max(1, chunk // max(per_lead * form.n, 1))
    for a in range(0, lead, step):
        b = min(lead, a + step)
        vb = (v[a:b] if p0 else v).reshape((b - a) * per_lead if p0 else len(task), form.n)
        rows = slice(a * per_lead, b * per_lead) if every_task else task[a * per_lead:b * per_lead]
        n = vb.shape[0]
        if every_task and runs == [(0, 0, width)]:
            dense = vb                                  # already in place, no holes: nothing to copy
        elif dealt is not None:                         # a row's vectors dealt to its lanes: a strided view,
            yield rows, _dealt_view(vb, S, dealt, ident)    # [task, part, trip, lane, j], nothing gathered
            continue
        elif gathered:                                  # scattered positions (a ragged row's vectors dealt to its lanes):
            dense = np.take(vb, source, axis=1)         # one gather along the row, 20x faster than a run-by-run
            if holes is not None:                       # copy or a fancy-indexed scatter for 32-element rows
                dense[:, holes] = ident
        else:                                           # e.g. one run per split of a row: block copies, and the
            dense = np.empty((n, width), dtype=values.dtype)     # identity only in the holes between runs
            end = 0
            for src, dst, k in sorted(runs, key=lambda r: r[1]):
                dense[:, end:dst] = ident
                dense[:, dst:dst + k] = vb[:, src:src + k]
                end = dst + k
            dense[:, end:] = ident
        yield rows, dense.reshape(n, S, I, lanes)


@dataclass(frozen=True)
class LayoutForm:
    """How a separable reduce's row lies in its ``[task, part, inner, lane]`` layout: ``n``, the reduced elements
    (a row's); ``pos``, each one's layout position (None for a split row whose vectors are dealt: found from its
    parts, :meth:`Geometry.split_row_layout`, without a row-long array); ``every_task``, the task line is the
    tasks in order; ``dealt``, the row's vectors dealt to its lanes (:func:`dealt_vectors`) or None; ``runs``,
    otherwise, the row's contiguous runs of positions (:func:`_contiguous_runs`)."""
    n: int
    pos: np.ndarray | None
    every_task: bool
    dealt: tuple | None
    runs: list | None


def layout_form(geom) -> LayoutForm:
    """:class:`LayoutForm` of a separable geometry's reduce layout, found once per geometry however many reduces
    read it (kept in the geometry's cache, whose arrays the kept-geometry budget counts)."""
    return geom.cached("layout_form", lambda: _layout_form(geom))


def _layout_form(geom) -> LayoutForm:
    m = geom.mapping
    S, I, lanes, V = m.splits, m.folds_per_task, geom.layout_lanes, getattr(geom, "vector", 1)
    every_task = geom.tasks_in_order()
    parts = geom.split_row_layout()
    if parts is not None:                # a split row: its form from one part's positions, where it shows
        part, inner, lane = parts
        within, n = inner * lanes + lane, part.size * inner.size
        if V <= 1 or I % V:              # (what dealt_vectors turns down at once: no vectors dealt)
            runs = split_row_runs(part, within, I * lanes)
            if runs is not None and len(runs) <= FEW_RUNS:
                return LayoutForm(n, None, every_task, None, runs)
        else:
            dealt = dealt_split_row(part, within, S, I, lanes, V)
            if dealt is not None:
                return LayoutForm(n, None, every_task, dealt, None)
    pos = geom.layout_positions()
    dealt = dealt_vectors(pos, S, I, lanes, V)
    runs = _contiguous_runs(pos) if dealt is None else None
    return LayoutForm(pos.size, pos, every_task, dealt, runs)


#: at most this many contiguous runs of positions are listed (more: the positions are taken as scattered)
MAX_RUNS = 64
#: at most this many runs are copied run by run (block copies); more are gathered with one ``np.take``
FEW_RUNS = 8


def dealt_vectors(pos: np.ndarray, S: int, I: int, lanes: int, V: int):
    """``(trips, lanes, V, chunk)`` when the row's element ``e = part * chunk + w``, ``w = (trip * lanes + lane) * V
    + j``, sits at layout position ``(part * I + trip * V + j) * lanes + lane`` for every element (a rows mapping
    whose lanes take ``V``-element vectors in turn, ``chunk`` elements per split part): the row is then ``[part,
    trip, lane, j]`` as it lies -- padded with the identity where a part's vectors leave its lanes' last trip part
    empty (the paper's <64,30000>: 7500 vectors over 1024 lanes), as the layout's holes are -- and a thread's fold
    walks ``(trip, j)`` in order.  Else None (the general gather)."""
    if V <= 1 or I % V or pos.size == 0 or pos.size > S * I * lanes:
        return None
    trips, chunk = I // V, -(-pos.size // S)
    first = _part_positions(trips, lanes, V, chunk)                       # part 0's positions
    found = (trips, lanes, V, chunk)
    if pos.size != S * chunk:              # a shorter last part: the whole formula, part by part
        want = (np.arange(S, dtype=np.int64)[:, None] * (I * lanes) + first[None, :]).reshape(-1)[:pos.size]
        return found if np.array_equal(pos, want) else None
    # every part full: part p's positions are part 0's moved by p * I * lanes, checked a cache-sized block of
    # parts at a time (a 4M-element row split 256 ways: no row-sized array of wanted positions)
    rows, step = pos.reshape(S, chunk), max(1, (1 << 16) // max(chunk, 1))
    for a in range(0, S, step):
        b = min(S, a + step)
        if not np.array_equal(rows[a:b] - np.arange(a, b, dtype=np.int64)[:, None] * (I * lanes),
                              np.broadcast_to(first, (b - a, chunk))):
            return None
    return found


def _part_positions(trips: int, lanes: int, V: int, chunk: int) -> np.ndarray:
    """The layout positions of a part's first ``chunk`` elements when its vectors are dealt to its lanes, as a
    broadcast formula: element ``(trip * lanes + lane) * V + j`` at ``(trip * V + j) * lanes + lane``."""
    trip, lane, j = np.ix_(*(np.arange(k, dtype=np.int64) for k in (trips, lanes, V)))
    return ((trip * V + j) * lanes + lane).reshape(-1)[:chunk]


def dealt_split_row(part: np.ndarray, within: np.ndarray, S: int, I: int, lanes: int, V: int):
    """:func:`dealt_vectors` of a split row whose positions are ``part[o] * I * lanes + within[w]`` for element
    ``o * len(within) + w`` (:meth:`Geometry.split_row_layout`): every part full and part ``o`` the ``o``-th, so
    the check is on one part's positions, not the row's.  None where it cannot tell so (the caller then asks
    :func:`dealt_vectors` about the whole row)."""
    n = part.size * within.size
    if V <= 1 or I % V or n == 0 or n > S * I * lanes or part.size != S:
        return None
    trips, chunk = I // V, within.size
    if not np.array_equal(part, np.arange(S)) or not np.array_equal(within, _part_positions(trips, lanes, V, chunk)):
        return None
    return trips, lanes, V, chunk


def split_row_runs(part: np.ndarray, within: np.ndarray, span: int):
    """:func:`_contiguous_runs` of a split row whose positions are ``part[o] * span + within[w]`` for element
    ``o * len(within) + w``, where a part's positions run on (``within`` consecutive): runs break only between
    parts.  None where ``within`` does not run on, or past :data:`MAX_RUNS` runs."""
    n = within.size
    if n == 0 or not np.array_equal(within, within[0] + np.arange(n)):
        return None
    starts = part * span + within[0]
    breaks = np.flatnonzero(np.diff(starts) != n) + 1
    if breaks.size >= MAX_RUNS:
        return None
    bounds = [0, *breaks.tolist(), starts.size]
    return [(a * n, int(starts[a]), (b - a) * n) for a, b in zip(bounds[:-1], bounds[1:])]


class Trips(tuple):
    """A dealt row's layout in pieces, each ``[task, part, trip, lane, j]``, folded one after another: the full
    trips as a view of the row, then its last trip padded with the identity where its vectors leave lanes empty
    (a copy of ``1 / trips`` of the row, not of all of it)."""


def _dealt_view(vb: np.ndarray, S: int, dealt: tuple, ident):
    """Rows ``vb`` (``[task, element]``) as ``[task, part, trip, lane, j]`` (:func:`dealt_vectors`): a view when the
    parts' vectors fill their lanes' trips; else, every part as long, :class:`Trips` (the full trips a view, the
    last one padded); else (a shorter last part) a copy padded with the identity where the layout has holes."""
    trips, lanes, V, chunk = dealt
    n, size, full = vb.shape[0], vb.shape[1], trips * lanes * V
    if chunk == full and size == S * chunk:
        return vb.reshape((n, S, trips, lanes, V))
    if size == S * chunk:
        parts, body = vb.reshape(n, S, chunk), (trips - 1) * lanes * V
        tail = np.full((n, S, lanes * V), ident, dtype=vb.dtype)
        tail[:, :, :chunk - body] = parts[:, :, body:]
        return Trips((parts[:, :, :body].reshape(n, S, trips - 1, lanes, V), tail.reshape(n, S, 1, lanes, V)))
    padded = np.full((n, S, full), ident, dtype=vb.dtype)
    whole = size // chunk
    padded[:, :whole, :chunk] = vb[:, :whole * chunk].reshape(n, whole, chunk)
    if size > whole * chunk:                                  # a shorter last part
        padded[:, whole, :size - whole * chunk] = vb[:, whole * chunk:]
    return padded.reshape((n, S, trips, lanes, V))


def _sources(pos: np.ndarray, width: int) -> tuple:
    """For each layout position, the input column it comes from (a hole: column 0, overwritten), and the
    holes' mask (None when every position is filled)."""
    source = np.zeros(width, dtype=np.int64)
    source[pos] = np.arange(pos.size)
    if pos.size == width:
        return source, None
    holes = np.ones(width, dtype=bool)
    holes[pos] = False
    return source, holes


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


def per_thread(dense: tuple, red, ident: tuple, into=None) -> tuple:
    """Each thread folds its elements in iteration order -> ``[task, part, lane]`` per value.  ``dense`` is the
    ``[task, part, inner, lane]`` layout, or a row's own ``[task, part, trip, lane, j]`` view whose inner
    iteration is ``trip * V + j`` (``dealt_vectors``), or such views one after another (:class:`Trips`).
    ``into``: arrays of that shape and of the layouts' dtypes to write the folds into (returned), not new ones."""
    first = dense[0][0] if isinstance(dense[0], Trips) else dense[0]
    shape = first.shape[:2] + first.shape[3:4]
    if into is not None and into[0].shape != shape:     # (a layout broadcast over the tasks: assigned below)
        for o, a in zip(into, per_thread(dense, red, ident), strict=True):
            o[...] = a
        return into
    if red.any_order:
        acc = (_fold_in_any_order(dense[0], red.ufunc, ident[0]),)
    else:
        acc = _fold_in_cache_blocks(dense, red, ident, shape, into)
    if into is not None:
        if acc is not into:
            for o, a in zip(into, acc, strict=True):
                o[...] = a
        return into
    return tuple(np.broadcast_to(np.asarray(a, dtype=_dtype_of(d)), shape) for a, d in zip(acc, dense))


def _fold_in_cache_blocks(dense: tuple, red, ident: tuple, shape: tuple, into=None) -> tuple:
    """:func:`fold_steps` over the layouts ``dense``, a block of tasks (or, for one task, of parts) at a time, each
    block about :data:`FOLD_BLOCK_BYTES`: a thread's fold reads its layout once per inner iteration, strided
    (a dealt row's ``[..., trip, lane, j]`` view steps over ``j``), so a layout bigger than the cache would come
    from memory once per step; a block stays in cache across its steps.  Every thread folds its own elements in
    the same order as before, so the values are the same bit for bit (the DIEN <750000,32> reduce's fold: 2x faster).
    ``into``: the arrays to write the blocks' folds into (else new ones, of the folds' dtypes)."""
    pieces = [d if isinstance(d, Trips) else (d,) for d in dense]
    nbytes = sum(p.size * p.itemsize for ps in pieces for p in ps)
    axis = 0 if shape[0] > 1 else 1
    n = shape[axis]
    step = max(1, n * FOLD_BLOCK_BYTES // max(nbytes, 1))
    if step >= n:
        return fold_steps(zip(*(_in_iteration_order(d) for d in dense)), red, ident, dense)
    out = into
    for a in range(0, n, step):
        cut = (slice(a, a + step),) if axis == 0 else (slice(None), slice(a, a + step))
        block = tuple(Trips(p[cut] for p in d) if isinstance(d, Trips) else d[cut] for d in dense)
        acc = fold_steps(zip(*(_in_iteration_order(d) for d in block)), red, ident, block)
        if out is None:
            out = tuple(np.empty(shape, dtype=np.asarray(x).dtype) for x in acc)
        for o, x in zip(out, acc):
            o[cut] = x
    return out


def _dtype_of(d) -> np.dtype:
    """The element type of a layout (of its first piece, for :class:`Trips`)."""
    return d[0].dtype if isinstance(d, Trips) else d.dtype


def fold_steps(steps, red, ident: tuple, like: tuple) -> tuple:
    """Accumulators folded over ``steps`` (a tuple of slices per loop iteration, in order) from the identity.  A
    one-value reducer folds into its first result in place (the same additions, no array per step)."""
    # the identity stays a 0-d array: numpy broadcasts it in the first combine (same values, one pass less)
    acc = tuple(np.asarray(i, dtype=_dtype_of(d)).reshape(()) for i, d in zip(ident, like))
    if red.ufunc is None:
        for step in steps:
            acc = red.combine(acc, step)
        return acc
    u, (a,) = red.ufunc, acc
    for k, (step,) in enumerate(steps):
        if k == 0:
            a = u(a, step)                       # the first step makes the accumulator (the identity broadcast)
        else:
            u(a, step, out=a)
    return (a,)


def _fold_in_any_order(d, u, ident, vectors=None) -> np.ndarray:
    """A thread's fold for a reducer whose order does not matter (``any_order``): one ``u.reduce`` over the
    iteration axis 2 of each piece of ``d`` (the layout's ``inner``, or a dealt row's ``trip``: contiguous rows
    of lanes, numpy's fast case), then the vector elements ``j`` of a dealt row one by one (a reduce along that
    short strided axis is 25x slower), then the pieces -> ``[task, part, lane]`` (``vectors``: whether the last axis
    is ``j``; by default a 5-D piece's is)."""
    init = np.asarray(ident).item()
    acc = None
    for p in (d if isinstance(d, Trips) else (d,)):
        r = u.reduce(p, axis=2, initial=init)
        if p.ndim == 5 if vectors is None else vectors:
            r = functools.reduce(u, [r[..., j] for j in range(r.shape[-1])])
        acc = r if acc is None else u(acc, r)
    return acc


def _in_iteration_order(d) -> list:
    """The ``[task, part, lane]`` slices of a layout, one per inner iteration, in order."""
    if isinstance(d, Trips):
        return [s for piece in d for s in _in_iteration_order(piece)]
    if d.ndim == 5:
        return [d[:, :, t, :, j] for t in range(d.shape[2]) for j in range(d.shape[4])]
    return [d[:, :, i, :] for i in range(d.shape[2])]


def per_thread_in_blocks(values: tuple, geom, m, ident: tuple, red) -> tuple:
    """:func:`per_thread` over the whole reduce, a block of tasks at a time (:func:`lay_out_chunks`):
    ``[task, part, lane]`` per value, equal to folding the whole layout at once (each task's fold is its
    own).  Over at most :data:`LAYOUT_CHUNK` elements: one block, the whole layout, as before.  Where every
    thread holds one element of every task's row, the elements as they lie, :class:`Unfolded` (the tree folds
    the identity in)."""
    across = fold_across_tasks(values, geom, m, ident, red)
    if across is not None:
        return across
    size = geom.size if values[0].ndim else 1
    chunk = LAYOUT_CHUNK if size > LAYOUT_CHUNK else None
    T, S, I, lanes = m.rows, m.splits, m.folds_per_task, geom.layout_lanes
    out, reached, seen = None, 0, []
    for blocks in zip(*(lay_out_chunks(v, geom, m, i, chunk) for v, i in zip(values, ident)), strict=True):
        rows = blocks[0][0]
        dense = tuple(d for _, d in blocks)
        if out is None and rows == slice(0, T):          # one block, every task: the whole fold at once
            raw = unfolded(dense)                        # (one element per thread: as they lie)
            return raw if raw is not None else per_thread(dense, red, ident)
        if out is None:                                  # (the dtypes per_thread gives its folds)
            out = tuple(np.empty((T, S, lanes), dtype=_dtype_of(d)) for d in dense)
        if isinstance(rows, slice):                      # a run of tasks: folded straight into its rows
            per_thread(dense, red, ident, into=tuple(o[rows] for o in out))
        else:
            for o, a in zip(out, per_thread(dense, red, ident), strict=True):
                o[rows] = a
        reached += len(range(*rows.indices(T))) if isinstance(rows, slice) else len(rows)
        seen.append(rows)
    if out is None:                                      # a domain without elements: every task is empty
        empty = tuple(np.full((T, S, I, lanes), i, dtype=v.dtype) for v, i in zip(values, ident))
        return per_thread(empty, red, ident)
    if reached < T:                                      # tasks no block reaches: an all-identity fold (the
        missed = np.ones(T, dtype=bool)                  # blocks' tasks are distinct: fewer means some are missed)
        for rows in seen:
            missed[rows] = False
        empty = tuple(np.full((1, S, I, lanes), i, dtype=v.dtype) for v, i in zip(values, ident))
        for o, a in zip(out, per_thread(empty, red, ident), strict=True):
            o[missed] = a
    return out


def fold_across_tasks(values: tuple, geom, m, ident: tuple, red):
    """:func:`per_thread` for a reduction whose reduced dims lie between its task dims in memory (``[A, R, B]``:
    a column reduction, ``A`` empty, or Inductor's ``[32, 512, 3072]`` view of a ``[16384, 3072]`` column sum)
    and whose reduced elements sit at their own layout position (``[part, inner, lane]`` is the reduced index
    itself, no holes).  Then the input already is ``[A, part, inner, lane, B]``: each inner iteration folds one
    slice ``[A, part, lane, B]`` of it, whole rows of tasks at a time -- the additions a GPU's column lanes make,
    in their order, with no transposed copy of the input (which cost 20x the reduction itself).  None where
    the input or the layout is otherwise."""
    if not geom.separable or not all(isinstance(v, np.ndarray) and v.shape == tuple(geom.shape)
                                     and v.flags.c_contiguous for v in values):
        return None
    p0, p1 = geom.parts
    if not p1 or not p0 or p0[-1] < p1[0] or p1 != tuple(range(p1[0], p1[0] + len(p1))) \
            or p0 != tuple(k for k in range(geom.rank) if k not in p1):
        return None          # no task dim after the reduced ones (a row: the layout is the row), or reduced dims apart
    S, I, lanes = m.splits, m.folds_per_task, geom.layout_lanes
    pos = geom.layout_positions()
    if pos.size != S * I * lanes or not np.array_equal(pos, np.arange(pos.size)) or not geom.tasks_in_order():
        return None
    A = int(np.prod(geom.shape[:p1[0]], dtype=np.int64))
    B = int(np.prod(geom.shape[p1[-1] + 1:], dtype=np.int64))
    views = tuple(v.reshape(A, S, I, lanes, B) for v in values)
    if red.any_order:
        acc = (_fold_in_any_order(views[0], red.ufunc, ident[0], vectors=False),)
    else:
        acc = fold_steps((tuple(v[:, :, i] for v in views) for i in range(I)), red, ident, values)
    return tuple(np.ascontiguousarray(np.moveaxis(np.broadcast_to(np.asarray(a, dtype=v.dtype), (A, S, lanes, B)), 3, 1))
                 .reshape(A * B, S, lanes) for a, v in zip(acc, values))


#: elements of one block of tasks the tree works on at a time (about a megabyte: it stays in cache; a smaller
#: block costs more in numpy calls, a few per halving, than it saves: 750000 rows of 32 lanes are 92 blocks)
TREE_BLOCK = 1 << 18
#: a tree halves its lanes on the tasks' rows as they lie while each half is a run of at least this many lanes
#: (numpy adds runs of 8 nearly as fast as long rows), then turns the block lanes-first for the short halvings
TREE_SIDE_BY_SIDE = 8


def tree_steps(lanes: int) -> int:
    """Halving steps of a tree over ``lanes`` partials (``ceil(log2(lanes))``)."""
    steps = 0
    while lanes > 1:
        lanes, steps = (lanes + 1) // 2, steps + 1
    return steps


def tree(acc: tuple, combine, first: tuple | None = None) -> tuple:
    """Shared-memory tree over the last axis (lanes) -> ``[task, part]`` per value; returns the step count too.

    Lane ``j`` combines lane ``j + h`` while ``h`` halves.  The work goes through blocks of
    tasks small enough to stay in cache; while the halves are long runs of lanes (:data:`TREE_SIDE_BY_SIDE`)
    a step combines them on the tasks' rows as they lie, then the block is turned lanes-first (one
    contiguous row per lane: a quarter of it, for 32 lanes) so each short step combines two contiguous
    blocks of rows: the same pairs in the same order as the GPU's tree, at numpy's full speed even for
    750000 tasks of 32 lanes.  ``first``: the reducer's identity,
    combined into every lane first (``acc`` is then the threads' one element each: :class:`Unfolded`)."""
    lanes, lead = acc[0].shape[-1], acc[0].shape[:-1]
    flat = [np.ascontiguousarray(a).reshape(-1, lanes) for a in acc]
    out = [np.empty(f.shape[0], dtype=f.dtype) for f in flat]
    chunk = max(1, TREE_BLOCK // max(lanes, 1))
    start = None if first is None else tuple(np.asarray(i, dtype=f.dtype).reshape(()) for i, f in zip(first, flat))
    for s in range(0, flat[0].shape[0], chunk):
        rows = [f[s:s + chunk] for f in flat]   # [task, lane]: each task's lanes side by side
        if start is not None:                   # level 1: each thread's accumulator, from the identity
            rows = [np.asarray(m, dtype=r.dtype) for m, r in zip(combine(start, tuple(rows)), rows)]
        n = lanes
        while (n + 1) // 2 >= TREE_SIDE_BY_SIDE:  # the first halvings on the tasks' rows as they lie (the halves
            rows, n = _halve(rows, n, combine, 1)   # are runs of lanes: a quarter of the block is left to turn)
        rows = [np.ascontiguousarray(r[:, :n].T) for r in rows]     # lanes first: one contiguous row per lane
        while n > 1:
            rows, n = _halve(rows, n, combine, 0)
        for o, r in zip(out, rows):
            o[s:s + chunk] = r[0]
    return tuple(o.reshape(lead) for o in out), tree_steps(lanes)


def _halve(rows: list, n: int, combine, axis: int) -> tuple:
    """One step of the tree over the first ``n`` lanes of ``rows`` (lanes along ``axis``): lane ``j`` combines lane
    ``j + h``, ``h = ceil(n / 2)``; an odd count's middle lane passes as it is.  Returns the rows of ``h`` lanes
    and ``h``."""
    h = (n + 1) // 2
    def lanes(a, b):
        return (slice(None),) * axis + (slice(a, b),)
    merged = combine(tuple(r[lanes(0, n - h)] for r in rows), tuple(r[lanes(h, n)] for r in rows))
    merged = [np.asarray(m, dtype=r.dtype) for m, r in zip(merged, rows)]
    if n - h == h:
        return merged, h
    return [np.concatenate([m, r[lanes(n - h, h)]], axis=axis) for m, r in zip(merged, rows)], h


def shuffle(acc: tuple, combine, ident: tuple, first: tuple | None = None) -> tuple:
    """The shuffle scheme over the last axis (lanes) -> ``[task, part]`` per value; returns the step counts too.

    A butterfly's lane 0 folds what the tree folds over a power-of-two lane count, so a task of at
    most one warp is the tree; a task of ``W`` warps is the tree over each warp's 32 lanes, then the
    tree over the ``W`` warp totals padded with the identity to ``P`` (a power of two) -- exactly the
    lanes the second butterfly reads (lane ``l < W``: warp ``l``'s total, else the identity)."""
    lanes = acc[0].shape[-1]
    if lanes <= WARP:
        out, steps = tree(acc, combine, first)
        return out, (steps, 0)
    lead, w = acc[0].shape[:-1], lanes // WARP
    per_warp, steps = tree(tuple(a.reshape(lead + (w, WARP)) for a in acc), combine, first)
    p = 1 << (w - 1).bit_length()
    padded = tuple(np.concatenate([t, np.broadcast_to(np.asarray(i, dtype=t.dtype), lead + (p - w,))], axis=-1)
                   for t, i in zip(per_warp, ident))
    out, steps2 = tree(padded, combine)
    return out, (steps, steps2)


def combine_splits(partial: tuple, init: tuple, red, how: str) -> tuple:
    """Across split blocks: ``[task, part]`` -> ``[task]`` per value (see the module docstring).  A one-value
    reducer folds the parts with one ``ufunc.accumulate`` down the parts (each step's result is an output of
    the accumulate, so no step is reassociated: the part order of the loop it replaces, bit for bit, without a
    numpy call per part -- global norm's 256 split blocks of one task; in the parts' type: numpy's accumulate would
    widen a small integer)."""
    combine = red.combine
    S = partial[0].shape[1]
    col = lambda p: tuple(x[:, p] for x in partial)     # noqa: E731
    if S == 1:
        return combine(col(0), tuple(np.broadcast_to(i, partial[0].shape[:1]) for i in init))
    if red.ufunc is not None:
        (x,), (i,) = partial, init
        first = np.broadcast_to(np.asarray(i, dtype=x.dtype), (1, x.shape[0]))
        kept = {"dtype": x.dtype} if red.ufunc in (np.add, np.multiply) else {}
        if how == "atomic":                       # atomics land in part order, on the init the runtime filled
            return (red.ufunc.accumulate(np.concatenate([first, x.T]), axis=0, **kept)[-1],)
        return combine((red.ufunc.accumulate(x.T, axis=0, **kept)[-1],), (first[0],))
    if how == "atomic":
        out = tuple(np.broadcast_to(i, x.shape[:1]).astype(x.dtype) for i, x in zip(init, partial))
        for p in range(S):                        # atomics land in part order
            out = combine(out, col(p))
        return out
    out = col(0)
    for p in range(1, S):
        out = combine(out, col(p))
    return combine(out, tuple(np.broadcast_to(i, out[0].shape) for i in init))


class Folded(tuple):
    """A reduce's per-thread accumulators (``[task, part, lane]`` per reduced value): level 1 done, the
    stage's elements no longer needed (:func:`fold`)."""


class Unfolded(Folded):
    """A reduce's elements as ``[task, part, lane]`` per value where each thread holds one element (one inner
    iteration: the DIEN row sum's <750000,32> over 32 lanes): level 1 is then ``identity (+) element`` for each,
    which :func:`tree` combines block by block as it turns them lanes-first, in cache -- the same values, without a
    pass over the whole input into a new domain-sized array (a fifth of that reduce's simulation)."""


def unfolded(dense: tuple):
    """:class:`Unfolded` of a ``[task, part, inner, lane]`` layout of one inner iteration (its elements as they lie),
    or None (more iterations, a dealt row's view)."""
    if all(isinstance(d, np.ndarray) and d.ndim == 4 and d.shape[2] == 1 for d in dense):
        return Unfolded(d[:, :, 0, :] for d in dense)
    return None


class Reduced(Folded):
    """A reduce's per-task partials (``[task, part]`` per reduced value): levels 1 and 2 done at once, for a
    reducer that folds to the same bits in any order (:func:`reduce_rows_in_any_order`)."""


def reduce_rows_in_any_order(values: tuple, geom, m, ident: tuple, red):
    """Levels 1 and 2 of an ``any_order`` reduce (``max``, ``min``, ``and``, ``or``) in one ``ufunc.reduce``
    over each task's row -> :class:`Reduced` (``[task, 1]``), or None where it does not apply (another reducer,
    a task split over blocks, a geometry whose tasks are not whole rows of its domain).

    Which thread folds which element, and in which order, changes no bit of such a fold (the reducers' module
    says so, signed zeros aside), so the per-thread layout and the tree or butterflies over its lanes -- a
    scatter of the whole input into ``[task, part, inner, lane]``, a fold per trip, a step per lane halving --
    give what numpy's own reduce of the row gives, at several times its cost (a third of the max of softmax
    <64,30000>).  What the lanes' combine *costs* does not depend on the values: :func:`reduce_steps` counts
    it from the lane count, as the tree and the butterflies would.  Holes hold the identity, and a task no
    element reaches keeps it; the reducer's init is folded in later, as for every scheme."""
    if not red.any_order or m.splits != 1 or not geom.separable or len(values) != 1:
        return None
    p0, p1 = geom.parts
    init = np.asarray(ident[0]).item()
    v = np.broadcast_to(values[0], geom.shape)
    kept = sorted(p0)                               # ufunc.reduce keeps the other dims in their order
    rows = red.ufunc.reduce(v, axis=tuple(p1), initial=init) if p1 else v
    rows = np.transpose(rows, [kept.index(k) for k in p0]).reshape(-1)
    if rows.size == m.rows and geom.tasks_in_order():
        return Reduced((np.asarray(rows, dtype=v.dtype).reshape(m.rows, 1),))
    out = np.full(m.rows, init, dtype=v.dtype)
    out[geom.layout_tasks()] = rows
    return Reduced((out.reshape(m.rows, 1),))


def reduce_steps(lanes: int, scheme) -> object:
    """The step count(s) :func:`tree` or :func:`shuffle` returns for a task of ``lanes`` lanes, without their
    values: the tree's halvings, or each butterfly's (one warp's lanes, then the warp totals padded to a power
    of two)."""
    if scheme is not ReduceScheme.SHUFFLE:
        return tree_steps(lanes)
    if lanes <= WARP:
        return tree_steps(lanes), 0
    return tree_steps(WARP), tree_steps(lanes // WARP)     # (padding to a power of two adds no step)


def fold(node, values, geom) -> Folded:
    """Level 1 of ``node``: every thread folds its elements.  The executor folds each reduce input as soon as
    the element loop has computed it, so a stage of several reduces (inductor's cross-entropy: the sum of exps
    and the picked logit) never holds more than one domain-sized input at once; the accumulators are a
    ``lanes / elements`` fraction of it.  No counter moves here (the executor counts a reduce in
    ``run_reduce``, which takes the accumulators in place of the values)."""
    m = geom.mapping
    red = reducer(node)
    n = len(node.operands) // 2
    values = values if isinstance(values, tuple) else (values,)
    dtypes = [numpy_dtype(x.dtype) for x in node.operands[:n]]
    values = tuple(np.asarray(v).astype(d, copy=False) for v, d in zip(values, dtypes))
    with np.errstate(all="ignore"):
        rows = reduce_rows_in_any_order(values, geom, m, identity(node), red)
        if rows is not None:
            return rows
        acc = per_thread_in_blocks(values, geom, m, identity(node), red)
        return acc if isinstance(acc, Folded) else Folded(acc)


def run_reduce(node, values, init, geom, scheme=ReduceScheme.TREE) -> dict:
    """All three levels for one reduce node; returns its result (the ``result`` component) and the work's shape.

    ``values``: the reduced input(s) at the stage's elements (a tuple for argmax/argmin), or their
    :func:`fold` (level 1 already done); ``init``: the init value(s); ``scheme``: the stage's
    ``reduce_scheme`` (``steps`` is then the tree's step count, or the two butterflies' step counts)."""
    m = geom.mapping
    red = reducer(node)
    n = len(node.operands) // 2
    init = init if isinstance(init, tuple) else (init,)
    dtypes = [numpy_dtype(x.dtype) for x in node.operands[:n]]
    ident = identity(node)
    acc = values if isinstance(values, Folded) else fold(node, values, geom)
    with np.errstate(all="ignore"):
        first = ident if isinstance(acc, Unfolded) else None       # level 1 still to do, in the tree
        if isinstance(acc, Reduced):
            partial, steps = acc, reduce_steps(geom.layout_lanes, scheme)
        elif scheme is ReduceScheme.SHUFFLE:
            partial, steps = shuffle(acc, red.combine, ident, first)
        else:
            partial, steps = tree(acc, red.combine, first)
        init = tuple(np.asarray(i, dtype=d) for i, d in zip(init, dtypes))
        result = combine_splits(partial, init, red, m.combine)
    k = node.attrs.get("result", 0)
    result = cast(np.asarray(result[k], dtype=dtypes[k]), node.dtype)
    partial = cast(np.asarray(partial[k], dtype=dtypes[k]), node.dtype)
    return {"result": result.reshape(node.shape), "partial": partial, "lanes": geom.layout_lanes, "steps": steps}
