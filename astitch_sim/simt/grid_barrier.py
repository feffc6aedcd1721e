"""The rule a grid barrier must keep: every block of the grid resident at once.

Both the cost model (:mod:`.cost`, pricing one kernel) and the wave scheduler
(:mod:`.schedule`, laying out the timeline) refuse a kernel that breaks it, so the
rule lives here, below both: :mod:`.schedule` builds on :mod:`.cost`, and neither
needs the other for this.
"""
from __future__ import annotations

from math import ceil

from ..errors import AStitchError
from ..plan.vocabulary import Barrier


def barrier_counts(kernel, ks) -> list:
    """Grid barriers after each stage: the executor's counters, else the plan's structure."""
    counted = [s.grid_barriers for s in ks.stages]
    if sum(counted) or kernel is None or kernel.kind == "library":
        return counted
    planned = [int(s.barrier_after == Barrier.GRID) + s.grid_syncs for s in kernel.stages]
    return planned if len(planned) == len(counted) or not counted else counted


def check_grid_barrier(gpu, kernel, ks) -> None:
    """Raise AStitchError if a kernel with a grid barrier launches more blocks than can be resident."""
    barriers = max(sum(barrier_counts(kernel, ks)), kernel.global_barriers if kernel is not None else 0)
    if not barriers:
        return
    occ = gpu.occupancy_shared(ks.block, ks.shared_bytes, ks.registers_per_thread)
    per_wave = occ.blocks_per_wave
    if ks.grid <= per_wave:
        return
    raise AStitchError(
        f"kernel {ks.name!r} would deadlock on {gpu.name}: it has {barriers} grid barrier(s) but launches "
        f"{ks.grid} blocks, and only {per_wave} can be resident at once ({occ.blocks_per_sm} per SM x "
        f"{gpu.sms} SMs for {ks.block} threads, {ks.shared_bytes} B shared, {ks.registers_per_thread} "
        f"registers/thread; limited by {occ.limiting_factor}). The resident blocks would wait at the barrier "
        f"for blocks that can only start when a resident block exits, which none ever does. Rule broken: a "
        f"grid-wide barrier needs every block of the grid resident (grid <= blocks per wave; a cooperative "
        f"launch refuses more). Fix: vertical packing -- launch at most {per_wave} blocks and let each loop "
        f"over {ceil(ks.grid / per_wave)} blocks' worth of tasks -- or end the kernel at the barrier.")
