"""``scatter`` as lanes that own their output elements: copy, then apply every update in order.

When every scattered operand dim has a window of 1 (an embedding gradient, a
label's gradient, ``x.at[i].set``: always, in practice), an update element's
target is fixed in the *other* dims by its window offset.  So one thread (a
*lane*) per position of those other dims owns every output element with that
position: it copies them from the operand, then walks the scatter indices in
order and applies each update that lands in its window -- colliding updates
combine in XLA's sequential order, no two threads touch one element, no atomics.
Otherwise one thread does it all.  Out-of-range updates are dropped (the window
must fit), as in XLA; the target arithmetic is :func:`astitch_sim.ir.scatter.scatter_target`.
"""
from __future__ import annotations

from math import prod

from astitch_sim.plan.boundary import scatter_lanes
from astitch_sim.ir.reducers import REDUCERS
from astitch_sim.ir.scatter import scatter_target, window_sizes

from .. import exprs as E
from ..dtypes import FLOATS, COMPUTE


def write_scatter(w) -> str:
    """The scatter kernel: a grid-stride loop over lanes; each lane copies its output elements from the
    operand, then applies every update that lands in its window, in the scatter indices' order."""
    node = w.nodes[0]
    x, ind, upd = node.operands
    free = lane_dims(node)
    lanes = prod(x.shape[d] for d in free)
    if lanes != scatter_lanes(node):
        w.fail(f"the plan launches lanes for {scatter_lanes(node)} positions, the kernel needs {lanes}")
    src = w.operand(0, "the operand (copied into the result)")
    gi = w.operand(1, "scatter indices")
    gu = w.operand(2, "updates")
    dst = w.array(node, "output", "the operand with the updates applied")
    w.grid_stride(lanes, "lanes: each owns the output elements at one position of the non-scattered dims"
                  if free else "one thread applies everything (a scattered dim has a window wider than 1)")
    lane = dict(zip(free, w.unravel_vars("e", [x.shape[d] for d in free], "d")))
    copy_lane(w, node, lane, src, dst)
    uidx = open_update_loops(w, node, lane)
    apply_update(w, node, uidx, gi, gu, dst)
    return f"scatter ({node.attrs['combiner']}) of {upd.name} into {x.name} at {ind.name}"


def lane_dims(node) -> list:
    """The operand dims a lane owns: the non-scattered dims, when every scattered dim has a window of 1
    (then no two lanes write one element); else none (one thread does it all)."""
    a = node.attrs
    x = node.operands[0]
    sizes = window_sizes(node)
    indexed = set(a["scatter_dims_to_operand_dims"]) | set(a["input_batching_dims"])
    safe = all(sizes[d] == 1 for d in indexed)
    return [d for d in range(x.rank) if d not in indexed] if safe else []


def copy_lane(w, node, lane: dict, src: str, dst: str):
    """Copy the lane's elements of the operand into the result (every position of the other dims)."""
    x = node.operands[0]
    out = w.out
    rest = [d for d in range(x.rank) if d not in lane]
    out(f"for q in range({prod(x.shape[d] for d in rest)}):  # copy this lane's elements of the operand")
    out.indent()
    qv = dict(zip(rest, w.unravel_vars("q", [x.shape[d] for d in rest], "c")))
    full = [lane[d] if d in lane else qv[d] for d in range(x.rank)]
    out(f"{dst}[{E.ravel(full, x.shape)}] = {src}[{E.ravel(full, x.shape)}]")
    out.dedent()


def open_update_loops(w, node, lane: dict) -> tuple:
    """Open the loops over the updates that may land in the lane's window: the scatter indices in order,
    then each update window dim the lane does not fix; returns the update element's index."""
    x, _, upd = node.operands
    a = node.attrs
    out = w.out
    window = [d for d in range(x.rank) if d not in a["inserted_window_dims"] and d not in a["input_batching_dims"]]
    owner = dict(zip(a["update_window_dims"], window))        # updates window dim -> operand dim
    inside = [f"{lane[od]} < {upd.shape[u]}" for u, od in owner.items() if od in lane and upd.shape[u] < x.shape[od]]
    cond = E.all_of(inside)
    if cond is not True:
        out(f"if {cond}:  # the lane lies inside the update window")
        out.indent()
    sdims = [d for d in range(upd.rank) if d not in owner]
    out(f"for gq in range({prod(upd.shape[d] for d in sdims)}):  # every scatter index, in order")
    out.indent()
    U = dict(zip(sdims, w.unravel_vars("gq", [upd.shape[d] for d in sdims], "g")))
    for u, od in owner.items():
        if od in lane:
            U[u] = lane[od]
        elif upd.shape[u] == 1:
            U[u] = 0
        else:
            var = w.names.fresh(f"w{u}")
            out(f"for {var} in range({upd.shape[u]}):  # the update window, in order")
            out.indent()
            U[u] = var
    return tuple(U[d] for d in range(upd.rank))


def apply_update(w, node, uidx: tuple, gi: str, gu: str, dst: str):
    """Apply update element ``uidx`` at its target, if its whole window fits (else XLA drops it):
    assign, or combine with the combiner in the element's type."""
    x, ind, upd = node.operands
    out = w.out

    def fetch(where):
        var = w.names.fresh("start")
        out(f"{var} = int64({w.load(ind.dtype, f'{gi}[{E.ravel(where, ind.shape)}]')})")
        return var

    target, fits = scatter_target(node, uidx, fetch, E.add, lambda p, q: f"{p} >= {q}", lambda p, q: f"{p} <= {q}",
                                  lambda p, q: E.all_of([p, q]))
    if fits is not True:
        out(f"if {fits}:  # the whole window fits: otherwise the update is dropped")
        out.indent()
    t = w.names.fresh("t")
    out(f"{t} = {E.ravel(target, x.shape)}")
    val = w.load(upd.dtype, f"{gu}[{E.ravel(uidx, upd.shape)}]")
    comb = node.attrs["combiner"]
    if comb == "assign":
        out(f"{dst}[{t}] = {gu}[{E.ravel(uidx, upd.shape)}]  # assign: the last update wins")
    else:
        new = REDUCERS[comb].scalar.format(w.load(x.dtype, f"{dst}[{t}]"), val)
        if x.dtype in ("f16", "bf16"):
            new = w.result(x.dtype, new)
        elif x.dtype not in FLOATS and not (x.dtype == "pred" and REDUCERS[comb].scalar_keeps_bool):
            new = f"{COMPUTE[x.dtype]}({new})"
        out(f"{dst}[{t}] = {w.store(x.dtype, new)}  # {comb}")
