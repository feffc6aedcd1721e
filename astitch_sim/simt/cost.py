"""The cost model: counters in, predicted microseconds out.

The executor counts what a plan *does* (bytes, sectors, flops, barriers,
atomics: :mod:`astitch_sim.simt.stats`); this module says what that *costs* on a
GPU.  It is deliberately small -- a handful of terms a student can check by hand
-- but it has the terms AStitch's argument turns on: kernel launches, off-chip
traffic, how much of the bandwidth a launch shape can actually use, grid
barriers, wave quantisation and recomputation.

The formula
-----------
A kernel costs::

    predicted = launch + memset + waves * t_block + grid_barriers * t_grid_barrier + imbalance

``waves = ceil(grid / blocks_per_wave)`` (residency from threads, registers and
shared memory: :meth:`astitch_sim.hardware.gpus.GPU.occupancy`).  Every block of a
kernel does about the same work, so one per-block time ``t_block`` (the sum of
its stages' times) is used for all of them, and a wave lasts ``t_block``: a
kernel of 1.1 waves pays 2 full waves (the *tail effect*: the nearly empty last
wave leaves most SMs idle for a whole block time).  :func:`per_block_us` is
exactly what the scheduler (:mod:`~astitch_sim.simt.schedule`) dispatches, so
the timeline and the prediction agree.

One stage of one block (``w`` = the block's warps that have elements of the stage,
:func:`busy_warps_per_block`; ``R`` = such warps resident on the GPU while the
first wave runs = ``min(grid, blocks_per_wave) * w``; ``S`` = warps needed to
saturate DRAM; ``c`` = blocks sharing one SM)::

    memory   = block_bytes * max(R, S) / (w * BW)
    on_chip  = c * (alu_flops / ALU_SM + expensive_flops / SFU_SM + shared_time)
    t_stage  = memory + on_chip - min(1, R/S) * min(memory, on_chip)
             + (block_barriers + tree_barriers + shuffle_barriers) * t_bar
             + atomics * min(grid, per_wave) / ATOMIC_RATE
    t_block  = max(block_start + sum(t_stage) - cross_stage + spill, issue, c * block_dispatch)

``cross_stage`` (:func:`cross_stage_overlap`): with ``c >= 2`` blocks sharing an SM, the on-chip time one
stage spends with memory idle hides behind another stage's memory time with the ALUs idle (a fused softmax's
``exp`` from registers behind its loads and stores, in the SM's other blocks), per run of stages between grid
barriers: the smaller of the two sums.  With one block per SM a block's stages follow each other.

*Memory -- Little's law.*  DRAM delivers its bandwidth ``BW`` only when enough
requests are in flight: ``bytes_in_flight = BW * latency``.  A warp keeps ``B``
bytes outstanding, so saturating needs ``S = BW * latency / B`` warps on the GPU.
With fewer, each warp gets ``BW / S`` and the GPU reaches only ``BW * R / S``;
with more, the warps share ``BW``.  Hence ``memory`` above.  This is the
paper's DIEN point: XLA's 750000 blocks of 32 threads are capped at 32 blocks per SM = 32 warps, below
``S`` on a V100, so the reduction runs at about two thirds of the bandwidth;
AStitch packs 32 rows into 1024-thread blocks and saturates it.  A grid of 32
blocks (Figure 7) leaves most SMs empty and gets a fraction of the bandwidth.
Only warps with elements count: a block of 1024 threads whose stage keeps 32 of
them busy (a layer norm of 4 rows of 32) keeps one warp's loads in flight, not 32.

*Bytes in flight follow the code* (:func:`warp_bytes_in_flight`, per stage)::

    B = max(bytes_in_flight_per_warp,  32 * elements_in_flight * max(read, written bytes) / elements)

A thread of a flat stage issues the loads of all its ``unroll`` vectors of
``vector`` elements (``ThreadMapping.per_thread`` elements) before it uses the
first (``gpu_backend/codegen/loops.py``), and each element brings the stage's
global reads per domain element (``global_bytes_read / elements``: the bytes
the executor counted for every tensor the stage reads, over its elements).  So
an f32 copy with 4-wide vectors and 4 vectors per thread keeps 32 x 16 x 4 =
2048 bytes per warp in flight, 16 times a scalar load's 128; on a V100 it
saturates DRAM with ``S`` = 810 GB/s x 600 ns / 2048 = 237 warps instead of
3797.  A row read in vectors in at most ``MAX_TRIPS`` (8) trips per lane is
written out trip by trip, every trip's loads first (``codegen/task_loops.py``),
so its lane keeps ``vector x trips`` elements in flight: a layer norm row of 768
over 32 lanes, 6 trips of 4, keeps 32 x 96 = 3072 bytes per warp in flight --
or ``vector x load_trips`` where ``gpu_backend.apply_compiler`` found that every
trip's loads at once spill at the block's register cap and loads fewer at a time
(``plan/loads_in_flight.py``: cross-entropy's 32000-column rows in 1024-thread
blocks load 4 of their 8 trips at a time).
Counting one vector there over-predicted the H200 window's one-warp-per-row
kernels 2-3x (Inductor's layer norm 16384x768: 81 us against 25.8 measured,
33 us counted this way; the cross-check's median error 7.9% -> 7.0% on 50 plans,
``benchmarks/results/2026-11-28-crosscheck-inflight``).  Other
mappings (scalar columns, rows with more trips or no vectors) issue one element's
loads at a time (``vector`` elements where the mapping has vectors).  A column lane
with vectors loads ``load_trips`` reduced rows' vectors per loop round
(``plan/column_vectors.py``: 4 rows of 4 adjacent f32 columns, 2048 bytes per warp).  The preset's
``bytes_in_flight_per_warp`` is the floor: what the model assumed for every
kernel before the code generator had vectors (V100: one coalesced 4-byte load
per warp, 128 B; A100 256 B, H100/H200 512 B: uncalibrated estimates like
every constant below); a stage's own ``B`` replaces it only where the mapping
says more.  Stores are not counted (they retire without waiting for DRAM).
Not modelled: the per-SM limit on outstanding requests (the model lets one
warp hold all its loads).

*Bytes -- sectors.*  ``block_bytes`` is ``32 * sectors`` (read + written) when
the executor counted sectors: DRAM and L2 move whole 32-byte sectors, so a
warp that touches 4 bytes in each of 32 sectors costs 1024 bytes, not 128.
This charges uncoalesced access (a column read, a transposed write) honestly.
A broadcast read (a row's mean read by every warp, a layernorm's ``gamma``
read by every row) counts a sector per warp instruction; the sectors a stage
reads more than once are then served by the L1 or the L2, not DRAM
(:mod:`astitch_sim.simt.l2`, "Within one stage").  Charged at DRAM bandwidth,
as they were until the first GPU window, they doubled a layer norm's traffic
for every strategy, and the model over-predicted the H200's measurements by a
median 37%; served from the caches, by 12% (``benchmarks/results/2026-11-28-crosscheck-l1``).
Counters without sectors (hand-made stats) fall back to bytes.

*L2 hits.*  A tensor re-read while it is still in the L2 (written or read by an
earlier kernel, or an earlier stage, and not evicted since) is served at
``l2_bandwidth_gbs``, not DRAM's: :mod:`astitch_sim.simt.l2` decides which read
bytes hit (capacity per preset, LRU, write-back), and this model charges them
``l2_us = l2_bytes * max(R, S_L2) / (w * BW_L2)`` beside ``memory``
(DRAM bytes only); the overlap term hides ``min(memory + l2, on_chip)``.
``S_L2 = BW_L2 * l2_latency_ns / B_L2`` is Little's law for the L2 itself: a
hit comes back in the L2's round trip (120 ns), and a warp keeps its L2 reads
in flight as it does DRAM's (``B_L2``: :func:`warp_l2_bytes_in_flight`).  Priced
with DRAM's saturating warps, as until 2026-11-30, a latency-bound kernel paid
DRAM's 700 ns round trip for every hit: Inductor's batch norm (two 2-block
kernels summing 256 partials per channel from the L2) was predicted 71.5 us
against 40.6 measured on an H200, and 40.2 us with the L2's own latency; over
both H200 windows' 337 timed kernels the RMS of log(predicted / measured) went
0.205 -> 0.142 and 0.150 -> 0.137 (``benchmarks/results/2026-11-30-crosscheck-l2-latency``).
Hits that *other* blocks' earlier stage of the same kernel left, no grid barrier
between (``l2_unordered_bytes``: a column stage re-reading rows), keep DRAM's
``S``: nothing orders those blocks' reads before this one, and layer-norm
backward's column stage left on 24 blocks, whose 3.6 ms on an H200 the
imbalance term prices, sweeps rows their own blocks have not read yet.  A
block's re-read of what its own earlier stage read, where the SM's L1 still holds
it (no grid barrier between, the bytes moved in between within the L1 the shared
carveout leaves), is charged to neither: FusionStitching's three-pass layer norm
was predicted 46.5 us with both re-reads at L2 bandwidth, and ran 26.2 on an H200
(:mod:`astitch_sim.simt.l2`, "A block's own re-read").

*On-chip work* -- light flops on the FP32 pipes (``fp32_gflops``), expensive
flops (exp, power, divide..., already weighted by the op table) at
``expensive_rate`` of that, shared memory at ``shared_bytes_per_clock`` per SM
plus one cycle per bank-conflict wavefront, and warp shuffles (``shfl_xor`` of
shuffle reductions) at ``shuffles_per_clock`` warp instructions per SM: a shuffle
moves 32 lanes' words through the same crossbar as shared memory (CUDA's
throughput table: 32 results per clock per SM since Volta), so it is charged in
``shared_us``.  ``c`` blocks on one SM share it.

*Overlap.*  Warps waiting on memory let other warps compute, so with enough
warps the time is ``max(memory, on_chip)``; with few warps there is nobody to
switch to and the two add up.  The model interpolates with the same Little's
law ratio: ``max + (1 - min(1, R/S)) * min``.  This is how TVM's recomputation
shows: its recomputing kernels run a handful of blocks (Figure 7: 8 blocks),
too few to hide the repeated ``power`` behind the loads.

*Load imbalance* (:func:`imbalance_terms`).  ``t_block`` spreads every stage's
work over the whole grid.  A stitched kernel's grid is sized by its largest
stage, so a smaller stage may leave most blocks idle (a column reduction of 24
column tiles, its rows not split, in a 16384-block kernel: 24 blocks do it all,
with few warps to keep DRAM busy).  Such a stage is priced again on its busy
blocks alone (:attr:`ThreadMapping.busy_blocks`), and what that outlasts the
spread-out charge is the kernel's ``imbalance_us``.  Found on a GPU: that
layer-norm backward (16384x768) measured 3.6 ms where the spread-out model said 90 us.

*Fixed costs* -- a kernel launch per kernel; a memset (a launch plus its bytes)
before a kernel whose reductions combine with atomics; a grid barrier
(``grid_barrier_us``, the paper measured 2.5-2.7 us on V100) per barrier point;
a ``__syncthreads`` per block barrier (stage boundaries, the steps of
shared-memory reduction trees: ``tree_barriers``, and the one barrier of a shuffle
reduction whose tasks span warps: ``shuffle_barriers``); a start-up cost per block (dispatch,
index arithmetic, the final store): what makes 750000 tiny blocks expensive
beyond their bandwidth.  Atomics share the L2's atomic throughput among the
blocks of a wave.

*Spills* (:func:`spill_block_us`).  Once ``gpu_backend.apply_compiler`` has run,
each kernel carries ptxas's numbers (``Kernel.machine``); a kernel whose code
did not fit its register cap moves ``spill_stores + spill_loads`` bytes per
thread (``ptxas -v``) to and from local memory::

    spill = (spill_stores + spill_loads) * block * c / (shared_bytes_per_clock * clock)

Assumption, stated: the spilled words stay in the SM's L1 (a resident thread's
local words are few: at most its 24 B stack frame x 2048 resident threads =
48 KiB per SM for astitch's softmax <64,30000> on H100, whose code spills 24 B
per thread, within the L1 left beside its 1.5 KiB of shared memory), and
L1 moves them at the shared-memory rate: L1 and shared memory are one SRAM
behind one 128-byte-per-clock data path, Volta to Hopper.  Local memory is
interleaved per thread, so a warp's spill of one word is one 128-byte line.
The bytes are ptxas's *static* count, charged once per thread: a spill inside a
loop runs per trip (an under-charge), and spills large enough to overflow L1 to
L2 or DRAM are charged at L1's rate (another).  The term is additive, not
hidden behind memory: a reload sits on the thread's dependence chain.  Plans
without ptxas's numbers (the strategies' estimates) have no spill term.

*Instruction issue* (:func:`issue_block_us`).  ``apply_compiler`` also records
the SASS instruction count of each kernel's main body and of the loops ptxas
kept (``gpu_backend/machine/sass_profile.py``, nvdisasm on the code at the
applied cap).  A thread issues ``n = straight + loop * trips`` instructions
(:func:`astitch_sim.plan.machine.thread_instructions`: straight-line code once,
an upper bound; a kept loop once per trip, an estimate), and an SM's
``sm_partitions`` schedulers (4, Volta to Hopper) each issue at most one warp
instruction per clock::

    issue = n * block / 32 * c / (sm_partitions * clock)

so a kernel of many waves takes at least ``n * threads / 32 / (SMs *
sm_partitions * clock)``, the bound ``benchmarks.sass_budget`` reports (its
``issue_us``).  The block's time is at least ``issue``; the excess over the
other terms is the breakdown's ``issue_us``.  Where no count exists (plans
before ``apply_compiler``; sm_70, which CUDA 13's nvdisasm does not read) the
model assumes the code issues fast enough: the on-chip terms above (flops on
the FP32 pipes, shared memory, shuffles) are all it charges for instructions.
Every strategy's plan gets these terms from the same counts, so a comparison of
applied plans is fair; a comparison of an applied plan with an unapplied one is
not (apply every plan, as ``benchmarks/applied_plans.py`` does).

*Block dispatch* (:func:`dispatch_block_us`).  An SM starts its blocks one after
another, one per ``block_dispatch_ns``, so a wave of ``c`` blocks per SM lasts at
least ``c * block_dispatch_ns``; the excess over the other terms is the
breakdown's ``dispatch_us``.  Only tiny blocks reach it: XLA's DIEN row
reduction, 750000 blocks of 32 threads (32 per SM), took 454 us on an H200 --
80 ns per block per SM -- where its bytes at the copy rate take 22 us and the
model without this term said 72 (``benchmarks/results/2026-11-27-h200``; the
H100/H200 constant is that measurement, V100's and A100's the same 158 cycles at
their clocks, estimates).  The paper's DIEN point is this kernel.

*Library kernels* (matrix products): ``max(flops / (fp32 * efficiency),
bytes / BW)``, a roofline; the plan treats them as black boxes.

The breakdown
-------------
``ks.breakdown`` holds the terms in microseconds, and they add up to
``ks.predicted_us``.  Per-block terms are multiplied by the *fractional* wave
count ``grid / min(grid, blocks_per_wave)``; the whole-wave rounding is its own
term, ``tail_us``.  ``overlap_us`` is negative (time hidden by overlapping
memory and compute); ``recompute_us`` is the share of the on-chip time spent on
recomputed flops (TVM) -- counted in the total, not hidden from it.  ``spill_us``
and ``issue_us`` appear only for kernels with ptxas's numbers; ``imbalance_us`` only
for kernels with a stage that leaves blocks idle.

The constants
-------------
Hardware numbers (SMs, bandwidth, launch, barrier costs, clock, FLOP/s) come
from the GPU preset (:mod:`astitch_sim.hardware.gpus`); the model's own constants
live in :data:`COST_CONSTANTS`, one entry per GPU name.  An entry may also
*override* any preset field the model reads (``kernel_launch_us``,
``measured_bandwidth_gbs``, ...): a calibration script writes measured values
there, and only there.  :func:`constants` shows the merged set.
"""
from __future__ import annotations

from math import ceil

from ..errors import AStitchError
from ..hardware.gpus import GPU
from ..plan.loads_in_flight import trips_in_flight
from ..plan.machine import thread_instructions
from ..plan.reduce_scheme import lanes_of, tree_barriers, warps_across
from ..plan.vocabulary import Barrier, ReduceScheme
from . import l2
from .grid_barrier import check_grid_barrier

#: GPU preset fields the model reads; an entry of COST_CONSTANTS may override each.
PRESET_FIELDS = ("sms", "measured_bandwidth_gbs", "kernel_launch_us", "grid_barrier_us", "block_barrier_ns",
                 "clock_ghz", "fp32_gflops", "l2_bandwidth_gbs")

#: An L2 hit's round trip, ns (:func:`saturating_l2_warps`).  MEASURED on the H200 only: fitted by
#: ``python -m benchmarks.calibrate benchmarks/results/2026-11-29-h200/results.json --params
#: kernel_launch_us,l2_latency_ns`` to that window's 224 kernels (112 ns; the 2026-11-27 window's 113 kernels
#: barely constrain it: RMS of log(predicted/measured) 0.134-0.137 from 5 to 150 ns), rounded to 120 ns
#: (``benchmarks/results/2026-11-30-crosscheck-l2-latency``).  ESTIMATE for V100, A100 and H100: the same 120
#: ns, the order of the 200-260 cycles microbenchmark reports give an L2 hit on these GPUs (taken from memory of
#: those reports, not checked against their text).
L2_LATENCY_NS = 120.0

#: The cost model's own constants, per GPU.  Every value is an ESTIMATE until
#: calibrated from GPU runs (benchmarks/): put measured values here, labelled
#: (so far the H200's kernel launch and grid barrier).
COST_CONSTANTS: dict[str, dict] = {
    "V100": dict(
        dram_latency_ns=600.0,          # loaded HBM2 latency (~900 cycles at 1.53 GHz)
        l2_latency_ns=L2_LATENCY_NS,    # an L2 hit's loaded round trip (see L2_LATENCY_NS)
        bytes_in_flight_per_warp=128,   # one coalesced 4-byte-per-thread load outstanding per warp
        expensive_rate=0.25,            # SFU: 16 lanes/SM vs 64 FP32 lanes/SM
        shared_bytes_per_clock=128,     # 32 banks x 4 bytes per SM per cycle
        shuffles_per_clock=1.0,         # warp shuffle instructions per SM per cycle (32 lanes/clock)
        atomic_per_clock=32.0,          # L2 atomic units, GPU-wide, per cycle (different addresses)
        block_start_ns=200.0,           # block dispatch + set-up + drain, per block
        block_dispatch_ns=103.0,        # an SM starts one block per this (158 cycles, as measured on H200)
        memset_launch_us=2.0,           # cudaMemsetAsync of atomic result buffers
        library_efficiency=0.7,         # cuBLAS SGEMM fraction of fp32 peak
    ),
    "A100": dict(
        dram_latency_ns=650.0, l2_latency_ns=L2_LATENCY_NS, bytes_in_flight_per_warp=256, expensive_rate=0.25,
        shared_bytes_per_clock=128, shuffles_per_clock=1.0, atomic_per_clock=48.0, block_start_ns=150.0,
        block_dispatch_ns=112.0, memset_launch_us=1.5, library_efficiency=0.7,
    ),
    "H100": dict(
        dram_latency_ns=700.0, l2_latency_ns=L2_LATENCY_NS, bytes_in_flight_per_warp=512, expensive_rate=0.25,
        shared_bytes_per_clock=128, shuffles_per_clock=1.0, atomic_per_clock=64.0, block_start_ns=120.0,
        block_dispatch_ns=80.0, memset_launch_us=1.5, library_efficiency=0.7,
    ),
    "H200": dict(
        dram_latency_ns=700.0, l2_latency_ns=L2_LATENCY_NS, bytes_in_flight_per_warp=512, expensive_rate=0.25,
        shared_bytes_per_clock=128, shuffles_per_clock=1.0, atomic_per_clock=64.0, block_start_ns=120.0,
        block_dispatch_ns=80.0, memset_launch_us=1.5, library_efficiency=0.7,
        # MEASURED: fitted by `python -m benchmarks.calibrate benchmarks/results/2026-11-29-h200/results.json
        # --params kernel_launch_us,grid_barrier_us` to the 224 kernels an H200 timed on 2026-11-29 (commit
        # 57d1153; NOTES.md there).  The grid barrier rests on two plans (batch norm and Figure 7 under astitch).
        kernel_launch_us=2.936, grid_barrier_us=5.307,
    ),
}
DEFAULT_PRESET = "H100"   # a custom GPU name borrows these


def constants(gpu: GPU) -> dict:
    """All constants the model uses for ``gpu``: preset fields, then COST_CONSTANTS (which wins).

    One dict per preset, for every caller to read and never change (a plain dict: a plan that holds the
    preset still pickles), merged once while its COST_CONSTANTS entry stays as it was (the model asks
    for them at every stage and kernel: 6400 merges per unfused GPT training-step simulation).  The entry
    is compared with the copy merged last, so a calibration or a test that sets a constant is seen at once;
    a preset is immutable, so its own fields cannot change under the merge."""
    entry = COST_CONSTANTS.get(gpu.name, COST_CONSTANTS[DEFAULT_PRESET])
    kept = gpu.__dict__.get("_cost_constants")       # (frozen: set beside the fields, outside eq and hash)
    if kept is not None and kept[0] is entry and kept[1] == entry:
        return kept[2]
    merged = {f: getattr(gpu, f) for f in PRESET_FIELDS}
    merged.update(entry)
    gpu.__dict__["_cost_constants"] = (entry, dict(entry), merged)
    return merged


def residency(gpu: GPU, ks):
    """The occupancy report of a kernel's launch shape (blocks per SM, per wave, limiting factor)."""
    return gpu.occupancy_shared(ks.block, ks.shared_bytes, ks.registers_per_thread)


def saturating_warps(c: dict, bytes_per_warp: float | None = None) -> float:
    """Little's law: warps on the whole GPU needed to keep DRAM busy, each keeping ``bytes_per_warp``
    outstanding (default: the preset's ``bytes_in_flight_per_warp``; a stage's own: :func:`warp_bytes_in_flight`)."""
    return _littles_law(c, c["measured_bandwidth_gbs"], c["dram_latency_ns"], bytes_per_warp)


def _littles_law(c: dict, bandwidth_gbs: float, latency_ns: float, bytes_per_warp: float | None) -> float:
    """Warps that keep ``bandwidth_gbs x latency_ns`` bytes in flight (GB/s * ns = bytes), ``bytes_per_warp``
    each (default: the preset's ``bytes_in_flight_per_warp``)."""
    return bandwidth_gbs * latency_ns / (bytes_per_warp or c["bytes_in_flight_per_warp"])


def saturating_l2_warps(c: dict, bytes_per_warp: float | None = None) -> float:
    """Little's law for the L2: warps needed to keep its hit bandwidth busy, ``l2_bandwidth_gbs x l2_latency_ns``
    bytes in flight, each warp keeping ``bytes_per_warp`` of L2 reads outstanding (:func:`warp_l2_bytes_in_flight`).
    A hit comes back in the L2's round trip, not DRAM's: a latency-bound stage whose reads the L2 serves (a
    two-block kernel that sums partials an earlier kernel left there) waits ``l2_latency_ns`` per round of
    loads, not ``dram_latency_ns``."""
    return _littles_law(c, c["l2_bandwidth_gbs"], c["l2_latency_ns"], bytes_per_warp)


# -- memory-level parallelism: the bytes a warp keeps in flight follow the code ------------------------------

def elements_in_flight(mapping) -> int:
    """Elements whose loads one thread issues before it uses the first: ``vector x unroll`` (a flat
    mapping's ``per_thread``: every vector of a round is loaded before any is computed,
    ``gpu_backend/codegen/loops.py``); ``vector x`` the trips loaded together for a row read in vectors
    (``plan/loads_in_flight.trips_in_flight``: every trip where at most ``MAX_TRIPS`` are written out,
    ``codegen/task_loops.write_vector_trips``, unless the registers hold fewer; one per round beyond), or
    the reduced rows a column lane loads per round (``codegen/task_loops.write_column_vectors``);
    one vector otherwise."""
    if mapping is None:
        return 1
    if mapping.kind == "flat":
        return max(1, mapping.vector) * mapping.unroll
    return max(1, mapping.vector) * max(1, trips_in_flight(mapping))


def warp_bytes_in_flight(c: dict, mapping, s) -> float:
    """Bytes one warp of a stage keeps outstanding: ``32 x elements_in_flight x read bytes per element``
    (the stage's global reads over its domain elements, as counted), where that is more than the
    preset's ``bytes_in_flight_per_warp`` (what code with one load per element keeps: the floor).

    A stage that stores more than it loads (the last stage of a stitched kernel whose operands are in
    registers -- hierarchical data reuse -- reading at most a broadcast weight) keeps its *stores* in flight
    the same way: a warp issues its vector stores and moves on, it never waits for them.  So the larger of
    the read and the written bytes per element counts.  Charging such a stage by its reads alone (or the
    one-load floor) priced astitch's register-resident final stage 4x slower than fusionstitching's stage
    that re-reads the input only to store the same bytes (hlo/softmax on V100: 2.4 against 0.6 us for one
    32 KiB store).

    Only reads DRAM serves count: a read the SM's L1 or the L2 serves (a broadcast operand's repeats, a
    block's re-read of what its earlier stage read, a tensor an earlier kernel left in the L2:
    :mod:`astitch_sim.simt.l2`) comes back on chip and keeps nothing in flight toward DRAM.  Counted, they let
    a stage that re-reads its input only to store beside it keep its stores in flight for free:
    FusionStitching's last layer-norm pass re-reads the row from the L1 and stores the output, and its stores
    wait on DRAM as astitch's do, whose row is in registers.  Not counting them took the H200 cross-checks'
    median error from 7.9% to 6.5% (66 plans) and 10.3% to 7.4% (40 plans), with the L1 re-reads
    (``benchmarks/results/2026-11-30-crosscheck-l1-stages``)."""
    on_chip = getattr(s, "l1_read_bytes", 0.0) + getattr(s, "l2_read_bytes", 0.0)
    return _per_warp(c, mapping, s, max(s.global_bytes_read - on_chip, s.global_bytes_written))


def _per_warp(c: dict, mapping, s, moved: float) -> float:
    """``32 x elements_in_flight x moved / elements``: a warp's share of ``moved`` bytes over the stage's
    elements, loaded as the mapping issues them; the preset's ``bytes_in_flight_per_warp`` at least (and
    where the mapping or the counts are unknown)."""
    floor = c["bytes_in_flight_per_warp"]
    if mapping is None or not s.elements or not moved:
        return floor
    return max(floor, 32 * elements_in_flight(mapping) * moved / s.elements)


def warp_l2_bytes_in_flight(c: dict, mapping, s) -> float:
    """Bytes of L2 hits one warp of a stage keeps outstanding: as :func:`warp_bytes_in_flight` with the stage's
    L2-served reads per element (:mod:`astitch_sim.simt.l2`) in place of its DRAM traffic, the same floor."""
    return _per_warp(c, mapping, s, float(getattr(s, "l2_read_bytes", 0.0)))


def _stage_mapping(kernel, s):
    """The plan's mapping of stage ``s`` (``None``: no plan kernel, hand-made counters)."""
    stages = getattr(kernel, "stages", None) or ()
    return stages[s.stage].mapping if 0 <= s.stage < len(stages) else None


def stage_block_barriers(s) -> int:
    """Block barriers (``__syncthreads``) a stage's blocks execute in all, as the cost model charges them: the
    stage boundary's, the reduction trees' folds and the cross-warp step of shuffle reductions."""
    return s.block_barriers + s.tree_barriers + s.shuffle_barriers


def block_barriers_per_block(kernel) -> int:
    """Block barriers each block of a generated ``kernel`` executes, from its plan alone: exactly what the
    SIMT model counts (``stage_block_barriers`` summed over stages, divided by the grid) and
    ``block_barrier_us`` charges.  Per stage: one for a block ``barrier_after``; per task trip, a
    shared-memory tree's ``tree_barriers(lanes)`` for each reduce, or one for a shuffle reduction whose
    tasks span warps (``astitch_sim/plan/reduce_scheme.py``).  The explorer shows this count."""
    total = 0
    for s in kernel.stages:
        m = s.mapping
        total += s.barrier_after is Barrier.BLOCK
        if s.reduces and s.reduce_scheme is ReduceScheme.TREE and lanes_of(m) > 1:
            total += len(s.reduces) * m.task_iterations * tree_barriers(lanes_of(m))
        if s.reduces and warps_across(s):
            total += m.task_iterations
    return total


def stage_terms(gpu: GPU, ks, kernel=None) -> list:
    """Per-block cost terms (us) of each stage of a generated kernel: a list of dicts.  ``kernel`` (the
    plan's) gives each stage's mapping, hence the bytes its warps keep in flight (:func:`warp_bytes_in_flight`).
    Every stage's work is spread over the whole grid here; a stage that keeps blocks idle pays the
    difference in :func:`imbalance_terms`."""
    c = constants(gpu)
    occ = residency(gpu, ks)
    grid = max(1, ks.grid)
    return [_stage_terms(c, occ, s, _stage_mapping(kernel, s), grid, grid, first=i == 0)
            for i, s in enumerate(ks.stages)]


def busy_warps_per_block(mapping, warps_per_block: int) -> int:
    """Warps of one busy block that have elements of the stage (:attr:`ThreadMapping.busy_threads` over
    its busy blocks), at most the block's; the block's warps without a plan.

    Little's law counts the warps that keep loads in flight.  A warp with no element of the stage waits
    at the next barrier or exits; it adds no request, so it must not shorten a latency-bound stage.
    With resident warps in its place, a layer norm <4,32> on H100 (32 busy threads) priced a block of
    1024 threads at 3.31 us and one of 128 at 3.83, all of it in the memory term, and the launch search
    chose 1024 threads for one warp's work.  The count is busy threads over 32, rounded up: where each row's
    busy lanes fill only part of its warps (40 of 64 lanes), the warps they touch are a few more."""
    if mapping is None:
        return warps_per_block
    per_block = ceil(mapping.busy_threads / max(1, mapping.busy_blocks))
    return max(1, min(warps_per_block, ceil(per_block / 32)))


def _stage_terms(c: dict, occ, s, mapping, grid: int, blocks: int, first: bool) -> dict:
    """The per-block terms of stage ``s`` on a kernel of ``grid`` blocks when ``blocks`` of them (the grid,
    or the stage's busy blocks) share its data: its bytes, flops and atomics.  The reduction machinery
    (shared memory, shuffles, block barriers) runs in every block, idle or not -- the generated code
    guards the element accesses, not the reduction -- so it stays spread over the grid."""
    wpb = busy_warps_per_block(mapping, occ.warps_per_block)
    concurrent = min(blocks, occ.blocks_per_wave)
    resident_warps = concurrent * wpb
    bw = c["measured_bandwidth_gbs"] * 1e3                      # bytes per us
    per_sm = min(occ.blocks_per_sm, ceil(concurrent / c["sms"]))  # blocks sharing one SM (for the data)
    grid_sm = min(occ.blocks_per_sm, ceil(min(grid, occ.blocks_per_wave) / c["sms"]))
    alu_sm = c["fp32_gflops"] * 1e3 / c["sms"]                 # flops per us per SM
    sfu_sm = alu_sm * c["expensive_rate"]
    clock = c["clock_ghz"] * 1e3                                # cycles per us
    l2_bw = c["l2_bandwidth_gbs"] * 1e3                        # bytes per us, for L2 hits (simt/l2.py)
    sat = saturating_warps(c, warp_bytes_in_flight(c, mapping, s))
    overlap = min(1.0, resident_warps / sat)
    dram_bytes, l2_bytes = l2.split_bytes(s)
    memory = dram_bytes / blocks * max(resident_warps, sat) / (wpb * bw)
    unordered = min(l2_bytes, float(getattr(s, "l2_unordered_bytes", 0.0)))   # DRAM's round trip (l2.py)
    l2_sat = saturating_l2_warps(c, warp_l2_bytes_in_flight(c, mapping, s))
    l2_hits = ((l2_bytes - unordered) * max(resident_warps, l2_sat)
               + unordered * max(resident_warps, sat)) / blocks / (wpb * l2_bw)
    expensive = s.expensive_flops / blocks * per_sm / sfu_sm
    alu = (s.flops - s.expensive_flops) / blocks * per_sm / alu_sm
    shared = ((s.shared_bytes_read + s.shared_bytes_written) / c["shared_bytes_per_clock"]
              + s.shared_bank_conflicts + s.shuffles / c["shuffles_per_clock"]) / grid * grid_sm / clock
    on_chip = alu + expensive + shared
    recompute = 0.0
    if s.flops:
        recompute = (alu + expensive) * min(1.0, s.recomputed_flops / s.flops)
    return dict(
        memory_us=memory,
        l2_us=l2_hits,
        compute_us=alu + expensive - recompute,
        recompute_us=recompute,
        shared_us=shared,
        overlap_us=-overlap * min(memory + l2_hits, on_chip),
        block_barrier_us=stage_block_barriers(s) / grid * c["block_barrier_ns"] / 1e3,
        atomic_us=s.atomics / blocks * concurrent / (c["atomic_per_clock"] * clock),
        block_start_us=c["block_start_ns"] / 1e3 if first else 0.0,
    )


# -- load imbalance: a stage whose work falls on a few of the kernel's blocks --------------------------------

def busy_blocks(kernel, s, grid: int) -> int:
    """Blocks that do stage ``s``'s work (:attr:`ThreadMapping.busy_blocks`); the grid without a plan."""
    m = _stage_mapping(kernel, s)
    return grid if m is None else max(1, min(grid, m.busy_blocks))


def imbalance_terms(gpu: GPU, kernel, ks) -> list:
    """Per stage, the time (us) by which its busy blocks outlast what :func:`stage_terms` charged it.

    :func:`stage_terms` spreads a stage's bytes and flops over the whole grid, as if every block did an
    equal share.  In a stitched kernel a stage can need fewer blocks than the grid its largest stage sized:
    a column reduction of 768 columns (24 tiles of 32) in a 16384-block layer-norm backward, its 16384
    reduced rows not split, runs on 24 blocks of 4 warps while 16360 blocks skip it.  Those 96 warps keep
    a sliver of DRAM's bandwidth busy (Little's law again), and the kernel lasts until they finish:
    measured on an H200, 3.6 ms against the 90 us the spread-out estimate said
    (``benchmarks/results/2026-11-27-h200``).  So for a stage with ``A < grid`` busy blocks::

        t_A      = the stage's terms with its data (bytes, flops, atomics) on A blocks, at most a wave of
                   them resident at a time; its reduction machinery (shared memory, shuffles, barriers)
                   stays spread over the grid, since idle blocks run it too
        critical = ceil(A / blocks_per_wave) * t_A
        extra    = max(0, critical - (grid / min(grid, blocks_per_wave)) * t_stage)

    (``t_stage``: its spread-out per-block time, already charged once per fractional wave).  The extra is
    the kernel's ``imbalance_us``, like the grid barriers a kernel-level term; stages that use the whole
    grid get 0."""
    if ks.kind == "library" or not ks.stages:
        return []
    c = constants(gpu)
    occ = residency(gpu, ks)
    grid = max(1, ks.grid)
    frac = grid / min(grid, occ.blocks_per_wave)
    out = []
    for s in ks.stages:
        m = _stage_mapping(kernel, s)
        busy = busy_blocks(kernel, s, grid)
        if busy >= grid:
            out.append(0.0)
            continue
        spread = sum(_stage_terms(c, occ, s, m, grid, grid, first=False).values())
        on_busy = sum(_stage_terms(c, occ, s, m, grid, busy, first=False).values())
        out.append(max(0.0, ceil(busy / occ.blocks_per_wave) * on_busy - frac * spread))
    return out


def _sharing_sm(c: dict, occ, ks) -> int:
    """Blocks of the kernel sharing one SM while its first wave runs (``c`` in the formula)."""
    return min(occ.blocks_per_sm, ceil(min(max(1, ks.grid), occ.blocks_per_wave) / c["sms"]))


def blocks_sharing_sm(gpu: GPU, ks) -> int:
    """The kernel's blocks that share one SM (:func:`_sharing_sm` of its occupancy): the per-block terms below
    take it as an argument where :func:`block_terms` has worked it out once for all of them."""
    return _sharing_sm(constants(gpu), residency(gpu, ks), ks)


# -- spills: local-memory traffic ptxas added (``kernel.machine``, after gpu_backend.apply_compiler) ------------

def spill_block_us(gpu: GPU, kernel, ks, per_sm: int | None = None) -> float:
    """Per-block time of the kernel's spills: ``(spill stores + loads) bytes per thread x block threads``
    through the SM's L1 at ``shared_bytes_per_clock`` (L1 and shared memory are one SRAM behind one data
    path, Volta to Hopper), ``c`` blocks sharing the SM; 0 without ptxas's numbers.  Local memory is
    interleaved per thread, so a warp's 4-byte spill is one 128-byte line: no coalescing loss."""
    m = getattr(kernel, "machine", None)
    if m is None or not m.spills:
        return 0.0
    c = constants(gpu)
    per_sm = blocks_sharing_sm(gpu, ks) if per_sm is None else per_sm
    return m.spills * ks.block * per_sm / (c["shared_bytes_per_clock"] * c["clock_ghz"] * 1e3)


# -- instruction issue: the time the SM's schedulers need for the counted SASS -------------------------------

def issue_block_us(gpu: GPU, kernel, ks, per_sm: int | None = None) -> float:
    """Per-block issue time: ``thread instructions x block threads / 32`` warp-instructions, issued by the
    SM's ``sm_partitions`` schedulers at one per clock, ``c`` blocks sharing the SM; 0 where the plan
    has no counted instructions (:func:`astitch_sim.plan.machine.thread_instructions`)."""
    n = thread_instructions(kernel)
    if not n:
        return 0.0
    per_sm = blocks_sharing_sm(gpu, ks) if per_sm is None else per_sm
    return n * ks.block / 32 * per_sm / (gpu.sm_partitions * constants(gpu)["clock_ghz"] * 1e3)


def block_terms(gpu: GPU, kernel, ks) -> list:
    """:func:`stage_terms` plus the kernel-wide per-block terms: ``spill_us`` (added to the first stage) and
    ``issue_us``, the time by which the issue floor exceeds the block's other terms (added to the last stage:
    the block lasts at least its issue time), which appear only when the plan has ptxas's numbers; and
    ``dispatch_us``, the time by which the dispatch floor (:func:`dispatch_block_us`) exceeds all of them."""
    terms = stage_terms(gpu, ks, kernel)
    if not terms:
        return terms
    per_sm = blocks_sharing_sm(gpu, ks)         # worked out once: every per-block term below needs it
    cross_stage_overlap(per_sm, ks, terms)
    spill = spill_block_us(gpu, kernel, ks, per_sm)
    if spill:
        terms[0]["spill_us"] = spill
    rest = sum(sum(t.values()) for t in terms)
    issue = issue_block_us(gpu, kernel, ks, per_sm)
    if issue:
        terms[-1]["issue_us"] = max(0.0, issue - rest)
        rest = max(rest, issue)
    dispatch = dispatch_block_us(gpu, ks, per_sm)
    if dispatch > rest:
        terms[-1]["dispatch_us"] = dispatch - rest
    return terms


def cross_stage_overlap(per_sm: int, ks, terms: list) -> None:
    """Add ``cross_stage_us`` (negative) to the stages of ``terms`` (:func:`stage_terms`, in place): the time a
    stage's on-chip work hides behind another stage's memory time, in other blocks of the same SM (``per_sm``:
    the kernel's blocks sharing one SM, :func:`_sharing_sm`).

    Each stage's terms overlap its own memory and on-chip time (``overlap_us``).  In a stage's time ``T``
    the memory pipe alone is busy ``T - on_chip`` and the ALUs alone ``T - memory``.  A stitched kernel's
    stages differ: softmax's first stage loads the row (memory alone), its second computes ``exp`` from
    registers (ALUs alone), its third stores.  Where two or more blocks share an SM they drift apart between
    block barriers, and one block's ``exp`` runs while another's loads wait: the SM's ALU-alone time of one
    stage fills the memory-alone time of another, up to the smaller of the two sums.  Within one block the
    stages follow each other (a block barrier between them), so with one block per SM nothing more is
    hidden; nor across a grid barrier, where every block waits for all.  So per run of stages between grid
    barriers, with ``c >= 2`` blocks per SM::

        hidden = min(sum of ALU-alone times, sum of memory-alone times)

    taken from the stages' memory-alone times in proportion (no stage's time drops below its on-chip
    work).  Charged per stage, an H200's BERT attention softmax stitched into one kernel (6144 blocks of
    1024, 2 per SM) was predicted 252 us against 192 measured, its 51 us of ``exp`` summed on top of its
    187 us of DRAM traffic (``benchmarks/results/2026-11-29-h200``); Inductor's and FusionStitching's fused
    kernels likewise, where XLA's three single-stage kernels were 9% over."""
    if per_sm < 2:
        return
    run: list = []
    for i, (st, t) in enumerate(zip(ks.stages, terms, strict=True)):
        run.append(t)
        if getattr(st, "grid_barriers", 0) or i == len(terms) - 1:
            _hide_across(run)
            run = []


def _hide_across(run: list) -> None:
    """:func:`cross_stage_overlap` on one run of stages between grid barriers."""
    if len(run) < 2:
        return
    alu_alone, memory_alone = [], []
    for t in run:
        memory = t["memory_us"] + t["l2_us"]
        on_chip = t["compute_us"] + t["recompute_us"] + t["shared_us"]
        both = -t["overlap_us"]
        alu_alone.append(max(0.0, on_chip - both))
        memory_alone.append(max(0.0, memory - both))
    hidden = min(sum(alu_alone), sum(memory_alone))
    if hidden <= 0:
        return
    total = sum(memory_alone)
    for t, m in zip(run, memory_alone):
        if m:
            t["cross_stage_us"] = -hidden * m / total


def dispatch_block_us(gpu: GPU, ks, per_sm: int | None = None) -> float:
    """The shortest a wave can last: an SM starts its ``c`` resident blocks one after another, one per
    ``block_dispatch_ns``.  A kernel of tiny blocks is bound by it, not by its bytes: XLA's DIEN softmax
    row reduction (750000 blocks of 32 threads, 32 per SM) took 454 us on an H200, 80 ns per block per SM,
    where its 96 MB at the copy rate take 22 us (``benchmarks/results/2026-11-27-h200``)."""
    per_sm = blocks_sharing_sm(gpu, ks) if per_sm is None else per_sm
    return per_sm * constants(gpu)["block_dispatch_ns"] / 1e3


def stage_block_us(plan, kernel, ks, terms=None) -> list:
    """Per-block time (us) of each stage, in order; library kernels have one pseudo-stage.  ``terms``: the kernel's
    :func:`block_terms`, where the caller has them already (the SIMT model prices each kernel's once, for both
    the timeline and the prediction)."""
    if ks.kind == "library":
        return [library_us(plan.gpu, ks) / max(1, _waves(plan.gpu, ks))]
    terms = block_terms(plan.gpu, kernel, ks) if terms is None else terms
    if not terms:   # a generated kernel with no stages does nothing but start its blocks
        return [constants(plan.gpu)["block_start_ns"] / 1e3]
    return [sum(t.values()) for t in terms]


def per_block_us(plan, kernel, ks) -> float:
    """How long one block of ``kernel`` runs (us), from the counters ``ks``; the scheduler's unit."""
    return sum(stage_block_us(plan, kernel, ks))


def library_us(gpu: GPU, ks) -> float:
    """A vendor GEMM: the roofline max of its compute and its traffic."""
    c = constants(gpu)
    compute = ks.library_flops / (c["fp32_gflops"] * 1e3 * c["library_efficiency"])
    memory = ks.library_bytes / (c["measured_bandwidth_gbs"] * 1e3)
    return max(compute, memory)


def _waves(gpu, ks) -> int:
    return ceil(max(1, ks.grid) / residency(gpu, ks).blocks_per_wave)


def memset_us(gpu: GPU, ks) -> float:
    """Filling atomic result buffers with the reduce's init value before the kernel."""
    if not ks.memset_bytes:
        return 0.0
    c = constants(gpu)
    return c["memset_launch_us"] + ks.memset_bytes / (c["measured_bandwidth_gbs"] * 1e3)


def grid_barrier_count(kernel, ks) -> int:
    """Grid barriers the kernel executes: the executor's count, else the plan's."""
    counted = ks.total("grid_barriers")
    return counted if counted or kernel is None else kernel.global_barriers


def predict_kernel(plan, kernel, ks, per_stage=None) -> None:
    """Fill ``ks.predicted_us``, ``ks.breakdown``, ``ks.blocks_per_wave`` and ``ks.waves`` (``per_stage``: the
    kernel's :func:`block_terms`, where the caller has them)."""
    gpu, c = plan.gpu, constants(plan.gpu)
    check_grid_barrier(gpu, kernel, ks)
    occ = residency(gpu, ks)
    ks.blocks_per_wave, ks.waves = occ.blocks_per_wave, _waves(gpu, ks)
    terms = {"launch_us": c["kernel_launch_us"], "memset_us": memset_us(gpu, ks)}
    if ks.kind == "library":
        terms["library_us"] = library_us(gpu, ks)
    else:
        grid = max(1, ks.grid)
        frac = grid / min(grid, occ.blocks_per_wave)         # fractional waves
        per_stage = block_terms(gpu, kernel, ks) if per_stage is None else per_stage
        block = constants(gpu)["block_start_ns"] / 1e3 if not per_stage else 0.0
        for st in per_stage:
            for name, us in st.items():
                terms[name] = terms.get(name, 0.0) + us * frac
            block += sum(st.values())
        if not per_stage:
            terms["block_start_us"] = block * frac
        terms["tail_us"] = (ks.waves - frac) * block
        imbalance = sum(imbalance_terms(gpu, kernel, ks))
        if imbalance:                                        # only where a stage leaves blocks idle
            terms["imbalance_us"] = imbalance
        terms["grid_barrier_us"] = grid_barrier_count(kernel, ks) * c["grid_barrier_us"]
    ks.breakdown = {k: float(v) for k, v in terms.items()}
    ks.predicted_us = float(sum(terms.values()))


def predict(plan, kernel_stats, terms=None) -> None:
    """Fill ``predicted_us`` and ``breakdown`` for every kernel (``kernel_stats`` in plan order; ``terms``: each
    kernel's :func:`block_terms`, from :func:`kernels_block_terms`, or None to work them out)."""
    if len(kernel_stats) != len(plan.kernels):
        raise AStitchError(f"{len(kernel_stats)} kernel stats for a plan of {len(plan.kernels)} kernels: "
                           "pass one KernelStats per plan kernel, in plan order")
    for i, (kernel, ks) in enumerate(zip(plan.kernels, kernel_stats)):
        predict_kernel(plan, kernel, ks, None if terms is None else terms[i])


def kernels_block_terms(plan, kernel_stats) -> list:
    """:func:`block_terms` of every generated kernel (None for a library kernel), in plan order: worked out once
    and handed to both the timeline and the prediction."""
    return [None if ks.kind == "library" else block_terms(plan.gpu, kernel, ks)
            for kernel, ks in zip(plan.kernels, kernel_stats)]


def format_breakdown(ks, min_us: float = 0.005) -> str:
    """``launch 5.00 + memory 3.21 - overlap 0.50 + ... = 9.87 us`` (terms below ``min_us`` left out; the
    overlaps, negative, subtracted)."""
    text = " ".join(f"{'-' if v < 0 else '+'} {k[:-3]} {abs(v):.2f}" for k, v in ks.breakdown.items()
                    if abs(v) >= min_us)
    return text.removeprefix("+ ") + f" = {ks.predicted_us:.2f} us"
