"""Library kernels: the ops AStitch plans *around*, one row per op.

AStitch stitches memory-intensive ops whose elements it can assign to threads
one pass at a time: elementwise, broadcast, reduce, layout and indexed loads.
Some ops are not like that, and a compiler hands each to a library kernel of
its own, ending the stitched kernels before it and starting new ones after it:

=============  ============================================  =====================================
op             stands for                                    why it cannot be stitched
=============  ============================================  =====================================
dot            GEMM (cuBLAS), 128x128 tiles                  compute-intensive: a tuned library wins
sort           segmented sort (CUB)                          every output depends on the whole row
topk           segmented top-k select                        every output depends on the whole row
reduce-window  scan / windowed reduce (CUB scan)             output i depends on a growing prefix:
                                                             not one pass of independent tasks
scatter        scatter with atomics (XLA's scatter emitter)  updates may collide on one element
=============  ============================================  =====================================

Each row says what the kernel *moves* -- the SIMT model charges it, and the
cost model turns it into time with a roofline, exactly as for a GEMM:

* bytes read: every operand once (a library reads its inputs in one pass; a
  gathered or scattered row is read where it is, but the whole operand of a
  scatter is copied into the result);
* bytes written: every result once (a scatter also stores one element per update);
* flops: ``2*M*N*K`` for a GEMM; comparisons for a sort (``n log2 n``) or a top-k
  (``n log2 k``); one combine per window element (a scan: one per element); one
  per scatter update.

The Numba backend (``gpu_backend/codegen/library/kernels.py``) writes a plain, correct kernel
for each, with the same launch shape (``launch``), not the library's algorithm.

Several results of one library op (a sort of keys and values, top-k values and
indices) are *siblings*: one kernel computes them all.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil, log2, prod
from typing import Callable

from ..passes.analysis import boundary_source, is_boundary
from ..ir.windows import scan_axis

#: threads per block of the plain library kernels (one element, row or lane per thread)
LIBRARY_BLOCK = 256


@dataclass(frozen=True)
class LibraryOp:
    op: str
    stands_for: str
    why: str
    launch: Callable          # (nodes) -> (grid, block)
    flops: Callable           # (nodes) -> flops


def _per_thread(count: int):
    block = LIBRARY_BLOCK if count >= LIBRARY_BLOCK else max(1, count)
    return max(1, ceil(count / block)), block


def _dot_launch(nodes):
    out = nodes[0].shape
    m = out[-2] if len(out) >= 2 else 1
    n = out[-1] if out else 1
    batch = prod(out[:-2]) if len(out) > 2 else 1
    return max(1, batch * ceil(m / 128) * ceil(n / 128)), 256


def _dot_flops(nodes):
    node = nodes[0]
    lhs = node.operands[0]
    return 2 * node.size * prod(lhs.shape[d] for d in node.attrs.get("lhs_contracting_dims", ()))


def _sort_flops(nodes):
    x = nodes[0].operands[0]
    n = x.shape[nodes[0].attrs["dimension"]] if x.rank else 1
    return x.size * max(1, ceil(log2(max(n, 2))))


def _topk_flops(nodes):
    x = nodes[0].operands[0]
    return x.size * max(1, ceil(log2(nodes[0].attrs["k"] + 1)))


def _window_flops(nodes):
    node = nodes[0]
    if scan_axis(node) is not None:
        return node.size
    return node.size * prod(node.attrs["window_dimensions"])


def scatter_lanes(node) -> int:
    """Threads of the scatter kernel: one per position of the non-scattered operand dims, if every
    scattered dim has a window of 1 (then no two lanes ever touch one element); else one thread."""
    from ..ir.scatter import window_sizes
    x = node.operands[0]
    a = node.attrs
    indexed = set(a["scatter_dims_to_operand_dims"]) | set(a["input_batching_dims"])
    sizes = window_sizes(node)
    if any(sizes[d] != 1 for d in indexed):
        return 1
    return prod(n for d, n in enumerate(x.shape) if d not in indexed)


LIBRARY_OPS = {row.op: row for row in [
    LibraryOp("dot", "GEMM (cuBLAS-like), 128x128 tiles", "compute-intensive: a tuned library kernel",
              _dot_launch, _dot_flops),
    LibraryOp("sort", "segmented sort (CUB-like)", "every output element depends on its whole row",
              lambda nodes: _per_thread(nodes[0].size), _sort_flops),
    LibraryOp("topk", "segmented top-k selection", "every output element depends on its whole row",
              lambda nodes: _per_thread(nodes[0].operands[0].size), _topk_flops),
    LibraryOp("reduce-window", "scan / windowed reduction (CUB-like)",
              "output i folds a window that moves with i (a scan): not one pass of independent reductions",
              lambda nodes: _per_thread(nodes[0].size), _window_flops),
    LibraryOp("scatter", "scatter (XLA's scatter emitter)",
              "updates may collide on one element: they are applied in order, not stitched",
              lambda nodes: _per_thread(scatter_lanes(nodes[0])), lambda nodes: nodes[0].operands[2].size),
]}


def library_op(node) -> LibraryOp:
    return LIBRARY_OPS[node.op]


def sibling_key(node) -> tuple:
    """Nodes with equal keys are results of one library op (they differ only in ``result``)."""
    attrs = tuple(sorted((k, repr(v)) for k, v in node.attrs.items() if k not in ("result", "layout")))
    return node.op, tuple(o.name for o in node.operands), attrs


def library_groups(nodes) -> list:
    """Live library nodes grouped into kernels: siblings share one, in graph order."""
    groups: dict = {}
    for n in nodes:
        if is_boundary(n):
            groups.setdefault(sibling_key(n), []).append(n)
    return list(groups.values())


def views_of(nodes) -> dict:
    """operand -> buffer it is read as (only operands read through a reshape view)."""
    out = {}
    for o in nodes[0].operands:
        src = boundary_source(o)
        if src is not o:
            out[o.name] = src.name
    return out


def reads_of(nodes) -> list:
    """The global buffers the kernel reads (scalar constants are passed by value)."""
    out = []
    for o in nodes[0].operands:
        if o.op == "constant" and o.rank == 0:
            continue
        src = boundary_source(o).name
        if src not in out:
            out.append(src)
    return out


def traffic(nodes) -> tuple[int, int, int]:
    """(bytes read, bytes written, flops) of one library kernel computing ``nodes`` (siblings)."""
    node = nodes[0]
    seen, read = set(), 0
    for o in node.operands:
        src = boundary_source(o)
        if src.name in seen or (o.op == "constant" and o.rank == 0):
            continue
        seen.add(src.name)
        read += o.nbytes
    written = sum(n.nbytes for n in nodes)
    if node.op == "scatter":
        written += node.operands[2].nbytes        # one store (or atomic) per update element
    return read, written, int(library_op(node).flops(nodes))
