"""Library kernels: the plan's matrix products (``dot``), as a simple, correct Numba kernel.

The Plan treats a matrix product as a vendor-library call (cuBLAS-like,
128x128 tiles: ``Kernel.kind == "library"``) and plans the memory-intensive
kernels around it.  The backend does not reproduce cuBLAS: it writes a naive
batched matmul over the ``dot_general`` dimensions -- every thread computes
whole output elements, in a grid-stride loop over the plan's launch shape, and
accumulates the contracted dimension in float32 (float64 for f64), in order,
as the numpy reference does.  Correct and readable, not fast: time library
kernels with a real BLAS, not with this.
"""
from __future__ import annotations

from math import ceil

from astitch_sim.graph import shape_str

from . import exprs as E
from .dtypes import COMPUTE
from .source import _STRUCTURAL, Lines, Names
from .specs import KernelSpec, ParamSpec



def _operand_index(rank: int, *dims_and_values) -> list:
    """An operand's index expressions: each (dims, values) pair puts values[i] at dimension dims[i]."""
    idx = [None] * rank
    for dims, values in dims_and_values:
        for d, v in zip(dims, values):
            idx[d] = v
    return idx

def write_library_kernel(mod, kernel, index: int, func: str):
    g = mod.graph
    node = g[kernel.library_op]
    if node.op != "dot":
        raise_unknown(kernel, node)
    a, b = node.operands
    lb, lc = list(node.attrs["lhs_batch_dims"]), list(node.attrs["lhs_contracting_dims"])
    rb, rc = list(node.attrs["rhs_batch_dims"]), list(node.attrs["rhs_contracting_dims"])
    lf = [d for d in range(a.rank) if d not in lb and d not in lc]
    rf = [d for d in range(b.rank) if d not in rb and d not in rc]
    names = Names(_STRUCTURAL | {f"d{i}" for i in range(32)} | {f"c{i}" for i in range(32)})
    params = []

    def param(n, role, comment):
        nm = names.fresh("g_" + n.name)
        params.append(ParamSpec(nm, n.name, role, tuple(n.shape), n.dtype, comment=comment))
        return nm

    ga = param(a, "input", "left operand")
    gb = param(b, "input", "right operand")
    go = param(node, "output", "the product")
    acc_t = "float64" if node.dtype == "f64" or (a.dtype == "f64" and b.dtype == "f64") else "float32"
    out = Lines()
    out.depth = 1
    size = node.size
    total = kernel.grid * kernel.block
    T = max(1, ceil(size / total))
    ksize = 1
    for d in lc:
        ksize *= a.shape[d]
    out(f"# naive batched matmul: each thread computes whole elements of {node.name} "
        f"{shape_str(node.shape, node.dtype)}, {T} per thread (grid-stride)")
    if T > 1:
        out(f"for it in range({T}):")
        out.indent()
    it = "it" if T > 1 else 0
    out(f"e = {E.add(E.mul(it, total), E.add(E.mul('bid', kernel.block), 'tid'))}")
    cond = E.lt("e", size) if T * total > size else True
    if cond is not True:
        out(f"if {cond}:")
        out.indent()
    # output dims: batch dims, then lhs free dims, then rhs free dims
    oidx = E.unravel("e", node.shape)
    for i, x in enumerate(oidx):
        if not isinstance(x, int):
            out(f"d{i} = {x}")
    ov = [x if isinstance(x, int) else f"d{i}" for i, x in enumerate(oidx)]
    batch_v = ov[:len(lb)]
    lfree_v = ov[len(lb):len(lb) + len(lf)]
    rfree_v = ov[len(lb) + len(lf):]
    out(f"acc = {acc_t}(0)")
    out(f"for k in range({ksize}):  # the contracted dimension(s), in order")
    out.indent()
    kshape = [a.shape[d] for d in lc]
    kidx = E.unravel("k", kshape)
    kv = []
    for i, x in enumerate(kidx):
        if isinstance(x, int):
            kv.append(x)
        else:
            out(f"c{i} = {x}")
            kv.append(f"c{i}")
    aidx = _operand_index(a.rank, (lb, batch_v), (lc, kv), (lf, lfree_v))
    bidx = _operand_index(b.rank, (rb, batch_v), (rc, kv), (rf, rfree_v))
    av = _load(a.dtype, f"{ga}[{E.ravel(aidx, a.shape)}]")
    bv = _load(b.dtype, f"{gb}[{E.ravel(bidx, b.shape)}]")
    out(f"acc += {acc_t}({av}) * {acc_t}({bv})")
    out.dedent()
    res = {"f16": "float16(acc)", "bf16": "_bf16_bits(_bf16(float32(acc)))"}.get(node.dtype)
    if res is None:
        res = f"{COMPUTE[node.dtype]}(acc)" if node.dtype != "pred" else "bool_(acc != 0)"
    out(f"{go}[e] = {res}")
    lines = [f"@jit(max_registers={kernel.registers_per_thread})", f"def {func}({', '.join(p.name for p in params)}):",
             f'    """{kernel.name}: library matrix product {node} (naive kernel, grid {kernel.grid} x '
             f'block {kernel.block})."""',
             "    tid = cuda.threadIdx.x", "    bid = cuda.blockIdx.x", ""]
    spec = KernelSpec(index, kernel.name, func, "library", kernel.grid, kernel.block, False, 0, params)
    return "\n".join(lines + out.lines) + "\n", spec


def _load(dtype: str, ref: str) -> str:
    if dtype == "bf16":
        return f"_bf16_value({ref})"
    return ref


def raise_unknown(kernel, node):
    from astitch_sim.errors import AStitchError
    raise AStitchError(f"gpu_backend: library kernel {kernel.name} computes {node.op}; only dot is supported")
