"""Vector width of a column (``columns``) stage: a planning decision.

A column reduction reads each reduced row across the columns its warp holds: 32 column lanes, one
32-bit load each, one 128-byte line per warp access.  That is coalesced, but each thread keeps one
4-byte load in flight, where HBM needs many more bytes in flight per SM, and it spends an address
computation on every element (``benchmarks.sass_budget``).  So, as a row stage does
(:mod:`~astitch_sim.plan.row_vectors`), a column lane takes ``vector`` *adjacent columns*: per reduced
row one 64/128-bit access per tensor the stage reads along the columns (a value indexed by the row
alone, a layer norm's ``rstd[row]`` in its ``dgamma``, stays one scalar load for the vector), and one
accumulator per column -- a lane holds ``vector`` tasks at once.

**The tile grows, the lanes stay.**  A tile was ``threads_per_row`` columns; it becomes
``threads_per_row x vector`` (a warp's access: 32 vectors, 512 bytes of f32, four whole lines).  The
lanes stay as planned (32 column lanes, so a warp never spans two reduced rows), so there are
``vector`` times fewer tiles.  To keep the planned blocks busy, a split reduced dim is split up to
``vector`` times finer (each block's chunk shorter: a thread folds as many elements as before, ``vector``
at a time), but not so fine that a lane makes fewer trips down its columns than it loads at once
(:func:`finer_split`).  An unsplit plan has ``vector`` times fewer busy threads, each with ``vector`` times
the loads in flight; it takes vectors where every SM that had a block of the stage still has one.

The price is paid once per lane and column: a lane's ``vector`` partials each go through the block's
tree (one scratch slot per column, behind the same barriers) and, split, each through its own atomic.
Where a lane folds many rows (a 16384-row column sum: 64 trips) that is nothing against the loads saved;
where it folds few (batch norm's 65536 rows over 256 splits of 32 row lanes: 8 trips) the tree is most of
the kernel's instructions either way (``benchmarks/results/sass_budget_columns.md``).

**Why ``vector`` times finer, and not the split the static estimate prefers.**  Pricing every factor (1, 2,
``vector``) of every catalog plan with a column stage by :func:`astitch_sim.estimate` (H100, A100, V100; 2026-11-29)
separates them by at most 3.3% (batch norm's xla plan on A100, where factor 1 is the slowest), 2% or less elsewhere:
column_reduce 16384x3072 72.05 / 71.95 / 71.91 us on H100 (factor 4, 2, 1), layer-norm backward's
stitched kernel 131.05 / 129.45 / 128.65 us, on V100 462.21 / 460.70 / 459.68 us.  That is less than the static
estimate's own distance from the SIMT model, which prices the same kernels with their caches and disagrees by GPU:
layer-norm backward on H100 78.96 / 76.28 / 74.94 us (the estimate's order), on V100 262.33 / 336.19 / 334.17 us
(the other order: there a coarser split moves the launch search to 128-thread blocks).  A rule chosen by the
estimate would choose by its noise; the finer split keeps the planned blocks busy, which is the reason it exists, and
a GPU window is what can tell the factors apart (``benchmarks/results/sass_budget_columns.md``: the atomics).

**Loads in flight.**  A lane loads :data:`ROWS_IN_FLIGHT` reduced rows' vectors per loop round before it
folds any of them (``load_trips``, as a row lane loads its trips: ``plan/loads_in_flight.py``;
``gpu_backend.apply_compiler`` loads fewer where the registers run out), and folds them in the rows'
order, as the SIMT model does (``simt/reduce.py``: a lane's trips down one column).

**When.**  Every column stage of the kernel has the same mapping (one-stage column kernels of every
strategy; a stitched batch norm's three stages, whose values cross stages in registers at the same
iteration; layer-norm backward's dgamma/dbeta stage beside its row stages).  A kernel of several stages
keeps its grid (its stages share the launch; a row or flat stage's values reach a column stage through
shared or global memory, as before).  The columns must end in the innermost dim (the
vector runs along it); the width is sized as every vector is (:func:`~astitch_sim.plan.vector_width.
choose_width`: 128 bits at most, dividing the innermost extent), then narrowed until the wider tiles idle
no more column lanes than the scalar ones did (64 columns: vectors of 2 fill one tile of 32 lanes, vectors
of 4 would idle half of it) and the split can grow.

The decision is made here, once, for every strategy's kernels (``kernel_builder.assemble_kernel`` calls
:func:`vectorize_columns` before it places values), and recorded on the
:class:`~astitch_sim.plan.mapping.ThreadMapping` (``vector``, ``per_thread``, the grown ``splits``,
``vector_why``); the code generator (``codegen/task_loops.write_column_vectors``) and the SIMT model
(``ThreadMapping.locate``: column ``j`` of a lane's vector at iteration ``trip * vector + j``) follow it.
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil

from .reduce_scheme import reduced_values
from .vector_width import stages_vector_bytes, stages_width

#: shared memory per block left for a kernel's Regional values beside its widened reduction scratch
REGIONAL_ROOM = 8 * 1024
#: most reduced rows a column lane loads per loop round (their vectors' loads before any is used: 4 rows of
#: 4-element f32 vectors keep 2 KiB per warp in flight, as a flat kernel's 4 vectors per thread do)
ROWS_IN_FLIGHT = 4


def _scalar(stages, why: str) -> None:
    """The column stages keep scalar lanes; their (shared) mapping says why."""
    made = {}
    for s in stages:
        if id(s.mapping) not in made:
            made[id(s.mapping)] = replace(s.mapping, vector_why=f"scalar: {why}")
        s.mapping = made[id(s.mapping)]


def with_vectors(m, width: int, gpu, keep_grid: bool, reduced: int = 1):
    """``m`` with ``width`` adjacent columns per lane (its tiles, split and grid to match), or why not (a
    string).  ``keep_grid``: the kernel's grid is shared with other stages (a stitched kernel), so it stays.
    ``reduced``: the values a task's threads combine (one tree scratch slot of 8 bytes per thread each, and
    a lane now combines ``width`` tasks' worth at once)."""
    tpr, rpb = m.threads_per_row, m.rows_per_block
    scratch = reduced * width * m.block * 8 if rpb > 1 else 0
    if scratch > gpu.shared_per_block_default - REGIONAL_ROOM:
        return (f"the tree's scratch for {width} columns per lane would take {scratch // 1024} KiB of the block's "
                f"{gpu.shared_per_block_default // 1024} KiB of shared memory")
    tiles = ceil(m.rows / (tpr * width))
    if tiles * tpr * width > m.tiles * tpr:
        return f"tiles of {tpr * width} columns would idle more lanes over {m.rows} columns than tiles of {tpr}"
    splits = m.splits * finer_split(m, width) if m.splits > 1 else 1
    grid = m.grid if keep_grid else min(m.grid, tiles * splits)
    new = replace(m, grid=grid, splits=splits, per_thread=width, vector=width)
    new = replace(new, load_trips=min(ROWS_IN_FLIGHT, new.trips))
    if new.busy_blocks < min(m.busy_blocks, gpu.sms):
        return (f"{tiles} tile(s) of {tpr * width} columns would keep {new.busy_blocks} blocks busy where "
                f"{m.busy_blocks} were planned")
    return new


def finer_split(m, width: int) -> int:
    """How many times finer a split plan ``m`` splits its reduced dim with ``width`` columns per lane: ``width``
    (as many busy blocks as planned), or less where the grid is not a multiple of the finer split, a block's
    chunk would leave row lanes without a row, or a lane would make fewer trips down its columns than
    :data:`ROWS_IN_FLIGHT` (and than planned): the tree, the atomics and the epilogue are paid per lane and
    column, so each lane keeps enough rows to spread them over (Figure 7's 256 x 128 column sum: 4 trips
    per lane, which a 4 times finer split would cut to 1)."""
    f = width
    while f > 1:
        splits = m.splits * f
        chunk = ceil(m.cols / splits)
        if m.grid % splits == 0 and chunk >= m.rows_per_block and \
                ceil(chunk / m.rows_per_block) >= min(m.trips, ROWS_IN_FLIGHT):
            break
        f //= 2
    return f


def vectorize_columns(graph, stages, gpu, stored) -> None:
    """Give a kernel's column stages their vector width, and the tiles and split that go with it (in place),
    or record why they stay scalar (module docstring).  ``stored``: the tensors the kernel writes."""
    cols = [s for s in stages if s.mapping.kind == "columns"]
    if not cols or cols[0].mapping.vector > 1:
        return
    m = cols[0].mapping
    if any(s.mapping != m for s in cols):
        return _scalar(cols, "the kernel's column stages map their columns differently")
    if not m.along_innermost:
        return _scalar(cols, f"the columns (dims {m.groups[2]}) do not end in the innermost dim")
    width, whys = stages_width(graph, cols, m, stored, ())
    reduced = max(reduced_values(graph, s) for s in cols)
    refused = []
    while width > 1:
        new = with_vectors(m, width, gpu, keep_grid=len(stages) > 1, reduced=reduced)
        if not isinstance(new, str):
            break
        refused.append(f"vectors of {width}: {new}")
        width //= 2
    if width <= 1:
        return _scalar(cols, "; ".join(dict.fromkeys(refused + whys)) or "no width divides the columns")
    bits = width * 8 * stages_vector_bytes(graph, cols, stored)
    words = [f"{bits}-bit vectors across {width} adjacent columns per lane"
             + (f", the reduced dim split {new.splits} ways instead of {m.splits}"
                if new.splits != m.splits else "")] + refused + list(dict.fromkeys(whys))
    new = replace(new, vector_why="; ".join(words))
    for s in cols:
        s.mapping = new
