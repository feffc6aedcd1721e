"""What the parts of calibrate share: the targets from the issue, the parameters the fit may move (with
bounds), the default set, and progress on stderr."""
from __future__ import annotations

import sys


#: targets from the issue
TARGET_SPEARMAN = 0.9
TARGET_MEDIAN_ERROR = 0.25

#: parameters the fit may move, with bounds (they are all positive; the fit works on their logs)
PARAM_BOUNDS = {
    "measured_bandwidth_gbs": (20.0, 50_000.0),   # achieved DRAM bandwidth
    "kernel_launch_us": (0.01, 200.0),             # GPU-side fixed cost per kernel
    "grid_barrier_us": (0.01, 200.0),              # one grid-wide barrier
    "block_start_ns": (0.1, 100_000.0),            # per-block dispatch / set-up / drain
    "dram_latency_ns": (10.0, 20_000.0),           # Little's law: warps needed to saturate DRAM
    "l2_latency_ns": (5.0, 20_000.0),              # Little's law for L2 hits
    "expensive_rate": (0.001, 16.0),               # per-element compute: SFU rate vs FP32
    "block_barrier_ns": (0.1, 100_000.0),
    "fp32_gflops": (100.0, 1_000_000.0),
    "memset_launch_us": (0.01, 200.0),
    "atomic_per_clock": (0.01, 10_000.0),
}
DEFAULT_PARAMS = ("measured_bandwidth_gbs", "kernel_launch_us", "grid_barrier_us", "block_start_ns",
                  "dram_latency_ns", "expensive_rate")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
