"""plan.validate(): the hardware rules and bookkeeping rules a Plan must keep.

Checked here, each failure an AStitchError naming the kernel, the rule and the fix:
* launch shape: threads per block within the GPU's limit, at least one block;
* shared memory within the per-block opt-in limit, registers within 255,
  and at least one block fits on an SM (occupancy);
* a kernel with a grid barrier launches no more blocks than fit in one wave --
  otherwise blocks wait at the barrier for blocks that can never start: deadlock;
* every stage uses the kernel's launch shape and a mapping that covers its domain,
  and that domain has elements (zero-size values never reach a kernel: zero_size.py);
* every value is computed before it is read, and a value read from shared or
  global memory by a later stage has the block or grid barrier that makes it visible.
"""
from __future__ import annotations

from .errors import AStitchError
from .machine import blocks_per_wave as resident_blocks
from .graph import shape_str
from .plan import BARRIERS, SCHEMES

#: most blocks one launch may have (CUDA's gridDim.x limit)
MAX_GRID = 2**31 - 1


def validate_plan(plan, barriers: bool = True) -> None:
    """Raise AStitchError on the first broken rule.

    ``barriers=False`` skips only the check that a value read across stages has
    the barrier that makes it visible -- the SIMT model's trace mode runs such a
    plan anyway and reports the races; hardware and deadlock rules always apply.
    """
    g, gpu = plan.graph, plan.gpu
    produced = {p.name for p in g.inputs} | {n.name for n in g if n.op == "constant"}
    written = set(produced)
    for k in plan.kernels:
        where = f"kernel {k.name}"
        for field in ("grid", "block", "shared_bytes", "registers_per_thread"):
            v = getattr(k, field)
            if isinstance(v, bool) or not isinstance(v, int):
                raise AStitchError(f"{where}: {field} must be an integer, got {v!r}; write plans with plan.to_json()")
        if k.grid > MAX_GRID:
            raise AStitchError(f"{where}: grid of {k.grid} blocks; CUDA launches at most {MAX_GRID} blocks. "
                               "Use bigger blocks or a grid-stride loop (vertical packing)")
        if k.shared_bytes < 0:
            raise AStitchError(f"{where}: shared_bytes={k.shared_bytes} is negative")
        for field in ("inputs", "outputs"):
            bad = [n for n in getattr(k, field) if not isinstance(n, str) or n not in g]
            if bad:
                raise AStitchError(f"{where}: {field} name nodes that are not in graph {g.name!r}: {bad}")
        written.update(k.outputs)
        if k.kind not in ("generated", "library"):
            raise AStitchError(f"{where}: kind {k.kind!r} is not generated or library")
        if not 1 <= k.block <= gpu.max_threads_per_block:
            raise AStitchError(f"{where}: {k.block} threads per block; {gpu.name} allows 1..{gpu.max_threads_per_block}. "
                               "Use smaller blocks (pack fewer rows per block)")
        if k.grid < 1:
            raise AStitchError(f"{where}: grid of {k.grid} blocks; launch at least one")
        if k.shared_bytes > gpu.shared_per_block_optin:
            raise AStitchError(f"{where}: needs {k.shared_bytes} bytes of shared memory per block; {gpu.name} allows "
                               f"{gpu.shared_per_block_optin}. Demote Regional values to Global or use fewer rows per block")
        if not 1 <= k.registers_per_thread <= gpu.max_registers_per_thread:
            raise AStitchError(f"{where}: {k.registers_per_thread} registers per thread; {gpu.name} allows "
                               f"1..{gpu.max_registers_per_thread}")
        wave = gpu.blocks_per_wave(k.block, k.shared_bytes, k.registers_per_thread)  # raises if nothing fits
        shared, regs, whose = k.shared_bytes, k.registers_per_thread, ""
        if k.machine is not None:      # ptxas's real numbers (gpu_backend.apply_compiler) decide residency
            wave = resident_blocks(gpu, k)
            shared, regs, whose = k.machine.shared_total, k.machine.registers, f" per {k.machine.tool}"
        if k.global_barriers and k.grid > wave:
            raise AStitchError(
                f"{where}: a grid barrier with {k.grid} blocks, but only {wave} blocks of {k.block} threads "
                f"({shared} B shared, {regs} registers{whose}) fit on {gpu.name} at once: "
                f"the resident blocks would wait forever for blocks that cannot start (deadlock). "
                f"Launch at most {wave} blocks (vertical packing) or split the kernel at the barrier")
        for name in k.inputs:
            if name not in produced:
                raise AStitchError(f"{where}: reads {name} before any kernel computes it")
        if k.kind == "library":
            _check_library(g, k, where)
            produced.update(k.outputs)
            written.update(k.outputs)
            continue
        if not k.stages:
            raise AStitchError(f"{where}: a generated kernel needs at least one stage")
        computed_at = {}
        for i, s in enumerate(k.stages):
            m = s.mapping
            m.check(gpu)
            if m.size == 0:
                raise AStitchError(f"{where}: stage {i} ({s.dominant}) iterates over the empty domain "
                                   f"{shape_str(m.domain)}: no kernel computes a value with no elements. "
                                   "asim.compile removes them (astitch_sim.zero_size); recompile the graph")
            if (m.grid, m.block) != (k.grid, k.block):
                raise AStitchError(f"{where}: stage {i} ({s.dominant}) maps onto {m.grid}x{m.block} "
                                   f"but the kernel launches {k.grid}x{k.block}")
            if not isinstance(s.dominant, str) or s.dominant not in g:
                raise AStitchError(f"{where}: stage {i} has unknown dominant node {s.dominant!r}")
            if s.barrier_after not in BARRIERS:
                raise AStitchError(f"{where}: stage {i} barrier_after={s.barrier_after!r}; use one of {BARRIERS}")
            for n, times in s.recompute.items():
                if not isinstance(n, str) or n not in g or isinstance(times, bool) or not isinstance(times, int) \
                        or times < 1:
                    raise AStitchError(f"{where}: stage {i} recompute entry {n!r}: {times!r} must name a graph node "
                                       "and a count >= 1")
            for n in list(s.ops) + list(s.epilogue):
                if not isinstance(n, str) or n not in g:
                    raise AStitchError(f"{where}: stage {i} computes unknown node {n!r}")
                computed_at.setdefault(n, i)
        for i, s in enumerate(k.stages):
            for n in list(s.ops) + list(s.epilogue):
                for o in g[n].operands:
                    if o.name in computed_at:
                        j = computed_at[o.name]
                        if j > i:
                            raise AStitchError(f"{where}: stage {i} reads {o.name} which stage {j} computes later")
                        if j < i and o.name not in s.ops and o.name not in s.epilogue:   # not its own copy
                            _check_visible(k, o.name, j, i, where, barriers)
                    elif not (o.op == "constant" and o.rank == 0) and o.name not in produced:
                        raise AStitchError(f"{where}: {n} reads {o.name}, which is neither computed here nor an input")
        crossing = {o.name for i, s in enumerate(k.stages) for n in list(s.ops) + list(s.epilogue)
                    for o in g[n].operands if o.name in computed_at and computed_at[o.name] < i
                    and o.name not in s.ops and o.name not in s.epilogue}
        for name, v in k.values.items():
            if name not in g or v.node != name:
                raise AStitchError(f"{where}: value entry {name!r} (node {v.node!r}) does not name a node of "
                                   f"graph {g.name!r}")
            if v.space not in ("register", "shared", "global"):
                raise AStitchError(f"{where}: value {name} lives in unknown space {v.space!r}")
            if v.scheme not in SCHEMES:
                raise AStitchError(f"{where}: value {name} has unknown stitch scheme {v.scheme!r}; use one of {SCHEMES}")
            for field in ("stage", "offset", "nbytes", "loaded_in"):
                x = getattr(v, field)
                if isinstance(x, bool) or not isinstance(x, int):
                    raise AStitchError(f"{where}: value {name} {field} must be an integer, got {x!r}")
            if not -1 <= v.stage < len(k.stages):
                raise AStitchError(f"{where}: value {name} says stage {v.stage}, but the kernel has stages "
                                   f"0..{len(k.stages) - 1} (-1: a kernel input)")
            if v.loaded_in >= 0:
                _check_kept_input(g, k, name, v, where)
            if v.stage >= 0 and (name in crossing or v.output):
                s = k.stages[v.stage]
                whole = g[name].op == "reduce" or name in s.epilogue or tuple(g[name].shape) == tuple(s.mapping.domain)
                if not whole:
                    raise AStitchError(
                        f"{where}: {name} {shape_str(g[name].shape)} is stored for later use, but stage {v.stage} "
                        f"iterates over {shape_str(s.mapping.domain)}: no thread owns each of its elements. "
                        "Compute it in a stage over its own shape, or recompute it where it is read")
        used = max((v.offset + v.nbytes for v in k.values.values() if v.space == "shared"), default=0)
        if used > k.shared_bytes:
            raise AStitchError(f"{where}: shared values need {used} bytes but the kernel reserves {k.shared_bytes}")
        produced.update(computed_at)
    for o in g.outputs:
        if o.name not in produced:
            raise AStitchError(f"plan never computes graph output {o.name}")
        if o.name not in written:
            raise AStitchError(f"plan computes graph output {o.name} but no kernel lists it in its outputs, so it "
                               "never reaches global memory: add it to the outputs of the kernel computing it")


def _check_kept_input(g, kernel, name, v, where) -> None:
    """A kernel input kept in registers: later readers must be the threads that loaded each element."""
    if v.stage >= 0 or v.space != "register" or v.loaded_in >= len(kernel.stages):
        raise AStitchError(f"{where}: value {name} says loaded_in={v.loaded_in}, but only a kernel input "
                           f"(stage -1) living in registers can be kept by one of stages 0..{len(kernel.stages) - 1}")
    m = kernel.stages[v.loaded_in].mapping
    if tuple(g[name].shape) != tuple(m.domain):
        raise AStitchError(f"{where}: input {name} {shape_str(g[name].shape)} is kept in registers by stage "
                           f"{v.loaded_in}, which visits {shape_str(m.domain)}: a thread holds none of its elements")
    for j in v.read_later:
        if kernel.stages[j].mapping != m:
            raise AStitchError(f"{where}: stage {j} reads input {name} from the registers stage {v.loaded_in} "
                               "filled, but maps elements to threads differently: load it from global memory "
                               "(loaded_in=-1, space 'global')")


def _check_visible(kernel, name, producer, consumer, where, barriers=True) -> None:
    v = kernel.values.get(name)
    if v is None:
        raise AStitchError(f"{where}: {name} crosses stages {producer}->{consumer} but has no Value entry")
    if not barriers:
        return
    between = [s.barrier_after for s in kernel.stages[producer:consumer]]
    if kernel.stages[producer].sync_after_combine and name in kernel.stages[producer].ops:
        between.append("grid")      # a split reduce is complete after its stage's own grid barrier
    if v.space == "shared" and not any(b in ("block", "grid") for b in between):
        raise AStitchError(f"{where}: {name} is read from shared memory in stage {consumer} with no block barrier "
                           f"after stage {producer}: other threads' writes may not be visible (a race). "
                           "Add barrier_after='block'")
    if v.space == "global" and "grid" not in between:
        raise AStitchError(f"{where}: {name} is read from global memory in stage {consumer} with no grid barrier "
                           f"after stage {producer}: blocks would read values other blocks have not written. "
                           "Add barrier_after='grid' (and keep the grid within one wave)")


def _check_library(g, k, where) -> None:
    """A library kernel computes library nodes that are results of one op, reading its operands (or views)."""
    from .analysis import VIEW_OPS, is_boundary
    from .boundary import sibling_key
    if not isinstance(k.library_op, str) or k.library_op not in g:
        raise AStitchError(f"{where}: library kernel computes {k.library_op!r}, which is not a node of "
                           f"graph {g.name!r}")
    outs = list(k.outputs) or [k.library_op]
    if k.library_op not in outs:
        raise AStitchError(f"{where}: library kernel lists outputs {outs} without its own node {k.library_op}")
    head = g[k.library_op]
    if not is_boundary(head):
        raise AStitchError(f"{where}: {k.library_op} is a {head.op}, not a library op (dot, sort, topk, scatter, "
                           "reduce-window): plan it in a generated kernel")
    for n in outs:
        if sibling_key(g[n]) != sibling_key(head):
            raise AStitchError(f"{where}: {n} is not a result of the same {head.op} as {k.library_op}")
    views = k.views if isinstance(k.views, dict) else None
    if views is None:
        raise AStitchError(f"{where}: views must be a dict (operand -> buffer), got {k.views!r}")
    for o in head.operands:
        if o.op == "constant" and o.rank == 0:
            continue
        src = views.get(o.name, o.name)
        if src not in k.inputs:
            raise AStitchError(f"{where}: operand {o.name} is read from {src}, which is not among the kernel's "
                               f"inputs {k.inputs}")
        if src != o.name:
            base = o
            while base.name != src and base.op in VIEW_OPS:
                base = base.operands[0]
            if base.name != src:
                raise AStitchError(f"{where}: {o.name} is read as a view of {src}, but it is not a chain of "
                                   "row-major reshapes of it")
