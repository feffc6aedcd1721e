"""Dependency analysis: what the fusion decisions of every strategy are based on.

* operator level: fan-out (an op with several consumers);
* element level: the class of every edge (one-to-one, one-to-many, many-to-one);
* light vs expensive ops (from the op table);
* row vs column reductions, from the input's *layout* (minor-to-major): a
  reduce over the minor-most dims reads contiguous memory per task (row);
  over the major-most dims each task strides through memory (column);
* memory-intensive clusters: maximal groups of memory-intensive ops between
  compute-intensive ones (dot), the scope of one AStitch kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from .graph import Graph, Node

#: ops that never need a kernel of their own: no data moves or the value is inlined
FREE_OPS = ("parameter", "constant", "iota", "broadcast", "reshape", "bitcast", "copy")


def is_free(node: Node) -> bool:
    return node.op in FREE_OPS


def is_compute(node: Node) -> bool:
    return node.kind == "dot"


def is_expensive(node: Node) -> bool:
    return node.kind == "elementwise" and node.opdef.is_expensive and node.dtype != "pred"


def is_expanding_broadcast(node: Node) -> bool:
    """A broadcast that really makes several output elements read one input element."""
    return node.op == "broadcast" and node.size > node.operands[0].size


def edge_class(producer: Node, consumer: Node) -> str:
    """Element-level dependency of ``consumer`` on ``producer``."""
    if consumer.kind == "dot":
        return "compute"
    if consumer.op == "reduce" and consumer.operands[0] is producer:
        return "many-to-one"
    if is_expanding_broadcast(consumer):
        return "one-to-many"
    return "one-to-one"


def broadcast_users(node: Node) -> list[Node]:
    """Users that broadcast ``node`` (looking through free reshapes/converts of the same size)."""
    out, stack, seen = [], list(node.users), set()
    while stack:
        u = stack.pop()
        if u.name in seen:
            continue
        seen.add(u.name)
        if is_expanding_broadcast(u):
            out.append(u)
        elif u.op in ("reshape", "bitcast", "convert", "copy") and u.size == node.size:
            stack.extend(u.users)
    return out


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


def memory_clusters(graph: Graph) -> list[list[Node]]:
    """Connected groups of memory-intensive ops, split at compute-intensive ones (dot).

    Two ops are in one cluster when one feeds the other directly; sources
    (parameters, constants) do not connect clusters.
    """
    live = [n for n in graph.live_nodes() if n.op not in ("parameter", "constant") and not is_compute(n)]
    live_names = {n.name for n in live}
    parent = {n.name: n.name for n in live}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for n in live:
        for o in n.operands:
            if o.name in live_names:
                parent[find(o.name)] = find(n.name)
    groups: dict[str, list[Node]] = {}
    for n in live:
        groups.setdefault(find(n.name), []).append(n)
    return [g for g in groups.values() if any(not is_free(n) for n in g) or any(n in graph.outputs for n in g)]


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
