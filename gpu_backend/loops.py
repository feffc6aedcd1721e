"""Loops = the mapping: a ``flat`` stage's grid-stride loop, and the domain index variables every loop opens.

Each mapping kind gives every domain element exactly the (block, thread,
iteration) that :meth:`ThreadMapping.locate` gives it (a test checks this):

* ``flat``: a grid-stride loop over the domain (here).
* ``rows``: the thread's *slot* of rows (vertical packing: ``task_iterations``
  rows per slot), and inside each row its columns in steps of
  ``threads_per_row`` (several rows share a block: horizontal packing; a row
  split over ``splits`` blocks: task splitting).
* ``columns``: the same with column tiles and row lanes.

``rows`` and ``columns`` stages are written by
:class:`~gpu_backend.task_loops.TaskLoopEmitter`.  Every loop turns a flat
coordinate into one index variable per domain dim (``d0 = ...``) with
:meth:`LoopEmitter.domain_vars`; the body at each element is
:mod:`~gpu_backend.elements`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import exprs as E

if TYPE_CHECKING:
    from .elements import ElementEmitter
    from .stage_context import StageContext


class LoopEmitter:
    """The grid-stride loop of a ``flat`` stage, and the domain index variables of every loop.

    Built with the stage context (it sets the iteration ``it`` and the domain variables
    ``dvars`` there) and the :class:`~gpu_backend.elements.ElementEmitter` that writes the
    body at each element.
    """

    def __init__(self, ctx: StageContext, elements: ElementEmitter):
        self.ctx, self.elements = ctx, elements

    def write_flat(self):
        """``for it in range(T): e = it * threads + bid * block + tid``, guarded where the last
        round runs past the domain; the body runs at the element ``e`` unravels to."""
        ctx = self.ctx
        m, out = ctx.m, ctx.out
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
