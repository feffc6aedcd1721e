"""Regional slots: where a task's value sits in the block's shared memory (the plan's layout).

A reduce result or an epilogue value is one value per *task* (a row, or a column
of a column reduction).  A block holds several tasks' values side by side; the
slot of a task is fixed by the mapping (``rows_per_block``, ``slots``), so a
later stage of the same block finds it from the task's domain index.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import exprs as E

if TYPE_CHECKING:
    from .stage_context import StageContext


class SlotEmitter:
    """Shared-memory slot expressions of Regional values.

    It writes no statements: it turns a task's domain index into the slot expression that
    the producing stage's mapping gives it, so the stage that stores a Regional value and
    the later stages that read it compute the same slot.  It reads the kernel's Values and
    stages through the stage context.
    """

    def __init__(self, ctx: StageContext):
        self.ctx = ctx

    def task_coord(self, m, idx_of_dim: dict):
        """The mapping's task coordinate (row, or column) from the domain index of its kept dims."""
        dom = m.domain
        if m.kind == "rows":
            g = m.groups[0]
            return E.ravel([idx_of_dim[d] for d in g], [dom[d] for d in g])
        outer, inner = m.groups[0], m.groups[2]
        o = E.ravel([idx_of_dim[d] for d in outer], [dom[d] for d in outer])
        c = E.ravel([idx_of_dim[d] for d in inner], [dom[d] for d in inner])
        return E.add(E.mul(o, m.extent(2)), c)

    def slot_of(self, m, tc):
        """Shared-memory slot of task coordinate ``tc`` in the block that holds it (the plan's layout).

        rows: ``(tc // slots) * rows_per_block + tc % slots % rows_per_block``; columns:
        ``(tc // width // slots) * width + tc % width``, ``width`` the columns of a tile (``tile_width``:
        column lanes x their vector) -- simplified when the task count makes a term constant.
        """
        if m.kind == "rows":
            rpb, slots = m.rows_per_block, m.slots
            if m.rows <= rpb:
                return tc
            if m.rows <= slots:
                return E.mod(tc, rpb)
            return E.add(E.mul(E.floordiv(tc, slots), rpb), E.mod(E.mod(tc, slots), rpb))
        if m.kind == "columns":
            width = m.tile_width
            if m.rows <= width:
                return tc
            if m.tiles <= m.slots:
                return E.mod(tc, width)
            return E.add(E.mul(E.floordiv(E.floordiv(tc, width), m.slots), width), E.mod(tc, width))
        self.ctx.fail("a Regional value needs a rows or columns mapping")

    def kept_dims(self, stage) -> list:
        """The domain dims that index one task of ``stage`` (all but the reduced dims)."""
        g = self.ctx.g
        red = [n for n in stage.ops if g[n].op == "reduce"]
        if red:
            dims = set(g[red[0]].attrs["dimensions"])
            return [d for d in range(len(stage.mapping.domain)) if d not in dims]
        m = stage.mapping
        return sorted(m.groups[0]) if m.kind == "rows" else sorted(m.groups[0] + m.groups[2])

    def shared_slot(self, n: str, idx: tuple):
        """Slot of a Regional value (a reduce result or an epilogue value) at task index ``idx``."""
        ctx = self.ctx
        v = ctx.kw.values[n]
        prod = ctx.k.stages[v.stage]
        if not (n in prod.epilogue or ctx.g[n].op == "reduce"):
            ctx.fail(f"{n} is Regional but is neither a reduce nor an epilogue value: no task slot for it")
        kept = self.kept_dims(prod)
        if not idx and ctx.g[n].rank == 0:
            # a scalar an epilogue computes per task (``p8 * 0`` beside a row reduction): every task's slot holds
            # the same value; a scalar read takes the first task's, as the SIMT model does (task 0's slot)
            idx = (0,) * len(kept)
        if len(kept) != len(idx):
            ctx.fail(f"{n}: index {idx} does not match the {len(kept)} kept dims of stage {v.stage}")
        return self.slot_of(prod.mapping, self.task_coord(prod.mapping, dict(zip(kept, idx))))
