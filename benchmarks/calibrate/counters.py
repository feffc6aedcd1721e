"""Counters for a results file: simulate the plans (scaled to at most max_elements, then extrapolated)."""
from __future__ import annotations

import copy
import math
import time
from math import prod
from typing import NamedTuple, Optional

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


class Timed(NamedTuple):
    """One GPU-timed plan as a results file or a launch sweep recorded it, in the terms :func:`timed_samples`
    needs: which plan (``workload``, ``shape``, ``strategy``, ``asim.compile``'s ``options``), what was timed
    (``signature``: ``plan_signature`` recorded before apply_compiler; ``compiler``: the run's apply_compiler
    record; ``kernel_us`` per kernel, ``gpu_us`` in all) and how the sample is named (``case``, ``label``:
    the sample's strategy column)."""
    case: str
    workload: str
    shape: dict
    strategy: str
    label: str
    options: dict
    signature: Optional[str]
    compiler: Optional[dict]
    kernel_us: list
    gpu_us: float


def timed_samples(timed: list, gpu, max_elements: int) -> list:
    """One :class:`Sample` per :class:`Timed` whose plan the planner still draws (else skipped and said so):
    counted from the plan as the GPU ran it (:func:`as_measured`), scaled down where it is large
    (:func:`counters_for`)."""
    drawn = []
    for t in timed:
        plan = asim.compile(asim.workload(t.workload, **t.shape), strategy=t.strategy, gpu=gpu, **t.options)
        if t.signature and t.signature != plan_signature(plan):
            log(f"  skip {t.case} {t.label}: the plan measured ({t.signature}) is not the plan the code compiles "
                f"now ({plan_signature(plan)}): the planner changed since the run")
            continue
        drawn.append((t, plan))
    samples = []
    measured = as_measured([p for _, p in drawn], [t.compiler for t, _ in drawn])
    for (t, _), (plan, how) in zip(drawn, measured, strict=True):
        t0 = time.time()
        plan, stats, note = counters_for(t.workload, t.shape, t.strategy, gpu, max_elements, plan=plan,
                                         options=t.options)
        note = "; ".join(x for x in (how, note) if x)
        if len(plan.kernels) != len(t.kernel_us):
            log(f"  warning {t.case} {t.label}: the plan now has {len(plan.kernels)} kernels, the measured one "
                f"had {len(t.kernel_us)}: the compiler changed since the run; fitting on the plan total only")
            per_kernel = []
        else:
            per_kernel = list(t.kernel_us)
        samples.append(Sample(t.case, t.workload, dict(t.shape), t.label, gpu, list(plan.kernels), stats,
                              per_kernel, float(t.gpu_us), note))
        log(f"  counters {t.case:<32} {t.label:<8} {time.time() - t0:6.1f}s {note}")
    return samples


def samples_from_results(results: dict, max_elements: int = 1 << 22, strategies=None) -> list:
    """One :class:`Sample` per plan run in ``results`` that validated and was timed."""
    timed = []
    for case in results["cases"]:
        for run in case["runs"]:
            if run.get("kind") != "plan" or run.get("gpu_us") is None:
                continue
            if not (run.get("validation") or {}).get("ok", False):
                log(f"  skip {case['key']} {run['name']}: did not validate")
                continue
            if strategies and run["strategy"] not in strategies:
                continue
            timed.append(Timed(case["key"], case["workload"], case["shape"], run["strategy"], run["strategy"], {},
                               run.get("plan_signature"), run.get("compiler"),
                               [k.get("gpu_us") for k in run.get("kernels", [])], run["gpu_us"]))
    return timed_samples(timed, asim.gpu(results["gpu_preset"]), max_elements)


#: what a launch sweep's step and each of its rows must hold to be read (``benchmarks.launch_sweep.sweep``)
SWEEP_STEP_KEYS = ("case", "workload", "shape", "rows")
SWEEP_ROW_KEYS = ("max_block_threads", "ok", "gpu_us")


def samples_from_sweeps(sessions: list, gpu_preset: str, max_elements: int = 1 << 22) -> list:
    """One :class:`Sample` per validated row of the launch sweeps (``launches:<case>`` steps,
    :mod:`benchmarks.launch_sweep`) in ``sessions`` (the GPU runbook's ``session.json`` dicts): the same astitch
    computation at several block-size caps, each the plan ``asim.compile(..., max_block_threads=cap)`` draws.
    The case is named ``<case> launches`` and the strategy ``astitch@<cap>``, so that "the model picks the GPU's
    fastest" is judged among one sweep's block sizes, apart from the suite's strategies.  A row whose plan the
    planner no longer draws at its cap (``plan_signature``) is skipped and said so, as a suite run is."""
    timed = []
    for session in sessions:
        if session.get("gpu_preset", gpu_preset) != gpu_preset:
            raise asim.AStitchError(f"a launch sweep was compiled for the {session.get('gpu_preset')} preset and "
                                    f"the results for {gpu_preset}: calibrate one GPU model at a time (pass the "
                                    "sessions of the window the results.json came from)")
        for name, step in (session.get("steps") or {}).items():
            if not name.startswith("launches:") or not step.get("rows"):
                continue
            for row in [step, *step["rows"]]:
                missing = [k for k in (SWEEP_STEP_KEYS if row is step else SWEEP_ROW_KEYS) if k not in row]
                if missing:
                    raise asim.AStitchError(f"{name}: a launch sweep's record lacks {', '.join(missing)}: pass the "
                                            "session.json benchmarks.gpu_session wrote, unedited")
            for row in step["rows"]:
                cap = int(row["max_block_threads"][0])
                if not row["ok"] or row["gpu_us"] is None:
                    log(f"  skip {step['case']} astitch@{cap}: did not validate")
                    continue
                timed.append(Timed(f"{step['case']} launches", step["workload"], step["shape"], "astitch",
                                   f"astitch@{cap}", {"max_block_threads": cap}, row.get("plan_signature"),
                                   row.get("compiler"), list(row.get("kernel_us") or []), row["gpu_us"]))
    return timed_samples(timed, asim.gpu(gpu_preset), max_elements)
