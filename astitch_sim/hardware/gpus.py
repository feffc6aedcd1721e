"""GPU presets and CUDA's occupancy rules.

Why a compiler simulator needs this
-----------------------------------
AStitch's central trade-off is *parallelism versus locality*.  Stitching many
memory-intensive ops into one kernel keeps intermediates on chip (shared
memory, registers), but every byte of shared memory and every register a block
holds lowers how many blocks an SM can keep resident.  When a kernel's grid
needs more blocks than fit on the GPU at once, the blocks run in *waves*, and
a grid-wide barrier (which needs every block resident at the same time) becomes
impossible.  The paper's example: on a V100, blocks of 1024 threads fit two per
SM, so "V100 could run 160 such blocks" in one wave.

So the simulator has to answer, for a block shape and its resource use:

* how many blocks fit on one SM (:meth:`GPU.blocks_per_sm`),
* which resource stopped us from fitting more (:meth:`GPU.occupancy`),
* how many blocks fit on the whole GPU at once (:meth:`GPU.blocks_per_wave`),
* how many waves a grid needs (:meth:`GPU.waves`).

The rules are the ones NVIDIA's occupancy calculator (``cudaOccupancy.h``)
applies; each limit is computed separately and the smallest one wins:

1. **threads / warps** - the SM schedules whole warps, so a block's threads
   are rounded up to a multiple of the warp size (33 threads cost 2 warps).
   An SM holds at most ``max_threads_per_sm`` threads and
   ``max_warps_per_sm`` warps.
2. **blocks** - an SM holds at most ``max_blocks_per_sm`` blocks however small
   they are (this is what limits tiny 32-thread blocks).
3. **registers** - registers are handed out per warp, in chunks of
   ``register_alloc_unit`` (256).  A warp of threads using 40 registers needs
   40*32 = 1280 registers, rounded up to 1280 (already a multiple of 256);
   41 registers would need 1312, rounded up to 1536.  The register file is
   split evenly between the SM's ``sm_partitions`` (4) sub-partitions (warp
   schedulers), and a warp lives entirely in one of them, so the number of
   warps that fit is ``floor(registers_per_sm / 4 / per_warp) * 4``, not
   ``floor(registers_per_sm / per_warp)``.  This is exactly what
   ``cudaOccupancy.h`` does, and it matters: with 40 registers/thread the
   simple formula says 51 warps fit, the real one says 48.  When the per-warp
   allocation divides the partition evenly (32, 64, 128 registers...) the two
   agree.  A block also must not need more than 64 Ki registers by itself
   (the per-block limit, equal to ``registers_per_sm`` on all presets here),
   with its warps counted as if spread over all 4 partitions.
4. **shared memory** - each block's shared memory, plus a per-block amount the
   driver reserves (1 KiB on compute capability >= 8.0, 0 on Volta), is rounded
   up to ``shared_alloc_unit`` and the SM's shared memory is divided by it.
   On cc >= 8.0 the reservation applies to *every* block, even one that uses no
   shared memory.  We assume the driver picked the largest shared-memory
   carveout (``shared_per_sm``), which gives the most blocks possible.

Every constant lives in the preset table at the bottom of this file, with a
comment saying where it comes from.  Values marked *estimate* are placeholders
to be calibrated against real measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from astitch_sim.errors import AStitchError

__all__ = ["GPU", "Occupancy", "GPUS", "gpu", "LIMITING_FACTORS"]

#: Names of the resources that can limit blocks per SM.  When several limits
#: tie, the one listed first is reported as *the* limiting factor.
LIMITING_FACTORS = ("threads", "blocks", "warps", "registers", "shared")

KIB = 1024
MIB = 1024 * 1024


#: occupancy reports kept per GPU preset (by threads, shared bytes, registers): at most this many
OCCUPANCY_CACHE = 1 << 16


def _round_up(value: int, unit: int) -> int:
    """Round ``value`` up to a whole number of ``unit`` (hardware allocation)."""
    return -(-value // unit) * unit


def _check_int(name: str, value, fix: str) -> int:
    # bool is an int subclass; True threads per block is a bug, not a 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise AStitchError(
            f"{name} must be an integer, got {value!r} ({type(value).__name__}); {fix}"
        )
    return value


@dataclass(frozen=True)
class Occupancy:
    """Result of the occupancy calculation for one block configuration.

    ``occupancy`` is the fraction of the SM's warp slots that are busy
    (``active_warps / max_warps_per_sm``).  High occupancy helps a
    memory-bound kernel hide DRAM latency, which is why AStitch cares about
    keeping blocks small enough to stay resident.  ``limits`` shows every
    resource's own limit, so you can see how close the others came.
    """

    blocks_per_sm: int
    limiting_factor: str
    active_warps: int
    occupancy: float
    blocks_per_wave: int
    warps_per_block: int = 0
    limits: dict = field(default_factory=dict, hash=False)

    def __str__(self) -> str:
        return (
            f"{self.blocks_per_sm} blocks/SM (limited by {self.limiting_factor}), "
            f"{self.active_warps} active warps, occupancy {self.occupancy:.0%}, "
            f"{self.blocks_per_wave} blocks/wave"
        )


@dataclass(frozen=True)
class GPU:
    """One GPU model: the per-SM limits that decide occupancy, plus the
    bandwidth and overhead numbers the cost model uses.

    Instances are immutable; use :data:`GPUS` / :func:`gpu` to get the presets
    and ``dataclasses.replace`` to make a variant (e.g. a calibrated launch
    overhead).
    """

    name: str
    sms: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_warps_per_sm: int
    max_threads_per_block: int
    warp_size: int
    registers_per_sm: int
    max_registers_per_thread: int
    register_alloc_unit: int
    shared_per_sm: int
    shared_per_block_default: int
    shared_per_block_optin: int
    shared_alloc_unit: int
    shared_reserved_per_block: int
    dram_bandwidth_gbs: float
    measured_bandwidth_gbs: float
    l2_bytes: int
    #: bandwidth of L2 *hits* (reads served by the L2 without DRAM), GB/s: the
    #: cost model charges a tensor re-read while it is L2-resident at this rate
    #: (:mod:`astitch_sim.simt.l2`).  Sources per preset below.
    l2_bandwidth_gbs: float
    kernel_launch_us: float
    grid_barrier_us: float
    block_barrier_ns: float
    clock_ghz: float
    fp32_gflops: float
    compute_capability: tuple[int, int]
    #: SM sub-partitions (warp schedulers) the register file is split between;
    #: 4 on Volta, Ampere and Hopper.
    sm_partitions: int = 4
    #: bytes of the SM's one SRAM that serves both the L1 data cache and shared
    #: memory (what the shared carveout leaves is L1): 128 KiB on Volta, 192 KiB on
    #: A100, 256 KiB on Hopper.  The L2 model lets a block's re-read of what an
    #: earlier stage of it read hit there (:mod:`astitch_sim.simt.l2`); 0: not modelled.
    l1_shared_per_sm: int = 0

    # ------------------------------------------------------------------
    # validation
    # ------------------------------------------------------------------
    def _validate(self, threads_per_block, shared_bytes, registers_per_thread):
        threads_per_block = _check_int(
            "threads_per_block", threads_per_block, "pass a whole number of threads"
        )
        shared_bytes = _check_int(
            "shared_bytes", shared_bytes, "pass a whole number of bytes"
        )
        registers_per_thread = _check_int(
            "registers_per_thread", registers_per_thread,
            "pass a whole number of registers",
        )
        if not 1 <= threads_per_block <= self.max_threads_per_block:
            raise AStitchError(
                f"threads_per_block={threads_per_block} is out of range on "
                f"{self.name}: a block has 1 to {self.max_threads_per_block} "
                f"threads; use more blocks with fewer threads each"
            )
        if not 1 <= registers_per_thread <= self.max_registers_per_thread:
            raise AStitchError(
                f"registers_per_thread={registers_per_thread} is out of range on "
                f"{self.name}: a thread uses 1 to {self.max_registers_per_thread} "
                f"registers; the compiler spills to local memory beyond that"
            )
        if shared_bytes < 0:
            raise AStitchError(
                f"shared_bytes={shared_bytes} is negative; pass 0 for a kernel "
                f"that uses no shared memory"
            )
        if shared_bytes > self.shared_per_block_optin:
            raise AStitchError(
                f"shared_bytes={shared_bytes} exceeds the {self.name} per-block "
                f"maximum of {self.shared_per_block_optin} bytes "
                f"({self.shared_per_block_optin / KIB:g} KiB, with the "
                f"cudaFuncAttributeMaxDynamicSharedMemorySize opt-in); keep less "
                f"data on chip per block, e.g. split the work over more blocks"
            )
        return threads_per_block, shared_bytes, registers_per_thread

    # ------------------------------------------------------------------
    # the individual limits
    # ------------------------------------------------------------------
    def _registers_per_warp(self, registers_per_thread: int) -> int:
        """Registers one warp is allocated: rounded up to the allocation unit."""
        return _round_up(registers_per_thread * self.warp_size, self.register_alloc_unit)

    def _registers_per_block(self, warps_per_block: int, registers_per_thread: int) -> int:
        """Registers the hardware's per-block check counts for one block.

        The check assumes the block's warps are spread over all sub-partitions,
        so the warp count is rounded up to a multiple of ``sm_partitions``.
        """
        return self._registers_per_warp(registers_per_thread) * _round_up(
            warps_per_block, self.sm_partitions
        )

    def _register_limit(self, warps_per_block: int, registers_per_thread: int) -> int:
        """Blocks per SM allowed by the register file (``cudaOccupancy.h`` rule)."""
        per_warp = self._registers_per_warp(registers_per_thread)
        # Per-block limit (64 Ki registers, equal to registers_per_sm here).
        if self._registers_per_block(warps_per_block, registers_per_thread) > self.registers_per_sm:
            return 0
        per_partition = self.registers_per_sm // self.sm_partitions
        warps_per_sm = (per_partition // per_warp) * self.sm_partitions
        return warps_per_sm // warps_per_block

    def _shared_per_block_allocated(self, shared_bytes: int) -> int:
        """Bytes of SM shared memory one block actually occupies."""
        total = shared_bytes + self.shared_reserved_per_block
        if total == 0:
            return 0
        return _round_up(total, self.shared_alloc_unit)

    def _limits(self, threads_per_block, shared_bytes, registers_per_thread):
        threads_per_block, shared_bytes, registers_per_thread = self._validate(
            threads_per_block, shared_bytes, registers_per_thread
        )
        warps_per_block = -(-threads_per_block // self.warp_size)
        shared_alloc = self._shared_per_block_allocated(shared_bytes)
        limits = {
            "threads": self.max_threads_per_sm // (warps_per_block * self.warp_size),
            "blocks": self.max_blocks_per_sm,
            "warps": self.max_warps_per_sm // warps_per_block,
            "registers": self._register_limit(warps_per_block, registers_per_thread),
            # No shared memory at all (only possible with no reservation):
            # shared memory does not limit, the block limit always binds first.
            "shared": (self.shared_per_sm // shared_alloc) if shared_alloc
            else self.max_blocks_per_sm,
        }
        return warps_per_block, limits, (threads_per_block, shared_bytes,
                                         registers_per_thread, shared_alloc)

    # ------------------------------------------------------------------
    # public API
    # ------------------------------------------------------------------
    def occupancy(self, threads_per_block: int, shared_bytes: int = 0,
                  registers_per_thread: int = 32) -> Occupancy:
        """Full occupancy report: blocks per SM, what limits it, warps, waves.

        Raises :class:`AStitchError` for out-of-range inputs and for a block
        that cannot fit on an SM at all (too many registers in total).  A GPU
        preset is immutable, so each launch shape's report is worked out once
        (the SIMT model asks it a dozen times per kernel: a training step's
        thousand unfused kernels asked 12,000 times per simulation).
        """
        occ = self.occupancy_shared(threads_per_block, shared_bytes, registers_per_thread)
        return replace(occ, limits=dict(occ.limits))     # each caller its own dict of limits

    def occupancy_shared(self, threads_per_block: int, shared_bytes: int = 0,
                         registers_per_thread: int = 32) -> Occupancy:
        """:meth:`occupancy`'s report itself, not a copy: one object for every caller of this launch shape, to
        read and never change (the SIMT model's cost, L2 and barrier checks, a dozen times per kernel).  Kept
        per preset, by launch shape (the preset is immutable; hashing its thirty fields per ask cost more
        than the lookup saved)."""
        args = (threads_per_block, shared_bytes, registers_per_thread)
        if not (type(threads_per_block) is int and type(shared_bytes) is int and type(registers_per_thread) is int):
            return self._occupancy(*args)     # (True == 1: only plain ints are looked up; the rest are checked,
                                              # and refused where they are no whole number)
        reports = self.__dict__.get("_reports")
        if reports is None:                           # (frozen: set beside the fields, outside eq and hash)
            reports = self.__dict__["_reports"] = {}
        occ = reports.get(args)
        if occ is None:
            occ = self._occupancy(*args)
            if len(reports) < OCCUPANCY_CACHE:
                reports[args] = occ
        return occ

    def _occupancy(self, threads_per_block, shared_bytes, registers_per_thread) -> Occupancy:
        warps_per_block, limits, (threads, shared, regs, shared_alloc) = \
            self._limits(threads_per_block, shared_bytes, registers_per_thread)
        blocks = min(limits.values())
        if blocks == 0:
            # Only the register limit can reach 0: shared memory is bounded by
            # the opt-in maximum, which is chosen so that one block fits.
            best = self._max_registers_that_fit(warps_per_block)
            hint = (f"cap registers at {best} per thread (__launch_bounds__ or "
                    f"-maxrregcount) or use fewer threads per block"
                    if best else "use fewer threads per block")
            raise AStitchError(
                f"no block of {threads} threads x {regs} registers/thread fits on "
                f"a {self.name} SM: it needs "
                f"{self._registers_per_block(warps_per_block, regs)} registers "
                f"but a block may use at most {self.registers_per_sm}; "
                f"{hint}"
            )
        factor = next(f for f in LIMITING_FACTORS if limits[f] == blocks)
        active_warps = blocks * warps_per_block
        return Occupancy(
            blocks_per_sm=blocks,
            limiting_factor=factor,
            active_warps=active_warps,
            occupancy=active_warps / self.max_warps_per_sm,
            blocks_per_wave=blocks * self.sms,
            warps_per_block=warps_per_block,
            limits=limits,
        )

    def max_registers_for_block(self, threads_per_block: int) -> int:
        """The most registers per thread with which one block of ``threads_per_block`` still fits on an SM
        (the register file's per-block check): 64 for 1024 threads on every preset, 255 for 256.  A kernel
        whose code needs more is compiled under this cap (``__launch_bounds__``) and spills the rest."""
        threads_per_block, _, _ = self._validate(threads_per_block, 0, 1)
        return self._max_registers_that_fit(math.ceil(threads_per_block / self.warp_size))

    def _max_registers_that_fit(self, warps_per_block: int) -> int:
        for regs in range(self.max_registers_per_thread, 0, -1):
            if self._register_limit(warps_per_block, regs) > 0:
                return regs
        return 0

    def blocks_per_sm(self, threads_per_block: int, shared_bytes: int = 0,
                      registers_per_thread: int = 32) -> int:
        """How many blocks of this shape can be resident on one SM at once."""
        return self.occupancy_shared(
            threads_per_block, shared_bytes, registers_per_thread
        ).blocks_per_sm

    def blocks_per_wave(self, threads_per_block: int, shared_bytes: int = 0,
                        registers_per_thread: int = 32) -> int:
        """How many blocks the whole GPU runs concurrently (one *wave*).

        A grid-wide barrier is only safe if every block of the grid is
        resident at once, i.e. the grid has at most this many blocks.
        """
        return self.blocks_per_sm(
            threads_per_block, shared_bytes, registers_per_thread
        ) * self.sms

    def waves(self, blocks: int, threads_per_block: int, shared_bytes: int = 0,
              registers_per_thread: int = 32) -> int:
        """Number of waves a grid of ``blocks`` blocks needs:
        ``ceil(blocks / blocks_per_wave)``.  A grid of 161 blocks of 1024
        threads on a V100 needs 2 waves, and the second wave is nearly empty -
        the "tail effect" that wastes most of the GPU for its duration."""
        blocks = _check_int("blocks", blocks, "pass a whole number of blocks")
        if blocks < 0:
            raise AStitchError(
                f"blocks={blocks} is negative; a grid has 0 or more blocks"
            )
        per_wave = self.blocks_per_wave(
            threads_per_block, shared_bytes, registers_per_thread
        )
        return math.ceil(blocks / per_wave)

    def describe(self) -> str:
        """A few readable lines summarising the preset."""
        cc = ".".join(str(c) for c in self.compute_capability)
        return "\n".join([
            f"{self.name} (compute capability {cc}): {self.sms} SMs at "
            f"{self.clock_ghz:g} GHz, {self.fp32_gflops / 1000:g} TFLOP/s fp32",
            f"  per SM: {self.max_threads_per_sm} threads, {self.max_warps_per_sm} "
            f"warps, {self.max_blocks_per_sm} blocks, {self.registers_per_sm} "
            f"registers, {self.shared_per_sm / KIB:g} KiB shared"
            + (f" (of {self.l1_shared_per_sm / KIB:g} KiB L1/shared)" if self.l1_shared_per_sm else ""),
            f"  per block: {self.max_threads_per_block} threads, "
            f"{self.shared_per_block_default / KIB:g} KiB shared "
            f"({self.shared_per_block_optin / KIB:g} KiB opt-in, "
            f"{self.shared_reserved_per_block} B reserved)",
            f"  memory: {self.dram_bandwidth_gbs:g} GB/s datasheet, "
            f"{self.measured_bandwidth_gbs:g} GB/s effective, "
            f"{self.l2_bytes / MIB:g} MiB L2 ({self.l2_bandwidth_gbs:g} GB/s on hits)",
            f"  overheads: kernel launch {self.kernel_launch_us:g} us, grid "
            f"barrier {self.grid_barrier_us:g} us, __syncthreads "
            f"{self.block_barrier_ns:g} ns",
        ])


# ----------------------------------------------------------------------
# Preset table: every hardware constant lives here.
# Sources: NVIDIA CUDA C Programming Guide, "Compute Capabilities" table
# (per-SM limits, register/shared allocation rules), the V100 / A100 / H100 /
# H200 datasheets and whitepapers (SMs, clocks, bandwidth, L2, FLOP/s), and
# the AStitch paper (ASPLOS'22) for the V100 grid-barrier cost.
# ----------------------------------------------------------------------

# Limits shared by cc 7.0, 8.0 and 9.0 (CUDA Programming Guide, Table
# "Technical Specifications per Compute Capability").
_COMMON = dict(
    max_threads_per_sm=2048,        # cc 7.0 / 8.0 / 9.0
    max_blocks_per_sm=32,           # cc 7.0 / 8.0 / 9.0
    max_warps_per_sm=64,            # 2048 threads / 32
    max_threads_per_block=1024,     # all cc >= 2.0
    warp_size=32,
    registers_per_sm=65536,         # 64 Ki 32-bit registers (also the per-block max)
    max_registers_per_thread=255,
    register_alloc_unit=256,        # registers are allocated per warp in units of 256
    shared_per_block_default=48 * KIB,  # static limit without the opt-in attribute
    sm_partitions=4,                # 4 warp schedulers / register-file banks per SM
)

GPUS: dict[str, GPU] = {
    "V100": GPU(
        name="V100",
        sms=80,                          # V100 SXM2 datasheet
        shared_per_sm=96 * KIB,          # max carveout of the 128 KiB L1/shared (cc 7.0)
        l1_shared_per_sm=128 * KIB,      # Volta tuning guide: 128 KB combined L1/shared per SM
        shared_per_block_optin=96 * KIB, # cc 7.0 opt-in maximum
        shared_alloc_unit=256,           # cc 7.x shared allocation granularity
        shared_reserved_per_block=0,     # no driver reservation before cc 8.0
        dram_bandwidth_gbs=900.0,        # V100 SXM2 datasheet, HBM2
        measured_bandwidth_gbs=810.0,    # ESTIMATE: ~90% of datasheet, not measured here
        l2_bytes=6 * MIB,                # Volta whitepaper
        l2_bandwidth_gbs=2155.0,         # measured L2 load throughput, Jia et al., "Dissecting the NVIDIA
                                         # Volta GPU Architecture via Microbenchmarking" (arXiv:1804.06826,
                                         # 2018); 69% of the 2048 B/clk x 1.53 GHz = 3133 GB/s peak.
                                         # The figure was taken from memory of that report and has not been
                                         # checked against its text yet: treat it as an estimate until it is
        kernel_launch_us=5.0,            # raw CUDA launch ~5 us; the paper's ~10 us per
                                         # kernel in TensorFlow includes framework overhead
        grid_barrier_us=2.6,             # paper measured 2.5-2.7 us on V100
        block_barrier_ns=26.0,           # ESTIMATE: ~40 cycles at 1.53 GHz
        clock_ghz=1.53,                  # boost clock, datasheet
        fp32_gflops=15_700.0,            # 15.7 TFLOP/s fp32, datasheet
        compute_capability=(7, 0),
        **_COMMON,
    ),
    "A100": GPU(
        name="A100",
        sms=108,                         # A100 SXM4 80GB datasheet
        shared_per_sm=164 * KIB,         # 167936 B, max carveout (cc 8.0)
        l1_shared_per_sm=192 * KIB,      # Ampere tuning guide: 192 KB combined L1/shared per SM (A100)
        shared_per_block_optin=163 * KIB,  # 166912 B = 164 KiB - 1 KiB reserved
        shared_alloc_unit=128,           # cc 8.x shared allocation granularity
        shared_reserved_per_block=1 * KIB,  # driver reserves 1 KiB per block on cc >= 8.0
        dram_bandwidth_gbs=2039.0,       # A100 80GB SXM4 datasheet, HBM2e
        measured_bandwidth_gbs=1835.0,   # ESTIMATE: ~90% of datasheet, not measured here
        l2_bytes=40 * MIB,               # Ampere whitepaper
        l2_bandwidth_gbs=4967.0,         # ESTIMATE: the A100 whitepaper's L2 read bandwidth, 5120 B/clk
                                         # (2.3x V100's 2048 B/clk x clock), x 1.41 GHz = 7219 GB/s peak,
                                         # x V100's measured/peak ratio 2155/3133 (Jia et al.); not measured
        kernel_launch_us=3.0,            # ESTIMATE, to be calibrated
        grid_barrier_us=2.0,             # ESTIMATE, to be calibrated
        block_barrier_ns=28.0,           # ESTIMATE: ~40 cycles at 1.41 GHz
        clock_ghz=1.41,                  # boost clock, datasheet
        fp32_gflops=19_500.0,            # 19.5 TFLOP/s fp32, datasheet
        compute_capability=(8, 0),
        **_COMMON,
    ),
    "H100": GPU(
        name="H100",
        sms=132,                         # H100 SXM5 datasheet
        shared_per_sm=228 * KIB,         # 233472 B, max carveout (cc 9.0)
        l1_shared_per_sm=256 * KIB,      # Hopper tuning guide: 256 KB combined L1/shared per SM
        shared_per_block_optin=227 * KIB,  # 232448 B = 228 KiB - 1 KiB reserved
        shared_alloc_unit=128,           # cc 9.0 shared allocation granularity
        shared_reserved_per_block=1 * KIB,  # driver reserves 1 KiB per block on cc >= 8.0
        dram_bandwidth_gbs=3350.0,       # H100 SXM5 datasheet, HBM3
        measured_bandwidth_gbs=3000.0,   # measured device-to-device copy (~3.0 TB/s)
        l2_bytes=50 * MIB,               # Hopper whitepaper
        l2_bandwidth_gbs=6975.0,         # ESTIMATE: NVIDIA gives no L2 bytes/clk for Hopper; assumed A100's
                                         # 5120 B/clk x 1.98 GHz = 10138 GB/s peak, x V100's measured/peak
                                         # ratio 2155/3133 (Jia et al.); not measured
        kernel_launch_us=3.0,            # ESTIMATE, to be calibrated
        grid_barrier_us=2.0,             # ESTIMATE, to be calibrated
        block_barrier_ns=20.0,           # ESTIMATE: ~40 cycles at 1.98 GHz
        clock_ghz=1.98,                  # boost clock, datasheet
        fp32_gflops=67_000.0,            # 67 TFLOP/s fp32, datasheet
        compute_capability=(9, 0),
        **_COMMON,
    ),
    "H200": GPU(
        name="H200",
        sms=132,                         # same GH100 die as H100 SXM5
        shared_per_sm=228 * KIB,         # as H100 (cc 9.0)
        l1_shared_per_sm=256 * KIB,      # as H100
        shared_per_block_optin=227 * KIB,  # as H100
        shared_alloc_unit=128,           # as H100
        shared_reserved_per_block=1 * KIB,  # as H100
        dram_bandwidth_gbs=4800.0,       # H200 datasheet, HBM3e
        measured_bandwidth_gbs=4300.0,   # measured device-to-device copy (~4.3 TB/s)
        l2_bytes=60 * MIB,               # measured: 62914560 bytes (the probe, both H200 windows)
        l2_bandwidth_gbs=6975.0,         # ESTIMATE: as H100 (same GH100 die and L2)
        kernel_launch_us=3.0,            # ESTIMATE; the cost model uses the measured 2.94 (cost.COST_CONSTANTS)
        grid_barrier_us=2.0,             # ESTIMATE; the cost model uses the measured 5.31 (cost.COST_CONSTANTS)
        block_barrier_ns=20.0,           # ESTIMATE: ~40 cycles at 1.98 GHz
        clock_ghz=1.98,                  # as H100
        fp32_gflops=67_000.0,            # as H100
        compute_capability=(9, 0),
        **_COMMON,
    ),
}


def gpu(name_or_gpu) -> GPU:
    """Look up a preset by name, case-insensitively (``"h100"`` -> H100).

    Passing a :class:`GPU` returns it unchanged, so functions can accept
    either a name or a (possibly customised) GPU object.
    """
    if isinstance(name_or_gpu, GPU):
        return name_or_gpu
    known = ", ".join(GPUS)
    if not isinstance(name_or_gpu, str):
        raise AStitchError(
            f"expected a GPU name or GPU object, got {type(name_or_gpu).__name__} "
            f"{name_or_gpu!r}; known GPUs: {known}"
        )
    key = name_or_gpu.strip().upper()
    if key not in GPUS:
        raise AStitchError(
            f"unknown GPU {name_or_gpu!r}; known GPUs: {known} "
            f"(or build a GPU(...) object for other hardware)"
        )
    return GPUS[key]
