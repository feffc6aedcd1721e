"""Per-row values over ``[rows]``, not ``[rows, 1]``: XLA's canonicalization of unit (size-1) dimensions.

JAX's StableHLO text of a norm keeps the reduced dimension (``keepdims``)::

    sum  : f32[4]   = reduce(x)                      mean: f32[4,1] = divide(sum1, n)
    sum1 : f32[4,1] = broadcast_in_dim(sum), dims=[0]  rstd: f32[4,1] = rsqrt(add(var, eps))

so mean, variance, ``+eps`` and rsqrt are elementwise ops over ``[rows, 1]``, not over the reduce's own
``[rows]``.  A planner that asks a per-row op to have the reduce's shape (astitch's epilogue merge,
``strategies/astitch._epilogue_merge``) then plans them as flat stages of their own, whose values go through
global memory behind grid barriers.  XLA never sees that form: two of its passes canonicalize it first.

* ``AlgebraicSimplifierVisitor::HandleBroadcast`` (xla/hlo/transforms/simplifiers/algebraic_simplifier.cc): a
  broadcast whose dimension map is sorted and whose result has as many elements as its operand replicates
  nothing -- it only inserts size-1 dimensions -- so it is a reshape.  ``HandleReshape`` (same file) merges a
  reshape of a reshape into one, and deletes a reshape to its operand's own shape.
* ``ReshapeMover`` (xla/hlo/transforms/simplifiers/reshape_mover.cc, ``IsReshapeMoveCandidate`` and
  ``SinkRearrangeOperands``): an elementwise op whose operands are all equivalent reshapes of one source
  shape S, or operands that can trivially take the inverse reshape (``CanTriviallyRearrange``: a broadcast of
  a scalar, a constant), is computed over S, followed by one reshape to its own shape.

:func:`canonicalize_unit_dims` does both on a :class:`Graph`, in graph order, so the reshape sinks down a
chain: ``divide`` over ``[4]``, then ``add`` and ``rsqrt`` over ``[4]``, and the importer's squeeze of
``rsqrt`` back to ``[4]`` folds away.  The per-row ops then have the reduce's shape and every strategy plans
them as it plans JAX's HLO text, which divides before reshaping.  It runs once before any strategy plans a
graph (``asim.compile``), after zero-size elimination and trivial-reduce elimination.

Narrower than XLA, on purpose: only reshapes that add or remove unit dimensions sink, and only when the
source shape S has fewer dimensions than the op (unit dims move out of the computation, never into it); an
op that is a graph output keeps its shape (its name and shape are the graph's interface), and so does a
reshape to its operand's shape that is an output; an op or a broadcast with a non-row-major layout is left
as it is (the layout names dimensions this pass would remove).  XLA also refuses to sink when a reshape
operand has users that do not sink (``TryReshapeMoveOnCandidates``), to never keep two copies; here such a
reshape simply stays for its other users (a reshape moves no data in any strategy's plan).

The rewrite is exact: only the shapes of size-1 dimensions change, every element keeps its value and its
row-major position, so the reference computes the same outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..ir.graph import Graph, unique_name

#: every note this pass adds to a plan starts with this
NOTE_PREFIX = "unit dims moved out of elementwise ops (as XLA's AlgebraicSimplifier and ReshapeMover)"


@dataclass
class _Op:
    """One node of the graph being rewritten (a Graph cannot drop nodes, so the pass edits these, then builds)."""
    name: str
    op: str
    operands: list
    shape: tuple
    dtype: str
    attrs: dict
    prefer: str = ""            #: a name to take if the node that held it is dropped (a re-made scalar broadcast)


def _squeezed(shape) -> tuple:
    return tuple(d for d in shape if d != 1)


def is_degenerate_broadcast(node) -> bool:
    """A broadcast that replicates nothing (sorted dimension map, as many elements as its operand): a reshape."""
    dims = tuple(node.attrs.get("dimensions", ()))
    return (node.op == "broadcast" and list(dims) == sorted(dims) and node.row_major
            and prod(node.shape) == prod(node.operands[0].shape))


def _sink_shape(op: _Op, ops: dict):
    """The source shape S ``op`` can be computed over, or None: every operand of rank > 0 is a reshape adding
    unit dims to S, or a broadcast of a scalar; at least one is such a reshape; S has fewer dims than ``op``."""
    sources = set()
    for name in op.operands:
        o = ops[name]
        if not o.shape or (o.op == "broadcast" and not ops[o.operands[0]].shape):
            continue                                  # a scalar (select's predicate) or a scalar broadcast
        if o.op != "reshape" or _squeezed(ops[o.operands[0]].shape) != _squeezed(o.shape):
            return None
        sources.add(ops[o.operands[0]].shape)
    if len(sources) != 1:
        return None
    (s,) = sources
    return s if len(s) < len(op.shape) else None


def canonicalize_unit_dims(graph: Graph) -> tuple[Graph, list]:
    """``graph`` with degenerate broadcasts as reshapes and unit-dim reshapes sunk below elementwise ops.

    Returns ``graph`` itself when nothing changes; otherwise a new Graph with the same name, parameters and
    output names (a sunk op keeps its name; the reshape after it is ``<name>/reshape``), and a note saying
    what changed.  Nodes the rewrite leaves unused are dropped; nodes the input graph did not use are kept.
    """
    outputs = {o.name for o in graph.outputs}
    ops: dict[str, _Op] = {}
    alias: dict[str, str] = {}                        # a node's name -> the node now holding its value
    taken = {n.name for n in graph}
    as_reshape, sunk, folded = [], [], 0
    for n in graph:
        op = _Op(n.name, n.op, [alias.get(o.name, o.name) for o in n.operands], n.shape, n.dtype, dict(n.attrs))
        if is_degenerate_broadcast(n):
            op.op, op.attrs = "reshape", {k: v for k, v in n.attrs.items() if k not in ("dimensions", "layout")}
            as_reshape.append(n.name)
        if op.op == "reshape":
            src = ops[op.operands[0]]
            if src.op == "reshape":                   # reshape(reshape(x)) is reshape(x)
                op.operands, src, folded = [src.operands[0]], ops[src.operands[0]], folded + 1
            if src.shape == op.shape and n.name not in outputs:
                alias[n.name] = src.name              # a reshape to its operand's shape is its operand
                folded += 1
                continue
        elif n.kind == "elementwise" and n.name not in outputs and n.row_major:
            s = _sink_shape(op, ops)
            if s is not None:
                op.operands = [_inverse(ops[o], s, ops, taken) for o in op.operands]
                op.shape, op.attrs = s, {k: v for k, v in op.attrs.items() if k != "layout"}
                ops[op.name] = op
                back = _Op(unique_name(f"{n.name}/reshape", taken), "reshape", [op.name], n.shape, n.dtype, {})
                ops[back.name] = back
                alias[n.name] = back.name
                sunk.append(f"{n.name} {list(s)}")
                continue
        ops[op.name] = op
    if not (as_reshape or sunk or folded):
        return graph, []
    g = _build(graph, ops, [alias.get(o.name, o.name) for o in graph.outputs])
    said = [f"broadcasts to reshapes: {_listed(as_reshape)}" if as_reshape else "",
            f"computed without unit dims: {_listed(sunk)}" if sunk else "",
            f"{folded} reshape(s) folded" if folded else ""]
    return g, [f"{NOTE_PREFIX}: " + "; ".join(s for s in said if s)]


def _listed(names: list, shown: int = 10) -> str:
    """The first ``shown`` names, and how many more (a model's note stays one readable line)."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _inverse(o: _Op, s: tuple, ops: dict, taken: set) -> str:
    """Operand ``o`` of a sunk op, over the source shape ``s``: a reshape's source, a scalar broadcast re-made."""
    if not o.shape:
        return o.name
    if o.op == "reshape":
        return o.operands[0]
    scalar = o.operands[0]
    if not s:
        return scalar
    b = _Op(unique_name(f"{o.name}/{'x'.join(map(str, s))}", taken), "broadcast", [scalar], s, o.dtype,
            {"dimensions": ()}, prefer=o.name)
    ops[b.name] = b
    return b.name


def _build(graph: Graph, ops: dict, outputs: list) -> Graph:
    """The Graph of ``ops``, without the nodes the rewrite left unused (nodes the input did not use stay)."""
    used = {n.name for n in graph.live_nodes()}
    roots = outputs + [n.name for n in graph if n.name not in used and n.name in ops]
    live, stack = set(), list(roots)
    while stack:
        name = stack.pop()
        if name not in live:
            live.add(name)
            stack.extend(ops[name].operands)
    keep = [op for op in ops.values() if op.name in live or op.op == "parameter"]
    names = {op.name for op in keep}
    rename = {}
    for op in keep:                                   # a re-made scalar broadcast takes the name of the one it replaces
        if op.prefer and op.prefer not in names and op.prefer not in rename.values():
            rename[op.name] = op.prefer
    g = Graph(graph.name)
    g.source = graph.source
    for op in keep:
        g.add_node(op.op, [g[rename.get(o, o)] for o in op.operands], shape=op.shape, dtype=op.dtype,
                   name=rename.get(op.name, op.name), **op.attrs)
    g.set_outputs([g[rename.get(o, o)] for o in outputs])
    return g
