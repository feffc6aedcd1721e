"""Ops that read at indices known only at run time: ``gather``, ``dynamic-slice``, ``dynamic-update-slice``.

AStitch stitches them as *indexed loads*: an output element is one operand
element, like a slice, except that where it sits in the operand depends on a
value (a token id, a label, a cache position) read at run time.  So they fuse
like layout ops; what the compiler cannot do is prove at compile time which
block reads which element, so a value such an op reads across stages always
goes through global memory (the block-locality check answers "no").

This module holds their XLA semantics once, as index arithmetic written against
three tiny callables -- ``fetch(operand, index)`` (the value of an index operand),
``add(a, b)`` and ``clamp(v, lo, hi)`` -- so that the numpy reference (arrays),
the SIMT model (arrays, with every load counted) and the Numba code generator
(source expressions) all run the *same* function and cannot disagree.

XLA semantics, as followed here:

* **gather** (``operand``, ``start_indices``): for an output index, the output's
  *batch* dims (those not in ``offset_dims``) pick an index vector from
  ``start_indices`` (the vector lies along ``index_vector_dim``; if that equals the
  rank of ``start_indices`` each vector has one component); component ``k`` is the
  start along operand dim ``start_index_map[k]``, **clamped** to
  ``[0, operand_dim - slice_size]`` so the whole slice is in bounds.  Operand dims in
  ``operand_batching_dims`` take the matching batch index (paired with
  ``start_indices_batching_dims``).  The output's ``offset_dims`` are offsets into the
  slice along the operand dims that are neither collapsed (``collapsed_slice_dims``,
  slice size 1) nor batching dims, in order.
* **dynamic-slice** (``operand``, one scalar start per dim): the slice of
  ``slice_sizes`` at the starts, each clamped to ``[0, dim - size]``.
* **dynamic-update-slice** (``operand``, ``update``, one scalar start per dim): the
  operand with ``update`` written at the starts, each clamped to ``[0, dim - update_dim]``.
"""
from __future__ import annotations

import numpy as np

from .dtypes import is_float

GATHER_ATTRS = ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "slice_sizes",
                "operand_batching_dims", "start_indices_batching_dims")


def _req(cond, name, msg):
    if not cond:
        from ..errors import AStitchError
        raise AStitchError(f"{name}: {msg}")


def _fmt(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def _index_dtype_ok(dtype) -> bool:
    return dtype != "pred" and not is_float(dtype)


# -- gather -------------------------------------------------------------------------

def infer_gather(operands, attrs, name, ints, dims_of):
    """Shape rule of gather (XLA's ShapeInference::InferGatherShape, the checks that matter here)."""
    x, idx = operands
    R, S = x.rank, idx.rank
    _req(_index_dtype_ok(idx.dtype), name, f"gather start indices must be integers, got {idx.dtype}: convert them "
         "to s32 first")
    ivd = attrs.get("index_vector_dim", S)
    _req(isinstance(ivd, (int, np.integer)) and not isinstance(ivd, bool) and 0 <= ivd <= S, name,
         f"index_vector_dim={ivd!r} must be an int in 0..{S} (the rank of the start indices)")
    slice_sizes = ints(attrs.get("slice_sizes", ()), name, "slice_sizes")
    _req(len(slice_sizes) == R, name, f"slice_sizes {slice_sizes} needs one size per operand dim ({R})")
    for d, (s, n) in enumerate(zip(slice_sizes, x.shape)):
        _req(0 <= s <= n, name, f"slice_sizes[{d}]={s} is outside 0..{n} (operand {_fmt(x.shape)})")
    collapsed = dims_of(attrs.get("collapsed_slice_dims", ()), name, R, "collapsed_slice_dims")
    start_map = dims_of(attrs.get("start_index_map", ()), name, R, "start_index_map")
    obatch = dims_of(attrs.get("operand_batching_dims", ()), name, R, "operand_batching_dims")
    ibatch = dims_of(attrs.get("start_indices_batching_dims", ()), name, S, "start_indices_batching_dims")
    components = idx.shape[ivd] if ivd < S else 1
    _req(len(start_map) == components, name, f"start_index_map {start_map} must name one operand dim per "
         f"component of the index vector ({components})")
    for d in collapsed + obatch:
        _req(slice_sizes[d] == 1, name, f"operand dim {d} is collapsed or a batching dim, so its slice size must be 1, "
             f"got {slice_sizes[d]}")
    _req(not set(collapsed) & set(obatch), name, "a dim cannot be both collapsed and a batching dim")
    _req(not set(start_map) & set(obatch), name, "start_index_map may not name a batching dim")
    _req(len(obatch) == len(ibatch) and ivd not in ibatch, name,
         f"operand_batching_dims {obatch} and start_indices_batching_dims {ibatch} must pair up (and not use "
         "the index vector dim)")
    for od, sd in zip(obatch, ibatch):
        _req(x.shape[od] == idx.shape[sd], name, f"batching dims differ in size: operand dim {od} "
             f"({x.shape[od]}) vs start indices dim {sd} ({idx.shape[sd]})")
    window = [d for d in range(R) if d not in collapsed and d not in obatch]
    batch_sizes = [idx.shape[d] for d in range(S) if d != ivd]
    out_rank = len(window) + len(batch_sizes)
    offset_dims = dims_of(attrs.get("offset_dims", ()), name, out_rank, "offset_dims")
    _req(list(offset_dims) == sorted(offset_dims), name, f"offset_dims {offset_dims} must be sorted")
    _req(len(offset_dims) == len(window), name, f"offset_dims {offset_dims} must give one output dim per operand "
         f"dim that is neither collapsed nor a batching dim ({window})")
    shape, wi, bi = [], iter(window), iter(batch_sizes)
    for d in range(out_rank):
        shape.append(slice_sizes[next(wi)] if d in offset_dims else next(bi))
    attrs.update(offset_dims=offset_dims, collapsed_slice_dims=collapsed, start_index_map=start_map,
                 index_vector_dim=int(ivd), slice_sizes=slice_sizes, operand_batching_dims=obatch,
                 start_indices_batching_dims=ibatch)
    return tuple(shape), x.dtype


def gather_index(node, out, fetch, add, clamp):
    """Operand index read by ``node`` (a gather) at output index ``out``.

    ``fetch(index)`` is the value of the start indices at ``index`` (a tuple).
    """
    a = node.attrs
    x, idx = node.operands
    ivd, S = a["index_vector_dim"], idx.rank
    offset = set(a["offset_dims"])
    batch_out = [out[d] for d in range(len(out)) if d not in offset]
    g_of = dict(zip([d for d in range(S) if d != ivd], batch_out))
    start = {}
    for k, d in enumerate(a["start_index_map"]):
        where = tuple(k if s == ivd else g_of[s] for s in range(S))
        start[d] = clamp(fetch(where), 0, x.shape[d] - a["slice_sizes"][d])
    for od, sd in zip(a["operand_batching_dims"], a["start_indices_batching_dims"]):
        start[od] = g_of[sd]
    fixed = set(a["collapsed_slice_dims"]) | set(a["operand_batching_dims"])
    offs = iter(out[d] for d in a["offset_dims"])
    return tuple(start.get(d, 0) if d in fixed else add(start.get(d, 0), next(offs)) for d in range(x.rank))


# -- dynamic-slice / dynamic-update-slice ------------------------------------------------

def infer_dynamic_slice(operands, attrs, name, ints):
    x, starts = operands[0], operands[1:]
    _check_starts(x, starts, name, "dynamic-slice")
    sizes = ints(attrs.get("slice_sizes", ()), name, "slice_sizes")
    _req(len(sizes) == x.rank, name, f"slice_sizes {sizes} needs one size per operand dim ({x.rank})")
    for d, (s, n) in enumerate(zip(sizes, x.shape)):
        _req(0 <= s <= n, name, f"slice_sizes[{d}]={s} is outside 0..{n} (operand {_fmt(x.shape)})")
    attrs["slice_sizes"] = sizes
    return sizes, x.dtype


def infer_dynamic_update_slice(operands, attrs, name):
    x, upd, starts = operands[0], operands[1], operands[2:]
    _check_starts(x, starts, name, "dynamic-update-slice")
    _req(upd.rank == x.rank and all(u <= n for u, n in zip(upd.shape, x.shape)), name,
         f"the update {_fmt(upd.shape)} must have the operand's rank and fit inside it {_fmt(x.shape)}")
    _req(upd.dtype == x.dtype, name, f"update dtype {upd.dtype} differs from the operand's {x.dtype}: convert it")
    return x.shape, x.dtype


def _check_starts(x, starts, name, op):
    _req(len(starts) == x.rank, name, f"{op} of a rank-{x.rank} operand needs {x.rank} scalar start indices, "
         f"got {len(starts)}")
    for s in starts:
        _req(s.rank == 0 and _index_dtype_ok(s.dtype), name, f"{op} start indices must be integer scalars, got "
             f"{s.dtype}{_fmt(s.shape)} ({s.name})")


def dynamic_starts(node, sizes, fetch, clamp):
    """The clamped starts of a dynamic-slice (``sizes`` = slice sizes) or update (update shape)."""
    x = node.operands[0]
    first = 1 if node.op == "dynamic-slice" else 2
    return tuple(clamp(fetch(first + d), 0, n - s) for d, (n, s) in enumerate(zip(x.shape, sizes)))


def dynamic_slice_index(node, out, fetch, add, clamp):
    starts = dynamic_starts(node, node.attrs["slice_sizes"], fetch, clamp)
    return tuple(add(s, i) for s, i in zip(starts, out))


# -- numpy meaning -------------------------------------------------------------------------

def open_index(shape) -> tuple:
    """Broadcastable index arrays of every element of ``shape`` (like ``np.ogrid``)."""
    r = len(shape)
    return tuple(np.arange(n, dtype=np.int64).reshape([n if i == d else 1 for i in range(r)])
                 for d, n in enumerate(shape))


def _np_clamp(v, lo, hi):
    return np.clip(np.asarray(v).astype(np.int64), lo, hi)


def np_gather(node, x, idx):
    out = open_index(node.shape)
    src = gather_index(node, out, lambda w: idx[w], np.add, _np_clamp)
    return np.broadcast_to(x[tuple(np.asarray(s) for s in src)] if src else x, node.shape)


def np_dynamic_slice(node, x, *starts):
    src = dynamic_slice_index(node, open_index(node.shape), lambda i: starts[i - 1], np.add, _np_clamp)
    return np.broadcast_to(x[src] if src else x, node.shape)


def np_dynamic_update_slice(node, x, upd, *starts):
    s = dynamic_starts(node, upd.shape, lambda i: starts[i - 2], _np_clamp)
    out = np.array(x, copy=True)
    out[tuple(slice(int(a), int(a) + n) for a, n in zip(s, upd.shape))] = upd
    return out
