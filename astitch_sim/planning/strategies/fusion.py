"""Register-only fusion, the way XLA (and TVM, and an unfused framework) split a graph into kernels.

Every kernel is built around *roots*: values that must leave their kernel
through global memory.  Everything else is fused into each root's kernel by
walking producers back until a root, an input or a matrix product: a producer
reached from several kernels is *recomputed* in each (it stays in registers,
never stored) unless the policy makes it a root of its own ("re-read").

What differs between strategies is only which nodes are roots: each strategy is a
policy object (``register_only.py``: ``UNFUSED``, ``XLA``, ``TVM``) that
:func:`partition_plan` follows:

* ``unfused``: every op that does work (a kernel per op, like TensorFlow
  without XLA); reshapes, bitcasts, broadcasts and constants are free.
* ``xla``: graph outputs; reduces (a reduce's result leaves its kernel through
  global memory); expensive elementwise ops whose elements a broadcast reuses
  (pattern 2 of the paper); expensive ops that several kernels would
  otherwise recompute; sibling reductions of one input share a kernel, and so
  do loop fusions of one shape that read a common input or one another.  *Which*
  ops are expensive is the GPU rule of one named XLA version
  (``xla_rules.py``): by default OpenXLA's ``GpuInstructionFusion`` of 2022-2024
  (f32/f16 divide, rsqrt, exp, sqrt cheap), or the paper's era with
  ``fusion_rules="tf-2.6"`` (only divide and rsqrt cheap).

The xla rules, and where XLA states them (OpenXLA's ``xla/service/`` and ``xla/service/gpu/``, formerly
TensorFlow's ``tensorflow/compiler/xla/service/``; ``xla_rules.py`` names the commits read):

=====================================================  ==================================================
rule here                                              XLA
=====================================================  ==================================================
an elementwise producer fuses into its consumer        ``instruction_fusion.cc``: ``InstructionFusion::Run``
(walk producers back from each root)                   fuses every operand ``ShouldFuse`` accepts
a cheap producer with several consumers is             ``ShouldFuse``: ``FusionWouldDuplicate(producer,
recomputed in each; an expensive one is a root         consumer) && is_expensive_(producer)`` -> no
an expensive op whose elements a broadcast reuses      ``gpu/instruction_fusion.cc``:
ends its kernel, the broadcast seen through views      ``ShouldFuseInexpensiveChecks``: ``is_expensive(
and the cheap ops fused in between; a cheap one is     producer) && ReusesOperandElements(consumer, i)``
fused and recomputed per element (the plan records     -> no; for a fusion consumer
how often)                                             ``FusionReusesParamElements``
                                                       (``xla_rules.reused_by_broadcast``)
which ops are expensive: the generic list (divide,     ``InstructionFusion::IsExpensive`` (generic;
exp, log, power, tanh, sqrt, rsqrt...; not sine,       :func:`~astitch_sim.passes.analysis.is_expensive`, the op
cosine, tan on reals, nor an integer divide by a       table's ``cost`` and ``xla_cheap`` columns), then
constant scalar), less the GPU's cheap f32/f16 ops     ``GpuInstructionFusion::IsExpensive`` (the GPU's
of the chosen XLA version                              cheap ops: ``xla_rules.RULES``)
a reduce's result leaves its kernel                    ``gpu_fusible.cc``: a reduce fusion is fusible
                                                       only as a consumer (``IsInputFusibleReduction``)
sibling reduces of one input share a kernel            ``multi_output_fusion.cc``: ``GpuMultiOutputFusion
                                                       ::FuseSiblings`` with ``ShapesCompatibleFor
                                                       MultiOutputFusion`` (same reduced dims and shape)
sibling loop fusions of one shape that read a common   ``FuseSiblings`` (``IsSiblingFusionCandidate``; a
input share a kernel (an Adam step: one kernel)        scalar operand is not ``IsProfitableOperand``)
a loop fusion whose result another loop fusion of      ``GpuMultiOutputFusion::DoMultiOutputFusion``,
the same shape reads element for element becomes one   producer-consumer multi-output fusion
multi-output kernel with it
no multi-output fusion that would make a cycle         the ``reachability_`` checks in ``FuseSiblings``
at most 96 operands and outputs per fusion             ``gpu_fusible.cc``: ``FusionFitsInBudget``
                                                       (``kMaxOperandsAndOutputsPerFusion``)
=====================================================  ==================================================

What XLA does that is not modelled (epilogue fusion of reductions, Triton normalisation fusions,
``FusionMerger``, priority fusion's cost model): ``xla_rules.py``.

* ``tvm``: like xla, but an expensive op followed by a broadcast is fused into
  its consumers and recomputed per consumer element (the plan records how often);
  TVM inlines every injective producer into each consumer, so nothing is re-read.
  TVM has no notion of expensive ops; the op table's cost class (the paper's) only
  decides which recomputations the plan's notes point out.

The tvm rules, and where TVM states them (Relay's ``FuseOps`` pass,
``src/relay/transforms/fuse_ops.cc``, ``GraphPartitioner::RunFuse``, over the op patterns of
``include/tvm/relay/op_attr_types.h``: kElemWise < kBroadcast < kInjective < kCommReduce <
kOutEWiseFusable < kOpaque; and TOPI's schedules, which inline every injective stage of a fused
function into its consumer: ``schedule_injective``, ``traverse_inline`` with ``compute_inline``):

=====================================================  ==================================================
rule here                                              TVM
=====================================================  ==================================================
an elementwise or broadcast producer fuses into its    ``RunFuse``: a kElemWise/kBroadcast node fuses into
consumer, and into the reduce it feeds                 its post-dominator when every path is at most
                                                       kInjective and the sink is injective or kCommReduce
a reduce's result leaves its kernel                    ``RunFuse``: a kCommReduce group is never fused
                                                       into its post-dominator ("do nothing")
an expensive op followed by a broadcast is fused       inside one fused function the injective producer is
into the broadcast's consumers and evaluated once      ``compute_inline``-d into the broadcast's consumer,
per consumer element (the plan's recompute factor)     so it is evaluated per element (paper, Section 2)
no multi-output fusion of siblings: an Adam step is    ``FuseOps`` only merges a node into its
several kernels where XLA makes one                    post-dominator; it never fuses siblings
matrix products, sorts, scatters: kernels of their     kOpaque and kOutEWiseFusable ops are not fused as
own                                                    producers ("no actions for opaque nodes")
=====================================================  ==================================================

Where this model is the paper's TVM rather than ``FuseOps`` to the letter: a cheap producer read by
several kernels is recomputed in each (as XLA does), where ``FuseOps``, which never puts a node in two
groups, makes it a kernel of its own unless every path to its post-dominator stays injective.  On the
paper's Figure 7 that is the difference between the paper's 3 TVM kernels (power recomputed in both
consumers, which we reproduce) and the 4 a literal post-dominator partition would give.  ``FuseOps``'
cap of 256 ops per fused function (``kMaxFusedOps``) is not modelled.
"""
from __future__ import annotations

from ...passes.analysis import ancestors, boundary_source, is_boundary, is_free, must_materialise
from ...plan.boundary import sibling_key
from ..kernel_builder import assemble_kernel
from ...plan.plan import Plan, Stage
from . import fusion_ends
from .common import LOOP_BLOCK, closure, dependency_order, escapes_of, flat_mapping, fusible_stop, library_kernel, \
    max_reduction_slots, reduction_values, xla_reduce_mapping
from .common import is_work
from .register_only import POLICIES, RegisterOnlyPolicy
from .xla_rules import DEFAULT_RULES, NOTE_PREFIX as RULES_NOTE


def _initial_roots(graph, live, policy: RegisterOnlyPolicy, ends: dict | None = None) -> set:
    """The roots every kernel boundary starts from; ``ends`` (root -> [KernelEnd]) records the rule behind each."""
    ends = {} if ends is None else ends
    roots = set()

    def root(n, why):
        roots.add(n.name)
        ends.setdefault(n.name, []).append(why(policy, n))

    for n in graph.outputs:
        if n.op not in ("parameter", "constant"):
            root(n, fusion_ends.graph_output)
    for n in live:
        if n.op == "reduce":
            root(n, fusion_ends.reduce_result)
        elif is_boundary(n):
            roots.add(n.name)            # a library kernel: its reason is the library kernel's own
        if must_materialise(n) and not fusible_stop(n):
            root(n, fusion_ends.library_operand)     # a library kernel reads it from memory
        if policy.kernel_per_op and is_work(n):
            root(n, fusion_ends.one_op)
        elif policy.is_own_root(n):
            root(n, fusion_ends.expensive_reused)
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


def _settle_roots(graph, live, policy: RegisterOnlyPolicy, ends: dict | None = None) -> tuple[set, dict]:
    """Grow the root set until every producer two kernels compute is one the policy recomputes
    (``ends``: root -> [KernelEnd], the rule behind each root)."""
    ends = {} if ends is None else ends
    roots = _initial_roots(graph, live, policy, ends)
    while True:
        members = _members(graph, roots)
        count: dict[str, int] = {}
        for names in members.values():
            for n in names:
                count[n] = count.get(n, 0) + 1
        extra = set()
        for n, c in count.items():
            node = graph[n]
            if c > 1 and n not in roots and not is_free(node) and policy.shared_producer_is_root(node):
                extra.add(n)
                ends.setdefault(n, []).append(fusion_ends.shared_root(policy, node, c))
        if not extra:
            return roots, members
        roots |= extra


def _depends(graph, a: str, b: str, cache: dict) -> bool:
    """Does node ``a`` depend on node ``b`` (transitively)?"""
    return b in ancestors(graph[a], cache)


def _group_siblings(graph, order: list, members: dict, policy: RegisterOnlyPolicy, max_slots: int = 1 << 30) -> list:
    """XLA multi-output fusion: sibling reduces of one input share a kernel; so do the results of
    one library op (a sort's keys and values, top-k's values and indices).  No merge may make two
    kernels wait on each other (:class:`_KernelGraph`)."""
    groups: list[list[str]] = []
    cache: dict = {}
    library: dict = {}
    kernels = _KernelGraph(graph, members)
    for r in order:
        node = graph[r]
        home = None                       # the group r joins
        if is_boundary(node):
            key = sibling_key(node)
            if key in library:
                library[key].append(r)
            else:
                library[key] = [r]
                groups.append(library[key])
            kernels.place(r, library[key])
            continue
        if policy.multi_output_fusion and node.op == "reduce":       # TVM's FuseOps fuses no siblings
            for g in groups:
                first = graph[g[0]]
                if (first.op == "reduce" and first.operands[0].shape == node.operands[0].shape
                        and sum(reduction_values(graph[x]) for x in g) + reduction_values(node) <= max_slots
                        and first.attrs["dimensions"] == node.attrs["dimensions"]
                        and first.operands[0].layout == node.operands[0].layout
                        and _shares_input(graph, members, g, r)
                        and not any(_depends(graph, r, x, cache) or _depends(graph, x, r, cache) for x in g)
                        and not kernels.merge_makes_cycle(r, g)):
                    g.append(r)
                    home = g
                    break
        if home is None and policy.multi_output_fusion and is_loop_root(node):
            for g in groups:
                if _joins_loop_fusion(graph, members, g, r, cache) and not kernels.merge_makes_cycle(r, g):
                    g.append(r)
                    home = g
                    break
        if home is None:
            home = [r]
            groups.append(home)
        kernels.place(r, home)
    return groups


class _KernelGraph:
    """Which kernel (group of roots) reads which, as roots are placed in graph order.

    A kernel runs as a unit: it starts after every kernel whose results it reads has finished.  So
    merging root ``r``'s kernel into group ``g`` makes a cycle when ``r`` reads, directly or not, a
    kernel *other than* ``g`` that itself waits on ``g`` (optax.adafactor: a row sum and a column sum
    of one gradient, each scaled by a value from a kernel that waits on the other).  The check on
    single nodes misses it: the kernel in between is read through a value that depends on no root of
    ``g``, but its kernel computes another that does.  Roots are placed in graph order, so every
    kernel ``r`` reads is placed before ``r``, and nothing placed yet reads ``r``: a cycle can only
    close through ``r``'s own reads (XLA's ``FuseSiblings`` checks reachability the same way)."""

    def __init__(self, graph, members: dict):
        self.graph, self.members = graph, members
        self.group_of: dict = {}          # root -> the id of its group's list
        self.reads: dict = {}             # group id -> ids of the groups it reads

    def _reads_of(self, r) -> set:
        mine = set(self.members.get(r, [r]))
        return {self.group_of[o.name] for o in _read_values(self.graph, mine) if o.name in self.group_of}

    def _waits_on(self, start: set, target: int) -> bool:
        seen, stack = set(), list(start)
        while stack:
            k = stack.pop()
            if k == target:
                return True
            if k not in seen:
                seen.add(k)
                stack.extend(self.reads.get(k, ()))
        return False

    def merge_makes_cycle(self, r, g: list) -> bool:
        return self._waits_on(self._reads_of(r) - {id(g)}, id(g))

    def place(self, r, g: list) -> None:
        self.reads.setdefault(id(g), set()).update(self._reads_of(r) - {id(g)})
        self.group_of[r] = id(g)


#: XLA's ``kMaxOperandsAndOutputsPerFusion`` (gpu_fusible.cc): a fusion's parameters plus outputs
MAX_OPERANDS_AND_OUTPUTS = 96


def is_loop_root(node) -> bool:
    """A root whose kernel is an XLA loop fusion (elementwise over its own shape): no reduce, no library op."""
    return node.op != "reduce" and not is_boundary(node)


def _joins_loop_fusion(graph, members, group, r, cache) -> bool:
    """XLA's multi-output fusion of loop fusions (``GpuMultiOutputFusion``): may root ``r``'s kernel merge
    into ``group``'s?  Same shape (one loop over it), a common non-scalar input (siblings) or one reads
    another's result element for element (producer-consumer), no cycle through another kernel, and the
    fusion's operands and outputs within XLA's budget."""
    node = graph[r]
    if not all(is_loop_root(graph[x]) and tuple(graph[x].shape) == tuple(node.shape) for x in group):
        return False
    roots = set(group) | {r}
    ops = {n for x in roots for n in members[x]}
    outside = [o for o in _read_values(graph, ops) if o.name not in ops]
    if any(_depends(graph, o.name, x, cache) for o in outside if o.op not in ("parameter", "constant")
           for x in roots):
        return False                         # a value read from another kernel needs this one first: a cycle
    reads_root = [(graph[m], o) for x in roots for m in members[x] for o in graph[m].operands
                  if o.name in roots and o.name != x]
    if any(m.kind != "elementwise" or tuple(m.shape) != tuple(o.shape) for m, o in reads_root):
        return False                         # a root read at other elements than its own: not one loop
    if not (reads_root or _shares_input(graph, members, group, r, profitable_only=True)):
        return False
    return len({o.name for o in outside}) + len(roots) <= MAX_OPERANDS_AND_OUTPUTS


def _shares_input(graph, members, group, r, profitable_only: bool = False) -> bool:
    """Do ``r``'s kernel and one of ``group``'s read a common value?  ``profitable_only``: not counting
    scalars and broadcasts of scalars (XLA's ``IsProfitableOperand``: sharing them saves no traffic)."""
    def leaves(name):
        return {o.name for m in members[name] for o in graph[m].operands if o.name not in members[name]
                and not (profitable_only and (o.rank == 0 or o.size <= 1))}
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
    order = dependency_order(needs)
    if order is None:   # pragma: no cover - sibling fusion checks dependences
        raise AssertionError("fusion: kernels depend on each other in a cycle")
    return [groups[i] for i in order]


def partition_plan(graph, gpu, policy) -> Plan:
    """Build the Plan of a register-only strategy: ``policy`` is ``UNFUSED``, ``XLA`` or ``TVM``
    (``register_only.py``), or one of their names."""
    policy = POLICIES[policy] if isinstance(policy, str) else policy
    live = graph.live_nodes()
    position = {n.name: i for i, n in enumerate(graph)}
    root_ends: dict = {}
    roots, members = _settle_roots(graph, live, policy, root_ends)
    order = sorted(roots, key=position.get)
    groups = _order_groups(graph, _group_siblings(graph, order, members, policy, max_reduction_slots(gpu)),
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
            mapping = xla_reduce_mapping(head, gpu, [graph[r] for r in g],
                                         packed_rows=policy.rules is not None and policy.rules.packs_rows)
        else:
            mapping = flat_mapping(head.shape, LOOP_BLOCK)
        stage = Stage(dominant=g[-1], ops=ops, mapping=mapping)
        notes = _notes(graph, g, ops, roots, policy)
        k = assemble_kernel(graph, f"{policy.kernel_label}.{len(kernels)}:{g[-1]}", [stage], gpu,
                            escapes_of(graph, set(ops), read_elsewhere), stitch=False, notes=notes)
        k.ends = [e for r in g for e in root_ends.get(r, [])]
        kernels.append(k)
    plan_notes = [f"{policy.name}: {len(kernels)} kernels from roots " + ", ".join(order)]
    if policy.rules is not None:
        plan_notes.append(f"{RULES_NOTE} {policy.rules.name}: {policy.rules.title} ({policy.rules.source})")
    options = {} if policy.rules is None or policy.rules.name == DEFAULT_RULES else {"fusion_rules": policy.rules.name}
    return Plan(graph, policy.name, gpu, kernels, plan_notes, options=options)


def _notes(graph, group, ops, roots, policy: RegisterOnlyPolicy) -> list:
    notes = []
    head = graph[group[-1]]
    if len(group) > 1:
        what = "sibling reductions" if head.op == "reduce" else "loop fusions"
        notes.append(f"multi-output fusion of {what} {', '.join(group)}")
    if head.op == "reduce":
        notes.append(f"{head.name} ends the kernel: a reduce result leaves through global memory")
    elif policy.expensive_broadcast_ends_kernel and policy.ends_kernel_before_reuse(head):
        notes.append(f"{head.name} is expensive and broadcast: {policy.title} ends the kernel here")
    for n in ops:
        node = graph[n]
        if not policy.expensive_broadcast_ends_kernel and policy.ends_kernel_before_reuse(node) and n not in roots:
            notes.append(f"{n} is recomputed for every element of its broadcast ({policy.title})")
    return notes
