"""Loops = the mapping: a ``flat`` stage's grid-stride loop, and the domain index variables every loop opens.

Each mapping kind gives every domain element exactly the (block, thread,
iteration) that :meth:`ThreadMapping.locate` gives it (a test checks this):

* ``flat``: a grid-stride loop over the domain (here); with ``per_thread > 1`` each
  round gives a thread ``unroll`` vectors of ``vector`` consecutive elements, whose
  index is decomposed once per vector and whose loads all come before any use
  (``flat_vectors``: the vectors run across rows, and one thread takes the scalar tail).
* ``rows``: the thread's *slot* of rows (vertical packing: ``task_iterations``
  rows per slot), and inside each row its columns in steps of
  ``threads_per_row`` (several rows share a block: horizontal packing; a row
  split over ``splits`` blocks: task splitting).
* ``columns``: the same with column tiles and row lanes.

``rows`` and ``columns`` stages are written by
:class:`~gpu_backend.codegen.task_loops.TaskLoopEmitter`.  Every loop turns a flat
coordinate into one index variable per domain dim (``d0 = ...``) with
:meth:`LoopEmitter.domain_vars`; the body at each element is
:mod:`~gpu_backend.codegen.elements`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from astitch_sim.plan.vector_width import CONTIG, FLAT

from . import exprs as E
from .source import Lines
from .values import LaneIdx, Scope

if TYPE_CHECKING:
    from .elements import ElementEmitter
    from .stage_context import StageContext


class LoopEmitter:
    """The grid-stride loop of a ``flat`` stage, and the domain index variables of every loop.

    Built with the stage context (it sets the iteration ``it`` and the domain variables
    ``dvars`` there) and the :class:`~gpu_backend.codegen.elements.ElementEmitter` that writes the
    body at each element.
    """

    def __init__(self, ctx: StageContext, elements: ElementEmitter):
        self.ctx, self.elements = ctx, elements

    def write_flat(self):
        """``for it in range(T): e = it * threads + bid * block + tid``, guarded where the last
        round runs past the domain; the body runs at the element ``e`` unravels to."""
        ctx = self.ctx
        m, out = ctx.m, ctx.out
        if m.per_thread > 1:
            return self.write_vectors()
        total = m.grid * m.block
        T = m.task_iterations
        out(f"# grid-stride loop: {m.size} elements over {m.grid} x {m.block} threads, {T} per thread")
        with out.block(f"for it in range({T}):" if T > 1 else None):
            ctx.it = "it" if T > 1 else 0
            e = E.add(E.mul(ctx.it, total), E.add(E.mul("bid", m.block), "tid"))
            cond = E.lt("e", m.size) if T * total > m.size else True
            out(f"e = {ctx.kw.ix(e)}")
            with out.block(f"if {cond}:" if cond is not True else None):
                idx = self.domain_vars(list(range(len(m.domain))), "e", m.domain)
                ctx.acc_var = {}
                self.elements.element_body(idx)

    def domain_vars(self, dims, coord, sizes_of_domain, bounded=True) -> tuple:
        """Emit ``dK = ...`` for the given domain dims from a view coordinate; returns the full index map.

        The coordinate ``coord`` ravels ``dims`` (in that order) of a domain of shape
        ``sizes_of_domain``; a dim whose index is a constant gets no variable.  The context's
        ``dvars`` remembers every dim opened so far, so the returned index also holds the dims
        an enclosing loop opened (None for a dim no loop has opened).
        """
        ctx = self.ctx
        shape = [sizes_of_domain[d] for d in dims]
        parts = E.unravel(coord, shape, bounded)
        for d, p in zip(dims, parts):
            if isinstance(p, int):
                ctx.dvars[d] = p
            else:
                ctx.out(f"d{d} = {ctx.kw.ix(p)}")
                ctx.dvars[d] = f"d{d}"
        return tuple(ctx.dvars.get(d, None) for d in range(len(sizes_of_domain)))

    def write_vectors(self):
        """A flat stage with several elements per thread: per round, ``unroll`` vectors of ``vector``
        consecutive elements per thread (vector ``c`` at global thread ``c % threads``, as
        :meth:`ThreadMapping.locate` says).  Each vector's first element is decomposed into domain
        index variables once (unless ``flat_vectors``, below, the vector never straddles the innermost dim:
        the planner chose a width that divides it, so the other elements are ``+1, +2, ...`` along it);
        then every vector's loads
        (``ldg4`` for what it reads contiguously, one scalar load for what it reads uniformly), then
        every vector's computation and stores: ``unroll x`` loads in flight per thread.

        ``flat_vectors`` (the planner's decision, ``plan/vector_width.flat_order``): the vectors run across
        rows, so element ``j`` of a vector is ``+j`` on the last dim longer than 1, past its extent where the
        vector crosses a row -- every index the body computes from it is a row-major position, which that
        keeps exact.  Whole vectors run as above; the last ``size % vector`` elements are the
        :meth:`scalar_tail`."""
        ctx = self.ctx
        m, out, kw = ctx.m, ctx.out, ctx.kw
        V, U, T, P = m.vector, m.unroll, m.task_iterations, m.per_thread
        total, dom = m.grid * m.block, m.domain
        whole = m.size - m.size % V if m.flat_vectors else m.size     # elements in whole vectors
        out(f"# {m.size} elements over {m.grid} x {m.block} threads: each round, {U} vector(s) of {V} consecutive "
            f"element(s) per thread, loads before use" + (f", {T} rounds" if T > 1 else "")
            + (", vectors across rows" if m.flat_vectors else ""))
        with out.block(f"for rnd in range({T}):" if T > 1 else None):
            rnd = "rnd" if T > 1 else 0
            guarded = T * total * P > whole
            heads = []
            for k in range(U):
                e = kw.names.fresh(f"e{k}")
                c = E.add(E.mul(rnd, total * U), E.add(k * total, E.add(E.mul("bid", m.block), "tid")))
                out(f"{e} = {kw.ix(E.mul(c, V))}  # first element of vector {k}")
                heads.append(e)
            bodies = []
            for k, e in enumerate(heads):
                parts = E.unravel(e, list(dom), True)
                base = []
                for d, p in enumerate(parts):
                    if isinstance(p, int):
                        base.append(p)
                        continue
                    var = kw.names.fresh(f"d{d}_{k}")
                    out(f"{var} = {kw.ix(p)}")
                    base.append(var)
                ctx.acc_var = {}
                loads, body = self.vector_body(base, V, lambda j: E.add(E.mul(rnd, P), k * V + j), Scope(),
                                               along=self.vector_dim() if m.flat_vectors else None)
                bodies.append((E.lt(e, whole) if guarded else None, loads, body))
            self.loads_first(bodies)
        if whole < m.size:
            self.scalar_tail(whole)

    def vector_dim(self) -> int:
        """The dim a flat-order vector's elements step along: the last one longer than 1 (unit dims add
        nothing to a row-major position)."""
        dom = self.ctx.m.domain
        return max((d for d in range(len(dom)) if dom[d] > 1), default=len(dom) - 1)

    def scalar_tail(self, whole: int):
        """The last ``size - whole`` elements (fewer than a vector): the thread that :meth:`ThreadMapping.locate`
        gives that vector reads and writes them one at a time, at the iterations locate says."""
        ctx = self.ctx
        m, out = ctx.m, ctx.out
        block, thread, its = (a.tolist() for a in m.locate(np.arange(whole, m.size)))    # one thread: the vector's
        out(f"# scalar tail: elements {whole}..{m.size - 1} (vector {whole // m.vector}, {m.size - whole} element(s) "
            f"left over by whole vectors), thread {thread[0]} of block {block[0]}, one element at a time")
        with out.block(f"if bid == {block[0]} and tid == {thread[0]}:"):
            scope = Scope()
            ctx.acc_var = {}
            for e, it in zip(range(whole, m.size), its):
                ctx.it = it
                self.elements.element_body(E.unravel(e, list(m.domain), True), scope)

    def vector_body(self, base: list, V: int, iteration, scope: Scope, accumulators=None, along=None) -> tuple:
        """One vector: the ``V`` elements from index ``base`` (its first element) along the innermost dim,
        element ``j`` at the thread's iteration ``iteration(j)``.  Returns its loads (what ``ctx.prefetch``
        collects: ``ldg4`` for what it reads contiguously, one scalar load for what it reads uniformly) and
        its computation and stores, as two blocks of lines: :meth:`loads_first` issues every vector's loads
        before any vector's computation.  ``accumulators``: where element ``j`` folds its reduces, when the
        vector's elements belong to different tasks (a column lane's adjacent columns: ``ctx.acc_lanes``);
        None: every element folds into ``ctx.acc_var`` (a row's vector: one task).  ``along``: a flat-order
        vector's dim (:meth:`vector_dim`), its elements in flat order whatever the rows; None: the innermost."""
        ctx = self.ctx
        out = ctx.out
        last = len(base) - 1 if along is None else along
        state = (CONTIG, last) if along is None else FLAT
        loads, body = Lines(), Lines()
        ctx.prefetch, ctx.out = loads, body
        for j in range(V):
            ctx.it = iteration(j)
            if accumulators is not None:
                ctx.acc_var = accumulators[j]
            items = tuple(E.add(x, j) if d == last else x for d, x in enumerate(base))
            self.elements.element_body(LaneIdx(items, j, base, state, V), scope)
        if accumulators is not None:
            ctx.acc_var = accumulators[0]
        ctx.prefetch, ctx.out = None, out
        return loads, body

    def loads_first(self, bodies: list, group: int = 0):
        """``(guard, loads, body)`` per vector (:meth:`vector_body`; guard None: always runs): every vector's
        loads, then every vector's computation and stores, each block under its vector's guard -- all the
        thread's loads in flight before the first is used.  ``group`` > 0: that many vectors at a time (their
        loads, then their computation, then the next group's loads), as the plan says
        (``ThreadMapping.load_trips``, ``astitch_sim/plan/loads_in_flight.py``)."""
        out = self.ctx.out
        step = group or len(bodies) or 1
        for first in range(0, len(bodies), step):
            for section in (1, 2):
                for guard, loads, body in bodies[first:first + step]:
                    lines = (loads if section == 1 else body).lines
                    if lines:
                        with out.block(f"if {guard}:" if guard is not None else None):
                            for line in lines:
                                out(line)
