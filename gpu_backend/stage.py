"""One stage: its comment header, the checks on its mapping, the per-element body, the barrier after it.

:class:`StageWriter` is assembled from one mixin per idea: element expressions
(:mod:`~gpu_backend.values`), casts (:mod:`~gpu_backend.dtypes`), Regional slots
(:mod:`~gpu_backend.slots`), the mapping's loops (:mod:`~gpu_backend.loops`) and
reductions (:mod:`~gpu_backend.reductions`).  They share the writer's state:
``kw`` (the :class:`~gpu_backend.kernel.KernelWriter`), ``stage``/``m`` (the
stage and its mapping), ``out`` (the lines), ``it`` (the thread's iteration,
for register arrays), ``dvars`` (domain dim -> index variable), ``acc_var``,
``result_var`` and ``phase`` (``element`` or ``epilogue``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from astitch_sim.graph import shape_str
from astitch_sim.reducers import reduce_inputs

from . import exprs as E
from .dtypes import CastEmitter
from .loops import LoopEmitter
from .reductions import ReductionEmitter
from .slots import SlotMixin
from .values import Scope, ValueEmitter

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


class StageWriter(ValueEmitter, CastEmitter, SlotMixin, LoopEmitter, ReductionEmitter):
    """Writes one stage: the mapping's loops, the per-element ops, the reduction, the epilogue."""

    def __init__(self, kw: KernelWriter, si: int):
        self.kw, self.si = kw, si
        self.k, self.g = kw.k, kw.g
        self.stage = self.k.stages[si]
        self.m = self.stage.mapping
        self.out = kw.out
        self.ops = set(self.stage.ops)
        self.epi = set(self.stage.epilogue)
        self.reduces = list(self.stage.reduces)
        self.result_var: dict[str, str] = {}   # reduce -> variable with its complete value (epilogue phase)
        self.it = None                          # expression of the thread's iteration (register arrays)
        self.phase = "element"
        self.dvars: dict = {}                   # domain dim -> its index variable (or constant)
        self.acc_var: dict = {}                 # reduce -> its per-thread accumulator(s): (value,) or (value, index)

    def fail(self, msg):
        self.kw.fail(msg, self.si)

    # -- the stage -----------------------------------------------------------------------
    def write(self):
        s, m, out = self.stage, self.m, self.out
        out(f"# ---- stage {self.si}: dominant {s.dominant} -- {m.describe()}")
        for n in list(s.ops) + list(s.epilogue):
            v = self.kw.values.get(n)
            if v is None or v.stage != self.si or self.g[n].opdef.is_view and not (v.output or
                                                                                     v.space != "register"):
                continue
            where = "epilogue, " if n in self.epi else ""
            out(f"#   {n}: {where}{scheme_words(v, n in self.kw.read_later)}" + (" -> output" if v.output else ""))
        for n, at in self.kw.kept_inputs.items():
            if at == self.si:
                out(f"#   {n}: kernel input, loaded here and kept in registers for stage(s) "
                    f"{sorted(self.kw.read_later.get(n, ()))} (hierarchical data reuse)")
        if s.recompute:
            out("#      recomputed per value: " + ", ".join(f"{n} x{c}" for n, c in s.recompute.items()))
        if self.reduces and m.kind == "flat":
            self.fail("a stage with a reduce needs a rows or columns mapping")
        for r in self.reduces:
            if tuple(self.g[r].operands[0].shape) != tuple(m.domain):
                self.fail(f"reduce {r} reads {self.g[r].operands[0].shape} but the stage's domain is {m.domain}")
            red_group = set(m.groups[1])
            if set(self.g[r].attrs["dimensions"]) != red_group:
                self.fail(f"reduce {r} reduces dims {self.g[r].attrs['dimensions']} but the mapping's reduced "
                          f"dims are {sorted(red_group)}")
        if s.epilogue and not self.reduces:
            self.fail("an epilogue without a reduce")
        if m.kind == "flat":
            self.write_flat()
        else:
            self.write_tasks()
        if s.barrier_after == "block":
            out("cuda.syncthreads()  # block barrier: this stage's shared-memory values are visible to the block")
        elif s.barrier_after == "grid":
            out("grid.sync()  # grid barrier: this stage's global values are visible to every block")
            self.kw.cooperative_used = True
        elif s.barrier_after != "none":
            self.fail(f"unknown barrier {s.barrier_after!r}")
        out("")

    def element_stores(self):
        """Non-reduce ops of this stage whose value is stored at domain elements."""
        for n in self.stage.ops:
            node = self.g[n]
            if node.op == "reduce":
                continue
            v = self.kw.values.get(n)
            if v is None or v.stage != self.si:
                continue
            crosses = n in self.kw.read_later
            if v.output or v.space == "global" or (v.space == "register" and crosses) or v.space == "shared":
                yield n, v, crosses

    def element_body(self, idx: tuple):
        """Evaluate the stage's ops at one domain element: accumulate reduces, store what is stored."""
        scope = Scope()
        dom = self.m.domain
        for r in self.reduces:
            node = self.g[r]
            vals = tuple(self.value(x.name, idx, scope) for x in reduce_inputs(node))
            self.fold(node, self.acc_var[r], vals, f"accumulate {r}")
        for n, v, crosses in self.element_stores():
            node = self.g[n]
            if v.space == "shared":
                self.fail(f"{n} is Regional but is neither a reduce nor an epilogue value")
            if tuple(node.shape) != tuple(dom):
                self.fail(f"{n} {shape_str(node.shape)} must be stored at every element of the domain "
                          f"{shape_str(dom)} but has a different shape")
            val = self.value(n, idx, scope)
            if v.output or v.space == "global":
                arr = self.kw.global_array(n)
                self.out(f"{arr}[{E.ravel(idx, dom)}] = {self.kw.store(node.dtype, val)}  # store {n} "
                         f"({'output' if v.output else 'Global'})")
            if v.space == "register" and crosses:
                self.out(f"{self.kw.local_array(n)}[{self.it}] = {val}  # keep {n} in registers for a later stage")
            if self.kw.mod.probe and v.output:
                pname = self.kw.probe_array(n)
                self.out(f"{pname}[{E.ravel(idx, dom)}] = (bid * {self.m.block} + tid) * "
                         f"{self.m.elements_per_thread} + {self.it}  # probe: who stores this element")
        for n in self.kept_here():
            val = self.value(n, idx, scope)
            self.out(f"{self.kw.local_array(n)}[{self.it}] = {val}  # keep input {n} in registers for a later stage")

    def kept_here(self) -> list:
        """Kernel inputs this stage loads and keeps in registers for later stages (hierarchical data reuse)."""
        return [n for n, at in self.kw.kept_inputs.items() if at == self.si]
