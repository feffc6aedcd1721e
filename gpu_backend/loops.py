"""Loops = the mapping: the thread loops of each mapping kind, giving every domain element
exactly the (block, thread, iteration) that :meth:`ThreadMapping.locate` gives it.

* ``flat``: a grid-stride loop over the domain.
* ``rows``: the thread's *slot* of rows (vertical packing: ``task_iterations``
  rows per slot), and inside each row its columns in steps of
  ``threads_per_row`` (several rows share a block: horizontal packing; a row
  split over ``splits`` blocks: task splitting).
* ``columns``: the same with column tiles and row lanes.

After the element loop of a task come the reduction tree, the split combine
and the epilogue (:mod:`gpu_backend.reductions`).
"""
from __future__ import annotations

from astitch_sim.reducers import reduce_inputs

from . import exprs as E


class LoopEmitter:
    """The loops of ``flat``, ``rows`` and ``columns`` stages (a mixin of
    :class:`~gpu_backend.stage.StageWriter`)."""

    # -- flat ------------------------------------------------------------------------------
    def write_flat(self):
        m, out = self.m, self.out
        total = m.grid * m.block
        T = m.task_iterations
        out(f"# grid-stride loop: {m.size} elements over {m.grid} x {m.block} threads, {T} per thread")
        if T > 1:
            out(f"for it in range({T}):")
            out.indent()
            it = "it"
        else:
            it = 0
        self.it = it
        e = E.add(E.mul(it, total), E.add(E.mul("bid", m.block), "tid"))
        cond = E.lt("e", m.size) if T * total > m.size else True
        out(f"e = {e}")
        if cond is not True:
            out(f"if {cond}:")
            out.indent()
        idx = self.domain_vars(list(range(len(m.domain))), "e", m.domain)
        self.acc_var = {}
        self.element_body(idx)
        if cond is not True:
            out.dedent()
        if T > 1:
            out.dedent()

    def domain_vars(self, dims, coord, sizes_of_domain, bounded=True) -> tuple:
        """Emit ``dK = ...`` for the given domain dims from a view coordinate; returns the full index map."""
        shape = [sizes_of_domain[d] for d in dims]
        parts = E.unravel(coord, shape, bounded)
        for d, p in zip(dims, parts):
            if isinstance(p, int):
                self.dvars[d] = p
            else:
                self.out(f"d{d} = {p}")
                self.dvars[d] = f"d{d}"
        return tuple(self.dvars.get(d, None) for d in range(len(sizes_of_domain)))

    # -- rows / columns --------------------------------------------------------------------
    def write_tasks(self):
        s, m, out, g = self.stage, self.m, self.out, self.g
        rows_kind = m.kind == "rows"
        tpr, rpb, splits, T, I = m.threads_per_row, m.rows_per_block, m.splits, m.task_iterations, \
            m.inner_iterations
        ntasks = m.rows            # rows, or columns of a column reduction
        nred = m.cols              # row length, or reduced length
        chunk = m.chunk
        self.dvars = {}
        if rows_kind:
            out(f"# {rpb} row(s) per block, {tpr} thread(s) per row" + (f", each row split over {splits} blocks"
                                                                        if splits > 1 else ""))
            out(f"row_in_block = {E.floordiv('tid', tpr)}" if rpb > 1 else "row_in_block = 0")
            out(f"lane = {E.mod('tid', tpr)}" if rpb > 1 else "lane = tid")
            first_cond = "lane == 0" if tpr > 1 else True
        else:
            out(f"# {tpr} column lane(s) x {rpb} row lane(s) per block" +
                (f", the reduced dim split over {splits} blocks" if splits > 1 else ""))
            out(f"lane_c = {E.mod('tid', tpr)}" if rpb > 1 else "lane_c = tid")
            out(f"row_lane = {E.floordiv('tid', tpr)}" if rpb > 1 else "row_lane = 0")
            first_cond = "row_lane == 0" if rpb > 1 else True
        out(f"block_slot = {E.floordiv('bid', splits)}" if splits > 1 else "block_slot = bid")
        if splits > 1:
            out(f"part = {E.mod('bid', splits)}")
        part = "part" if splits > 1 else 0
        split = splits > 1 and bool(self.reduces)
        if split and m.combine not in ("atomic", "grid_barrier"):
            self.fail(f"a task split over {splits} blocks needs combine atomic or grid_barrier, not {m.combine!r}")

        # reduction bookkeeping
        self.acc_var = {r: tuple(self.kw.names.fresh(("acc_" if k == 0 else "acci_") + r)
                                 for k in range(len(reduce_inputs(g[r])))) for r in self.reduces}
        red_scratch, slot = {}, 0
        for r in self.reduces:
            red_scratch[r] = tuple(self.kw.scratch(slot + k, x.dtype) for k, x in enumerate(reduce_inputs(g[r])))
            slot += len(red_scratch[r])
        tree_width = tpr if rows_kind else rpb
        if split:
            for r in self.reduces:
                if len(reduce_inputs(g[r])) > 1:
                    self.fail(f"{r} ({g[r].attrs['reducer']}) is split over blocks; a pair reduce must not be")
                self.split_buffers(r)

        def task_header():
            """Loop over the thread's tasks (vertical packing) and compute the task coordinate."""
            if T > 1:
                out(f"for outer in range({T}):  # vertical packing: {T} task(s) per slot")
                out.indent()
            outer = "outer" if T > 1 else 0
            if rows_kind:
                out(f"row = {E.add(E.mul(outer, m.slots), E.add(E.mul('block_slot', rpb), 'row_in_block'))}")
                tc = "row"
                ok = E.lt("row", ntasks) if T * m.slots > ntasks else True
                self.dvars = {}
                self.domain_vars(list(m.groups[0]), "row", m.domain)
            else:
                out(f"tile = {E.add(E.mul(outer, m.slots), 'block_slot')}")
                out(f"col = {E.add(E.mul('tile', tpr), 'lane_c')}")
                tc = "col"
                ok = E.lt("col", ntasks) if T * m.slots * tpr > ntasks else True
                self.dvars = {}
                ext2 = m.extent(2)
                o = E.floordiv("col", ext2) if ext2 > 1 else "col"
                c = E.mod("col", ext2)
                if m.groups[0]:
                    self.domain_vars(list(m.groups[0]), o, m.domain, bounded=ok is True)
                if m.groups[2]:
                    self.domain_vars(list(m.groups[2]), c, m.domain)
            return outer, tc, ok

        def end_task_loop():
            if T > 1:
                out.dedent()

        # phase A: elements (and, unsplit, the reduction + epilogue)
        outer, tc, ok = task_header()
        if ok is not True and rows_kind:
            out(f"row_ok = {ok}")
            ok = "row_ok"
        elif ok is not True:
            out(f"col_ok = {ok}")
            ok = "col_ok"
        for r in self.reduces:
            for acc, ident in zip(self.acc_var[r], self.identity(g[r])):
                out(f"{acc} = {ident}")
        if I > 1:
            out(f"for inner in range({I}):  # {I} element(s) of the task per thread")
            out.indent()
        inner = "inner" if I > 1 else 0
        step = tpr if rows_kind else rpb
        lanev = "lane" if rows_kind else "row_lane"
        out(f"within = {E.add(E.mul(inner, step), lanev)}")
        red_coord = E.add(E.mul(part, chunk), "within")
        conds = [ok, E.lt("within", chunk) if I * step > chunk else True,
                 (f"{red_coord} < {nred}" if splits * chunk > nred else True)]
        cond = E.all_of(conds)
        if cond is not True:
            out(f"if {cond}:")
            out.indent()
        if self.uses_registers():
            self.it = E.add(E.mul(outer, I), inner)
            if not isinstance(self.it, int):
                out(f"it = {self.it}")
                self.it = "it"
        else:
            self.it = E.add(E.mul(outer, I), inner)
        red_name = "col" if rows_kind else "red"
        rc = red_coord
        if not isinstance(rc, int) and rc != "within":
            out(f"{red_name} = {rc}")
            rc = red_name
        idx = self.domain_vars(list(m.groups[1]), rc, m.domain)
        self.element_body(idx)
        if cond is not True:
            out.dedent()
        if I > 1:
            out.dedent()
        task_idx = tuple(self.dvars[d] for d in self.kept_dims(s))
        if self.reduces:
            self.reduce_tree(red_scratch, tree_width, rows_kind)
            first = E.all_of([first_cond, ok])
            if first is not True:
                out(f"if {first}:  # the task's first thread in this block")
                out.indent()
            if not split:
                self.finish_tasks(red_scratch, m, tc, task_idx, part=0)
            else:
                self.split_partial(red_scratch, task_idx, part)
            if first is not True:
                out.dedent()
        end_task_loop()

        if split:
            if m.combine == "grid_barrier":
                out("grid.sync()  # split reduction: every block's partials are in global memory")
                self.kw.cooperative_used = True
                outer, tc, ok2 = task_header()
                task_idx = tuple(self.dvars[d] for d in self.kept_dims(s))
                first = E.all_of([first_cond, ok2])
                if first is not True:
                    out(f"if {first}:")
                    out.indent()
                self.sum_partials(task_idx, part)
                if first is not True:
                    out.dedent()
                end_task_loop()
            if s.sync_after_combine:
                out("grid.sync()  # the split reduction is complete in global memory; this kernel reads it")
                self.kw.cooperative_used = True
            if s.epilogue or any(self.kw.values[r].space == "shared" for r in self.reduces):
                if not s.sync_after_combine:
                    self.fail("the epilogue of a split reduction needs sync_after_combine")
                out("# every block that holds part of a task reads the complete result and runs the epilogue")
                outer, tc, ok3 = task_header()
                task_idx = tuple(self.dvars[d] for d in self.kept_dims(s))
                first = E.all_of([first_cond, ok3])
                if first is not True:
                    out(f"if {first}:")
                    out.indent()
                self.finish_tasks(None, m, tc, task_idx, part=part)
                if first is not True:
                    out.dedent()
                end_task_loop()

    def uses_registers(self) -> bool:
        if self.kw.mod.probe:
            return True
        for n, v, crosses in self.element_stores():
            if v.space == "register" and crosses:
                return True
        for n in self.stage.ops:
            for o in self.g[n].operands:
                v = self.kw.values.get(o.name)
                if v is not None and 0 <= v.stage < self.si and v.space == "register" and o.name not in self.ops:
                    return True
        # kept inputs: loaded and kept here, or read here from the registers an earlier stage filled
        return any(at == self.si or self.si in self.kw.read_later.get(n, ()) for n, at in self.kw.kept_inputs.items())
