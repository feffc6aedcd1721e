"""Pieces every strategy shares: thread mappings, kernel ordering, library kernels, escapes."""
from __future__ import annotations

from math import ceil

from ..analysis import classify_reduce, is_compute, is_free
from ..mapping import ThreadMapping
from ..plan import Kernel, Value

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


#: element types a kernel can combine with atomics (CUDA atomicAdd/Max/Min on 32- and 64-bit integers and
#: floats).  16-bit floats have an atomicAdd on recent GPUs but no atomicMax/Min, 8- and 16-bit integers and
#: pred none, and Numba exposes none of them: split reductions of those types combine another way.
ATOMIC_DTYPES = ("f32", "f64", "s32", "s64", "u32", "u64")


def has_atomic(node) -> bool:
    """Can the partial results of reduce ``node`` from several blocks be combined with atomics?"""
    return node.attrs["reducer"] in ("sum", "max", "min") and node.dtype in ATOMIC_DTYPES


def xla_reduce_mapping(node, gpu) -> ThreadMapping:
    """XLA's (2021) reduction mappings as the paper describes them.

    Row reduction: one block per row, the block as wide as the row (rounded up
    to whole warps, at most 1024 threads): <750000,32> -> 750000 blocks of 32
    threads; <64,30000> -> 64 blocks of 1024.  A reduction of a whole tensor
    to one value is spread over many blocks combined with atomics (one block
    would leave the GPU idle; XLA does not do that).  Column reduction: tiles of 32
    columns x 32 row lanes; the reduced dim is split over blocks (partials
    combined with atomics) until about one wave of blocks is busy.
    """
    x = node.operands[0]
    rs = classify_reduce(node)
    if rs.kind == "row":
        m = ThreadMapping("rows", x.shape, rs.groups, block=1, grid=1, threads_per_row=1)
        tpr = min(gpu.max_threads_per_block, round_up(max(m.cols, 1), gpu.warp_size))
        if m.rows == 1 and m.cols > 8 * tpr and has_atomic(node):
            # a whole-tensor reduction: XLA spreads it over many blocks (atomics into the result)
            splits = prev_pow2(min(gpu.blocks_per_wave(tpr), ceil(m.cols / (8 * tpr))))
            return ThreadMapping("rows", x.shape, rs.groups, block=tpr, grid=splits, threads_per_row=tpr,
                                 splits=splits, combine="atomic")
        return ThreadMapping("rows", x.shape, rs.groups, block=tpr, grid=max(1, min(m.rows, MAX_GRID)),
                             threads_per_row=tpr)
    return column_mapping(node, gpu, block=1024, fill_blocks=gpu.blocks_per_wave(1024), combine="atomic")


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
    if splits > 1 and not has_atomic(node) and combine == "atomic":
        splits = 1   # no atomic for prod/and/or or 16-bit types: keep each column in one block
    return ThreadMapping("columns", x.shape, rs.groups, block=block, grid=max(1, min(tiles, MAX_GRID // splits)) * splits,
                         threads_per_row=lanes_c, splits=splits, combine=combine if splits > 1 else "none")


def library_kernel(graph, node, index: int) -> Kernel:
    """A matrix product runs as a vendor-library kernel (cuBLAS-like); we plan around it."""
    out = node.shape
    m = out[-2] if len(out) >= 2 else 1
    n = out[-1] if out else 1
    batch = 1
    for s in out[:-2]:
        batch *= s
    grid = batch * ceil(m / 128) * ceil(n / 128)
    values = {o.name: Value(o.name, "global", "global", stage=-1) for o in node.operands}
    values[node.name] = Value(node.name, "global", "independent", stage=0, output=True)
    return Kernel(name=f"library.{index}:{node.name}", kind="library", grid=max(1, grid), block=256,
                  values=values, inputs=[o.name for o in node.operands], outputs=[node.name],
                  shared_bytes=0, registers_per_thread=128, library_op=node.name,
                  notes=["matrix product: vendor library GEMM (cuBLAS-like), 128x128 tiles"])


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
    """Fusion never crosses these: inputs, constants, and compute-intensive ops."""
    return node.op in ("parameter", "constant") or is_compute(node)


def is_work(node) -> bool:
    """Does an unfused framework launch a kernel for this op?"""
    return not is_free(node) and node.op not in ("parameter", "constant")
