"""Inductor's thresholds and heuristics, one small function each, with where PyTorch states them.

Read in PyTorch's repository (``pytorch/pytorch``, ``torch/_inductor/``), in the versions the project's
search index holds; every function here is written in our own words from the rule it names, not copied:

* ``choices.py`` at 0012d881f374c673bf6f5a24f4634ca77ed15fa3: ``InductorChoices.should_use_persistent_reduction``,
  ``InductorChoices.reduction_split_factor``, ``InductorChoices.can_fuse`` (shared data, ``max_fusion_size``),
  ``InductorChoices.score_fusion``;
* ``codegen/simd.py`` at 000beb37238240999057a2fe5f638c83e73a9c68: ``SIMDScheduling.can_fuse``;
* ``codegen/simd_kernel_features.py`` (c22f1f2527f5456bbb57f7a3eea6d5d2c17b4257):
  ``SIMDKernelFeatures.reduction_hint`` (contiguous reads -> INNER);
* ``ir.py`` (``Reduction.num_splits``, ``Reduction.create`` -> ``create_multilayer``): when a reduction is
  split into two kernels, and which hint it gets -- a recent version whose commit the index did not name
  (the early outs read there, ``rnumel <= 32`` or ``numel >= num_sm * 2 * 32``, are the same in every
  version it holds);
* ``runtime/triton_heuristics.py``: ``triton_config_reduction`` (warps = tile // 128, from 2 to 8, in the
  versions read), ``reduction`` and ``persistent_reduction`` (the configs each hint gets);
* ``config.py``: the switches and thresholds named in :data:`CONFIG`.

These are Inductor's *defaults* (``torch.compile()`` with no options).  Autotuning, which picks among the
few configs the heuristic lists by timing them on the GPU, times them with the SIMT model's formula here.
"""
from __future__ import annotations

from enum import Enum
from math import ceil

from ...plan import notes
from ...passes.analysis import classify_reduce
from ...ir.reducers import reducer

#: every plan-level note of the inductor strategy starts with this (``print(plan)`` shows them)
NOTE_PREFIX = notes.INDUCTOR

#: Inductor's config defaults this model reads (``torch/_inductor/config.py``)
CONFIG = {
    "triton.persistent_reductions": True,   # keep a short row in registers ("use alternate codegen for smaller reductions")
    "split_reductions": True,               # split a reduction with few outputs into two kernels
    "max_fusion_size": 64,                  # at most this many scheduler nodes in one fused kernel
    "realize_reads_threshold": 4,           # a pointwise value read by more consumers than this is stored, not inlined
    "combo_kernels": False,                 # horizontal packing of independent kernels: off by default, not modelled
    "triton.cooperative_reductions": False, # cross-program reductions with a grid barrier: off by default
    "triton.multi_kernel": 0,               # persistent and looped variants benchmarked at run time: off
    "triton.mix_order_reduction": None,     # row+column reduction fusion (newer Inductor): not modelled
}

#: ``should_use_persistent_reduction``: the largest reduction a persistent kernel takes, per hint
PERSISTENT_THRESHOLD = {"INNER": 1024}
PERSISTENT_THRESHOLD_OTHER = 64
#: ``reduction_split_factor``: constants of the split heuristic
MIN_ELEMENTS_PER_THREAD = 32          # = the warp size
MAX_ELEMENTS_PER_THREAD = 512
SPLIT_WARPS = 8
INNER_NO_SPLIT_BELOW = 8192           # an inner reduction of at most this many elements is never split
OUTER_RVALS_PER_THREAD = 4
OUTER_XVALS_PER_BLOCK = 128
#: ``triton_config_reduction``: warps = elements of the tile / 128, a power of two from 2 to 8
ELEMENTS_PER_WARP = 128
MIN_WARPS, MAX_WARPS = 2, 8
#: ``persistent_reduction``: rows per program it offers (XBLOCK), and the tile it may not exceed
PERSISTENT_XBLOCKS = (1, 8, 32, 128)
PERSISTENT_TILE_CAP = 4096
#: ``reduction``: the looped configs -- INNER: 1 row x 2048 (or the row, from 256 to 2048); OUTER: 64 x 8
LOOPED_INNER_RBLOCK = 2048
LOOPED_OUTER_TILE = (64, 8)


class Hint(str, Enum):
    """``ir.ReductionHint`` (the values the model uses)."""
    INNER = "INNER"          # the reduced elements of one output are contiguous (a row reduction)
    OUTER = "OUTER"          # they are strided: neighbouring outputs are neighbours in memory (a column reduction)
    DEFAULT = "DEFAULT"


def next_pow2(n: int) -> int:
    return 1 << (max(1, int(n)) - 1).bit_length()


def reduction_hint(node) -> Hint:
    """``SIMDKernelFeatures.reduction_hint``: a reduction whose reads are contiguous is INNER; ``num_splits``
    calls one whose reads are strided along the reduced dims OUTER.  Our layouts say which: a row
    reduction (reduced dims minor-most) reads contiguously."""
    return Hint.INNER if classify_reduce(node).kind == "row" else Hint.OUTER


def persistent_threshold(hint: Hint) -> int:
    """``InductorChoices.should_use_persistent_reduction``: 1024 for INNER, 64 otherwise (no multi_kernel,
    no cooperative reduction)."""
    return PERSISTENT_THRESHOLD.get(hint.value, PERSISTENT_THRESHOLD_OTHER)


def is_persistent(rnumel: int, hint: Hint) -> bool:
    """A persistent reduction: the whole reduced extent is one tile (RBLOCK = rnumel rounded up), so
    the values a program loaded stay in its registers for every later use in the kernel."""
    return bool(CONFIG["triton.persistent_reductions"]) and rnumel <= persistent_threshold(hint)


def num_warps(tile: int) -> int:
    """``triton_config_reduction``: ``next_power_of_2(min(max(tile // 128, 2), 8))``."""
    return next_pow2(min(max(tile // ELEMENTS_PER_WARP, MIN_WARPS), MAX_WARPS))


def persistent_configs(rnumel: int, xnumel: int, hint: Hint) -> list:
    """``persistent_reduction``'s configs for the hint: ``[(XBLOCK, RBLOCK), ...]``.

    RBLOCK is the row rounded up to a power of two.  XBLOCK values are offered when XBLOCK * RBLOCK <= 4096
    and XBLOCK <= xnumel (1 always); INNER with RBLOCK >= 256 keeps only the first (XBLOCK 1), OUTER only
    the last.  Autotuning picks among them (``inductor._build``).  The newest versions in the index give an
    INNER row of 256 to 1024 elements with many rows (``xnumel // 8 >= 128``) one-warp programs of
    ``min(1024 // rnumel, 8)`` rows instead (``_persistent_reduction_configs``); that variant is not modelled."""
    rblock = next_pow2(rnumel)
    offered = [x for x in PERSISTENT_XBLOCKS if x == 1 or (rblock * x <= PERSISTENT_TILE_CAP and x <= xnumel)]
    if hint is Hint.INNER and rblock >= 256:
        offered = offered[:1]
    elif hint is Hint.OUTER:
        offered = offered[-1:]
    return [(x, rblock) for x in offered]


def looped_config(rnumel: int, hint: Hint) -> tuple[int, int]:
    """``reduction``'s config for the hint: INNER one row x RBLOCK (the row from 256 to 2048, else 2048),
    OUTER 64 columns x 8 rows."""
    if hint is Hint.INNER:
        return 1, next_pow2(rnumel) if 256 <= rnumel < LOOPED_INNER_RBLOCK else LOOPED_INNER_RBLOCK
    return LOOPED_OUTER_TILE


def split_factor(gpu, rnumel: int, numel: int, hint: Hint) -> int:
    """``InductorChoices.reduction_split_factor`` (with the early outs of ``Reduction.num_splits``): how many
    pieces a reduction with few outputs is split into (1: not split).

    ``num_splits`` splits nothing over at most 32 elements or with at least ``num_sm * 2 * 32`` outputs (one
    output: always considered).  An inner reduction is split only with fewer than ``2 * num_sm`` outputs
    and more than 8192 elements each.  The split size aims at 32 elements per thread when the whole
    reduction is small, 512 when big, and in between at enough programs for the GPU (``threads_per_sm``
    2048 per SM, 8 warps per program); Inductor then prefers a nearby divisor (ours: :func:`even_split`)."""
    if not CONFIG["split_reductions"]:
        return 1
    if numel != 1 and (rnumel <= MIN_ELEMENTS_PER_THREAD or numel >= gpu.sms * 2 * 32):
        return 1
    threads = gpu.warp_size * SPLIT_WARPS
    per_sm = gpu.max_threads_per_sm
    lo, hi = MIN_ELEMENTS_PER_THREAD * gpu.sms * per_sm, MAX_ELEMENTS_PER_THREAD * gpu.sms * per_sm
    total = rnumel * numel
    if hint is Hint.INNER:
        if numel >= 2 * gpu.sms or rnumel <= INNER_NO_SPLIT_BELOW:
            return 1
        if total <= lo:
            size = MIN_ELEMENTS_PER_THREAD
        elif total < hi:
            blocks_per_output = ceil(gpu.sms * per_sm // (2 * threads) / numel)
            size = max(ceil(rnumel / (threads * blocks_per_output)), 1)
        else:
            size = MAX_ELEMENTS_PER_THREAD
        return ceil(rnumel / (size * threads))
    xblocks = ceil(numel / OUTER_XVALS_PER_BLOCK)
    if total < lo:
        size = MIN_ELEMENTS_PER_THREAD
    elif total < hi:
        target = ceil((gpu.sms * per_sm // threads) / xblocks)
        size = max(ceil(rnumel / (OUTER_RVALS_PER_THREAD * target)), 1)
    else:
        size = MAX_ELEMENTS_PER_THREAD
    return ceil(rnumel / (OUTER_RVALS_PER_THREAD * size))


def even_split(rnumel: int, want: int) -> int:
    """The divisor of ``rnumel`` nearest ``want`` (at least 2), or 1 when ``rnumel`` has none.

    Inductor splits into exactly ``want`` pieces and masks the ragged last one; our split is a reshape of
    the graph, which needs equal pieces.  Inductor's split-size rounding also prefers divisors."""
    if want <= 1:
        return 1
    best = 1
    d = 2
    while d * d <= rnumel:
        for c in (d, rnumel // d):
            if rnumel % c == 0 and c < rnumel and (best == 1 or abs(c - want) < abs(best - want)):
                best = c
        d += 1
    return best


def splittable(node) -> bool:
    """``num_splits``: argmax/argmin are never split (``should_split``); nor are reducers without a
    one-value combine."""
    return node.op == "reduce" and reducer(node).splittable
