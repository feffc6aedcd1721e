"""Dependency analysis: what the fusion decisions of every strategy are based on.

* operator level: fan-out (an op with several consumers);
* element level: the class of every edge (one-to-one, one-to-many, many-to-one);
* light vs expensive ops (from the op table);
* row vs column reductions, from the input's *layout* (minor-to-major): a
  reduce over the minor-most dims reads contiguous memory per task (row);
  over the major-most dims each task strides through memory (column);
* memory-intensive clusters: maximal groups of memory-intensive ops between
  library ops (dot, and the ops the stitcher cannot fuse: sort, topk, scatter,
  reduce-window), the scope of one AStitch kernel;
* what a library kernel reads: its operands from global memory -- or, for an
  operand that is only a row-major reshape of a value already in memory, that
  value's buffer as it is (a *view*: no kernel copies it).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.dtypes import is_float
from ..ir.graph import Graph, Node
from ..ir.index_rules import same_flat_position
from ..ir.ops import OPS
from ..ir.reducers import reduce_inputs

def is_free(node: Node) -> bool:
    """An op that never needs a kernel of its own (the op table's ``inline`` column)."""
    return node.opdef.inline


def is_boundary(node: Node) -> bool:
    """A library op: it runs as its own kernel, and the stitcher plans around it."""
    return node.kind == "library"


def is_compute(node: Node) -> bool:
    """Compute-intensive (a matrix product)."""
    return node.op == "dot"


#: ops that only reinterpret their operand's bytes: every element keeps its row-major flat position
#: (the op table's rows whose index rule is ``same_flat_position``: reshape, bitcast)
VIEW_OPS = tuple(name for name, row in OPS.items() if row.index is same_flat_position)


def in_memory(node: Node) -> bool:
    """Values that are in global memory without any generated kernel writing them."""
    return node.op == "parameter" or (node.op == "constant" and node.rank > 0) or is_boundary(node)


def boundary_source(operand: Node) -> Node:
    """The buffer a library kernel reads for ``operand``.

    A chain of row-major reshapes/bitcasts of a value already in memory (a
    parameter, an array constant, another library kernel's result) is read as a
    view of that value -- ``x.reshape(B*T, D) @ w`` reads ``x`` itself, as cuBLAS
    would.  Anything else (a broadcast such as ``jnp.repeat``'s, a transpose, a
    computed value) is the operand itself, which an earlier kernel must write.
    """
    base = operand
    while base.op in VIEW_OPS:
        base = base.operands[0]
    return base if base is not operand and in_memory(base) else operand


def read_directly(node: Node, user: Node) -> bool:
    """Does ``user`` read ``node``'s own values (not as a view of a buffer already in memory)?"""
    return not (is_boundary(user) and boundary_source(node) is not node)


def must_materialise(node: Node) -> bool:
    """Does a library kernel read ``node`` itself from global memory (so some kernel must write it)?"""
    return not in_memory(node) and any(is_boundary(u) and boundary_source(node) is node for u in node.users)


def is_expensive(node: Node) -> bool:
    """XLA's ``InstructionFusion::IsExpensive`` (``instruction_fusion.cc``) for the elementwise ops we plan:
    the op table's expensive ops, except those XLA calls cheap on real types (``OpDef.xla_cheap``: sine,
    cosine, tan) and an integer divide or remainder by a constant scalar or a broadcast of one, which
    compiles to multiplies and shifts.  A ``pred`` result is never expensive.  This is the generic
    (backend-independent) answer: the ``xla`` strategy applies the GPU backend's override on top of it,
    which calls some f32/f16 math cheap depending on the XLA version (``strategies/xla_rules.py``);
    AStitch's pattern (2) and the cost model's SFU work use it as is."""
    op = node.opdef
    if node.kind != "elementwise" or not op.is_expensive or op.xla_cheap or node.dtype == "pred":
        return False
    if op.name in ("divide", "remainder") and not is_float(node.dtype):
        return not is_constant_scalar(node.operands[1])
    return True


def is_constant_scalar(node: Node) -> bool:
    """XLA's ``ConstantEffectiveScalar`` or a broadcast of one: a constant of one element."""
    if node.op == "broadcast":
        node = node.operands[0]
    return node.op == "constant" and node.size == 1


def is_expanding_broadcast(node: Node) -> bool:
    """A broadcast that really makes several output elements read one input element."""
    return node.op == "broadcast" and node.size > node.operands[0].size


def edge_class(producer: Node, consumer: Node) -> str:
    """Element-level dependency of ``consumer`` on ``producer``."""
    if is_boundary(consumer):
        return consumer.opdef.dependency
    if consumer.op == "reduce" and producer in reduce_inputs(consumer):
        return "many-to-one"
    if is_expanding_broadcast(consumer):
        return "one-to-many"
    return "one-to-one"


def broadcasts_reached(node: Node, passes_through) -> list[Node]:
    """The expanding broadcasts among ``node``'s users, and among the users of every user
    ``passes_through(u)`` accepts (each user visited once)."""
    out, stack, seen = [], list(node.users), set()
    while stack:
        u = stack.pop()
        if u.name in seen:
            continue
        seen.add(u.name)
        if is_expanding_broadcast(u):
            out.append(u)
        elif passes_through(u):
            stack.extend(u.users)
    return out


def broadcast_users(node: Node) -> list[Node]:
    """Users that broadcast ``node`` (looking through free reshapes/converts of the same size)."""
    return broadcasts_reached(node, lambda u: u.op in ("reshape", "bitcast", "convert", "copy")
                              and u.size == node.size)


def is_one_to_many_producer(node: Node) -> bool:
    """The paper's pattern (2): an expensive elementwise op whose result is broadcast."""
    return is_expensive(node) and bool(broadcast_users(node))


@dataclass(frozen=True)
class ReduceShape:
    """A reduce in the mapping view: ``kind`` row | column, and the dim groups of its input."""
    kind: str
    groups: tuple     # row: (kept, reduced); column: (outer, reduced, inner)


def classify_reduce(node: Node) -> ReduceShape:
    """Row or column reduction, from the input's layout (major-to-minor order of dims).

    Walking the input's dims from major to minor: if every reduced dim comes
    after every kept dim, each task reads a contiguous run: a *row* reduction.
    Otherwise the reduced dims sit between kept dims (outer, reduced, inner):
    a *column* reduction -- each thread walks down a column, and neighbouring
    threads read neighbouring columns.  Other interleavings are treated as column
    reductions over the major-most reduced block (kept dims between reduced
    dims fold into ``outer``).
    """
    x = node.operands[0]
    reduced = set(node.attrs["dimensions"])
    major_to_minor = list(reversed(x.layout))
    if not reduced:
        return ReduceShape("row", (tuple(major_to_minor), ()))
    flags = [d in reduced for d in major_to_minor]
    first_red = flags.index(True)
    if all(flags[first_red:]):
        return ReduceShape("row", (tuple(major_to_minor[:first_red]), tuple(major_to_minor[first_red:])))
    last_red = len(flags) - 1 - flags[::-1].index(True)
    inner = tuple(d for d in major_to_minor[last_red + 1:])
    red = tuple(d for d in major_to_minor[:last_red + 1] if d in reduced)
    outer = tuple(d for d in major_to_minor[:last_red + 1] if d not in reduced)
    return ReduceShape("column", (outer, red, inner))


def library_levels(graph: Graph) -> dict:
    """When each op can run relative to the library kernels: a *level* per live node.

    A library op at level ``k`` runs after the memory-intensive ops of level ``k``
    and before those of level ``k + 1``.  Library ops get their earliest level (the
    longest chain of library ops above them); memory-intensive ops the *latest*
    level that still comes before every library op reading them and no later than
    their consumers (so ``m * b1`` of an Adam step joins the update that needs the
    gradient, instead of a kernel of its own).  Graph outputs nobody reads go last.
    """
    live = graph.live_nodes()
    asap: dict = {}
    for n in live:
        asap[n.name] = max((asap[o.name] + (1 if is_boundary(o) else 0) for o in n.operands), default=0)
    last = max((asap[n.name] for n in live if is_boundary(n)), default=-1) + 1
    level = {n.name: asap[n.name] for n in live if is_boundary(n)}
    live_names = {n.name for n in live}
    for n in reversed(live):
        if is_boundary(n):
            continue
        users = [u for u in n.users if u.name in live_names]
        level[n.name] = min([level[u.name] for u in users] + ([last] if not users or n in graph.outputs else []))
    return level


def memory_clusters(graph: Graph) -> list[list[Node]]:
    """Groups of memory-intensive ops between library ops (dot, sort, scatter...): the scopes AStitch stitches.

    Two ops are in one cluster when one feeds the other directly and both run at the
    same level (:func:`library_levels`): a residual stream ``x`` that feeds a
    layernorm before the attention's matmuls and the residual add after them splits
    there, so no kernel both feeds a library op and waits for it.  Sources
    (parameters, constants) do not connect clusters.  A cluster of free ops only
    (reshapes, broadcasts) needs no kernel -- unless it is an output or a library
    kernel must read one of its values from memory (``jnp.repeat`` before a matmul).
    """
    live = [n for n in graph.live_nodes() if n.op not in ("parameter", "constant") and not is_boundary(n)]
    level = library_levels(graph)
    live_names = {n.name for n in live}
    parent = {n.name: n.name for n in live}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    remat = {n.name for n in live if is_rematerialisable(n)}
    for n in live:
        for o in n.operands:
            if o.name in live_names and o.name not in remat and level[o.name] == level[n.name]:
                parent[find(o.name)] = find(n.name)
    groups: dict[str, list[Node]] = {}
    for n in live:
        if n.name not in remat or n in graph.outputs or must_materialise(n):
            groups.setdefault(find(n.name), []).append(n)
    return [g for g in groups.values() if any(not is_free(n) or n in graph.outputs or must_materialise(n) for n in g)]


def is_rematerialisable(node: Node) -> bool:
    """A free op of sources only (a broadcast constant, an iota, a reshape of a parameter): every kernel
    that reads one computes it again for nothing, so it joins no cluster and ties no kernels together."""
    if not is_free(node) or node.op in ("parameter", "constant"):
        return False
    return all(o.op in ("parameter", "constant") or is_rematerialisable(o) for o in node.operands)


def is_scalar_of_inputs(node: Node) -> bool:
    """A scalar computed from kernel inputs only (Adam's ``1 - b1**t``): every thread that needs it computes it
    again -- in an element loop or a reduction's epilogue -- instead of one thread storing it for the others."""
    if node.rank or node.kind not in ("elementwise", "broadcast", "layout") or node.op in ("parameter", "constant"):
        return False
    return all(o.op in ("parameter", "constant") and o.rank == 0 or is_scalar_of_inputs(o) for o in node.operands)


def with_rematerialised(names: set, graph: Graph) -> set:
    """``names`` plus the rematerialisable nodes its members read (each kernel computes its own copy)."""
    out, stack = set(names), [graph[n] for n in names]
    while stack:
        for o in stack.pop().operands:
            if o.name not in out and is_rematerialisable(o):
                out.add(o.name)
                stack.append(o)
    return out


def ancestors(node: Node, cache: dict | None = None) -> set:
    """Names of every node ``node`` depends on (transitively); ``cache`` memoises per node name."""
    if cache is not None and node.name in cache:
        return cache[node.name]
    seen, stack = set(), [node]
    while stack:
        x = stack.pop()
        for o in x.operands:
            if o.name not in seen:
                seen.add(o.name)
                stack.append(o)
    if cache is not None:
        cache[node.name] = seen
    return seen


def fan_out(graph: Graph) -> dict[str, int]:
    """Operator-level fan-out of every node (number of distinct users)."""
    return {n.name: len(graph.users(n)) for n in graph}
