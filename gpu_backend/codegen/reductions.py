"""Reductions: per-thread accumulation, warp shuffles or the shared-memory tree, split combines, the epilogue.

Each thread accumulates its elements in iteration order; the threads of a task
combine as the stage's ``reduce_scheme`` says (``astitch_sim/plan/reduce_scheme.py``):
``shuffle`` -- ``shfl_xor`` butterflies in registers, and for a task of several
warps its warp totals through shared memory behind one barrier; ``tree`` -- a
shared-memory tree (the upper half folds into the lower half, the
half rounded up, so ``threads_per_row`` may be any count, e.g. XLA's 768 -- the
same order as the SIMT model's ``simt.reduce.tree``); the task's first thread
combines the total with the reduce's init value and runs the stage's epilogue -- or, where the plan
keeps the task's values in registers for later stages (``plan/task_registers.py``: a shuffle left
the total in every lane), every lane does, keeps them in its registers, and the first lane alone
stores what goes to shared or global memory.
A task split over blocks combines by ``cuda.atomic`` into a result buffer the
runtime pre-fills with the init value, or by partials in global scratch + grid
barrier, as ``mapping.combine`` says.  The reduction scratch (``block * 8``
bytes per reduce, as the plan reserves) gives thread ``t`` bytes ``8t..8t+7``:
stages that reuse it with another element type never race.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from astitch_sim.plan.reduce_scheme import WARP, butterfly, warp_round, warps_across
from astitch_sim.ir.reducers import ATOMIC_DTYPES, REDUCERS, reduce_inits, reduce_inputs
from astitch_sim.plan.task_registers import kept_per_task
from astitch_sim.plan.vocabulary import ReduceScheme

from . import exprs as E
from .dtypes import COMPUTE, FLOATS, SHUFFLE_AS, STORAGE
from .values import Scope

if TYPE_CHECKING:
    from .dtypes import CastEmitter
    from .slots import SlotEmitter
    from .stage_context import StageContext
    from .values import ValueEmitter

#: pair reducers -> the prelude helper that says whether the new pair wins
_PAIR_TAKE = {"argmax": "_argmax_take", "argmin": "_argmin_take"}


class ReductionEmitter:
    """Reductions and epilogues of one stage: accumulator folds, the shared-memory tree, the
    combines of a task split over blocks, and the task's completion (its result and epilogue).

    Built with the stage context (the reduces, their accumulators, the mapping; it switches
    the context's phase to ``epilogue`` while writing a task's epilogue), the
    :class:`~gpu_backend.codegen.values.ValueEmitter` (init values and epilogue ops), the
    :class:`~gpu_backend.codegen.dtypes.CastEmitter` (rounding a result to f16/bf16) and the
    :class:`~gpu_backend.codegen.slots.SlotEmitter` (where a Regional result is stored).
    """

    def __init__(self, ctx: StageContext, values: ValueEmitter, casts: CastEmitter, slots: SlotEmitter):
        self.ctx, self.values, self.casts, self.slots = ctx, values, casts, slots

    def combine(self, node, a: str, b: str) -> str:
        """One step of a one-value reduction in the accumulator's type (f16/bf16 accumulate in float32)."""
        red = node.attrs["reducer"]
        t = REDUCERS[red].scalar.format(a, b)
        if node.dtype in FLOATS:
            return t
        if node.dtype == "pred":
            return t if REDUCERS[red].scalar_keeps_bool else f"bool_({t})"
        return f"{COMPUTE[node.dtype]}({t})"

    def fold(self, node, dst: tuple, src: tuple, why: str):
        """``dst = reduce(dst, src)`` as statements: one value, or an argmax/argmin (value, index) pair."""
        red = node.attrs["reducer"]
        if len(dst) == 1:
            self.ctx.out(f"{dst[0]} = {self.combine(node, dst[0], src[0])}  # {why} ({red})")
            return
        self.ctx.out(f"if {_PAIR_TAKE[red]}({dst[0]}, {dst[1]}, {src[0]}, {src[1]}):  # {why} ({red}: NaN first, "
                     "ties to the lower index)")
        self.ctx.out(f"    {dst[0]} = {src[0]}")
        self.ctx.out(f"    {dst[1]} = {src[1]}")

    def identity(self, node) -> tuple:
        """The accumulator's start value(s); argmax/argmin: the worst value and the largest index (never wins)."""
        red = node.attrs["reducer"]
        ins = reduce_inputs(node)
        if len(ins) == 2:
            worst = "max" if red == "argmax" else "min"
            info = np.iinfo(STORAGE[ins[1].dtype])
            return (self._identity_of(worst, ins[0].dtype),
                    self.ctx.kw.mod.constant(info.max, ins[1].dtype, f"index_identity_{ins[1].dtype}"))
        return (self._identity_of(red, node.dtype),)

    def _identity_of(self, red, dtype) -> str:
        """The identity of a one-value reducer in ``dtype``, as a typed module constant."""
        if red in ("sum", "or"):
            v = 0
        elif red in ("prod", "and"):
            v = 1
        elif dtype == "pred":
            v = red == "min"
        elif dtype in FLOATS:
            v = -np.inf if red == "max" else np.inf
        else:
            info = np.iinfo(STORAGE[dtype])
            v = info.min if red == "max" else info.max
        return self.ctx.kw.mod.constant(v, dtype, f"{red}_identity_{dtype}")

    def combine_lanes(self, red_scratch: list, width: int, rows_kind: bool, outer) -> list:
        """The threads of each task combine their partials as the stage's ``reduce_scheme`` says; returns, for
        each task the thread holds (one; a column lane with vectors: one per column, ``ctx.acc_lanes``),
        reduce -> the expressions holding the task's total on its first thread (value, or value and index).
        ``red_scratch``: the tree's scratch views, per task the thread holds."""
        ctx = self.ctx
        scheme = ctx.stage.reduce_scheme
        if scheme is ReduceScheme.SHUFFLE:
            self.reduce_shuffle(width, outer)
            return [{r: tuple(ctx.acc_var[r]) for r in ctx.reduces}]
        if scheme is ReduceScheme.NONE:
            ctx.out("# one thread per task: its partial is the task's total")
            return [{r: tuple(accs[r]) for r in ctx.reduces} for accs in ctx.acc_lanes]
        self.reduce_tree(red_scratch, width, rows_kind)
        return [{r: tuple(sv.at("tid") for sv in views[r]) for r in ctx.reduces} for views in red_scratch]

    def butterfly(self, offsets: tuple, why: str):
        """Every reduce's accumulator(s) folded with lane ``laneid ^ h``'s, for each ``h`` of ``offsets``."""
        ctx = self.ctx
        out = ctx.out
        for h in offsets:
            for r in ctx.reduces:
                node = ctx.g[r]
                accs = ctx.acc_var[r]
                got = tuple(ctx.kw.names.fresh("shfl_" + r) for _ in accs)
                for var, acc, x in zip(got, accs, reduce_inputs(node)):
                    ctype = COMPUTE[x.dtype]
                    via = SHUFFLE_AS.get(ctype)
                    out(f"{var} = {ctype}(shfl_xor({via}({acc}), {h}))" if via else f"{var} = shfl_xor({acc}, {h})")
                self.fold(node, accs, got, f"{why}: lane ^ {h}")

    def reduce_shuffle(self, width: int, outer):
        """The shuffle scheme (``astitch_sim/plan/reduce_scheme.py``): an xor butterfly over the task's lanes in
        each warp; a task of several warps then passes its warp totals through shared memory (one barrier,
        the buffer alternating by round) and every warp folds them with a second butterfly."""
        ctx = self.ctx
        out, kw = ctx.out, ctx.kw
        lanes = min(width, WARP)
        out(f"# shuffle reduction: xor butterfly over the {lanes} lanes of each task in a warp (registers, no barrier)")
        self.butterfly(butterfly(lanes), "fold the partner lane's partial")
        w = warps_across(ctx.stage)
        if not w:
            return
        ix = kw.ix
        base = warp_round(ctx.k.stages, ctx.si)
        rnd = E.add(base, outer)
        buf = E.mod(rnd, 2) if not isinstance(rnd, int) else rnd % 2
        out(f"wbuf = {ix(buf)}  # warp-total buffer of this round (rounds alternate: one barrier suffices)")
        out(f"warp_lane = {ix(E.mod('tid', WARP))}")
        out(f"warp_id = {ix(E.floordiv('tid', WARP))}")
        slot = 0
        views = {}
        for r in ctx.reduces:
            views[r] = []
            for x in reduce_inputs(ctx.g[r]):
                views[r].append(kw.warp_scratch(slot, x.dtype))
                slot += 1
        out("if warp_lane == 0:  # each warp's total, for the other warps of its task")
        out.indent()
        for r in ctx.reduces:
            for (view, per), acc in zip(views[r], ctx.acc_var[r]):
                out(f"{view}[{E.add(E.mul('wbuf', per), 'warp_id')}] = {acc}")
        out.dedent()
        out(f"cuda.syncthreads()  # the {w} warp totals of each task are in shared memory")
        first = E.sub("warp_id", E.mod("warp_id", w))
        p = 1 << (len(butterfly(w)))          # the second butterfly's lanes: w rounded up to a power of two
        at = E.mod("warp_lane", p) if p < WARP else "warp_lane"
        out(f"warp_pos = {ix(at)}  # each aligned group of {p} lanes takes the task's warp totals, so every lane "
            "ends with the total")
        with out.block(f"if warp_pos < {w}:  # lanes past the {w} totals take the identity" if p > w else None):
            for r in ctx.reduces:
                for (view, per), acc in zip(views[r], ctx.acc_var[r]):
                    out(f"{acc} = {view}[{E.add(E.add(E.mul('wbuf', per), first), 'warp_pos')}]")
        if p > w:
            out("else:")
            out.indent()
            for r in ctx.reduces:
                for acc, ident in zip(ctx.acc_var[r], self.identity(ctx.g[r])):
                    out(f"{acc} = {ident}")
            out.dedent()
        self.butterfly(butterfly(w), "fold the partner's warp total")

    def reduce_tree(self, red_scratch: list, width: int, rows_kind: bool):
        """Each thread's partial into its scratch word, then the tree over the ``width`` threads of a
        task (the upper half folds into the lower half, the half rounded up).  A column lane with vectors
        has a partial per column, each in its own scratch slot: one tree folds them all, behind the same
        barriers."""
        ctx = self.ctx
        out = ctx.out
        for views, accs in zip(red_scratch, ctx.acc_lanes):
            for r in ctx.reduces:
                for sv, acc in zip(views[r], accs[r]):
                    out(f"{sv.at('tid')} = {acc}")
        lanev, step = ("lane", 1) if rows_kind else ("row_lane", ctx.m.threads_per_row)
        who = f"the {width} threads of each row" if rows_kind else f"the {width} row lanes of each column"
        out("cuda.syncthreads()")
        out(f"# shared-memory tree over {who}: the upper half folds into the lower half (half rounded up,"
            " so any lane count works)")
        out(f"n = {width}")
        out("while n > 1:")
        out.indent()
        out("h = (n + 1) // 2")
        out(f"if {lanev} < n - h:")
        out.indent()
        partner = "tid + h" if step == 1 else f"tid + h * {step}"
        for views in red_scratch:
            for r in ctx.reduces:
                svs = views[r]
                self.fold(ctx.g[r], tuple(sv.at("tid") for sv in svs), tuple(sv.at(partner) for sv in svs),
                          "fold the partner's partial")
        out.dedent()
        out("cuda.syncthreads()")
        out("n = h")
        out.dedent()

    # -- a task split over blocks ------------------------------------------------------------
    def split_buffers(self, r: str):
        """The kernel arguments a split reduce combines into: its result buffer (pre-filled with the
        init value for an atomic combine) and, for a grid-barrier combine, one partial per task and split."""
        ctx = self.ctx
        kw, m = ctx.kw, ctx.m
        node = ctx.g[r]
        v = kw.values[r]
        if m.combine == "atomic":
            if REDUCERS[node.attrs["reducer"]].atomic is None:
                ctx.fail(f"{r}: no atomic for reducer {node.attrs['reducer']}")
            if node.dtype not in ATOMIC_DTYPES:
                ctx.fail(f"{r}: atomics on {node.dtype} are not supported by Numba (use f32/f64/s32/s64/u32/u64)")
        # the result buffer: the output array, the Global value's array, or scratch -- pre-filled with init
        if r in kw.array_of:
            ctx.fail(f"split reduce {r}: its result buffer is already used elsewhere in the kernel")
        role = "output" if v.output else "scratch"
        comment = (f"split reduction result of {r}" + (", pre-filled with the init value (atomic combine)"
                                                       if m.combine == "atomic" else ""))
        name = kw.add_param(r, role, node.shape, node.dtype, "g_" + r,
                            fill_from=r if m.combine == "atomic" else "", comment=comment)
        kw.array_of[r] = name
        kw.result_of[r] = name
        if m.combine == "grid_barrier":
            pname = kw.add_param("", "partials", (max(1, node.size) * m.splits,),
                                 node.dtype if node.dtype not in ("f16", "bf16") else "f32", "partials_" + r,
                                 comment=f"one partial of {r} per task and split")
            kw.partials_of[r] = pname

    def split_partial(self, totals, task_idx, part):
        """This block's total of each reduce, combined across the task's blocks: an atomic into the
        result buffer, or a store into the block's partial slot (summed after the grid barrier)."""
        ctx = self.ctx
        out, m = ctx.out, ctx.m
        for r in ctx.reduces:
            node = ctx.g[r]
            flat = E.ravel(task_idx, node.shape)
            total = totals[r][0]
            if m.combine == "atomic":
                fn = REDUCERS[node.attrs["reducer"]].atomic
                out(f"cuda.atomic.{fn}({ctx.kw.result_of[r]}, {flat}, {total})  # combine across the "
                    f"{m.splits} blocks of the task")
            else:
                out(f"{ctx.kw.partials_of[r]}[{E.add(E.mul(flat, m.splits), part)}] = {total}  "
                    "# this block's partial")

    def sum_partials(self, task_idx, part):
        """After the grid barrier: fold a task's partials in split order, then the init value; the
        task's first block stores the result."""
        ctx = self.ctx
        out, kw, splits = ctx.out, ctx.kw, ctx.m.splits
        for r in ctx.reduces:
            node = ctx.g[r]
            flat = E.ravel(task_idx, node.shape)
            init = self.values.value(node.operands[1].name, (), Scope())
            acc = kw.names.fresh("total_" + r)
            partials = kw.partials_of[r]
            out(f"{acc} = {partials}[{E.mul(flat, splits)}]")
            out(f"for p in range(1, {splits}):  # every block folds the partials in the same order")
            out.indent()
            partial = f"{partials}[{E.add(E.mul(flat, splits), 'p')}]"
            out(f"{acc} = {self.combine(node, acc, partial)}")
            out.dedent()
            out(f"{acc} = {self.combine(node, acc, init)}  # and the init value last")
            final = self.casts.round_result(node, acc)
            cond = "part == 0" if part != 0 else True
            if cond is not True:
                out(f"if {cond}:")
                out.indent()
            out(f"{kw.result_of[r]}[{flat}] = {kw.store(node.dtype, final)}")
            if cond is not True:
                out.dedent()

    # -- the task's completion ---------------------------------------------------------------
    def finish_tasks(self, totals, m, tc, task_idx, part, first=True):
        """Complete each reduce, run the epilogue, keep or store the task's values.

        Run by the task's first thread only (``first`` True: the caller put the code under that
        condition), or -- where the plan keeps per-task values in registers (``plan/task_registers.py``:
        the shuffle left the total in every lane) -- by every lane, with ``first`` the condition under
        which only the first lane stores to shared or global memory; each lane keeps the register
        values in its own slot of the current task-loop trip.
        ``totals`` holds the expressions of the task's totals (:meth:`combine_lanes`; None: the reduce
        was split over blocks and its complete value is read back from the result buffer); ``tc`` is the task coordinate (for a
        Regional value's slot) and ``part`` the block's split part (only part 0 stores outputs).
        While writing this the context's phase is ``epilogue`` and there is no iteration (``it``).
        """
        ctx = self.ctx
        ctx.phase = "epilogue"
        scope = Scope()
        ctx.it = None
        for r in ctx.reduces:
            ctx.result_var[r] = self.complete(r, totals, task_idx, scope)
        for n in ctx.stage.epilogue:
            self.values.value(n, task_idx, scope)
        values = list(ctx.reduces) + list(ctx.stage.epilogue)
        for n in values:
            if kept_per_task(ctx.k, ctx.g, n):
                self.keep_task_value(n, task_idx, scope)
        stored = [n for n in values if self.stores_task_value(n)]
        if stored:
            with ctx.out.block(f"if {first}:  # the task's first lane stores" if first is not True else None):
                for n in stored:
                    self.store_task_value(n, m, tc, task_idx, part, scope)
        ctx.phase = "element"

    def task_value(self, n: str, task_idx, scope: Scope) -> str:
        """The variable holding per-task value ``n`` in the epilogue (computed by :meth:`finish_tasks`)."""
        val = self.ctx.result_var.get(n) or scope.get((n, tuple(str(x) for x in task_idx)))
        return val if val is not None else self.values.value(n, task_idx, scope)

    def keep_task_value(self, n: str, task_idx, scope: Scope):
        """Every lane keeps per-task value ``n`` in its register slot of this task-loop trip."""
        ctx = self.ctx
        later = ", ".join(map(str, ctx.kw.values[n].read_later))
        ctx.out(f"{ctx.kw.local_array(n)}[{ctx.outer}] = {self.task_value(n, task_idx, scope)}  # kept in every "
                f"lane's registers for stage(s) {later} (the shuffle left the total in each lane)")

    def stores_task_value(self, n: str) -> bool:
        """Does :meth:`store_task_value` write ``n`` anywhere (a Regional slot, an output, a Global value)?"""
        kw = self.ctx.kw
        v = kw.values.get(n)
        return v is not None and (v.space == "shared" or ((v.output or v.space == "global") and n not in kw.result_of))

    def complete(self, r: str, totals, task_idx, scope: Scope) -> str:
        """A variable holding reduce ``r``'s complete value: the tree's total combined with the init
        value last (an argmax/argmin pair picks its value or index), or the split combine's result."""
        ctx = self.ctx
        out, kw = ctx.out, ctx.kw
        node = ctx.g[r]
        var = kw.names.fresh(r)
        if totals is not None and len(totals[r]) == 2:
            inits = tuple(self.values.value(x.name, (), scope) for x in reduce_inits(node))
            pair = (kw.names.fresh(r + "_value"), kw.names.fresh(r + "_index"))
            for p, t in zip(pair, totals[r]):
                out(f"{p} = {t}")
            self.fold(node, pair, inits, "and the init value last")
            k = node.attrs.get("result", 0)
            out(f"{var} = {self.casts.round_result(node, pair[k]) if k == 0 else pair[k]}  "
                f"# {self.values.describe(node)}")
        elif totals is not None:
            init = self.values.value(node.operands[1].name, (), scope)
            out(f"{var} = {self.casts.round_result(node, self.combine(node, totals[r][0], init))}"
                f"  # {self.values.describe(node)}")
        else:
            flat = E.ravel(task_idx, node.shape)
            out(f"{var} = {kw.load(node.dtype, f'{kw.result_of[r]}[{flat}]')}  # {r}, complete")
        return var

    def store_task_value(self, n: str, m, tc, task_idx, part, scope: Scope):
        """Store a reduce or epilogue value where its Value says: its Regional slot in shared memory,
        and/or global memory (an output, or Global) -- a split task's part 0 only."""
        ctx = self.ctx
        out, kw = ctx.out, ctx.kw
        node = ctx.g[n]
        v = kw.values.get(n)
        val = self.task_value(n, task_idx, scope)
        split_result = n in kw.result_of
        if v.space == "shared":
            out(f"{kw.shared_view(n)}[{self.slots.slot_of(m, tc)}] = {kw.store(node.dtype, val)}"
                f"  # Regional: for this block's later stages")
        if (v.output or v.space == "global") and not split_result:
            flat = E.ravel(task_idx, node.shape)
            line = (f"{kw.global_array(n)}[{flat}] = {kw.store(node.dtype, val)}  # "
                    + ("output" if v.output else "Global: for every block, after the grid barrier"))
            if part != 0:
                out("if part == 0:")
                out(f"    {line}")
            else:
                out(line)

