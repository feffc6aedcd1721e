"""How a reduction runs on the SIMT machine: per thread, then per task, then per split.

Three levels, each in the order real code runs them, so float32 results drift
from numpy's pairwise sum exactly as a GPU's would:

1. **per thread**: every thread starts from the reducer's identity and folds in
   its elements in loop-iteration order (``inner`` trips of its task);
2. **per task, across threads**: the task's ``lanes`` partials go through a
   shared-memory tree -- lane ``j`` combines lane ``j + h`` while ``h`` halves
   (``for (s = n/2; s > 0; s >>= 1) if (tid < s) buf[tid] += buf[tid + s]``);
3. **per task, across split blocks** (task splitting): ``atomic`` -- each split
   block's first thread atomically folds its partial into a result buffer the
   runtime filled with the reduce's init value; ``grid_barrier`` -- partials go
   to a global scratch, a grid barrier, and every split block folds all of them.

Unsplit tasks fold the init value in at the end (``op(result, init)``, like
XLA's reduce semantics and the numpy reference).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import cast, numpy_dtype
from ..ops import REDUCERS


def identity(reducer: str, dtype) -> np.ndarray:
    """The value a thread's accumulator starts from (neutral for the reducer)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.array(reducer == "and")
    if reducer == "sum":
        return np.zeros((), dt)
    if reducer == "prod":
        return np.ones((), dt)
    if dt.kind == "f":
        return np.array(-np.inf if reducer == "max" else np.inf, dt)
    info = np.iinfo(dt)
    return np.array(info.min if reducer == "max" else info.max, dt)


def ufunc_of(node):
    return REDUCERS[node.attrs["reducer"]][0]


def lay_out(values: np.ndarray, layout: tuple, geom, m, ident) -> np.ndarray:
    """Scatter the reduce input into ``[task, part, inner, lane]`` (holes hold the identity)."""
    task, part, inner, lane, lanes = layout
    T, S, I = m.rows, m.splits, m.inner_iterations
    dense = np.full((T, S * I * lanes), ident, dtype=values.dtype)
    pos = (part * I + inner) * lanes + lane
    if geom.separable:
        p0, p1 = geom.parts
        v = np.broadcast_to(values, geom.shape)
        v = np.transpose(v, list(p0) + list(p1)).reshape(len(task), len(pos))
        if np.array_equal(task, np.arange(T)) and np.array_equal(pos, np.arange(pos.size)):
            dense[:, :pos.size] = v
        elif np.array_equal(pos, np.arange(pos.size)):
            dense[task, :pos.size] = v
        else:
            dense[np.ix_(task, pos)] = v
    else:
        dense.reshape(-1)[task * (S * I * lanes) + pos] = geom.full(values)
    return dense.reshape(T, S, I, lanes)


def per_thread(dense: np.ndarray, ufunc, ident) -> np.ndarray:
    """Each thread folds its elements in iteration order -> ``[task, part, lane]``."""
    acc = np.broadcast_to(ident, dense[:, :, 0, :].shape).astype(dense.dtype)
    for i in range(dense.shape[2]):
        acc = ufunc(acc, dense[:, :, i, :])
    return np.asarray(acc, dtype=dense.dtype)


def tree(acc: np.ndarray, ufunc) -> np.ndarray:
    """Shared-memory tree over the last axis (lanes) -> ``[task, part]``; returns the step count too."""
    acc = np.array(acc, copy=True)
    n, steps = acc.shape[-1], 0
    while n > 1:
        h = (n + 1) // 2
        acc[..., :n - h] = ufunc(acc[..., :n - h], acc[..., h:n])
        n, steps = h, steps + 1
    return acc[..., 0], steps


def combine(partial: np.ndarray, init, ufunc, combine: str) -> np.ndarray:
    """Across split blocks: ``[task, part]`` -> ``[task]`` (see the module docstring)."""
    S = partial.shape[1]
    if S == 1:
        return ufunc(partial[:, 0], init)
    if combine == "atomic":
        out = np.broadcast_to(init, partial.shape[:1]).astype(partial.dtype)
        for p in range(S):                        # atomics land in part order
            out = ufunc(out, partial[:, p])
        return out
    out = partial[:, 0]
    for p in range(1, S):
        out = ufunc(out, partial[:, p])
    return ufunc(out, init)


def run_reduce(node, values, init, geom) -> dict:
    """All three levels for one reduce node; returns results and the shape of the work."""
    m = geom.mapping
    dtype = numpy_dtype(node.dtype)
    values = np.asarray(values)
    if values.dtype != dtype:
        values = values.astype(dtype)
    ufunc = ufunc_of(node)
    ident = identity(node.attrs["reducer"], dtype)
    layout = geom.reduce_layout()
    dense = lay_out(values, layout, geom, m, ident)
    with np.errstate(all="ignore"):
        acc = per_thread(dense, ufunc, ident)
        partial, steps = tree(acc, ufunc)
        init = np.asarray(init, dtype=dtype)
        result = combine(partial, init, ufunc, m.combine)
    result = cast(np.asarray(result, dtype=dtype), node.dtype)
    partial = cast(np.asarray(partial, dtype=dtype), node.dtype)
    return {"result": result.reshape(node.shape), "partial": partial, "lanes": layout[4], "steps": steps}
