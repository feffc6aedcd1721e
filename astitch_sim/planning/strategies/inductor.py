"""Inductor: the fusion rules of ``torch.compile`` (PyTorch's TorchInductor with Triton kernels).

The comparison users make today.  Inductor fuses memory-intensive ops differently from the 2021 XLA
the paper measured, and several of AStitch's ideas are in it: a reduction and the pointwise ops around
it run in one kernel, and a short row stays in registers so its broadcast consumers (softmax, layer
norm) need no second pass over memory.  Where AStitch still differs: reductions over *different*
dimensions never share a kernel (a Triton program cannot wait for another: no grid barrier), a
reduction with few outputs is split into two kernels rather than over blocks of one, and independent
kernels are not packed (combo kernels are off by default).

How a plan is made (PyTorch ``torch/_inductor``; the versions read are named in :mod:`.inductor_rules`):

1. **Split reductions** (:mod:`.inductor_split`): a reduction with few outputs and a long reduced
   extent is written as two reductions (``ir.Reduction.create_multilayer``): two kernels.
2. **Scheduler nodes.**  Lowering inlines every pointwise op into its consumers; a value is *realized*
   (a buffer in memory) when it is a reduction's result, a graph output, read by a library op, or read
   by more than ``realize_reads_threshold`` (4) consumers.  Each realized value with the ops inlined
   into it is one scheduler node (``fusion.partition_plan`` under :data:`INDUCTOR`, which recomputes
   every other shared producer in each consumer).
3. **Fusion** (``Scheduler.fuse_nodes`` asking ``SIMDScheduling.can_fuse`` and ``InductorChoices.can_fuse``),
   node by node in graph order, each into the closest earlier kernel that accepts it and that it may run
   in (it reads nothing a later kernel computes) (:func:`can_fuse`, its table below).
4. **Reduction kernels**: one *loop* (stage) per reduction level -- a node that reads a reduction result
   of the kernel starts a new loop over the same rows; pointwise ops over the reduction's output run
   once per row after it (our epilogue).  Its hint (INNER for a row reduction, OUTER for a column one)
   and the persistent threshold decide:

   * **persistent** (reduced extent <= 1024 INNER, <= 64 otherwise): the row is one tile; every value a
     loop loaded or computed stays in the program's registers for the later loops (AStitch's
     hierarchical data reuse);
   * **looped**: the row is walked in RBLOCK chunks, once per loop, and each loop loads its inputs from
     global memory again and recomputes the pointwise ops it needs: those bytes are counted.

   Tile sizes and warps follow ``triton_heuristics`` (:mod:`.inductor_rules`); the tile maps onto the
   shared ``rows`` / ``columns`` thread mappings (threads along the row first, as Triton lays a tile out), and every kernel is built by the same
   ``kernel_builder.assemble_kernel`` every strategy uses.  Pointwise kernels use the loop block every
   register-only strategy uses (:data:`~.common.LOOP_BLOCK` threads).

======================================================  ===============================================
rule here                                               Inductor
======================================================  ===============================================
pointwise producers are inlined (recomputed) into       ``ir.Pointwise`` loaders inlined at lowering;
their consumers; a value read by more than 4            ``config.realize_reads_threshold`` (4): realized
consumers is stored once                                (``graph.py``, ``realize_hint``)
two reductions fuse only over the same iteration        ``SIMDScheduling.can_fuse``: reduce + reduce
space (same reduced elements, same outputs)             needs ``numel1 == numel2 and rnumel1 == rnumel2``
a pointwise node over a reduction's input fuses into    ``can_fuse``: ``numel1 == numel2 * rnumel2``
it (prologue, or a later loop of the kernel)            (``is_compatible`` ranges)
a pointwise node over a reduction's output fuses as     ``can_fuse``: ``numel1 == numel2``
its epilogue
pointwise nodes fuse when they have the same numel      ``can_fuse``: non-reduce pair, same numel/rnumel
nodes fuse only if they share data                      ``InductorChoices.can_fuse``: shared_data_score 0
                                                        -> no fusion
at most 64 nodes per kernel                             ``config.max_fusion_size``
a fusion that would need a grid barrier is refused      Triton programs do not synchronise; scheduler
(the value does not stay in its program)                ``can_fuse_vertical`` needs the consumer to read
                                                        the producer at the index it wrote
reduction hint INNER (contiguous) or OUTER              ``SIMDKernelFeatures.reduction_hint``,
                                                        ``Reduction.num_splits``
persistent reduction under 1024 (INNER) / 64            ``InductorChoices.should_use_persistent_
                                                        reduction``, ``config.triton.persistent_reductions``
tile: XBLOCK x RBLOCK, warps = tile / 128 in [2, 8]     ``triton_heuristics.triton_config_reduction``,
                                                        ``persistent_reduction``, ``reduction``
split into two kernels: few outputs, long rows          ``InductorChoices.reduction_split_factor``,
                                                        ``Reduction.create_multilayer``
a split f16/bf16 reduction keeps its partials in f32    ``create_multilayer_helper``: ``intermediate_dtype``
======================================================  ===============================================

**Modelled / not modelled.**  Modelled: the rules in the table, with Inductor's default config; autotuning
among the configs the heuristic lists (XBLOCK for a short persistent row), timed with the SIMT model's
formula (``fs_cost.estimate_us``) instead of on a GPU.  Not modelled: combo kernels (``config.combo_kernels``, off by default), mix-order
reductions (``config.triton.mix_order_reduction``: a row and a column reduction of one input fused,
newer Inductor), cooperative reductions and multi-kernel (off by default), Triton matmul templates and
their epilogue fusion (``max_autotune``: library kernels here, as cuBLAS calls are by default), loop
reordering and tiled (2-D) pointwise kernels, ``realize_opcount_threshold``, and the scheduler's global
ranking by ``score_fusion`` (a node joins the closest earlier kernel that accepts it, where Inductor
ranks every candidate pair by memory saved, then proximity).  A split's pieces are equal (Inductor masks a
ragged last piece); a split half-precision reduction's f32 result is narrowed by a convert node of its
own: the second kernel's epilogue where it is a graph output, else inlined into its readers' kernels,
which then read the f32 result (Inductor narrows as the second kernel stores: two bytes per output more
here, and split reductions have few outputs).  Triton keeps a persistent tile in registers however many
it takes; so do we (the kernel's register estimate grows with it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil
from typing import ClassVar

from ...passes.analysis import VIEW_OPS, classify_reduce
from ...errors import AStitchError
from ..kernel_builder import assemble_kernel
from ...plan.kernel_end import EndRule, KernelEnd, end
from ...plan.mapping import ThreadMapping
from ...plan.plan import Plan, Stage
from .common import LOOP_BLOCK, MAX_GRID, column_mapping, flat_mapping
from .fusion import partition_plan
from .fs_cost import estimate_us
from .inductor_rules import CONFIG, Hint, is_persistent, looped_config, num_warps, persistent_configs, \
    persistent_threshold, reduction_hint
from .inductor_split import split_reductions
from .register_only import RegisterOnlyPolicy

#: kernel name prefixes, as Inductor names its Triton kernels (pointwise, persistent, looped reduction)
LABEL = {"pointwise": "triton_poi", "persistent": "triton_per", "looped": "triton_red"}


@dataclass(frozen=True)
class InductorPolicy(RegisterOnlyPolicy):
    """Which values Inductor realizes: reduction results, outputs, library operands (the shared rules of
    ``partition_plan``) and a pointwise value read by more than ``realize_reads_threshold`` consumers;
    every other shared producer is inlined into each consumer (recomputed)."""

    SHARED_ROOT_RULE: ClassVar = EndRule.REALIZED     # why such a value ends its kernel (fusion_ends.shared_root)

    def shared_producer_is_root(self, node) -> bool:
        return len(node.users) > CONFIG["realize_reads_threshold"]


INDUCTOR = InductorPolicy("inductor", "Inductor", "node")


@dataclass
class SNode:
    """A scheduler node: one realized value (``root``) and the ops inlined into it (``ops``, topological)."""
    root: str
    ops: list
    reduce: object = None          # the reduce Node, for a reduction node
    ends: list = field(default_factory=list)   # why ``root`` is realized (KernelEnd, from partition_plan)

    def key(self, graph):
        """The iteration space: ``(domain shape, reduced dims, layout)`` of a reduction, the shape of a pointwise."""
        if self.reduce is not None:
            x = self.reduce.operands[0]
            return tuple(x.shape), tuple(sorted(self.reduce.attrs["dimensions"])), tuple(x.layout)
        return tuple(graph[self.root].shape)


@dataclass
class Fused:
    """A kernel being formed: its scheduler nodes and the role each plays (``loop`` or ``epilogue``)."""
    nodes: list = field(default_factory=list)
    roles: list = field(default_factory=list)
    ended: str = ""                # why its first node did not join an earlier kernel (a plan note)
    refused: list = field(default_factory=list)   # KernelEnd: a later node this kernel refused (can_fuse's why)

    @property
    def reduce(self):
        return next((n.reduce for n in self.nodes if n.reduce is not None), None)

    def ops(self) -> set:
        return {o for n in self.nodes for o in n.ops}


def _reads(graph, names) -> set:
    """Values the ops ``names`` read from outside themselves (non-scalar constants count; scalars do not)."""
    out = set()
    for n in names:
        for o in graph[n].operands:
            if o.name not in names and not (o.op == "constant" and o.rank == 0):
                out.add(o.name)
    return out


def can_fuse(graph, f: Fused, s: SNode) -> tuple[str, str]:
    """``(role, why)``: may scheduler node ``s`` join kernel ``f``?  role '' means no, and ``why`` says why
    in Inductor's words (``WhyNoFuse``); otherwise 'loop' or 'epilogue'."""
    if len(f.nodes) + 1 > CONFIG["max_fusion_size"]:
        return "", "exceeds max_fusion_size"
    mine = f.ops()
    if not (_reads(graph, set(s.ops)) & (mine | _reads(graph, mine))):
        return "", "no shared data"
    red = f.reduce
    if red is None and s.reduce is None:
        return ("loop", "") if s.key(graph) == f.nodes[0].key(graph) else ("", "numel/rnumel mismatch (non-reduce)")
    if red is None:
        domain = tuple(s.reduce.operands[0].shape)
        if all(n.key(graph) == domain for n in f.nodes):
            return "loop", ""
        return "", "nodes numel/rnumel incompatibility"
    rkey = SNode("", [], red).key(graph)
    if s.reduce is not None:
        return ("loop", "") if s.key(graph) == rkey else ("", "numel/rnumel mismatch (reduce)")
    if s.key(graph) == rkey[0]:
        return "loop", ""
    if s.key(graph) == tuple(red.shape) and _epilogue_ok(graph, f, s):
        return "epilogue", ""
    return "", "nodes numel incompatibility"


def _epilogue_ok(graph, f: Fused, s: SNode) -> bool:
    """Can ``s`` run once per output after the kernel's last loop: elementwise over the reduction's output
    shape, reading only values of that shape the kernel made (reduce results, epilogue values) or
    values from outside the kernel?"""
    tshape = tuple(f.reduce.shape)
    mine = f.ops()
    made = _per_output_values(graph, f)
    for n in s.ops:
        node = graph[n]
        if n in made:
            continue             # already computed once per output by the kernel: read, not recomputed
        if n in mine:
            return False
        if tuple(node.shape) != tshape and not (node.op == "broadcast" and node.operands[0].rank == 0) \
                and not (node.op == "constant" and node.rank == 0):
            return False
        if not (node.kind in ("elementwise", "broadcast", "source") or node.op in VIEW_OPS):
            return False         # a transpose, slice or gather would read other outputs than its own
        for o in node.operands:
            if o.name in mine and tuple(o.shape) != tshape:
                return False
    return True


def _per_output_values(graph, f: Fused) -> set:
    """Values the kernel computes once per output: its reduction results and epilogue ops."""
    out = {n.root for n in f.nodes if n.reduce is not None}
    for n, role in zip(f.nodes, f.roles):
        if role == "epilogue":
            out |= set(n.ops)
    return out


def _scheduler_nodes(graph, base: Plan) -> list:
    """The base plan's kernels as scheduler nodes (generated) or library kernels, in order."""
    out = []
    for k in base.kernels:
        if k.kind == "library":
            out.append(k)
            continue
        st = k.stages[0]
        node = graph[st.dominant]
        out.append(SNode(st.dominant, list(st.ops), node if node.op == "reduce" else None, list(k.ends)))
    return out


def _fuse(graph, items: list) -> list:
    """Scheduler fusion in graph order: each node joins the closest kernel before it that :func:`can_fuse`
    accepts and that it may run in -- it reads nothing a later kernel computes (so moving it there keeps
    every kernel after the kernels it reads).  Library kernels stay where they are."""
    out: list = []
    for it in items:
        if not isinstance(it, SNode):
            out.append(it)
            continue
        needs = _reads(graph, set(it.ops))
        why_not, refuser = "", None
        for j in range(len(out) - 1, -1, -1):
            k = out[j]
            made = k.ops() if isinstance(k, Fused) else set(k.outputs)
            if isinstance(k, Fused):
                role, why = can_fuse(graph, k, it)
                if role:
                    k.nodes.append(it)
                    k.roles.append(role)
                    break
                if not why_not:
                    why_not, refuser = f"{it.root} not fused with kernel of {k.nodes[-1].root}: {why}", k
                    refuser.refused.append(_not_fused(k.nodes[-1].root, it.root, why))
            if needs & made:
                out.append(Fused([it], ["loop"], why_not))
                break
        else:
            out.append(Fused([it], ["loop"], why_not))
    return out


def _not_fused(last: str, refused: str, why: str) -> KernelEnd:
    """The kernel ends at ``last``: the next scheduler node, ``refused``, could not join it (``why``)."""
    return end("Inductor", last, EndRule.NOT_FUSED, f"the next scheduler node, {refused}, is not fused into this "
               f"kernel: {why}")


def _kernel_ends(f: Fused, k) -> list:
    """Why kernel ``k`` (built from ``f``) ends: each realized value that leaves it, and the refusals."""
    out = set(k.outputs)
    return [e for n in f.nodes for e in n.ends if e.node in out] + list(f.refused)


# -- building a kernel ----------------------------------------------------------------------------------

@dataclass
class Decision:
    """What Inductor decides for one reduction kernel; its words go to the kernel's notes."""
    hint: Hint
    persistent: bool
    rnumel: int
    xblock: int
    rblock: int
    warps: int


def candidates(red) -> list:
    """The configs Inductor's heuristic lists for this reduction (``persistent_reduction`` / ``reduction``),
    each a :class:`Decision`; autotuning times them and keeps the fastest (:func:`_build`)."""
    x = red.operands[0]
    rnumel = x.size // max(1, red.size)
    hint = reduction_hint(red)
    if not is_persistent(rnumel, hint):
        xblock, rblock = looped_config(rnumel, hint)
        return [Decision(hint, False, rnumel, xblock, rblock, num_warps(xblock * rblock))]
    return [Decision(hint, True, rnumel, xb, rb, num_warps(xb * rb)) for xb, rb in persistent_configs(rnumel, red.size, hint)]


def reduction_mapping(red, gpu, d: Decision) -> ThreadMapping:
    """Inductor's tile on the shared mappings: a row reduction gets ``rows`` (a program per XBLOCK rows, its
    threads along the row first), a column reduction ``columns`` (32 column lanes, as every strategy's column
    mapping; Inductor's OUTER tile is XBLOCK columns x RBLOCK rows)."""
    threads = min(gpu.max_threads_per_block, d.warps * gpu.warp_size)
    rs = classify_reduce(red)
    x = red.operands[0]
    if rs.kind == "row":
        # Triton lays a program's XBLOCK x RBLOCK tile out along the contiguous reduced dim first: a warp
        # reads consecutive elements of a row; a program of fewer threads than its tile loops over its rows
        tpr = max(1, min(threads, d.rblock))
        probe = ThreadMapping("rows", x.shape, rs.groups, block=threads, grid=1, threads_per_row=tpr)
        grid = max(1, min(ceil(probe.rows / max(d.xblock, probe.rows_per_block)), MAX_GRID))
        return ThreadMapping("rows", x.shape, rs.groups, block=threads, grid=grid, threads_per_row=tpr)
    return column_mapping(red, gpu, block=threads, fill_blocks=1, combine="none")


def _stages(graph, f: Fused, d: Decision | None, mapping) -> list:
    """The kernel's loops: a node reading a reduction result or epilogue value of the current loop starts
    the next loop; epilogue nodes run after the current loop's reductions.  Persistent (or pointwise):
    a value is computed once and later loops read it from registers.  Looped: each loop recomputes the
    inlined ops and the kernel's realized pointwise values it needs (they are not kept between loops)."""
    if d is None:                 # a pointwise kernel: one loop over its elements
        ops = sorted({o for n in f.nodes for o in n.ops}, key=_position(graph).get)
        return [Stage(dominant=f.nodes[-1].root, ops=ops, mapping=mapping)]
    pos = _position(graph)
    by_root = {n.root: n for n in f.nodes}
    stages: list = []             # [ops set, epilogue list, per-task values of this loop]
    done: set = set()             # ops computed in an earlier loop
    domain = tuple(f.reduce.operands[0].shape)

    def needed(s: SNode) -> set:
        """Ops of a loop computing ``s``: its own; for a looped kernel also the realized pointwise roots of
        the kernel it reads, with theirs (recomputed: not kept between loops)."""
        want, stack = set(s.ops), list(s.ops)
        while stack and not d.persistent:
            for o in graph[stack.pop()].operands:
                r = by_root.get(o.name)
                if r is not None and r.reduce is None and o.name not in want and o.name not in epi_values:
                    want |= set(r.ops)
                    stack.extend(r.ops)
        return want

    epi_values: set = set()
    for s, role in zip(f.nodes, f.roles):
        if role == "epilogue":
            made = epi_values | {o for st in stages for o in st[0] if graph[o].op == "reduce"}
            # once per output, after the last loop that reduces: a loop after it (over the elements, reading
            # the results) has no tasks to run an epilogue over
            home = next(st for st in reversed(stages) if any(graph[o].op == "reduce" for o in st[0]))
            home[1].extend(o for o in s.ops if o not in made)
            home[2].update(s.ops)
            epi_values.update(s.ops)
            continue
        reads = _reads(graph, set(s.ops))
        if not stages or reads & stages[-1][2]:
            if stages:
                done |= stages[-1][0]
            stages.append([set(), [], set()])
        ops = needed(s) - epi_values          # a value an epilogue made once per output is read, not recomputed
        if d.persistent:
            ops = {o for o in ops if o not in done or (graph[o].op != "reduce" and tuple(graph[o].shape) != domain)}
        stages[-1][0] |= ops
        stages[-1][2].update(o for o in s.ops if graph[o].op == "reduce")
    out = []
    for ops, epi, _ in stages:
        order = sorted(ops, key=pos.get)
        reds = [o for o in order if graph[o].op == "reduce"]
        out.append(Stage(dominant=reds[-1] if reds else order[-1], ops=order, mapping=mapping, epilogue=epi))
    return out


def _position(graph) -> dict:
    return {n.name: i for i, n in enumerate(graph)}


def readers(graph, items: list) -> dict:
    """Realized value -> the scheduler nodes (by root) and library kernels (by name) that read it from memory."""
    out: dict = {}
    for it in items:
        if isinstance(it, SNode):
            for v in _reads(graph, set(it.ops)):
                out.setdefault(v, set()).add(it.root)
        else:
            for v in list(it.inputs) + list(it.views.values()):
                out.setdefault(v, set()).add(it.name)
    return out


def _escapes(graph, f: Fused, read_by: dict) -> set:
    """Realized values of the kernel that a scheduler node of another kernel reads, or graph outputs
    (Inductor removes the buffers only its own kernel reads: ``remove_kernel_local_buffers``)."""
    outs = {o.name for o in graph.outputs}
    inside = {n.root for n in f.nodes}
    return {r for r in inside if r in outs or read_by.get(r, set()) - inside}


def _build(graph, gpu, f: Fused, read_by: dict, index: int):
    """The kernel for ``f``: ``(kernel, None)``, or ``(None, why)`` when Inductor could not make it one.

    A reduction kernel with several configs on offer is autotuned: each is built and priced with the SIMT
    model's formula (``fs_cost.estimate_us``, the estimate FusionStitching's search uses), the fastest kept."""
    red = f.reduce
    if red is None:
        return _build_one(graph, gpu, f, read_by, index, None)
    configs = candidates(red)
    built = [_build_one(graph, gpu, f, read_by, index, d) for d in configs]
    ok = [(k, d) for (k, _), d in zip(built, configs) if k is not None]
    if not ok:
        return built[0]
    if len(built) == 1:
        return ok[0][0], None
    priced = sorted(((estimate_us(graph, gpu, k), i, k, d) for i, (k, d) in enumerate(ok)), key=lambda t: t[:2])
    best, chosen = priced[0][2], priced[0][3]
    best.notes.append("inductor: autotuned among " + ", ".join(
        _config_words(d, k, us) for us, _, k, d in sorted(priced, key=lambda t: t[1]))
        + f": {_config_words(chosen, best)} kept (timed by the SIMT model's formula)")
    return best, None


def _config_words(d: Decision, k, us: float | None = None) -> str:
    """A config as the autotuning note names it: Triton's tile and the launch it maps to (configs whose tiles
    differ can map to one launch: 32 short rows fill a 32-thread block whatever XBLOCK says)."""
    kind = "persistent" if d.persistent else "looped"
    timed = "" if us is None else f", {us:.2f} us"
    return f"{kind} XBLOCK {d.xblock} x RBLOCK {d.rblock} (grid {k.grid} x block {k.block}{timed})"


def _build_one(graph, gpu, f: Fused, read_by: dict, index: int, d: Decision | None):
    if d is None:
        mapping = flat_mapping(graph[f.nodes[0].root].shape, LOOP_BLOCK)
        kind = "pointwise"
    else:
        mapping = reduction_mapping(f.reduce, gpu, d)
        kind = "persistent" if d.persistent else "looped"
    stages = _stages(graph, f, d, mapping)
    notes = _kernel_notes(f, d, stages)
    cap = gpu.max_registers_per_thread if (d is not None and d.persistent) else 0
    try:
        k = assemble_kernel(graph, f"{LABEL[kind]}.{index}:{stages[-1].dominant}", stages, gpu,
                            _escapes(graph, f, read_by), stitch=len(stages) > 1, notes=notes,
                            register_values_cap=cap if len(stages) > 1 else None,
                            keep_inputs=bool(d is not None and d.persistent))
    except AStitchError as e:
        return None, str(e)
    if k.global_barriers:
        return None, "a value would cross programs (a grid barrier; Triton programs do not synchronise)"
    k.ends = _kernel_ends(f, k)
    return k, None


def _kernel_notes(f: Fused, d: Decision | None, stages: list) -> list:
    notes = []
    if len(f.nodes) > 1:
        parts = [n.root + (" (epilogue)" if r == "epilogue" else "") for n, r in zip(f.nodes, f.roles)]
        notes.append(f"inductor: scheduler nodes fused into one kernel: {', '.join(parts)}")
    if d is not None:
        thr = persistent_threshold(d.hint)
        tile = f"XBLOCK {d.xblock} x RBLOCK {d.rblock}, {d.warps} warps"
        if d.persistent:
            notes.append(f"inductor: persistent reduction ({d.rnumel} reduced elements <= {thr}, hint {d.hint.value}; "
                         f"{tile}): the row is one tile, loaded once and kept in registers for "
                         f"{'its ' + str(len(stages)) + ' loops' if len(stages) > 1 else 'its loop'}")
        else:
            notes.append(f"inductor: looped reduction ({d.rnumel} reduced elements > {thr}, hint {d.hint.value}; "
                         f"{tile}): " + (f"{len(stages)} loops over the row, each loading its inputs from global "
                                         "memory again" if len(stages) > 1 else "one loop over the row"))
    if f.ended:
        notes.append(f"inductor: {f.ended}")
    return notes


def _build_all(graph, gpu, f: Fused, read_by: dict, kernels: list, notes: list) -> None:
    """Build ``f``; if Inductor could not make it one kernel, cut it before the node that breaks it."""
    k, why = _build(graph, gpu, f, read_by, len(kernels))
    if k is not None:
        kernels.append(k)
        return
    cut = 1
    for i in range(1, len(f.nodes)):
        if _build(graph, gpu, Fused(f.nodes[:i + 1], f.roles[:i + 1]), read_by, 0)[0] is None:
            break
        cut = i + 1
    head = Fused(f.nodes[:cut], f.roles[:cut], f.ended, [_not_fused(f.nodes[cut - 1].root, f.nodes[cut].root, why)])
    notes.append(f"inductor: {f.nodes[cut].root} not fused with {f.nodes[0].root}: {why}")
    k, why2 = _build(graph, gpu, head, read_by, len(kernels))
    if k is None:          # pragma: no cover - a single scheduler node always builds (it is XLA's kernel)
        raise AStitchError(f"inductor: cannot build a kernel for {f.nodes[0].root}: {why2}")
    kernels.append(k)
    rest = _fuse(graph, f.nodes[cut:])
    rest[0].ended = f"{f.nodes[cut].root} not fused with kernel of {f.nodes[cut - 1].root}: {why}"
    for sub in rest:
        _build_all(graph, gpu, sub, read_by, kernels, notes)


def inductor_plan(graph, gpu, _options=None) -> Plan:
    """The Inductor plan of ``graph`` (see the module docstring)."""
    graph, split_notes = split_reductions(graph, gpu)
    base = partition_plan(graph, gpu, INDUCTOR)
    items = _scheduler_nodes(graph, base)
    roots = {it.root for it in items if isinstance(it, SNode)}
    read_by = readers(graph, items)
    kernels: list = []
    notes: list = list(split_notes)
    for it in _fuse(graph, items):
        if isinstance(it, Fused):
            _build_all(graph, gpu, it, read_by, kernels, notes)
        else:
            it.name = f"library.{len(kernels)}:{it.library_op}"
            kernels.append(it)
    gen = [k for k in kernels if k.kind == "generated"]
    per = sum(k.name.startswith(LABEL["persistent"]) for k in gen)
    red = sum(k.name.startswith(LABEL["looped"]) for k in gen)
    notes.insert(0, f"inductor: {len(gen)} generated kernels ({per} persistent reductions, {red} looped reductions, "
                    f"{len(gen) - per - red} pointwise) from {len(roots)} scheduler nodes; not modelled: autotuning, "
                    "combo kernels (off by default), mix-order reductions, Triton matmul templates")
    return Plan(graph, "inductor", gpu, kernels, notes)
