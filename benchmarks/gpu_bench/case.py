"""One case of the suite (workload and shape): every strategy's plan and the baselines, validated and timed."""
from __future__ import annotations

import gc
import time
import traceback
from typing import Optional

from benchmarks.validation import Validator

from .baseline_runs import check_run, run_baselines
from .clock import Clock
from .common import REL_TOL, SIM_NOTE, log
from .plans import make_plan_runner


def run_plan(plan, inputs, reference, names, clock: Clock) -> dict:
    run = {"kind": "plan", "name": plan.strategy, "strategy": plan.strategy,
           "kernels": [{"name": k.name, "kind": k.kind, "grid": k.grid, "block": k.block,
                        "shared_bytes": k.shared_bytes, "registers_per_thread": k.registers_per_thread,
                        "global_barriers": k.global_barriers} for k in plan.kernels]}
    t0 = time.perf_counter()
    runner = make_plan_runner(plan, inputs)
    sim_times = [] if clock.simulator else None
    outs = runner.fetch(sim_times)              # first run: compiles (cached per plan) and computes
    run["first_run_s"] = time.perf_counter() - t0
    run["timing_scope"] = "plan kernels only (+ refills of split-reduction result buffers), device-resident buffers"
    run["validation"] = check_run(outs, reference, names)
    del outs
    try:
        if clock.simulator:     # nothing to warm up in the simulator: the validation run is the timing
            t = dict(gpu_us=sum(sim_times), gpu_us_samples=[sum(sim_times)], kernel_us=sim_times,
                     e2e_us=sum(sim_times), e2e_us_samples=[sum(sim_times)], host_enqueue_us=None, reps=1,
                     method=f"host wall clock of the validation run ({SIM_NOTE})")
        else:
            t = clock.time_launches(runner.launches, runner.sync)
    finally:
        runner.close()
    kus = t.pop("kernel_us")
    if len(kus) == len(run["kernels"]):
        for k, us in zip(run["kernels"], kus):
            k["gpu_us"] = us
    run.update(t)
    return run


def prepare(graph, seed: int, on_gpu: bool) -> tuple:
    """``(inputs, reference, output names, validator)`` of one case: the seeded inputs, the numpy reference, and
    the :class:`~benchmarks.validation.Validator` every run of the case is checked with (made once: on a GPU it
    holds the reference on the device).  The suite's cases and the launch sweeps (``benchmarks.launch_sweep``)
    both start here, so both check against the same reference the same way."""
    import astitch_sim as asim
    from astitch_sim.frontends.workloads import workload_inputs
    inputs = workload_inputs(graph, seed=seed)
    reference = asim.reference(graph, inputs)
    names = [o.name for o in graph.outputs]
    return inputs, reference, names, Validator(reference, names, REL_TOL, on_gpu=on_gpu)


def run_case(case, mode_shape: str, settings: dict, clock: Clock, strategies, baselines_wanted) -> dict:
    import astitch_sim as asim
    from benchmarks.suite import LARGE_BYTES, graph_bytes

    shape = case.shape_for(mode_shape)
    graph = asim.workload(case.workload, **shape)
    in_bytes, out_bytes = graph_bytes(graph)
    rec = {"key": case.key, "workload": case.workload, "shape": shape, "title": case.title,
           "irregular": case.irregular, "notes": case.notes,
           "min_bytes": {"inputs": in_bytes, "outputs": out_bytes, "total": in_bytes + out_bytes},
           "large": in_bytes + out_bytes >= LARGE_BYTES, "runs": []}
    t0 = time.perf_counter()
    inputs, reference, names, validator = prepare(graph, settings["seed"], settings["mode"] == "gpu")
    rec["reference_s"] = time.perf_counter() - t0
    rec["validation_method"] = validator.method
    log(f"  inputs + reference {rec['reference_s']:.1f}s ({(in_bytes + out_bytes) / 1e6:.1f} MB minimum traffic)")
    plans = {}
    for strategy in strategies:
        try:
            plans[strategy] = asim.compile(graph, strategy=strategy, gpu=settings["gpu_preset"])
        except Exception as e:
            rec["runs"].append({"kind": "plan", "name": strategy, "strategy": strategy,
                                "error": f"compile: {type(e).__name__}: {e}"})
            log(f"  {case.key} / {strategy}: compile FAILED: {e}")
    from astitch_sim.hardware.measured import plan_signature
    signatures = {s: plan_signature(p) for s, p in plans.items()}       # what the planner decided, before ptxas
    compiler = {s: {"applied": False} for s in plans}
    if settings.get("apply_compiler") and plans:        # what AStitch ships: ptxas-checked register caps
        from benchmarks.applied_plans import apply_for_case
        plans, compiler, rec["apply_compiler_s"] = apply_for_case(plans, lambda m: log(f"  {case.key} / {m}"))
    for strategy, plan in plans.items():
        log(f"  {case.key} / {strategy}")
        try:
            run = run_plan(plan, inputs, validator, names, clock)
            run["compiler"] = compiler[strategy]
            run["plan_signature"] = signatures[strategy]
            v = run["validation"]
            log(f"    {len(plan.kernels)} kernel(s), first run {run['first_run_s']:.1f}s, "
                f"{'valid' if v['ok'] else 'WRONG'} (rel err {v['max_rel_l2']:.1e}), "
                f"GPU {run['gpu_us']:.1f} us, e2e {run['e2e_us']:.1f} us")
        except Exception as e:
            run = {"kind": "plan", "name": strategy, "strategy": strategy,
                   "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=6)}
            log(f"    FAILED {run['error']}")
        rec["runs"].append(run)
        gc.collect()
    rec["runs"] += run_baselines(case, graph, inputs, validator, names, settings, baselines_wanted)
    validator.close()
    derive(rec, settings.get("copy_bandwidth_gbs"), settings["mode"] == "simulator")
    del inputs, reference
    gc.collect()
    return rec


def derive(rec: dict, copy_gbs: Optional[float], simulator: bool = False) -> None:
    """Bandwidth, % of copy, speedup vs our xla plan, for every timed run of a case.

    Not in simulator mode: there every time is the simulator's wall clock, and a bandwidth or a
    speedup computed from it would only invite misuse (each run is marked with the note instead)."""
    if simulator:
        for r in rec["runs"]:
            r["timing_note"] = SIM_NOTE
        return
    from benchmarks.headline import run_spread
    for r in rec["runs"]:
        if r.get("gpu_us"):
            r["spread"] = run_spread(r)
    total = rec["min_bytes"]["total"]
    xla = next((r for r in rec["runs"] if r.get("strategy") == "xla" and r.get("gpu_us")), None)
    for r in rec["runs"]:
        if not r.get("gpu_us"):
            continue
        r["bandwidth_gbs"] = total / (r["gpu_us"] * 1e3)
        r["pct_of_copy"] = 100 * r["bandwidth_gbs"] / copy_gbs if copy_gbs else None
        r["speedup_vs_xla"] = xla["gpu_us"] / r["gpu_us"] if xla else None
        if xla and r.get("e2e_us") and xla.get("e2e_us"):
            r["e2e_speedup_vs_xla"] = xla["e2e_us"] / r["e2e_us"]
