"""Reduces over no dimensions: an elementwise op, as XLA's algebraic simplifier says.

``reduce(x, init, dimensions={})`` folds each element with nothing but the init
value, so it is the elementwise op ``reducer(x, init)``: ``add(x, init)`` for a
sum, ``maximum(x, init)`` for a max...  XLA's ``AlgebraicSimplifier::HandleReduce``
rewrites it that way (a reduce that reduces no dimension is a map of its
reducer).  JAX emits such reduces (``jnp.sum(x, axis=())``), and random graphs
make them; planned as reductions they are a row reduction of rows of one
element, a degenerate case no strategy needs.  :func:`eliminate_trivial_reduces`
runs once before any strategy plans a graph (``asim.compile``), after zero-size
elimination.  Pair reducers (argmax/argmin) over no dimension stay reduces: their
region picks between two values and an index, not one elementwise op.

The rewrite is exact: the reference computes the same ``reducer(x, init)``.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, unique_name
from ..ir.reducers import reducer

#: every note this pass adds to a plan starts with this
NOTE_PREFIX = "reduce over no dimensions (as XLA's algebraic simplifier)"


def is_trivial_reduce(node: Node) -> bool:
    """A one-value reduce that reduces no dimension."""
    return node.op == "reduce" and not node.attrs["dimensions"] and reducer(node).values == 1


def eliminate_trivial_reduces(graph: Graph) -> tuple[Graph, list]:
    """``graph`` with each trivial reduce replaced by its reducer's elementwise op, and a note saying which.

    Returns ``graph`` itself when it has none; otherwise a new Graph with the same
    name, parameters and output names (the elementwise op keeps the reduce's name).
    """
    if not any(is_trivial_reduce(n) for n in graph):
        return graph, []
    g = Graph(graph.name)
    taken = {n.name for n in graph}
    new: dict[str, Node] = {}
    rewritten = []
    for n in graph:
        ops = [new[o.name] for o in n.operands]
        if is_trivial_reduce(n):
            x, init = ops
            if n.shape:
                name = unique_name(f"{n.name}.init", taken)
                init = g.add_node("broadcast", (init,), shape=n.shape, dtype=n.dtype, name=name, dimensions=())
            op = reducer(n).region_op
            new[n.name] = g.add_node(op, (x, init), shape=n.shape, dtype=n.dtype, name=n.name)
            rewritten.append(f"{n.name} -> {op}")
            continue
        new[n.name] = g.add_node(n.op, ops, shape=n.shape, dtype=n.dtype, name=n.name, **dict(n.attrs))
    g.set_outputs([new[o.name] for o in graph.outputs])
    return g, [f"{NOTE_PREFIX}: " + ", ".join(rewritten)]


