"""``sort`` and ``topk``: the orders they use, exactly as XLA (and JAX) define them.

Neither can be stitched: every output element depends on a whole row, so each
runs as its own library kernel (a segmented sort, like CUB's), and the stitched
kernels around it read and write its operands and results in global memory.

Orders (``order`` names, one per sort key):

* ``asc`` / ``desc``: JAX's sort comparator.  ``jnp.sort`` lowers to an HLO sort
  whose region first canonicalises each float (``-0.0`` becomes ``0.0``, every NaN
  becomes ``+NaN``) and then compares with ``type=TOTALORDER``: ascending, ``-0.0``
  and ``0.0`` equal (kept in input order: the sort is stable), NaNs last.
* ``asc_total`` / ``desc_total``: IEEE total order on the raw value: ``-NaN < -inf <
  ... < -0.0 < +0.0 < ... < +inf < +NaN`` (a TOTALORDER compare without canonicalising).
* integers and pred compare as numbers in every order.

A sort of several operands sorts along ``dimension`` by its *keys* (the operands
with an order, compared lexicographically, first key first) and permutes every
operand the same way; the node with ``result=i`` is operand ``i`` permuted.
``topk(x), k, largest=true`` (what ``jax.lax.top_k`` lowers to) returns the ``k``
largest elements of each last-dim row in ``desc_total`` order -- NaNs first, ties
to the lower index -- as ``result=0`` (values) and ``result=1`` (s32 indices).
``largest=false`` returns the ``k`` smallest in ``asc_total`` order.
"""
from __future__ import annotations

import numpy as np

ORDERS = ("asc", "desc", "asc_total", "desc_total")


def total_order_key(x: np.ndarray, canonical: bool) -> np.ndarray:
    """An int64 array ordered like ``x`` in IEEE total order (``canonical``: -0 -> 0 and NaN -> +NaN first)."""
    x = np.asarray(x)
    if x.dtype == np.bool_ or x.dtype.kind == "i":
        return x.astype(np.int64)
    if x.dtype.kind == "u":
        return (x.astype(np.uint64) ^ np.uint64(1 << 63)).view(np.int64)
    wide = x.astype(np.float64)
    nan = np.isnan(wide)
    if canonical:
        wide = np.where(wide == 0, 0.0, wide)
    bits = np.ascontiguousarray(wide).view(np.int64)
    neg = (bits < 0) & ~nan if canonical else bits < 0
    key = np.where(neg, np.bitwise_xor(bits, np.int64(0x7FFFFFFFFFFFFFFF)), bits)
    top = np.int64(0x7FF8000000000000)     # every NaN of one sign is one NaN: payloads do not order
    return np.where(nan, np.where(neg, ~top, top), key)


def sort_keys(values: np.ndarray, order: str) -> np.ndarray:
    """int64 keys whose ascending order is ``order`` on ``values``."""
    key = total_order_key(values, canonical=order in ("asc", "desc"))
    return ~key if order.startswith("desc") else key


def sort_permutation(node_attrs, operands) -> np.ndarray:
    """Indices along ``dimension`` that sort the rows (stable, lexicographic over the keys)."""
    dim = node_attrs["dimension"]
    keys = [sort_keys(operands[i], o) for i, o in enumerate(node_attrs["orders"]) if o]
    moved = [np.moveaxis(k, dim, -1) for k in keys]
    if not moved or moved[0].shape[-1] == 0:
        return np.broadcast_to(np.arange(operands[0].shape[dim]), np.moveaxis(operands[0], dim, -1).shape)
    # np.lexsort sorts by the *last* key first: pass the keys reversed
    return np.lexsort(tuple(reversed(moved)), axis=-1)


def np_sort(node, *operands):
    perm = sort_permutation(node.attrs, operands)
    x = np.moveaxis(operands[node.attrs["result"]], node.attrs["dimension"], -1)
    return np.moveaxis(np.take_along_axis(x, perm, axis=-1), -1, node.attrs["dimension"])


def np_topk(node, x):
    order = "desc_total" if node.attrs["largest"] else "asc_total"
    key = sort_keys(x, order)
    k = node.attrs["k"]
    perm = np.argsort(key, axis=-1, kind="stable")[..., :k]
    if node.attrs["result"] == 1:
        return perm.astype(np.int32)
    return np.take_along_axis(x, perm, axis=-1)


def infer_sort(operands, attrs, name, require):
    x = operands[0]
    dim = attrs.get("dimension")
    require(isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) and 0 <= dim < x.rank,
            name, f"sort dimension={dim!r} must be a dim of the operand (rank {x.rank})")
    for o in operands:
        require(o.shape == x.shape, name, "every operand of a sort must have the same shape")
    orders = tuple(attrs.get("orders") or ())
    require(len(orders) == len(operands) and all(o in ORDERS or o in ("", None) for o in orders), name,
            f"orders {orders} must give one of {ORDERS} (a key) or '' (carried along) per operand")
    require(any(orders), name, "a sort needs at least one key operand")
    orders = tuple(o or "" for o in orders)
    result = attrs.get("result", 0)
    require(isinstance(result, (int, np.integer)) and 0 <= result < len(operands), name,
            f"result={result!r} must pick one of the {len(operands)} sorted operands")
    attrs.update(dimension=int(dim), orders=orders, result=int(result), is_stable=bool(attrs.get("is_stable", True)))
    return x.shape, operands[result].dtype


def infer_topk(operands, attrs, name, require):
    x = operands[0]
    k = attrs.get("k")
    require(x.rank >= 1, name, "topk needs an operand of rank >= 1 (it works along the last dim)")
    require(isinstance(k, (int, np.integer)) and not isinstance(k, bool) and 0 <= k <= x.shape[-1], name,
            f"k={k!r} must be an int in 0..{x.shape[-1] if x.rank else 0} (the last dim)")
    result = attrs.get("result", 0)
    require(result in (0, 1), name, f"topk result={result!r} must be 0 (values) or 1 (indices)")
    attrs.update(k=int(k), largest=bool(attrs.get("largest", True)), result=int(result))
    return tuple(x.shape[:-1]) + (int(k),), (x.dtype if result == 0 else "s32")
