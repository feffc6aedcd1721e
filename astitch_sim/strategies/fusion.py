"""Register-only fusion, the way XLA (and TVM, and an unfused framework) split a graph into kernels.

Every kernel is built around *roots*: values that must leave their kernel
through global memory.  Everything else is fused into each root's kernel by
walking producers back until a root, an input or a matrix product: a producer
reached from several kernels is *recomputed* in each (it stays in registers,
never stored) unless the policy makes it a root of its own ("re-read").

What differs between strategies is only which nodes are roots:

* ``unfused``: every op that does work (a kernel per op, like TensorFlow
  without XLA); reshapes, bitcasts, broadcasts and constants are free.
* ``xla``: graph outputs; reduces (a reduce's result leaves its kernel through
  global memory); expensive elementwise ops whose result is broadcast
  (pattern 2 of the paper); expensive ops that several kernels would
  otherwise recompute; sibling reductions of one input share a kernel.
* ``tvm``: like xla, but an expensive op followed by a broadcast is fused into
  its consumers and recomputed per consumer element (the plan records how often);
  TVM inlines every injective producer into each consumer, so nothing is re-read.
"""
from __future__ import annotations

from ..analysis import ancestors, boundary_source, is_boundary, is_expensive, is_free, is_one_to_many_producer, \
    must_materialise
from ..boundary import sibling_key
from ..kernel_builder import assemble_kernel
from ..plan import Plan, Stage
from .common import LOOP_BLOCK, closure, escapes_of, flat_mapping, fusible_stop, is_work, library_kernel, \
    max_reduction_slots, reduction_values, \
    xla_reduce_mapping


def _initial_roots(graph, live, strategy) -> set:
    roots = set()
    for n in graph.outputs:
        if n.op not in ("parameter", "constant"):
            roots.add(n.name)
    for n in live:
        if n.op == "reduce" or is_boundary(n):
            roots.add(n.name)
        if must_materialise(n) and not fusible_stop(n):
            roots.add(n.name)            # a library kernel reads it from memory
        if strategy == "unfused" and is_work(n):
            roots.add(n.name)
        if strategy == "xla" and is_one_to_many_producer(n):
            roots.add(n.name)
    return roots


def _members(graph, roots: set) -> dict:
    """root -> the nodes its kernel computes (itself and the producers fused into it)."""
    out = {}
    for r in roots:
        node = graph[r]
        if is_boundary(node):
            continue
        out[r] = [n.name for n in closure(node, lambda o: fusible_stop(o) or o.name in roots)]
    return out


def _settle_roots(graph, live, strategy) -> tuple[set, dict]:
    """Grow the root set until no expensive producer is computed by two kernels (xla, tvm re-read it)."""
    roots = _initial_roots(graph, live, strategy)
    while True:
        members = _members(graph, roots)
        count: dict[str, int] = {}
        for names in members.values():
            for n in names:
                count[n] = count.get(n, 0) + 1
        extra = set()
        for n, c in count.items():
            node = graph[n]
            if c > 1 and n not in roots and not is_free(node):
                if strategy == "tvm":
                    continue      # TVM inlines injective producers into every consumer and recomputes them
                if is_expensive(node) or strategy == "unfused":
                    extra.add(n)
        if not extra:
            return roots, members
        roots |= extra


def _depends(graph, a: str, b: str, cache: dict) -> bool:
    """Does node ``a`` depend on node ``b`` (transitively)?"""
    return b in ancestors(graph[a], cache)


def _group_siblings(graph, order: list, members: dict, strategy: str, max_slots: int = 1 << 30) -> list:
    """XLA multi-output fusion: sibling reduces of one input share a kernel; so do the results of
    one library op (a sort's keys and values, top-k's values and indices)."""
    groups: list[list[str]] = []
    cache: dict = {}
    library: dict = {}
    for r in order:
        node = graph[r]
        placed = False
        if is_boundary(node):
            key = sibling_key(node)
            if key in library:
                library[key].append(r)
            else:
                library[key] = [r]
                groups.append(library[key])
            continue
        if strategy != "unfused" and node.op == "reduce":
            for g in groups:
                first = graph[g[0]]
                if (first.op == "reduce" and first.operands[0].shape == node.operands[0].shape
                        and sum(reduction_values(graph[x]) for x in g) + reduction_values(node) <= max_slots
                        and first.attrs["dimensions"] == node.attrs["dimensions"]
                        and first.operands[0].layout == node.operands[0].layout
                        and _shares_input(graph, members, g, r)
                        and not any(_depends(graph, r, x, cache) or _depends(graph, x, r, cache) for x in g)):
                    g.append(r)
                    placed = True
                    break
        if not placed:
            groups.append([r])
    return groups


def _shares_input(graph, members, group, r) -> bool:
    def leaves(name):
        return {o.name for m in members[name] for o in graph[m].operands if o.name not in members[name]}
    mine = leaves(r)
    return any(mine & leaves(x) for x in group)


def _read_values(graph, mine: set) -> list:
    """Values a kernel computing ``mine`` reads from outside (a library kernel: through its views)."""
    out = []
    for n in mine:
        node = graph[n]
        for o in node.operands:
            src = boundary_source(o) if is_boundary(node) else o
            if src.name not in mine:
                out.append(src)
    return out


def _order_groups(graph, groups: list, members: dict) -> list:
    """Kernels in dependency order: a kernel runs after every kernel whose results it reads."""
    produced_by = {r: i for i, g in enumerate(groups) for r in g}
    needs = []
    for g in groups:
        mine = {n for r in g for n in members.get(r, [r])}
        deps = {produced_by[o.name] for o in _read_values(graph, mine) if o.name in produced_by}
        needs.append(deps)
    ordered, done = [], set()
    while len(ordered) < len(groups):
        ready = [i for i in range(len(groups)) if i not in done and needs[i] <= done]
        if not ready:   # pragma: no cover - sibling fusion checks dependences
            raise AssertionError("fusion: kernels depend on each other in a cycle")
        ordered.append(groups[ready[0]])
        done.add(ready[0])
    return ordered


def partition_plan(graph, gpu, strategy: str) -> Plan:
    """Build the Plan of a register-only strategy (``unfused``, ``xla`` or ``tvm``)."""
    live = graph.live_nodes()
    position = {n.name: i for i, n in enumerate(graph)}
    roots, members = _settle_roots(graph, live, strategy)
    order = sorted(roots, key=position.get)
    groups = _order_groups(graph, _group_siblings(graph, order, members, strategy, max_reduction_slots(gpu)),
                           members)
    computed_by = {}
    for g in groups:
        for r in g:
            for n in members.get(r, []):
                computed_by.setdefault(n, set()).add(g[0])
    read_elsewhere = set()
    for g in groups:
        mine = {n for r in g for n in members.get(r, [r])}
        read_elsewhere |= {o.name for o in _read_values(graph, mine) if o.op not in ("parameter", "constant")}

    kernels = []
    for g in groups:
        head = graph[g[0]]
        if is_boundary(head):
            kernels.append(library_kernel(graph, [graph[r] for r in g], len(kernels)))
            continue
        ops = sorted({n for r in g for n in members[r]}, key=position.get)
        if head.op == "reduce":
            mapping = xla_reduce_mapping(head, gpu, [graph[r] for r in g])
        else:
            mapping = flat_mapping(head.shape, LOOP_BLOCK)
        stage = Stage(dominant=g[-1], ops=ops, mapping=mapping)
        label = {"unfused": "op", "xla": "fusion", "tvm": "fusion"}[strategy]
        notes = _notes(graph, g, ops, roots, strategy)
        k = assemble_kernel(graph, f"{label}.{len(kernels)}:{g[-1]}", [stage], gpu,
                            escapes_of(graph, set(ops), read_elsewhere), stitch=False, notes=notes)
        kernels.append(k)
    plan_notes = [f"{strategy}: {len(kernels)} kernels from roots " + ", ".join(order)]
    return Plan(graph, strategy, gpu, kernels, plan_notes)


def _notes(graph, group, ops, roots, strategy) -> list:
    notes = []
    head = graph[group[-1]]
    if len(group) > 1:
        notes.append(f"multi-output fusion of sibling reductions {', '.join(group)}")
    if head.op == "reduce":
        notes.append(f"{head.name} ends the kernel: a reduce result leaves through global memory")
    elif strategy == "xla" and is_one_to_many_producer(head):
        notes.append(f"{head.name} is expensive and broadcast: XLA ends the kernel here")
    for n in ops:
        node = graph[n]
        if strategy == "tvm" and is_one_to_many_producer(node) and n not in roots:
            notes.append(f"{n} is recomputed for every element of its broadcast (TVM)")
    return notes
