"""How the threads of a reduction task combine their partials: warp shuffles, or the paper's shared-memory tree.

After its loop over the task's elements every thread of a task (a row, or a column of a
column reduction) holds a partial; the partials then meet inside the block.  Two schemes,
recorded per stage as ``Stage.reduce_scheme`` (``print(plan)`` shows it, with the why):

``shuffle``  (the default) the partials meet in registers.  Inside each warp an xor butterfly
             of ``shfl_xor`` steps over the task's lanes: lane ``j`` folds lane ``j ^ h``'s
             partial for ``h = L/2, ..., 1``, so every lane ends with the total of its ``L``
             lanes.  A row of at most 32 lanes (a power of two, so rows never straddle a warp)
             reduces with no barrier and no shared memory at all.  A row of ``W`` whole warps:
             each warp's butterfly, the ``W`` warp totals to shared memory (one word per warp,
             consecutive words: no bank conflict), **one** block barrier, then in every warp of
             the row each aligned group of ``P`` lanes (``W`` rounded up to a power of two) reads
             the ``W`` totals into its lanes ``0..W-1`` (the identity in the others) and runs a
             butterfly over ``P`` lanes: every lane of the row ends with the total, as in one warp
             (``task_registers.py`` keeps the task's values in those registers).
``tree``     the paper's shared-memory tree: every partial to shared memory (one word per thread: the
             kernel's widest partial, 4 bytes for f32 sums, consecutive words, no bank conflict),
             then the upper half folds into the lower half (the half rounded up, so any lane
             count works) with a block barrier per fold: ``ceil(log2 L) + 1`` barriers per task.
             Kept as a what-if switch (``asim.compile(..., reduce_scheme="tree")``, any strategy).
``none``     no reduce in the stage, or one thread per task: the thread's partial is the total.

The choice is made here, by :func:`choose`, for every strategy alike (``assemble_kernel`` calls
it for each stage it builds, before it places the values, with the preference ``compile`` sets for
the whole planning run: ``planning/reduce_preference.py``), so no strategy gets better reductions
than another.  ``shuffle`` needs lanes that the butterfly can
reach: a ``rows`` mapping whose block is a whole number of warps and whose row is a power of two
of at most 32 lanes or a whole number of warps.  Elsewhere (a ``columns`` mapping, whose lanes lie
``threads_per_row`` threads apart; 24 or 768/7 lanes) the stage keeps the tree, and says why.

**Same values.**  For a power-of-two lane count the butterfly's lane 0 folds exactly the pairs
the tree folds (lane ``j`` with lane ``j + h``, ``h`` halving, own partial first), so a row of at
most 32 lanes gives bit-identical results under both schemes.  Past one warp the order differs
(warp by warp, then across warps), and a float sum may differ in its last bits; the SIMT model
(``simt/reduce.py``) folds in each scheme's own order, so it matches the generated code.

**Scratch.**  The kernel's reduction scratch (``Kernel.scratch_offset``, ``scratch_bytes``)
holds the tree area (``slots x block x 8`` bytes, for the kernel's tree stages) and after it the
warp area of the shuffle stages whose rows span warps: per reduced value two buffers of
``warps x 8`` bytes.  A value's warp totals are consecutive ``itemsize`` words (conflict-free reads).  The two
buffers alternate from one cross-warp round to the next (:func:`warp_round`), so the single
barrier suffices: round ``n + 2`` rewrites round ``n``'s buffer only after every thread passed
round ``n + 1``'s barrier, hence after it finished reading round ``n``.
"""
from __future__ import annotations

from ..ir.reducers import reduce_inputs
from .vocabulary import ReduceScheme

WARP = 32

#: why a stage with a cross-thread reduction cannot shuffle, checked in order: (test, words)
BLOCKERS = (
    (lambda m, lanes: m.kind != "rows",
     "a column reduction's lanes lie threads_per_row threads apart, in different warps"),
    (lambda m, lanes: m.block % WARP,
     "the block ({block} threads) is not a whole number of warps"),
    (lambda m, lanes: not ((lanes <= WARP and lanes & (lanes - 1) == 0) or lanes % WARP == 0),
     "{lanes} lanes per row are neither a power of two within a warp nor whole warps"),
)


def lanes_of(mapping) -> int:
    """Threads that share one task in a block: a row's lanes, a column's row lanes, 1 for ``flat``."""
    if mapping.kind == "rows":
        return mapping.threads_per_row
    if mapping.kind == "columns":
        return mapping.rows_per_block
    return 1


def shuffle_blocked(mapping) -> str:
    """Why the butterfly cannot reach a task's lanes under ``mapping`` ("" when it can)."""
    lanes = lanes_of(mapping)
    for test, words in BLOCKERS:
        if test(mapping, lanes):
            return words.format(block=mapping.block, lanes=lanes)
    return ""


def choose(stage, prefer=ReduceScheme.SHUFFLE) -> tuple:
    """``(scheme, why)`` for ``stage``: ``prefer`` where it applies, the tree where a shuffle cannot."""
    prefer = ReduceScheme.parse(prefer, "reduce_scheme")
    m = stage.mapping
    lanes = lanes_of(m)
    if not stage.reduces:
        return ReduceScheme.NONE, ""
    if lanes <= 1:
        return ReduceScheme.NONE, "one thread per task: its partial is the task's total"
    if prefer is ReduceScheme.TREE:
        return ReduceScheme.TREE, (f"what-if reduce_scheme='tree': the paper's shared-memory tree over {lanes} lanes, "
                                   f"{tree_barriers(lanes)} block barriers per task")
    blocked = shuffle_blocked(m)
    if blocked:
        return ReduceScheme.TREE, f"shared-memory tree: {blocked}"
    if lanes <= WARP:
        return ReduceScheme.SHUFFLE, (f"a row's {lanes} lanes lie in one warp: {len(butterfly(lanes))} shfl_xor "
                                      "steps, no barrier, no shared memory")
    w = lanes // WARP
    return ReduceScheme.SHUFFLE, (f"{len(butterfly(WARP))} shfl_xor steps in each of the row's {w} warps, the warp "
                                  f"totals through shared memory (one block barrier), then {len(butterfly(w))} more")


def reduced_values(graph, stage) -> int:
    """Values a task's threads combine per task in ``stage``: one per reduce, two for an argmax/argmin pair."""
    return sum(len(reduce_inputs(graph[n])) for n in stage.ops if graph[n].op == "reduce")


def butterfly(lanes: int) -> tuple:
    """The xor offsets of a butterfly over ``lanes`` lanes rounded up to a power of two: ``(P/2, ..., 1)``."""
    p = 1
    while p < lanes:
        p *= 2
    out = []
    while p > 1:
        p //= 2
        out.append(p)
    return tuple(out)


def tree_barriers(lanes: int) -> int:
    """Block barriers of the tree over ``lanes`` partials: one after the partials are stored, one per fold."""
    steps = 0
    while lanes > 1:
        lanes, steps = (lanes + 1) // 2, steps + 1
    return steps + 1


def warps_across(stage) -> int:
    """Warps a task spans under the shuffle scheme (0: the task fits one warp, or the stage does not shuffle)."""
    lanes = lanes_of(stage.mapping)
    return lanes // WARP if stage.reduce_scheme is ReduceScheme.SHUFFLE and lanes > WARP else 0


def scratch_areas(stages, slots_of) -> tuple:
    """``(tree bytes, warp-area bytes, warp-area slots)`` of a kernel's reduction scratch (module docstring);
    ``slots_of(stage)`` is a stage's reduced values (``Stage.scratch_slots`` once recorded)."""
    tree = max((slots_of(s) * s.mapping.block * 8 for s in stages if s.reduce_scheme is ReduceScheme.TREE),
               default=0)
    slots = max((slots_of(s) for s in stages if warps_across(s)), default=0)
    warps = max((s.mapping.block // WARP for s in stages if warps_across(s)), default=0)
    return tree, 2 * slots * warps * 8, slots


def tree_word_bytes(graph, stages) -> int:
    """Bytes per thread of each slot of the tree area, as the code lays it out: 8 where a tree reduction of
    the kernel folds an 8-byte value (f64, s64, u64), else 4.  Every tree slot uses the same word, so a later
    stage that folds another type never writes bytes a lagging thread still reads; a 4-byte partial
    (an f32 sum) at a 4-byte stride keeps a warp's accesses on 32 banks, and only an 8-byte word costs a
    second wavefront per access (the SIMT model's bank conflicts of the tree)."""
    from ..ir.dtypes import itemsize
    wide = any(itemsize(x.dtype) > 4 for s in stages if s.reduce_scheme is ReduceScheme.TREE
               for r in s.reduces for x in reduce_inputs(graph[r]))
    return 8 if wide else 4


def warp_slot_offset(kernel, slot: int) -> int:
    """Byte offset in shared memory of reduced value ``slot``'s warp totals: its two buffers of
    ``warps x 8`` bytes each follow one another (buffer 1 at ``+ warps x 8``)."""
    tree, _, _ = scratch_areas(kernel.stages, lambda s: s.scratch_slots)
    return kernel.scratch_offset + tree + slot * 2 * (kernel.block // WARP) * 8


def warp_round(stages, i: int) -> int:
    """Cross-warp rounds (task trips of shuffle stages whose rows span warps) before stage ``i``'s first."""
    return sum(s.mapping.task_iterations for s in stages[:i] if warps_across(s))
