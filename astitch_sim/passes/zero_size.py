"""Zero-size tensors: XLA's rules, applied once before any strategy plans a graph.

A tensor with a 0-length dimension (an empty batch, ``f32[0,64]``) has no
elements, so no thread has anything to compute for it.  XLA does not launch
kernels for such values either: its ``ZeroSizedHloElimination`` pass replaces
every instruction with an empty result by an empty constant, and its algebraic
simplifier rewrites the few ops whose result is *not* empty although an operand
is.  :func:`eliminate_zero_size` does the same on a :class:`Graph`:

=====================================  ===========================================
node                                   becomes
=====================================  ===========================================
any non-parameter with no elements     an empty constant (``f32[0,64] {}``)
reduce over a 0-length dimension       ``broadcast(init)``: a reduce over nothing
                                       is its init value (argmax/argmin: the init
                                       pair's component)
reduce-window of an empty operand      ``broadcast(init)`` (windows of padding only)
dynamic-update-slice, empty update     ``copy(operand)``: nothing is written
scatter of no updates                  ``copy(operand)``: nothing is written
pad of an empty operand                ``broadcast(padding value)``
concatenate with empty operands        concatenate of the non-empty ones only
dot whose contracted dims are empty    ``broadcast(0)``: an empty sum
=====================================  ===========================================

Parameters stay as they are (the caller passes an empty array for them).  So
after this pass no op of the graph has an empty domain, and the rule for every
reader of a Plan is simple: **no kernel ever iterates over an empty domain** --
``plan.validate()`` refuses a stage whose mapping covers zero elements (it could
only come from a hand-edited plan), and a kernel launch never has zero blocks.
A graph whose every output is empty or constant compiles to a plan with no
kernels at all; simulating it returns the empty arrays and constants.

New ops plug in as rows of :data:`RULES`: how to rewrite a node of that op
whose result has elements although an operand has none.  An op with an empty
operand and a non-empty result but no row is refused with an AStitchError
naming it (never a silently wrong value).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..ir.dtypes import cast
from ..errors import AStitchError
from ..ir.graph import Graph, Node, unique_name


#: every note this pass adds to a plan starts with this (``print(plan)`` shows them under its header)
NOTE_PREFIX = "zero-size elimination (as XLA)"


def _copy(g: Graph, node: Node, operands) -> Node:
    attrs = {k: v for k, v in node.attrs.items()}
    return g.add_node(node.op, operands, shape=node.shape, dtype=node.dtype, name=node.name, **attrs)


def _fill(g: Graph, node: Node, scalar: Node) -> Node:
    """``node`` becomes ``broadcast(scalar)`` under its own name and shape."""
    return g.add_node("broadcast", (scalar,), shape=node.shape, dtype=node.dtype, name=node.name, dimensions=())


def _reduce_rule(g, node, ops, names):
    half = len(node.operands) // 2               # (x, init), or (x, iota, init_x, init_i) for argmax/argmin
    if node.operands[0].size == 0:               # a reduce over nothing is its init value (argmax: the init pair)
        return _fill(g, node, ops[half + node.attrs.get("result", 0)])
    return None


def _unchanged_operand(g, node, ops, names):
    """A dynamic-update-slice of an empty update, a scatter of no updates: the operand as it is."""
    if node.operands[0].size == 0:
        return None
    return g.add_node("copy", (ops[0],), shape=node.shape, dtype=node.dtype, name=node.name)


def _reduce_window_rule(g, node, ops, names):
    if node.operands[0].size == 0:
        return _fill(g, node, ops[1])            # every window holds only padding: the init value
    return None


def _pad_rule(g, node, ops, names):
    if node.operands[0].size == 0:
        return _fill(g, node, ops[1])            # nothing to place: every element is padding
    return None


def _concatenate_rule(g, node, ops, names):
    keep = [o for o, src in zip(ops, node.operands) if src.size > 0]
    if len(keep) == len(ops):
        return None
    attrs = {k: v for k, v in node.attrs.items()}
    return g.add_node("concatenate", keep, shape=node.shape, dtype=node.dtype, name=node.name, **attrs)


def _dot_rule(g, node, ops, names):
    a = node.operands[0]
    contracted = [a.shape[d] for d in node.attrs["lhs_contracting_dims"]]
    if 0 not in contracted:
        return None
    zero_name = unique_name(f"{node.name}.zero", names)
    zero = g.add_node("constant", (), shape=(), dtype=node.dtype, name=zero_name, value=cast(np.zeros(()), node.dtype))
    return _fill(g, node, zero)                  # a sum of no products


#: op -> (rule, why).  ``rule(new graph, node, new operands, names in use)`` returns the node's replacement,
#: or None to copy the node as it is; it is applied to nodes that have elements although an operand has none.
RULES: dict[str, tuple[Callable, str]] = {
    "reduce": (_reduce_rule, "a reduce over nothing is its init value"),
    "pad": (_pad_rule, "padding an empty operand gives only padding"),
    "concatenate": (_concatenate_rule, "empty operands add nothing"),
    "dot": (_dot_rule, "a sum of no products is 0"),
    "dynamic-update-slice": (_unchanged_operand, "an empty update changes nothing"),
    "scatter": (_unchanged_operand, "no updates change nothing"),
    "reduce-window": (_reduce_window_rule, "a window over nothing but padding is its init value"),
}


def has_zero_size(graph: Graph) -> bool:
    """Does any node of ``graph`` other than a parameter have no elements?"""
    return any(n.size == 0 and n.op != "parameter" for n in graph) or \
        any(n.size > 0 and any(o.size == 0 for o in n.operands) for n in graph)


def eliminate_zero_size(graph: Graph) -> tuple[Graph, list]:
    """``graph`` with XLA's zero-size rules applied (see the module docstring), and notes saying what changed.

    Returns ``graph`` itself, unchanged, when no node touches an empty tensor;
    otherwise a new Graph with the same name, parameters and output names.
    """
    if not has_zero_size(graph):
        return graph, []
    g = Graph(graph.name)
    names = {n.name for n in graph}
    new: dict[str, Node] = {}
    emptied, rewritten = [], []
    for n in graph:
        ops = [new[o.name] for o in n.operands]
        if n.op == "parameter":
            new[n.name] = _copy(g, n, ())
            continue
        if n.size == 0:
            if n.op == "constant":
                new[n.name] = _copy(g, n, ())
            else:
                value = cast(np.zeros(n.shape), n.dtype)
                new[n.name] = g.add_node("constant", (), shape=n.shape, dtype=n.dtype, name=n.name, value=value)
                emptied.append(n.name)
            continue
        if any(o.size == 0 for o in n.operands):
            rule, why = RULES.get(n.op, (None, ""))
            if rule is None:
                raise AStitchError(f"{n.name}: {n.op} of an empty operand gives {n.size} elements, and astitch-sim "
                                   f"has no zero-size rule for {n.op}; add one to astitch_sim.passes.zero_size.RULES")
            out = rule(g, n, ops, names)
            if out is not None:
                new[n.name] = out
                rewritten.append(f"{n.name} {n.op} -> {out.op} ({why})")
                continue
        new[n.name] = _copy(g, n, ops)
    g.set_outputs([new[o.name] for o in graph.outputs])
    notes = []
    if emptied:
        notes.append(f"{NOTE_PREFIX}: {len(emptied)} value(s) with no elements became empty "
                     f"constants, no kernel computes them: {', '.join(emptied[:8])}{' ...' if len(emptied) > 8 else ''}")
    if rewritten:
        notes.append(f"{NOTE_PREFIX}: " + "; ".join(rewritten))
    return g, notes
