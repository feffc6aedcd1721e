"""The loops of a ``rows`` or ``columns`` stage: tasks, the elements of each task, and what follows a task.

A *task* is one row (``rows``), or one column of a column reduction
(``columns``).  The code a thread runs has the same shape for both kinds:

1. **Lanes.**  The thread's place in its block: which task slot of the block
   (``row_in_block`` / ``lane_c``) and which lane along the task
   (``lane`` / ``row_lane``); with task splitting, which ``part`` of the task
   this block holds.  The kinds differ only here and in step 2's coordinate,
   so each kind is one entry of a table (:class:`TaskLanes`).
2. **Tasks.**  A loop over the thread's tasks (vertical packing: ``outer``),
   computing the task coordinate and the kept dims' index variables.
3. **Elements.**  Inside a task, a loop over the thread's elements
   (``inner``, in steps of the lane count), each guarded where the last round
   runs past the task, running the per-element body.  A row read in vectors
   (``mapping.vector > 1``, planned by ``astitch_sim/plan/row_vectors.py``) takes
   one vector per trip instead, every trip's loads first (:meth:`TaskLoopEmitter.write_vector_trips`);
   a column lane with vectors (``astitch_sim/plan/column_vectors.py``) holds ``vector``
   adjacent columns -- as many tasks, one accumulator each -- and reads one vector
   across them per reduced row (:meth:`TaskLoopEmitter.write_column_vectors`).
4. **After the task.**  The reduction tree, then the task's first thread
   completes the reduces and runs the epilogue (every lane does, where the plan
   keeps a per-task value in registers for a later stage: ``plan/task_registers.py``;
   the first lane alone stores to shared or global memory) -- or, for a task split over
   blocks, hands its partial to the split combine, and the combine (a second
   task loop after a grid barrier) and the epilogue (a third one) follow.  A column
   lane with vectors completes each of its columns in turn (:meth:`TaskLoopEmitter.columns_of_lane`).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from math import ceil
from typing import TYPE_CHECKING, Callable, Iterator, Union

from astitch_sim.ir.reducers import reduce_inputs
from astitch_sim.plan.task_registers import kept_per_task
from astitch_sim.plan.vocabulary import ReduceScheme

from astitch_sim.plan.loads_in_flight import trips_in_flight
from astitch_sim.plan.row_vectors import MAX_TRIPS

from . import exprs as E
from .values import Scope

if TYPE_CHECKING:
    from .elements import ElementEmitter
    from .loops import LoopEmitter
    from .reductions import ReductionEmitter
    from .slots import SlotEmitter
    from .stage_context import Expr, StageContext


@dataclass(frozen=True)
class TaskLanes:
    """How one mapping kind names its threads: the variables and steps the task loops use."""
    #: True for ``rows`` (a task is a row), False for ``columns`` (a task is a column)
    rows_kind: bool
    #: the variable with the thread's lane along its task ("lane" or "row_lane")
    lane: str
    #: threads per task in a block: the step between a thread's elements, and the width of the tree
    step: int
    #: the condition that holds for the task's first thread in the block (True: every thread is first)
    first: Union[str, bool]
    #: the variable the per-element guard "task exists" is kept in ("row_ok" or "col_ok")
    ok_var: str
    #: the variable the coordinate along the reduced dims is kept in ("col" or "red")
    red_var: str
    #: opens one task: writes the task coordinate and the kept dims' variables, returns (coordinate, guard)
    open_task: Callable[[Expr], tuple]


class TaskLoopEmitter:
    """Writes a ``rows`` or ``columns`` stage: its lanes, task loops, element loops and what follows a task.

    Built with the stage context (the mapping, the reduces; it sets the iteration ``it``,
    the domain variables and the reduces' accumulators there), the
    :class:`~gpu_backend.codegen.loops.LoopEmitter` (domain index variables), the
    :class:`~gpu_backend.codegen.elements.ElementEmitter` (the body at an element), the
    :class:`~gpu_backend.codegen.reductions.ReductionEmitter` (tree, split combine, completion) and
    the :class:`~gpu_backend.codegen.slots.SlotEmitter` (which dims index a task).
    """

    def __init__(self, ctx: StageContext, loops: LoopEmitter, elements: ElementEmitter,
                 reductions: ReductionEmitter, slots: SlotEmitter):
        self.ctx, self.loops, self.elements, self.reductions, self.slots = ctx, loops, elements, reductions, slots

    def write(self):
        """The stage: lanes, then the element pass, then (a split task) the combine and epilogue passes."""
        ctx = self.ctx
        ctx.dvars = {}
        lanes = {"rows": self.row_lanes, "columns": self.column_lanes}[ctx.m.kind]()
        part = self.block_part()
        split = ctx.m.splits > 1 and bool(ctx.reduces)
        if split and ctx.m.combine not in ("atomic", "grid_barrier"):
            ctx.fail(f"a task split over {ctx.m.splits} blocks needs combine atomic or grid_barrier, "
                     f"not {ctx.m.combine!r}")
        red_scratch = self.prepare_reductions(split)
        self.write_element_pass(lanes, part, red_scratch, split)
        if split:
            self.write_split_passes(lanes, part)

    # -- 1. lanes: the only place the two kinds differ (besides a task's coordinate) -----------------
    def row_lanes(self) -> TaskLanes:
        """``rows``: ``rows_per_block`` rows side by side (horizontal packing), ``threads_per_row`` lanes each."""
        m, out = self.ctx.m, self.ctx.out
        tpr, rpb = m.threads_per_row, m.rows_per_block
        out(f"# {rpb} row(s) per block, {tpr} thread(s) per row" + (f", each row split over {m.splits} blocks"
                                                                    if m.splits > 1 else ""))
        ix = self.ctx.kw.ix
        out(f"row_in_block = {ix(E.floordiv('tid', tpr))}" if rpb > 1 else "row_in_block = 0")
        out(f"lane = {ix(E.mod('tid', tpr))}" if rpb > 1 else "lane = tid")
        return TaskLanes(rows_kind=True, lane="lane", step=tpr, first="lane == 0" if tpr > 1 else True,
                         ok_var="row_ok", red_var="col", open_task=self.open_row)

    def column_lanes(self) -> TaskLanes:
        """``columns``: ``threads_per_row`` adjacent columns (coalesced), ``rows_per_block`` row lanes each."""
        m, out = self.ctx.m, self.ctx.out
        tpr, rpb = m.threads_per_row, m.rows_per_block
        out(f"# {tpr} column lane(s) x {rpb} row lane(s) per block" +
            (f", the reduced dim split over {m.splits} blocks" if m.splits > 1 else ""))
        ix = self.ctx.kw.ix
        out(f"lane_c = {ix(E.mod('tid', tpr))}" if rpb > 1 else "lane_c = tid")
        out(f"row_lane = {ix(E.floordiv('tid', tpr))}" if rpb > 1 else "row_lane = 0")
        return TaskLanes(rows_kind=False, lane="row_lane", step=rpb, first="row_lane == 0" if rpb > 1 else True,
                         ok_var="col_ok", red_var="red", open_task=self.open_column)

    def block_part(self) -> Expr:
        """The block's task slot and, with task splitting, which part of its tasks it holds."""
        m, out = self.ctx.m, self.ctx.out
        ix = self.ctx.kw.ix
        out(f"block_slot = {ix(E.floordiv('bid', m.splits))}" if m.splits > 1 else "block_slot = bid")
        if m.splits > 1:
            out(f"part = {ix(E.mod('bid', m.splits))}")
        return "part" if m.splits > 1 else 0

    def prepare_reductions(self, split: bool) -> list:
        """Name each reduce's accumulators (a column lane with vectors: one set per column it holds), give
        them their reduction scratch slot(s), and (split over blocks) add the result buffers; returns, per
        column of the lane (one entry but for a column lane's vector), reduce -> its scratch views."""
        ctx = self.ctx
        g = ctx.g
        V = ctx.m.tasks_per_lane
        ctx.acc_lanes = [{r: tuple(ctx.kw.names.fresh(("acc_" if k == 0 else "acci_") + r + (f"_{j}" if V > 1 else ""))
                                   for k in range(len(reduce_inputs(g[r])))) for r in ctx.reduces}
                         for j in range(V)]
        ctx.acc_var = ctx.acc_lanes[0]
        red_scratch, slot = [{} for _ in range(V)], 0
        for j in range(V):
            for r in (ctx.reduces if ctx.stage.reduce_scheme is ReduceScheme.TREE else ()):
                red_scratch[j][r] = tuple(ctx.kw.scratch(slot + k, x.dtype) for k, x in enumerate(reduce_inputs(g[r])))
                slot += len(red_scratch[j][r])
        if split:
            for r in ctx.reduces:
                if len(reduce_inputs(g[r])) > 1:
                    ctx.fail(f"{r} ({g[r].attrs['reducer']}) is split over blocks; a pair reduce must not be")
                self.reductions.split_buffers(r)
        return red_scratch

    # -- 2. tasks ------------------------------------------------------------------------------------
    @contextmanager
    def each_task(self, lanes: TaskLanes) -> Iterator[tuple]:
        """Loop over the thread's tasks (vertical packing) and open each one: yields
        ``(outer, task coordinate, guard)``, the guard True where every task the loop visits exists."""
        ctx = self.ctx
        T = ctx.m.task_iterations
        with ctx.out.block(f"for outer in range({T}):  # vertical packing: {T} task(s) per slot" if T > 1 else None):
            outer = "outer" if T > 1 else 0
            ctx.dvars = {}
            ctx.outer = outer
            tc, ok = lanes.open_task(outer)
            yield outer, tc, ok

    def open_row(self, outer: Expr) -> tuple:
        """``row`` from the block's slot, the row in the block and the vertical round; its kept dims."""
        m, out = self.ctx.m, self.ctx.out
        row = E.add(E.mul(outer, m.slots), E.add(E.mul('block_slot', m.rows_per_block), 'row_in_block'))
        out(f"row = {self.ctx.kw.ix(row)}")
        ok = E.lt("row", m.rows) if m.task_iterations * m.slots > m.rows else True
        self.loops.domain_vars(list(m.groups[0]), "row", m.domain)
        return "row", ok

    def open_column(self, outer: Expr) -> tuple:
        """``col`` from the block's column tile and the thread's column lane (with vectors: the first of the
        lane's ``vector`` adjacent columns); its kept dims (outer, inner)."""
        m, out = self.ctx.m, self.ctx.out
        tpr, V = m.threads_per_row, m.vector
        ix = self.ctx.kw.ix
        out(f"tile = {ix(E.add(E.mul(outer, m.slots), 'block_slot'))}")
        out(f"col = {ix(E.mul(E.add(E.mul('tile', tpr), 'lane_c'), V))}" +
            (f"  # the first of the lane's {V} adjacent columns" if V > 1 else ""))
        ok = E.lt("col", m.rows) if m.task_iterations * m.slots * m.tile_width > m.rows else True
        ext2 = m.extent(2)
        o = E.floordiv("col", ext2) if ext2 > 1 else "col"
        c = E.mod("col", ext2)
        if m.groups[0]:
            self.loops.domain_vars(list(m.groups[0]), o, m.domain, bounded=ok is True)
        if m.groups[2]:
            self.loops.domain_vars(list(m.groups[2]), c, m.domain)
        return "col", ok

    def task_index(self, j: int = 0) -> tuple:
        """The current task's index: the variables of the kept (non-reduced) dims; ``j``: the ``j``-th column
        of a column lane's vector (``+ j`` along the innermost dim, which the vector runs along)."""
        ctx = self.ctx
        last = len(ctx.m.domain) - 1
        return tuple(E.add(ctx.dvars[d], j) if d == last else ctx.dvars[d]
                     for d in self.slots.kept_dims(ctx.stage))

    def columns_of_lane(self, tc: Expr) -> list:
        """``(j, task coordinate, task index)`` of each task the thread holds in this task trip: one, or a
        column lane's ``vector`` adjacent columns (``tc + j``), completed one after another."""
        return [(j, E.add(tc, j), self.task_index(j)) for j in range(self.ctx.m.tasks_per_lane)]

    @contextmanager
    def first_thread(self, lanes: TaskLanes, ok, why: str = ""):
        """What only the task's first thread in the block runs (and only for a task that exists)."""
        first = E.all_of([lanes.first, ok])
        with self.ctx.out.block(f"if {first}:{why}" if first is not True else None):
            yield

    # -- 3. elements ---------------------------------------------------------------------------------
    def write_element_loop(self, lanes: TaskLanes, outer: Expr, ok, part: Expr):
        """The thread's elements of one task: ``inner`` rounds of ``lanes.step`` along the reduced dims,
        each guarded where it may run past the task (or past the domain, a split task's last part)."""
        ctx = self.ctx
        m, out = ctx.m, ctx.out
        if m.vector > 1:
            if m.kind == "columns":
                return self.write_column_vectors(lanes, outer, ok, part)
            return self.write_vector_trips(lanes, outer, ok, part)
        I = m.inner_iterations
        with out.block(f"for inner in range({I}):  # {I} element(s) of the task per thread" if I > 1 else None):
            inner = "inner" if I > 1 else 0
            out(f"within = {ctx.kw.ix(E.add(E.mul(inner, lanes.step), lanes.lane))}")
            red_coord = E.add(E.mul(part, m.chunk), "within")
            cond = E.all_of([ok, E.lt("within", m.chunk) if I * lanes.step > m.chunk else True,
                             (f"{red_coord} < {m.cols}" if m.splits * m.chunk > m.cols else True)])
            with out.block(f"if {cond}:" if cond is not True else None):
                self.name_iteration(outer, inner)
                if not isinstance(red_coord, int) and red_coord != "within":
                    out(f"{lanes.red_var} = {ctx.kw.ix(red_coord)}")
                    red_coord = lanes.red_var
                idx = self.loops.domain_vars(list(m.groups[1]), red_coord, m.domain)
                self.elements.element_body(idx)

    def write_vector_trips(self, lanes: TaskLanes, outer: Expr, ok, part: Expr):
        """A row read in vectors (``m.vector > 1``): the lane's ``trips`` vectors of the task, vector ``q``
        of the row (elements ``q*V ..``) at lane ``q % threads_per_row`` (as ``ThreadMapping.locate``).
        Each trip's first element is decomposed once (the width divides the row's innermost extent, so
        the others are ``+1 .. +V-1`` along it); then, for at most ``MAX_TRIPS`` trips written out one
        after another, every trip's loads (``ldg4`` for what it reads contiguously, one scalar load for
        what it reads uniformly) before any trip's computation, reductions and stores: the lane's whole
        share of the row in flight, and in registers while the stage runs -- or, where the plan says so
        (``load_trips``: the registers would not hold them all), that many trips' loads at a time.  Longer:
        one trip per loop round, its loads first."""
        ctx = self.ctx
        m, out = ctx.m, ctx.out
        V, T, tpr, I = m.vector, m.trips, m.threads_per_row, m.inner_iterations
        unrolled = T <= MAX_TRIPS
        group = trips_in_flight(m)
        out(f"# {T} trip(s) per lane of {V}-element vectors along the row" +
            ("" if not unrolled or T == 1 else ", every trip's loads first" if group == T else
             f", {group} trip(s)' loads at a time, then their computation (the plan's load_trips)"))
        with out.block(None if unrolled or T == 1 else f"for inner in range({T}):  # one vector of the row per trip"):
            trips = range(T) if unrolled else ["inner"]
            bodies = []
            scope = Scope()     # shared by the trips: a later trip's guard implies every earlier one's
            for k in trips:
                guard, base = self.trip_start(ok, part, E.mul(E.add(E.mul(k, tpr), lanes.lane), V),
                                              T * tpr * V > m.chunk, k if isinstance(k, int) else None,
                                              "  # first element of the lane's vector")
                loads, body = self.loops.vector_body(
                    base, V, lambda j, k=k: E.add(E.mul(outer, I), E.add(E.mul(k, V), j)), scope)
                bodies.append((guard, loads, body))
            self.loops.loads_first(bodies, group if unrolled else 0)

    def write_column_vectors(self, lanes: TaskLanes, outer: Expr, ok, part: Expr):
        """A column lane with vectors (``m.vector > 1``): its ``trips`` reduced rows of the chunk, each one
        vector across the lane's ``vector`` adjacent columns (``ldg4`` for what it reads contiguously, one
        scalar load for what depends on the row alone); element ``j`` folds into column ``j``'s accumulators,
        at iteration ``(outer * trips + trip) * vector + j`` (as ``ThreadMapping.locate``).  Per loop round,
        ``trips_in_flight`` rows (the plan's ``load_trips``): every row's loads, then their folds in row
        order."""
        ctx = self.ctx
        m, out = ctx.m, ctx.out
        V, T, I, U = m.vector, m.trips, m.inner_iterations, trips_in_flight(m)
        rounds = ceil(T / U)
        out(f"# {T} reduced row(s) per lane, each one {V}-element vector across the lane's {V} adjacent columns"
            + (f"; {U} rows' loads per round, then their folds" if U > 1 else ""))
        with out.block(f"for rnd in range({rounds}):  # the lane's rows of the chunk" if rounds > 1 else None):
            rnd = "rnd" if rounds > 1 else 0
            bodies = []
            for u in range(U):
                trip = E.add(E.mul(rnd, U), u)
                guard, base = self.trip_start(ok, part, E.add(E.mul(trip, lanes.step), lanes.lane),
                                              rounds * U * lanes.step > m.chunk, u)
                loads, body = self.loops.vector_body(
                    base, V, lambda j, trip=trip: E.add(E.mul(outer, I), E.add(E.mul(trip, V), j)), Scope(),
                    accumulators=ctx.acc_lanes)
                bodies.append((guard, loads, body))
            self.loops.loads_first(bodies)

    def trip_start(self, ok, part: Expr, within: Expr, past_chunk: bool, tag, comment: str = "") -> tuple:
        """``(guard, index)`` of one vector trip's first element: ``within`` (its offset in the block's chunk of
        the task) in a fresh variable, the guard that the element exists (None: always; ``past_chunk``: the
        trips may run past the chunk), and its domain index -- the reduced dims decomposed once (``d<dim>_<tag>``),
        the task's dims as the task opened them."""
        ctx = self.ctx
        m, out, kw = ctx.m, ctx.out, ctx.kw
        w = kw.names.fresh("within")
        out(f"{w} = {kw.ix(within)}{comment}")
        red_coord = E.add(E.mul(part, m.chunk), w)
        cond = E.all_of([ok, E.lt(w, m.chunk) if past_chunk else True,
                         (f"{red_coord} < {m.cols}" if m.splits * m.chunk > m.cols else True)])
        dims = list(m.groups[1])
        base = [ctx.dvars.get(d) for d in range(len(m.domain))]
        for d, p in zip(dims, E.unravel(red_coord, [m.domain[d] for d in dims], True)):
            if isinstance(p, int):
                base[d] = p
                continue
            var = kw.names.fresh(f"d{d}_{tag}" if tag is not None else f"d{d}")
            out(f"{var} = {kw.ix(p)}")
            base[d] = var
        return (None if cond is True else cond), base

    def name_iteration(self, outer: Expr, inner: Expr):
        """The thread's iteration ``outer * inner_iterations + inner``: in a variable ``it`` when the body
        indexes a register array with it, else only in the context (nothing reads it)."""
        ctx = self.ctx
        it = E.add(E.mul(outer, ctx.m.inner_iterations), inner)
        if self.elements.uses_registers() and not isinstance(it, int):
            ctx.out(f"it = {it}")
            it = "it"
        ctx.it = it

    # -- 4. after the task ---------------------------------------------------------------------------
    def write_element_pass(self, lanes: TaskLanes, part: Expr, red_scratch: list, split: bool):
        """Every task of the thread: its elements, then the tree and the first thread's completion
        (unsplit) or partial (split over blocks)."""
        ctx = self.ctx
        with self.each_task(lanes) as (outer, tc, ok):
            if ok is not True:
                ctx.out(f"{lanes.ok_var} = {ok}")
                ok = lanes.ok_var
            for accs in ctx.acc_lanes:
                for r in ctx.reduces:
                    for acc, ident in zip(accs[r], self.reductions.identity(ctx.g[r])):
                        ctx.out(f"{acc} = {ident}")
            self.write_element_loop(lanes, outer, ok, part)
            if ctx.reduces:
                totals = self.reductions.combine_lanes(red_scratch, lanes.step, lanes.rows_kind, outer)
                tasks = self.columns_of_lane(tc)
                if not split and self.every_lane_finishes():
                    with ctx.out.block(f"if {ok}:  # every lane of the task completes it" if ok is not True
                                       else None):
                        for j, tcj, task_idx in tasks:
                            self.reductions.finish_tasks(totals[j], ctx.m, tcj, task_idx, part=0, first=lanes.first)
                else:
                    with self.first_thread(lanes, ok, "  # the task's first thread in this block"):
                        for j, tcj, task_idx in tasks:
                            if not split:
                                self.reductions.finish_tasks(totals[j], ctx.m, tcj, task_idx, part=0)
                            else:
                                self.reductions.split_partial(totals[j], task_idx, part)

    def every_lane_finishes(self) -> bool:
        """Does every lane complete the task (the plan keeps one of its per-task values in registers for a
        later stage: ``plan/task_registers.py``), not only its first thread?"""
        ctx = self.ctx
        return any(kept_per_task(ctx.k, ctx.g, n) for n in list(ctx.reduces) + list(ctx.stage.epilogue))

    def write_split_passes(self, lanes: TaskLanes, part: Expr):
        """A task split over blocks: sum the partials after a grid barrier (grid_barrier combine), then,
        if the kernel reads the result, a grid barrier and a pass that completes each task."""
        ctx = self.ctx
        s, out = ctx.stage, ctx.out
        if ctx.m.combine == "grid_barrier":
            out("grid.sync()  # split reduction: every block's partials are in global memory")
            ctx.kw.cooperative_used = True
            with self.each_task(lanes) as (outer, tc, ok):
                with self.first_thread(lanes, ok):
                    for _, _, task_idx in self.columns_of_lane(tc):
                        self.reductions.sum_partials(task_idx, part)
        if s.sync_after_combine:
            out("grid.sync()  # the split reduction is complete in global memory; this kernel reads it")
            ctx.kw.cooperative_used = True
        if s.epilogue or any(ctx.kw.values[r].space == "shared" for r in ctx.reduces):
            if not s.sync_after_combine:
                ctx.fail("the epilogue of a split reduction needs sync_after_combine")
            out("# every block that holds part of a task reads the complete result and runs the epilogue")
            with self.each_task(lanes) as (outer, tc, ok):
                with self.first_thread(lanes, ok):
                    for _, tcj, task_idx in self.columns_of_lane(tc):
                        self.reductions.finish_tasks(None, ctx.m, tcj, task_idx, part=part)
