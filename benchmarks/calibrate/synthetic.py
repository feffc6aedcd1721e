"""Synthetic results, clearly labelled: times made by the cost model itself (for the tests and a dry run)."""
from __future__ import annotations

import math
import time

import numpy as np
import astitch_sim as asim

from .counters import counters_for
from .model import Sample, override_constants, predict_sample


SYNTHETIC_BANNER = "SYNTHETIC DATA: times made by the cost model itself from chosen constants, not measured"


def make_synthetic_results(cases: list, gpu_name: str, constants: dict, max_elements: int = 1 << 22,
                           strategies=None, noise: float = 0.0, seed: int = 0) -> dict:
    """A results.json-shaped dict whose 'measured' times are the cost model's with ``constants``.

    ``cases``: [(key, workload, shape)].  Used to test that :func:`fit_constants` recovers known
    constants; every place it could be mistaken for data says SYNTHETIC.
    """
    rng = np.random.default_rng(seed)
    gpu = asim.gpu(gpu_name)
    out = {"format": "astitch-sim gpu_bench 1", "mode": "synthetic", "timing_note": SYNTHETIC_BANNER,
           "gpu_preset": gpu.name,
           "provenance": {"device": "SYNTHETIC (no device)", "date": time.strftime("%Y-%m-%d"),
                          "git_commit": "n/a", "synthetic_constants": dict(constants)},
           "cases": []}
    for key, workload, shape in cases:
        runs = []
        for strategy in strategies or asim.STRATEGIES:
            plan, stats, _ = counters_for(workload, shape, strategy, gpu, max_elements)
            with override_constants(gpu.name, constants):
                per = predict_sample(Sample(key, workload, shape, strategy, gpu, plan.kernels, stats, [], 0.0))
            per = [float(p * math.exp(noise * rng.standard_normal())) for p in per]
            runs.append({"kind": "plan", "name": strategy, "strategy": strategy, "gpu_us": float(sum(per)),
                         "e2e_us": None, "validation": {"ok": True, "note": "synthetic"},
                         "kernels": [{"name": k.name, "gpu_us": p} for k, p in zip(plan.kernels, per)]})
        out["cases"].append({"key": key, "workload": workload, "shape": dict(shape), "runs": runs})
    return out
