"""plan.validate(): the hardware rules and bookkeeping rules a Plan must keep, one named rule each.

``RULES`` below is the list, in the order they are checked; each failure is an
AStitchError naming the kernel, the rule and the fix.  In short:

* launch shape: integer fields, threads per block within the GPU's limit, at
  least one block, no more than CUDA's grid limit;
* shared memory within the per-block opt-in limit, registers within the GPU's
  limit, and at least one block fits on an SM (occupancy);
* a kernel with a grid barrier launches no more blocks than fit in one wave --
  otherwise blocks wait at the barrier for blocks that can never start: deadlock;
* every stage uses the kernel's launch shape and a mapping that covers its domain,
  and that domain has elements (zero-size values never reach a kernel: zero_size.py);
* every value is computed before it is read, and a value read from shared or
  global memory by a later stage has the block or grid barrier that makes it visible;
  a per-task value read from registers by a later stage is in every reading lane
  (a shuffle left it there, and the reader gives the task to the same threads);
* a library kernel computes the results of one library op from its inputs;
* every graph output is computed and written to global memory.

Words outside the plan's vocabulary (a space, scheme, barrier or combine mode
that does not exist) never get this far: the Plan's fields reject them when the
plan is built or read (``astitch_sim.plan.vocabulary``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from ..errors import AStitchError
from ..ir.graph import shape_str
from ..ir.flatindex import reshapes
from .index_bits import LIMIT_32, WIDTHS, largest_index
from .reduce_scheme import lanes_of, scratch_areas, shuffle_blocked
from .machine import blocks_per_wave as resident_blocks
from .task_registers import every_lane_holds, kept_per_task, same_task_threads
from .vector_width import VECTOR_BYTES, flat_order, widest
from .vocabulary import Barrier, ReduceScheme, Space

#: most blocks one launch may have (CUDA's gridDim.x limit)
MAX_GRID = 2**31 - 1

GENERATED, LIBRARY = "generated", "library"


@dataclass
class KernelCheck:
    """What the rules know while checking one kernel of a plan."""
    plan: object
    kernel: object
    barriers: bool          # False: skip the barrier-visibility rule (trace mode reports the races instead)
    produced: set           # nodes in global memory before this kernel runs (inputs, constants, earlier results)

    @property
    def graph(self):
        return self.plan.graph

    @property
    def gpu(self):
        return self.plan.gpu

    @property
    def where(self) -> str:
        return f"kernel {self.kernel.name}"

    @cached_property
    def computed_at(self) -> dict:
        """node -> the first stage computing it (a generated kernel whose stages name only graph nodes)."""
        out = {}
        for i, s in enumerate(self.kernel.stages):
            for n in list(s.ops) + list(s.epilogue):
                out.setdefault(n, i)
        return out

    def reads(self):
        """(stage, node, operand) for every operand read by a node a stage computes."""
        g = self.graph
        for i, s in enumerate(self.kernel.stages):
            for n in list(s.ops) + list(s.epilogue):
                for o in g[n].operands:
                    yield i, n, o

    @cached_property
    def crossing(self) -> set:
        """Values a later stage reads from where the computing stage left them (not its own copy)."""
        at = self.computed_at
        return {o.name for i, _, o in self.reads() if o.name in at and at[o.name] < i
                and o.name not in self.kernel.stages[i].ops and o.name not in self.kernel.stages[i].epilogue}

    def fail(self, message: str):
        raise AStitchError(f"{self.where}: {message}")


@dataclass(frozen=True)
class Rule:
    """One rule a plan's kernels keep: its name, the kernels it applies to, and the check."""
    name: str
    check: Callable            # (KernelCheck) -> None, raises AStitchError
    applies_to: tuple = ()     # kernel kinds it checks; (): every kernel

    def applies(self, kernel) -> bool:
        return not self.applies_to or kernel.kind in self.applies_to


# -- every kernel ----------------------------------------------------------------------------------------------

def integer_launch_fields(c: KernelCheck) -> None:
    """grid, block, shared_bytes and registers_per_thread are integers (a hand-edited JSON may hold "4")."""
    for name in ("grid", "block", "shared_bytes", "registers_per_thread"):
        v = getattr(c.kernel, name)
        if isinstance(v, bool) or not isinstance(v, int):
            c.fail(f"{name} must be an integer, got {v!r}; write plans with plan.to_json()")


def grid_within_cuda_limit(c: KernelCheck) -> None:
    """A launch has at most 2**31 - 1 blocks."""
    if c.kernel.grid > MAX_GRID:
        c.fail(f"grid of {c.kernel.grid} blocks; CUDA launches at most {MAX_GRID} blocks. "
               "Use bigger blocks or a grid-stride loop (vertical packing)")


def shared_bytes_not_negative(c: KernelCheck) -> None:
    if c.kernel.shared_bytes < 0:
        c.fail(f"shared_bytes={c.kernel.shared_bytes} is negative")


def inputs_and_outputs_are_nodes(c: KernelCheck) -> None:
    """A kernel reads and writes nodes of the plan's graph."""
    g = c.graph
    for name in ("inputs", "outputs"):
        bad = [n for n in getattr(c.kernel, name) if not isinstance(n, str) or n not in g]
        if bad:
            c.fail(f"{name} name nodes that are not in graph {g.name!r}: {bad}")


def ends_name_its_ops(c: KernelCheck) -> None:
    """Each recorded reason the kernel ends (``Kernel.ends``, kernel_end.py) names an op the kernel computes
    and one of the rules there are."""
    from .kernel_end import KernelEnd
    computed = set(c.kernel.computed) | set(c.kernel.outputs)
    for e in c.kernel.ends:
        if not isinstance(e, KernelEnd):
            c.fail(f"ends holds {e!r}, not a KernelEnd; write plans with plan.to_json()")
        if e.node not in computed:
            c.fail(f"ends names {e.node!r} ({e.rule}), which the kernel does not compute; a kernel ends at one of "
                   f"its own ops: {', '.join(sorted(computed)) or '(none)'}")


def known_kind(c: KernelCheck) -> None:
    if c.kernel.kind not in (GENERATED, LIBRARY):
        c.fail(f"kind {c.kernel.kind!r} is not generated or library")


def block_size_allowed(c: KernelCheck) -> None:
    k, gpu = c.kernel, c.gpu
    if not 1 <= k.block <= gpu.max_threads_per_block:
        c.fail(f"{k.block} threads per block; {gpu.name} allows 1..{gpu.max_threads_per_block}. "
               "Use smaller blocks (pack fewer rows per block)")


def at_least_one_block(c: KernelCheck) -> None:
    if c.kernel.grid < 1:
        c.fail(f"grid of {c.kernel.grid} blocks; launch at least one")


def shared_memory_fits(c: KernelCheck) -> None:
    """A block's shared memory is within the GPU's per-block (opt-in) limit."""
    k, gpu = c.kernel, c.gpu
    if k.shared_bytes > gpu.shared_per_block_optin:
        c.fail(f"needs {k.shared_bytes} bytes of shared memory per block; {gpu.name} allows "
               f"{gpu.shared_per_block_optin}. Demote Regional values to Global or use fewer rows per block")


def registers_allowed(c: KernelCheck) -> None:
    k, gpu = c.kernel, c.gpu
    if not 1 <= k.registers_per_thread <= gpu.max_registers_per_thread:
        c.fail(f"{k.registers_per_thread} registers per thread; {gpu.name} allows "
               f"1..{gpu.max_registers_per_thread}")


def grid_barrier_within_one_wave(c: KernelCheck) -> None:
    """A block fits on an SM at all, and a kernel with a grid barrier has all its blocks resident at once:
    otherwise the resident blocks wait at the barrier for blocks that cannot start (deadlock).  Residency
    is ptxas's when the plan has its numbers (gpu_backend.apply_compiler), else the plan's estimate."""
    k, gpu = c.kernel, c.gpu
    wave = gpu.blocks_per_wave(k.block, k.shared_bytes, k.registers_per_thread)  # raises if nothing fits
    shared, regs, whose = k.shared_bytes, k.registers_per_thread, ""
    if k.machine is not None:
        wave = resident_blocks(gpu, k)
        shared, regs, whose = k.machine.shared_total, k.machine.registers, f" per {k.machine.tool}"
    if k.global_barriers and k.grid > wave:
        c.fail(f"a grid barrier with {k.grid} blocks, but only {wave} blocks of {k.block} threads "
               f"({shared} B shared, {regs} registers{whose}) fit on {gpu.name} at once: "
               f"the resident blocks would wait forever for blocks that cannot start (deadlock). "
               f"Launch at most {wave} blocks (vertical packing) or split the kernel at the barrier")


def inputs_computed_earlier(c: KernelCheck) -> None:
    """Every input of a kernel is a graph input, a constant or a result of an earlier kernel."""
    for name in c.kernel.inputs:
        if name not in c.produced:
            c.fail(f"reads {name} before any kernel computes it")


# -- library kernels -------------------------------------------------------------------------------------------

def library_kernel_is_one_op(c: KernelCheck) -> None:
    """A library kernel computes library nodes that are results of one op, reading its operands (or views)."""
    from ..passes.analysis import VIEW_OPS, is_boundary
    from .boundary import sibling_key
    g, k = c.graph, c.kernel
    if not isinstance(k.library_op, str) or k.library_op not in g:
        c.fail(f"library kernel computes {k.library_op!r}, which is not a node of graph {g.name!r}")
    outs = list(k.outputs) or [k.library_op]
    if k.library_op not in outs:
        c.fail(f"library kernel lists outputs {outs} without its own node {k.library_op}")
    head = g[k.library_op]
    if not is_boundary(head):
        c.fail(f"{k.library_op} is a {head.op}, not a library op (dot, sort, topk, scatter, "
               "reduce-window): plan it in a generated kernel")
    for n in outs:
        if sibling_key(g[n]) != sibling_key(head):
            c.fail(f"{n} is not a result of the same {head.op} as {k.library_op}")
    if not isinstance(k.views, dict):
        c.fail(f"views must be a dict (operand -> buffer), got {k.views!r}")
    for o in head.operands:
        if o.op == "constant" and o.rank == 0:
            continue
        src = k.views.get(o.name, o.name)
        if src not in k.inputs:
            c.fail(f"operand {o.name} is read from {src}, which is not among the kernel's inputs {k.inputs}")
        if src != o.name:
            base = o
            while base.name != src and base.op in VIEW_OPS:
                base = base.operands[0]
            if base.name != src:
                c.fail(f"{o.name} is read as a view of {src}, but it is not a chain of row-major reshapes of it")


# -- generated kernels -----------------------------------------------------------------------------------------

def has_stages(c: KernelCheck) -> None:
    if not c.kernel.stages:
        c.fail("a generated kernel needs at least one stage")


def stages_are_well_formed(c: KernelCheck) -> None:
    """Each stage: a mapping the GPU can run over a non-empty domain with the kernel's launch shape, a known
    dominant, recompute counts >= 1, and only graph nodes in its ops and epilogue."""
    g, k = c.graph, c.kernel
    for i, s in enumerate(k.stages):
        m = s.mapping
        m.check(c.gpu)
        if m.size == 0:
            c.fail(f"stage {i} ({s.dominant}) iterates over the empty domain {shape_str(m.domain)}: no kernel "
                   "computes a value with no elements. asim.compile removes them (astitch_sim.passes.zero_size); "
                   "recompile the graph")
        if (m.grid, m.block) != (k.grid, k.block):
            c.fail(f"stage {i} ({s.dominant}) maps onto {m.grid}x{m.block} but the kernel launches {k.grid}x{k.block}")
        if not isinstance(s.dominant, str) or s.dominant not in g:
            c.fail(f"stage {i} has unknown dominant node {s.dominant!r}")
        for n, times in s.recompute.items():
            if not isinstance(n, str) or n not in g or isinstance(times, bool) or not isinstance(times, int) \
                    or times < 1:
                c.fail(f"stage {i} recompute entry {n!r}: {times!r} must name a graph node and a count >= 1")
        for n in list(s.ops) + list(s.epilogue):
            if not isinstance(n, str) or n not in g:
                c.fail(f"stage {i} computes unknown node {n!r}")
        if m.flat_vectors:
            _flat_vectors_hold(c, i, s)


def _flat_vectors_hold(c: KernelCheck, i: int, s) -> None:
    """A stage whose vectors run across rows (``ThreadMapping.flat_vectors``) is the only stage of its kernel,
    and every tensor it touches is at the domain's flat index, each vector within ``VECTOR_BYTES`` of every
    tensor it covers (``plan/vector_width.py``): else a vector would read another row's elements."""
    g, k, m = c.graph, c.kernel, s.mapping
    stored = [n for n in s.ops if n in k.outputs or (n in k.values and k.values[n].space is Space.GLOBAL)]
    why = flat_order(g, s.ops, m.domain, stored, m.vector) if len(k.stages) == 1 else \
        f"the kernel has {len(k.stages)} stages, and only a one-stage kernel runs its vectors across rows"
    want, narrow = widest(g, s.ops, m.domain, stored, flat=True)
    if not why and m.vector > want:
        why = f"its tensors allow vectors of {want} ({narrow or f'{VECTOR_BYTES} bytes per access'})"
    if why:
        c.fail(f"stage {i} ({s.dominant}) runs {m.vector}-element vectors across rows (flat_vectors), but {why}: "
               "use flat_vectors=False with a vector width that divides the innermost extent")


def reads_follow_writes(c: KernelCheck) -> None:
    """Every operand is computed in this or an earlier stage, or is a kernel input or folded constant; one
    read from an earlier stage has a Value entry and (unless ``barriers=False``) the barrier that makes
    the producer's writes visible: a block barrier for shared memory, a grid barrier for global memory."""
    k, at = c.kernel, c.computed_at
    for i, n, o in c.reads():
        s = k.stages[i]
        if o.name in at:
            j = at[o.name]
            if j > i:
                c.fail(f"stage {i} reads {o.name} which stage {j} computes later")
            if j < i and o.name not in s.ops and o.name not in s.epilogue:     # not its own copy
                _check_visible(c, o.name, j, i)
        elif not (o.op == "constant" and o.rank == 0) and o.name not in c.produced:
            c.fail(f"{n} reads {o.name}, which is neither computed here nor an input")


def _check_visible(c: KernelCheck, name: str, producer: int, consumer: int) -> None:
    k = c.kernel
    v = k.values.get(name)
    if v is None:
        c.fail(f"{name} crosses stages {producer}->{consumer} but has no Value entry")
    if not c.barriers:
        return
    between = [s.barrier_after for s in k.stages[producer:consumer]]
    if k.stages[producer].sync_after_combine and name in k.stages[producer].ops:
        between.append(Barrier.GRID)      # a split reduce is complete after its stage's own grid barrier
    if v.space is Space.SHARED and max(between, default=Barrier.NONE) < Barrier.BLOCK:
        c.fail(f"{name} is read from shared memory in stage {consumer} with no block barrier after stage "
               f"{producer}: other threads' writes may not be visible (a race). Add barrier_after='block'")
    if v.space is Space.GLOBAL and Barrier.GRID not in between:
        c.fail(f"{name} is read from global memory in stage {consumer} with no grid barrier after stage "
               f"{producer}: blocks would read values other blocks have not written. "
               "Add barrier_after='grid' (and keep the grid within one wave)")


def values_are_consistent(c: KernelCheck) -> None:
    """Each Value names a node of the graph, has integer fields, a stage of this kernel (or -1: an input);
    an input kept in registers is loaded by threads that own its elements; a value stored for a later
    stage or as an output is computed over its own whole shape (some thread owns each element)."""
    g, k = c.graph, c.kernel
    for name, v in k.values.items():
        if name not in g or v.node != name:
            c.fail(f"value entry {name!r} (node {v.node!r}) does not name a node of graph {g.name!r}")
        for f in ("stage", "offset", "nbytes", "loaded_in"):
            x = getattr(v, f)
            if isinstance(x, bool) or not isinstance(x, int):
                c.fail(f"value {name} {f} must be an integer, got {x!r}")
        if not -1 <= v.stage < len(k.stages):
            c.fail(f"value {name} says stage {v.stage}, but the kernel has stages 0..{len(k.stages) - 1} "
                   "(-1: a kernel input)")
        if v.loaded_in >= 0:
            _check_kept_input(c, name, v)
        if v.stage >= 0 and (name in c.crossing or v.output):
            s = k.stages[v.stage]
            whole = g[name].op == "reduce" or name in s.epilogue or reshapes(s.mapping.domain, g[name].shape)
            if not whole:
                c.fail(f"{name} {shape_str(g[name].shape)} is stored for later use, but stage {v.stage} "
                       f"iterates over {shape_str(s.mapping.domain)}: no thread owns each of its elements. "
                       "Compute it in a stage over its own shape, or recompute it where it is read")


def _check_kept_input(c: KernelCheck, name: str, v) -> None:
    """A kernel input kept in registers: later readers must be the threads that loaded each element."""
    g, k = c.graph, c.kernel
    if v.stage >= 0 or v.space is not Space.REGISTER or v.loaded_in >= len(k.stages):
        c.fail(f"value {name} says loaded_in={v.loaded_in}, but only a kernel input (stage -1) living in "
               f"registers can be kept by one of stages 0..{len(k.stages) - 1}")
    m = k.stages[v.loaded_in].mapping
    if not reshapes(m.domain, g[name].shape):
        c.fail(f"input {name} {shape_str(g[name].shape)} is kept in registers by stage {v.loaded_in}, which "
               f"visits {shape_str(m.domain)}: a thread holds none of its elements")
    for j in v.read_later:
        if k.stages[j].mapping != m:
            c.fail(f"stage {j} reads input {name} from the registers stage {v.loaded_in} filled, but maps "
                   "elements to threads differently: load it from global memory (loaded_in=-1, space 'global')")


def index_width_holds(c: KernelCheck) -> None:
    """``index_bits`` is 32 or 64, and 32 only where every index the kernel forms fits (astitch_sim/plan/index_bits.py)."""
    k = c.kernel
    if k.index_bits not in WIDTHS:
        c.fail(f"index_bits must be one of {WIDTHS}, got {k.index_bits!r}; write plans with plan.to_json()")
    if k.index_bits == 32:
        big = largest_index(c.graph, k.stages, list(k.values) + list(k.inputs), k.grid, k.block)
        if big >= LIMIT_32:
            c.fail(f"index_bits=32 but the kernel forms indices up to {big} (>= 2**31): set index_bits=64")


def reduce_scheme_holds(c: KernelCheck) -> None:
    """Each stage's reduction scheme can run on its mapping (``reduce_scheme.py``) and its scratch is reserved:
    ``none`` exactly where no task has several threads, ``shuffle`` only where the butterfly reaches the lanes."""
    k = c.kernel
    for i, s in enumerate(k.stages):
        cross = bool(s.reduces) and lanes_of(s.mapping) > 1
        if (s.reduce_scheme is ReduceScheme.NONE) == cross:
            c.fail(f"stage {i} ({s.dominant}) has reduce_scheme={s.reduce_scheme} but "
                   + ("several threads share each reduction task: use 'shuffle' or 'tree'" if cross else
                      "no reduction task has several threads: use 'none'"))
        blocked = shuffle_blocked(s.mapping) if s.reduce_scheme is ReduceScheme.SHUFFLE else ""
        if blocked:
            c.fail(f"stage {i} ({s.dominant}) reduces by shuffle, but {blocked}: use reduce_scheme='tree'")
    tree, warp, _ = scratch_areas(k.stages, lambda s: s.scratch_slots)
    if k.scratch_bytes < tree + warp:
        c.fail(f"the stages' reduction schemes need {tree + warp} bytes of scratch (tree {tree}, warp totals {warp}) "
               f"but the kernel reserves {k.scratch_bytes}")


def task_registers_hold(c: KernelCheck) -> None:
    """A per-task value (reduce result, epilogue value) that later stages read from registers: its stage's
    reduction left the total in every lane of the task (a shuffle), and every reader gives each task to
    the same threads in the same task-loop trip (``plan/task_registers.py``)."""
    g, k = c.graph, c.kernel
    for name in k.values:
        if not kept_per_task(k, g, name):
            continue
        v = k.values[name]
        p = k.stages[v.stage]
        if not every_lane_holds(p):
            c.fail(f"{name} is one value per task of stage {v.stage} and is kept in registers for stage(s) "
                   f"{', '.join(map(str, v.read_later))}, but that stage reduces by {p.reduce_scheme} on a "
                   f"{p.mapping.kind} mapping split over {p.mapping.splits} block(s): only a shuffle in one block "
                   "leaves the total in every lane. Put it in shared memory (scheme 'regional')")
        for j in v.read_later:
            if not same_task_threads(p.mapping, k.stages[j].mapping):
                c.fail(f"stage {j} reads {name} from the registers stage {v.stage} left, but gives the tasks to "
                       "other threads (another rows layout, launch shape or task loop): put it in shared memory "
                       "(scheme 'regional') or global memory")


def shared_layout_fits(c: KernelCheck) -> None:
    """The shared-memory slots of the kernel's values lie inside the bytes it reserves."""
    k = c.kernel
    used = max((v.offset + v.nbytes for v in k.values.values() if v.space is Space.SHARED), default=0)
    if used > k.shared_bytes:
        c.fail(f"shared values need {used} bytes but the kernel reserves {k.shared_bytes}")


#: the rules every kernel keeps, in the order they are checked (the first broken one is reported)
RULES = (
    Rule("launch fields are integers", integer_launch_fields),
    Rule("grid within CUDA's limit", grid_within_cuda_limit),
    Rule("shared bytes not negative", shared_bytes_not_negative),
    Rule("inputs and outputs are graph nodes", inputs_and_outputs_are_nodes),
    Rule("kind is generated or library", known_kind),
    Rule("block size within the GPU's limit", block_size_allowed),
    Rule("at least one block", at_least_one_block),
    Rule("shared memory within the per-block limit", shared_memory_fits),
    Rule("registers within the GPU's limit", registers_allowed),
    Rule("why a kernel ends names its own ops", ends_name_its_ops),
    Rule("a grid barrier's grid fits one wave", grid_barrier_within_one_wave),
    Rule("inputs are computed by earlier kernels", inputs_computed_earlier),
    Rule("a library kernel computes one library op", library_kernel_is_one_op, (LIBRARY,)),
    Rule("a generated kernel has stages", has_stages, (GENERATED,)),
    Rule("stages are well formed", stages_are_well_formed, (GENERATED,)),
    Rule("reads follow writes, behind the right barrier", reads_follow_writes, (GENERATED,)),
    Rule("values are consistent", values_are_consistent, (GENERATED,)),
    Rule("the shared layout fits the reserved bytes", shared_layout_fits, (GENERATED,)),
    Rule("32-bit index math only where indices fit", index_width_holds, (GENERATED,)),
    Rule("each reduction scheme fits its mapping and scratch", reduce_scheme_holds, (GENERATED,)),
    Rule("per-task values in registers are in every reader's lanes", task_registers_hold, (GENERATED,)),
)


@dataclass
class OutputsCheck:
    """Every graph output is computed by some kernel and written to global memory by one."""
    computed: set = field(default_factory=set)
    written: set = field(default_factory=set)

    def check(self, graph) -> None:
        for o in graph.outputs:
            if o.name not in self.computed:
                raise AStitchError(f"plan never computes graph output {o.name}")
            if o.name not in self.written:
                raise AStitchError(f"plan computes graph output {o.name} but no kernel lists it in its outputs, so "
                                   "it never reaches global memory: add it to the outputs of the kernel computing it")


def validate_plan(plan, barriers: bool = True) -> None:
    """Raise AStitchError on the first broken rule of ``RULES`` (kernel by kernel, in launch order), then
    check that every graph output is computed and written.

    ``barriers=False`` skips only the check that a value read across stages has
    the barrier that makes it visible -- the SIMT model's trace mode runs such a
    plan anyway and reports the races; hardware and deadlock rules always apply.
    """
    g = plan.graph
    produced = {p.name for p in g.inputs} | {n.name for n in g if n.op == "constant"}
    outputs = OutputsCheck(set(produced), set(produced))
    for k in plan.kernels:
        c = KernelCheck(plan, k, barriers, produced)
        for rule in RULES:
            if rule.applies(k):
                rule.check(c)
        produced.update(k.outputs if k.kind == LIBRARY else c.computed_at)
        outputs.written.update(k.outputs)
    outputs.computed = produced
    outputs.check(g)
