"""``reduce-window``: a reduce over a sliding window -- in real models, ``jnp.cumsum``.

JAX lowers ``jnp.cumsum(x, axis)`` on CPU/GPU to a reduce-window whose window
covers the whole axis, padded ``n-1`` on the low side: output ``i`` folds
``x[0..i]``, a prefix scan.  Every output depends on a different, growing set of
inputs, so AStitch cannot stitch it (a scan is not a reduce: no thread mapping
makes it one pass of independent tasks); it runs as its own library kernel (a
scan, like CUB's), between stitched kernels.

XLA semantics followed here: output element ``o`` folds, in row-major order of
the window positions ``w``, the input elements at ``o * stride + w - pad_low``
that lie inside the input (padding positions are skipped), starting from the
init value: ``acc = init; acc = f(acc, x[...])`` -- so a float cumsum is
``((init + x0) + x1) + ...``, exactly.  Window and base dilations other than 1
are not supported (an AStitchError says so).
"""
from __future__ import annotations

import itertools

import numpy as np

from .reducers import REDUCERS

WINDOW_ATTRS = ("window_dimensions", "window_strides", "padding_low", "padding_high")


def _req(cond, name, msg):
    if not cond:
        from ..errors import AStitchError
        raise AStitchError(f"{name}: {msg}")


def infer_reduce_window(operands, attrs, name, ints):
    x, init = operands
    R = x.rank
    _req(init.rank == 0, name, "the init value of a reduce-window must be a scalar")
    _req(init.dtype == x.dtype, name, f"reduce-window of {x.dtype} with a {init.dtype} init value")
    red = attrs.get("reducer")
    _req(red in REDUCERS and REDUCERS[red].values == 1, name,
         f"reducer {red!r} must be one of {', '.join(r for r in REDUCERS if REDUCERS[r].values == 1)}")
    _req(red not in ("and", "or") or x.dtype == "pred", name, f"reducer {red!r} needs pred values")
    size = ints(attrs.get("window_dimensions", ()), name, "window size")
    stride = ints(attrs.get("window_strides") or (1,) * R, name, "window strides")
    lo = ints(attrs.get("padding_low") or (0,) * R, name, "low padding")
    hi = ints(attrs.get("padding_high") or (0,) * R, name, "high padding")
    _req(len(size) == len(stride) == len(lo) == len(hi) == R, name,
         f"the window needs a size, stride and padding for each of the {R} dims")
    _req(all(s >= 1 for s in size) and all(s >= 1 for s in stride), name,
         f"window sizes {size} and strides {stride} must be >= 1")
    _req(all(p >= 0 for p in lo + hi), name, f"negative window padding {lo}/{hi} is not supported")
    shape = []
    for n, w, s, l, h in zip(x.shape, size, stride, lo, hi):
        padded = n + l + h
        shape.append((padded - w) // s + 1 if padded >= w else 0)
    attrs.update(window_dimensions=size, window_strides=stride, padding_low=lo, padding_high=hi)
    return tuple(shape), x.dtype


def scan_axis(node):
    """The axis of a forward prefix scan (cumsum-shaped window), or None."""
    a, x = node.attrs, node.operands[0]
    big = [d for d, w in enumerate(a["window_dimensions"]) if w > 1]
    if len(big) != 1:
        return None
    d = big[0]
    n = x.shape[d]
    ok = (a["window_dimensions"][d] == n and a["padding_low"][d] == n - 1 and a["padding_high"][d] == 0
          and all(s == 1 for s in a["window_strides"]) and not any(a["padding_low"][i] or a["padding_high"][i]
                                                                   for i in range(x.rank) if i != d))
    return d if ok else None


def window_positions(node):
    """Window offsets in row-major order (the order XLA folds them)."""
    return itertools.product(*(range(w) for w in node.attrs["window_dimensions"]))


def np_reduce_window(node, x, init):
    red = REDUCERS[node.attrs["reducer"]]
    combine = red.combine
    with np.errstate(all="ignore"):
        d = scan_axis(node)
        if d is not None and x.dtype != np.bool_:
            ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[node.attrs["reducer"]]
            first = np.broadcast_to(np.asarray(init, x.dtype), x.shape[:d] + (1,) + x.shape[d + 1:])
            return ufunc.accumulate(np.concatenate([first, x], axis=d), axis=d, dtype=x.dtype).take(
                range(1, x.shape[d] + 1), axis=d)
        a = node.attrs
        out_idx = tuple(np.arange(n, dtype=np.int64).reshape([n if i == j else 1 for i in range(x.ndim)])
                        for j, n in enumerate(node.shape))
        acc = np.full(node.shape, init, dtype=x.dtype)
        for w in window_positions(node):
            src = [o * s + wi - lo for o, s, wi, lo in zip(out_idx, a["window_strides"], w, a["padding_low"])]
            ok = np.ones(node.shape, bool)
            for s, n in zip(src, x.shape):
                ok &= (s >= 0) & (s < n)
            if not ok.any():
                continue
            vals = x[tuple(np.clip(s, 0, max(n - 1, 0)) for s, n in zip(src, x.shape))]
            acc = np.where(ok, combine((acc,), (np.asarray(vals, x.dtype),))[0], acc).astype(x.dtype, copy=False)
        return acc
