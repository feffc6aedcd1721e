"""Pieces every strategy shares: thread mappings, kernel ordering, library kernels, escapes."""
from __future__ import annotations

from math import ceil

from ...passes.analysis import classify_reduce, is_boundary, is_free
from ...plan.boundary import library_op, reads_of, views_of
from ...plan.kernel_end import EndRule, KernelEnd
from ...ir.reducers import has_atomic, reducer
from ...plan.mapping import ThreadMapping
from ...plan.plan import Kernel, Value

MAX_GRID = 2 ** 31 - 1
#: threads per block of an XLA/TVM loop (elementwise) fusion
LOOP_BLOCK = 256


def prev_pow2(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def next_pow2(n: int) -> int:
    return 1 << (max(1, int(n)) - 1).bit_length()


def round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def flat_mapping(shape, block: int, grid: int | None = None) -> ThreadMapping:
    """Elementwise: one element per thread, or a grid-stride loop when ``grid`` is capped."""
    size = 1
    for s in shape:
        size *= s
    need = max(1, ceil(size / block))
    return ThreadMapping("flat", tuple(shape), (tuple(range(len(shape))),), block=block,
                         grid=min(need, grid or MAX_GRID))


#: today's XLA's row-reduction tiling (``xla/service/gpu/reduction_utils.cc`` ``GetReductionTiling``): each
#: thread of a row reduction covers 16 elements of its row
XLA_ROW_TILE = 16
#: XLA's threads per block to aim for when a row needs fewer (``kThreadsPerBlockTarget``, "between 128 and 512
#: threads, so we just go for 256")
XLA_BLOCK_TARGET = 256


def xla_packed_rows(rows: int, cols: int, gpu) -> tuple:
    """``(threads per row, rows per block)`` of today's XLA for a row reduction of ``rows`` rows of ``cols``.

    OpenXLA's reduction emitter (``xla/service/gpu/fusions/reduction.cc``, the constructor of its row
    reduction; the same arithmetic in the MLIR emitter that replaced it): a row gets
    ``min(1024, round_up(ceil(cols / 16), 32))`` threads (``MinThreadsXRowReduction`` is 1024 with ptxas 12.2 or
    later, openxla/xla#4070), or exactly ``cols`` threads when ``cols`` divides a warp (``RowReductionGetRowsPerWarp``:
    several rows per warp).  "If we're limited by the size of the x dimension", rows are added along y until the
    block has 256 threads (``kThreadsPerBlockTarget``), or every row when fewer remain (then whole warps).  So
    <750000,32> is 93750 blocks of 8 rows x 32 threads, <16384,768> 4096 blocks of 4 rows x 64 threads, and a row
    of more than 2048 elements (over 128 threads) keeps a block of its own.  The paper's XLA (TF <= 2.6) had no y threads for row reductions:
    ``num_threads_y = is_row_reduction ? 1 : kWarpSize``."""
    warp = gpu.warp_size
    if cols < warp and warp % cols == 0:
        tpr = cols
    else:
        tpr = min(gpu.max_threads_per_block, round_up(ceil(cols / XLA_ROW_TILE), warp))
    per_block = 1
    if tpr * 2 <= XLA_BLOCK_TARGET:
        if rows * tpr <= XLA_BLOCK_TARGET:
            per_block = rows
            while (tpr * per_block) % warp:
                per_block += 1
        else:
            per_block = XLA_BLOCK_TARGET // tpr
    return tpr, per_block


def xla_reduce_mapping(node, gpu, siblings=(), packed_rows: bool = False) -> ThreadMapping:
    """XLA's reduction mappings: today's (``packed_rows``, :func:`xla_packed_rows`) or the paper's (2021).

    Row reduction, as the paper describes the XLA it measured: one block per row, the block as wide as the
    row (rounded up to whole warps, at most 1024 threads): <750000,32> -> 750000 blocks of 32 threads;
    <64,30000> -> 64 blocks of 1024.  Today's XLA packs short rows into 256-thread blocks
    (:func:`xla_packed_rows`; long rows keep a block each).  A reduction of a whole tensor
    to one value is spread over many blocks combined with atomics (one block
    would leave the GPU idle; XLA does not do that).  Column reduction: tiles of 32
    columns x 32 row lanes; the reduced dim is split over blocks (partials
    combined with atomics) until about one wave of blocks is busy.
    """
    x = node.operands[0]
    rs = classify_reduce(node)
    group = [node] + [s for s in siblings if s is not node]      # multi-output fusion: every reduce must fit
    atomic = all(has_atomic(r) for r in group)
    if rs.kind == "row":
        m = ThreadMapping("rows", x.shape, rs.groups, block=1, grid=1, threads_per_row=1)
        tpr = min(gpu.max_threads_per_block, round_up(max(m.cols, 1), gpu.warp_size))
        if m.rows == 1 and m.cols > 8 * tpr and atomic:
            # a whole-tensor reduction: XLA spreads it over many blocks (atomics into the result)
            splits = prev_pow2(min(gpu.blocks_per_wave(tpr), ceil(m.cols / (8 * tpr))))
            return ThreadMapping("rows", x.shape, rs.groups, block=tpr, grid=splits, threads_per_row=tpr,
                                 splits=splits, combine="atomic")
        if packed_rows:
            tpr, per_block = xla_packed_rows(m.rows, max(m.cols, 1), gpu)
            return ThreadMapping("rows", x.shape, rs.groups, block=tpr * per_block,
                                 grid=max(1, min(ceil(m.rows / per_block), MAX_GRID)), threads_per_row=tpr)
        return ThreadMapping("rows", x.shape, rs.groups, block=tpr, grid=max(1, min(m.rows, MAX_GRID)),
                             threads_per_row=tpr)
    return column_mapping(node, gpu, block=1024, fill_blocks=gpu.blocks_per_wave(1024) if atomic else 1,
                          combine="atomic")


def column_mapping(node, gpu, block: int, fill_blocks: int, combine: str) -> ThreadMapping:
    """Column reduction: 32 column lanes x block/32 row lanes; split the reduced dim to fill ``fill_blocks``."""
    x = node.operands[0]
    rs = classify_reduce(node)
    lanes_c = min(32, block)
    probe = ThreadMapping("columns", x.shape, rs.groups, block=block, grid=1, threads_per_row=lanes_c)
    lanes = block // lanes_c
    tiles = ceil(probe.rows / lanes_c)
    # split the reduced dim only when each split still has real work (>= 64 rows)
    splits = max(1, min(fill_blocks // max(tiles, 1), probe.cols // max(lanes * 4, 64)))
    splits = prev_pow2(splits)
    if splits > 1 and (not reducer(node).splittable or (combine == "atomic" and not has_atomic(node))):
        splits = 1   # no atomic for prod/and/or or 16-bit types, no split at all for argmax: one block per column
    return ThreadMapping("columns", x.shape, rs.groups, block=block, grid=max(1, min(tiles, MAX_GRID // splits)) * splits,
                         threads_per_row=lanes_c, splits=splits, combine=combine if splits > 1 else "none")


def dependency_order(needs: list, first=None) -> list | None:
    """The order kernels run in: each after every kernel whose results it reads.

    ``needs[i]``: positions of the kernels kernel ``i`` reads from (its own position is
    ignored).  Of the kernels whose needs are met, the one that comes first by the key
    ``first`` (default: its position) runs next, so the order stays as close to the
    given one as the dependences allow.  Returns the positions in run order, or None
    when some kernels wait on each other in a cycle.  Every strategy orders its kernels
    with this one function.
    """
    key = first or (lambda i: i)
    done, order = set(), []
    while len(order) < len(needs):
        ready = [i for i in range(len(needs)) if i not in done and needs[i] - {i} <= done]
        if not ready:
            return None
        pick = min(ready, key=key)
        done.add(pick)
        order.append(pick)
    return order


def in_passes(needs: list):
    """A preference for :func:`dependency_order`: kernels in *passes* over the given order.

    Each pass takes, in the given order, every kernel whose needs are met by then (by an
    earlier pass or earlier in this pass); a kernel that waits on a later one goes to a
    later pass.  The key is ``(pass, position)``: a kernel's pass is the largest of its
    needs' passes, plus one for a need that comes after it.  This is AStitch's order (its
    stitch scopes and library kernels in graph order, by each one's first op).
    """
    rank = {}
    for i in dependency_order(needs) or ():
        rank[i] = max([0] + [rank[d] + (1 if d > i else 0) for d in needs[i] if d != i])
    return lambda i: (rank.get(i, 0), i)


def max_reduction_slots(gpu) -> int:
    """How many reduced values one stage may fold at once: their shared-memory trees (8 bytes per thread
    each, blocks of up to ``max_threads_per_block``) must fit the default per-block budget (48 KiB), so a
    multi-output fusion of many sibling reductions (the bias gradients of a training step) is split."""
    return max(1, gpu.shared_per_block_default // (gpu.max_threads_per_block * 8))


def reduction_values(node) -> int:
    """Values a reduce folds per element (its tree's scratch slots): 1, or 2 for argmax/argmin."""
    return len(node.operands) // 2


def library_kernel(graph, nodes, index: int) -> Kernel:
    """A library op (and its sibling results) runs as one library kernel; the plan works around it.

    It reads its operands from global memory -- an operand that is only a row-major
    reshape of a value in memory is read as that value's buffer (``views``) -- and
    writes every result there.
    """
    nodes = list(nodes)
    lib = library_op(nodes[0])
    grid, block = lib.launch(nodes)
    reads = reads_of(nodes)
    values = {n: Value(n, "global", "global", stage=-1) for n in reads}
    for n in nodes:
        values[n.name] = Value(n.name, "global", "independent", stage=0, output=True)
    views = views_of(nodes)
    notes = [f"{nodes[0].op}: library kernel, {lib.stands_for}; not stitched: {lib.why}"]
    if views:
        notes.append("reads " + ", ".join(f"{o} as a view of {b} (a row-major reshape: no copy)"
                                          for o, b in views.items()))
    ends = [KernelEnd(n.name, EndRule.LIBRARY_OP, f"{n.name} ({n.op}) runs as a library kernel ({lib.stands_for}); "
                      f"not stitched: {lib.why}", "astitch_sim/plan/boundary.py LIBRARY_OPS") for n in nodes]
    return Kernel(name=f"library.{index}:{nodes[0].name}", kind="library", grid=grid, block=block,
                  values=values, inputs=reads, outputs=[n.name for n in nodes], shared_bytes=0,
                  registers_per_thread=128 if nodes[0].op == "dot" else 32, library_op=nodes[0].name,
                  notes=notes, views=views, ends=ends)


def escapes_of(graph, nodes: set, readers_elsewhere: set) -> set:
    """Nodes of a kernel that must be written to global: graph outputs or read by another kernel."""
    outs = {o.name for o in graph.outputs}
    return {n for n in nodes if n in outs or n in readers_elsewhere}


def closure(root, stop) -> list:
    """Producers of ``root`` reachable without passing a node for which ``stop(node)`` holds (topological)."""
    seen, order = set(), []

    def visit(n):
        if n.name in seen:
            return
        seen.add(n.name)
        for o in n.operands:
            if not stop(o):
                visit(o)
        order.append(n)
    visit(root)
    return order


def fusible_stop(node) -> bool:
    """Fusion never crosses these: inputs, constants, and library ops."""
    return node.op in ("parameter", "constant") or is_boundary(node)


def is_work(node) -> bool:
    """Does an unfused framework launch a kernel for this op?"""
    return not is_free(node) and node.op not in ("parameter", "constant")
