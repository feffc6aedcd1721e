"""``reduce-window`` (a cumsum) as one thread per output element folding its window.

Output ``o`` folds the input elements at ``o * stride + w - pad_low`` for the
window offsets ``w`` in row-major order, skipping those outside the input,
starting from the init value -- the order of XLA's loop and of the numpy
reference, so a float cumsum is bit-for-bit ``((init + x0) + x1) + ...``.  A
cumsum over ``n`` elements costs O(n) per output here (O(n^2) per row): plain and
correct; a library would scan.  Floats accumulate in float32 (f16/bf16 results
are rounded once, at the end, like the other reductions of the backend).
"""
from __future__ import annotations

from math import prod

from astitch_sim.ir.reducers import REDUCERS

from .. import exprs as E
from ..dtypes import FLOATS, COMPUTE


def write_reduce_window(w) -> str:
    node = w.nodes[0]
    x, init = node.operands
    a = node.attrs
    src = w.operand(0, "the input")
    dst = w.array(node, "output", "the windowed reduction")
    acc_t = COMPUTE[node.dtype]
    red = a["reducer"]
    size, stride, lo = a["window_dimensions"], a["window_strides"], a["padding_low"]
    w.grid_stride(node.size, f"{red} over a {'x'.join(map(str, size))} window: one output per thread")
    o = w.unravel_vars("e", node.shape, "d")
    out = w.out
    out(f"acc = {acc_t}({w.scalar(init)})  # the init value first")
    loops = 0
    offs = []
    for d, n in enumerate(size):
        if n == 1:
            offs.append(0)
            continue
        var = f"w{d}"
        out(f"for {var} in range({n}):  # window offsets along dim {d}, in order")
        out.indent()
        loops += 1
        offs.append(var)
    pos = []
    conds = []
    for d, (od, st, wd, l, n) in enumerate(zip(o, stride, offs, lo, x.shape)):
        p = E.sub(E.add(E.mul(od, st), wd), l)
        if not isinstance(p, int):
            var = w.names.fresh(f"c{d}")
            out(f"{var} = {p}")
            p = var
        pos.append(p)
        lowest, highest = -l, (node.shape[d] - 1) * st + size[d] - 1 - l
        if isinstance(p, int):
            conds.append(0 <= p < n)
        elif lowest < 0 or highest >= n:            # the window may stick out of the input here
            conds.append(f"0 <= {p} < {n}")
    cond = E.all_of(conds)
    if cond is not False:
        if cond is not True:
            out(f"if {cond}:  # padding positions are skipped")
            out.indent()
        val = w.load(x.dtype, f"{src}[{E.ravel(pos, x.shape)}]")
        step = REDUCERS[red].scalar.format("acc", val)
        if node.dtype not in FLOATS:
            step = f"{acc_t}({step})" if node.dtype != "pred" or not REDUCERS[red].scalar_keeps_bool else step
        out(f"acc = {step}")
        if cond is not True:
            out.dedent()
    for _ in range(loops):
        out.dedent()
    out(f"{dst}[e] = {w.store(node.dtype, w.result(node.dtype, 'acc') if node.dtype in ('f16', 'bf16') else 'acc')}")
    return f"{red} reduce-window of {x.name} (window {size}, {prod(size)} elements per output)"
