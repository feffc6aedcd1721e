"""What the emitters of one stage share: the facts of the stage and the state of the code written so far.

A stage is written by several emitters, one per idea (casts, Regional slots,
element values, reductions, the per-element body, the loops).  They must agree
on a few things: which stage and mapping they write, where the lines go, and --
while the code is being written -- which variable holds the thread's iteration,
which variables hold the domain index, the reduces' accumulators, and whether
the code being written runs per element or once per task (the epilogue).

:class:`StageContext` is that shared part, declared in one place: every field
says what it is and which emitter writes it.  Each emitter is handed the one
context (and the other emitters it calls) when it is built, so what an emitter
reads and writes is visible in its code as ``ctx.<field>``, never an attribute
that appears on a shared ``self`` somewhere else.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    from astitch_sim.ir.graph import Graph
    from astitch_sim.plan.mapping import ThreadMapping
    from astitch_sim.plan.plan import Kernel, Stage

    from .kernel import KernelWriter
    from .source import Lines

#: an index or loop expression in generated source: a variable/expression, or a constant folded at generation
Expr = Union[int, str]


@dataclass
class StageContext:
    """The facts of one stage and the mutable state its emitters share while writing it.

    The first group is fixed when :class:`~gpu_backend.codegen.stage.StageWriter` builds the
    context; the second group changes as the code is written, and each field names
    the emitter that writes it.
    """

    # -- the stage (set once by StageWriter, read by every emitter) -----------------------------
    #: the kernel's writer: its Values, arrays and views, fresh names, loads/stores, ``fail``
    kw: KernelWriter
    #: the stage's index in its kernel (Values record the stage that computes them by this index)
    si: int
    #: the plan's stage: its ops, epilogue, reduces, barrier, recompute notes
    stage: Stage
    #: the stage's thread mapping (``stage.mapping``): the loops and the reduction tree follow it
    m: ThreadMapping
    #: the kernel body's lines: every emitter appends its statements here, at the current indent
    out: Lines
    #: the stage's ops (a set, for membership tests)
    ops: set = field(default_factory=set)
    #: the stage's epilogue ops: computed once per task, after its reduces complete
    epi: set = field(default_factory=set)
    #: the stage's reduces, in plan order (the order of their accumulators and scratch slots)
    reduces: list = field(default_factory=list)

    # -- the state while writing (each field names its writer) ----------------------------------
    #: the thread's iteration inside the domain loops, as an expression (it indexes the register
    #: arrays of values kept for later stages); None outside a domain loop.  Written by
    #: LoopEmitter.write_flat and TaskLoopEmitter.name_iteration when they open the element loop,
    #: cleared by ReductionEmitter.finish_tasks (the epilogue runs once per task, not per iteration).
    it: Optional[Expr] = None
    #: the thread's trip of the task loop (vertical packing: ``outer``, or 0 with one trip), as an
    #: expression: it indexes the register slots of per-task values kept for later stages.  Written by
    #: TaskLoopEmitter.each_task as each task opens; None in a flat stage.
    outer: Optional[Expr] = None
    #: domain dim -> the variable (or constant) holding that dim's index at the current element.
    #: Written by LoopEmitter.domain_vars (TaskLoopEmitter empties it as each task opens); read by
    #: TaskLoopEmitter to find a task's index.
    dvars: dict = field(default_factory=dict)
    #: reduce -> its per-thread accumulator variable(s): ``(value,)``, or ``(value, index)`` for
    #: argmax/argmin.  Written by TaskLoopEmitter.prepare_reductions (LoopEmitter.write_flat: none,
    #: a flat stage has no reduce); read by ElementEmitter (accumulate) and ReductionEmitter (the tree).
    acc_var: dict = field(default_factory=dict)
    #: a column lane's accumulators, one such dict per column of its vector (``mapping.vector`` adjacent
    #: columns are as many tasks; one dict, ``acc_var`` itself, for every other stage).  Written by
    #: TaskLoopEmitter.prepare_reductions; LoopEmitter.vector_body folds element ``j`` into entry ``j``.
    acc_lanes: list = field(default_factory=list)
    #: reduce -> the variable holding its complete value for the task.  Written by
    #: ReductionEmitter.finish_tasks; ValueEmitter reads it in the epilogue phase.
    result_var: dict = field(default_factory=dict)
    #: ``"element"`` while writing the per-element body, ``"epilogue"`` while writing the task's
    #: epilogue (where a reduce's value is its result, and epilogue ops may be computed).
    #: Switched by ReductionEmitter.finish_tasks; read by ValueEmitter.
    phase: str = "element"
    #: while a flat stage's vectors are written: the lines of the current vector's loads, issued
    #: before any vector is computed (memory-level parallelism); None otherwise.  Written by
    #: LoopEmitter.write_vectors; ValueEmitter puts the loads it can hoist there.
    prefetch: Optional[Lines] = None
    #: global array -> the values of the current vector stored so far (one vector store when
    #: complete).  Written by ElementEmitter.
    pending: dict = field(default_factory=dict)

    @classmethod
    def for_stage(cls, kw: KernelWriter, si: int) -> "StageContext":
        """The context of stage ``si`` of the kernel ``kw`` writes, in its starting state."""
        stage = kw.k.stages[si]
        return cls(kw=kw, si=si, stage=stage, m=stage.mapping, out=kw.out, ops=set(stage.ops),
                   epi=set(stage.epilogue), reduces=list(stage.reduces))

    @property
    def k(self) -> Kernel:
        """The plan's kernel the stage belongs to."""
        return self.kw.k

    @property
    def g(self) -> Graph:
        """The graph whose nodes the stage computes."""
        return self.kw.g

    def fail(self, msg: str):
        """Stop generation with an AStitchError naming the kernel, this stage and the reason."""
        self.kw.fail(msg, self.si)
