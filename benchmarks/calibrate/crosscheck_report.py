"""The cross-check: predictions against measurements, leave-one-workload-out, crosscheck.md, the plot."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
from astitch_sim.simt import cost

from .common import TARGET_MEDIAN_ERROR, TARGET_SPEARMAN
from .fit import fit_constants, sample_points
from .model import predict_all
from .stats import median_abs_rel_error, same_fastest, spearman


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
                same_fastest=agree, cases=total, **per_kernel(samples, preds))


def per_kernel(samples: list, preds: list) -> dict:
    """Prediction vs measurement kernel by kernel, where every kernel of a plan was timed: how many, the median
    |error|, and the RMS of log(predicted / measured) (what the fit minimises).  A plan's total can be right by
    errors that cancel between its kernels; these cannot."""
    pts = [(preds[i][j], m) for i, j, m in sample_points(samples) if j is not None]
    if not pts:
        return dict(kernels=0, kernel_median_rel_error=float("nan"), kernel_rms_log=float("nan"))
    p, m = np.array(pts).T
    return dict(kernels=len(pts), kernel_median_rel_error=median_abs_rel_error(p, m),
                kernel_rms_log=float(np.sqrt(np.mean(np.log(p / m) ** 2))))


def leave_one_out(samples: list, params) -> float:
    """Median relative error when each workload's plans are predicted by a fit that never saw that workload."""
    errs = []
    for w in sorted({s.workload for s in samples}):
        train = [s for s in samples if s.workload != w]
        test = [s for s in samples if s.workload == w]
        if len(sample_points(train)) < len(params):
            continue
        f = fit_constants(train, params)
        cc = crosscheck(test, f.params)
        errs += [r["rel_error"] for r in cc["rows"]]
    return float(np.median(errs)) if errs else float("nan")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def summary_lines(cc: dict, label: str) -> list:
    sp, me = cc["spearman"], cc["median_rel_error"]
    return [f"| {label} | {sp:.3f} ({verdict(sp >= TARGET_SPEARMAN)}) | {cc['spearman_within_case']:.3f} "
            f"| {100 * me:.1f}% ({verdict(me <= TARGET_MEDIAN_ERROR)}) "
            f"| {cc['same_fastest']}/{cc['cases']} |"]


def snippet(gpu_name: str, fitted: dict, source: str, banner: str = "") -> str:
    """The COST_CONSTANTS entry to paste into astitch_sim/simt/cost.py (``banner``: why it must not be)."""
    entry = dict(cost.COST_CONSTANTS.get(gpu_name, cost.COST_CONSTANTS[cost.DEFAULT_PRESET]))
    entry.update(fitted)
    body = ",\n".join(f"        {k}={format_value(v)}" for k, v in entry.items())
    warn = f"    # NOT A CALIBRATION -- {banner}\n" if banner else ""
    return (f"{warn}    # calibrated by python -m benchmarks.calibrate from {source}\n"
            f"    \"{gpu_name}\": dict(\n{body},\n    ),")


def format_value(v) -> str:
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
    for cc, label in ((before, "now"), (after, "fitted")):
        if cc is not None and cc.get("kernels"):
            lines += ["", f"Per timed kernel ({label}, {cc['kernels']} kernels): median |error| "
                          f"{100 * cc['kernel_median_rel_error']:.1f}%, RMS of log(predicted / measured) "
                          f"{cc['kernel_rms_log']:.3f}."]
    if loo is not None and not math.isnan(loo):
        lines += ["", f"Leave-one-workload-out median error with fitted constants: {100 * loo:.1f}% "
                      f"({verdict(loo <= TARGET_MEDIAN_ERROR)}): each workload predicted by a fit that did not "
                      "see it (the honest number)."]
    if fit is not None:
        lines += ["", "## Fitted constants", "", "| constant | before | fitted | sensitivity |", "|---|---|---|---|"]
        for p, v in fit.params.items():
            sens = fit.sensitivity.get(p, 0.0)
            flag = (" (not seen by this data: kept)" if p in fit.frozen
                    else " (at a bound)" if p in fit.at_bound else "")
            lines.append(f"| {p} | {format_value(fit.initial[p])} | {format_value(v)} | {sens:.3g}{flag} |")
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
