"""One computation at several block sizes, timed on the GPU: data for the cost model's price of a launch.

The second H200 window (``benchmarks/results/2026-11-29-h200/NOTES.md``) found the DIEN softmax <750000,32>
running 48.0 us as 46875 blocks of 128 threads (the first window's fusionstitching plan) and 56.3 us as 5860
blocks of 1024 (today's astitch plan), where the cost model prices every block size of it alike (its launch
search lists 66.91 us for each, ``strategies/astitch_launch.py``) and so keeps the paper's 1024.  Two plans
of two strategies are not a measurement of block size: this sweep is.  For each case in :data:`SWEEPS` it
compiles the astitch plan with ``max_block_threads`` at each of the case's caps (the launch search then draws
at most that block: the rows packed per block follow it; caps that draw one plan are timed once), applies ptxas's register counts as the suite does
(``benchmarks.applied_plans``), checks every run against the numpy reference and times it with the suite's
clock (CUDA events, L2 flushed: :mod:`benchmarks.gpu_bench`), and records beside it what the cost model
predicts for the same plan: the planner's static estimate and the SIMT model's simulated time.

The record is a ``launches:<case>`` step of the GPU runbook (:mod:`benchmarks.gpu_session`); the render
prints one table per case (``session.md``).  A model term that prices block size can then be fitted to the
measured times (``benchmarks.calibrate``), where the sweep shows one.

    python -m benchmarks.launch_sweep softmax_750000x32 --simulator     # the step alone, in Numba's simulator
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Optional

#: suite case -> the ``max_block_threads`` caps it is timed at
SWEEPS = {
    # the DIEN softmax: 8 lanes per 32-element row, 16 to 128 rows per block
    "softmax_750000x32": (128, 256, 512, 1024),
    # BERT's layer norm: a row of 768 per task; one-kernel row reductions at copy bandwidth are where the model
    # over-predicts most (the second window's cross-check: fusionstitching 46.5 predicted, 26.2 measured)
    "layernorm_16384x768": (128, 256, 512, 1024),
    # the third window (benchmarks/results/2026-11-30-h200/NOTES.md) measured both sweeps faster in smaller blocks
    # at equal occupancy (softmax 48.0 us at 128 threads, 56.0 at 1024; layer norm 25.2 at 32, 26.4 at 1024) where
    # the model prices them alike or the other way round; the sweeps below are the data to fit a term on.
    # RMSNorm's 4096-wide rows: a row per block of 64 or of 128 threads (the static estimate: 49.9 against 35.4 us)
    "rmsnorm_4096x4096": (64, 128),
    # the attention softmax's rows of 512: one per 32-thread block, or 32 rows packed in a block of 1024
    "attention_softmax_196608x512": (512, 1024),
    # layer-norm backward's one cooperative kernel: a row per block of 64 to 512 threads (61.0-67.3 us estimated)
    "layernorm_backward_16384x768": (64, 128, 256, 512),
    # batch norm's one kernel with a grid barrier: 2048 blocks of 64 down to 256 of 1024 (30.2-25.9 us estimated)
    "batchnorm_train_65536x64": (64, 128, 256, 512, 1024),
    # the paper's <64,30000> row: split over 64 blocks of 64 threads (4096 blocks), 16 of 256, or one block of
    # 1024 per row (20.1, 20.1 and 8.9 us estimated): the task-splitting decision itself, measured
    "softmax_64x30000": (64, 256, 1024),
}
#: the largest tensor a run also simulates for the SIMT model's prediction (the static estimate always runs)
SIMULATE_ELEMENTS = 1 << 25


def sweep(key: str, simulator: bool, preset: str, caps: Optional[tuple] = None, log=print,
          l2_bytes: Optional[int] = None) -> dict:
    """The ``launches:<key>`` step's record: ``{"ok", "case", "shape", "rows": [...]}``, a row per cap with the
    plan's launch, its GPU time (per kernel and in all), the validation, and the model's predictions.
    ``l2_bytes``: the device's L2 as it reports it (the session's provenance), which the L2 flush between timed
    runs is sized from, as the suite's (``gpu_bench/run.py``); the preset's where not known."""
    import astitch_sim as asim
    from astitch_sim.hardware.measured import plan_signature
    from benchmarks.applied_plans import apply_for_case
    from benchmarks.gpu_bench import Clock
    from benchmarks.gpu_bench.case import prepare, run_plan
    from benchmarks.suite import select

    if key not in SWEEPS and caps is None:
        raise asim.AStitchError(f"no launch sweep for {key!r}: the sweeps are {', '.join(SWEEPS)}")
    (case,) = select([key])
    caps = tuple(caps or SWEEPS[key])
    shape = case.shape_for("sim" if simulator else "full")
    graph = asim.workload(case.workload, **shape)
    inputs, _, names, validator = prepare(graph, 0, on_gpu=not simulator)
    hw = asim.gpu(preset)
    l2 = l2_bytes or hw.l2_bytes
    clock = Clock(simulator, l2, 1 if simulator else 20, 0 if simulator else 3, clock_ghz=hw.clock_ghz)
    # caps that draw one plan (BERT's layer norm: 128, 256 and 512 all give 16384 blocks of 32) are timed once
    drawn: dict = {}
    for cap in caps:
        plan = asim.compile(graph, "astitch", preset, max_block_threads=cap)
        drawn.setdefault(plan_signature(plan), ([], plan))[0].append(cap)
    rows = []
    try:
        applied, compiler, _ = apply_for_case({f"astitch@{c[0]}": p for c, p in drawn.values()}, log)
        for signature, (cap_list, _) in drawn.items():
            label = f"astitch@{cap_list[0]}"
            plan = applied[label]
            t0 = time.perf_counter()
            run = run_plan(plan, inputs, validator, names, clock)
            row = {"max_block_threads": cap_list, "plan_signature": signature, "compiler": compiler[label],
                   "launches": [f"{k['grid']}x{k['block']}" for k in run["kernels"]],
                   "kernel_us": [k.get("gpu_us") for k in run["kernels"]], "gpu_us": run["gpu_us"],
                   "validation": run["validation"], "ok": bool(run["validation"]["ok"]),
                   "estimate_us": asim.estimate(plan)}
            if max(n.size for n in graph) <= SIMULATE_ELEMENTS:
                row["simulated_us"] = asim.simulate(plan, inputs).stats.predicted_us
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            log(f"  {key} astitch max_block_threads={'/'.join(map(str, cap_list))}: {', '.join(row['launches'])} "
                f"GPU {row['gpu_us']:.1f} us "
                f"(estimate {row['estimate_us']:.1f}), {'valid' if row['ok'] else 'WRONG'}")
    finally:
        validator.close()
    return {"ok": all(r["ok"] for r in rows) and len(rows) == len(drawn), "case": key, "workload": case.workload,
            "shape": shape, "l2_bytes": l2, "flush_bytes": clock.flush_bytes, "rows": rows}


def markdown(name: str, rec: dict, simulator: bool) -> list:
    """The step's table for ``session.md``: one row per cap."""
    what = "host wall clock in Numba's CUDA simulator: no GPU number" if simulator else "GPU time, CUDA events"
    from benchmarks.suite import shape_label
    shape = shape_label(rec["shape"]) if rec.get("shape") else "?"
    lines = [f"### {name}: {rec.get('workload')} {shape} under astitch, by block-size cap ({what})", "",
             "| max_block_threads | launches (grid x block) | measured us | static estimate us | simulated us | "
             "valid |", "|---|---|---|---|---|---|"]
    for r in rec.get("rows", []):
        sim = r.get("simulated_us")
        lines.append(f"| {', '.join(map(str, r['max_block_threads']))} | {', '.join(r['launches'])} | {r['gpu_us']:.1f} | "
                     f"{r['estimate_us']:.1f} | {'-' if sim is None else f'{sim:.1f}'} | "
                     f"{'yes' if r['ok'] else 'NO'} |")
    if rec.get("error"):
        lines.append(f"\nFailed: {rec['error']}")
    return lines + [""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.launch_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("cases", nargs="*", default=list(SWEEPS), help=f"suite cases (default: {', '.join(SWEEPS)})")
    p.add_argument("--simulator", action="store_true", help="Numba's CUDA simulator at the cases' tiny shapes")
    p.add_argument("--preset", default="H100", help="GPU preset the plans are compiled for (default H100)")
    p.add_argument("--caps", type=int, nargs="+", help="max_block_threads caps (default: each case's own)")
    p.add_argument("--out", help="write the records as JSON here")
    a = p.parse_args(argv)
    if a.simulator:
        import os
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    recs = {f"launches:{k}": sweep(k, a.simulator, a.preset, tuple(a.caps) if a.caps else None) for k in a.cases}
    for name, rec in recs.items():
        print("\n".join(markdown(name, rec, a.simulator)))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(recs, f, indent=1, default=str)
    return 0 if all(r["ok"] for r in recs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
