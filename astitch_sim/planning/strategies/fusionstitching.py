"""FusionStitching (Zheng et al., 2020): AStitch's predecessor, fusion decided by *search* with a cost model.

AStitch decides by rules (dominant ops, block-locality, assume-relax-apply).
Its predecessor explored "large fusion spaces to decide optimal fusion plans
with considerations of memory access costs, kernel calls and resource usage
constraints" and "tuned the optimal stitching scheme just-in-time with a
domain-specific cost model".  It stitched through registers and shared memory
only: no Global scheme, no grid barrier.  This module plays that game:

1. **Start from XLA's boundaries.**  XLA's kernels (``strategies/fusion.py``)
   are the atoms; keeping all of them is always a candidate, so the result is
   never worse than XLA by the cost model.
2. **Fusion exploration.**  Along the kernel sequence (topological order), a
   *fusion pattern* is a run of up to ``max_merge`` consecutive XLA kernels
   stitched into one kernel: producer -> consumer merges and independent ops
   packed side by side.  An elementwise kernel over a reduction's result runs
   in that reduction's epilogue (once per row); an elementwise kernel over a
   reduction's domain adopts its thread mapping, so what it reads from the
   reduction is in its own block's shared memory.  A pattern is legal only if
   every value crossing its stages stays in registers or shared memory (no grid
   barrier) and its shared memory fits the per-block budget.  Dynamic
   programming over the sequence picks the cheapest cover by patterns, keeping
   the ``beam_width`` best partial plans per position; a pattern that is
   illegal is not extended further (the *approximate* part), and exploration
   stops growing patterns once ``search_budget`` schedules are priced (a count
   of work, not a clock: the same input gives the same plan on every machine).
3. **Schedule tuning.**  Each pattern is built under several schedules (block
   sizes; rows packed several to a block, or one row per block) and priced by
   the delta cost model (:mod:`.fs_cost`: the SIMT model's formula on
   estimated counters).  Where each value lives follows from the schedule
   (``kernel_builder``: registers, shared memory, or illegal).
4. **Recorded.**  ``plan.search`` holds every pattern's schedules with their
   predicted times and the verdicts, and the beam's alternatives
   (:mod:`astitch_sim.plan.search_record`); ``print(plan)`` shows them.

Where rules beat this search: a reduction whose consumers read across blocks
(a column sum broadcast back along rows, Figure 7's ``reduce.2``) needs the
Global scheme and a grid barrier, which FusionStitching lacks -- the kernel
ends there.  Where the search beats rules: it prices alternatives AStitch's
rules never consider (one row per block when rows are long, smaller blocks for
many tiny independent kernels) and keeps XLA's split reductions when they are
faster than one stitched kernel.
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil
from time import perf_counter

from ...passes.analysis import VIEW_OPS
from ...errors import AStitchError
from ...ir.dtypes import itemsize
from ..kernel_builder import assemble_kernel, reduction_slots
from ...plan.mapping import ThreadMapping
from ...plan.plan import Kernel, Plan, Stage
from ...plan.search_record import KernelSearch, PartitionCandidate, ScheduleCandidate, SearchRecord
from .common import MAX_GRID, next_pow2, prev_pow2
from .fs_cost import estimate_us
from .fs_options import FusionStitchingOptions
from .fs_ends import search_end
from .fusion import partition_plan
from .register_only import XLA

ROW_MODES = ("rows packed", "one row per block")


def _row_threads(cols: int, block: int, mode: str) -> int:
    if mode == "one row per block":
        return block
    return min(block, prev_pow2(cols) if cols >= 32 else next_pow2(cols))


class _Stage:
    """A stage under construction: XLA kernel's ops, plus an epilogue of ops moved onto its reductions."""

    def __init__(self, src: Stage, graph):
        self.dominant, self.ops, self.epilogue = src.dominant, list(src.ops), []
        self.kind, self.domain, self.groups = src.mapping.kind, src.mapping.domain, src.mapping.groups
        self.reduces = [n for n in src.ops if graph[n].op == "reduce"]
        if not self.reduces and self.kind != "flat":
            self.kind = "flat"
            self.groups = (tuple(range(len(self.domain))),)


_EPILOGUE_KINDS = ("elementwise",)


def _epilogue_target(graph, stages: list, src: Stage):
    """The earlier reduction stage whose epilogue can run ``src``'s ops (once per reduced row), or None."""
    if src.mapping.kind != "flat" and any(graph[n].op == "reduce" for n in src.ops):
        return None
    for t in reversed(stages):
        if not t.reduces:
            continue
        tshape = tuple(graph[t.reduces[0]].shape)
        if tuple(src.mapping.domain) != tshape:
            continue
        mine = set(src.ops)
        ok_inputs = set(t.reduces) | set(t.epilogue) | mine
        computed = {n for s in stages for n in list(s.ops) + list(s.epilogue)}
        for n in src.ops:
            node = graph[n]
            fits = (node.kind in _EPILOGUE_KINDS and tuple(node.shape) == tshape) or \
                (node.op == "broadcast" and node.operands[0].rank == 0) or \
                (node.op in VIEW_OPS and tuple(node.shape) == tshape)
            if not fits:
                return None
            for o in node.operands:
                if o.op == "constant" and o.rank == 0:
                    continue
                if o.name not in ok_inputs and o.name in computed:
                    return None
        return t
    return None


def _stages_of(graph, seg: list) -> list:
    stages: list = []
    for k in seg:
        src = k.stages[0]
        t = _epilogue_target(graph, stages, src) if len(seg) > 1 else None
        if t is not None:
            t.epilogue.extend(n for n in src.ops if n not in t.epilogue)
            continue
        stages.append(_Stage(src, graph))
    return stages


def _probe(st: _Stage) -> ThreadMapping:
    return ThreadMapping(st.kind, st.domain, st.groups, block=32, grid=1, threads_per_row=1 if st.kind != "columns"
                         else 32)


def _mappings(stages: list, block: int, mode: str) -> list:
    """One schedule's thread mappings: reductions mapped by ``block``/``mode``, elementwise stages over a
    reduction's domain adopt its mapping (what they read from it stays in their block), the rest flat;
    one grid for all, as many blocks as the largest stage needs."""
    plan, natural, owner = [], [], {}
    for st in stages:
        p = _probe(st)
        if st.kind == "rows":
            tpr = _row_threads(p.cols, block, mode)
            plan.append(("rows", tpr, st))
            natural.append(ceil(p.rows / (block // tpr)))
            owner.setdefault(st.domain, len(plan) - 1)
        elif st.kind == "columns":
            lanes = min(32, block)
            plan.append(("columns", lanes, st))
            natural.append(ceil(p.rows / lanes))
            owner.setdefault(st.domain, len(plan) - 1)
        elif st.domain in owner:
            plan.append(("adopt", owner[st.domain], st))
        else:
            plan.append(("flat", 0, st))
            natural.append(ceil(p.size / block))
    grid = max(1, min(max(natural, default=1), MAX_GRID))
    out = []
    for kind, arg, st in plan:
        if kind == "adopt":
            out.append(out[arg])
        else:
            out.append(ThreadMapping(kind, st.domain, st.groups, block=block, grid=grid, threads_per_row=arg))
    return out


def _build(graph, gpu, stages: list, mappings: list, escapes: set, name: str):
    """Stitch ``stages`` into one kernel under one schedule: ``(kernel, None)`` or ``(None, why)``."""
    built = [Stage(dominant=st.dominant, ops=list(st.ops), mapping=m, epilogue=list(st.epilogue))
             for st, m in zip(stages, mappings)]
    try:
        k = assemble_kernel(graph, name, built, gpu, escapes, stitch=True)
    except AStitchError as e:
        return None, f"illegal: {e}"
    if k.global_barriers:
        crossing = sorted(v.node for v in k.values.values() if v.stage >= 0 and v.scheme == "global")
        return None, ("illegal: " + (", ".join(crossing[:3]) or "a value") +
                      " would cross blocks (Global scheme + grid barrier: FusionStitching has neither)")
    if k.shared_bytes > gpu.shared_per_block_default:
        return None, (f"illegal: {k.shared_bytes} B of shared memory per block, over the "
                      f"{gpu.shared_per_block_default // 1024} KiB budget")
    try:
        gpu.blocks_per_wave(k.block, k.shared_bytes, k.registers_per_thread)
    except AStitchError as e:
        return None, f"illegal: {e}"
    return k, None


def _sketch(graph, k0: Kernel, mappings: list) -> Kernel:
    """``k0`` (built under one schedule) re-priced under other mappings: every value stays where ``k0``
    put it (the adopted mappings keep shared values in their block), shared memory re-sized per block.
    Only for pricing: the winner is built for real."""
    stages = [replace(s, mapping=m) for s, m in zip(k0.stages, mappings)]
    for s in stages:
        s._graph = graph
    shared = 0
    for v in k0.values.values():
        if v.space == "shared" and v.stage >= 0:
            m = mappings[v.stage]
            per = m.rows_per_block * m.task_iterations if m.kind == "rows" else m.threads_per_row * m.task_iterations
            shared += per * itemsize(graph[v.node].dtype)
    shared += max((reduction_slots(graph, s) * s.mapping.block * 8 for s in stages), default=0)
    return replace(k0, stages=stages, grid=mappings[0].grid, block=mappings[0].block, shared_bytes=shared)


def _schedules(stages: list, opts: FusionStitchingOptions) -> list:
    """(block, row mode) pairs worth pricing: one row per block only where a row is at least a block long."""
    cols = [_probe(st).cols for st in stages if st.kind == "rows"]
    out = []
    for b in opts.block_sizes:
        out.append((b, ROW_MODES[0]))
        if cols and any(_row_threads(c, b, ROW_MODES[0]) < b <= c for c in cols):
            out.append((b, ROW_MODES[1]))
    return out


def _schedule_name(block: int, mode: str, stages: list) -> str:
    return f"block {block}" + (f", {mode}" if any(st.kind == "rows" for st in stages) else "")


class _Search:
    def __init__(self, graph, gpu, base: Plan, opts: FusionStitchingOptions, start: float):
        self.graph, self.gpu, self.base, self.opts = graph, gpu, base, opts
        self.start = start
        self.patterns = self.schedules = 0
        self.budget_hit = False
        self.readers: dict = {}
        for i, k in enumerate(base.kernels):
            for n in list(k.inputs) + list(k.views.values()):
                self.readers.setdefault(n, set()).add(i)
        self.outputs = {o.name for o in graph.outputs}
        self.xla_us = {i: estimate_us(graph, gpu, k) for i, k in enumerate(base.kernels) if k.kind == "generated"}
        self.schedules += len(self.xla_us)

    def over_budget(self) -> bool:
        """Has the search priced ``search_budget`` schedules?  A count, not a clock: deterministic."""
        if self.schedules >= self.opts.search_budget:
            self.budget_hit = True
        return self.budget_hit

    def escapes(self, idx: list) -> set:
        inside = set(idx)
        out = set()
        for i in idx:
            for n in self.base.kernels[i].outputs:
                if n in self.outputs or self.readers.get(n, set()) - inside:
                    out.add(n)
        return out

    def pattern(self, idx: list):
        """Best schedule of the pattern ``idx`` (XLA kernel indices): ``(us, kernel, candidates)``.

        The pattern is built once (where each value lives, whether it is legal), every schedule is
        priced on that build, and the cheapest is built for real (its price then exact); where that build
        is illegal (a reduction whose readers it would spread over blocks), the next cheapest, until one is
        legal: a pattern is illegal only if every schedule is."""
        self.patterns += 1
        seg = [self.base.kernels[i] for i in idx]
        if len(idx) == 1 and self.over_budget():
            # budget spent: XLA's kernel stays as it is (re-tuning it is what the budget cuts first)
            return self.xla_us[idx[0]], seg[0], [ScheduleCandidate("XLA's own kernel", self.xla_us[idx[0]], "chosen")]
        stages = _stages_of(self.graph, seg)
        scheds = _schedules(stages, self.opts)
        escapes = self.escapes(idx)
        cands: list = []
        if len(idx) == 1:
            cands.append(ScheduleCandidate("XLA's own kernel", self.xla_us[idx[0]], ""))
        canon = (self.opts.block_sizes[-1], ROW_MODES[0])
        k0, why = _build(self.graph, self.gpu, stages, _mappings(stages, *canon), escapes, "candidate")
        self.schedules += 1
        priced = []
        for block, mode in scheds:
            label = _schedule_name(block, mode, stages)
            if k0 is None:
                cands.append(ScheduleCandidate(label, None, why))
                continue
            us = estimate_us(self.graph, self.gpu, _sketch(self.graph, k0, _mappings(stages, block, mode)))
            self.schedules += 1
            cands.append(ScheduleCandidate(label, us, ""))
            priced.append((us, len(cands) - 1, block, mode))
        best = (None, None, None)
        if len(idx) == 1:
            best = (self.xla_us[idx[0]], seg[0], 0)
        bar = best[0] * (1.0 - self.opts.min_gain) if best[0] is not None else None
        for us, j, block, mode in sorted(priced):      # cheapest first, until one is legal
            if bar is not None and us >= bar:
                break
            k, why2 = (k0, None) if (block, mode) == canon else \
                _build(self.graph, self.gpu, stages, _mappings(stages, block, mode), escapes, "candidate")
            if k is None:
                cands[j].verdict, cands[j].predicted_us = why2, None
                continue
            exact = estimate_us(self.graph, self.gpu, k)
            cands[j].predicted_us = exact
            if bar is None or exact < bar:
                best = (exact, k, j)
                break
        if best[0] is None:
            return None, None, cands
        for j, c in enumerate(cands):
            if c.predicted_us is not None and not c.verdict:
                c.verdict = "chosen" if j == best[2] else (
                    f"{c.predicted_us / best[0]:.2f}x the winner" if c.predicted_us >= best[0] else
                    f"faster by less than min_gain={self.opts.min_gain:g}: XLA's kernel kept")
        return best[0], best[1], cands

    def run(self, idx: list) -> tuple:
        """Dynamic programming over the kernel run ``idx``: the best cover by fusion patterns, and the beam."""
        n = len(idx)
        beam: list = [[(0.0, [])]] + [[] for _ in range(n)]
        info: dict = {}
        guard = 1.0 + self.opts.min_gain
        for j in range(1, n + 1):
            for i in range(j - 1, max(-1, j - 1 - self.opts.max_merge), -1):
                if i < j - 1 and self.over_budget():
                    break
                key = (i, j)
                if key not in info:
                    info[key] = self.pattern(idx[i:j])
                us = info[key][0]
                if us is None:
                    break            # a pattern that cannot be stitched is not extended further back
                price = us * (guard if j - i > 1 else 1.0)
                for cost, cuts in beam[i]:
                    beam[j].append((cost + price, cuts + [(i, j)]))
            beam[j] = sorted(beam[j], key=lambda t: t[0])[:self.opts.beam_width]
        raw = [(sum(info[c][0] for c in cuts), cuts) for _, cuts in beam[n]]
        return raw, info


def fusionstitching_plan(graph, gpu, opts: FusionStitchingOptions = FusionStitchingOptions()) -> Plan:
    """The FusionStitching plan of ``graph``: XLA's kernels, stitched where the cost model says it pays."""
    start = perf_counter()                     # for the record only: the budget counts schedules priced
    base = partition_plan(graph, gpu, XLA)
    search = _Search(graph, gpu, base, opts, start)
    runs, cur = [], []
    for i, k in enumerate(base.kernels):
        if k.kind == "generated":
            cur.append(i)
        else:
            if cur:
                runs.append(cur)
            runs.append([i])
            cur = []
    if cur:
        runs.append(cur)

    kernels, records, alternatives = [], [], []
    chosen_total = 0.0
    for run in runs:
        if base.kernels[run[0]].kind == "library":
            k = base.kernels[run[0]]
            k.name = f"library.{len(kernels)}:{k.library_op}"
            kernels.append(k)
            continue
        beam, info = search.run(run)
        alternatives.append(beam)
        cost, cuts = beam[0]
        for i, j in cuts:
            us, k, cands = info[(i, j)]
            parts = [base.kernels[x] for x in run[i:j]]
            chosen_total += us
            kept = j - i == 1 and k is parts[0]
            label = "fusion" if kept else "fstitch"
            k.name = f"{label}.{len(kernels)}:{k.stages[-1].dominant}"
            if kept:
                why = "XLA's kernel kept: no schedule beats it" + (
                    f" by min_gain={opts.min_gain:g}" if len(cands) > 1 else "")
            else:
                xla = sum(search.xla_us[x] for x in run[i:j])
                why = (f"fastest of {sum(c.predicted_us is not None for c in cands)} legal schedules: "
                       f"{us:.2f} us vs {xla:.2f} us for the {j - i} XLA kernel(s) it replaces")
                k.notes.append(f"fusionstitching: stitched from XLA kernels {', '.join(p.name for p in parts)}; {why}")
            records.append(KernelSearch(k.name, [p.name for p in parts], cands, why))
            k.ends = [search_end(base, run, info, i, j, opts, search.budget_hit)]
            kernels.append(k)
    generated = [k for k in kernels if k.kind == "generated"]
    xla_total = sum(search.xla_us.values())
    alt = _combine_alternatives(alternatives, opts.beam_width)
    record = SearchRecord(xla_kernels=len(search.xla_us), xla_us=round(xla_total, 4), chosen_us=round(chosen_total, 4),
                          patterns_scored=search.patterns, schedules_scored=search.schedules,
                          elapsed_ms=round((perf_counter() - search.start) * 1e3, 2), budget_hit=search.budget_hit,
                          kernels=records, alternatives=alt)
    notes = [f"fusionstitching: {len(generated)} generated kernels (XLA: {len(search.xla_us)}); "
             f"{search.patterns} fusion patterns and {search.schedules} schedules scored in {record.elapsed_ms:.0f} ms; "
             f"cost model: {chosen_total:.2f} us vs XLA's {xla_total:.2f} us"]
    plan = Plan(graph, "fusionstitching", gpu, kernels, notes, options=opts.changed())
    plan.search = record.to_dict()
    return plan


def _combine_alternatives(per_run: list, width: int) -> list:
    """Whole-graph alternatives from each run's beam: the best plan, then one run at a time switched."""
    if not per_run:
        return []
    best = [beam[0] for beam in per_run]
    total = sum(c for c, _ in best)
    combos = [(total, best)]
    for r, beam in enumerate(per_run):
        for alt in beam[1:]:
            combos.append((total - best[r][0] + alt[0], best[:r] + [alt] + best[r + 1:]))
    combos.sort(key=lambda t: t[0])
    out = []
    for cost, choice in combos[:width]:
        groups = [j - i for _, cuts in choice for i, j in cuts]
        out.append(PartitionCandidate(groups, len(groups), round(cost, 4)))
    return out
