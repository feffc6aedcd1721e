"""One stage: its comment header, the checks on its mapping, the loops and body, the barrier after it.

:class:`StageWriter` assembles one emitter per idea, each a plain class handed
the stage's :class:`~gpu_backend.codegen.stage_context.StageContext` (the stage, its
mapping, the kernel's writer, the output lines, and the state shared while
writing: the iteration, the domain index variables, the accumulators, the
reduces' results, the phase) and the other emitters it calls:

* :class:`~gpu_backend.codegen.dtypes.CastEmitter` -- an op's result back to its node's type;
* :class:`~gpu_backend.codegen.slots.SlotEmitter` -- where a Regional value sits in shared memory;
* :class:`~gpu_backend.codegen.values.ValueEmitter` -- a node's value at a domain index (casts, slots);
* :class:`~gpu_backend.codegen.reductions.ReductionEmitter` -- folds, the tree, split combines, the
  epilogue (values, casts, slots);
* :class:`~gpu_backend.codegen.elements.ElementEmitter` -- the body at one element (values, reductions);
* :class:`~gpu_backend.codegen.loops.LoopEmitter` -- a ``flat`` stage's loop, domain index variables (elements);
* :class:`~gpu_backend.codegen.task_loops.TaskLoopEmitter` -- a ``rows``/``columns`` stage's loops (loops,
  elements, reductions, slots).

The arrows point one way (casts and slots need nobody; the loops need everyone),
so the emitters are built in that order and none holds a reference to the writer.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .dtypes import CastEmitter
from .elements import ElementEmitter
from .loops import LoopEmitter
from .reductions import ReductionEmitter
from .slots import SlotEmitter
from .stage_context import StageContext
from .task_loops import TaskLoopEmitter
from .values import ValueEmitter

if TYPE_CHECKING:
    from .kernel import KernelWriter


def scheme_words(v, crosses: bool = False) -> str:
    """A Value's stitch scheme and memory space, in the paper's words."""
    if v.scheme == "local":
        return "Local (registers" + (", kept for a later stage)" if crosses else ")")
    if v.scheme == "regional":
        return ("Regional (shared memory, read after a block barrier)" if v.space == "shared" else
                "Regional (its task's threads combine it in shared memory)")
    if v.scheme == "global":
        return "Global (global memory, read after a grid barrier)" if v.space == "global" else "Global"
    return "Independent (no consumer in this kernel)"


class StageWriter:
    """Writes one stage: the header, the checks, the mapping's loops and body, the barrier after it."""

    #: the barrier statement after a stage, by the plan's ``barrier_after`` (and whether it is a grid barrier)
    BARRIERS = {
        "none": (None, False),
        "block": ("cuda.syncthreads()  # block barrier: this stage's shared-memory values are visible to the block",
                  False),
        "grid": ("grid.sync()  # grid barrier: this stage's global values are visible to every block", True),
    }

    def __init__(self, kw: KernelWriter, si: int):
        self.ctx = ctx = StageContext.for_stage(kw, si)
        self.casts = CastEmitter(ctx)
        self.slots = SlotEmitter(ctx)
        self.values = ValueEmitter(ctx, self.casts, self.slots)
        self.reductions = ReductionEmitter(ctx, self.values, self.casts, self.slots)
        self.elements = ElementEmitter(ctx, self.values, self.reductions)
        self.loops = LoopEmitter(ctx, self.elements)
        self.tasks = TaskLoopEmitter(ctx, self.loops, self.elements, self.reductions, self.slots)

    def write(self):
        """The stage's comment header, the checks, its loops, and the barrier after it."""
        self.write_header()
        self.check_reduces()
        if self.ctx.m.kind == "flat":
            self.loops.write_flat()
        else:
            self.tasks.write()
        self.write_barrier()
        self.ctx.out("")

    def write_header(self):
        """``# ---- stage i``: the mapping, and each value's stitch scheme in the paper's words."""
        ctx = self.ctx
        s, m, out, kw = ctx.stage, ctx.m, ctx.out, ctx.kw
        out(f"# ---- stage {ctx.si}: dominant {s.dominant} -- {m.describe()}")
        for n in list(s.ops) + list(s.epilogue):
            v = kw.values.get(n)
            if v is None or v.stage != ctx.si or ctx.g[n].opdef.is_view and not (v.output or
                                                                                  v.space != "register"):
                continue
            where = "epilogue, " if n in ctx.epi else ""
            out(f"#   {n}: {where}{scheme_words(v, n in kw.read_later)}" + (" -> output" if v.output else ""))
        for n in self.elements.kept_here():
            out(f"#   {n}: kernel input, loaded here and kept in registers for stage(s) "
                f"{sorted(kw.read_later.get(n, ()))} (hierarchical data reuse)")
        if s.recompute:
            out("#      recomputed per value: " + ", ".join(f"{n} x{c}" for n, c in s.recompute.items()))

    def check_reduces(self):
        """A reduce needs a rows/columns mapping whose domain is its operand and whose reduced dims are its own."""
        ctx = self.ctx
        g, m = ctx.g, ctx.m
        if ctx.reduces and m.kind == "flat":
            ctx.fail("a stage with a reduce needs a rows or columns mapping")
        for r in ctx.reduces:
            if tuple(g[r].operands[0].shape) != tuple(m.domain):
                ctx.fail(f"reduce {r} reads {g[r].operands[0].shape} but the stage's domain is {m.domain}")
            red_group = set(m.groups[1])
            if set(g[r].attrs["dimensions"]) != red_group:
                ctx.fail(f"reduce {r} reduces dims {g[r].attrs['dimensions']} but the mapping's reduced "
                         f"dims are {sorted(red_group)}")
        if ctx.stage.epilogue and not ctx.reduces:
            ctx.fail("an epilogue without a reduce")

    def write_barrier(self):
        """The barrier the plan puts after the stage (a grid barrier makes the launch cooperative)."""
        ctx = self.ctx
        barrier = ctx.stage.barrier_after
        if barrier not in self.BARRIERS:
            ctx.fail(f"unknown barrier {barrier!r}")
        line, is_grid = self.BARRIERS[barrier]
        if line is not None:
            ctx.out(line)
        if is_grid:
            ctx.kw.cooperative_used = True
