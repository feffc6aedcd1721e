"""Counters for a results file: simulate the plans (scaled to at most max_elements, then extrapolated)."""
from __future__ import annotations

import copy
import math
import time
from math import prod
from typing import Optional

import astitch_sim as asim
from astitch_sim.hardware.measured import plan_signature
from astitch_sim.plan.machine import resident_resources

from .common import log
from .model import Sample


#: stage counters that grow with the stage's domain, and those that grow with the grid
_SCALE_WITH_DOMAIN = ("elements", "global_bytes_read", "global_bytes_written", "global_sectors_read",
                      "global_sectors_written", "global_requests", "shared_bytes_read", "shared_bytes_written",
                      "shared_bank_conflicts", "register_reuse", "flops", "expensive_flops", "recomputed_flops")
_SCALE_WITH_GRID = ("block_barriers", "atomics")


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


def _scale_traffic(tensors: dict, graph, r: float) -> None:
    """A stage's (or library kernel's) per-buffer traffic at the full size: its sectors grow with the domain
    (``r``); a buffer's size is the full graph's tensor (a broadcast weight keeps its size, an activation grows
    with it), or grows with the domain for buffers that are no graph tensor (split partials, scratch)."""
    for name, tt in tensors.items():
        tt.read_sectors = int(round(tt.read_sectors * r))
        tt.written_sectors = int(round(tt.written_sectors * r))
        tt.nbytes = _node_bytes(graph, [name]) if name in graph else int(round(tt.nbytes * r))


def extrapolate_stats(full_plan, scaled_plan, scaled_stats) -> list:
    """KernelStats for ``full_plan`` from the counters of ``scaled_plan`` (same structure; see module doc).

    Counters that count work scale with the domain (or the grid); what the caches serve does not: whether a
    tensor is still in the L2 when it is read again depends on the sizes.  So each buffer's traffic is scaled
    and the L2 model (:func:`astitch_sim.simt.l2.annotate`) decides the L2 and L1 hits again at the full
    sizes, as a full simulation would."""
    from astitch_sim.simt import l2
    out = []
    for kf, ksc, st in zip(full_plan.kernels, scaled_plan.kernels, scaled_stats):
        ks = copy.deepcopy(st)
        ks.grid, ks.block = kf.grid, kf.block
        ks.shared_bytes, ks.registers_per_thread = resident_resources(kf)
        r_grid = kf.grid / max(1, ksc.grid)
        for sf, ssc, stage in zip(kf.stages, ksc.stages, ks.stages):
            r = sf.mapping.size / max(1, ssc.mapping.size)
            for name in _SCALE_WITH_DOMAIN:
                setattr(stage, name, int(round(getattr(stage, name) * r)))
            for name in _SCALE_WITH_GRID:
                setattr(stage, name, int(round(getattr(stage, name) * r_grid)))
            _scale_traffic(stage.tensors, full_plan.graph, r)
        if ks.memset_bytes:
            full_out = _node_bytes(full_plan.graph, kf.outputs)
            small_out = _node_bytes(scaled_plan.graph, ksc.outputs)
            ks.memset_bytes = int(round(ks.memset_bytes * full_out / max(1, small_out)))
        if ks.kind == "library":
            r = (_node_bytes(full_plan.graph, kf.inputs + kf.outputs)
                 / max(1, _node_bytes(scaled_plan.graph, ksc.inputs + ksc.outputs)))
            ks.library_bytes = int(round(ks.library_bytes * r))
            ks.library_flops = int(round(ks.library_flops * r))
            _scale_traffic(ks.library_tensors, full_plan.graph, r)
        out.append(ks)
    l2.annotate(full_plan, out)
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


def as_measured(plans: list, compilers: list) -> list:
    """``[(plan, note)]``: the plans the runs timed.  ``benchmarks.gpu_bench`` times each plan after
    :func:`gpu_backend.apply_compiler` and records so (the run's ``compiler`` record, ``applied``): ptxas's
    registers then decide how many blocks stay resident, its instruction counts feed the cost model's issue
    term, a kernel that spilled at its estimated cap ran with a relaxed one.  Predicting from the plan as
    ``asim.compile`` returns it would price another program than the one timed, so the prediction is made
    from the applied plan too, with the benchmark's own helper (``benchmarks.applied_plans``: all at once, one
    child process in the CUDA simulator's dry run).  Where the compiler cannot run here, the plan as compiled,
    and the note says so."""
    todo = [i for i, c in enumerate(compilers) if (c or {}).get("applied")]
    out = [(p, "") for p in plans]
    if not todo:
        return out
    from benchmarks.applied_plans import apply_all
    for i, (applied, err) in zip(todo, apply_all([plans[i] for i in todo]), strict=True):
        out[i] = (applied, "") if applied is not None else \
            (plans[i], f"apply_compiler failed here ({err}): predicted from the plan as compiled")
    return out


def counters_for(workload: str, shape: dict, strategy: str, gpu, max_elements: int, plan=None,
                 options: Optional[dict] = None):
    """(plan at ``shape``, KernelStats for it, note): simulated at ``shape`` or scaled + extrapolated.  ``plan``:
    the plan to count (default: ``asim.compile``'s; :func:`as_measured` gives the one a GPU run timed);
    ``options``: ``asim.compile``'s keyword options the plan was drawn with (a launch sweep's
    ``max_block_threads``), for the scaled-down plan too."""
    from benchmarks.suite import graph_elements
    options = options or {}
    g = asim.workload(workload, **shape)
    plan = plan if plan is not None else asim.compile(g, strategy=strategy, gpu=gpu, **options)
    elements = graph_elements(g)
    if not max_elements or elements <= max_elements:
        return plan, simulate_stats(plan), ""
    key = next(iter(shape))
    factor = math.ceil(elements / max_elements)
    while factor > 1:
        small = dict(shape)
        small[key] = max(1, shape[key] // factor)
        try:
            sp = asim.compile(asim.workload(workload, **small), strategy=strategy, gpu=gpu, **options)
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
    timed = []                  # (case, run, plan as compiled today), the runs whose plan is still drawn
    for case in results["cases"]:
        for run in case["runs"]:
            if run.get("kind") != "plan" or run.get("gpu_us") is None:
                continue
            if not (run.get("validation") or {}).get("ok", False):
                log(f"  skip {case['key']} {run['name']}: did not validate")
                continue
            if strategies and run["strategy"] not in strategies:
                continue
            plan = asim.compile(asim.workload(case["workload"], **case["shape"]), strategy=run["strategy"], gpu=gpu)
            measured_sig = run.get("plan_signature")            # recorded before apply_compiler, as here
            if measured_sig and measured_sig != plan_signature(plan):
                log(f"  skip {case['key']} {run['name']}: the plan measured ({measured_sig}) is not the plan the "
                    f"code compiles now ({plan_signature(plan)}): the planner changed since the run")
                continue
            timed.append((case, run, plan))
    measured = as_measured([p for _, _, p in timed], [run.get("compiler") for _, run, _ in timed])
    for (case, run, _), (plan, how) in zip(timed, measured, strict=True):
        t0 = time.time()
        plan, stats, note = counters_for(case["workload"], case["shape"], run["strategy"], gpu, max_elements,
                                         plan=plan)
        note = "; ".join(x for x in (how, note) if x)
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


def samples_from_sweeps(sessions: list, gpu_preset: str, max_elements: int = 1 << 22) -> list:
    """One :class:`Sample` per validated row of the launch sweeps (``launches:<case>`` steps,
    :mod:`benchmarks.launch_sweep`) in ``sessions`` (the GPU runbook's ``session.json`` dicts): the same astitch
    computation at several block-size caps, each the plan ``asim.compile(..., max_block_threads=cap)`` draws.
    The case is named ``<case> launches`` and the strategy ``astitch@<cap>``, so that "the model picks the GPU's
    fastest" is judged among one sweep's block sizes, apart from the suite's strategies.  A row whose plan the
    planner no longer draws at its cap (``plan_signature``) is skipped and said so, as a suite run is."""
    gpu = asim.gpu(gpu_preset)
    timed = []
    for session in sessions:
        if session.get("gpu_preset", gpu_preset) != gpu_preset:
            raise asim.AStitchError(f"a launch sweep was compiled for the {session.get('gpu_preset')} preset and "
                                    f"the results for {gpu_preset}: calibrate one GPU model at a time (pass the "
                                    "sessions of the window the results.json came from)")
        for name, step in (session.get("steps") or {}).items():
            if not name.startswith("launches:") or not step.get("rows"):
                continue
            g = asim.workload(step["workload"], **step["shape"])
            for row in step["rows"]:
                cap = int(row["max_block_threads"][0])
                label = f"{step['case']} astitch@{cap}"
                if not row.get("ok") or row.get("gpu_us") is None:
                    log(f"  skip {label}: did not validate")
                    continue
                plan = asim.compile(g, strategy="astitch", gpu=gpu, max_block_threads=cap)
                if row.get("plan_signature") and row["plan_signature"] != plan_signature(plan):
                    log(f"  skip {label}: the plan measured ({row['plan_signature']}) is not the plan the code "
                        f"compiles now at max_block_threads={cap} ({plan_signature(plan)})")
                    continue
                timed.append((step, row, cap, plan))
    measured = as_measured([t[3] for t in timed], [t[1].get("compiler") for t in timed])
    samples = []
    for (step, row, cap, _), (plan, how) in zip(timed, measured, strict=True):
        plan, stats, note = counters_for(step["workload"], step["shape"], "astitch", gpu, max_elements, plan=plan,
                                         options={"max_block_threads": cap})
        note = "; ".join(x for x in (how, note) if x)
        kernel_us = row.get("kernel_us") or []
        per_kernel = list(kernel_us) if len(kernel_us) == len(plan.kernels) else []
        samples.append(Sample(f"{step['case']} launches", step["workload"], dict(step["shape"]), f"astitch@{cap}",
                              gpu, list(plan.kernels), stats, per_kernel, float(row["gpu_us"]), note))
        log(f"  counters {step['case']} launches astitch@{cap} {note}")
    return samples
