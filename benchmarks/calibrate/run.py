"""``calibrate(results.json)``: fit, cross-check, write calibration.json and crosscheck.md; the command line."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Optional

import numpy as np

from astitch_sim.errors import AStitchError

from .common import DEFAULT_PARAMS, PARAM_BOUNDS, TARGET_MEDIAN_ERROR, TARGET_SPEARMAN, log
from .counters import samples_from_results, samples_from_sweeps
from .crosscheck_report import crosscheck, leave_one_out, plot_crosscheck, snippet, verdict, write_crosscheck_md
from .fit import fit_constants
from .synthetic import SYNTHETIC_BANNER


def calibrate(results_path: str, out_dir: Optional[str] = None, max_elements: int = 1 << 22, params=DEFAULT_PARAMS,
              allow_simulator: bool = False, loo: bool = True, plot: bool = True, sweeps=()) -> dict:
    """Everything the command does; returns the calibration dict (also written to calibration.json).
    ``sweeps``: paths of the GPU runbook's ``session.json`` files whose launch sweeps join the data (the same
    astitch computation at several block sizes: what a block-size term would be fitted on)."""
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
    sessions = []
    for path in sweeps:
        try:
            with open(path) as f:
                session = json.load(f)
        except (OSError, ValueError) as e:
            raise AStitchError(f"--sweeps {path}: cannot read it ({e}); pass a session.json that "
                               "benchmarks.gpu_session wrote (parts/p*/session.json)") from None
        if session.get("mode", "gpu") != mode:
            raise SystemExit(f"{path} is a {session.get('mode')} run and {results_path} a {mode} one: "
                             "a launch sweep joins the results of its own kind (and GPU) only")
        sessions.append(session)
    samples = samples_from_results(results, max_elements)
    if sessions:
        sweep_samples = samples_from_sweeps(sessions, results["gpu_preset"], max_elements)
        log(f"{len(sweep_samples)} launch-sweep plan(s) from {len(sessions)} session file(s)")
        samples += sweep_samples
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
    ap.add_argument("results", help="results.json written by benchmarks.gpu_bench on a GPU")
    ap.add_argument("--out", help="folder for calibration.json / crosscheck.* (default: beside results.json)")
    ap.add_argument("--max-elements", type=int, default=1 << 22,
                    help="simulate plans whose largest tensor is bigger at a scaled shape and extrapolate the "
                         "counters (0: always full size; default 4194304)")
    ap.add_argument("--params", default=",".join(DEFAULT_PARAMS),
                    help=f"constants to fit, comma-separated (from: {', '.join(PARAM_BOUNDS)})")
    ap.add_argument("--sweeps", nargs="+", default=[], metavar="SESSION_JSON",
                    help="the runbook's session.json files whose launch sweeps (launches:<case> steps) join the "
                         "data: each block size's plan as a sample of case '<case> launches'")
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-workload-out check")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--allow-simulator", action="store_true",
                    help="accept a results file from the CUDA simulator (a dry run: its times mean nothing)")
    a = ap.parse_args(argv)
    params = [p.strip() for p in a.params.split(",") if p.strip()]
    try:
        cal = calibrate(a.results, a.out, a.max_elements, params, a.allow_simulator, not a.no_loo, not a.no_plot,
                        a.sweeps)
    except AStitchError as e:
        print(f"calibrate: {e}", file=sys.stderr)
        return 2
    out_dir = a.out or os.path.dirname(os.path.abspath(a.results))
    b, af = cal["crosscheck"]["before"], cal["crosscheck"]["after"]
    if cal["banner"]:
        print(f"*** {cal['banner']} ***")
    print(f"cost model vs measurement ({cal['source']}); targets: Spearman >= {TARGET_SPEARMAN}, "
          f"median error <= {100 * TARGET_MEDIAN_ERROR:.0f}%")
    for label, cc in (("constants in cost.py now", b), ("fitted (in-sample)", af)):
        if cc:
            print(f"  {label:<26} Spearman {cc['spearman']:.3f} [{verdict(cc['spearman'] >= TARGET_SPEARMAN)}]"
                  f"  median error {100 * cc['median_rel_error']:.1f}% "
                  f"[{verdict(cc['median_rel_error'] <= TARGET_MEDIAN_ERROR)}]"
                  f"  same fastest {cc['same_fastest']}/{cc['cases']}")
    loo = cal["crosscheck"]["leave_one_workload_out_median_error"]
    if loo is not None and not math.isnan(loo):
        print(f"  leave-one-workload-out median error {100 * loo:.1f}% "
              f"[{verdict(loo <= TARGET_MEDIAN_ERROR)}]")
    if cal["snippet"] and cal["mode"] == "gpu":
        print("\nPaste into COST_CONSTANTS in astitch_sim/simt/cost.py (replacing the entry):\n")
        print(cal["snippet"])
    elif cal["snippet"]:
        print(f"\nDO NOT PASTE (not fitted to GPU measurements: {cal['banner']}); the entry would read:\n")
        print(cal["snippet"])
    print(f"\nwrote {out_dir}/calibration.json, crosscheck.md" + ("" if a.no_plot else ", crosscheck.png"))
    return 0
