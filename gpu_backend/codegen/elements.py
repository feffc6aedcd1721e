"""The per-element body of a stage: what a thread does at one domain element.

Whatever the mapping, the innermost statements are the same: evaluate the stage's
ops at the element, fold each reduce's inputs into the thread's accumulator, and
store each value that someone reads later where the plan's ``Value.space`` puts
it -- global memory (an output, or a Global value), or this thread's register
array (a value or a kept input that a later stage of the same mapping reads).
The loops around the body are :mod:`~gpu_backend.codegen.loops`; the index variables
they opened are the ``idx`` the body is given.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from astitch_sim.ir.graph import shape_str
from astitch_sim.ir.reducers import reduce_inputs

from . import exprs as E
from astitch_sim.ir.flatindex import reshapes
from astitch_sim.plan.vector_width import SCALAR_DTYPES, reshaped_state

from .values import LaneIdx, Scope

if TYPE_CHECKING:
    from .reductions import ReductionEmitter
    from .stage_context import StageContext
    from .values import ValueEmitter


def own_index(idx: tuple, domain, shape) -> tuple:
    """The index expressions of an op of ``shape`` at the domain element ``idx``: ``idx`` itself, or where the op is
    the domain reshaped (``flatindex.reshapes``: ``[8, 64, 64, 320]`` in a stage over ``[8, 64, 64, 32, 10]``) the
    index reshaped (``(d0, d1, d2, d3 * 10 + d4)``); a vector's lane index stays one, its lanes along the op's
    innermost dim (``vector_width.reshaped_state``)."""
    if tuple(shape) == tuple(domain):
        return idx
    items = E.reshape_index(idx, domain, shape)
    if isinstance(idx, LaneIdx):
        return LaneIdx(items, idx.lane, E.reshape_index(idx.base, domain, shape),
                       reshaped_state(idx.state, tuple(shape), idx.width, len(domain)), idx.width)
    return items


class ElementEmitter:
    """Writes the body of the stage's domain loop: accumulate the reduces, store what is stored.

    Built with the stage context (the stage's ops and Values, the iteration ``it`` that
    indexes register arrays, the reduces' accumulators), the
    :class:`~gpu_backend.codegen.values.ValueEmitter` (an op's value at the element) and the
    :class:`~gpu_backend.codegen.reductions.ReductionEmitter` (folding into an accumulator).
    """

    def __init__(self, ctx: StageContext, values: ValueEmitter, reductions: ReductionEmitter):
        self.ctx, self.values, self.reductions = ctx, values, reductions

    def element_stores(self):
        """Non-reduce ops of this stage whose value is stored at domain elements: ``(node, Value, crosses)``,
        where ``crosses`` says a later stage reads it."""
        ctx = self.ctx
        for n in ctx.stage.ops:
            node = ctx.g[n]
            if node.op == "reduce":
                continue
            v = ctx.kw.values.get(n)
            if v is None or v.stage != ctx.si:
                continue
            crosses = n in ctx.kw.read_later
            if v.output or v.space == "global" or (v.space == "register" and crosses) or v.space == "shared":
                yield n, v, crosses

    def element_body(self, idx: tuple, scope: Scope = None):
        """Evaluate the stage's ops at one domain element: accumulate reduces, store what is stored.

        ``scope``: values already loaded or computed (the elements of one vector share one)."""
        ctx = self.ctx
        out, kw, m = ctx.out, ctx.kw, ctx.m
        scope = scope if scope is not None else Scope()
        dom = m.domain
        for r in ctx.reduces:
            node = ctx.g[r]
            vals = tuple(self.values.value(x.name, idx, scope) for x in reduce_inputs(node))
            self.reductions.fold(node, ctx.acc_var[r], vals, f"accumulate {r}")
        for n, v, crosses in self.element_stores():
            node = ctx.g[n]
            if v.space == "shared":
                ctx.fail(f"{n} is Regional but is neither a reduce nor an epilogue value")
            if not reshapes(dom, node.shape):
                ctx.fail(f"{n} {shape_str(node.shape)} must be stored at every element of the domain "
                         f"{shape_str(dom)} but has a different shape")
            val = self.values.value(n, own_index(idx, dom, node.shape), scope)
            if v.output or v.space == "global":
                self.store(n, kw.global_array(n), idx, kw.store(node.dtype, val),
                           f"store {n} ({'output' if v.output else 'Global'})")
            if v.space == "register" and crosses:
                out(f"{kw.local_array(n)}[{ctx.it}] = {val}  # keep {n} in registers for a later stage")
            if kw.mod.probe and v.output:
                pname = kw.probe_array(n)
                out(f"{pname}[{E.ravel(idx, dom)}] = (bid * {m.block} + tid) * "
                    f"{m.elements_per_thread} + {ctx.it}  # probe: who stores this element")
        for n in self.kept_here():
            val = self.values.value(n, own_index(idx, dom, ctx.g[n].shape), scope)
            out(f"{kw.local_array(n)}[{ctx.it}] = {val}  # keep input {n} in registers for a later stage")

    def store(self, n: str, arr: str, idx: tuple, val: str, comment: str):
        """``stg(arr, i, val)`` (pointer arithmetic, no wraparound); inside a vector the lanes' values
        wait in ``ctx.pending`` and the last lane writes them with one vector store (``stg4``)."""
        ctx = self.ctx
        dom = ctx.m.domain
        if isinstance(idx, LaneIdx) and idx.width > 1 and ctx.g[n].dtype not in SCALAR_DTYPES:
            vals = ctx.pending.setdefault(arr, [])
            vals.append(val)
            if idx.lane == idx.width - 1:
                ctx.out(f"stg{idx.width}({arr}, {E.ravel(idx.base, dom)}, {', '.join(vals)})  # {comment}: "
                        f"{idx.width} elements, one vector store")
                del ctx.pending[arr]
            return
        ctx.out(f"stg({arr}, {E.ravel(idx, dom)}, {val})  # {comment}")

    def kept_here(self) -> list:
        """Kernel inputs this stage loads and keeps in registers for later stages (hierarchical data reuse)."""
        return [n for n, at in self.ctx.kw.kept_inputs.items() if at == self.ctx.si]

    def uses_registers(self) -> bool:
        """Whether the body reads or writes a register array, so the loops must name the iteration ``it``
        (the probe build records it too)."""
        ctx = self.ctx
        kw = ctx.kw
        if kw.mod.probe:
            return True
        for n, v, crosses in self.element_stores():
            if v.space == "register" and crosses:
                return True
        for n in ctx.stage.ops:
            for o in ctx.g[n].operands:
                v = kw.values.get(o.name)
                if v is not None and 0 <= v.stage < ctx.si and v.space == "register" and o.name not in ctx.ops:
                    return True
        # kept inputs: loaded and kept here, or read here from the registers an earlier stage filled
        return any(at == ctx.si or ctx.si in kw.read_later.get(n, ()) for n, at in kw.kept_inputs.items())
