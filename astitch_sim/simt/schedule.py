"""Wave scheduling: which SM runs which block, and when (the SM x time timeline).

How a GPU runs a grid
---------------------
An SM keeps a few blocks *resident* at once -- as many as its threads,
registers and shared memory allow (:meth:`astitch_sim.hardware.gpus.GPU.occupancy`)
-- and the block scheduler hands it a new block whenever a resident one exits.
So a grid bigger than ``blocks_per_wave = blocks_per_sm * SMs`` runs in
*waves*, and a grid of 161 blocks of 1024 threads on a V100 (160 per wave) needs
a second wave for one block: the *tail effect*.

:func:`dispatch` does exactly that with an event queue: a heap of SM slots keyed
by the time they free up; ties go slot 0 of every SM first, then slot 1
(round-robin over SMs, as the hardware spreads a grid).  Every block of a kernel
does the same work in the plans here, so :func:`build_timeline` uses
:func:`dispatch_uniform` instead -- the closed form of the same queue: block
``b`` runs in wave ``b // per_wave``, on SM ``(b % per_wave) % SMs``.  The two
agree exactly (a test checks), and the closed form keeps a grid of 750000
blocks instant.

Grid barriers
-------------
A grid barrier (AStitch's Global stitching) makes every block wait until all
blocks of the grid have arrived, so the blocks' stages are *aligned*: stage
``s+1`` starts for everyone when the slowest block has finished stage ``s`` and
the barrier has completed (``grid_barrier_us``).  That is only possible when all
blocks are resident at once -- :func:`check_grid_barrier` refuses the rest with
the reason (a deadlock) and the fix (vertical packing).

Idle blocks
-----------
A stage whose work falls on a few blocks of its kernel (:func:`cost.imbalance_terms`) keeps those
blocks running after the others have finished: the kernel's span ends ``KernelSpan.imbalance_us``
after its blocks' uniform work, and the SMs show idle (``.``) meanwhile, as the prediction charges.

What a Timeline keeps
---------------------
Kernels run back to back; before each, a gap for its launch (and the memset of
atomic result buffers).  Each kernel's span is exact.  Block entries (with their
stage spans) are kept for the first :data:`HEAD_WAVES` waves and the last wave
only; for a kernel with more waves ``KernelSpan.truncated`` is set and the
omitted middle waves are known to be full (all slots busy), which is how
:meth:`Timeline.utilisation` and :meth:`Timeline.render_ascii` account for them.
The entries are made when first asked for (``Timeline.entries``): a simulation's prediction needs only
the kernels' spans, and a 15-kernel plan's thousands of entry objects took longer to make than its
counting (the timeline view, the ASCII chart and the tests ask for them; most simulations never do).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from math import ceil
from typing import Optional

import numpy as np

from ..errors import AStitchError
from . import cost
from .grid_barrier import barrier_counts, check_grid_barrier

#: stage index of a grid-barrier wait in ``BlockEntry.stages``
BARRIER = -1
#: waves of block entries kept at the head of a kernel (plus its last wave)
HEAD_WAVES = 2
_SYMBOLS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class BlockEntry:
    """One block's residency: where and when it ran, and its stage spans ``(stage, start, end)``."""
    kernel: int
    sm: int
    block: int
    start_us: float
    end_us: float
    stages: list = field(default_factory=list)


@dataclass
class KernelSpan:
    kernel: int
    name: str
    start_us: float
    end_us: float
    launch_gap_us: float            # idle time before the kernel: launch (+ memset)
    grid: int
    block: int
    blocks_per_sm: int
    blocks_per_wave: int
    waves: int
    block_us: float                 # a block's time, barrier waits included (uniform blocks)
    busy_us: float                  # block-time spent working, summed over all blocks
    grid_barriers: int = 0
    truncated: bool = False         # middle waves' entries were not stored
    imbalance_us: float = 0.0       # the kernel's end waits this long past its blocks' uniform work: a stage
                                    # whose work falls on a few blocks (cost.imbalance_terms); SMs idle meanwhile

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(eq=False)
class _UniformBlocks:
    """Kernel ``kernel``'s kept blocks, all taking ``stage_us``: their entries, made on demand.  Each block's stage
    bounds are its start plus the stage times added one at a time, on an array of every block's start -- the
    additions :func:`_stage_spans` makes for one block, in the same order, so the floats are the same bit for bit."""
    kernel: int
    sm: np.ndarray
    blocks: np.ndarray
    start: np.ndarray
    end: np.ndarray
    stage_us: np.ndarray

    def entries(self) -> list:
        bounds = [np.asarray(self.start, dtype=float)]
        for d in self.stage_us:
            bounds.append(bounds[-1] + d)
        rows = np.stack(bounds, axis=1).tolist()
        stages = range(len(self.stage_us))
        return [BlockEntry(self.kernel, m, b, t0, t1, list(zip(stages, r, r[1:])))
                for m, b, t0, t1, r in zip(self.sm.tolist(), self.blocks.tolist(), self.start.tolist(),
                                           self.end.tolist(), rows)]


@dataclass(eq=False)
class _AlignedBlocks:
    """Kernel ``kernel``'s blocks behind grid barriers (:func:`align_stages`), made on demand."""
    kernel: int
    sms: int
    stage_us: np.ndarray            # [block, stage]
    barriers: list
    barrier_us: float
    start: float

    def entries(self) -> list:
        spans, ends = align_stages(self.stage_us, self.barriers, self.barrier_us, self.start)
        return [BlockEntry(self.kernel, b % self.sms, b, self.start, float(ends[b]), spans[b])
                for b in range(len(spans))]


@dataclass(eq=False)
class Timeline:
    gpu: str
    sms: int
    kernels: list = field(default_factory=list)      # KernelSpan
    #: per kernel (in order), its BlockEntry list or the maker of it (``_UniformBlocks``, ``_AlignedBlocks``)
    parts: list = field(default_factory=list, repr=False)
    _entries: Optional[list] = field(default=None, repr=False)

    @property
    def entries(self) -> list:
        """Every kept block's :class:`BlockEntry`, kernel by kernel (made at the first call, then kept: a change
        to the list stays)."""
        if self._entries is None:
            self._entries = [e for p in self.parts for e in (p if isinstance(p, list) else p.entries())]
        return self._entries

    @entries.setter
    def entries(self, entries: list) -> None:
        self._entries = list(entries)

    def __eq__(self, other) -> bool:
        """Equal GPU, kernel spans and block entries (made for the comparison if not yet)."""
        if not isinstance(other, Timeline):
            return NotImplemented
        return (self.gpu, self.sms, self.kernels, self.entries) == (other.gpu, other.sms, other.kernels, other.entries)

    @property
    def end_us(self) -> float:
        return self.kernels[-1].end_us if self.kernels else 0.0

    @property
    def truncated(self) -> bool:
        return any(k.truncated for k in self.kernels)

    def entries_for_kernel(self, i: int) -> list:
        return [e for e in self.entries if e.kernel == i]

    def to_rows(self) -> list:
        """One dict per stage span of every kept block (for a dataframe / a Gantt chart)."""
        rows = []
        for e in self.entries:
            name = self.kernels[e.kernel].name
            for stage, a, b in e.stages:
                rows.append(dict(kernel=e.kernel, kernel_name=name, sm=e.sm, block=e.block,
                                 stage=stage, kind="grid_barrier" if stage == BARRIER else "stage",
                                 start_us=a, end_us=b))
        return rows

    def utilisation(self, kernel: Optional[int] = None, include_gaps: bool = True) -> float:
        """Fraction of SM-slot time spent working (not idle, not waiting at a grid barrier).

        A slot is one resident block's place on an SM (``blocks_per_sm`` per SM, per
        kernel).  With ``include_gaps`` the launch gaps count as idle slot time.
        """
        spans = self.kernels if kernel is None else [self.kernels[kernel]]
        busy = sum(k.busy_us for k in spans)
        total = sum(k.blocks_per_wave * (k.duration_us + (k.launch_gap_us if include_gaps else 0.0))
                    for k in spans)
        return busy / total if total else 0.0

    def render_ascii(self, width: int = 80, max_sms: int = 16) -> str:
        """A text Gantt chart: one row per SM, time left to right.

        ``0-9a-z`` the kernel running on the SM, ``|`` blocks waiting at a grid
        barrier, ``.`` an SM idle during a kernel, blank a launch gap.
        """
        return _render(self, width, max_sms)

    def __str__(self) -> str:
        return self.render_ascii()


# ---------------------------------------------------------------------------
# dispatching blocks to SM slots
# ---------------------------------------------------------------------------

def dispatch(durations, sms: int, blocks_per_sm: int, t0: float = 0.0):
    """Event simulation: blocks in order to the SM slot that frees first.

    Returns numpy arrays ``(sm, start, end)`` indexed by block.  Ties go to the
    lowest slot, then the lowest SM: the first wave fills slot 0 of every SM,
    then slot 1, as the hardware spreads a grid round-robin.
    """
    durations = np.asarray(durations, dtype=float)
    heap = [(t0, slot, sm) for slot in range(blocks_per_sm) for sm in range(sms)]
    heapq.heapify(heap)
    sm_of = np.empty(len(durations), dtype=np.int64)
    start = np.empty(len(durations))
    for b, d in enumerate(durations):
        t, slot, sm = heapq.heappop(heap)
        sm_of[b], start[b] = sm, t
        heapq.heappush(heap, (t + d, slot, sm))
    return sm_of, start, start + durations


def dispatch_uniform(blocks, duration: float, sms: int, blocks_per_sm: int, t0: float = 0.0):
    """Closed form of :func:`dispatch` when every block takes ``duration``: ``(sm, start, end)``."""
    blocks = np.asarray(blocks, dtype=np.int64)
    per_wave = sms * blocks_per_sm
    within = blocks % per_wave
    start = t0 + (blocks // per_wave) * duration
    return within % sms, start, start + duration


def _aligned_bounds(stage_us: np.ndarray, barriers: list, barrier_us: float, t0: float = 0.0):
    """``([(stage, starts, ends)], end)`` of all-resident blocks aligned by grid barriers: per stage (or
    barrier wait, stage :data:`BARRIER`) every block's start and end, and every block's end -- arrays over the
    blocks, so that :func:`build_timeline` learns a kernel's end without making a span per block and stage."""
    grid, nstages = stage_us.shape
    t = np.full(grid, float(t0))
    bounds = []
    for s in range(nstages):
        end = t + stage_us[:, s]
        bounds.append((s, t, end))
        t = end
        if barriers[s]:
            release = float(end.max()) + barriers[s] * barrier_us
            t = np.full(grid, release)
            bounds.append((BARRIER, end, t))
    return bounds, t


def align_stages(stage_us: np.ndarray, barriers: list, barrier_us: float, t0: float = 0.0):
    """Stage spans of all-resident blocks whose stages are aligned by grid barriers.

    ``stage_us[b, s]`` is block ``b``'s time in stage ``s``.  After a stage with a
    grid barrier every block waits for the slowest, then for the barrier itself.
    Returns ``(spans, end)``: per block a list of ``(stage, start, end)`` and its end.
    """
    bounds, t = _aligned_bounds(stage_us, barriers, barrier_us, t0)
    spans: list = [[] for _ in range(len(t))]
    for s, a, b in bounds:                   # stage by stage, each block's span appended in stage order
        for block_spans, span in zip(spans, zip([s] * len(a), a.tolist(), b.tolist())):
            block_spans.append(span)
    return spans, t


def _kept_blocks(grid: int, per_wave: int) -> np.ndarray:
    waves = ceil(grid / per_wave)
    if waves <= HEAD_WAVES + 1:
        return np.arange(grid)
    return np.concatenate([np.arange(HEAD_WAVES * per_wave), np.arange((waves - 1) * per_wave, grid)])


def _stage_spans(stage_us, start):
    spans, t = [], start
    for s, d in enumerate(stage_us):
        spans.append((s, t, t + d))
        t += d
    return spans


def build_timeline(plan, kernel_stats, block_us: Optional[dict] = None, terms: Optional[list] = None) -> Timeline:
    """Schedule every kernel of ``plan`` on its GPU; fills ``blocks_per_wave`` and ``waves``.

    ``block_us`` optionally maps a kernel index to per-block durations (an
    experiment: what if some blocks are slower?); blocks then go through the
    event queue, and a barrier kernel's stages are stretched in proportion.
    ``terms``: every kernel's per-block cost terms (``cost.kernels_block_terms``)
    where the caller has them, else they are worked out here.
    """
    gpu, c = plan.gpu, cost.constants(plan.gpu)
    if len(kernel_stats) != len(plan.kernels):
        raise AStitchError(f"{len(kernel_stats)} kernel stats for a plan of {len(plan.kernels)} kernels: "
                           "pass one KernelStats per plan kernel, in plan order")
    tl = Timeline(gpu=gpu.name, sms=gpu.sms)
    t = 0.0
    for i, (kernel, ks) in enumerate(zip(plan.kernels, kernel_stats)):
        check_grid_barrier(gpu, kernel, ks)
        occ = cost.residency(gpu, ks)
        grid, per_wave = max(1, ks.grid), occ.blocks_per_wave
        ks.blocks_per_wave, ks.waves = per_wave, ceil(grid / per_wave)
        stage_us = np.asarray(cost.stage_block_us(plan, kernel, ks, None if terms is None else terms[i]), dtype=float)
        work = float(stage_us.sum())
        barriers = barrier_counts(kernel, ks) if ks.kind != "library" else []
        barriers = (barriers + [0] * len(stage_us))[:len(stage_us)]
        gap = c["kernel_launch_us"] + cost.memset_us(gpu, ks)
        start = t + gap
        custom = None if block_us is None else block_us.get(i)
        scale = None                          # each block's time against the stage model's (measured blocks;
        if custom is not None:                # none: the model's own, made for no block of a 750000-block grid)
            custom = np.broadcast_to(np.asarray(custom, dtype=float), (grid,))
            scale = custom / work if work else np.ones(grid)
        if sum(barriers):
            per_block = np.tile(stage_us, (grid, 1)) if scale is None else stage_us[None, :] * scale[:, None]
            _, ends = _aligned_bounds(per_block, barriers, c["grid_barrier_us"], start)
            entries = _AlignedBlocks(i, gpu.sms, per_block, barriers, c["grid_barrier_us"], start)
            end = float(ends.max())
            busy, truncated = float(per_block.sum()), False
        else:
            kept = _kept_blocks(grid, per_wave) if custom is None else np.arange(grid)
            if custom is None:
                sm, st, en = dispatch_uniform(kept, work, gpu.sms, occ.blocks_per_sm, start)
                end, busy = start + ks.waves * work, work * grid
                entries = _UniformBlocks(i, sm, kept, st, en, stage_us)
            else:
                sm, st, en = dispatch(custom, gpu.sms, occ.blocks_per_sm, start)
                end, busy = float(en.max()), float(custom.sum())
                spans = {b: _stage_spans(stage_us * scale[b], float(st[b])) for b in kept}
                entries = [BlockEntry(i, int(sm[j]), int(b), float(st[j]), float(en[j]), spans[b])
                           for j, b in enumerate(kept)]
            truncated = len(kept) < grid
        imbalance = sum(cost.imbalance_terms(gpu, kernel, ks)) if ks.kind != "library" else 0.0
        end += imbalance                      # the few busy blocks of an imbalanced stage finish last
        tl.parts.append(entries)
        tl.kernels.append(KernelSpan(
            kernel=i, name=ks.name, start_us=start, end_us=end, launch_gap_us=gap, grid=grid, block=ks.block,
            blocks_per_sm=occ.blocks_per_sm, blocks_per_wave=per_wave, waves=ks.waves,
            block_us=(end - start) / ks.waves, busy_us=busy, grid_barriers=int(sum(barriers)),
            truncated=truncated, imbalance_us=imbalance))
        t = end
    return tl


# ---------------------------------------------------------------------------
# ASCII rendering
# ---------------------------------------------------------------------------

def _render(tl: Timeline, width: int, max_sms: int) -> str:
    width, total = max(10, int(width)), tl.end_us
    if not tl.kernels or total <= 0:
        return "(empty timeline)"
    nsm = min(tl.sms, max(1, int(max_sms)))
    rows = [[" "] * width for _ in range(nsm)]

    def cols(a, b):
        lo = min(width - 1, int(a / total * width))
        return lo, max(lo + 1, min(width, int(np.ceil(b / total * width - 1e-9))))

    def paint(sm, a, b, ch):
        lo, hi = cols(a, b)
        for x in range(lo, hi):
            rows[sm][x] = ch

    for k in tl.kernels:
        for sm in range(nsm):
            paint(sm, k.start_us, k.end_us, ".")
    for k in tl.kernels:
        sym = _SYMBOLS[k.kernel % len(_SYMBOLS)]
        if k.truncated:   # middle waves are full: every slot busy from the kernel start to the last wave
            last = k.start_us + (k.waves - 1) * k.block_us
            for sm in range(nsm):
                paint(sm, k.start_us, last, sym)
    for e in tl.entries:
        if e.sm < nsm:
            sym = _SYMBOLS[e.kernel % len(_SYMBOLS)]
            for stage, a, b in e.stages:
                if stage != BARRIER:
                    paint(e.sm, a, b, sym)
    for e in tl.entries:
        if e.sm < nsm:
            for stage, a, b in e.stages:
                if stage == BARRIER:
                    paint(e.sm, a, b, "|")
    label = max(len(f"SM{nsm - 1}"), 4)
    axis = f"0 us{'':{max(1, width - 4 - len(f'{total:.1f} us'))}}{total:.1f} us"
    lines = [f"{'':{label}} {axis}"]
    lines += [f"{f'SM{sm}':<{label}} {''.join(r)}" for sm, r in enumerate(rows)]
    if nsm < tl.sms:
        lines.append(f"{'':{label}} ({tl.sms - nsm} more SMs not shown)")
    lines.append(f"{'':{label}} '.' idle SM  '|' grid-barrier wait  ' ' launch gap")
    for k in tl.kernels:
        sym = _SYMBOLS[k.kernel % len(_SYMBOLS)]
        more = f", {k.grid_barriers} grid barrier(s)" if k.grid_barriers else ""
        trunc = " (middle waves not stored)" if k.truncated else ""
        lines.append(f"{sym} {k.name}: {k.grid} x {k.block} threads, {k.blocks_per_sm}/SM, "
                     f"{k.waves} wave(s) of {k.block_us:.2f} us{more}; "
                     f"{k.start_us:.1f}-{k.end_us:.1f} us{trunc}")
    lines.append(f"SM-slot utilisation {tl.utilisation():.0%} (launch gaps included)")
    return "\n".join(lines)
