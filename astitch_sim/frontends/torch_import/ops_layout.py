"""ATen views and data movement -> Graph layout ops; tensor creation -> constants and iotas.

PyTorch's views (``view``, ``expand``, ``permute``, ``slice``, ``squeeze``...) share storage with their input;
here every one is a layout op (reshape, broadcast, transpose, slice), which the planner reads as an index
remap with no data moved.  Shapes come from torch.export's record of the node (``b.out_shape``), so ``-1``
and Python's slice clamping need no reimplementation.
"""
from __future__ import annotations

from ...errors import AStitchError
from ...ir.graph import Node


def _view(b, x, *_):
    return b.reshape(x, b.out_shape) if x.shape != b.out_shape else x


def _expand(b, x, *_):
    return b.broadcast_to(x, b.out_shape)


def _permute(b, x, dims):
    perm = [b.dim(d, x.rank) for d in dims]
    return x if perm == list(range(x.rank)) else b.g.transpose(x, perm, name=b.fresh("transpose"))


def _transpose(b, x, d0, d1):
    perm = list(range(x.rank))
    d0, d1 = b.dim(d0, x.rank), b.dim(d1, x.rank)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permute(b, x, perm)


def _t(b, x):
    return _permute(b, x, list(range(x.rank))[::-1])


def _slice_dim(b, x, dim, start, end, step=1):
    dim = b.dim(dim, x.rank)
    start, end, step = slice(start, end, step).indices(x.shape[dim])
    end = max(end, start)
    if (start, end, step) == (0, x.shape[dim], 1):
        return x
    starts, limits, strides = [0] * x.rank, list(x.shape), [1] * x.rank
    starts[dim], limits[dim], strides[dim] = start, end, step
    return b.g.slice(x, starts, limits, strides, name=b.fresh("slice"))


def _slice(b, x, dim=0, start=None, end=None, step=1):
    return _slice_dim(b, x, dim, start, end, step)


def _select(b, x, dim, index):
    dim = b.dim(dim, x.rank)
    index = index % x.shape[dim] if -x.shape[dim] <= index < x.shape[dim] else index
    return b.reshape(_slice_dim(b, x, dim, index, index + 1), b.out_shape)


def _cat(b, xs, dim=0):
    xs = [x for x in xs if not (x.rank == 1 and x.shape[0] == 0)] or xs[:1]    # torch skips legacy empty (0,)
    dtype = b.promoted(*xs)
    xs = [b.cast(x, dtype) for x in xs]
    if len(xs) == 1:
        return xs[0]
    return b.g.concatenate(xs, b.dim(dim, xs[0].rank), name=b.fresh("concatenate"))


def _split(b, x, sizes, dim=0):
    dim = b.dim(dim, x.rank)
    if isinstance(sizes, int):                      # split.Tensor: equal chunks of ``sizes``, the last shorter
        sizes = [min(sizes, x.shape[dim] - s) for s in range(0, x.shape[dim], max(sizes, 1))]
    out, start = [], 0
    for n in sizes:
        out.append(_slice_dim(b, x, dim, start, start + n))
        start += n
    return tuple(out)


def _unbind(b, x, dim=0):
    dim = b.dim(dim, x.rank)
    shape = x.shape[:dim] + x.shape[dim + 1:]
    return tuple(b.reshape(_slice_dim(b, x, dim, i, i + 1), shape) for i in range(x.shape[dim]))


def _repeat(b, x, repeats):
    """``repeat``: tile ``x``; each dim ``n`` repeated ``r`` times is a broadcast to ``(r, n)``, then a reshape."""
    lead = len(repeats) - x.rank
    x = b.reshape(x, (1,) * lead + x.shape)
    pairs = [(r, n) for r, n in zip(repeats, x.shape)]
    tiled = b.g.broadcast(x, [m for pair in pairs for m in pair], [2 * d + 1 for d in range(x.rank)],
                          name=b.fresh("broadcast"))
    return b.reshape(tiled, b.out_shape)


def _flip(b, x, dims):
    return b.add("reverse", [x], dimensions=tuple(b.dim(d, x.rank) for d in dims))


def _identity(b, x, *_, **__):
    return x


def _to_copy(b, x, *_, **__):
    return b.cast(x, b.out_dtype)


def _pad(b, x, pad, value=0.0):
    """``constant_pad_nd``: ``pad`` lists (low, high) pairs from the last dim backwards."""
    if len(pad) % 2 or len(pad) // 2 > x.rank:
        raise AStitchError(f"{b.here}: pad {pad} must hold a (low, high) pair per padded dim")
    low, high = [0] * x.rank, [0] * x.rank
    for i in range(len(pad) // 2):
        low[x.rank - 1 - i], high[x.rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    for d in range(x.rank):                           # negative padding crops: a slice
        if low[d] < 0 or high[d] < 0:
            x = _slice_dim(b, x, d, max(-low[d], 0), x.shape[d] - max(-high[d], 0))
            low[d], high[d] = max(low[d], 0), max(high[d], 0)
    if not any(low) and not any(high):
        return x
    return b.add("pad", [x, b.constant(value, x.dtype)], low=tuple(low), high=tuple(high),
                 interior=(0,) * x.rank)


def _full(b, size, value, *_, **__):
    c = b.constant(value, b.out_dtype)
    return b.broadcast_to(c, b.out_shape) if b.out_shape else c


def _full_like(b, x, value, *_, **__):
    return _full(b, None, value)


def _filled(value):
    return lambda b, *_, **__: _full(b, None, value)


def _scalar_tensor(b, value, *_, **__):
    return b.constant(value, b.out_dtype)


def _arange(b, *args, **kwargs):
    """``arange(start, end, step)``: an iota scaled and shifted, in the recorded type."""
    numbers = [a for a in args if isinstance(a, (int, float))]
    start, step = (numbers[0], numbers[2] if len(numbers) > 2 else 1) if len(numbers) >= 2 else (0, 1)
    n, dtype = b.out_shape[0], b.out_dtype
    idx = b.g.iota((n,), 0, dtype if dtype != "pred" else "s32", name=b.fresh("iota"))
    if step != 1:
        idx = b.elementwise("multiply", idx, step, dtype=dtype)
    if start != 0:
        idx = b.elementwise("add", idx, start, dtype=dtype)
    return idx


def _lifted(b, x):
    if not isinstance(x, Node):
        raise AStitchError(f"{b.here}: expected a tensor")
    return x


ROWS = {
    "view.default": _view, "_unsafe_view.default": _view, "reshape.default": _view,
    "squeeze.dims": _view, "squeeze.dim": _view, "squeeze.default": _view, "unsqueeze.default": _view,
    "flatten.using_ints": _view,
    "expand.default": _expand, "permute.default": _permute, "transpose.int": _transpose, "t.default": _t,
    "slice.Tensor": _slice, "select.int": _select, "cat.default": _cat,
    "split_with_sizes.default": _split, "split.Tensor": _split, "unbind.int": _unbind,
    "flip.default": _flip, "repeat.default": _repeat, "constant_pad_nd.default": _pad,
    "clone.default": _identity, "alias.default": _identity, "detach.default": _identity,
    "lift_fresh_copy.default": _lifted, "contiguous.default": _identity,
    "_to_copy.default": _to_copy, "to.dtype": _to_copy,
    "full.default": _full, "full_like.default": _full_like, "scalar_tensor.default": _scalar_tensor,
    "zeros.default": _filled(0), "ones.default": _filled(1), "zeros_like.default": _filled(0),
    "ones_like.default": _filled(1), "new_zeros.default": _filled(0), "new_ones.default": _filled(1),
    "new_full.default": lambda b, x, size, value, *_, **__: _full(b, size, value),
    "arange.start_step": _arange, "arange.default": _arange, "arange.start": _arange,
}
