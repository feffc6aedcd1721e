"""Speed claims that used to be timing asserts inside unit tests (issue 26): wall clock on a shared machine
is not a unit test's business, so the tests check what the speed comes from (entries not stored, no
arrays allocated) and this script times it.

(a) The timeline of a 750000-block kernel (the paper's DIEN softmax under XLA: 32-thread blocks, 293
    waves) keeps the first and last waves only, so building it takes well under ``TIMELINE_S`` seconds
    (tests/simt/test_schedule.py checks the entries kept).
(b) ``asim.workload(name)`` at its default (paper) shape builds a Graph only, no arrays: under
    ``BUILD_S`` seconds each (tests/frontends/test_workloads.py checks the memory it allocates).

    python -m benchmarks.unit_speed          # prints the times; exit status 1 if a budget is exceeded
"""
from __future__ import annotations

import argparse
import sys
import time
from types import SimpleNamespace

from astitch_sim.hardware.gpus import GPUS
from astitch_sim.simt.schedule import build_timeline
from astitch_sim.simt.stats import KernelStats, StageStats
from astitch_sim.frontends.workloads import WORKLOADS, workload

TIMELINE_S = 2.0
BUILD_S = 0.5


def timeline_750000_blocks() -> float:
    ks = KernelStats("k", "generated", 750000, 32, 0, 32)
    ks.stages = [StageStats(0, "d0", global_bytes_read=128 * 750000)]
    plan = SimpleNamespace(gpu=GPUS["V100"], kernels=[None])
    t0 = time.perf_counter()
    build_timeline(plan, [ks])
    return time.perf_counter() - t0


def workload_builds() -> dict:
    out = {}
    for name in WORKLOADS:
        t0 = time.perf_counter()
        workload(name)
        out[name] = time.perf_counter() - t0
    return out


def main(argv=None) -> int:
    argparse.ArgumentParser(prog="python -m benchmarks.unit_speed", description=__doc__.split("\n\n")[0]).parse_args(argv)
    over = []
    t = timeline_750000_blocks()
    print(f"timeline of 750000 blocks: {t:.3f} s (budget {TIMELINE_S} s)")
    if t >= TIMELINE_S:
        over.append("timeline")
    for name, t in workload_builds().items():
        print(f"workload({name!r}) at its default shape: {t * 1e3:.1f} ms (budget {BUILD_S * 1e3:.0f} ms)")
        if t >= BUILD_S:
            over.append(name)
    print("over budget: " + ", ".join(over) if over else "every time within its budget")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
