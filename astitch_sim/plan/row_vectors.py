"""Vector width and lanes per row of a row (reduction) kernel: a planning decision.

A row stage reads each row along its innermost, contiguous dim.  One 32-bit load per lane per
element spends the issue slots on addresses and keeps too few bytes in flight
(``benchmarks.sass_budget``); so, like a flat kernel (:mod:`~astitch_sim.plan.vector_width`),
a lane reads its row ``vector`` consecutive elements at a time: one 64/128-bit access per tensor the
row reads contiguously, one scalar load for what it reads uniformly (``gamma`` of a layernorm is
contiguous, the row's mean uniform).  The width divides the row's innermost extent (and a split's
columns), so every row starts aligned: a width that would leave a tail would also leave every other
row misaligned, and the plan says so and takes a narrower one, or scalar.

With vectors a row needs fewer lanes.  How many rows share a block stays the strategy's decision
(horizontal packing): a planner that packs rows keeps its block and packs more of them -- unless that
would leave SMs idle (fewer blocks than SMs where more were planned): then it keeps its rows per block and
the block shrinks to their lanes; one that gives
each row its own block (XLA's rule, or AStitch's what-if without horizontal packing) keeps one row per
block, its block shrunk to the row's lanes (at least a warp) -- unless the row has fewer vectors than a
warp has lanes (XLA's <750000,32>: 8 vectors, 24 idle lanes in every block): then a lane per element, scalar,
and the plan says why.  The lanes per row become the smallest power
of two that
covers the row's vectors in at most :data:`MAX_TRIPS` trips per lane, and at least a warp
(:func:`lanes_per_row`): a row of at most ``32 x vector`` elements fits in one warp or part of it (a 32-wide
softmax row is 8 lanes of 4, four rows per warp), a layernorm row of 768 is one warp of 32 lanes x
6 vectors (**warp per row**: its reduction is a shuffle butterfly with no block barrier), longer rows
a few warps.  Each lane's row values stay in its registers between a reduction and the stages that
read them again (a stitched kernel's Local values and kept inputs): the register budget for values
carried across stages becomes the block's register limit (at most :data:`ROW_REGISTERS`) less
:data:`REGISTER_HEADROOM`
(:func:`carried_register_cap`), and ``print(plan)`` says what each value kept.

The decision is made here, once, for every strategy's kernels (``kernel_builder.assemble_kernel``
calls :func:`vectorize_rows` before it places values), and recorded on the
:class:`~astitch_sim.plan.mapping.ThreadMapping` (``vector``, ``threads_per_row``, ``vector_why``).
A stitched kernel gets vectors only when every row stage has the same row mapping (stages share the
thread -> element map that register reuse needs).  A kernel mixing row stages with flat or column stages
keeps the launch its planner chose for all of them: its row stages read in vectors with their planned lanes,
rows per block and grid (:func:`_vectorize_in_launch`).  A task split over blocks whose split is not a whole
number of vectors stays scalar and says why.
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil

from ..ir.flatindex import reshapes
from .vector_width import stages_vector_bytes, stages_width

#: most vector trips per lane along one row (each trip one vector per tensor read contiguously)
MAX_TRIPS = 8
#: registers per thread kept for addresses, loop state and temporaries when a vectored row kernel
#: carries values across stages in registers
REGISTER_HEADROOM = 16
#: most registers per thread a vectored row kernel plans for: what a 1024-thread block allows on every
#: preset (at 64, half an SM's threads stay resident); the issue's hand-written layernorm takes 44
ROW_REGISTERS = 64
WARP = 32


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def lanes_per_row(vectors: int, block: int, splits: int, old: int, one_row_per_block: bool = False) -> int:
    """Lanes per row for ``vectors`` vectors: the smallest power of two covering them in :data:`MAX_TRIPS`
    trips but at least a warp (a warp's access then covers whole 128-byte lines of one row), or the row's
    vectors rounded up to a power of two when fewer (a short row: several rows per warp); at most the
    block.  A task split over blocks keeps its lanes (its blocks and combine are already planned)."""
    if splits > 1:
        return old
    tpr = min(max(_pow2_at_least(ceil(vectors / MAX_TRIPS)), WARP), _pow2_at_least(vectors))
    if one_row_per_block:
        return min(max(tpr, WARP), old)          # the block is the row's lanes: whole warps
    if tpr > block or block % tpr:
        tpr = block
    return tpr


def _scalar(stages, why: str) -> None:
    made = {}
    for s in stages:
        if s.mapping.kind == "rows":
            if id(s.mapping) not in made:
                made[id(s.mapping)] = replace(s.mapping, vector_why=f"scalar: {why}")
            s.mapping = made[id(s.mapping)]


def vectorize_rows(graph, stages, gpu, stored, carried_cap: int | None = 0) -> None:
    """Give a kernel's row stages their vector width, lanes per row and launch shape (in place).

    The width is sized by the tensors a stage accesses in global memory.  A value an earlier stage of the
    same kernel computed is read from the lane's registers when every stage shares the row mapping and the
    lane's elements fit the register budget for carried values -- ``carried_cap`` (None: the default budget
    of a vectored row kernel, :func:`carried_register_cap`; 0: no value crosses a stage in registers, a
    what-if or a hand-placed plan).  Then its dtype does not narrow the vectors: a bf16 layer norm that keeps
    its f32 row in registers reads and writes bf16 eight at a time, as one that recomputes the f32 row from
    its bf16 input does.  Where the lane's elements would not fit, a carried value may go through global
    memory, and the width counts it."""
    rows = [s for s in stages if s.mapping.kind == "rows"]
    if not rows:
        return
    others = sorted({s.mapping.kind for s in stages if s.mapping.kind != "rows"})
    m = rows[0].mapping
    if any(s.mapping != m for s in rows):
        return _scalar(stages, "the kernel's row stages map their rows differently")
    if m.vector > 1:
        return
    if not m.along_innermost:
        return _scalar(stages, f"the row (dims {m.groups[1]}) does not run along the innermost dim")
    if others:
        return _vectorize_in_launch(graph, rows, m, stored, others)
    # read at the very element the lane computed (a domain-shaped value: a slice or a view of another shape may
    # read an element another lane holds, which goes through global memory)
    computed = {n for s in rows for n in s.ops if graph[n].op != "reduce" and reshapes(m.domain, graph[n].shape)}
    width, whys = stages_width(graph, rows, m, stored, ())
    if carried_cap != 0 and len(rows) > 1:
        wider, wider_whys = stages_width(graph, rows, m, stored, computed)
        if wider > width:
            new = _vectored(graph, rows, m, wider, wider_whys, gpu, stored, computed)
            if not isinstance(new, str) and new.elements_per_thread <= _carried_cap(new, gpu, carried_cap):
                for s in rows:
                    s.mapping = new
                return
    new = _vectored(graph, rows, m, width, whys, gpu, stored, ())
    if isinstance(new, str):
        return _scalar(stages, new)
    for s in rows:
        s.mapping = new


def _vectorize_in_launch(graph, rows, m, stored, others) -> None:
    """Row stages of a kernel that also has ``others`` (column or flat) stages: the kernel's launch is one
    grid x block for every stage, planned for all of them, so the row stages keep their lanes, rows per block
    and grid, and only read each row in vectors -- a lane takes ``vector`` consecutive elements per trip
    (layer-norm backward's two row stages beside its dgamma/dbeta column stage: 128 lanes x 192 vectors of 4
    instead of 128 lanes x 768 floats).  A value crosses from a row stage to a column stage through shared or
    global memory, as before (the mappings differ); between the row stages the register budget stays the
    default (:func:`carried_register_cap` widens it for kernels of row stages only)."""
    width, whys = stages_width(graph, rows, m, stored, ())
    widest = width
    while width > 1 and (m.chunk % width or ceil(m.chunk / width) < m.threads_per_row):
        width //= 2            # whole vectors, and one for every planned lane (a narrower width idles none)
    if width < widest and m.chunk % widest == 0:
        whys = whys + [f"{m.chunk // widest} vectors of {widest} would leave some of the row's "
                       f"{m.threads_per_row} planned lanes idle"]
    kept = f"the kernel also has {' and '.join(others)} stages, so its launch stays as planned"
    if width == 1:
        return _scalar(rows, "; ".join(dict.fromkeys(whys + [kept])))
    vectors = ceil(m.chunk / width)
    bits = width * 8 * stages_vector_bytes(graph, rows, stored)
    words = [f"{bits}-bit vectors along the row ({m.chunk} = {vectors} x {width}): {kept}: {m.threads_per_row} "
             f"lanes per row, {ceil(vectors / m.threads_per_row)} trip(s) per lane"] + list(dict.fromkeys(whys))
    new = replace(m, per_thread=width, vector=width, vector_why="; ".join(words))
    for s in rows:
        s.mapping = new


def _carried_cap(m, gpu, carried_cap) -> int:
    """The register budget :func:`carried_register_cap` will give a vectored row kernel of ``m``'s block (at
    least; it never gives less than its default)."""
    return _row_register_limit(gpu, m.block) - REGISTER_HEADROOM if carried_cap is None else carried_cap


def _row_register_limit(gpu, block: int) -> int:
    """Registers per thread a vectored row kernel of ``block`` threads plans for."""
    return min(gpu.max_registers_for_block(block), ROW_REGISTERS)


def _vectored(graph, rows, m, width, whys, gpu, stored, on_chip):
    """The row mapping with ``width``-element vectors (lanes, block, grid and the reason), or why it stays
    scalar (a string)."""
    while width > 1 and m.chunk % width:
        width //= 2
    if width == 1:
        return "; ".join(dict.fromkeys(whys)) or "no width divides the row"
    vectors = ceil(m.chunk / width)
    single = m.rows_per_block == 1
    if single and m.splits == 1 and vectors < WARP:
        return (f"one row per block, as planned: {vectors} vectors of {width} would leave "
                f"{WARP - vectors} of the block's {WARP} lanes idle; a lane per element instead")
    tpr = lanes_per_row(vectors, m.block, m.splits, m.threads_per_row, single)
    block = tpr if single else m.block
    rpb = block // tpr
    need = ceil(m.rows / rpb) * m.splits
    if not single and need < min(m.grid, gpu.sms) and tpr <= m.threads_per_row:
        # packing the narrower rows into the planned block would leave SMs idle (layernorm 512x768 on V100:
        # 16 blocks of 32 rows where 128 blocks of 4 were planned): keep the planned rows per block instead,
        # the block shrunk to their lanes -- the strategy's parallelism, and its bytes, stay as planned
        rpb = max(1, m.rows_per_block)
        block = min(m.block, max(WARP, tpr * rpb))
        rpb = block // tpr
        need = ceil(m.rows / rpb) * m.splits
    grid = min(need, m.grid)                     # a capped grid (vertical packing) stays capped
    trips = ceil(vectors / tpr)
    shape = ("a warp per row" if tpr == WARP else f"{tpr // WARP} warps per row" if tpr > WARP else
             f"{tpr} lanes per row, {WARP // tpr} rows per warp")
    if single:
        shape += " (one row per block, as planned)"
    bits = width * 8 * stages_vector_bytes(graph, rows, stored, on_chip)
    words = [f"{bits}-bit vectors along the row ({m.chunk} = {vectors} x {width}): {shape}, {trips} trip(s) per lane"]
    if on_chip:
        words.append("values carried in registers from an earlier stage do not narrow them")
    words += list(dict.fromkeys(whys))
    return replace(m, block=block, threads_per_row=tpr, grid=grid, per_thread=width, vector=width,
                   vector_why="; ".join(words))


def carried_register_cap(stages, gpu, default: int) -> tuple:
    """``(cap, note)``: registers per thread that may carry values across stages.  A kernel whose row
    stages read in vectors keeps a lane's share of its rows in registers: the block's register limit (at
    most :data:`ROW_REGISTERS`) less :data:`REGISTER_HEADROOM`, if more than ``default``."""
    rows = [s for s in stages if s.mapping.kind == "rows" and s.mapping.vector > 1]
    if len(stages) < 2 or not rows or len(rows) < len(stages):      # kernels of row stages only
        return default, ""
    block = rows[0].mapping.block
    limit = _row_register_limit(gpu, block)
    cap = limit - REGISTER_HEADROOM
    if cap <= default:
        return default, ""
    return cap, (f"register reuse: the row stages read in vectors and keep each lane's share of a row in registers "
                 f"across stages: {cap} registers per thread may carry values (of the {limit} a row kernel of "
                 f"{block}-thread blocks plans for, {REGISTER_HEADROOM} kept for addresses and temporaries)")
