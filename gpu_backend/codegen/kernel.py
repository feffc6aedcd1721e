"""One ``generated`` kernel: its arguments, its memory (global arrays, shared views, register
arrays, reduction scratch), the checks on the plan's shared layout, and the function around the stages.

Shared memory is one byte buffer per block (``smem``) with typed views at the
plan's byte offsets (``Value.offset``); the reduction scratch sits at its top.
The stages themselves are written by :class:`~gpu_backend.codegen.stage.StageWriter`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from astitch_sim.errors import AStitchError
from astitch_sim.ir.graph import shape_str
from astitch_sim.plan.plan import Kernel
from astitch_sim.plan.reduce_scheme import tree_word_bytes, warp_slot_offset
from astitch_sim.plan.task_registers import kept_per_task

from . import exprs as E
from .dtypes import COMPUTE, STORAGE, STORAGE_NAME
from .source import RESERVED_NAMES, Lines, Names
from .specs import KernelSpec, ParamSpec
from .stage import StageWriter

if TYPE_CHECKING:
    from .module import ModuleWriter

#: static shared memory one kernel may declare (dynamic shared memory above 48 KiB needs an opt-in)
STATIC_SHARED_LIMIT = 48 * 1024


@dataclass
class Scratch:
    """A typed view of the reduction scratch; thread t's partial is element ``t * stride``."""
    name: str
    stride: int

    def at(self, thread: str) -> str:
        return f"{self.name}[{E.mul(thread, self.stride)}]"


def _itemsize(ctype: str) -> int:
    return np.dtype(np.bool_ if ctype == "bool_" else ctype).itemsize


class KernelWriter:
    """Writes one ``generated`` kernel of the plan, stage by stage."""

    def __init__(self, mod: ModuleWriter, kernel: Kernel, index: int, func: str):
        self.mod, self.k, self.index, self.func = mod, kernel, index, func
        self.g = mod.graph
        self.values = kernel.values
        self.names = Names(RESERVED_NAMES | {f"d{i}" for i in range(32)})
        self.out = Lines()
        self.params: list[ParamSpec] = []
        self.array_of: dict[str, str] = {}      # node -> global array identifier
        self.shared_of: dict[str, str] = {}     # node -> shared view identifier
        self.local_of: dict[str, str] = {}      # node -> register array identifier
        self.result_of: dict[str, str] = {}     # split reduce -> its result buffer identifier
        self.partials_of: dict[str, str] = {}   # grid-barrier split reduce -> its partials buffer
        self.scratch_of: dict[tuple, str] = {}  # (reduce slot, dtype) -> shared scratch view
        self.prologue: list[str] = []
        self.stage_of: dict[str, int] = kernel.stage_of
        #: node -> the later stages that read it (the values that cross stages), as the plan records them
        self.read_later = {n: set(v.read_later) for n, v in kernel.values.items() if v.read_later}
        self.kept_inputs = {n: v.loaded_in for n, v in kernel.values.items() if v.stage < 0 and v.loaded_in >= 0}
        self.cooperative_used = False

    def ix(self, expr) -> str:
        """An index expression as the value of an index variable, at the plan's index width: ``u32(...)``
        for ``index_bits=32`` (``gpu_backend/intrinsics.py`` says why), unchanged (Numba's int64) for 64.
        A constant stays a constant, a variable stays itself (its own assignment made it an index)."""
        if isinstance(expr, int) or self.k.index_bits != 32 or str(expr).isidentifier():
            return str(expr)
        return f"u32({expr})"

    # -- errors and bookkeeping ----------------------------------------------------------
    def fail(self, msg: str, stage: Optional[int] = None):
        where = f"kernel {self.k.name}" + (f", stage {stage} ({self.k.stages[stage].dominant})"
                                           if stage is not None else "")
        raise AStitchError(f"gpu_backend cannot follow plan {self.mod.plan.strategy!r} of "
                           f"{self.g.name!r}: {where}: {msg}")

    def add_param(self, node: str, role: str, shape, dtype: str, base: str, fill_from: str = "",
                  comment: str = "") -> str:
        name = self.names.fresh(base)
        self.params.append(ParamSpec(name, node, role, tuple(shape), dtype, fill_from, comment))
        return name

    # -- memory -----------------------------------------------------------------------
    def global_array(self, node: str) -> str:
        """The global-memory array holding ``node`` (an input, an output, or Global scratch)."""
        if node in self.array_of:
            return self.array_of[node]
        nd = self.g[node]
        v = self.values.get(node)
        if v is not None and v.stage < 0:
            role, comment = "input", "input (global memory)"
        elif v is not None and v.output:
            role, comment = "output", "written to global memory (graph output or read by a later kernel)"
        else:
            role, comment = "scratch", "Global stitching: global scratch, read after a grid barrier"
        name = self.add_param(node, role, nd.shape, nd.dtype, "g_" + node, comment=comment)
        self.array_of[node] = name
        return name

    def probe_array(self, node: str) -> str:
        key = "probe:" + node
        if key not in self.array_of:
            self.array_of[key] = self.add_param(node, "probe", self.g[node].shape, "s64", "probe_" + node,
                                                comment="(block * block_size + thread) * iterations + iteration")
        return self.array_of[key]

    def load(self, dtype: str, ref: str) -> str:
        """A value read from memory, in its register type."""
        if dtype == "f16":
            return f"float32({ref})"
        if dtype == "bf16":
            return f"_bf16_value({ref})"
        return ref

    def store(self, dtype: str, val: str) -> str:
        """A register value as it is written to memory."""
        if dtype == "f16":
            return f"float16({val})"
        if dtype == "bf16":
            return f"_bf16_bits({val})"
        return val

    def shared_view(self, node: str) -> str:
        if node in self.shared_of:
            return self.shared_of[node]
        v = self.values[node]
        nd = self.g[node]
        name = self.names.fresh("s_" + node)
        st = STORAGE[nd.dtype]
        if v.offset % np.dtype(st).itemsize or v.nbytes % np.dtype(st).itemsize:
            self.fail(f"shared value {node} at byte offset {v.offset} ({v.nbytes} B) is not aligned to its "
                      f"{np.dtype(st).itemsize}-byte elements")
        m = self.k.stages[v.stage].mapping
        slots = v.nbytes // np.dtype(st).itemsize
        self.prologue.append(f"{name} = smem[{v.offset}:{v.offset + v.nbytes}].view({STORAGE_NAME[nd.dtype]})"
                             f"  # Regional {node} {shape_str(nd.shape, nd.dtype)}: {slots} task slot(s) per "
                             f"block ({m.kind} mapping of stage {v.stage})")
        self.shared_of[node] = name
        return name

    def local_array(self, node: str) -> str:
        if node in self.local_of:
            return self.local_of[node]
        v = self.values[node]
        nd = self.g[node]
        at = v.stage if v.stage >= 0 else v.loaded_in       # computed there, or (a kept input) loaded there
        m = self.k.stages[at].mapping
        name = self.names.fresh("r_" + node)
        per_task = kept_per_task(self.k, self.g, node)
        self.prologue.append(f"{name} = cuda.local.array({m.task_iterations if per_task else m.elements_per_thread}, "
                             f"{COMPUTE[nd.dtype]})  # {node} stays in registers from stage {at} to stage(s) "
                             f"{sorted(self.read_later.get(node, ()))}: one slot per "
                             + ("task-loop trip (every lane of the task holds it)" if per_task else "loop iteration"))
        self.local_of[node] = name
        return name

    def scratch(self, slot: int, dtype: str) -> "Scratch":
        """Shared reduction scratch for the ``slot``-th reduce of a stage (the plan reserves ``block * 8``
        bytes for it): thread ``t``'s partial is the ``t``-th word of the kernel's tree word
        (:func:`astitch_sim.plan.reduce_scheme.tree_word_bytes`: 8 bytes where a tree folds an 8-byte
        value, else 4), whatever the partial's own type, so a later stage that reuses the scratch with
        another type never touches a byte another thread may still read (stages need no barrier between
        them for that).  An f32 sum's partials at a 4-byte stride keep a warp's 32 stores and loads on
        32 banks; at an 8-byte stride, the paper's layout and this code's until issue 27's audit, every
        access of the tree was a 2-way bank conflict.
        """
        ctype = COMPUTE[dtype]
        key = (slot, ctype)
        if key in self.scratch_of:
            return self.scratch_of[key]
        start = self.scratch_base + slot * self.k.block * 8
        name = self.names.fresh(f"red{slot}" + ("" if ctype == "float32" else "_" + ctype.rstrip("_")))
        word = tree_word_bytes(self.g, self.k.stages)
        stride = max(1, word // _itemsize(ctype))
        self.prologue.append(f"{name} = smem[{start}:{start + self.k.block * 8}].view({ctype})  # reduction "
                             f"scratch {slot}: thread t's {ctype} partial at [t" +
                             (f" * {stride}]" if stride > 1 else "]") + f" ({word} bytes per thread)")
        self.scratch_of[key] = Scratch(name, stride)
        return self.scratch_of[key]

    def warp_scratch(self, slot: int, dtype: str) -> tuple:
        """The warp totals of the ``slot``-th reduce of a shuffle stage whose tasks span warps:
        ``(view, elements per buffer)``; warp ``w``'s total in buffer ``b`` is ``view[b * per + w]``,
        consecutive ``itemsize`` words (no bank conflict when a warp reads them)."""
        ctype = COMPUTE[dtype]
        key = ("warp", slot, ctype)
        if key not in self.scratch_of:
            itemsize = _itemsize(ctype)
            start = warp_slot_offset(self.k, slot)
            nbytes = 2 * (self.k.block // 32) * 8
            name = self.names.fresh(f"warps{slot}" + ("" if ctype == "float32" else "_" + ctype.rstrip("_")))
            self.prologue.append(f"{name} = smem[{start}:{start + nbytes}].view({ctype})  # warp totals of "
                                 f"reduce slot {slot}: two buffers of {self.k.block // 32} (rounds alternate)")
            self.scratch_of[key] = (name, nbytes // 2 // itemsize)
        return self.scratch_of[key]

    # -- the kernel --------------------------------------------------------------------
    def write(self):
        k = self.k
        scratch = k.scratch_bytes
        self.scratch_base = k.scratch_offset
        top = max((v.offset + v.nbytes for v in self.values.values() if v.space == "shared"), default=0)
        if self.scratch_base < top:
            self.fail(f"shared memory: {k.shared_bytes} B reserved, but Regional values need {top} B and "
                      f"reduction scratch {scratch} B")
        if k.shared_bytes > STATIC_SHARED_LIMIT:
            self.fail(f"{k.shared_bytes} B of shared memory per block; a Numba kernel declares at most "
                      f"{STATIC_SHARED_LIMIT} B statically")
        self._check_shared_reuse()
        for n in k.inputs:
            self.global_array(n)
        body = Lines()
        self.out = body
        body.depth = 1
        for si, stage in enumerate(k.stages):
            if (stage.mapping.grid, stage.mapping.block) != (k.grid, k.block):
                self.fail(f"maps onto {stage.mapping.grid}x{stage.mapping.block} but the kernel launches "
                          f"{k.grid}x{k.block}", si)
            StageWriter(self, si).write()
        for n in k.outputs:
            if n not in self.array_of:
                self.fail(f"output {n} is never written")
        if self.cooperative_used != k.cooperative:
            self.fail(f"the plan says cooperative={k.cooperative} but the stages need "
                      f"{'a' if self.cooperative_used else 'no'} grid barrier")
        spec = KernelSpec(self.index, k.name, self.func, "generated", k.grid, k.block, k.cooperative,
                          k.shared_bytes, self.params)
        return self._assemble(body), spec

    def _check_shared_reuse(self):
        """Shared bytes reused by a later value need a barrier after the earlier value's last reader
        (a ``barrier_after``, or the ``syncthreads`` of the writing stage's reduction tree)."""
        k = self.k
        shared = [v for v in self.values.values() if v.space == "shared" and v.stage >= 0]
        for a in shared:
            last = max(self.read_later.get(a.node, {a.stage}))
            for b in shared:
                if b is a or b.stage <= a.stage or b.offset >= a.offset + a.nbytes or a.offset >= b.offset + b.nbytes:
                    continue
                if last >= b.stage:
                    self.fail(f"shared bytes {b.offset}..{b.offset + b.nbytes} hold {a.node} (read until stage "
                              f"{last}) and {b.node} (written in stage {b.stage}) at the same time")
                if all(s.barrier_after == "none" for s in k.stages[last:b.stage]) and \
                        not self._written_after_tree(b):
                    self.fail(f"{b.node} (stage {b.stage}) reuses the shared bytes of {a.node}, last read in "
                              f"stage {last}, with no barrier in between: a write-after-read race")

    def _written_after_tree(self, v) -> bool:
        """A reduce (or epilogue) value is stored after its stage's shared-memory tree, whose
        ``cuda.syncthreads()`` every thread of the block passes only after finishing earlier stages."""
        st = self.k.stages[v.stage]
        m = st.mapping
        width = m.threads_per_row if m.kind == "rows" else m.rows_per_block
        has_reduce = any(self.g[n].op == "reduce" for n in st.ops)
        return has_reduce and width > 1 and (v.node in st.epilogue or self.g[v.node].op == "reduce")

    def _assemble(self, body: Lines) -> str:
        k = self.k
        lines = [f"@jit(max_registers={k.registers_per_thread})  # cuda.jit, at most the plan's registers per thread",
                 f"def {self.func}({', '.join(p.name for p in self.params)}):"]
        doc = [f'    """{k.name}: {len(k.stages)} stage(s), grid {k.grid} x block {k.block}, '
               f'{k.shared_bytes} B shared per block'
               + (", cooperative launch (grid barrier)" if k.cooperative else "") + "."]
        for n in k.notes:
            doc.append(f"    plan note: {n}")
        doc.append("")
        doc.append("    Arguments:")
        for p in self.params:
            doc.append(f"      {p.name}: {shape_str(p.shape, p.dtype)} {p.role} -- {p.comment}")
        doc.append('    """')
        lines += doc
        idx = f"  # index math: {k.index_bits}-bit" + (" unsigned (u32)" if k.index_bits == 32 else " signed")
        lines.append(f"    tid = {self.ix('cuda.threadIdx.x')}{idx}")
        lines.append(f"    bid = {self.ix('cuda.blockIdx.x')}")
        if k.cooperative:
            lines.append("    grid = cuda.cg.this_grid()  # cooperative launch: every block is resident")
        if k.shared_bytes:
            if k.shared_bytes % 8:
                self.fail(f"{k.shared_bytes} B of shared memory is not a whole number of 8-byte words")
            lines.append(f"    smem = cuda.shared.array({k.shared_bytes // 8}, float64).view(uint8)  # the block's "
                         f"{k.shared_bytes} B of shared memory (8-byte aligned), laid out as the plan says")
        for p in self.prologue:
            lines.append("    " + p)
        lines.append("")
        return "\n".join(lines + body.lines) + "\n"
