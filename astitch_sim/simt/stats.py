"""Counters the SIMT model keeps: per stage, per kernel, per plan (the interface between
the executor, which counts, and the scheduler / cost model, which turn counts into time).

Every counter is exact for the plan it describes: bytes and 32-byte sectors of global
memory (sectors from the addresses each warp touches in one load/store instruction),
shared-memory bytes and bank conflicts, flops (recomputation included), barriers, warp shuffles.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

SECTOR = 32


@dataclass
class TensorTraffic:
    """One global buffer's traffic in one stage (or one library kernel): what the L2 model
    (:mod:`astitch_sim.simt.l2`) reads, and what it decided.

    ``nbytes`` is the buffer's size; ``l2_read_bytes`` the part of the read sectors' bytes served
    by the L2 (the rest came from DRAM); ``resident_since`` says which earlier touch left the
    tensor in the L2 (``"k3"``: kernel 3; ``"s0"``: stage 0 of this kernel; ``"r"``: this stage's own
    first read; ``""``: none); ``l1_read_bytes`` the part the SM's L1 served (a small broadcast operand read
    again within the stage), charged to neither DRAM nor the L2."""
    nbytes: int
    read_sectors: int = 0
    written_sectors: int = 0
    l2_read_bytes: float = 0.0
    resident_since: str = ""
    l1_read_bytes: float = 0.0

    @property
    def read_bytes(self) -> int:
        """Bytes the read sectors move (32 per sector)."""
        return SECTOR * self.read_sectors


@dataclass
class StageStats:
    """What one stage of one kernel did, summed over all its blocks and threads."""
    stage: int
    dominant: str
    elements: int = 0                    # domain elements visited
    global_bytes_read: int = 0
    global_bytes_written: int = 0
    global_sectors_read: int = 0         # 32-byte sectors touched, per warp instruction (coalescing)
    global_sectors_written: int = 0
    global_requests: int = 0             # warp-level load/store instructions to global memory
    shared_bytes_read: int = 0
    shared_bytes_written: int = 0
    shared_bank_conflicts: int = 0       # extra shared-memory wavefronts caused by bank conflicts
    register_reuse: int = 0              # values a thread used again from registers instead of reloading
    flops: int = 0                       # all arithmetic, recomputation included
    expensive_flops: int = 0             # part of ``flops`` spent in expensive (SFU-class) ops
    recomputed_flops: int = 0            # part of ``flops`` that recomputes values already computed elsewhere
    atomics: int = 0                     # atomic read-modify-writes to global memory
    block_barriers: int = 0              # barrier instances executed (one per block per barrier point)
    grid_barriers: int = 0               # grid-wide barriers (one per barrier point)
    tree_barriers: int = 0               # block barriers inside shared-memory reduction trees (per block, per task trip)
    shared_requests: int = 0             # warp-level load/store instructions to shared memory (regional values)
    shuffles: int = 0                    # warp shuffle instructions (shfl_xor) of reduce_scheme="shuffle" (per warp)
    shuffle_barriers: int = 0            # block barriers of shuffle reductions whose tasks span warps (per block, per trip)
    tensors: dict = field(default_factory=dict)   # global buffer name -> TensorTraffic (for the L2 model)
    l2_read_bytes: float = 0.0           # read-sector bytes served by the L2, not DRAM (filled by simt/l2.py)
    l1_read_bytes: float = 0.0           # read-sector bytes an SM's L1 served: re-reads of a small operand (simt/l2.py)
    l2_unordered_bytes: float = 0.0      # part of l2_read_bytes an earlier stage's *other* blocks left, no grid barrier
                                         # between: when they read it is not known, so the cost model waits DRAM's
                                         # round trip for it (simt/l2.py, simt/cost.py)


@dataclass
class KernelStats:
    name: str
    kind: str                            # generated | library
    grid: int
    block: int
    shared_bytes: int
    registers_per_thread: int
    blocks_per_wave: int = 0
    waves: int = 0
    stages: list = field(default_factory=list)       # StageStats
    library_flops: int = 0               # library kernels: matrix-product flops
    library_bytes: int = 0               # library kernels: operand and result bytes
    library_bytes_written: int = 0       # library kernels: the result's bytes (part of library_bytes)
    memset_bytes: int = 0                # result buffers filled with a reduce's init value before atomics
    library_tensors: dict = field(default_factory=dict)   # library kernels: buffer name -> TensorTraffic
    predicted_us: float = 0.0            # filled by the cost model
    breakdown: dict = field(default_factory=dict)    # cost-model terms in microseconds

    def total(self, name: str) -> int:
        return sum(getattr(s, name) for s in self.stages)

    @property
    def global_bytes_read(self) -> int:
        lib = self.library_bytes - self.library_bytes_written if self.kind == "library" else 0
        return self.total("global_bytes_read") + lib

    @property
    def global_bytes_written(self) -> int:
        """Stores, atomics, the library result, and the init-value fill of atomic result buffers."""
        lib = self.library_bytes_written if self.kind == "library" else 0
        return self.total("global_bytes_written") + lib + self.memset_bytes

    @property
    def global_bytes(self) -> int:
        return self.global_bytes_read + self.global_bytes_written

    @property
    def l2_read_bytes(self) -> float:
        """Bytes of global reads the L2 served (resident tensors re-read); DRAM moved the rest."""
        return sum(s.l2_read_bytes for s in self.stages)

    @property
    def l1_read_bytes(self) -> float:
        """Bytes of global reads an SM's L1 served (a small operand read again within a stage)."""
        return sum(s.l1_read_bytes for s in self.stages)

    @property
    def dram_bytes(self) -> float:
        """Bytes the cost model charges at DRAM bandwidth: the sectors' bytes (or, for counters without
        sectors, the bytes) read and written, the library's traffic and the memset, less the L2 and L1 hits."""
        sectors = self.total("global_sectors_read") + self.total("global_sectors_written")
        body = SECTOR * sectors if sectors else self.total("global_bytes_read") + self.total("global_bytes_written")
        lib = self.library_bytes if self.kind == "library" else 0
        return body + lib + self.memset_bytes - self.l2_read_bytes - self.l1_read_bytes

    @property
    def shared_bytes_moved(self) -> int:
        return self.total("shared_bytes_read") + self.total("shared_bytes_written")

    @property
    def flops(self) -> int:
        return self.total("flops") + self.library_flops


@dataclass
class SimStats:
    """Whole-plan totals; the names docs/architecture.md promises (``res.stats.global_bytes`` ...)."""
    kernels: list = field(default_factory=list)      # KernelStats

    @property
    def kernel_launches(self) -> int:
        return len(self.kernels)

    @property
    def global_bytes_read(self) -> int:
        return sum(k.global_bytes_read for k in self.kernels)

    @property
    def global_bytes_written(self) -> int:
        return sum(k.global_bytes_written for k in self.kernels)

    @property
    def global_bytes(self) -> int:
        return self.global_bytes_read + self.global_bytes_written

    @property
    def global_sectors(self) -> int:
        return sum(k.total("global_sectors_read") + k.total("global_sectors_written") for k in self.kernels)

    @property
    def shared_bytes(self) -> int:
        return sum(k.shared_bytes_moved for k in self.kernels)

    @property
    def dram_bytes(self) -> float:
        return sum(k.dram_bytes for k in self.kernels)

    @property
    def l2_read_bytes(self) -> float:
        return sum(k.l2_read_bytes for k in self.kernels)

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.kernels)

    @property
    def predicted_us(self) -> float:
        return sum(k.predicted_us for k in self.kernels)

    @property
    def waves(self) -> int:
        return sum(k.waves for k in self.kernels)

    @property
    def grid_barriers(self) -> int:
        return sum(k.total("grid_barriers") for k in self.kernels)

    @property
    def block_barriers(self) -> int:
        return sum(k.total("block_barriers") for k in self.kernels)

    @property
    def reduction_barriers(self) -> int:
        """Block barriers inside reductions: the tree's (one per fold) and the shuffle's (one per task spanning warps)."""
        return sum(k.total("tree_barriers") + k.total("shuffle_barriers") for k in self.kernels)

    @property
    def shuffles(self) -> int:
        return sum(k.total("shuffles") for k in self.kernels)

    def as_dict(self) -> dict:
        keys = ["kernel_launches", "global_bytes", "global_bytes_read", "global_bytes_written", "global_sectors",
                "dram_bytes", "l2_read_bytes", "shared_bytes", "flops", "predicted_us", "waves", "grid_barriers", "block_barriers",
                "reduction_barriers", "shuffles"]
        return {k: getattr(self, k) for k in keys}


STAGE_COUNTERS = [f.name for f in fields(StageStats) if f.name not in ("stage", "dominant", "tensors")]
