"""The cost model with trial constants: override a preset's constants, predict a sample's kernels."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional

from astitch_sim.simt import cost


@contextlib.contextmanager
def override_constants(gpu_name: str, values: dict):
    """Run the real cost model with ``values`` merged into ``COST_CONSTANTS[gpu_name]`` (restored after)."""
    table = cost.COST_CONSTANTS
    had = gpu_name in table
    old = table.get(gpu_name)
    base = dict(old if had else table[cost.DEFAULT_PRESET])
    table[gpu_name] = {**base, **values}
    try:
        yield
    finally:
        if had:
            table[gpu_name] = old
        else:
            del table[gpu_name]


@dataclass
class Sample:
    """One timed plan: its counters per kernel and what the GPU measured."""
    case: str
    workload: str
    shape: dict
    strategy: str
    gpu: object                          # astitch_sim GPU preset
    kernels: list                        # Kernel objects (None allowed: hand-made samples)
    stats: list                          # KernelStats, plan order
    measured_us: list                    # per kernel GPU time (None where unknown)
    measured_total_us: float             # whole plan GPU time
    extrapolated: str = ""               # "" or "simulated at <shape>, counters scaled"


class _PlanLike:
    def __init__(self, gpu):
        self.gpu = gpu


def predict_sample(sample: Sample) -> list:
    """Per-kernel predictions (us) for ``sample`` with whatever constants are in force."""
    out = []
    for k, ks in zip(sample.kernels, sample.stats):
        cost.predict_kernel(_PlanLike(sample.gpu), k, ks)
        out.append(ks.predicted_us)
    return out


def predict_all(samples: list, values: Optional[dict] = None) -> list:
    """Per-sample lists of per-kernel predictions, with ``values`` overriding the constants (or as they are)."""
    if not samples:
        return []
    gpu_name = samples[0].gpu.name
    ctx = override_constants(gpu_name, values) if values else contextlib.nullcontext()
    with ctx:
        return [predict_sample(s) for s in samples]


def current_constants(gpu) -> dict:
    return dict(cost.constants(gpu))
