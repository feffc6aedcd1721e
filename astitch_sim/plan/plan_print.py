"""Plans as text (like the paper's figures) and as Graphviz DOT (kernels as clusters)."""
from __future__ import annotations

from ..ir.graph import shape_str
from .machine import blocks_per_wave as resident_blocks
from .search_record import format_search
from ..ir.viz import graph_to_dot
from ..passes.trivial_reduce import NOTE_PREFIX as TRIVIAL_REDUCE_NOTE
from ..passes.zero_size import NOTE_PREFIX as ZERO_SIZE_NOTE
from .notes import INDUCTOR as INDUCTOR_NOTE, NEVER_BEHIND as NEVER_BEHIND_NOTE, XLA_RULES as XLA_RULES_NOTE
from .vocabulary import Barrier, Space
from .task_registers import kept_per_task

SCHEME_COLOURS = {"independent": "#ffffff", "local": "#d8ecd8", "regional": "#cfe0fa", "global": "#fbd3d0"}
SPACE_WORD = {"register": "registers", "shared": "shared memory", "global": "global memory"}


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


def _value_line(g, k, s, n, where) -> str:
    node = g[n]
    v = k.values.get(n)
    tag = ""
    if v is not None:
        tag = f"[{v.scheme}]"
        if v.space != Space.REGISTER:
            tag += f" -> {SPACE_WORD[v.space]}"
        if v.output:
            tag += " -> output"
        if v.read_later:
            tag += f" -> stage{'s' if len(v.read_later) > 1 else ''} {', '.join(map(str, v.read_later))}"
        if kept_per_task(k, g, n):
            tag += "  (one per task, in every lane's registers: the shuffle left the total in each lane)"
    rc = s.recompute.get(n)
    if rc and rc > 1:
        tag += f"  (computed {rc}x per value)"
    if node.kind == "indexed":
        tag += "  (indexed load: run-time indices)"
    elif node.op == "reduce" and len(node.operands) == 4:
        tag += f"  ({node.attrs['reducer']}: a (value, index) reduce)"
    return f"  {where}{n:<18} {node.op:<14} {shape_str(node.shape, node.dtype):<16} {tag}"


def _shared_layout(k) -> str:
    """The block's shared memory as the plan lays it out: Regional values at their offsets, then the
    reduction scratch (values whose lifetimes do not overlap share bytes)."""
    parts = [f"{v.node}@{v.offset} ({_kib(v.nbytes)})" for v in sorted(k.values.values(), key=lambda v: v.offset)
             if v.space == Space.SHARED]
    if k.scratch_bytes:
        parts.append(f"reduction scratch@{k.scratch_offset} ({_kib(k.scratch_bytes)})")
    return ", ".join(parts)


def format_kernel(plan, k, index: int) -> list:
    g = plan.graph
    lines = []
    if k.kind == "library":
        from .boundary import LIBRARY_OPS
        head = g[k.library_op]
        lib = LIBRARY_OPS.get(head.op)
        what = f": {lib.stands_for}" if lib else ""
        lines.append(f"kernel {index}  {k.name}  [library{what}]  grid={k.grid} block={k.block}")
        if k.machine is not None:
            lines.append(f"  {k.machine.describe()}")
        for n in k.outputs or [k.library_op]:
            lines.append(f"  {g[n]}")
        reads = [f"{o} (as a view of {b})" for o, b in k.views.items()]
        reads += [n for n in k.inputs if n not in k.views.values()]
        if reads:
            lines.append(f"  reads  {', '.join(reads)}  (global)")
        lines.append(f"  writes {', '.join(k.outputs or [k.library_op])}  (global)")
        if lib:
            lines.append(f"  ---- kernel boundary: {head.op} is not stitched ({lib.why}) ----")
        lines.extend(_end_lines(k))
        return lines
    wave = resident_blocks(plan.gpu, k)
    waves = -(-k.grid // wave)
    head = (f"kernel {index}  {k.name}  grid={k.grid} block={k.block}  shared={_kib(k.shared_bytes)}  "
            f"regs={k.registers_per_thread}{'' if k.machine else ' (estimate)'}  waves={waves}  index={k.index_bits}-bit")
    if k.global_barriers:
        head += f"  grid barriers={k.global_barriers} (cooperative, {k.grid}<={wave} blocks resident)"
    lines.append(head)
    if k.machine is not None:
        lines.append(f"  {k.machine.describe()}")
    if k.inputs:
        lines.append(f"  reads  {', '.join(k.inputs)}  (global)")
    layout = _shared_layout(k)
    if layout:
        lines.append(f"  shared {layout}")
    for i, s in enumerate(k.stages):
        lines.append(f"  stage {i}: dominant {s.dominant}  -- {s.mapping.describe()}")
        for v in k.values.values():
            if v.stage < 0 and v.loaded_in == i:
                later = v.read_later
                lines.append(f"      {v.node:<18} {'load':<14} {shape_str(g[v.node].shape, g[v.node].dtype):<16} "
                             f"[local] -> stage{'s' if len(later) > 1 else ''} {', '.join(map(str, later))}  "
                             "(input loaded once, kept in registers)")
        for n in s.ops:
            lines.append(_value_line(g, k, s, n, "    "))
        if s.reduce_scheme != "none":
            lines.append(f"      reduce: {s.reduce_scheme} ({s.reduce_why})")
        if s.sync_after_combine:
            lines.append(f"  ---- grid barrier (split {', '.join(s.reduces)} combined: {s.mapping.combine}) ----")
        for n in s.epilogue:
            lines.append(_value_line(g, k, s, n, "  epilogue "))
        if s.barrier_after != Barrier.NONE:
            why = f" ({s.barrier_why}) " if s.barrier_why else " "
            lines.append(f"  ---- {s.barrier_after} barrier{why}" + "-" * max(4, 30 - len(why)))
    if k.outputs:
        lines.append(f"  writes {', '.join(k.outputs)}  (global)")
    lines.extend(_end_lines(k))
    for note in k.notes:
        lines.append(f"  note: {note}")
    return lines


def _end_lines(k) -> list:
    """Why the kernel ends (``Kernel.ends``, astitch_sim/plan/kernel_end.py): the op, the rule, in words, the source."""
    return [f"  ends at {e.describe()}" for e in k.ends]


def format_plan(plan) -> str:
    counts = plan.scheme_counts()
    head = (f"plan {plan.strategy} for {plan.graph.name} on {plan.gpu.name}: {len(plan.generated)} generated + "
            f"{len(plan.library)} library kernel(s); schemes " +
            ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    lines = [head]
    if plan.options:
        lines.append("what-if: " + ", ".join(f"{k}={v}" for k, v in plan.options.items()))
    lines.extend(f"  note: {n}" for n in plan.notes if n.startswith((ZERO_SIZE_NOTE, TRIVIAL_REDUCE_NOTE,
                                                                             NEVER_BEHIND_NOTE, INDUCTOR_NOTE, XLA_RULES_NOTE)))
    lines.extend(format_search(plan.search))
    for i, k in enumerate(plan.kernels):
        lines.extend(format_kernel(plan, k, i))
    return "\n".join(lines)


def plan_to_dot(plan) -> str:
    """The graph with one cluster per kernel, nodes coloured by stitch scheme."""
    clusters, attrs = {}, {}
    seen = set()
    for i, k in enumerate(plan.kernels):
        names = [n for n in k.computed if n not in seen]
        seen.update(names)
        clusters[f"kernel {i}: {k.name}"] = names
        for n, sc in k.schemes.items():
            attrs.setdefault(n, {"fillcolor": SCHEME_COLOURS[sc], "xlabel": sc})
    return graph_to_dot(plan.graph, node_attrs=attrs, clusters=clusters)
