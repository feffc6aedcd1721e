"""Predicted against measured, honestly: the cost model fitted on two thirds of the cases, judged on the rest.

``python -m benchmarks.gpu_session --render`` runs this on the merged results of a
GPU window (on the CPU, here).  It reuses :mod:`benchmarks.calibrate` (the SIMT
model's counters per timed plan, the least-squares fit of the cost model's
constants, Spearman, median |error|, same-fastest-strategy) and adds the split
the issue asks for:

* a third of the *cases* (every strategy of a case together, so no case is half
  seen) is held out, chosen by a seeded shuffle (:data:`SEED`) and recorded;
* the constants are fitted on the other two thirds only;
* the held-out third is predicted with the constants in ``cost.py`` now and with
  the fitted ones: Spearman rank correlation, median |error| and the rate at
  which the model picks the strategy the GPU found fastest are reported there,
  beside the in-sample numbers (which flatter the model and are labelled so).

Which constants are fitted is read from ``astitch_sim/simt/cost.py``
(:func:`fittable`): calibrate's defaults where the cost model still has them,
plus every other non-integer constant the cost model exposes that calibrate has
no bounds for (bounded to 1/100..100x its present value), so a term added to
the cost model (an instruction-issue rate, say) is fitted without editing this file.
"""
from __future__ import annotations

import math
import random

from benchmarks import calibrate as C

SEED = 29
#: constants of cost.py that describe the hardware or are counts, never fitted
FIXED = ("sms", "clock_ghz", "bytes_in_flight_per_warp", "shared_bytes_per_clock", "library_efficiency")


def fittable(gpu) -> tuple:
    """(parameter names, extra bounds) for the constants ``cost.py`` exposes for ``gpu``."""
    present = C.current_constants(gpu)
    params = [p for p in C.DEFAULT_PARAMS if p in present]
    extra = {}
    for k, v in present.items():
        if k in C.PARAM_BOUNDS or k in FIXED or isinstance(v, bool) or isinstance(v, int) or not v:
            continue
        params.append(k)
        extra[k] = (abs(float(v)) / 100, abs(float(v)) * 100)
    return params, extra


def split_cases(samples: list, fraction: float = 1 / 3, seed: int = SEED) -> tuple:
    """(fit samples, held-out samples, held-out case keys): a seeded third of the cases held out."""
    cases = sorted({s.case for s in samples})
    rng = random.Random(seed)
    rng.shuffle(cases)
    k = max(1, round(len(cases) * fraction)) if len(cases) >= 2 else 0
    held = set(cases[:k])
    return [s for s in samples if s.case not in held], [s for s in samples if s.case in held], sorted(held)


def _stats(cc: dict) -> dict:
    return {"spearman": cc["spearman"], "median_abs_rel_error": cc["median_rel_error"],
            "same_fastest": cc["same_fastest"], "cases": cc["cases"],
            "same_fastest_rate": cc["same_fastest"] / cc["cases"] if cc["cases"] else None, "points": len(cc["rows"])}


def run(samples: list) -> dict:
    """The held-out cross-check over ``samples`` (:class:`calibrate.Sample`, one per timed plan)."""
    if not samples:
        return {"error": "no validated, timed plan runs"}
    params, bounds = fittable(samples[0].gpu)
    fit_set, held, held_cases = split_cases(samples)
    out = {"held_out_cases": held_cases, "seed": SEED, "params": params,
           "points": {"fit": len(fit_set), "held_out": len(held)},
           "constants_now": {p: C.current_constants(samples[0].gpu)[p] for p in params}}
    out["all_now"] = _stats(C.crosscheck(samples))
    if held:
        out["held_out_now"] = _stats(C.crosscheck(held))
    try:
        fit = C.fit_constants(fit_set, params, bounds=bounds)
    except ValueError as e:
        out["fit_error"] = str(e)
        return out
    out["fitted"] = fit.params
    out["fit"] = {"points": fit.points, "residual_rms_log": fit.residual_rms, "frozen": fit.frozen,
                  "at_bound": fit.at_bound, "message": fit.message}
    out["in_sample_fitted"] = _stats(C.crosscheck(fit_set, fit.params))
    if held:
        cc = C.crosscheck(held, fit.params)
        out["held_out_fitted"] = _stats(cc)
        out["held_out_rows"] = cc["rows"]
    return out


def _fmt(x, pct=False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:.3f}"


def markdown(cc: dict, banner: str = "") -> list:
    L = ["## Cross-check: predicted against measured (a third of the cases held out of the fit)", ""]
    if banner:
        L += [f"**{banner}**", ""]
    if cc.get("error"):
        return L + [cc["error"], ""]
    L += [f"Held out (seed {cc['seed']}): {', '.join(cc['held_out_cases']) or 'none'}; fitted on "
          f"{cc['points']['fit']} plans, judged on {cc['points']['held_out']}. Constants fitted: "
          f"{', '.join(cc['params'])}.", "",
          f"Targets: Spearman >= {C.TARGET_SPEARMAN}, median |error| <= {100 * C.TARGET_MEDIAN_ERROR:.0f}%.", "",
          "| set | constants | points | Spearman | median abs error | same fastest strategy |", "|---|---|---|---|---|---|"]
    for key, label in (("all_now", "all plans | cost.py now"), ("held_out_now", "held out | cost.py now"),
                       ("in_sample_fitted", "fit set (in-sample, flatters) | fitted"),
                       ("held_out_fitted", "**held out** | fitted")):
        s = cc.get(key)
        if s:
            rate = f"{s['same_fastest']}/{s['cases']}" if s["cases"] else "-"
            L.append(f"| {label} | {s['points']} | {_fmt(s['spearman'])} | {_fmt(s['median_abs_rel_error'], True)} "
                     f"| {rate} |")
    if cc.get("fitted"):
        L += ["", "| constant | cost.py now | fitted on two thirds |", "|---|---|---|"]
        for p, v in cc["fitted"].items():
            L.append(f"| {p} | {C.format_value(cc['constants_now'][p])} | {C.format_value(v)} |")
    elif cc.get("fit_error"):
        L += ["", f"No fit: {cc['fit_error']}"]
    return L + [""]


__all__ = ["run", "split_cases", "fittable", "markdown", "SEED"]
