"""Plan -> Numba-CUDA Python source: one ``@cuda.jit`` kernel per kernel of the plan.

The generator decides nothing.  Every choice -- which ops a kernel holds, the
stages and their barriers, each stage's thread mapping, where each value lives
(``Value.space``), the shared-memory layout (``Value.offset``), how split
reductions combine -- is read from the Plan and written out as code, following
the recipe in :mod:`astitch_sim.plan` ("How a stage runs"):

* **Loops = the mapping.**  A ``flat`` stage is a grid-stride loop; a ``rows``
  stage loops over the rows of the thread's *slot* (vertical packing) and,
  inside, over the row's columns in steps of ``threads_per_row`` (several rows
  share a block: horizontal packing; a row split over ``splits`` blocks: task
  splitting); a ``columns`` stage is the same with column tiles and row lanes.
  The loops give every domain element exactly the (block, thread, iteration)
  that :meth:`ThreadMapping.locate` gives it (a test checks this).
* **Index propagation = index arithmetic.**  An op is evaluated at a domain
  element; each operand is read at the index :func:`astitch_sim.indexing.
  operand_index` implies (broadcast drops dims, transpose permutes, reshape
  re-ravels...).  The same arithmetic is generated here as code.
* **Spaces.**  Locals are registers; a value a later stage reads from the same
  thread lives in ``cuda.local.array(elements_per_thread)`` indexed by the
  thread's iteration; Regional values live in ``cuda.shared.array`` at the
  plan's byte offsets (one byte buffer, typed views) behind
  ``cuda.syncthreads()``; Global values in global scratch arrays behind a
  grid barrier ``cuda.cg.this_grid().sync()`` (cooperative launch).
* **Reductions.**  Each thread accumulates its elements in iteration order; the
  threads of a task combine in a shared-memory tree (the upper half folds into
  the lower half, the half rounded up, so ``threads_per_row`` may be any count,
  e.g. XLA's 768 -- the same order as the SIMT model's ``simt.reduce.tree``);
  the task's first thread combines the total with the reduce's init value and
  runs the stage's epilogue.  A task split over blocks combines by
  ``cuda.atomic`` into a result buffer the runtime pre-fills with the init
  value, or by partials in global scratch + grid barrier, as
  ``mapping.combine`` says.  The reduction scratch (``block * 8`` bytes per
  reduce, as the plan reserves) gives thread ``t`` bytes ``8t..8t+7``: stages
  that reuse it with another element type never race.
* **Op templates.**  Each elementwise op is its op-table ``scalar`` template;
  its ``_x`` helpers live in prelude.py with XLA's meaning (``_floor`` keeps
  inf and NaN, where ``math.floor`` returns an int; shifts by >= the bit width
  are defined), and integer dtypes pick the integer variant of a helper whose
  meaning differs (``HELPER_BY_DTYPE``: C-style division, integer power...).
* **Types.**  float32 math stays float32: literals are module-level numpy
  scalars, every op result is cast to its node's type.  f16 and bf16 are
  computed in float32 and rounded after every op (``_f16``/``_bf16``);
  bf16 is stored as its raw 16 bits.  No warp shuffles anywhere (the CUDA
  simulator has none), so the simulator runs exactly the code a GPU runs.

Where a plan asks for something this recipe cannot express, generation stops
with an :class:`~astitch_sim.AStitchError` that names the kernel, the stage
and the reason, instead of guessing.
"""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from astitch_sim.errors import AStitchError
from astitch_sim.graph import shape_str
from astitch_sim.ops import compare_scalar
from astitch_sim.plan import Kernel, Plan

from . import exprs as E

#: the names a generated module imports from gpu_backend.prelude (kept here so that generating
#: source needs no numba; tests check the prelude defines exactly these)
HELPERS = ("jit", "math", "_sign", "_log", "_log1p", "_sqrt", "_rsqrt", "_cbrt", "_logistic", "_trunc", "_floor", "_ceil",
           "_round_afz", "_round_even", "_divide", "_remainder", "_power", "_max", "_min", "_not", "_invert",
           "_idivide", "_iremainder", "_ipower", "_shl", "_sra", "_srl", "_float_to_int", "_f16", "_bf16",
           "_bf16_bits", "_bf16_value")

# -- element types ---------------------------------------------------------------

#: XLA dtype -> numpy dtype of its elements in device memory (bf16: the raw 16 bits)
STORAGE = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.uint16, "s64": np.int64,
           "s32": np.int32, "s16": np.int16, "s8": np.int8, "u64": np.uint64, "u32": np.uint32,
           "u16": np.uint16, "u8": np.uint8, "pred": np.bool_}
#: XLA dtype -> the type its values have in registers (the name imported into the kernel module)
COMPUTE = {"f64": "float64", "f32": "float32", "f16": "float32", "bf16": "float32", "s64": "int64",
           "s32": "int32", "s16": "int16", "s8": "int8", "u64": "uint64", "u32": "uint32", "u16": "uint16",
           "u8": "uint8", "pred": "bool_"}
_STORAGE_NAME = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "uint16", "s64": "int64",
                 "s32": "int32", "s16": "int16", "s8": "int8", "u64": "uint64", "u32": "uint32",
                 "u16": "uint16", "u8": "uint8", "pred": "bool_"}
_FLOATS = ("f64", "f32", "f16", "bf16")
_BITS = {"s64": 64, "s32": 32, "s16": 16, "s8": 8, "u64": 64, "u32": 32, "u16": 16, "u8": 8}

#: op-table helpers whose integer meaning differs: the generator picks the integer variant
HELPER_BY_DTYPE = {"_divide": "_idivide", "_remainder": "_iremainder", "_power": "_ipower", "_not": "_invert"}

#: float ops whose Python/Numba result already has the operand type (no cast needed)
_TYPE_PRESERVING = {"add", "subtract", "multiply", "negate", "abs", "select", "clamp", "maximum", "minimum",
                    "divide", "copy"}
_BOOL_RESULT = {"compare", "and", "or", "xor", "not", "is-finite", "select"}

#: static shared memory one kernel may declare (dynamic shared memory above 48 KiB needs an opt-in)
STATIC_SHARED_LIMIT = 48 * 1024
_LAYOUT_OPS = ("broadcast", "reshape", "bitcast", "transpose", "reverse", "slice")

_REDUCER = {  # reducer -> (combine template, atomic function or None)
    "sum": ("({0} + {1})", "add"),
    "prod": ("({0} * {1})", None),
    "max": ("_max({0}, {1})", "max"),
    "min": ("_min({0}, {1})", "min"),
    "and": ("({0} & {1})", None),
    "or": ("({0} | {1})", None),
}
_ATOMIC_DTYPES = ("f32", "f64", "s32", "s64", "u32", "u64")

_STRUCTURAL = {"tid", "bid", "grid", "smem", "outer", "inner", "it", "e", "row", "col", "lane", "lane_c",
               "row_in_block", "row_lane", "block_slot", "part", "within", "tile", "stride", "row_ok", "col_ok",
               "total", "p", "k", "n", "h", "a", "b", "acc", "math", "np", "cuda", "range", "abs", "bool", "int", "float",
               "min", "max", "len", "print", "True", "False", "None",
               "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "bool_"} | set(HELPERS)


@dataclass
class ParamSpec:
    """One array argument of a generated kernel, and how the runtime provides it."""
    name: str                 # identifier in the kernel's signature
    node: str                 # graph node whose elements it holds ('' for partials)
    role: str                 # input | output | scratch | partials
    shape: tuple
    dtype: str                # XLA dtype of the elements
    fill_from: str = ""       # pre-fill with this reduce's init value before launch (split atomic results)
    comment: str = ""

    @property
    def storage(self) -> np.dtype:
        return np.dtype(STORAGE[self.dtype])


@dataclass
class KernelSpec:
    """A generated kernel: its Python function name, launch shape and arguments."""
    index: int
    name: str                 # the plan's kernel name
    func: str                 # Python function name in the generated module
    kind: str                 # generated | library
    grid: int
    block: int
    cooperative: bool
    shared_bytes: int
    params: list = field(default_factory=list)


@dataclass
class GeneratedModule:
    source: str
    kernels: list             # KernelSpec, in plan order


def _scheme_words(v, crosses: bool = False) -> str:
    """A Value's stitch scheme and memory space, in the paper's words."""
    if v.scheme == "local":
        return "Local (registers" + (", kept for a later stage)" if crosses else ")")
    if v.scheme == "regional":
        return ("Regional (shared memory, read after a block barrier)" if v.space == "shared" else
                "Regional (its task's threads combine it in shared memory)")
    if v.scheme == "global":
        return "Global (global memory, read after a grid barrier)" if v.space == "global" else "Global"
    return "Independent (no consumer in this kernel)"


def ident(name: str) -> str:
    """A node name as a Python identifier: ``mean.bcast`` -> ``mean_bcast``."""
    s = re.sub(r"\W", "_", name)
    if not s or s[0].isdigit():
        s = "n_" + s
    if keyword.iskeyword(s):
        s += "_"
    return s


class Names:
    """Unique identifiers within one generated function."""

    def __init__(self, reserved=()):
        self.used = set(reserved)

    def fresh(self, base: str) -> str:
        base = ident(base)
        name, k = base, 2
        sep = "_v" if base[-1].isdigit() else "_"
        while name in self.used:
            name, k = f"{base}{sep}{k}", k + 1
        self.used.add(name)
        return name


class Scope:
    """Values already in registers at this point of the code: (node, index) -> variable (CSE)."""

    def __init__(self, parent: Optional["Scope"] = None):
        self.parent, self.known = parent, {}

    def get(self, key):
        s = self
        while s is not None:
            if key in s.known:
                return s.known[key]
            s = s.parent
        return None


@dataclass
class Scratch:
    """A typed view of the reduction scratch; thread t's partial is element ``t * stride``."""
    name: str
    stride: int

    def at(self, thread: str) -> str:
        return f"{self.name}[{E.mul(thread, self.stride)}]"


class Lines:
    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, text: str = ""):
        self.lines.append(("    " * self.depth + text) if text else "")

    def indent(self):
        self.depth += 1

    def dedent(self):
        self.depth -= 1


# -- the module ---------------------------------------------------------------------


class ModuleWriter:
    """Writes the whole Python module for a plan: header, constants, one function per kernel."""

    def __init__(self, plan: Plan, probe: bool = False):
        self.probe = probe      # testing aid: record which (block, thread, iteration) stores each output element
        if not isinstance(plan, Plan):
            raise AStitchError(f"generate_source needs a Plan (from asim.compile), got {type(plan).__name__}")
        self.plan, self.graph = plan, plan.graph
        self.consts: dict[str, str] = {}       # module constant name -> source
        self.const_of: dict[tuple, str] = {}   # (kind, key) -> name
        self.func_names = Names(_STRUCTURAL)

    def constant(self, value, dtype: str, hint: str) -> str:
        """A module-level numpy scalar of the value's compute type (float32 literals stay float32)."""
        ctype = COMPUTE[dtype]
        v = np.asarray(value).reshape(()).item()
        if dtype == "pred":
            src = f"np.bool_({bool(v)})"
        elif dtype in _FLOATS:
            f = float(v)
            text = repr(f) if np.isfinite(f) else f'float("{f}")'
            if np.isfinite(f) and ctype == "float32":
                short = str(np.float32(f))            # shortest text that reads back as the same float32
                if np.float32(float(short)) == np.float32(f):
                    text = short
            src = f"np.{ctype}({text})"
        else:
            src = f"np.{ctype}({int(v)})"
        key = (src, ident(hint).upper())
        if key in self.const_of:
            return self.const_of[key]
        name = ident(hint).upper()
        base, k = name, 2
        while name in self.consts or name in _STRUCTURAL:
            name, k = f"{base}_{k}", k + 1
        self.consts[name] = src
        self.const_of[key] = name
        return name

    def write(self) -> GeneratedModule:
        bodies, specs = [], []
        for i, k in enumerate(self.plan.kernels):
            func = self.func_names.fresh(k.name.replace(":", "_").replace(".", "_"))
            if k.kind == "library":
                from .library import write_library_kernel
                text, spec = write_library_kernel(self, k, i, func)
            else:
                text, spec = KernelWriter(self, k, i, func).write()
            bodies.append(text)
            specs.append(spec)
        p = self.plan
        head = [
            f'"""Numba-CUDA kernels for plan {p.strategy!r} of graph {p.graph.name!r} on {p.gpu.name}.',
            "",
            "Generated by gpu_backend.generate_source from the Plan; every loop, barrier and memory",
            "space below is the plan's decision, written out.  Run it with gpu_backend.run(plan, inputs).",
            "",
            f"    {p.graph.signature()}",
            "",
            "Kernels, in launch order:",
        ]
        for s in specs:
            coop = ", cooperative (grid barrier)" if s.cooperative else ""
            head.append(f"    {s.func}[{s.grid}, {s.block}]  ({s.name}{coop})")
        head += ['"""', "import numpy as np", "from numba import cuda",
                 "from numpy import bool_, float16, float32, float64, int8, int16, int32, int64, uint8, uint16, "
                 "uint32, uint64", "",
                 "# math: Python's math module on a GPU; in the CUDA simulator its IEEE twin (exp(1000) = inf, no "
                 "exception)",
                 "from gpu_backend.prelude import (" + ", ".join(HELPERS) + ")", ""]
        if self.consts:
            head.append("# literal constants, typed: float32 math stays float32")
            for name, src in self.consts.items():
                head.append(f"{name} = {src}")
            head.append("")
        text = "\n".join(head) + "\n" + "\n\n".join(bodies)
        return GeneratedModule(text, specs)


# -- one generated kernel -----------------------------------------------------------------


class KernelWriter:
    """Writes one ``generated`` kernel of the plan, stage by stage."""

    def __init__(self, mod: ModuleWriter, kernel: Kernel, index: int, func: str):
        self.mod, self.k, self.index, self.func = mod, kernel, index, func
        self.g = mod.graph
        self.values = kernel.values
        self.names = Names(_STRUCTURAL | {f"d{i}" for i in range(32)})
        self.out = Lines()
        self.params: list[ParamSpec] = []
        self.array_of: dict[str, str] = {}      # node -> global array identifier
        self.shared_of: dict[str, str] = {}     # node -> shared view identifier
        self.local_of: dict[str, str] = {}      # node -> register array identifier
        self.result_of: dict[str, str] = {}     # split reduce -> its result buffer identifier
        self.partials_of: dict[str, str] = {}   # grid-barrier split reduce -> its partials buffer
        self.scratch_of: dict[tuple, str] = {}  # (reduce slot, dtype) -> shared scratch view
        self.prologue: list[str] = []
        self.stage_of: dict[str, int] = {}
        for i, s in enumerate(kernel.stages):
            for n in list(s.ops) + list(s.epilogue):
                self.stage_of.setdefault(n, i)
        self.read_later = self._read_later()
        self.cooperative_used = False

    # -- errors and bookkeeping ----------------------------------------------------------
    def fail(self, msg: str, stage: Optional[int] = None):
        where = f"kernel {self.k.name}" + (f", stage {stage} ({self.k.stages[stage].dominant})"
                                           if stage is not None else "")
        raise AStitchError(f"gpu_backend cannot follow plan {self.mod.plan.strategy!r} of "
                           f"{self.g.name!r}: {where}: {msg}")

    def _read_later(self) -> dict:
        """node -> stages after its own that read it (the values that cross stages)."""
        out: dict[str, set] = {}
        for j, s in enumerate(self.k.stages):
            mine = set(s.ops) | set(s.epilogue)
            for n in list(s.ops) + list(s.epilogue):
                for o in self.g[n].operands:
                    if o.name in self.stage_of and o.name not in mine and self.stage_of[o.name] < j:
                        out.setdefault(o.name, set()).add(j)
        return out

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
        self.prologue.append(f"{name} = smem[{v.offset}:{v.offset + v.nbytes}].view({_STORAGE_NAME[nd.dtype]})"
                             f"  # Regional {node} {shape_str(nd.shape, nd.dtype)}: {slots} task slot(s) per "
                             f"block ({m.kind} mapping of stage {v.stage})")
        self.shared_of[node] = name
        return name

    def local_array(self, node: str) -> str:
        if node in self.local_of:
            return self.local_of[node]
        v = self.values[node]
        nd = self.g[node]
        m = self.k.stages[v.stage].mapping
        name = self.names.fresh("r_" + node)
        self.prologue.append(f"{name} = cuda.local.array({m.elements_per_thread}, {COMPUTE[nd.dtype]})"
                             f"  # {node} stays in registers from stage {v.stage} to stage(s) "
                             f"{sorted(self.read_later.get(node, ()))}: one slot per loop iteration")
        self.local_of[node] = name
        return name

    def scratch(self, slot: int, dtype: str) -> "Scratch":
        """Shared reduction scratch for the ``slot``-th reduce of a stage: ``block * 8`` bytes, 8 per thread.

        Thread ``t``'s partial sits in bytes ``8t .. 8t+7`` whatever its type, so a later stage that
        reuses the scratch with another type never touches a byte another thread may still read
        (stages need no barrier between them for that).
        """
        ctype = COMPUTE[dtype]
        key = (slot, ctype)
        if key in self.scratch_of:
            return self.scratch_of[key]
        itemsize = np.dtype(np.bool_ if ctype == "bool_" else ctype).itemsize
        start = self.scratch_base + slot * self.k.block * 8
        name = self.names.fresh(f"red{slot}" + ("" if ctype == "float32" else "_" + ctype.rstrip("_")))
        stride = 8 // itemsize
        self.prologue.append(f"{name} = smem[{start}:{start + self.k.block * 8}].view({ctype})  # reduction "
                             f"scratch {slot}: thread t's {ctype} partial at [t" +
                             (f" * {stride}]" if stride > 1 else "]") + " (8 bytes per thread)")
        self.scratch_of[key] = Scratch(name, stride)
        return self.scratch_of[key]

    # -- the kernel --------------------------------------------------------------------
    def write(self):
        k = self.k
        scratch = max((len([n for n in s.ops if self.g[n].op == "reduce"]) * s.mapping.block * 8
                       for s in k.stages), default=0)
        self.scratch_base = k.shared_bytes - scratch
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
        lines.append("    tid = cuda.threadIdx.x")
        lines.append("    bid = cuda.blockIdx.x")
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


class StageWriter:
    """Writes one stage: the mapping's loops, the per-element ops, the reduction, the epilogue."""

    def __init__(self, kw: KernelWriter, si: int):
        self.kw, self.si = kw, si
        self.k, self.g = kw.k, kw.g
        self.stage = self.k.stages[si]
        self.m = self.stage.mapping
        self.out = kw.out
        self.ops = set(self.stage.ops)
        self.epi = set(self.stage.epilogue)
        self.reduces = [n for n in self.stage.ops if self.g[n].op == "reduce"]
        self.result_var: dict[str, str] = {}   # reduce -> variable with its complete value (epilogue phase)
        self.it = None                          # expression of the thread's iteration (register arrays)
        self.phase = "element"
        self.dvars: dict = {}                   # domain dim -> its index variable (or constant)
        self.acc_var: dict = {}                 # reduce -> its per-thread accumulator

    def fail(self, msg):
        self.kw.fail(msg, self.si)

    # -- values ----------------------------------------------------------------------
    def value(self, n: str, idx: tuple, scope: Scope) -> str:
        """Source of node ``n``'s value at index ``idx`` (emitting the statements it needs)."""
        node = self.g[n]
        if node.op == "constant" and node.rank == 0:
            return self.kw.mod.constant(node.attrs["value"], node.dtype, n)
        key = (n, tuple(str(x) for x in idx))
        hit = scope.get(key)
        if hit is not None:
            return hit
        if self.phase == "epilogue" and n in self.result_var:
            return self.result_var[n]
        if (n in self.ops and node.op != "reduce") or (self.phase == "epilogue" and n in self.epi):
            return self.compute(n, idx, scope, key)
        if n in self.ops or n in self.epi:
            self.fail(f"{n} is read at a domain element before the stage has finished computing it")
        v = self.kw.values.get(n)
        if v is None:
            self.fail(f"{n} is read but the kernel has no Value for it")
        if v.stage >= self.si:
            self.fail(f"{n} is read before stage {v.stage} computes it")
        if v.stage < 0:
            ref = f"{self.kw.global_array(n)}[{E.ravel(idx, node.shape)}]"
            var = self.assign(scope, key, n, self.kw.load(node.dtype, ref),
                              f"{n}: {shape_str(node.shape, node.dtype)} from global memory")
            return var
        if v.space == "register":
            if self.it is None:
                self.fail(f"{n} is kept in registers by stage {v.stage} but read outside a domain loop")
            if self.k.stages[v.stage].mapping != self.m:
                self.fail(f"{n} is kept in registers by stage {v.stage}, whose mapping differs from this stage's")
            return f"{self.kw.local_array(n)}[{self.it}]"
        if v.space == "shared":
            ref = f"{self.kw.shared_view(n)}[{self.shared_slot(n, idx)}]"
            return self.assign(scope, key, n, self.kw.load(node.dtype, ref),
                               f"{n} from shared memory (Regional, written by stage {v.stage})")
        if v.space == "global":
            arr = self.kw.result_of.get(n) or self.kw.global_array(n)
            ref = f"{arr}[{E.ravel(idx, node.shape)}]"
            return self.assign(scope, key, n, self.kw.load(node.dtype, ref),
                               f"{n} from global memory (Global, written by stage {v.stage})")
        self.fail(f"{n} lives in unknown space {v.space!r}")

    def assign(self, scope: Scope, key, n: str, expr: str, comment: str) -> str:
        var = self.kw.names.fresh(n)
        self.out(f"{var} = {expr}  # {comment}")
        scope.known[key] = var
        return var

    def compute(self, n: str, idx: tuple, scope: Scope, key) -> str:
        node = self.g[n]
        op = node.op
        if op in _LAYOUT_OPS:
            return self.value(node.operands[0].name, self.operand_index(node, idx), scope)
        if op == "copy" or (op == "convert" and node.operands[0].dtype == node.dtype):
            return self.value(node.operands[0].name, idx, scope)
        if op == "iota":
            d = node.attrs["iota_dimension"]
            return self.assign(scope, key, n, self.cast(node, str(idx[d]), force=True), self.describe(node))
        if op in ("concatenate", "pad"):
            return self.branchy(node, idx, scope, key)
        if node.kind != "elementwise":
            self.fail(f"{n} ({op}) cannot be evaluated per element")
        args = [self.value(o.name, idx, scope) for o in node.operands]
        if op == "convert":
            expr = self.convert(node.operands[0].dtype, node.dtype, args[0])
        else:
            expr = self.cast(node, self.template(node).format(*args, bits=_BITS.get(node.dtype, 32)))
        return self.assign(scope, key, n, expr, self.describe(node))

    def describe(self, node) -> str:
        args = ", ".join(o.name for o in node.operands)
        return f"{node.name}: {shape_str(node.shape, node.dtype)} = {node.op}{node.attr_str()}({args})"

    def template(self, node) -> str:
        op, dtype = node.op, node.dtype
        if op == "compare":
            return compare_scalar(node.attrs["direction"])
        t = node.opdef.scalar
        if t is None:
            self.fail(f"op {op} has no scalar template")
        if dtype not in _FLOATS:
            for f, i in HELPER_BY_DTYPE.items():
                if f == "_not" and dtype == "pred":
                    continue
                t = t.replace(f + "(", i + "(")
        return t

    def cast(self, node, expr: str, force: bool = False) -> str:
        """Bring an op's Python/Numba result back to the node's own type."""
        dtype, op = node.dtype, node.op
        if dtype == "f16":
            return f"_f16({expr})"
        if dtype == "bf16":
            return f"_bf16({expr})"
        if dtype == "pred":
            return expr if (op in _BOOL_RESULT and not force) else f"bool_({expr})"
        if dtype in ("f32", "f64") and op in _TYPE_PRESERVING and not force:
            return expr
        return f"{COMPUTE[dtype]}({expr})"

    def convert(self, src: str, dst: str, x: str) -> str:
        if dst == "pred":
            return f"bool_({x} != 0)"
        if dst in _FLOATS:
            base = f"{COMPUTE[dst]}({x})"
            return {"f16": f"_f16({base})", "bf16": f"_bf16({base})"}.get(dst, base)
        if src in _FLOATS:
            info = np.iinfo(STORAGE[dst])
            lo = self.kw.mod.constant(float(info.min), "f64", f"{dst}_min")
            hi = self.kw.mod.constant(float(info.max), "f64", f"{dst}_max")
            return f"{COMPUTE[dst]}(_float_to_int({x}, {lo}, {hi}))"
        return f"{COMPUTE[dst]}({x})"

    def branchy(self, node, idx, scope: Scope, key) -> str:
        """concatenate / pad: the operand an element reads depends on where the element is."""
        var = self.kw.names.fresh(node.name)
        self.out(f"# {self.describe(node)}")
        if node.op == "concatenate":
            dim = node.attrs["dimension"]
            start = 0
            branches = []
            for o in node.operands:
                end = start + o.shape[dim]
                last = o is node.operands[-1]
                branches.append((True if last else E.lt(idx[dim], end), o.name,
                                 tuple(E.sub(x, start) if d == dim else x for d, x in enumerate(idx))))
                start = end
        else:
            if any(node.attrs["interior"]) or any(x < 0 for x in node.attrs["low"]) or \
                    any(x < 0 for x in node.attrs["high"]):
                self.fail(f"{node.name}: pad with interior or negative padding is not supported")
            x = node.operands[0]
            pos = tuple(E.sub(i, lo) for i, lo in zip(idx, node.attrs["low"]))
            conds = []
            for p, n in zip(pos, x.shape):
                conds.append(True if isinstance(p, int) and 0 <= p < n else
                             (False if isinstance(p, int) else f"0 <= {p} < {n}"))
            branches = [(E.all_of(conds), x.name, pos), (True, node.operands[1].name, ())]
        first = True
        for cond, o, oidx in branches:
            if cond is False:
                continue
            if cond is True:
                if first:           # statically this branch: no if at all
                    val = self.value(o, oidx, scope)
                    self.out(f"{var} = {self.cast(node, val, force=True)}")
                    scope.known[key] = var
                    return var
                self.out("else:")
            else:
                self.out(f"{'if' if first else 'elif'} {cond}:")
            self.out.indent()
            child = Scope(scope)
            val = self.value(o, oidx, child)
            self.out(f"{var} = {self.cast(node, val, force=True)}")
            self.out.dedent()
            first = False
            if cond is True:
                break
        scope.known[key] = var
        return var

    def operand_index(self, node, idx):
        """indexing.operand_index, as index expressions."""
        op, operand = node.op, node.operands[0]
        if operand.rank == 0:
            return ()
        if op == "broadcast":
            return tuple(idx[d] for d in node.attrs["dimensions"])
        if op in ("reshape", "bitcast"):
            return E.reshape_index(idx, node.shape, operand.shape)
        if op == "transpose":
            perm = node.attrs["permutation"]
            out = [None] * len(perm)
            for j, p in enumerate(perm):
                out[p] = idx[j]
            return tuple(out)
        if op == "reverse":
            dims = set(node.attrs["dimensions"])
            return tuple(E.sub(operand.shape[d] - 1, x) if d in dims else x for d, x in enumerate(idx))
        if op == "slice":
            strides = node.attrs.get("strides") or (1,) * node.rank
            return tuple(E.add(s, E.mul(x, st)) for x, s, st in zip(idx, node.attrs["starts"], strides))
        self.fail(f"cannot propagate an index through {op}")

    # -- shared slots --------------------------------------------------------------------
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
        ``(tc // lanes // slots) * lanes + tc % lanes`` -- simplified when the task count
        makes a term constant.
        """
        if m.kind == "rows":
            rpb, slots = m.rows_per_block, m.slots
            if m.rows <= rpb:
                return tc
            if m.rows <= slots:
                return E.mod(tc, rpb)
            return E.add(E.mul(E.floordiv(tc, slots), rpb), E.mod(E.mod(tc, slots), rpb))
        if m.kind == "columns":
            tpr = m.threads_per_row
            if m.rows <= tpr:
                return tc
            if m.tiles <= m.slots:
                return E.mod(tc, tpr)
            return E.add(E.mul(E.floordiv(E.floordiv(tc, tpr), m.slots), tpr), E.mod(tc, tpr))
        self.fail("a Regional value needs a rows or columns mapping")

    def kept_dims(self, stage) -> list:
        red = [n for n in stage.ops if self.g[n].op == "reduce"]
        if red:
            dims = set(self.g[red[0]].attrs["dimensions"])
            return [d for d in range(len(stage.mapping.domain)) if d not in dims]
        m = stage.mapping
        return sorted(m.groups[0]) if m.kind == "rows" else sorted(m.groups[0] + m.groups[2])

    def shared_slot(self, n: str, idx: tuple):
        """Slot of a Regional value (a reduce result or an epilogue value) at task index ``idx``."""
        v = self.kw.values[n]
        prod = self.k.stages[v.stage]
        if not (n in prod.epilogue or self.g[n].op == "reduce"):
            self.fail(f"{n} is Regional but is neither a reduce nor an epilogue value: no task slot for it")
        kept = self.kept_dims(prod)
        if len(kept) != len(idx):
            self.fail(f"{n}: index {idx} does not match the {len(kept)} kept dims of stage {v.stage}")
        return self.slot_of(prod.mapping, self.task_coord(prod.mapping, dict(zip(kept, idx))))

    # -- the stage -----------------------------------------------------------------------
    def write(self):
        s, m, out = self.stage, self.m, self.out
        out(f"# ---- stage {self.si}: dominant {s.dominant} -- {m.describe()}")
        for n in list(s.ops) + list(s.epilogue):
            v = self.kw.values.get(n)
            if v is None or v.stage != self.si or self.g[n].op in _LAYOUT_OPS and not (v.output or
                                                                                     v.space != "register"):
                continue
            where = "epilogue, " if n in self.epi else ""
            out(f"#   {n}: {where}{_scheme_words(v, n in self.kw.read_later)}" + (" -> output" if v.output else ""))
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
            val = self.value(node.operands[0].name, idx, scope)
            acc = self.acc_var[r]
            self.out(f"{acc} = {self.combine(node, acc, val)}  # accumulate {r} ({node.attrs['reducer']})")
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

    def combine(self, node, a: str, b: str) -> str:
        """One step of a reduction in the accumulator's type (f16/bf16 accumulate in float32)."""
        red = node.attrs["reducer"]
        t = _REDUCER[red][0].format(a, b)
        if node.dtype in _FLOATS:
            return t
        if node.dtype == "pred":
            return t if red in ("and", "or", "max", "min") else f"bool_({t})"
        return f"{COMPUTE[node.dtype]}({t})"

    def identity(self, node) -> str:
        red, dtype = node.attrs["reducer"], node.dtype
        if red in ("sum", "or"):
            v = 0
        elif red in ("prod", "and"):
            v = 1
        elif dtype in _FLOATS:
            v = -np.inf if red == "max" else np.inf
        else:
            info = np.iinfo(STORAGE[dtype])
            v = info.min if red == "max" else info.max
        return self.kw.mod.constant(v, dtype, f"{red}_identity_{dtype}")

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
        self.acc_var = {r: self.kw.names.fresh("acc_" + r) for r in self.reduces}
        red_scratch = {}
        for i, r in enumerate(self.reduces):
            red_scratch[r] = self.kw.scratch(i, g[r].dtype)
        tree_width = tpr if rows_kind else rpb
        if split:
            for r in self.reduces:
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
            out(f"{self.acc_var[r]} = {self.identity(g[r])}")
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
        return False

    def reduce_tree(self, red_scratch: dict, width: int, rows_kind: bool):
        out, m = self.out, self.m
        for r in self.reduces:
            out(f"{red_scratch[r].at('tid')} = {self.acc_var[r]}")
        if width <= 1:
            out("# one thread per task: its partial is the task's total")
            return
        lanev, step = ("lane", 1) if rows_kind else ("row_lane", m.threads_per_row)
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
        for r in self.reduces:
            sv = red_scratch[r]
            out(f"{sv.at('tid')} = {self.combine(self.g[r], sv.at('tid'), sv.at(partner))}")
        out.dedent()
        out("cuda.syncthreads()")
        out("n = h")
        out.dedent()

    def split_buffers(self, r: str):
        node = self.g[r]
        m = self.m
        v = self.kw.values[r]
        if m.combine == "atomic":
            if _REDUCER[node.attrs["reducer"]][1] is None:
                self.fail(f"{r}: no atomic for reducer {node.attrs['reducer']}")
            if node.dtype not in _ATOMIC_DTYPES:
                self.fail(f"{r}: atomics on {node.dtype} are not supported by Numba (use f32/f64/s32/s64/u32/u64)")
        # the result buffer: the output array, the Global value's array, or scratch -- pre-filled with init
        if r in self.kw.array_of:
            self.fail(f"split reduce {r}: its result buffer is already used elsewhere in the kernel")
        role = "output" if v.output else "scratch"
        comment = (f"split reduction result of {r}" + (", pre-filled with the init value (atomic combine)"
                                                       if m.combine == "atomic" else ""))
        name = self.kw.add_param(r, role, node.shape, node.dtype, "g_" + r,
                                 fill_from=r if m.combine == "atomic" else "", comment=comment)
        self.kw.array_of[r] = name
        self.kw.result_of[r] = name
        if m.combine == "grid_barrier":
            pname = self.kw.add_param("", "partials", (max(1, node.size) * m.splits,), node.dtype if node.dtype
                                      not in ("f16", "bf16") else "f32", "partials_" + r,
                                      comment=f"one partial of {r} per task and split")
            self.kw.partials_of[r] = pname

    def split_partial(self, red_scratch, task_idx, part):
        out = self.out
        for r in self.reduces:
            node = self.g[r]
            flat = E.ravel(task_idx, node.shape)
            total = red_scratch[r].at("tid")
            if self.m.combine == "atomic":
                fn = _REDUCER[node.attrs["reducer"]][1]
                out(f"cuda.atomic.{fn}({self.kw.result_of[r]}, {flat}, {total})  # combine across the "
                    f"{self.m.splits} blocks of the task")
            else:
                out(f"{self.kw.partials_of[r]}[{E.add(E.mul(flat, self.m.splits), part)}] = {total}  "
                    "# this block's partial")

    def sum_partials(self, task_idx, part):
        out = self.out
        for r in self.reduces:
            node = self.g[r]
            flat = E.ravel(task_idx, node.shape)
            init = self.value(node.operands[1].name, (), Scope())
            acc = self.kw.names.fresh("total_" + r)
            partials = self.kw.partials_of[r]
            out(f"{acc} = {partials}[{E.mul(flat, self.m.splits)}]")
            out(f"for p in range(1, {self.m.splits}):  # every block folds the partials in the same order")
            out.indent()
            partial = f"{partials}[{E.add(E.mul(flat, self.m.splits), 'p')}]"
            out(f"{acc} = {self.combine(node, acc, partial)}")
            out.dedent()
            out(f"{acc} = {self.combine(node, acc, init)}  # and the init value last")
            final = self.round_result(node, acc)
            cond = "part == 0" if part != 0 else True
            if cond is not True:
                out(f"if {cond}:")
                out.indent()
            out(f"{self.kw.result_of[r]}[{flat}] = {self.kw.store(node.dtype, final)}")
            if cond is not True:
                out.dedent()

    def round_result(self, node, expr: str) -> str:
        if node.dtype == "f16":
            return f"_f16({expr})"
        if node.dtype == "bf16":
            return f"_bf16({expr})"
        return expr

    def finish_tasks(self, red_scratch, m, tc, task_idx, part):
        """The task's first thread: complete each reduce, store it, run the epilogue, store its values."""
        out = self.out
        self.phase = "epilogue"
        scope = Scope()
        self.it = None
        for r in self.reduces:
            node = self.g[r]
            var = self.kw.names.fresh(r)
            if red_scratch is not None:
                init = self.value(node.operands[1].name, (), scope)
                out(f"{var} = {self.round_result(node, self.combine(node, red_scratch[r].at('tid'), init))}"
                    f"  # {self.describe(node)}")
            else:
                flat = E.ravel(task_idx, node.shape)
                out(f"{var} = {self.kw.load(node.dtype, f'{self.kw.result_of[r]}[{flat}]')}  # {r}, complete")
            self.result_var[r] = var
        stores = []
        for n in self.reduces:
            stores.append(n)
        for n in self.stage.epilogue:
            self.value(n, task_idx, scope)
            stores.append(n)
        for n in stores:
            node = self.g[n]
            v = self.kw.values.get(n)
            val = self.result_var.get(n) or scope.get((n, tuple(str(x) for x in task_idx)))
            if val is None:
                val = self.value(n, task_idx, scope)
            split_result = n in self.kw.result_of
            if v.space == "shared":
                out(f"{self.kw.shared_view(n)}[{self.slot_of(m, tc)}] = {self.kw.store(node.dtype, val)}"
                    f"  # Regional: for this block's later stages")
            if (v.output or v.space == "global") and not split_result:
                flat = E.ravel(task_idx, node.shape)
                line = (f"{self.kw.global_array(n)}[{flat}] = {self.kw.store(node.dtype, val)}  # "
                        + ("output" if v.output else "Global: for every block, after the grid barrier"))
                if part != 0:
                    out("if part == 0:")
                    out(f"    {line}")
                else:
                    out(line)
            if v.space == "register" and n in self.kw.read_later:
                self.fail(f"{n} is computed once per task but kept in registers for a later stage")
        self.phase = "element"
