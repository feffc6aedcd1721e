"""Inductor's split reductions: a reduction with few outputs and a long reduced extent becomes two.

``ir.Reduction.create`` asks ``Reduction.num_splits`` for a split factor; above 1 it calls
``create_multilayer``: a first reduction computes ``split`` partial results per output (each over
``rnumel / split`` elements, many programs busy), a second reduces the partials.  They are two
kernels: Triton programs cannot wait for one another (``config.triton.cooperative_reductions``, a
grid-synchronised variant, is off by default), so the partials go through global memory between two
launches.  This is where AStitch's task splitting differs: one kernel, partials combined by atomics
or behind a grid barrier.

We write the split into the graph, so every reader sees it: ``reduce(x, dims)`` over ``R`` elements
becomes ``reduce(reduce(reshape(x, [..., split, R/split, ...]), inner piece), split dim)``; the reshape
is a free view.  The plan's graph is the rewritten one (same parameters and output names), as with the
zero-size rewrite ``asim.compile`` makes.  The pieces are equal (a divisor of ``R``, :func:`~.inductor_rules.even_split`);
a reduction whose reduced dims are not one contiguous run of a row-major input, or whose init value is
not its reducer's identity (splitting would fold it in twice), is not split, and the notes say so.

A half-precision reduction (f16, bf16) keeps its partials in f32, as ``create_multilayer_helper`` does
("keep the intermediate in fp32 so as to keep the whole reduction in fp32"): rounded to 16 bits between
the two kernels, a sum would be rounded once more than the unsplit reduction (which accumulates in f32
and rounds its result).  The graph says so with converts: the input widened to f32 as the first kernel
reads it, the partials f32, the second reduction's f32 result narrowed by a convert (see :mod:`.inductor`).
"""
from __future__ import annotations

import numpy as np

from ...passes.analysis import classify_reduce
from ...ir.graph import Graph, unique_name
from ...ir.reducers import reducer
from .inductor_rules import even_split, reduction_hint, split_factor, splittable

#: every note this pass adds starts with this
NOTE_PREFIX = "inductor split reduction"
#: reducers for which folding the init twice changes nothing
IDEMPOTENT = ("max", "min", "and", "or")
#: dtypes whose split partials Inductor keeps in f32 (``intermediate_dtype`` in ``create_multilayer_helper``)
HALF = ("f16", "bf16")
ACCUMULATE = "f32"


def _contiguous_run(dims) -> bool:
    d = sorted(dims)
    return bool(d) and d == list(range(d[0], d[-1] + 1))


def _init_is_identity(node) -> bool:
    r = reducer(node)
    if r.name in IDEMPOTENT:
        return True
    init = node.operands[1]
    if init.op != "constant":
        return False
    ident = r.identity([np.dtype(np.asarray(init.attrs["value"]).dtype)])[0]
    return bool(np.all(np.asarray(init.attrs["value"]) == ident))


def _widen(g: Graph, v, taken: set, name: str):
    """``v`` as f32: a constant init becomes an f32 constant (no kernel work), anything else a convert."""
    name = unique_name(name, taken)
    if v.op == "constant":
        return g.constant(v.attrs["value"], ACCUMULATE, name=name)
    return g.convert(v, ACCUMULATE, name=name)


def plan_split(node, gpu) -> tuple[int, str]:
    """``(pieces, why)`` for one reduce: pieces 1 means not split, and ``why`` says why not (or '')."""
    if not splittable(node):
        return 1, ""
    x = node.operands[0]
    dims = node.attrs["dimensions"]
    rnumel = int(np.prod([x.shape[d] for d in dims])) if dims else 1
    want = split_factor(gpu, rnumel, node.size, reduction_hint(node))
    if want <= 1:
        return 1, ""
    if not (x.row_major and _contiguous_run(dims)):
        return 1, f"{node.name}: Inductor would split it in {want}; not modelled for its layout (not split)"
    if not _init_is_identity(node):
        return 1, f"{node.name}: Inductor would split it in {want}; its init is not the identity (not split)"
    pieces = even_split(rnumel, want)
    if pieces <= 1:
        return 1, f"{node.name}: Inductor would split it in {want}; {rnumel} has no divisor to split at (not split)"
    return pieces, ""


def split_reductions(graph: Graph, gpu) -> tuple[Graph, list]:
    """``graph`` with each reduction Inductor splits written as two, and notes saying which and why."""
    plans = {n.name: plan_split(n, gpu) for n in graph if n.op == "reduce"}
    notes = [why for _, why in plans.values() if why]
    if not any(p > 1 for p, _ in plans.values()):
        return graph, [f"{NOTE_PREFIX}: {w}" for w in notes]
    g = Graph(graph.name)
    g.source = graph.source
    taken = {n.name for n in graph}
    new: dict = {}
    done = []
    for n in graph:
        ops = [new[o.name] for o in n.operands]
        pieces = plans.get(n.name, (1, ""))[0]
        if pieces == 1:
            new[n.name] = g.add_node(n.op, ops, shape=n.shape, dtype=n.dtype, name=n.name, **dict(n.attrs))
            continue
        x, init = ops
        dims = sorted(n.attrs["dimensions"])
        rnumel = int(np.prod([x.shape[d] for d in dims]))
        outer, inner = list(x.shape[:dims[0]]), list(x.shape[dims[-1] + 1:])
        shaped = g.add_node("reshape", (x,), shape=tuple(outer + [pieces, rnumel // pieces] + inner),
                            name=unique_name(f"{n.name}.pieces", taken))
        attrs = {k: v for k, v in n.attrs.items() if k not in ("dimensions", "layout")}
        layout = {"layout": n.attrs["layout"]} if "layout" in n.attrs else {}
        dtype = n.dtype
        if n.dtype in HALF:
            shaped, init = (_widen(g, v, taken, f"{n.name}.{what}") for v, what in ((shaped, "wide"), (init, "init32")))
            dtype = ACCUMULATE
        partial = g.add_node("reduce", (shaped, init), dtype=dtype, name=unique_name(f"{n.name}.partial", taken),
                             dimensions=(len(outer) + 1,), **attrs)          # row-major, as the reshape is
        second = dict(shape=n.shape, dtype=dtype, dimensions=(len(outer),), **{**attrs, **layout})
        if dtype == n.dtype:
            new[n.name] = g.add_node("reduce", (partial, init), name=n.name, **second)
        else:
            whole = g.add_node("reduce", (partial, init), name=unique_name(f"{n.name}.f32", taken), **second)
            new[n.name] = g.add_node("convert", (whole,), dtype=n.dtype, name=n.name)
        kind = classify_reduce(n).kind
        done.append(f"{n.name} ({kind}, {rnumel} elements into {n.size} outputs) -> {partial.name} "
                    f"({pieces} {'f32 ' if dtype != n.dtype else ''}partials per output) then {n.name}: two kernels")
    g.set_outputs([new[o.name] for o in graph.outputs])
    return g, [f"{NOTE_PREFIX}: {w}" for w in done + notes]
