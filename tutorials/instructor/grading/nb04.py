"""Checks for 04_thread_mapping."""
from __future__ import annotations

import math

import astitch_sim as asim

from checks.core import Wrong, answered, close, direction, exercise, integer, number

V100 = asim.gpu("V100")


def _dien_xla_kernel():
    # the paper's XLA (the notebook's PAPER_XLA): one block per row
    return asim.compile(asim.workload("softmax", rows=750000, cols=32), "xla", "V100",
                        fusion_rules="tf-2.6").kernels[0]


@exercise(wrong=[{"tiny_per_wave": 5120}, {"tiny_per_wave": 32}, {"tiny_occupancy": 1.0},
                 {"tiny_occupancy": 32}, {"tiny_per_wave": 80}])
def q1_tiny_blocks(tiny_per_wave, tiny_occupancy):
    per_wave = integer(tiny_per_wave, "tiny_per_wave")
    occ_got = number(tiny_occupancy, "tiny_occupancy")
    k = _dien_xla_kernel()
    occ = V100.occupancy(k.block, k.shared_bytes, k.registers_per_thread)
    if per_wave != occ.blocks_per_wave:
        if per_wave == occ.blocks_per_sm:
            raise Wrong("tiny_per_wave: that is per SM; a wave is what the whole GPU runs at once")
        if per_wave == V100.sms:
            raise Wrong("tiny_per_wave: that is the number of SMs; each SM holds several of these blocks")
        if per_wave == V100.max_threads_per_sm // k.block * V100.sms:
            raise Wrong("tiny_per_wave: the thread limit alone would allow that, but another per-SM limit binds "
                        "first: see occupancy(...).limiting_factor")
        raise Wrong(f"tiny_per_wave {direction(per_wave, occ.blocks_per_wave)}: use v100.occupancy(...) "
                    "with the kernel's block, shared_bytes and registers_per_thread")
    if occ_got > 1:
        raise Wrong("tiny_occupancy is a fraction between 0 and 1 (active warps over the SM's warp slots)")
    if not close(occ_got, occ.occupancy, 0.01):
        raise Wrong(f"tiny_occupancy {direction(occ_got, occ.occupancy)}: active warps per SM over "
                    f"{V100.max_warps_per_sm} warp slots")


def _fill(plan) -> float:
    k = plan.kernels[0]
    return k.grid / V100.blocks_per_wave(k.block, k.shared_bytes, k.registers_per_thread)


@exercise(wrong=[{"xla_fill": 64 / 80}, {"astitch_fill": 0.4}, {"xla_fill": 1.0}, {"astitch_fill": 128}])
def q2_wave_fill(xla_fill, astitch_fill):
    xf = number(xla_fill, "xla_fill")
    af = number(astitch_fill, "astitch_fill")
    g = asim.workload("softmax", rows=64, cols=30000)
    truth = {"xla": _fill(asim.compile(g, "xla", "V100", fusion_rules="tf-2.6")),   # the notebook's plans: the
             # paper's XLA, and astitch's rule alone
             "astitch": _fill(asim.compile(g, "astitch", "V100", launch_search=False))}
    for name, got, t in (("xla_fill", xf, truth["xla"]), ("astitch_fill", af, truth["astitch"])):
        if got > 1:
            raise Wrong(f"{name} is a fraction of one wave (grid over blocks per wave), so at most 1 here")
        if close(got, t, 0.01):
            continue
        if name == "xla_fill" and close(got, 64 / V100.sms, 0.01):
            raise Wrong("xla_fill: dividing by the SMs assumes one block per SM; a V100 SM holds two "
                        "1024-thread blocks")
        if name == "astitch_fill" and close(got, truth["xla"], 0.01):
            raise Wrong("astitch_fill: AStitch's first kernel is not XLA's: it splits each row, so it "
                        "launches more blocks")
        raise Wrong(f"{name} {direction(got, t)}: the kernel's grid over v100.blocks_per_wave(block, shared, "
                    "registers)")


CASES = [("V100", 64, 30000), ("V100", 16, 30000), ("V100", 4, 100000), ("V100", 256, 30000),
         ("V100", 64, 512), ("H100", 64, 30000), ("H100", 100, 5000), ("V100", 8, 1500)]


def _compiler_splits(gpu: str, rows: int, cols: int) -> tuple:
    """The split count of the compiler's task-splitting rule (``launch_search=False``: the rule alone; by default
    the compiler then also prices launches without the split and keeps the faster, issue 28)."""
    plan = asim.compile(asim.workload("softmax", rows=rows, cols=cols), "astitch", gpu, launch_search=False)
    m = plan.kernels[0].stages[0].mapping
    block = 1024            # the block the rule decides with (AStitch's assumed 1024 threads); rows read in vectors
    wave = asim.gpu(gpu).blocks_per_wave(block, 0, 32)     # may shrink the launched block after: <64,512> runs 64
    return m.splits, wave, block


def _wrong_splits_not_pow2(rows, cols, blocks_per_wave, block=1024):
    if rows >= blocks_per_wave or cols <= block:
        return 1
    return max(1, min(blocks_per_wave // rows, math.ceil(cols / block)))


def _wrong_splits_rounds_up(rows, cols, blocks_per_wave, block=1024):
    if rows >= blocks_per_wave or cols <= block:
        return 1
    room = min(blocks_per_wave // rows, math.ceil(cols / block))
    return 2 ** math.ceil(math.log2(max(1, room)))


def _wrong_splits_ignores_length(rows, cols, blocks_per_wave, block=1024):
    if rows >= blocks_per_wave:
        return 1
    return 2 ** int(math.log2(max(1, blocks_per_wave // rows)))


@exercise(wrong=[_wrong_splits_not_pow2, _wrong_splits_rounds_up, _wrong_splits_ignores_length,
                 lambda rows, cols, blocks_per_wave, block=1024: 2])
def q3_choose_splits(choose_splits):
    answered(choose_splits, "choose_splits")
    if not callable(choose_splits):
        raise Wrong("choose_splits should be a function choose_splits(rows, cols, blocks_per_wave, block=1024)")
    for gpu, rows, cols in CASES:
        truth, wave, block = _compiler_splits(gpu, rows, cols)
        try:
            got = choose_splits(rows, cols, wave, block)
        except Exception as e:
            raise Wrong(f"choose_splits({rows}, {cols}, {wave}, {block}) raised {type(e).__name__}: {e}") from None
        got = integer(got, f"choose_splits({rows}, {cols}, {wave}, {block})")
        if got == truth:
            continue
        case = f"<{rows},{cols}> on the {gpu} ({wave} blocks per wave)"
        if got < 1:
            raise Wrong(f"{case}: a row is split over at least 1 block")
        if got & (got - 1):
            raise Wrong(f"{case}: your split count is not a power of two")
        if truth == 1 and rows >= wave:
            raise Wrong(f"{case}: with at least as many rows as blocks per wave the GPU is already full: no split")
        if truth == 1 and cols <= block:
            raise Wrong(f"{case}: a row no longer than a block's threads is never split")
        if got * rows > wave:
            raise Wrong(f"{case}: your splits give more blocks than one wave holds")
        if got > math.ceil(cols / block):
            raise Wrong(f"{case}: more splits than the row has {block}-element chunks")
        raise Wrong(f"{case}: the compiler splits differently; take the largest power of two allowed by both "
                    "limits")


@exercise(wrong=[146, 292, 750000, 294])
def q4_waves(dien_waves):
    got = integer(dien_waves, "dien_waves")
    k = _dien_xla_kernel()
    truth = V100.waves(k.grid, k.block, k.shared_bytes, k.registers_per_thread)
    if got == truth:
        return
    if got == truth - 1:
        raise Wrong("one short: a partly filled last wave is still a wave (round up)")
    if got == k.grid:
        raise Wrong("that is the number of blocks; divide by the blocks one wave holds")
    raise Wrong(f"{direction(got, truth)}: blocks over blocks per wave, rounded up")
