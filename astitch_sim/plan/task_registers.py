"""Per-task values kept in registers: a reduce result (or an epilogue value) read by later stages, never stored.

A reduce result is one value per *task* (a row).  The paper keeps such a value that a later
stage of the same kernel reads in shared memory (Regional: one slot per task of the block, a
block barrier before the readers).  Under the ``shuffle`` reduction scheme
(``reduce_scheme.py``) that is not needed: the xor butterfly leaves **every** lane of the task
holding the total (a row of at most 32 lanes after one butterfly; a row of ``W`` whole warps
after the second butterfly that every warp of the row runs over the warp totals).  So every lane
completes the reduce, computes the epilogue and keeps the results in a register -- one per task
the thread handles (``task_iterations``: one slot per trip of the task loop).  A later stage that
gives each task to the same threads in the same task-loop trip reads the value from its own
register: no shared memory, no barrier.  This is the paper's hierarchical data reuse, in
registers (the lanes of a row already share the value, for free).

The ``tree`` scheme leaves the total on the task's first lane only; its per-task values stay
Regional, so a learner can compare the two (``asim.compile(..., reduce_scheme="tree")``).

The planner decides (``planning/kernel_builder.py``, ``planning/reduce_preference.py``) and
records the decision as the value's place (``Space.REGISTER``, ``Scheme.LOCAL``) and ``why``;
the validator, the SIMT model and the code generator read it back with :func:`kept_per_task`.
"""
from __future__ import annotations

from .vocabulary import ReduceScheme, Space

#: the ``why`` of a per-task value kept in registers (``print(plan)`` shows it)
WHY = ("the shuffle butterfly leaves every lane of the row with the total: each lane computes the epilogue "
       "and keeps it in registers; no shared memory, no barrier")


def is_task_value(graph, stage, name: str) -> bool:
    """One value per task of ``stage``: a reduce result or an epilogue value."""
    return name in stage.epilogue or graph[name].op == "reduce"


def every_lane_holds(stage) -> bool:
    """Does every lane of a task hold the task's total after the stage's reduction?  Only after a
    shuffle butterfly (a rows mapping, the task in one block: ``splits == 1``)."""
    m = stage.mapping
    return stage.reduce_scheme is ReduceScheme.SHUFFLE and m.kind == "rows" and m.splits == 1


def same_task_threads(producer, consumer) -> bool:
    """Does ``consumer`` give each task to the threads (and the task-loop trip) that ``producer`` gave it?

    A rows mapping puts task ``t`` in block ``(t % slots) // rows_per_block``, on the
    ``threads_per_row`` lanes of row ``(t % slots) % rows_per_block``, in trip ``t // slots`` of the
    task loop; so the same kind, launch shape, lanes per row, row slots and trips suffice (the
    vector width and the trips along a row may differ: they only say which elements a lane visits)."""
    p, c = producer, consumer
    return p.kind == c.kind == "rows" and p.splits == c.splits == 1 and \
        (p.grid, p.block, p.threads_per_row, p.slots, p.rows, p.task_iterations) == \
        (c.grid, c.block, c.threads_per_row, c.slots, c.rows, c.task_iterations)


def registers_of(graph, name: str, stage) -> int:
    """32-bit registers a thread spends to keep per-task value ``name``: one slot per task it handles."""
    from ..ir.dtypes import itemsize
    return stage.mapping.task_iterations * -(-itemsize(graph[name].dtype) // 4)


def kept_per_task(kernel, graph, name: str) -> bool:
    """Is ``name`` a per-task value of ``kernel`` that later stages read from registers (module docstring)?"""
    v = kernel.values.get(name)
    if v is None or v.stage < 0 or v.space is not Space.REGISTER or not v.read_later:
        return False
    return is_task_value(graph, kernel.stages[v.stage], name)
