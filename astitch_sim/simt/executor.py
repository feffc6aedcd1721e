"""``simulate(plan, inputs)``: run a Plan on the SIMT model -- values, counters, timeline, trace.

The executor *follows* the plan and decides nothing.  Kernel by kernel, stage
by stage, it does what ``plan.py``'s docstring says a stage does:

1. every element of the stage's domain goes to the (block, thread, iteration)
   its ``ThreadMapping.locate`` names (``geometry.py``);
2. the stage's ops are evaluated there by index propagation (``evaluate.py``);
   operands come from where the plan's ``Value`` says they live -- kernel inputs
   and Global values from global buffers, Regional values from the consumer's
   *own* block's shared memory (slot per ``Value.offset`` and the producer's
   layout), cross-stage Local values from the consumer thread's *own* registers.
   So a wrong plan (a value read by a block that never produced it) gives wrong
   numbers, not silently right ones;
3. reduces accumulate per thread, combine across the task's threads, then across
   split blocks (``reduce.py``);
4. the epilogue runs once per task in each split block, on the task's first thread;
5. values are stored where they live; outputs are written;
6. barriers are counted (and, in trace mode, ordered: races are found).

Every load and store is counted on the way.  Where each ``StageStats`` counter
is defined:

* memory (global bytes/sectors/requests, atomics, shared bytes and bank
  conflicts, register reuse): ``memory.py``;
* ``flops``: an elementwise op's ``OpDef.flops`` once per domain element that
  evaluates it (so a broadcast Local op recomputed per element counts every
  time); a reduce 1 per input element + ``lanes - 1`` per task and split block
  (the tree) + 1 per task and split block (folding into the result); epilogue
  ops once per task per split block.  ``expensive_flops``: the part in ops whose
  cost class is expensive.  ``recomputed_flops``: ``(f-1)/f`` of an op the plan
  says is computed ``f`` times per value (``Stage.recompute``), all of a copy of
  an op another stage of the kernel computes, ``(s-1)/s`` of a split task's
  epilogue (run in each of its ``s`` blocks);
* ``block_barriers``: one per block at a ``barrier_after="block"``;
  ``grid_barriers``: one per ``barrier_after="grid"``, and one per stage whose
  split reductions need the grid to meet (``sync_after_combine``, or
  ``combine="grid_barrier"``) -- the same count as ``Kernel.global_barriers``;
  ``tree_barriers``: ``steps + 1`` per block per task trip of a reduction tree;
  ``shuffles``: a shuffle reduction's ``shfl_xor`` steps (both butterflies) per warp
  per task trip, two per 8-byte value; ``shuffle_barriers``: one per block per task
  trip of a shuffle stage whose tasks span warps (its warp totals: one 4- or 8-byte
  store per warp and value, and in every warp each aligned group of ``P`` lanes (``W``
  rounded up to a power of two) reads them back into its lanes ``0..W-1``, so that every
  lane ends with the total: one request per warp and value bringing the ``W`` consecutive
  words, which the groups share (a broadcast; counted once per warp), no bank conflict --
  ``shared_bytes_*``, ``shared_requests``);
* ``KernelStats.memset_bytes``: result buffers filled with the init value before
  atomics.  Library kernels (dot, sort, topk, scatter, reduce-window) run their op's
  numpy meaning and are charged what the library moves (``boundary.py``): each
  operand and result once (a scatter: one more store per update), ``2*M*N*K``
  flops for a GEMM.

Host memory (not a counter): a stage is evaluated over its whole domain at once, so at 8192x32000 each
domain-sized value is a gigabyte.  Three things keep the run to the arrays the plan itself implies: a
reduce input is folded per thread as soon as it is computed (``reduce.fold``), a block of whole tasks at a
time past ``reduce.LAYOUT_CHUNK`` elements; an elementwise op past ``evaluate.IN_PLACE_MIN`` elements writes
its result into an operand only it reads (``evaluate.in_place``: a temporary of the loop, or a buffer this
read kills); other dead buffers are released after their last reader kernel.  An index through a reshape is
computed per group of equal-size dims (``ir.index_rules.dim_groups``), so it stays as small as the dims it
varies along, and an access's address terms are summed into one array (an inductor split of a 16384x3072
column sum, a (32, 512, 3072) domain: 4.6 GB before, 2.6 GB after).  Every counter above is computed as before (``tests/simt/test_simt_blocked_paths.py``).

Thread exit: a thread never returns early -- it runs every stage's loops
(possibly with no element) and reaches every barrier (``trace.py`` lists the
barriers a naive early return would break).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..plan.boundary import traffic
from ..ir.dtypes import cast, itemsize, numpy_dtype
from ..errors import AStitchError
from ..plan.machine import resident_resources
from ..plan.plan import Plan
from ..ir.flatindex import distinct, ravel, reshapes, row_major_strides, strided_view, walks_in_order
from ..ir.reference import bind_inputs, hand_over
from .boxes import cut, placed
from .geometry import EpilogueGeometry, Geometry, support
from .kept_geometries import KeptGeometries, mapping_key, needed_after
from .recomputed import Recomputed
from .count_memo import count_once
from .memory import Access, GlobalMemory, layout_strides, uninitialised, union_bytes
from .evaluate import Evaluator, element_uses
from .reduce import fold, run_reduce
from . import cost, schedule
from . import l2 as l2_model
from .stats import SECTOR, KernelStats, SimStats, StageStats, TensorTraffic
from .trace import TRACE_LIMIT, TraceRecorder, find_divergence, find_races
from ..plan.reduce_scheme import WARP, tree_word_bytes, warps_across
from ..plan.task_registers import kept_per_task
from ..plan.vocabulary import Barrier, Combine, ReduceScheme, Space


#: consumer elements whose per-task register slots are looked up at once (:meth:`_task_register_lookup`)
LOOKUP_CHUNK = 1 << 22


def _squeeze_constant(a: np.ndarray) -> np.ndarray:
    """``a`` with every axis along which it does not change cut to extent 1 (a row's lanes all name the row's
    slot: the slot numbers then vary along the task dims only, not over the whole domain)."""
    for ax in range(a.ndim):
        if a.shape[ax] > 1:
            first = a.take([0], axis=ax)
            if np.array_equal(np.broadcast_to(first, a.shape), a):
                a = first
    return a


@dataclass
class SimResult:
    """What ``simulate`` returns.

    ``outputs`` (graph output order), ``stats`` (:class:`SimStats`), ``timeline``
    (``schedule.build_timeline``), ``trace`` (trace mode only), ``races`` and
    ``divergent_barriers`` (trace mode only; see ``trace.py``), ``plan``.
    """
    outputs: list
    stats: SimStats
    timeline: object = None
    trace: object = None
    races: list = field(default_factory=list)
    divergent_barriers: list = field(default_factory=list)
    plan: Optional[Plan] = None

    def __repr__(self) -> str:
        s = self.stats
        extra = f", {len(self.races)} races" if self.races else ""
        return (f"<SimResult {self.plan.strategy if self.plan else ''}: {s.kernel_launches} kernels, "
                f"{s.global_bytes} global bytes, {s.flops} flops{extra}>")


def simulate(plan: Plan, inputs, trace: bool = False, l2: bool = True) -> SimResult:
    """Run ``plan`` on ``inputs`` (sequence in parameter order, or ``{name: array}``).

    ``trace=True`` records every thread's memory accesses (small shapes only:
    at most ``TRACE_LIMIT`` domain elements per kernel) and reports races and
    divergent barriers instead of refusing a plan with a missing block barrier.
    ``l2=False`` prices the run as if the GPU had no L2 cache: every sector at DRAM
    bandwidth (compare the two to see what L2 residency between kernels is worth;
    :mod:`astitch_sim.simt.l2`).
    """
    if not isinstance(l2, bool):
        raise AStitchError(f"simulate's l2 must be True or False, got {l2!r}: l2=False prices every sector at "
                           "DRAM bandwidth, as if the GPU had no L2 cache")
    if not isinstance(plan, Plan):
        raise AStitchError(f"simulate needs a Plan (from asim.compile), got {type(plan).__name__}")
    plan.validate(barriers=not trace)
    graph = plan.graph
    env = bind_inputs(graph, inputs)
    if trace:
        for k in plan.kernels:
            n = max((s.mapping.size for s in k.stages), default=0)
            if n > TRACE_LIMIT:
                raise AStitchError(
                    f"trace=True records every thread's accesses; kernel {k.name} runs over {n} domain elements, "
                    f"more than the {TRACE_LIMIT} a trace allows. Simulate a smaller shape "
                    "(e.g. asim.workload('layernorm', rows=4, cols=32)) or drop trace=True")
    mem = GlobalMemory()
    for p in graph.inputs:
        mem.place(p.name, env[p.name], p.nbytes)
    for n in graph:
        if n.op == "constant" and n.rank > 0:
            mem.place(n.name, cast(np.asarray(n.attrs["value"]), n.dtype).reshape(n.shape), n.nbytes)
    recorder = TraceRecorder(graph) if trace else None
    kstats, divergence = [], []
    dying: dict = {}                  # kernel index -> the buffers dead after it (one pass, not one per kernel)
    for name, last in _last_reader(plan).items():
        dying.setdefault(last, []).append(name)
    kept = KeptGeometries()           # geometries a later kernel of the same mapping takes as they are
    wanted = needed_after(plan.kernels)
    again = Recomputed(plan.kernels)  # values a later stage computes again: computed once (recomputed.py)
    for ki, k in enumerate(plan.kernels):
        ks = KernelStats(k.name, k.kind, k.grid, k.block, *resident_resources(k))
        if k.kind == "library":
            _run_library(graph, k, mem, ks)
        else:
            run = KernelRun(plan, ki, k, mem, recorder, dying=dying.get(ki, []), kept=kept, recomputed=again)
            ks.stages = run.run()
            kept.keep(run.geoms, wanted[ki])
            ks.memset_bytes = run.memset_bytes
            divergence.extend(run.divergence)
        kstats.append(ks)
        if not trace:
            for name in dying.get(ki, []):
                mem.release(name)
    outputs = _outputs(graph, mem)
    stats = SimStats(kstats)
    l2_model.annotate(plan, kstats, enabled=l2)
    timeline = _schedule(plan, kstats)
    tr = recorder.finish() if recorder else None
    races = find_races(tr) if tr is not None else []
    return SimResult(outputs, stats, timeline, tr, races, divergence, plan)


def _last_reader(plan) -> dict:
    """Buffers a kernel writes that no later kernel reads and that are not graph outputs: ``{name: the
    index of the kernel after which they are dead}``.  The model frees them then (their addresses stay
    taken, like a buffer the runtime keeps), so a real-size unfused graph does not hold every
    intermediate of the run in host memory at once."""
    outputs = {o.name for o in plan.graph.outputs}
    written, last = {}, {}
    for ki, k in enumerate(plan.kernels):
        for n in k.inputs:
            last[n] = ki
        for n in list(k.outputs) + ([k.library_op] if k.library_op else []):
            written.setdefault(n, ki)
    return {n: max(last.get(n, w), w) for n, w in written.items() if n not in outputs}


def _outputs(graph, mem) -> list:
    """The graph's outputs as :func:`~astitch_sim.ir.reference.hand_over` gives them: a buffer a kernel wrote
    is handed over (no copy: the run is over); an input, a constant, or an output listed twice is copied."""
    env = {p.name: mem[p.name] for p in graph.inputs if p.name in mem}
    for o in graph.outputs:
        env[o.name] = mem[o.name] if o.name in mem else \
            cast(np.asarray(o.attrs["value"]), o.dtype).reshape(o.shape)
    return hand_over(graph, env)


def _schedule(plan, kstats):
    """The timeline (waves per kernel, every block's place) and the cost model's prediction, from one pricing of
    each kernel's blocks (``cost.kernels_block_terms``: the timeline and the prediction both read it)."""
    terms = cost.kernels_block_terms(plan, kstats)
    timeline = schedule.build_timeline(plan, kstats, terms=terms)
    cost.predict(plan, kstats, terms=terms)
    return timeline


def _run_library(graph, k, mem, ks) -> None:
    """A library kernel: its op's numpy meaning on the operands in memory (read through its views),
    charged what the library moves (``boundary.traffic``: each operand once, each result once)."""
    nodes = [graph[n] for n in k.outputs]
    args = []
    for o in nodes[0].operands:
        if o.op == "constant" and o.rank == 0:
            args.append(cast(np.asarray(o.attrs["value"]), o.dtype).reshape(()))
            continue
        src = k.views.get(o.name, o.name)
        if src not in mem:
            raise AStitchError(f"kernel {k.name} reads {src} from global memory, but no kernel has written it")
        args.append(np.asarray(mem[src]).reshape(o.shape))
    for node in nodes:
        out = cast(node.opdef.numpy(node, *args), node.dtype)
        mem.place(node.name, np.ascontiguousarray(out), node.nbytes)
    read, written, flops = traffic(nodes)
    ks.library_flops = flops
    for o in nodes[0].operands:                   # what the L2 model sees of a library kernel (l2.py)
        src = k.views.get(o.name, o.name)
        if src in mem.nbytes:
            tt = ks.library_tensors.setdefault(src, TensorTraffic(mem.nbytes[src]))
            tt.read_sectors += -(-o.nbytes // SECTOR)
    for node in nodes:
        tt = ks.library_tensors.setdefault(node.name, TensorTraffic(mem.nbytes[node.name]))
        tt.written_sectors += -(-node.nbytes // SECTOR)
    ks.library_bytes_written = written
    ks.library_bytes = read + written


def _store_dtype(dtype: str):
    return np.dtype(np.uint16) if dtype == "bf16" else numpy_dtype(dtype)


def _encode(a, dtype):
    if dtype == "bf16":
        return (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return a


def _decode(a, dtype):
    if dtype == "bf16":
        wide = np.asarray(a).astype(np.uint32)
        wide <<= 16                                     # (in place: one pass less over a domain-sized read)
        return wide.view(np.float32)
    return a


#: fewest table entries per reduced position for :func:`gather_shared`'s table to pay (a single task's row: one
#: entry each, and the plain gather is one pass where the table adds a lookup per element)
TABLE_ROW_MIN = 8


def gather_shared(view: np.ndarray, geom, slot) -> np.ndarray:
    """``view[geom.block, slot]``: every element's slot of its block's shared memory (``view``: ``[block, slot]``).

    A per-task value read at every element of its tasks (batch norm's ``mean[c]`` at each of 65536 rows) has its
    slot over the task dims, and a separable block id is a task part plus a reduced part (the split block a row
    falls in).  The reduced part then takes few distinct values, so those are gathered into a small table, whose
    rows the reduced dims pick: a gather of table rows instead of every element through a domain-sized pair of
    indices (a third of a stitched batch norm's simulation).  The same values, shaped alike."""
    if isinstance(geom, Geometry) and geom.part_line is not None and geom.refined is not None:
        # a split row: its parts' blocks from the refined geometry (a block per part), not a block per element
        fine = geom.refined
        return np.broadcast_to(gather_shared(view, fine, fine.over_parts(slot)), fine.shape).reshape(geom.shape)
    split = geom.block_split() if isinstance(geom, Geometry) else None
    d1 = support(split[1], geom.rank) if split is not None else ()
    d0 = tuple(sorted(set(support(split[0], geom.rank)) | set(support(slot, geom.rank)))) if d1 else ()
    shape0 = geom.part_shape(d0) if d1 and not set(d0) & set(d1) else None
    part = np.asarray(split[1]).ravel() if shape0 is not None else None
    if shape0 is None or int(np.prod(shape0)) < TABLE_ROW_MIN or (part == part[0]).all():
        return view[geom.block, slot]     # (not a sum of parts; rows too short for a table; one block per task)
    u = distinct(part)
    table = view[np.broadcast_to(split[0], shape0).ravel()[None, :] + u[:, None],
                 np.broadcast_to(slot, shape0).ravel()[None, :]]
    if rows_alike(table):
        # every block holds the same bits (a value each block made after a grid barrier): one row, broadcast
        # over the reduced dims -- the ops that read it then run once per task, as their values are the same
        out, kept = table[0].reshape([geom.shape[k] for k in d0]), d0
    else:
        row_of = np.zeros(int(u[-1] - u[0]) + 1, dtype=np.int64)  # block part -> its table row (a range of ids)
        row_of[u - u[0]] = np.arange(u.size)
        rows = np.take(table, row_of[part - u[0]], axis=0)
        out, kept = rows.reshape([geom.shape[k] for k in d1 + d0]).transpose(np.argsort(d1 + d0)), d1 + d0
    for k in range(geom.rank):
        if k not in kept:
            out = np.expand_dims(out, k)
    return out


def rows_alike(table: np.ndarray) -> bool:
    """Do all rows of ``table`` hold the same bits (NaNs and signed zeros compared as bits, not values)?"""
    b = np.ascontiguousarray(table).view(np.uint8).reshape(table.shape[0], -1)
    return bool((b == b[:1]).all())


class KernelRun:
    """One generated kernel: its shared memory, registers kept across stages, the stages."""

    def __init__(self, plan, index, kernel, mem, recorder, dying=(), kept=None, recomputed=None):
        self.plan, self.graph, self.index, self.kernel = plan, plan.graph, index, kernel
        self.kept = kept                   # earlier kernels' geometries (``kept_geometries``), or None
        self.recomputed = recomputed       # values computed by an earlier stage (``recomputed``), or None
        self.mem, self.recorder = mem, recorder
        self.stage_of, self.needed_later = kernel.stage_of, kernel.live_later
        self.kept_inputs: dict = {}        # loading stage -> kernel inputs it keeps in registers for later stages
        for n, v in kernel.values.items():
            if v.stage < 0 and v.loaded_in >= 0:
                self.kept_inputs.setdefault(v.loaded_in, []).append(n)
        # buffers that die with this kernel and that one op of it reads, once: that op may overwrite the
        # host array it read (evaluate.Evaluator.donor; never in trace mode, which keeps every buffer)
        self.stage_uses = [element_uses(s, self.graph, self.kept_inputs.get(i, ()))   # each stage's Evaluator reads it
                           for i, s in enumerate(kernel.stages)]
        self.read_once = set() if recorder is not None else \
            {n for n in dying if sum(u.get(n, 0) for u in self.stage_uses) == 1}
        self.geoms: dict = {}
        self.epis: dict = {}
        self.regs: dict = {}
        self.memset_bytes = 0
        self.divergence: list = []
        self.epochs = [0, 0]               # block epoch, grid epoch
        self._smem = None                  # every block's shared memory, made when a value is first kept there
        for n, v in kernel.values.items():
            if v.stage >= 0 and (n in kernel.outputs or v.space == Space.GLOBAL):
                node = self.graph[n]
                mem.reserve(n, node.shape, numpy_dtype(node.dtype), node.nbytes)

    # -- geometry ---------------------------------------------------------------------
    def geometry(self, mapping) -> Geometry:
        key = mapping_key(mapping)
        geom = self.geoms.get(key)
        if geom is None:
            geom = self.kept.get(key) if self.kept is not None else None
            if geom is None:
                geom = Geometry(mapping, dense=self.recorder is not None)
            self.geoms[key] = geom
        return geom

    def epilogue_geometry(self, i) -> EpilogueGeometry:
        if i not in self.epis:
            s = self.kernel.stages[i]
            self.epis[i] = EpilogueGeometry(self.geometry(s.mapping), s.task_shape)
        return self.epis[i]

    # -- running ------------------------------------------------------------------------
    def run(self) -> list:
        out, work, barriers = [], [], []
        for i, s in enumerate(self.kernel.stages):
            st = StageStats(stage=i, dominant=s.dominant)
            self.run_stage(i, s, st)
            if self.recomputed is not None:
                self.recomputed.stage_done(self.index, i)
            out.append(st)
            if self.recorder is not None:
                work.append(self._work(i, s))
                if s.reduces and (s.reduce_scheme is ReduceScheme.TREE or warps_across(s)):
                    barriers.append((i, "tree", False))
                if s.grid_syncs:
                    barriers.append((i, "grid", False))
                if s.barrier_after != Barrier.NONE:
                    barriers.append((i, s.barrier_after, True))
        if self.recorder is not None:
            self.divergence = find_divergence(self.index, self.kernel.grid, self.kernel.block, work, barriers)
        return out

    def _work(self, i, s):
        g = self.geometry(s.mapping)
        b, t = g.full(g.block), g.full(g.thread)
        if s.epilogue or s.reduces:
            e = self.epilogue_geometry(i)
            b = np.concatenate([b, e.full(e.block)])
            t = np.concatenate([t, e.full(e.thread)])
        return b, t

    def run_stage(self, i, s, st) -> None:
        self.stage_reads = {}
        self._run_stage(i, s, st)
        for base, reads in self.stage_reads.items():     # one buffer read several ways: count the union
            if len(reads) > 1:
                size = reads[0][1].itemsize
                K = max(a.extra.get("elements", self.graph[a.node].size) for _, a, _ in reads)
                union = union_bytes([(g_, a) for g_, a, _ in reads], max(K, 1))
                st.global_bytes_read += size * union - sum(b for _, _, b in reads)

    def _run_stage(self, i, s, st) -> None:
        g, k = self.graph, self.kernel
        geom = self.geometry(s.mapping)
        st.elements = geom.size
        ev = Evaluator(self, i, s, geom, "elements", st)
        needed_here = {n for n in list(s.ops) + list(s.epilogue) if n in k.values and k.values[n].stage == i
                       and (n in self.needed_later or n in k.outputs or k.values[n].space == Space.GLOBAL)}
        reduce_inputs = {}
        for r in s.roots:
            node = g[r]
            if node.op == "reduce":
                if tuple(node.operands[0].shape) != geom.shape:
                    raise AStitchError(f"kernel {k.name} stage {i}: reduce {r} runs over {node.operands[0].shape} "
                                       f"but the stage's domain is {geom.shape}")
                # folded per thread at once (reduce.fold): the stage's next root does not meet this one's input
                reduce_inputs[r] = fold(node, tuple(ev.value(x.name, geom.idx)
                                                    for x in node.operands[:len(node.operands) // 2]), geom)
                continue
            if not reshapes(geom.shape, node.shape):
                if r in needed_here:
                    raise AStitchError(f"kernel {k.name} stage {i}: {r} ({node.shape}) must be stored, but the stage "
                                       f"evaluates elements of {geom.shape}; it has no element of its own to store")
                continue
            self.store_elements(ev, r, ev.value(r, ev.own_index(node)))
        for n in self.kept_inputs.get(i, ()):
            self.keep_loaded_input(ev, n)
        reduces = s.reduces
        results = {}
        if reduces:
            if s.reduce_scheme is ReduceScheme.TREE or warps_across(s):
                self.epochs[0] += 1               # the reduction's block barriers
            for r in reduces:
                results[r] = self.run_reduce(i, s, st, geom, g[r], reduce_inputs.pop(r))
            if warps_across(s):                   # one barrier for all the stage's reduces
                st.shuffle_barriers += s.mapping.grid * s.mapping.task_iterations
        sync = bool(s.grid_syncs)
        if sync:
            self.epochs[0] += 1
            self.epochs[1] += 1
            st.grid_barriers += s.grid_syncs
        for r in reduces:
            self.finish_reduce(i, s, st, g[r], results[r])
        if s.epilogue:
            epi = self.epilogue_geometry(i)
            ee = Evaluator(self, i, s, epi, "epilogue", st)
            ee.reduce_results = results
            for e in s.epilogue:
                val = ee.value(e, epi.idx)
                self.store_task_value(ee, e, val, epi)
        if s.barrier_after == Barrier.BLOCK:
            st.block_barriers += k.grid
            self.epochs[0] += 1
        elif s.barrier_after == Barrier.GRID:
            st.grid_barriers += 1
            self.epochs[0] += 1
            self.epochs[1] += 1

    # -- accounting ----------------------------------------------------------------------
    def account(self, ev, geom, acc: Access) -> dict:
        c = count_once(geom, acc)
        st = ev.stats
        if acc.space == Space.GLOBAL:
            buf = self.mem.name_at[acc.base]
            tt = st.tensors.get(buf)
            if tt is None:
                tt = st.tensors[buf] = TensorTraffic(self.mem.nbytes[buf])
            if acc.kind == "read":
                st.global_bytes_read += c["bytes"]
                if acc.dedup:
                    self.stage_reads.setdefault(acc.base, []).append((geom, acc, c["bytes"]))
                st.global_sectors_read += c["sectors"]
                tt.read_sectors += c["sectors"]
            else:
                st.global_bytes_written += c["bytes"]
                st.global_sectors_written += c["sectors"]
                tt.written_sectors += c["sectors"]
                if acc.kind == "atomic":
                    st.atomics += c["n"]
            st.global_requests += c["requests"]
        elif acc.space == Space.SHARED:
            if acc.kind == "read":
                st.shared_bytes_read += c["bytes"]
            else:
                st.shared_bytes_written += c["bytes"]
            st.shared_bank_conflicts += c["conflicts"]
            st.shared_requests += c["requests"]
        elif acc.kind == "read":
            st.register_reuse += c["n"]
        if self.recorder is not None:
            self.recorder.add(self.index, ev.i, ev.phase, tuple(self.epochs), geom, acc)
        return c

    def _global_access(self, kind, name, idx, mask=None, dedup=False, identity=False, geom=None) -> Access:
        """``name`` read or written at ``idx``; ``identity``: ``idx`` is the node's own index at each element of
        ``geom``'s domain (the node of the domain's shape, or the domain reshaped, row-major)."""
        node = self.graph[name]
        row_major = node.row_major
        if identity and row_major and geom is not None and geom.kind == "element" \
                and tuple(node.shape) != tuple(geom.shape):
            # the domain reshaped (Inductor's [512, 8192] view of a [4096, 1024] tensor): element e of the domain
            # is element e of the node, so the domain's own index, a term per dim, says which, where the node's
            # reshaped index is domain-sized arrays (r * 8 + c // 1024) that counting would have to take apart
            idx, strides = geom.idx, row_major_strides(geom.shape)
        else:
            strides = layout_strides(node)
        # a stride-1 term is the index itself (no domain-sized copy: at 50M elements each copy is 400 MB)
        index = [np.asarray(idx[d], dtype=np.int64) for d in range(len(strides))]
        terms = [a if st == 1 else a * st for a, st in zip(index, strides, strict=True)]
        extra = {}
        if not row_major:
            rm = row_major_strides(node.shape)
            extra["logical"] = sum(a * st for a, st in zip(index, rm, strict=True))
        return Access("global", kind, name, itemsize(node.dtype), self.mem.base[name], terms, mask,
                      dedup=dedup, identity=identity, extra=extra)

    # -- reads ----------------------------------------------------------------------------
    def read(self, ev, name, idx, mask):
        """A value not computed in this phase: from registers, shared or global memory."""
        k = self.kernel
        if ev.phase == "epilogue" and name in ev.reduce_results:
            return self.read_reduce_result(ev, name, idx, mask)
        v = k.values.get(name)
        at = self.stage_of.get(name)
        if at is not None and at == ev.i:
            raise AStitchError(f"kernel {k.name} stage {ev.i}: {name} is read at the stage's elements, but it is "
                               "only complete after the stage's reduction (move the reader to a later stage)")
        if at is not None and at > ev.i:
            raise AStitchError(f"kernel {k.name} stage {ev.i} reads {name}, which stage {at} computes later")
        if at is not None and v is not None and v.space == Space.SHARED:
            return self.read_shared(ev, name, idx, mask)
        if at is not None and v is not None and v.space == Space.REGISTER:
            return self.read_register(ev, name, idx, mask)
        if at is None and v is not None and v.space == Space.REGISTER and 0 <= v.loaded_in < ev.i:
            return self.read_register(ev, name, idx, mask)       # a kept input: no second global load
        if name not in self.mem:
            raise AStitchError(f"kernel {k.name} reads {name} from global memory, but no kernel has written it")
        return self.read_global(ev, name, idx, mask)

    def read_global(self, ev, name, idx, mask):
        node, arr = self.graph[name], self.mem[name]
        ident = node.rank > 0 and ev.is_identity(idx, node)
        if node.rank == 0:
            val = arr
        elif ident and ev.geom.kind == "element":
            val = arr if arr.shape == ev.geom.shape else arr.reshape(ev.geom.shape)     # another shape: a view
        elif ev.geom.kind == "element" and (ev.walks_in_order(idx, node) or
                                            walks_in_order(idx, node.shape, ev.geom.shape)):
            val = arr.reshape(ev.geom.shape)            # the domain is the tensor reshaped: its memory, no gather
            ident = True                                # (its own index: counted as one)
        else:
            val, where = None, ev.box_slice(mask, [np.shape(a) for a in idx])
            if where is not None:                       # a concatenate's or a pad's operand: its box only
                shape, sl = where
                part = strided_view(arr, tuple(cut(a, sl) for a in idx), ev.geom.rank)
                val = None if part is None else placed(shape, sl, part)
            if val is None:
                val = strided_view(arr, idx, ev.geom.rank)      # a slice or a transpose: its memory through steps
                val = arr[tuple(idx)] if val is None else val
        acc = self._global_access("read", name, idx, mask, dedup=True, identity=ident, geom=ev.geom)
        self.account(ev, ev.geom, acc)
        return val

    @property
    def smem(self) -> np.ndarray:
        """``[block, byte]``: each block's shared memory, filled with 0xFF (a read before any write shows up as
        NaN or -1), made on first use: a kernel that keeps nothing there makes none (the unfused DIEN row sum's
        750000 blocks would fill 12 MB per simulation for nothing)."""
        if self._smem is None:
            shared = [v for v in self.kernel.values.values() if v.space == Space.SHARED]
            region = max((v.offset + v.nbytes for v in shared), default=0)
            region = -(-region // 16) * 16
            self._smem = np.full((self.kernel.grid, max(region, 16)), 0xFF, dtype=np.uint8)
        return self._smem

    def shared_view(self, name):
        v, node = self.kernel.values[name], self.graph[name]
        dt = _store_dtype(node.dtype)
        return self.smem[:, v.offset:v.offset + v.nbytes].view(dt)

    def _slots(self, name):
        v = self.kernel.values[name]
        pg = self.geometry(self.kernel.stages[v.stage].mapping)
        if pg.mapping.kind == "flat":
            raise AStitchError(f"kernel {self.kernel.name}: {name} is Regional but stage {v.stage} has a flat "
                               "mapping: shared memory slots are per reduction task")
        slots = pg.slot_of_task()
        cap = v.nbytes // itemsize(self.graph[name].dtype)
        if slots.size and int(slots.max()) >= cap:
            raise AStitchError(f"kernel {self.kernel.name}: {name} needs shared slot {int(slots.max())} but its "
                               f"Value reserves {cap} ({v.nbytes} bytes) per block")
        return slots

    def read_shared(self, ev, name, idx, mask):
        node, v = self.graph[name], self.kernel.values[name]
        task = ravel(idx, node.shape)
        slot = self._slots(name)[task]
        view = self.shared_view(name)
        val = _decode(gather_shared(view, ev.geom, slot), node.dtype)
        acc = Access("shared", "read", name, itemsize(node.dtype), v.offset, [slot], mask,
                     extra={"logical": task})
        self.account(ev, ev.geom, acc)
        return cast(np.asarray(val), node.dtype) if node.dtype == "bf16" else val

    def read_register(self, ev, name, idx, mask):
        node = self.graph[name]
        pgeom, pval = self.regs[name]
        if kept_per_task(self.kernel, self.graph, name):
            val = self._task_register_lookup(pgeom, pval, ev.geom)
        elif pgeom is ev.geom and ev.is_identity(idx, node):
            val = pval
        else:
            val = self._register_lookup(pgeom, pval, ev.geom, node)
        # registers have no addresses: only a trace needs to know which element each read is
        acc = Access("register", "read", name, itemsize(node.dtype), 0,
                     [ravel(idx, node.shape)] if node.rank and self.recorder is not None else [], mask)
        self.account(ev, ev.geom, acc)
        return val

    def _register_lookup(self, pg, pval, cg, node):
        """The consumer thread reads *its own* register: whatever the producer thread left in that
        (block, thread, iteration) slot -- the right value only if the plan put the same element there."""
        if pg is cg:
            # one mapping: each (block, thread, iteration) slot holds the same element for both, so every
            # consumer element finds the producer's value at its own position (a 4M-element sort avoided)
            return np.broadcast_to(pval, cg.shape)
        span = max(pg.iters, cg.iters) + 1
        T = self.kernel.block

        def keys(gm):
            return (gm.full(gm.block) * T + gm.full(gm.thread)) * span + gm.full(gm.iteration)
        pk, pv = keys(pg), np.broadcast_to(pval, pg.shape).ravel() if pg.shape else np.asarray(pval).reshape(1)
        order = np.argsort(pk, kind="stable")
        pk, pv = pk[order], pv[order]
        ck = keys(cg)
        pos = np.clip(np.searchsorted(pk, ck), 0, max(pk.size - 1, 0))
        found = pk[pos] == ck
        out = uninitialised(ck.shape, pv.dtype)
        out[found] = pv[pos[found]]
        return out.reshape(cg.shape)

    def _task_register_lookup(self, pg, pval, cg):
        """A per-task value kept in registers (``plan/task_registers.py``): the producer's shuffle left it in
        *every* lane of the task, each lane's slot of its task-loop trip.  The consumer thread reads its own
        slot: the value of the task its lanes held in that trip -- the right one only if the plan gives the
        task to the same threads (row of the block ``thread // threads_per_row``, trip ``iteration //
        inner_iterations``).

        The slots are numbered ``(block * R + row) * span + trip`` (``R`` rows per block at most), a range of
        about the kernel's tasks times its trips, so a table indexed by slot answers the consumer's elements.
        The slot numbers keep the geometry's broadcast shapes, cut to the dims they vary along (a row's lanes
        all name the row's slot), so the value comes back shaped like a Regional read's, not domain-sized;
        past :data:`LOOKUP_CHUNK` elements it is gathered a slab at a time.  A slot the producer never wrote
        reads as uninitialised memory."""
        pm, cm = pg.mapping, cg.mapping
        span = max(pm.task_iterations, cm.task_iterations) + 1
        R = -(-self.kernel.block // max(1, min(pm.threads_per_row, cm.threads_per_row)))

        def keys(g, m):             # the block's part and the lane's part, added once at the end
            def make():
                lane = g.floor_div("thread", max(1, m.threads_per_row)) * span + \
                    g.floor_div("iteration", max(1, m.inner_iterations))
                return _squeeze_constant(np.asarray(g.block, dtype=np.int64) * (R * span)), _squeeze_constant(lane)
            return g.cached(f"task register keys {R} {span}", make)     # (a geometry's, for later stages too)
        pb, pl = keys(pg, pm)
        pk = pg.full(pb + pl)
        pv = np.broadcast_to(pval, pg.shape).ravel() if pg.shape else np.asarray(pval).reshape(1)
        table = uninitialised(max(int(pk.max(initial=0)) + 1, self.kernel.grid * R * span), pv.dtype)
        table[pk[::-1]] = pv[::-1]              # the first value the producer left in a slot, as a sort would find
        cb, cl = keys(cg, cm)
        shape = np.broadcast_shapes(cb.shape, cl.shape)
        if int(np.prod(shape)) <= LOOKUP_CHUNK or not cg.shape:
            return self._gather(table, cb + cl, pv.dtype).reshape(shape)
        out = np.empty(cg.shape, pv.dtype)
        rows = max(1, LOOKUP_CHUNK // max(1, int(np.prod(cg.shape[1:]))))
        for a in range(0, cg.shape[0], rows):
            sl = slice(a, min(a + rows, cg.shape[0]))
            b, ln = (x[sl] if x.ndim and x.shape[0] > 1 else x for x in (cb, cl))
            out[sl] = self._gather(table, b + ln, pv.dtype)
        return out

    @staticmethod
    def _gather(table, ck, dtype):
        """``table[ck]``; a slot past the table (past the kernel's grid) was never written: uninitialised."""
        if ck.size and int(ck.max()) >= table.size:
            table = np.concatenate([table, uninitialised(int(ck.max()) + 1 - table.size, dtype)])
        return table[ck]

    def read_reduce_result(self, ev, name, idx, mask):
        """An epilogue reads its stage's reduce: registers (the task's first thread holds the result;
        after an atomic combine only its block's partial!) or global memory, as its Value says."""
        node, res = self.graph[name], ev.reduce_results[name]
        v = self.kernel.values.get(name)
        if v is not None and v.space == Space.GLOBAL:
            return self.read_global(ev, name, idx, mask)
        m = ev.geom.mapping
        if m.splits > 1 and m.combine == Combine.ATOMIC:
            full = np.moveaxis(res["partial"], 1, 0).reshape((m.splits,) + tuple(node.shape))
            return full[(ev.geom.part,) + tuple(idx)] if idx else full.reshape(m.splits)
        full = res["result"].reshape(tuple(node.shape))
        return full[tuple(idx)] if idx else full.reshape(1)

    # -- writes ------------------------------------------------------------------------------
    def store_elements(self, ev, name, val) -> None:
        """An element-loop root: to global (output / Global value) and/or kept in registers."""
        k = self.kernel
        v = k.values.get(name)
        if v is None or v.stage != ev.i:
            return
        geom, node = ev.geom, self.graph[name]
        own = ev.own_index(node)                # the domain's index, or reshaped where the node is the domain reshaped
        if name in k.outputs or v.space == Space.GLOBAL:
            full = np.broadcast_to(val, geom.shape).reshape(node.shape) if geom.shape != tuple(node.shape) else val
            if not self.mem.adopt(name, full):
                arr = self.mem[name]
                arr[...] = np.broadcast_to(full, arr.shape)
            self.account(ev, geom, self._global_access("write", name, own, identity=True, geom=geom))
        if v.space == Space.SHARED:
            raise AStitchError(f"kernel {k.name}: {name} is Regional but is computed per element, not per "
                               "reduction task; shared memory keeps one value per task")
        if v.space == Space.REGISTER and name in self.needed_later:
            self.regs[name] = (geom, val)
            if self.recorder is not None:
                self.account(ev, geom, Access("register", "write", name, itemsize(node.dtype), 0,
                                              [ravel(own, node.shape)]))

    def keep_loaded_input(self, ev, name) -> None:
        """A kept input: the value this stage loaded at each of its elements stays in the thread's registers
        (the load itself is the stage's own read, counted once: reading it again here hits the memo)."""
        node, geom = self.graph[name], ev.geom
        if not reshapes(geom.shape, node.shape):
            raise AStitchError(f"kernel {self.kernel.name} stage {ev.i}: input {name} {node.shape} is kept in "
                               f"registers, but the stage visits elements of {geom.shape}")
        own = ev.own_index(node)
        self.regs[name] = (geom, ev.value(name, own))
        if self.recorder is not None:
            self.account(ev, geom, Access("register", "write", name, itemsize(node.dtype), 0,
                                          [ravel(own, node.shape)]))

    def store_task_value(self, ev, name, val, epi) -> None:
        """An epilogue result or a reduce result, one per task: shared (every split block),
        global (the first split block), registers (kept for a later stage)."""
        k, node = self.kernel, self.graph[name]
        v = k.values.get(name)
        if v is None or v.stage != ev.i:
            return
        full = val if np.shape(val) == epi.shape else np.broadcast_to(val, epi.shape)      # (read, never written)
        if v.space == Space.SHARED:
            slot = self._slots(name).reshape((1,) + epi.task_shape)
            view = self.shared_view(name)
            view[epi.block, slot] = _encode(full, node.dtype)
            acc = Access("shared", "write", name, itemsize(node.dtype), v.offset, [np.broadcast_to(slot, epi.shape)],
                         extra={"logical": ravel(epi.idx, node.shape)})
            self.account(ev, epi, acc)
        if name in k.outputs or v.space == Space.GLOBAL:
            tasks = full[0]
            if node.size == 1 and tasks.size > 1:
                # a scalar of the kernel's inputs in a task epilogue: every task computes the same value and
                # stores it to the one element (so does the generated code); the first task's store stands
                tasks = tasks.reshape(-1)[:1]
            elif node.size != tasks.size:
                raise AStitchError(f"kernel {k.name} stage {ev.i}: {name} {node.shape} is stored once per task, "
                                   f"but the stage has {tasks.size} tasks: the plan puts it in the wrong epilogue")
            self.mem[name][...] = tasks.reshape(node.shape)
            mask = epi.part == 0 if epi.splits > 1 else None
            self.account(ev, epi, self._global_access("write", name, epi.idx, mask, identity=True))
        if v.space == Space.REGISTER and name in self.needed_later:
            self.regs[name] = (epi, val)

    # -- reductions ------------------------------------------------------------------------------
    def run_reduce(self, i, s, st, geom, node, values):
        epi = self.epilogue_geometry(i)
        ev = Evaluator(self, i, s, epi, "combine", st)
        init = tuple(ev.value(x.name, ()) for x in node.operands[len(node.operands) // 2:])
        res = run_reduce(node, values, init, geom, s.reduce_scheme)
        m = geom.mapping
        T, S, lanes = m.rows, m.splits, res["lanes"]
        size = itemsize(node.dtype)
        reduced = node.operands[:len(node.operands) // 2]
        pair = sum(itemsize(x.dtype) for x in reduced)     # argmax: value + index
        st.flops += node.opdef.flops * geom.size + T * S * (lanes - 1) + T * S
        if s.reduce_scheme is ReduceScheme.SHUFFLE:        # butterflies in every warp; warp totals across warps
            warps, trips = m.block // WARP, m.grid * m.task_iterations
            words = sum(2 if itemsize(x.dtype) > 4 else 1 for x in reduced)
            st.shuffles += trips * warps * sum(res["steps"]) * words
            w = warps_across(s)
            if w:
                st.shared_bytes_written += trips * warps * pair
                st.shared_bytes_read += trips * warps * w * pair    # the w words a warp's lanes read (a broadcast)
                st.shared_requests += 2 * trips * warps * len(reduced)
        elif lanes > 1:                                    # the shared-memory tree
            st.shared_bytes_written += pair * T * S * (2 * lanes - 1)
            st.shared_bytes_read += pair * T * S * 2 * (lanes - 1)
            if tree_word_bytes(self.plan.graph, self.kernel.stages) > 4:    # an 8-byte word: two wavefronts
                st.shared_bank_conflicts += T * S * (4 * lanes - 3) // 32
            st.tree_barriers += m.grid * m.task_iterations * (res["steps"] + 1)
        v = self.kernel.values.get(node.name)
        to_global = node.name in self.kernel.outputs or (v is not None and v.space == Space.GLOBAL)
        res["ev"] = ev
        if S > 1 and m.combine == Combine.ATOMIC:
            if not to_global:
                raise AStitchError(f"kernel {self.kernel.name}: split reduce {node.name} combines with atomics but "
                                   "its result is neither an output nor Global: nobody could read it")
            arr = self.mem[node.name]
            arr[...] = np.broadcast_to(init[0], arr.shape)
            self.memset_bytes += node.size * size
            arr[...] = res["result"]
            self.account(ev, epi, self._global_access("atomic", node.name, epi.idx, identity=True))
        elif S > 1:                                         # grid_barrier: partials to global scratch
            scratch = f"{node.name}.partials"
            self.mem.place(scratch, np.ascontiguousarray(res["partial"].reshape(-1)), T * S * size)
            task = ravel(epi.idx, node.shape)
            self.account(ev, epi, Access("global", "write", node.name, size, self.mem.base[scratch],
                                         [task * S + epi.part], extra={"logical": task}))
        return res

    def finish_reduce(self, i, s, st, node, res) -> None:
        """After the combine (and its grid barrier): partial reads, result stores."""
        epi = self.epilogue_geometry(i)
        m = epi.mapping
        ev = res["ev"]
        ev.phase = "epilogue" if s.grid_syncs else "combine"
        v = self.kernel.values.get(node.name)
        to_global = node.name in self.kernel.outputs or (v is not None and v.space == Space.GLOBAL)
        size = itemsize(node.dtype)
        if m.splits > 1 and m.combine == Combine.GRID_BARRIER:
            base = self.mem.base[f"{node.name}.partials"]
            task = ravel(epi.idx, node.shape)
            for q in range(m.splits):
                self.account(ev, epi, Access("global", "read", node.name, size, base, [task * m.splits + q],
                                             dedup=True, extra={"logical": task, "elements": node.size * m.splits}))
            if to_global:
                self.mem[node.name][...] = res["result"]
                self.account(ev, epi, self._global_access("write", node.name, epi.idx, epi.part == 0,
                                                          identity=True))
        elif m.splits == 1 and to_global:
            self.mem[node.name][...] = res["result"]
            self.account(ev, epi, self._global_access("write", node.name, epi.idx, identity=True))
        if v is not None and v.space == Space.SHARED:
            slot = self._slots(node.name).reshape((1,) + epi.task_shape)
            full = np.broadcast_to(res["result"].reshape((1,) + epi.task_shape), epi.shape)
            self.shared_view(node.name)[epi.block, slot] = _encode(full, node.dtype)
            acc = Access("shared", "write", node.name, size, v.offset, [np.broadcast_to(slot, epi.shape)],
                         extra={"logical": ravel(epi.idx, node.shape)})
            self.account(ev, epi, acc)
        if v is not None and v.space == Space.REGISTER and node.name in self.needed_later:
            self.regs[node.name] = (epi, res["result"].reshape((1,) + epi.task_shape))
