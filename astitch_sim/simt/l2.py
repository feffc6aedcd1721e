"""The L2 cache: which re-read bytes the L2 serves instead of DRAM.

Why it matters here
-------------------
A plan of many kernels passes its intermediates through global memory: one
kernel stores a tensor, the next loads it.  Charged at DRAM bandwidth, a 128 KiB
intermediate costs as much per byte as a 100 MB one.  On a real GPU the store
lands in the L2 (6 MiB on V100, 40 MiB on A100, 50 MiB on H100, 60 on H200), and the
next kernel's load finds it there.  So for the small and medium graphs a
learner starts with (the paper's Figure 7, attention softmax, most model
fixtures) an L2-less model over-charges exactly the plans with many kernels,
and over-states what stitching saves.  For the paper's tens-of-MB DIEN and
Transformer tensors the L2 holds little and nothing changes.

The model (a fluid LRU over the plan's traffic)
-----------------------------------------------
*The clock.*  Time is counted in bytes: every touch of a global buffer (a stage
reading or writing it, a library kernel's operand or result, a memset)
advances a clock by the bytes it touches -- its sectors' bytes, at most the
buffer's size (a buffer read again and again by one stage, like a broadcast
row, occupies the L2 only once).  Kernels run in plan order; a kernel's
touches are spread uniformly over its span of the clock, and each touch walks
its tensor in index order.

*The hit rule: LRU stack distance.*  A fully associative LRU cache of ``C``
bytes serves a re-touched byte iff fewer than ``C`` other bytes were touched
since its previous touch.  A byte at fraction ``p`` of a tensor was touched at
``a + p (b - a)`` (the previous touch's span ``[a, b]``) and is touched again at
``c + p (d - c)``; the distance is linear in ``p``, so the fraction of the
tensor that hits is a closed form (:func:`hit_fraction`).  Examples: kernel 0
reads ``x`` and writes ``y`` (``S`` bytes each), kernel 1 reads ``y``: the
distance is ``2S`` for every byte, so ``y`` hits iff ``2S <= C`` -- ``x``, read
beside ``y``, competes for the cache.  A tensor bigger than ``C`` streamed
through never hits (an LRU cache thrashes on a scan).

*Within a kernel.*  A stage that reads a tensor an earlier stage of the same
kernel touched (a looped reduction reading its row twice, a value stored for a
grid barrier and read back) re-reads it after only the blocks *resident at
once* have moved their bytes: every block runs its stages in order.  So within
a kernel the clock of stages is scaled by ``min(grid, blocks_per_wave) /
grid``, and a 100 MB row-wise kernel whose blocks re-read their own rows still
hits, where a second kernel re-reading the same 100 MB would not.

*A block's own re-read: the L1.*  A block that reads in a later stage what it read in an earlier one (a
fused layer norm or softmax reading its row once per pass, as FusionStitching's and Inductor's looped
kernels do: the two stages have the same thread mapping, so every element is in the same block both times)
finds it in its SM's L1 when the bytes the SM's resident blocks touched in between fit there:
the stage-clock distance above, per SM (the resident blocks spread over ``min(SMs, blocks)`` SMs), against
the SRAM the shared carveout leaves as L1 (``GPU.l1_shared_per_sm`` less the resident blocks' shared memory
and the driver's reservation).  Those bytes are charged to neither DRAM nor the L2 (the load instructions
stay in the issue count).  The second H200 window measured it: FusionStitching's layer norm 16384x768
(three passes over each 3 KB row, 32 one-warp blocks per SM) ran 26.2 us, astitch's one-pass kernel 26.5,
while the model charged the two re-reads to the L2 and predicted 46.5; rmsnorm 4096x4096 under
FusionStitching and Inductor, the DIEN softmax under FusionStitching and attention softmax 196608x512 the
same (``benchmarks/results/2026-11-30-crosscheck-l1-stages``).  Not across a grid barrier: batch norm under
astitch re-reads ``x`` after one, and measured slower than an L1 hit predicts (no such saving is credited).
Nor where the later stage maps its elements otherwise: layer-norm backward's column stage reads ``dy`` the
row stages read, each element in another block, on another SM.

*Cold start.*  Every run starts with an empty L2: graph inputs and constants
come from DRAM at their first touch -- as the GPU benchmarks measure, which
flush the L2 between repetitions (``benchmarks/gpu_bench/clock.py``).

*Writes: write-back, charged when they happen.*  A store allocates in the L2
(the written tensor is resident afterwards, so the next kernel's load hits)
and the cost model keeps charging the stored sectors at DRAM bandwidth in the
kernel that stores them: the L2 is write-back, every dirty line reaches DRAM
eventually (evicted, or written back at the end), and that write-back is
charged once, at the store, instead of at an eviction time the model does not
track.  A dead intermediate overwritten before eviction would never be written
back on a real GPU; the model does not credit that (it errs on the dear side).

*What a hit costs.*  Read sectors the L2 serves are charged at the preset's
``l2_bandwidth_gbs`` (sources in :mod:`astitch_sim.hardware.gpus`), through a
Little's-law occupancy factor of the L2's own (:mod:`astitch_sim.simt.cost`,
``saturating_l2_warps``): a hit comes back in the L2's round trip
(``l2_latency_ns``, 120 ns), not DRAM's 700.  Until 2026-11-30 the DRAM factor
stood for both, which priced a latency-bound kernel's hits at DRAM's latency
(Inductor's batch norm, two 2-block kernels summing partials from the L2: 71.5 us
predicted, 40.6 measured on an H200).  Hits another block's earlier stage of the
same kernel left, with no grid barrier between, are ``l2_unordered_bytes``
(:func:`annotate`): nothing orders that block's read before this one, so the cost
model keeps DRAM's round trip for them.  The cost breakdown shows the
two as ``memory_us`` (DRAM) and ``l2_us`` (L2 hits); ``ks.dram_bytes`` and
``ks.l2_read_bytes`` give the bytes, and each stage's ``tensors`` say which
tensor hit and since which kernel (``TensorTraffic.resident_since``).

*Library kernels* (GEMMs, sorts) touch their operands and results -- they
advance the clock and leave their result resident for the next kernel -- but
their own reads are not credited: their roofline stays as it was.

Not modelled: set associativity and conflict misses (the cache here is fully
associative); the partitioned L2 of A100 and H100 (two halves joined by a
crossbar: a line homed in the *far* half costs more latency and less
bandwidth, and lines read by SMs on both sides may be held twice, so the
effective capacity can be below ``l2_bytes``); L2 data compression;
NVIDIA's actual replacement policy (undocumented; persisting-access windows);
L1 hits across kernels and across a grid barrier (a tensor an earlier kernel read, or an earlier stage
before a grid barrier, is charged as an L2 hit at best); tensors re-walked in a different order (a
transposed re-read is treated as the same order).

*Within one stage.*  A stage that reads some sectors of a tensor more than once -- a broadcast
operand: a layernorm's ``gamma`` read by every row, a bias by every row of a GELU -- moves the
tensor's own sectors once (from DRAM, or from the L2 if an earlier touch left it there) and every
further read of them from the SM's L1 when the tensor is small (:data:`L1_REUSE_BYTES`: charged to
neither DRAM nor the L2; the load instructions stay in the issue count), else from the L2, as long
as the tensor is at most half the L2 (the other half for the stream it is read beside).  Until the
first GPU window showed it, every such repeat was charged at DRAM bandwidth: layer norm 16384x768
was charged 201 MB of DRAM traffic for its 101 MB (its 3 KB ``gamma`` and ``beta`` once per row),
bias+GELU 16384x3072 604 MB for its 403 MB; the H200 moved the real bytes at its copy rate
(``benchmarks/results/2026-11-28-crosscheck-l1``).  ``resident_since`` is ``"r"`` for such repeats
when no earlier touch left the tensor resident.

Switching it off: ``simulate(plan, inputs, l2=False)``, or a GPU with
``l2_bytes=0`` (``dataclasses.replace(asim.gpu("H100"), l2_bytes=0)``): an L2 of
no bytes holds nothing, and every sector is charged at DRAM bandwidth, as
before this model.
"""
from __future__ import annotations

from .stats import SECTOR


#: a tensor read again within one stage is served by the SMs' L1 when it is at most this big (every SM keeps
#: its copy: 64 KiB is a quarter of an H100 SM's 256 KiB L1/shared, half of a V100's 128 KiB)
L1_REUSE_BYTES = 64 * 1024


def whole_sectors(nbytes: int) -> int:
    """A buffer's bytes rounded up to whole sectors: the most any touch of it can occupy or move once."""
    return -(-nbytes // SECTOR) * SECTOR


def footprint(tt) -> int:
    """Bytes one touch (a stage's, or a library kernel's) of a buffer occupies in the L2: its sectors' bytes,
    at most the buffer (rounded up to whole sectors)."""
    return min(SECTOR * (tt.read_sectors + tt.written_sectors), whole_sectors(tt.nbytes))


def within_stage(tt, frac: float, capacity: float, l1_first: float = 0.0) -> tuple:
    """``(L2 fraction, L1 bytes)`` of a stage's reads of one buffer, given ``frac``, the share of its first
    read an earlier touch left in the L2, and ``l1_first``, the share the block's own earlier stage left in
    its SM's L1 (served there first: the L2 keeps ``frac - l1_first``).  Sectors the stage reads more than
    once (a broadcast row) come, while the buffer fits half the L2, from the L1 if it is small
    (:data:`L1_REUSE_BYTES`), else from the L2 ("Within one stage", above); otherwise every read splits as
    the first does."""
    total = SECTOR * tt.read_sectors
    unique = min(total, whole_sectors(tt.nbytes))
    again = total - unique
    l1_first = min(1.0, l1_first)
    l2_first = max(0.0, frac - l1_first)
    if not again or capacity <= 0 or unique > capacity / 2:
        return l2_first, l1_first * tt.read_bytes
    if unique <= L1_REUSE_BYTES:
        return l2_first * unique / total, (again + l1_first * unique) * tt.read_bytes / total
    return (l2_first * unique + again) / total, l1_first * unique * tt.read_bytes / total


def l1_capacity(gpu, ks, occ=None) -> float:
    """The L1 bytes a kernel's resident blocks have, all SMs together: per SM, ``gpu.l1_shared_per_sm`` less
    the shared memory (and the driver's per-block reservation) of the blocks it holds, times the SMs the
    resident blocks occupy (the scheduler spreads them over every SM before doubling up).  0 for a library
    kernel or a preset without the figure.  ``occ``: the kernel's occupancy report, where the caller has it."""
    if ks.kind == "library" or not gpu.l1_shared_per_sm:
        return 0.0
    occ = occ or _occupancy(gpu, ks)
    resident = min(max(1, ks.grid), occ.blocks_per_wave)
    sms = min(gpu.sms, resident)
    per_sm = -(-resident // sms)
    free = gpu.l1_shared_per_sm - per_sm * (ks.shared_bytes + gpu.shared_reserved_per_block)
    return float(max(0, free) * sms)


def _occupancy(gpu, ks):
    return gpu.occupancy_shared(ks.block, ks.shared_bytes, ks.registers_per_thread)


def _same_blocks(mappings, first: int, later: int) -> bool:
    """Do stages ``first`` and ``later`` map their elements alike (``mappings``: the kernel's stage mappings,
    None where not known), so that each element is in the same block both times?"""
    return mappings is not None and later < len(mappings) and mappings[first] == mappings[later]


def _stage_mappings(plan, kernel_stats, kernels) -> list:
    """Per kernel of ``kernel_stats``, its stages' thread mappings (None: not known, or a library kernel):
    ``kernels`` where given (aligned with the stats), else the plan's own."""
    kernels = getattr(plan, "kernels", None) if kernels is None else kernels
    if kernels is None or len(kernels) != len(kernel_stats):
        return [None] * len(kernel_stats)
    return [None if k.kind == "library" else [s.mapping for s in k.stages] for k in kernels]


def _grid_barrier_between(ks, first: int, later: int) -> bool:
    """Does a grid barrier run between stage ``first``'s reads and stage ``later``'s (one after, or inside,
    a stage from ``first`` up to ``later``)?"""
    return any(ks.stages[k].grid_barriers for k in range(first, later))


def hit_fraction(prev: tuple, now: tuple, capacity: float) -> float:
    """The fraction of a tensor a touch spread over clock span ``now`` finds in an LRU cache of ``capacity``
    bytes, when its previous touch was spread over ``prev`` (both in the same element order).

    The byte at fraction ``p`` was touched at ``a + p (b - a)`` and again at ``c + p (d - c)``; it hits iff
    that distance is at most ``capacity``."""
    (a, b), (c, d) = prev, now
    if capacity <= 0:
        return 0.0
    start, slope = c - a, (d - c) - (b - a)
    if slope == 0:
        return 1.0 if start <= capacity else 0.0
    p = (capacity - start) / slope           # where the distance crosses the capacity
    return min(1.0, max(0.0, p if slope > 0 else 1.0 - p))


def _groups(ks) -> list:
    """A kernel's touches in order: one ``{buffer: TensorTraffic}`` per stage, or the library kernel's one."""
    if ks.kind == "library":
        return [ks.library_tensors]
    return [s.tensors for s in ks.stages]


def _resident_share(ks, occ) -> float:
    """The fraction of a kernel's blocks resident at once (``occ``: its occupancy report): the part of its
    traffic moved between two stages of one block."""
    if ks.kind == "library":
        return 1.0
    grid = max(1, ks.grid)
    return min(grid, occ.blocks_per_wave) / grid


def annotate(plan, kernel_stats, enabled: bool = True, kernels=None) -> None:
    """Decide, for every read of every stage of ``kernel_stats`` (plan order), how many of its bytes the L2
    serves: fills ``TensorTraffic.l2_read_bytes`` / ``resident_since`` and ``StageStats.l2_read_bytes``,
    which the cost model (:mod:`astitch_sim.simt.cost`) charges at ``l2_bandwidth_gbs``.  ``enabled=False``
    (or a GPU with ``l2_bytes=0``): no hits, every sector at DRAM bandwidth.  ``kernels``: the plan kernels
    the stats are of, in the same order, where ``plan`` has none (a search's candidates): their stages'
    mappings tell a block's own re-read (the L1) from another block's.  Where no mappings are known (stats
    made by hand, without a plan's kernels), a later stage's hit on what an earlier stage of the kernel read,
    with no grid barrier between, is taken as another block's: an unordered L2 hit, priced with DRAM's round
    trip, never the L1 (the slower reading)."""
    capacity = plan.gpu.l2_bytes if enabled else 0
    clock = 0.0
    last: dict = {}                                  # buffer -> (kernel index, clock span of its last touch)
    mappings = _stage_mappings(plan, kernel_stats, kernels)
    for ki, ks in enumerate(kernel_stats):
        groups = _groups(ks)
        sizes = [sum(footprint(tt) for tt in g.values()) for g in groups]
        span = (clock, clock + sum(sizes) + ks.memset_bytes)
        occ = None if ks.kind == "library" else _occupancy(plan.gpu, ks)
        share = _resident_share(ks, occ)
        l1 = l1_capacity(plan.gpu, ks, occ) if capacity > 0 else 0.0
        seen: dict = {}                              # buffer -> (stage, wave-clock span) within this kernel
        wave = 0.0
        for j, (g, size) in enumerate(zip(groups, sizes, strict=True)):
            here = (wave, wave + share * size)
            unordered = 0.0                              # hits other blocks' earlier stage left (cost.py)
            for name, tt in g.items():
                tt.l2_read_bytes, tt.l1_read_bytes, tt.resident_since = 0.0, 0.0, ""
                if not tt.read_sectors or ks.kind == "library":
                    continue
                own = 0.0                                # share of it the block's own earlier stage left in L1
                others = False                           # a hit other blocks' earlier stage left, unordered
                if name in seen:
                    i, prev = seen[name]
                    frac, since = hit_fraction(prev, here, capacity), f"s{i}"
                    if not _grid_barrier_between(ks, i, j):
                        if _same_blocks(mappings[ki], i, j):
                            own = hit_fraction(prev, here, l1)
                        else:
                            others = True
                elif name in last:
                    k0, prev = last[name]
                    frac, since = hit_fraction(prev, span, capacity), f"k{k0}"
                else:
                    frac, since = 0.0, ""
                hit, l1_bytes = within_stage(tt, frac, capacity, own)
                if (hit, l1_bytes) != (frac, 0.0):
                    since = since or "r"         # re-read within the stage: resident since its own first read
                if hit > 0 or l1_bytes > 0:
                    tt.l2_read_bytes, tt.l1_read_bytes, tt.resident_since = hit * tt.read_bytes, l1_bytes, since
                    if others:
                        unordered += tt.l2_read_bytes
            for name in g:
                seen[name] = (j, here)
            if ks.kind != "library":
                ks.stages[j].l2_read_bytes = float(sum(tt.l2_read_bytes for tt in g.values()))
                ks.stages[j].l1_read_bytes = float(sum(tt.l1_read_bytes for tt in g.values()))
                ks.stages[j].l2_unordered_bytes = unordered
            wave = here[1]
        for g in groups:
            for name in g:
                last[name] = (ki, span)
        clock = span[1]


def split_bytes(s) -> tuple:
    """A stage's global traffic as the cost model charges it: ``(DRAM bytes, L2-hit bytes)``.  Bytes are the
    sectors' (32 each, read and written) when the executor counted sectors, else the plain bytes."""
    sectors = s.global_sectors_read + s.global_sectors_written
    total = SECTOR * sectors if sectors else s.global_bytes_read + s.global_bytes_written
    l1 = min(float(getattr(s, "l1_read_bytes", 0.0)), float(total))
    hit = min(float(getattr(s, "l2_read_bytes", 0.0)), float(total) - l1)
    return total - hit - l1, hit
