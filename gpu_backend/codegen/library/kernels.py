"""Library kernels: the plan's dot, sort, topk, reduce-window and scatter, as plain, correct Numba kernels.

The Plan treats these ops as library calls (``Kernel.kind == "library"``: cuBLAS,
CUB...) and plans the stitched kernels around them (``astitch_sim.plan.boundary``).
The backend does not reproduce those libraries.  It writes one simple kernel
per op, in a grid-stride loop over the plan's launch shape, that computes
exactly what the numpy reference computes, in the same order where order
matters (float sums):

* ``dot``: a naive batched matmul; each thread computes whole output elements,
  accumulating the contracted dims in order in float32 (float64 for f64);
* ``sort`` / ``topk`` (:mod:`~gpu_backend.codegen.library.sort`): a *rank sort*: each
  thread takes one element, counts the elements of its row that come before it
  (stable: ties go by position) and writes it at that rank -- O(n) per thread;
* ``reduce-window`` (:mod:`~gpu_backend.codegen.library.window`): each thread folds one
  output's window in row-major order (a cumsum's prefix: ``((init + x0) + x1)...``,
  the reference's order);
* ``scatter`` (:mod:`~gpu_backend.codegen.library.scatter`): each thread owns a set of
  output elements no other thread touches, copies them from the operand and
  applies every update that lands on them, in update order (so colliding
  updates combine as XLA's sequential loop does, with no atomics).

An operand the plan reads as a *view* (``Kernel.views``: a row-major reshape of a
buffer) is that buffer, indexed with the operand's shape: the flat position is
the same.  Correct and readable, not fast: time library kernels with real libraries.
"""
from __future__ import annotations

from math import ceil

from astitch_sim.errors import AStitchError
from astitch_sim.ir.graph import shape_str

from .. import exprs as E
from ..dtypes import COMPUTE
from ..source import RESERVED_NAMES, Lines, Names
from ..specs import KernelSpec, ParamSpec


class LibraryWriter:
    """The frame every library kernel shares: arguments (through views), a grid-stride loop, the function."""

    def __init__(self, mod, kernel, index: int, func: str):
        self.mod, self.k, self.index, self.func = mod, kernel, index, func
        self.g = mod.graph
        self.nodes = [self.g[n] for n in (kernel.outputs or [kernel.library_op])]
        self.names = Names(RESERVED_NAMES | {f"d{i}" for i in range(32)} | {f"c{i}" for i in range(32)}
                           | {f"w{i}" for i in range(32)} | {"j", "rank", "q", "gq", "wq", "lane", "cmp"})
        self.params: list = []
        self.array_of: dict = {}
        self.out = Lines()
        self.out.depth = 1

    def fail(self, msg: str):
        raise AStitchError(f"gpu_backend cannot follow plan {self.mod.plan.strategy!r} of {self.g.name!r}: "
                           f"library kernel {self.k.name}: {msg}")

    def array(self, node, role: str, comment: str) -> str:
        """The array holding ``node``'s elements: an operand read through its view, or a result."""
        buf = self.k.views.get(node.name, node.name) if role == "input" else node.name
        if buf in self.array_of:
            return self.array_of[buf]
        src = self.g[buf]
        name = self.names.fresh("g_" + buf)
        self.params.append(ParamSpec(name, buf, role, tuple(src.shape), src.dtype, comment=comment))
        self.array_of[buf] = name
        return name

    def operand(self, i: int, comment: str) -> str:
        return self.array(self.nodes[0].operands[i], "input", comment)

    def scalar(self, node) -> str:
        """A scalar operand (an init value): a literal, or element 0 of its array."""
        if node.op == "constant" and node.rank == 0:
            return self.mod.constant(node.attrs["value"], node.dtype, node.name)
        return self.load(node.dtype, f"{self.array(node, 'input', 'scalar operand')}[0]")

    @staticmethod
    def load(dtype: str, ref: str) -> str:
        return {"f16": f"float32({ref})", "bf16": f"_bf16_value({ref})"}.get(dtype, ref)

    @staticmethod
    def store(dtype: str, val: str) -> str:
        return {"f16": f"float16({val})", "bf16": f"_bf16_bits({val})"}.get(dtype, val)

    @staticmethod
    def result(dtype: str, expr: str) -> str:
        """A float32/float64 accumulator as the node's register value."""
        if dtype == "f16":
            return f"_f16({expr})"
        if dtype == "bf16":
            return f"_bf16({expr})"
        return f"{COMPUTE[dtype]}({expr})" if dtype != "pred" else f"bool_({expr})"

    def grid_stride(self, count: int, what: str):
        """Open ``for it ...: e = ...; if e < count:``; returns the element variable."""
        out, k = self.out, self.k
        total = k.grid * k.block
        T = max(1, ceil(count / total))
        out(f"# {what}: {count} in all, over {k.grid} x {k.block} threads, {T} per thread (grid-stride)")
        if T > 1:
            out(f"for it in range({T}):")
            out.indent()
        it = "it" if T > 1 else 0
        out(f"e = {E.add(E.mul(it, total), E.add(E.mul('bid', k.block), 'tid'))}")
        if T * total > count:
            out(f"if {E.lt('e', count)}:")
            out.indent()
        return "e"

    def unravel_vars(self, flat, shape, prefix: str) -> list:
        """``prefix0 = ...`` per dim of ``shape`` from a flat position; returns the index expressions."""
        out = []
        for i, x in enumerate(E.unravel(flat, shape)):
            if isinstance(x, int):
                out.append(x)
            else:
                name = self.names.fresh(f"{prefix}{i}")
                self.out(f"{name} = {x}")
                out.append(name)
        return out

    def finish(self, doc: str):
        k = self.k
        lines = [f"@jit(max_registers={k.registers_per_thread})",
                 f"def {self.func}({', '.join(p.name for p in self.params)}):",
                 f'    """{k.name}: library {doc} (plain kernel, grid {k.grid} x block {k.block}).',
                 "", "    Arguments:"]
        for p in self.params:
            lines.append(f"      {p.name}: {shape_str(p.shape, p.dtype)} {p.role} -- {p.comment}")
        lines += ['    """', "    tid = cuda.threadIdx.x", "    bid = cuda.blockIdx.x", ""]
        spec = KernelSpec(self.index, k.name, self.func, "library", k.grid, k.block, False, 0, self.params)
        return "\n".join(lines + self.out.lines) + "\n", spec


def _operand_index(rank: int, *dims_and_values) -> list:
    """An operand's index expressions: each (dims, values) pair puts values[i] at dimension dims[i]."""
    idx = [None] * rank
    for dims, values in dims_and_values:
        for d, v in zip(dims, values):
            idx[d] = v
    return idx


def write_dot(w: LibraryWriter) -> str:
    node = w.nodes[0]
    a, b = node.operands
    lb, lc = list(node.attrs["lhs_batch_dims"]), list(node.attrs["lhs_contracting_dims"])
    rb, rc = list(node.attrs["rhs_batch_dims"]), list(node.attrs["rhs_contracting_dims"])
    lf = [d for d in range(a.rank) if d not in lb and d not in lc]
    rf = [d for d in range(b.rank) if d not in rb and d not in rc]
    ga = w.operand(0, "left operand" + (" (a reshape view)" if a.name in w.k.views else ""))
    gb = w.operand(1, "right operand" + (" (a reshape view)" if b.name in w.k.views else ""))
    go = w.array(node, "output", "the product")
    acc_t = "float64" if node.dtype == "f64" or (a.dtype == "f64" and b.dtype == "f64") else "float32"
    out = w.out
    ksize = 1
    for d in lc:
        ksize *= a.shape[d]
    w.grid_stride(node.size, f"naive batched matmul: whole elements of {node.name} {shape_str(node.shape, node.dtype)}")
    ov = w.unravel_vars("e", node.shape, "d")      # output dims: batch, then lhs free, then rhs free
    batch_v = ov[:len(lb)]
    lfree_v = ov[len(lb):len(lb) + len(lf)]
    rfree_v = ov[len(lb) + len(lf):]
    out(f"acc = {acc_t}(0)")
    out(f"for k in range({ksize}):  # the contracted dimension(s), in order")
    out.indent()
    kv = w.unravel_vars("k", [a.shape[d] for d in lc], "c")
    aidx = _operand_index(a.rank, (lb, batch_v), (lc, kv), (lf, lfree_v))
    bidx = _operand_index(b.rank, (rb, batch_v), (rc, kv), (rf, rfree_v))
    av = w.load(a.dtype, f"{ga}[{E.ravel(aidx, a.shape)}]")
    bv = w.load(b.dtype, f"{gb}[{E.ravel(bidx, b.shape)}]")
    out(f"acc += {acc_t}({av}) * {acc_t}({bv})")
    out.dedent()
    res = {"f16": "float16(acc)", "bf16": "_bf16_bits(_bf16(float32(acc)))"}.get(node.dtype)
    if res is None:
        res = f"{COMPUTE[node.dtype]}(acc)" if node.dtype != "pred" else "bool_(acc != 0)"
    out(f"{go}[e] = {res}")
    return f"matrix product {node}"


def _writers():
    from .scatter import write_scatter
    from .sort import write_sort, write_topk
    from .window import write_reduce_window
    return {"dot": write_dot, "sort": write_sort, "topk": write_topk, "reduce-window": write_reduce_window,
            "scatter": write_scatter}


def write_library_kernel(mod, kernel, index: int, func: str):
    w = LibraryWriter(mod, kernel, index, func)
    op = w.nodes[0].op
    writers = _writers()
    if op not in writers:
        w.fail(f"computes {op}; the backend has library kernels for {', '.join(sorted(writers))}")
    return w.finish(writers[op](w))
