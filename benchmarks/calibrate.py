#!/usr/bin/env python3
"""Fit the SIMT cost model to GPU measurements, and check how well it predicts them.

    python -m benchmarks.calibrate benchmarks/results/<dir>/results.json [--max-elements N] [--params a,b,...]

Reads a ``results.json`` written by ``gpu_bench.py`` on a real GPU and writes,
beside it:

``calibration.json``  the fitted constants for the GPU preset the plans were
                      compiled for, the data they were fitted on, and how well
                      each parameter is pinned down by that data;
``crosscheck.md``     per (workload, shape, strategy): measured GPU time, the
                      model's prediction with the constants now in
                      ``astitch_sim/simt/cost.py`` and with the fitted ones;
                      Spearman rank correlation, median absolute relative
                      error, how often the model picks the GPU's fastest
                      strategy -- against the targets (Spearman >= 0.9, median
                      error <= 25%);
``crosscheck.png``    predicted vs measured, log-log (matplotlib, if installed).

It prints the exact snippet to paste into ``COST_CONSTANTS`` in
``astitch_sim/simt/cost.py`` (it never edits that file itself).

How the fit works
-----------------
1. For every plan that ran (one per workload, shape and strategy), the SIMT
   model's counters (bytes, sectors, flops, barriers ... per kernel and stage:
   :mod:`astitch_sim.simt.stats`) are obtained by ``asim.simulate`` of the same
   plan.  Counters do not depend on the cost constants, so this is done once.
2. The cost model (:func:`astitch_sim.simt.cost.predict_kernel`, the real one,
   not a copy) turns counters into microseconds for a trial set of constants
   (swapped into ``COST_CONSTANTS[gpu]`` for the duration of the call).
3. ``scipy.optimize.least_squares`` minimises the *log* ratio predicted /
   measured over every kernel that was timed (relative error: a 5 us kernel
   counts as much as a 5 ms one), the parameters in log space within bounds.

What is measured: the per-kernel GPU time between CUDA events, kernels queued
back to back behind a sleeping kernel (see ``gpu_bench.py``), so the host's
launch cost is *not* in it: ``kernel_launch_us`` fits the GPU-side cost of one
kernel in a stream (launch latency + drain), not Python's dispatch.  The host
side is reported separately (end-to-end minus GPU time, per kernel).

Big shapes (``--max-elements``)
-------------------------------
Simulating a 262M-element plan takes a while.  A case whose largest tensor has
more than ``--max-elements`` elements is simulated at a *scaled* shape: its
first shape keyword (rows / size / n) divided until it fits.  The counters are
then extrapolated to the measured shape, kernel by kernel and stage by stage,
provided the scaled plan has the same structure (kernels, stages, mapping kinds,
barriers; else the factor is halved until it does):

* elements, bytes, sectors, requests, shared-memory traffic, bank conflicts,
  register reuse and flops scale with the stage's domain size (exact for
  row-wise work: every row does the same);
* block barriers and atomics scale with the grid (one per block);
* grid barriers stay (one per barrier point);
* memset bytes scale with the kernel's output bytes.

The grid, block, shared memory and registers are the full plan's, so residency,
waves and the tail effect are the measured shape's own.  Extrapolated rows are
marked in ``crosscheck.md``.  ``--max-elements 0`` simulates everything at full
size.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from math import prod
from typing import Optional

import numpy as np

import astitch_sim as asim
from astitch_sim.simt import cost

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
    "expensive_rate": (0.001, 16.0),               # per-element compute: SFU rate vs FP32
    "block_barrier_ns": (0.1, 100_000.0),
    "fp32_gflops": (100.0, 1_000_000.0),
    "memset_launch_us": (0.01, 200.0),
    "atomic_per_clock": (0.01, 10_000.0),
}
DEFAULT_PARAMS = ("measured_bandwidth_gbs", "kernel_launch_us", "grid_barrier_us", "block_start_ns",
                  "dram_latency_ns", "expensive_rate")

#: stage counters that grow with the stage's domain, and those that grow with the grid
_SCALE_WITH_DOMAIN = ("elements", "global_bytes_read", "global_bytes_written", "global_sectors_read",
                      "global_sectors_written", "global_requests", "shared_bytes_read", "shared_bytes_written",
                      "shared_bank_conflicts", "register_reuse", "flops", "expensive_flops", "recomputed_flops")
_SCALE_WITH_GRID = ("block_barriers", "atomics")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# statistics (small and exact, so the tests can check them by hand)
# ---------------------------------------------------------------------------

def ranks(values) -> np.ndarray:
    """1-based ranks, ties given their average rank (as Spearman's rho wants)."""
    v = np.asarray(values, dtype=float)
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x, y) -> float:
    """Spearman's rank correlation: Pearson's r of the ranks (NaN with < 2 points or a constant side)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} vs {len(y)} values")
    if len(x) < 2:
        return float("nan")
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / den) if den else float("nan")


def relative_errors(pred, meas) -> np.ndarray:
    """|pred - meas| / meas, element by element."""
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    return np.abs(pred - meas) / meas


def median_abs_rel_error(pred, meas) -> float:
    e = relative_errors(pred, meas)
    return float(np.median(e)) if len(e) else float("nan")


def same_fastest(groups: dict) -> tuple[int, int]:
    """``groups``: case -> {strategy: (predicted, measured)}; (cases where the argmins agree, cases)."""
    agree = total = 0
    for rows in groups.values():
        if len(rows) < 2:
            continue
        total += 1
        best_pred = min(rows, key=lambda s: rows[s][0])
        best_meas = min(rows, key=lambda s: rows[s][1])
        agree += best_pred == best_meas
    return agree, total


# ---------------------------------------------------------------------------
# the cost model with trial constants
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# the fit
# ---------------------------------------------------------------------------

@dataclass
class Fit:
    params: dict                         # fitted values
    initial: dict
    sensitivity: dict                    # |d log(pred) / d log(param)| summed over points: ~0 = not identified
    residual_rms: float                  # RMS of log(pred / meas) at the fit
    points: int
    success: bool
    message: str
    at_bound: list = field(default_factory=list)
    frozen: list = field(default_factory=list)     # no effect on any timed point: kept at the initial value


def _points(samples):
    """(sample index, kernel index or None, measured us): per kernel where timed, else per plan."""
    pts = []
    for i, s in enumerate(samples):
        if s.measured_us and all(m is not None and m > 0 for m in s.measured_us) \
                and len(s.measured_us) == len(s.stats):
            pts += [(i, j, float(m)) for j, m in enumerate(s.measured_us)]
        elif s.measured_total_us and s.measured_total_us > 0:
            pts.append((i, None, float(s.measured_total_us)))
    return pts


def fit_constants(samples: list, params=DEFAULT_PARAMS, initial: Optional[dict] = None,
                  bounds: Optional[dict] = None) -> Fit:
    """Least squares on log(predicted / measured) over every timed kernel of every sample.

    ``bounds``: name -> (low, high) for constants :data:`PARAM_BOUNDS` does not know (default: it)."""
    bounds = {**PARAM_BOUNDS, **(bounds or {})}
    from scipy.optimize import least_squares
    if not samples:
        raise ValueError("no samples to fit")
    gpu = samples[0].gpu
    params = list(params)
    unknown = [p for p in params if p not in bounds]
    if unknown:
        raise ValueError(f"cannot fit {unknown}; fittable: {', '.join(bounds)}")
    start = current_constants(gpu)
    if initial:
        start.update(initial)
    lo = np.log([bounds[p][0] for p in params])
    hi = np.log([bounds[p][1] for p in params])
    x0 = np.clip(np.log([float(start[p]) for p in params]), lo + 1e-9, hi - 1e-9)
    pts = _points(samples)
    if len(pts) < len(params):
        raise ValueError(f"{len(pts)} timed points cannot fit {len(params)} parameters")
    meas = np.array([m for _, _, m in pts])

    def model(x):
        values = dict(zip(params, np.exp(x)))
        preds = predict_all(samples, values)
        out = np.array([sum(preds[i]) if j is None else preds[i][j] for i, j, _ in pts])
        return np.log(np.maximum(out, 1e-9))

    # which parameters does the data see at all?  (e.g. no kernel with a grid barrier: grid_barrier_us)
    base = model(x0)
    sens = np.zeros(len(params))
    for i in range(len(params)):
        x = x0.copy()
        x[i] += 1e-3
        sens[i] = float(np.abs(model(x) - base).sum() / 1e-3)
    free = [i for i in range(len(params)) if sens[i] > 1e-6]
    frozen = [params[i] for i in range(len(params)) if i not in free]
    x_best = x0.copy()
    res = None
    if free:
        def resid(xf):
            x = x0.copy()
            x[free] = xf
            return model(x) - np.log(meas)

        res = least_squares(resid, x0[free], bounds=(lo[free], hi[free]), x_scale=1.0, diff_step=1e-4,
                            max_nfev=400 * len(free))
        x_best[free] = res.x
    fitted = dict(zip(params, (float(v) for v in np.exp(x_best))))
    for p in frozen:
        fitted[p] = float(start[p])
    final = model(x_best) - np.log(meas)
    at_bound = [params[i] for i in free if x_best[i] - lo[i] < 1e-3 or hi[i] - x_best[i] < 1e-3]
    return Fit(params=fitted, initial={p: float(start[p]) for p in params},
               sensitivity=dict(zip(params, (float(v) for v in sens))),
               residual_rms=float(np.sqrt(np.mean(final ** 2))), points=len(pts),
               success=bool(res.success) if res is not None else False,
               message=str(res.message) if res is not None else "no parameter affects the data",
               at_bound=at_bound, frozen=frozen)


# ---------------------------------------------------------------------------
# counters for a results file: simulate (scaled, extrapolated) plans
# ---------------------------------------------------------------------------

def _structure(plan) -> list:
    return [(k.kind, len(k.stages), tuple((s.mapping.kind, s.barrier_after, s.sync_after_combine,
                                           s.mapping.splits > 1, s.mapping.combine, len(s.ops), len(s.epilogue))
                                          for s in k.stages))
            for k in plan.kernels]


def _node_bytes(graph, names) -> int:
    from astitch_sim.ir.dtypes import numpy_dtype
    total = 0
    for n in names:
        node = graph[n]
        total += int(prod(node.shape)) * numpy_dtype(node.dtype).itemsize
    return total


def extrapolate_stats(full_plan, scaled_plan, scaled_stats) -> list:
    """KernelStats for ``full_plan`` from the counters of ``scaled_plan`` (same structure; see module doc)."""
    out = []
    for kf, ksc, st in zip(full_plan.kernels, scaled_plan.kernels, scaled_stats):
        ks = copy.deepcopy(st)
        ks.grid, ks.block = kf.grid, kf.block
        ks.shared_bytes, ks.registers_per_thread = kf.shared_bytes, kf.registers_per_thread
        r_grid = kf.grid / max(1, ksc.grid)
        for sf, ssc, stage in zip(kf.stages, ksc.stages, ks.stages):
            r = sf.mapping.size / max(1, ssc.mapping.size)
            for name in _SCALE_WITH_DOMAIN:
                setattr(stage, name, int(round(getattr(stage, name) * r)))
            for name in _SCALE_WITH_GRID:
                setattr(stage, name, int(round(getattr(stage, name) * r_grid)))
        if ks.memset_bytes:
            full_out = _node_bytes(full_plan.graph, kf.outputs)
            small_out = _node_bytes(scaled_plan.graph, ksc.outputs)
            ks.memset_bytes = int(round(ks.memset_bytes * full_out / max(1, small_out)))
        if ks.kind == "library":
            r = (_node_bytes(full_plan.graph, kf.inputs + kf.outputs)
                 / max(1, _node_bytes(scaled_plan.graph, ksc.inputs + ksc.outputs)))
            ks.library_bytes = int(round(ks.library_bytes * r))
            ks.library_flops = int(round(ks.library_flops * r))
        out.append(ks)
    return out


def simulate_stats(plan, seed: int = 0) -> list:
    """KernelStats of ``plan`` from the SIMT model (values are computed too: the model has no counters-only mode
    we rely on)."""
    from astitch_sim.frontends.workloads import workload_inputs
    simulate = getattr(asim, "simulate", None)
    if simulate is None:
        from astitch_sim.simt import simulate
    res = simulate(plan, workload_inputs(plan.graph, seed))
    return list(res.stats.kernels)


def counters_for(workload: str, shape: dict, strategy: str, gpu, max_elements: int):
    """(plan at ``shape``, KernelStats for it, note): simulated at ``shape`` or scaled + extrapolated."""
    from benchmarks.suite import graph_elements
    g = asim.workload(workload, **shape)
    plan = asim.compile(g, strategy=strategy, gpu=gpu)
    elements = graph_elements(g)
    if not max_elements or elements <= max_elements:
        return plan, simulate_stats(plan), ""
    key = next(iter(shape))
    factor = math.ceil(elements / max_elements)
    while factor > 1:
        small = dict(shape)
        small[key] = max(1, shape[key] // factor)
        try:
            sp = asim.compile(asim.workload(workload, **small), strategy=strategy, gpu=gpu)
        except asim.AStitchError:
            sp = None
        if sp is not None and _structure(sp) == _structure(plan):
            stats = extrapolate_stats(plan, sp, simulate_stats(sp))
            return plan, stats, f"simulated at {key}={small[key]} (1/{factor}), counters scaled"
        factor //= 2
    return plan, simulate_stats(plan), ""


def samples_from_results(results: dict, max_elements: int = 1 << 22, strategies=None) -> list:
    """One :class:`Sample` per plan run in ``results`` that validated and was timed."""
    gpu = asim.gpu(results["gpu_preset"])
    samples = []
    for case in results["cases"]:
        for run in case["runs"]:
            if run.get("kind") != "plan" or run.get("gpu_us") is None:
                continue
            if not (run.get("validation") or {}).get("ok", False):
                log(f"  skip {case['key']} {run['name']}: did not validate")
                continue
            if strategies and run["strategy"] not in strategies:
                continue
            t0 = time.time()
            plan, stats, note = counters_for(case["workload"], case["shape"], run["strategy"], gpu, max_elements)
            if len(plan.kernels) != len(run.get("kernels", [])):
                log(f"  warning {case['key']} {run['name']}: the plan now has {len(plan.kernels)} kernels, the "
                    f"measured one had {len(run.get('kernels', []))}: the compiler changed since the run; "
                    "fitting on the plan total only")
                per_kernel = []
            else:
                per_kernel = [k.get("gpu_us") for k in run["kernels"]]
            samples.append(Sample(case["key"], case["workload"], dict(case["shape"]), run["strategy"], gpu,
                                  list(plan.kernels), stats, per_kernel, float(run["gpu_us"]), note))
            log(f"  counters {case['key']:<32} {run['strategy']:<8} {time.time() - t0:6.1f}s {note}")
    return samples


# ---------------------------------------------------------------------------
# cross-check
# ---------------------------------------------------------------------------

def crosscheck(samples: list, values: Optional[dict] = None) -> dict:
    """Prediction vs measurement per sample, and the summary statistics."""
    preds = predict_all(samples, values)
    rows, groups = [], {}
    for s, p in zip(samples, preds):
        total = float(sum(p))
        rows.append(dict(case=s.case, workload=s.workload, shape=s.shape, strategy=s.strategy,
                         measured_us=s.measured_total_us, predicted_us=total,
                         rel_error=abs(total - s.measured_total_us) / s.measured_total_us,
                         extrapolated=s.extrapolated))
        groups.setdefault(s.case, {})[s.strategy] = (total, s.measured_total_us)
    pred = [r["predicted_us"] for r in rows]
    meas = [r["measured_us"] for r in rows]
    within = [spearman([v[0] for v in g.values()], [v[1] for v in g.values()])
              for g in groups.values() if len(g) >= 3]
    within = [w for w in within if not math.isnan(w)]
    agree, total = same_fastest(groups)
    return dict(rows=rows, spearman=spearman(pred, meas),
                spearman_within_case=float(np.mean(within)) if within else float("nan"),
                median_rel_error=median_abs_rel_error(pred, meas),
                same_fastest=agree, cases=total)


def leave_one_out(samples: list, params) -> float:
    """Median relative error when each workload's plans are predicted by a fit that never saw that workload."""
    errs = []
    for w in sorted({s.workload for s in samples}):
        train = [s for s in samples if s.workload != w]
        test = [s for s in samples if s.workload == w]
        if len(_points(train)) < len(params):
            continue
        f = fit_constants(train, params)
        cc = crosscheck(test, f.params)
        errs += [r["rel_error"] for r in cc["rows"]]
    return float(np.median(errs)) if errs else float("nan")


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def summary_lines(cc: dict, label: str) -> list:
    sp, me = cc["spearman"], cc["median_rel_error"]
    return [f"| {label} | {sp:.3f} ({_verdict(sp >= TARGET_SPEARMAN)}) | {cc['spearman_within_case']:.3f} "
            f"| {100 * me:.1f}% ({_verdict(me <= TARGET_MEDIAN_ERROR)}) "
            f"| {cc['same_fastest']}/{cc['cases']} |"]


def snippet(gpu_name: str, fitted: dict, source: str, banner: str = "") -> str:
    """The COST_CONSTANTS entry to paste into astitch_sim/simt/cost.py (``banner``: why it must not be)."""
    entry = dict(cost.COST_CONSTANTS.get(gpu_name, cost.COST_CONSTANTS[cost.DEFAULT_PRESET]))
    entry.update(fitted)
    body = ",\n".join(f"        {k}={_fmt(v)}" for k, v in entry.items())
    warn = f"    # NOT A CALIBRATION -- {banner}\n" if banner else ""
    return (f"{warn}    # calibrated by python -m benchmarks.calibrate from {source}\n"
            f"    \"{gpu_name}\": dict(\n{body},\n    ),")


def _fmt(v) -> str:
    """A constant as Python source: ints stay ints, floats keep 4 significant digits and a decimal point."""
    if isinstance(v, bool) or isinstance(v, int):
        return repr(v)
    text = f"{float(v):.4g}" if abs(float(v)) < 1e5 else f"{float(v):.6g}"
    return text if any(c in text for c in ".en") else text + ".0"


def write_crosscheck_md(path, results, samples, before, after, fit, loo, banner) -> None:
    prov = results.get("provenance", {})
    lines = [f"# Cost model cross-check: {results['gpu_preset']} preset vs {prov.get('device', '?')}", ""]
    if banner:
        lines += [f"**{banner}**", ""]
    lines += [f"Measured: `{results.get('_path', 'results.json')}` ({prov.get('date', '?')}, commit "
              f"{prov.get('git_commit', '?')}). Measured time = GPU time between CUDA events (median), "
              "kernels queued back to back; predicted = `asim.simulate` counters through "
              "`astitch_sim/simt/cost.py`.", "",
              f"Targets: Spearman >= {TARGET_SPEARMAN}, median |error| <= {100 * TARGET_MEDIAN_ERROR:.0f}%.", "",
              "| constants | Spearman (all plans) | Spearman (within a case, mean) | median abs rel error "
              "| model picks the GPU's fastest strategy |", "|---|---|---|---|---|"]
    lines += summary_lines(before, "in cost.py now")
    if after is not None:
        lines += summary_lines(after, "fitted (in-sample)")
    if loo is not None and not math.isnan(loo):
        lines += ["", f"Leave-one-workload-out median error with fitted constants: {100 * loo:.1f}% "
                      f"({_verdict(loo <= TARGET_MEDIAN_ERROR)}): each workload predicted by a fit that did not "
                      "see it (the honest number)."]
    if fit is not None:
        lines += ["", "## Fitted constants", "", "| constant | before | fitted | sensitivity |", "|---|---|---|---|"]
        for p, v in fit.params.items():
            sens = fit.sensitivity.get(p, 0.0)
            flag = (" (not seen by this data: kept)" if p in fit.frozen
                    else " (at a bound)" if p in fit.at_bound else "")
            lines.append(f"| {p} | {_fmt(fit.initial[p])} | {_fmt(v)} | {sens:.3g}{flag} |")
        lines += ["", f"{fit.points} timed kernels; RMS of log(pred/meas) at the fit {fit.residual_rms:.3f}; "
                      f"optimizer: {fit.message}"]
    lines += ["", "## Per plan", "", "| case | strategy | measured us | predicted now | err | predicted fitted "
              "| err | note |", "|---|---|---|---|---|---|---|---|"]
    after_rows = after["rows"] if after is not None else [None] * len(before["rows"])
    for b, a in zip(before["rows"], after_rows):
        fa = f"{a['predicted_us']:.1f} | {100 * a['rel_error']:.0f}%" if a else "- | -"
        lines.append(f"| {b['case']} | {b['strategy']} | {b['measured_us']:.1f} | {b['predicted_us']:.1f} "
                     f"| {100 * b['rel_error']:.0f}% | {fa} | {b['extrapolated']} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def plot_crosscheck(path, before, after, banner) -> Optional[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no crosscheck.png"
    panels = [("constants in cost.py now", before)] + ([("fitted constants", after)] if after else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5.5), squeeze=False)
    for ax, (title, cc) in zip(axes[0], panels):
        strategies = sorted({r["strategy"] for r in cc["rows"]})
        for s in strategies:
            rows = [r for r in cc["rows"] if r["strategy"] == s]
            ax.scatter([r["measured_us"] for r in rows], [r["predicted_us"] for r in rows], label=s, s=22)
        vals = [v for r in cc["rows"] for v in (r["measured_us"], r["predicted_us"]) if v > 0]
        lo, hi = min(vals) / 1.5, max(vals) * 1.5
        xs = np.geomspace(lo, hi, 50)
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.fill_between(xs, xs * 0.75, xs * 1.25, color="grey", alpha=0.15, label="within 25%")
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_xlim(lo, hi), ax.set_ylim(lo, hi)
        ax.set_xlabel("measured GPU time (us)"), ax.set_ylabel("predicted (us)")
        ax.set_title(f"{title}\nSpearman {cc['spearman']:.2f}, median err {100 * cc['median_rel_error']:.0f}%")
        ax.legend(fontsize=8)
    if banner:
        fig.suptitle(banner, color="red")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# ---------------------------------------------------------------------------
# synthetic results (for the tests and a dry run of this script): clearly labelled
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def calibrate(results_path: str, out_dir: Optional[str] = None, max_elements: int = 1 << 22, params=DEFAULT_PARAMS,
              allow_simulator: bool = False, loo: bool = True, plot: bool = True) -> dict:
    """Everything the command does; returns the calibration dict (also written to calibration.json)."""
    with open(results_path) as f:
        results = json.load(f)
    results["_path"] = results_path
    out_dir = out_dir or os.path.dirname(os.path.abspath(results_path))
    mode = results.get("mode", "gpu")
    banner = ""
    if mode == "simulator":
        if not allow_simulator:
            raise SystemExit(f"{results_path} was measured in Numba's CUDA simulator: its times are not GPU "
                             "timings and must not calibrate anything (pass --allow-simulator to dry-run the "
                             "pipeline anyway)")
        banner = "CUDA SIMULATOR TIMES, NOT GPU TIMING: a dry run of the pipeline, not a calibration"
    elif mode == "synthetic":
        banner = SYNTHETIC_BANNER
    if banner:
        log(banner)
    gpu_name = results["gpu_preset"]
    log(f"counters for {sum(len(c['runs']) for c in results['cases'])} runs (max {max_elements} elements "
        f"simulated per plan)")
    samples = samples_from_results(results, max_elements)
    if not samples:
        raise SystemExit("no validated, timed plan runs in the results file")
    before = crosscheck(samples)
    fit = after = None
    loo_err = None
    try:
        fit = fit_constants(samples, params)
        after = crosscheck(samples, fit.params)
        if loo:
            loo_err = leave_one_out(samples, params)
    except ValueError as e:
        log(f"no fit: {e}")
    prov = results.get("provenance", {})
    source = f"{os.path.basename(os.path.dirname(os.path.abspath(results_path)))}/results.json " \
             f"({prov.get('device', '?')}, {prov.get('date', '?')}, commit {str(prov.get('git_commit', '?'))[:12]})"
    host = [(r.get("e2e_us") - r["gpu_us"]) / max(1, len(r.get("kernels", [])))
            for c in results["cases"] for r in c["runs"]
            if r.get("kind") == "plan" and r.get("e2e_us") and r.get("gpu_us")]
    cal = {"format": "astitch-sim calibration 1", "gpu_preset": gpu_name, "source": source, "mode": mode,
           "banner": banner, "params_fitted": list(params),
           "constants": fit.params if fit else {}, "initial": fit.initial if fit else {},
           "sensitivity": fit.sensitivity if fit else {}, "at_bound": fit.at_bound if fit else [],
           "frozen": fit.frozen if fit else [],
           "fit_points": fit.points if fit else 0, "fit_residual_rms_log": fit.residual_rms if fit else None,
           "measured_copy_bandwidth_gbs": (results.get("copy") or {}).get("bandwidth_gbs"),
           "host_overhead_us_per_kernel_median": float(np.median(host)) if host else None,
           "crosscheck": {"before": {k: v for k, v in before.items() if k != "rows"},
                          "after": {k: v for k, v in after.items() if k != "rows"} if after else None,
                          "leave_one_workload_out_median_error": loo_err},
           "targets": {"spearman": TARGET_SPEARMAN, "median_rel_error": TARGET_MEDIAN_ERROR},
           "snippet": snippet(gpu_name, fit.params, source, banner) if fit else None}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "calibration.json"), "w") as f:
        json.dump(cal, f, indent=1)
    write_crosscheck_md(os.path.join(out_dir, "crosscheck.md"), results, samples, before, after, fit, loo_err,
                        banner)
    if plot:
        why = plot_crosscheck(os.path.join(out_dir, "crosscheck.png"), before, after, banner)
        if why:
            log(why)
    return cal


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.calibrate", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results.json written by gpu_bench.py on a GPU")
    ap.add_argument("--out", help="folder for calibration.json / crosscheck.* (default: beside results.json)")
    ap.add_argument("--max-elements", type=int, default=1 << 22,
                    help="simulate plans whose largest tensor is bigger at a scaled shape and extrapolate the "
                         "counters (0: always full size; default 4194304)")
    ap.add_argument("--params", default=",".join(DEFAULT_PARAMS),
                    help=f"constants to fit, comma-separated (from: {', '.join(PARAM_BOUNDS)})")
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-workload-out check")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--allow-simulator", action="store_true",
                    help="accept a results file from the CUDA simulator (a dry run: its times mean nothing)")
    a = ap.parse_args(argv)
    params = [p.strip() for p in a.params.split(",") if p.strip()]
    cal = calibrate(a.results, a.out, a.max_elements, params, a.allow_simulator, not a.no_loo, not a.no_plot)
    out_dir = a.out or os.path.dirname(os.path.abspath(a.results))
    b, af = cal["crosscheck"]["before"], cal["crosscheck"]["after"]
    if cal["banner"]:
        print(f"*** {cal['banner']} ***")
    print(f"cost model vs measurement ({cal['source']}); targets: Spearman >= {TARGET_SPEARMAN}, "
          f"median error <= {100 * TARGET_MEDIAN_ERROR:.0f}%")
    for label, cc in (("constants in cost.py now", b), ("fitted (in-sample)", af)):
        if cc:
            print(f"  {label:<26} Spearman {cc['spearman']:.3f} [{_verdict(cc['spearman'] >= TARGET_SPEARMAN)}]"
                  f"  median error {100 * cc['median_rel_error']:.1f}% "
                  f"[{_verdict(cc['median_rel_error'] <= TARGET_MEDIAN_ERROR)}]"
                  f"  same fastest {cc['same_fastest']}/{cc['cases']}")
    loo = cal["crosscheck"]["leave_one_workload_out_median_error"]
    if loo is not None and not math.isnan(loo):
        print(f"  leave-one-workload-out median error {100 * loo:.1f}% "
              f"[{_verdict(loo <= TARGET_MEDIAN_ERROR)}]")
    if cal["snippet"] and cal["mode"] == "gpu":
        print("\nPaste into COST_CONSTANTS in astitch_sim/simt/cost.py (replacing the entry):\n")
        print(cal["snippet"])
    elif cal["snippet"]:
        print(f"\nDO NOT PASTE (not fitted to GPU measurements: {cal['banner']}); the entry would read:\n")
        print(cal["snippet"])
    print(f"\nwrote {out_dir}/calibration.json, crosscheck.md" + ("" if a.no_plot else ", crosscheck.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
