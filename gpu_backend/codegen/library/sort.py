"""``sort`` and ``topk`` as a rank sort: each thread places one element.

Thread ``e`` takes element ``i`` of its row and counts the elements ``j`` of the
row that come before it -- ``j`` is smaller in the order, or equal and ``j < i``
(stable) -- that count is its position in the sorted row.  A sort writes every
operand's element ``i`` there (a multi-operand sort permutes the values with the
keys); a top-k writes only ranks below ``k``, the value and its index.

The orders are :mod:`astitch_sim.ir.sorting`'s: ``asc``/``desc`` are JAX's comparator
(``_sort_less``: -0.0 equals 0.0, NaNs last), ``*_total`` the IEEE total order
(``_tot_less``); integers compare as numbers in every order.  O(n) work per
element, no shared memory, no barrier: plain and correct, not CUB.
"""
from __future__ import annotations

from .. import exprs as E

_LESS = {"asc": "_sort_less({0}, {1})", "desc": "_sort_less({1}, {0})",
         "asc_total": "_tot_less({0}, {1})", "desc_total": "_tot_less({1}, {0})"}


def _row_element(w, shape, dim):
    """Emit the element's index; returns (index exprs, position along ``dim``)."""
    idx = w.unravel_vars("e", shape, "d")
    return idx, idx[dim]


def _count_before(w, keys, orders, row_idx, dim, shape, i):
    """``rank = #{j in the row: key_j before key_i}`` (lexicographic over the keys, ties by position)."""
    out = w.out
    n = shape[dim]
    mine = []
    for k, (arr, dtype) in enumerate(keys):
        v = w.names.fresh(f"key{k}")
        out(f"{v} = {w.load(dtype, f'{arr}[{E.ravel(row_idx, shape)}]')}")
        mine.append(v)
    out("rank = 0")
    out(f"for j in range({n}):  # every element of the row")
    out.indent()
    jidx = [("j" if d == dim else x) for d, x in enumerate(row_idx)]
    out("cmp = 0  # -1: element j comes first, 1: element i comes first, 0: equal keys so far")
    for k, ((arr, dtype), o) in enumerate(zip(keys, orders)):
        other = w.names.fresh(f"other{k}")
        out("if cmp == 0:")
        out.indent()
        out(f"{other} = {w.load(dtype, f'{arr}[{E.ravel(jidx, shape)}]')}")
        out(f"if {_LESS[o].format(other, mine[k])}:")
        out("    cmp = -1")
        out(f"elif {_LESS[o].format(mine[k], other)}:")
        out("    cmp = 1")
        out.dedent()
    out(f"if cmp < 0 or (cmp == 0 and j < {i}):  # stable: equal keys keep their order")
    out("    rank += 1")
    out.dedent()


def write_sort(w) -> str:
    head = w.nodes[0]
    a = head.attrs
    dim, orders = a["dimension"], a["orders"]
    shape = head.shape
    keys, key_orders = [], []
    for i, (o, x) in enumerate(zip(orders, head.operands)):
        if o:
            keys.append((w.operand(i, f"sort key ({o})"), x.dtype))
            key_orders.append(o)
    outs = [(n, w.array(n, "output", f"operand {n.attrs['result']} sorted")) for n in w.nodes]
    srcs = {n.name: w.operand(n.attrs["result"], f"operand {n.attrs['result']}") for n in w.nodes}
    w.grid_stride(head.size, f"rank sort along dim {dim}: one element per thread")
    idx, i = _row_element(w, shape, dim)
    _count_before(w, keys, key_orders, idx, dim, shape, i)
    dest = [("rank" if d == dim else x) for d, x in enumerate(idx)]
    for n, arr in outs:
        w.out(f"{arr}[{E.ravel(dest, shape)}] = {srcs[n.name]}[{E.ravel(idx, shape)}]  # {n.name} at its rank")
    return f"sort of {', '.join(o.name for o in head.operands)} along dim {dim} ({', '.join(o or '-' for o in orders)})"


def write_topk(w) -> str:
    head = w.nodes[0]
    x = head.operands[0]
    k, largest = head.attrs["k"], head.attrs["largest"]
    order = "desc_total" if largest else "asc_total"
    src = w.operand(0, "the rows")
    outs = {n.attrs["result"]: w.array(n, "output", "values" if n.attrs["result"] == 0 else "indices")
            for n in w.nodes}
    dim = x.rank - 1
    w.grid_stride(x.size, f"top-{k} by rank: one input element per thread")
    idx, i = _row_element(w, x.shape, dim)
    _count_before(w, [(src, x.dtype)], [order], idx, dim, x.shape, i)
    dest = [("rank" if d == dim else v) for d, v in enumerate(idx)]
    oshape = head.shape
    w.out(f"if rank < {k}:  # among the {'largest' if largest else 'smallest'} {k}: write it at its rank")
    w.out.indent()
    if 0 in outs:
        w.out(f"{outs[0]}[{E.ravel(dest, oshape)}] = {src}[{E.ravel(idx, x.shape)}]")
    if 1 in outs:
        w.out(f"{outs[1]}[{E.ravel(dest, oshape)}] = int32({i})")
    w.out.dedent()
    return f"top-{k} of {x.name} ({'largest' if largest else 'smallest'}, NaNs {'first' if largest else 'last'})"
