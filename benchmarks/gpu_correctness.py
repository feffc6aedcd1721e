"""Every catalog plan under every strategy, after apply_compiler, against the numpy reference.

What ``pytest -m gpu tests/gpu_backend/test_gpu_backend_device.py`` checks (every catalog
workload at its catalog size, every strategy), done the way the benchmark runs
plans -- after :func:`gpu_backend.apply_compiler`, the plans AStitch ships -- and
written to a results file after every plan, so a device command cut off at its
time limit keeps what it checked.  Tolerances are the device test's: float32
``rtol 1e-4``, ``atol 1e-5 * max(1, max|want|)``; integers exactly.

In Numba's CUDA simulator (the dry run) the shapes are :data:`SIM_SHAPES`, tiny:
the simulator runs every GPU thread in Python.
"""
from __future__ import annotations

import time

import numpy as np

RTOL, ATOL = 1e-4, 1e-5

#: a tiny shape per catalog workload for the simulator (the same as tests/gpu_backend/test_gpu_backend.py's TINY)
SIM_SHAPES = {
    "layernorm": {"rows": 4, "cols": 32}, "rmsnorm": {"rows": 4, "cols": 32},
    "batchnorm_train": {"rows": 16, "cols": 8}, "layernorm_backward": {"rows": 4, "cols": 32},
    "global_norm": {"rows": 8, "cols": 16}, "softmax": {"rows": 4, "cols": 64},
    "attention_softmax": {"batch": 2, "heads": 2, "seq": 8}, "log_softmax": {"rows": 4, "cols": 32},
    "cross_entropy": {"rows": 4, "cols": 32}, "bias_gelu": {"rows": 4, "cols": 32}, "swiglu": {"rows": 4, "cols": 32},
    "adam_step": {"size": 100}, "paper_fig7": {"n": 8, "c": 16}, "row_reduce": {"rows": 16, "cols": 32},
    "column_reduce": {"rows": 16, "cols": 32},
}


def close(graph, outs, want) -> tuple:
    """(ok, worst |got - want| / (atol + rtol |want|) over outputs, message)."""
    if len(outs) != len(want):
        return False, float("inf"), f"{len(outs)} outputs, the reference has {len(want)}"
    worst, bad = 0.0, []
    for got, ref, node in zip(outs, want, graph.outputs, strict=True):
        got, ref = np.asarray(got), np.asarray(ref)
        if got.shape != ref.shape:
            return False, float("inf"), f"{node.name}: shape {got.shape} != {ref.shape}"
        if node.dtype in ("f32", "f64", "f16", "bf16"):
            g64, r64 = got.astype(np.float64), ref.astype(np.float64)
            finite = np.isfinite(r64)
            scale = max(1.0, float(np.max(np.abs(r64[finite]))) if finite.any() else 1.0)
            both_nan = np.isnan(g64) & np.isnan(r64)
            with np.errstate(invalid="ignore"):
                err = np.abs(g64 - r64) / (ATOL * scale + RTOL * np.abs(r64))
            err = np.where(both_nan | (g64 == r64), 0.0, err)
            w = float(np.nanmax(err)) if err.size else 0.0
            if np.isnan(err).any():
                w = float("inf")
        else:
            w = 0.0 if np.array_equal(got, ref) else float("inf")
        worst = max(worst, w)
        if w > 1.0:
            bad.append(node.name)
    return not bad, worst, ("outside tolerance: " + ", ".join(bad)) if bad else "ok"


def check_all(workloads, strategies, preset: str, simulator: bool, record, apply: bool = True) -> list:
    """Run and check every (workload, strategy); ``record(list_so_far)`` after each (incremental writes)."""
    import astitch_sim as asim
    import gpu_backend
    from astitch_sim.frontends.workloads import workload_inputs
    from astitch_sim.hardware.measured import plan_signature
    from benchmarks.applied_plans import apply_all, compiler_record

    rows = []
    for name in workloads:
        shape = SIM_SHAPES[name] if simulator else {}
        t0 = time.perf_counter()
        try:
            g = asim.workload(name, **shape)
            inputs = workload_inputs(g, seed=0)
            want = asim.reference(g, inputs)
            plans = [asim.compile(g, s, preset) for s in strategies]
        except Exception as e:      # noqa: BLE001 - recorded; the other workloads still run
            rows += [{"workload": name, "strategy": s, "ok": False, "error": f"{type(e).__name__}: {e}"}
                     for s in strategies]
            record(rows)
            continue
        applied = apply_all(plans) if apply else [(None, "apply_compiler not asked for")] * len(plans)
        for strategy, before, (after, err) in zip(strategies, plans, applied, strict=True):
            row = {"workload": name, "shape": shape or "catalog default", "strategy": strategy, "preset": preset,
                   "plan_signature": plan_signature(before)}      # what the planner decided (gpu_session --skip-done)
            plan = after if after is not None else before
            row["compiler"] = compiler_record(before, after) if after is not None else {"applied": False,
                                                                                          "error": err}
            t1 = time.perf_counter()
            try:
                outs = gpu_backend.run(plan, inputs)
                row["ok"], row["worst_err_over_tol"], row["message"] = close(g, outs, want)
            except Exception as e:  # noqa: BLE001
                row.update(ok=False, error=f"{type(e).__name__}: {e}")
            row["kernels"] = len(plan.kernels)
            row["cooperative_kernels"] = sum(k.cooperative for k in plan.kernels)
            row["seconds"] = round(time.perf_counter() - t1, 3)
            rows.append(row)
            record(rows)
        rows[-1]["workload_seconds"] = round(time.perf_counter() - t0, 3)
    return rows


__all__ = ["check_all", "close", "SIM_SHAPES", "RTOL", "ATOL"]
