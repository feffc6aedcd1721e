"""``scatter``: the gradient of a gather (embedding gradients, integer-label cross-entropy), ``x.at[i].set/add``.

Why it is a library kernel and not stitched: updates may *collide* (two tokens
with the same id add into one embedding row), so an output element is not a
function of one place in the inputs; the result depends on applying the
updates in order (or with atomics).  It runs as its own kernel, between
stitched ones, like XLA's scatter emitter.

XLA semantics followed here (``operand``, ``scatter_indices``, ``updates``):

* each update element ``U`` splits into its *scatter* dims (those not in
  ``update_window_dims``), which pick an index vector from ``scatter_indices``
  (along ``index_vector_dim``), and its *window* dims, which are offsets into a
  window of the operand along the operand dims that are neither
  ``inserted_window_dims`` nor ``input_batching_dims``, in order;
* index component ``k`` is the window's start along operand dim
  ``scatter_dims_to_operand_dims[k]``; batching dims take the matching scatter
  index (``scatter_indices_batching_dims``);
* **an update whose whole window does not fit in the operand is dropped** (no
  clamping, unlike gather: ``x.at[12].add(1)`` on 10 elements changes nothing);
* the result is the operand with every kept update folded in by the combiner
  region, in the order of the scatter index (then the window): ``assign`` (the
  region returns the update: the last update of an element wins), or ``sum``,
  ``prod``, ``max``, ``min``, ``and``, ``or``.
"""
from __future__ import annotations

import numpy as np

from .dtypes import is_float
from .indexed import open_index

SCATTER_ATTRS = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "index_vector_dim",
                 "input_batching_dims", "scatter_indices_batching_dims")
#: combiner -> numpy ufunc applied in order (``assign``: the update replaces the element)
COMBINERS = {"assign": None, "sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
             "and": np.logical_and, "or": np.logical_or}


def _req(cond, name, msg):
    if not cond:
        from ..errors import AStitchError
        raise AStitchError(f"{name}: {msg}")


def _fmt(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def infer_scatter(operands, attrs, name, ints, dims_of):
    x, idx, upd = operands
    R, S, Ur = x.rank, idx.rank, upd.rank
    _req(idx.dtype != "pred" and not is_float(idx.dtype), name,
         f"scatter indices must be integers, got {idx.dtype}: convert them to s32 first")
    _req(upd.dtype == x.dtype, name, f"scatter updates are {upd.dtype} but the operand is {x.dtype}: convert them")
    comb = attrs.get("combiner")
    _req(comb in COMBINERS, name, f"combiner {comb!r} is not one of {', '.join(COMBINERS)}")
    _req(comb not in ("and", "or") or x.dtype == "pred", name, f"combiner {comb!r} needs pred values")
    ivd = attrs.get("index_vector_dim", S)
    _req(isinstance(ivd, (int, np.integer)) and not isinstance(ivd, bool) and 0 <= ivd <= S, name,
         f"index_vector_dim={ivd!r} must be an int in 0..{S} (the rank of the scatter indices)")
    uwd = dims_of(attrs.get("update_window_dims", ()), name, Ur, "update_window_dims")
    inserted = dims_of(attrs.get("inserted_window_dims", ()), name, R, "inserted_window_dims")
    sd2od = dims_of(attrs.get("scatter_dims_to_operand_dims", ()), name, R, "scatter_dims_to_operand_dims")
    obatch = dims_of(attrs.get("input_batching_dims", ()), name, R, "input_batching_dims")
    ibatch = dims_of(attrs.get("scatter_indices_batching_dims", ()), name, S, "scatter_indices_batching_dims")
    _req(list(uwd) == sorted(uwd), name, f"update_window_dims {uwd} must be sorted")
    components = idx.shape[ivd] if ivd < S else 1
    _req(len(sd2od) == components, name, f"scatter_dims_to_operand_dims {sd2od} must name one operand dim per "
         f"component of the index vector ({components})")
    _req(not set(inserted) & set(obatch) and not set(sd2od) & set(obatch), name,
         "input_batching_dims may be neither inserted window dims nor scattered dims")
    window = [d for d in range(R) if d not in inserted and d not in obatch]
    _req(len(window) == len(uwd), name, f"update_window_dims {uwd} must give one updates dim per operand dim that "
         f"is neither inserted nor a batching dim ({window})")
    for w, u in zip(window, uwd):
        _req(upd.shape[u] <= x.shape[w], name, f"the update window ({upd.shape[u]} along updates dim {u}) is larger "
             f"than operand dim {w} ({x.shape[w]})")
    scatter_dims = [d for d in range(Ur) if d not in uwd]
    index_dims = [d for d in range(S) if d != ivd]
    _req([upd.shape[d] for d in scatter_dims] == [idx.shape[d] for d in index_dims], name,
         f"updates {_fmt(upd.shape)} scatter dims {scatter_dims} must match the scatter indices {_fmt(idx.shape)} "
         f"(without index_vector_dim {ivd})")
    _req(len(obatch) == len(ibatch) and ivd not in ibatch, name,
         f"input_batching_dims {obatch} and scatter_indices_batching_dims {ibatch} must pair up")
    for od, sd in zip(obatch, ibatch):
        _req(x.shape[od] == idx.shape[sd], name, f"batching dims differ in size: operand dim {od} vs indices dim {sd}")
    attrs.update(update_window_dims=uwd, inserted_window_dims=inserted, scatter_dims_to_operand_dims=sd2od,
                 index_vector_dim=int(ivd), input_batching_dims=obatch, scatter_indices_batching_dims=ibatch)
    return x.shape, x.dtype


def window_sizes(node) -> tuple:
    """Extent of one update's window along each operand dim (1 along inserted and batching dims)."""
    x, _, upd = node.operands
    a = node.attrs
    window = [d for d in range(x.rank) if d not in a["inserted_window_dims"] and d not in a["input_batching_dims"]]
    size = {w: upd.shape[u] for w, u in zip(window, a["update_window_dims"])}
    return tuple(size.get(d, 1) for d in range(x.rank))


def scatter_target(node, upd_index, fetch, add, ge, le, both):
    """Operand index updated by the update element at ``upd_index``, and whether its window fits.

    ``fetch(index)`` reads the scatter indices; ``ge(a, b)``/``le(a, b)`` compare and ``both(a, b)`` ands
    conditions (numpy arrays, or source expressions for the code generator).
    """
    x, idx, upd = node.operands
    a = node.attrs
    ivd, S = a["index_vector_dim"], idx.rank
    uwd = set(a["update_window_dims"])
    scatter_part = [upd_index[d] for d in range(upd.rank) if d not in uwd]
    g_of = dict(zip([d for d in range(S) if d != ivd], scatter_part))
    start = {}
    for k, d in enumerate(a["scatter_dims_to_operand_dims"]):
        start[d] = fetch(tuple(k if s == ivd else g_of[s] for s in range(S)))
    batching = dict(zip(a["input_batching_dims"], a["scatter_indices_batching_dims"]))
    window = [d for d in range(x.rank) if d not in a["inserted_window_dims"] and d not in batching]
    offset = {w: upd_index[u] for w, u in zip(window, a["update_window_dims"])}
    sizes = window_sizes(node)
    fits = True
    for d, s in start.items():
        fits = both(fits, both(ge(s, 0), le(s, x.shape[d] - sizes[d])))
    target = []
    for d in range(x.rank):
        base = g_of[batching[d]] if d in batching else start.get(d, 0)
        target.append(add(base, offset.get(d, 0)))
    return tuple(target), fits


def update_order(node) -> list:
    """Updates dims in the order updates are applied: scatter dims first, then window dims."""
    upd = node.operands[2]
    uwd = node.attrs["update_window_dims"]
    return [d for d in range(upd.rank) if d not in uwd] + list(uwd)


def np_scatter(node, x, idx, upd):
    U = open_index(upd.shape)
    target, fits = scatter_target(node, U, lambda w: idx[w], np.add, np.greater_equal, np.less_equal,
                                  lambda p, q: np.logical_and(p, q))
    order = update_order(node)
    full = [np.transpose(np.broadcast_to(t, upd.shape), order).reshape(-1) for t in target]
    keep = np.transpose(np.broadcast_to(fits, upd.shape), order).reshape(-1)
    values = np.transpose(upd, order).reshape(-1)[keep]
    flat = np.zeros(keep.sum(), dtype=np.int64)
    for t, n in zip(full, x.shape):
        flat = flat * n + t[keep]
    out = np.array(x, copy=True)
    view = out.reshape(-1)
    comb = COMBINERS[node.attrs["combiner"]]
    if comb is None:                       # assign: the last update of an element wins
        last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]
        view[flat[last]] = values[last]
    else:
        with np.errstate(all="ignore"):
            comb.at(view, flat, values)    # unbuffered, in update order
    return out
