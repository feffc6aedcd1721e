"""ATen indexing -> the Graph's indexed ops (gather, stitched) and scatter (a library kernel).

* ``gather(x, dim, index)`` is ``take_along_axis`` once ``x`` is cut to ``index``'s extent off ``dim``
  (PyTorch reads only ``x[i, ...]`` for ``i < index.shape[d]``);
* ``x[idx]`` (``index.Tensor``), ``index_select`` and ``embedding`` are XLA gathers; negative indices wrap
  (``where(i < 0, i + n, i)``, as PyTorch does), then the gather clamps as XLA's does (PyTorch would raise
  on an index out of range: a model that does that is wrong either way);
* ``scatter``/``scatter_add``/``scatter_reduce``/``index_put`` are XLA scatters whose index vectors name a
  full position (the other coordinates are iotas), combining with ``assign``, ``sum``, ``prod``, ``max``
  or ``min``.  With duplicate indices, ``scatter`` (assign) keeps the last update; PyTorch leaves the
  winner unspecified.
"""
from __future__ import annotations

from ...errors import AStitchError
from ...ir.graph import Node

_COMBINERS = {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min"}


def _wrapped(b, idx: Node, n: int) -> Node:
    """Indices as int64 with negatives counted from the end."""
    if idx.dtype == "pred":
        raise AStitchError(f"{b.here}: indexing with a boolean mask gives a data-dependent shape, which a static "
                           "graph cannot hold; use torch.where(mask, x, other) (or masked_fill) instead")
    idx = b.cast(idx, "s64")
    return b.select(b.compare(idx, 0, "LT"), b.elementwise("add", idx, n, dtype="s64"), idx)


def _cut(b, x: Node, dim: int, shape) -> Node:
    """``x`` cut to ``shape`` in every dim but ``dim``."""
    if all(n == m for d, (n, m) in enumerate(zip(x.shape, shape)) if d != dim):
        return x
    limits = [x.shape[d] if d == dim else shape[d] for d in range(x.rank)]
    return b.g.slice(x, [0] * x.rank, limits, name=b.fresh("slice"))


def _gather(b, x, dim, index, sparse_grad=False):
    dim = b.dim(dim, x.rank)
    if x.rank == 0:
        return b.broadcast_to(x, index.shape)
    return b.g.take_along_axis(_cut(b, x, dim, index.shape), b.cast(index, "s64"), dim, name=b.fresh("gather"))


def _index_select(b, x, dim, index):
    dim = b.dim(dim, x.rank)
    return b.g.take(x, _wrapped(b, index, x.shape[dim]), dim, name=b.fresh("gather"))


def _embedding(b, weight, indices, *_):
    return b.g.take(weight, b.cast(indices, "s64"), 0, name=b.fresh("gather"))


def _index_vectors(b, x, indices):
    """The indexed dims of ``x[indices]``, their index vectors stacked on a last dim, and where the result's
    indexed block goes (where the first index was, if the indexed dims are adjacent; else in front)."""
    dims = [d for d, i in enumerate(indices) if i is not None]
    if not dims:
        raise AStitchError(f"{b.here}: x[...] without an index tensor")
    wrapped = [_wrapped(b, indices[d], x.shape[d]) for d in dims]
    from .context import broadcast_shape
    shape = broadcast_shape(*(i.shape for i in wrapped))
    parts = [b.reshape(b.broadcast_to(i, shape), shape + (1,)) for i in wrapped]
    vectors = parts[0] if len(parts) == 1 else b.g.concatenate(parts, len(shape), name=b.fresh("concatenate"))
    front = dims[0] if dims == list(range(dims[0], dims[0] + len(dims))) else 0
    return dims, vectors, shape, front


def _index(b, x, indices):
    dims, vectors, shape, front = _index_vectors(b, x, list(indices) + [None] * (x.rank - len(indices)))
    rest = [d for d in range(x.rank) if d not in dims]
    offset = list(range(front)) + list(range(front + len(shape), front + len(shape) + len(rest) - front))
    return b.g.gather(x, vectors, offset_dims=offset, collapsed_slice_dims=dims, start_index_map=dims,
                      slice_sizes=[1 if d in dims else n for d, n in enumerate(x.shape)],
                      index_vector_dim=len(shape), name=b.fresh("gather"))


def _index_put(b, x, indices, values, accumulate=False):
    dims, vectors, shape, front = _index_vectors(b, x, list(indices) + [None] * (x.rank - len(indices)))
    rest = [n for d, n in enumerate(x.shape) if d not in dims]
    upd_shape = tuple(rest[:front]) + shape + tuple(rest[front:])
    updates = b.broadcast_to(b.cast(values, x.dtype), upd_shape)
    window = list(range(front)) + list(range(front + len(shape), len(upd_shape)))
    return b.g.scatter(x, vectors, updates, update_window_dims=window, inserted_window_dims=dims,
                       scatter_dims_to_operand_dims=dims, index_vector_dim=len(shape),
                       combiner="sum" if accumulate else "assign", name=b.fresh("scatter"))


def _scatter_along(b, x, dim, index, src, combiner):
    """``out[..., index[i], ...] = src[i]`` along ``dim``: one full index vector per element of ``index``."""
    dim = b.dim(dim, x.rank)
    idx = b.cast(index, "s64")
    shape = idx.shape
    if isinstance(src, Node):
        updates = b.cast(src, x.dtype)            # PyTorch reads src[i] only where index has an i
        if updates.shape != shape:
            updates = b.g.slice(updates, [0] * x.rank, list(shape), name=b.fresh("slice"))
    else:
        updates = b.operand(src, x.dtype, shape)
    coords = [idx if d == dim else b.g.iota(shape, d, "s64", name=b.fresh("iota")) for d in range(x.rank)]
    vectors = b.g.concatenate([b.reshape(c, shape + (1,)) for c in coords], x.rank, name=b.fresh("concatenate"))
    return b.g.scatter(x, vectors, updates, update_window_dims=(), inserted_window_dims=tuple(range(x.rank)),
                       scatter_dims_to_operand_dims=tuple(range(x.rank)), index_vector_dim=x.rank,
                       combiner=combiner, name=b.fresh("scatter"))


def _scatter_reduce(b, x, dim, index, src, reduce, include_self=True):
    if reduce not in _COMBINERS or not include_self:
        raise AStitchError(f"{b.here}: scatter_reduce(reduce={reduce!r}, include_self={include_self}) is not "
                           f"supported; use reduce= one of {', '.join(_COMBINERS)} with include_self=True")
    return _scatter_along(b, x, dim, index, src, _COMBINERS[reduce])


ROWS = {
    "gather.default": _gather, "index_select.default": _index_select, "embedding.default": _embedding,
    "index.Tensor": _index, "index_put.default": _index_put,
    "scatter.src": lambda b, x, dim, index, src: _scatter_along(b, x, dim, index, src, "assign"),
    "scatter.value": lambda b, x, dim, index, value: _scatter_along(b, x, dim, index, value, "assign"),
    "scatter_add.default": lambda b, x, dim, index, src: _scatter_along(b, x, dim, index, src, "sum"),
    "scatter_reduce.two": _scatter_reduce,
}
