"""The headline of a GPU run: the astitch plan against ``jax.jit`` and ``torch.compile`` on the same graph.

Speed-ups over the project's own Numba copy of XLA's plans say how stitching
compares with XLA's fusion *in the same code generator*; what a user asks is
whether the stitched kernels beat what they would run instead.  So the summary
leads with, per case, astitch's GPU time against each of :data:`AGAINST` (the
xla plan and eager PyTorch follow), and a verdict that respects the noise: a
run's spread is its interquartile range over the timed repetitions, and two
runs whose ranges overlap are "within spread", neither faster nor slower.
"""
from __future__ import annotations

import math

from benchmarks.jax_timing import spread

#: what astitch is compared against, headline first
AGAINST = ("jax.jit", "torch.compile", "torch.eager", "xla")


def run_spread(run: dict) -> dict:
    """The run's recorded spread, or one computed from its samples."""
    return run.get("spread") or spread(run.get("gpu_us_samples") or ([run["gpu_us"]] if run.get("gpu_us") else []))


def verdict(a: dict, b: dict) -> str:
    """'faster' / 'slower' / 'within spread': ``a`` against ``b`` (spread dicts)."""
    if a["p75"] < b["p25"]:
        return "faster"
    if a["p25"] > b["p75"]:
        return "slower"
    return "within spread"


def headline(results: dict) -> dict:
    """Per case and against each of :data:`AGAINST`: speed-up (other / astitch) and verdict; geomeans."""
    rows, ratios = [], {b: [] for b in AGAINST}
    for c in results.get("cases", []):
        ok = {r["name"]: r for r in c.get("runs", [])
              if r.get("gpu_us") and (r.get("validation") or {}).get("ok")}
        a = ok.get("astitch")
        if not a:
            continue
        sa = run_spread(a)
        row = {"case": c["key"], "astitch_us": a["gpu_us"], "astitch_spread": sa, "against": {}}
        for b in AGAINST:
            if b not in ok:
                continue
            sb = run_spread(ok[b])
            ratio = ok[b]["gpu_us"] / a["gpu_us"]
            row["against"][b] = {"us": ok[b]["gpu_us"], "speedup": ratio, "verdict": verdict(sa, sb),
                                 "spread": sb}
            ratios[b].append(ratio)
        rows.append(row)
    geo = {b: float(math.exp(sum(math.log(x) for x in v) / len(v))) for b, v in ratios.items() if v}
    return {"against": list(AGAINST), "per_case": rows, "geomean_speedup": geo,
            "cases": {b: len(v) for b, v in ratios.items()},
            "note": "speedup = other's GPU time / astitch's (>1: astitch faster); verdicts compare interquartile "
                    "ranges of the timed repetitions"}


def markdown(h: dict) -> list:
    """The headline section of results.md."""
    L = ["## Headline: astitch against jax.jit and torch.compile (same graph, GPU time)", ""]
    if not h.get("per_case"):
        return L + ["No case has a validated, timed astitch run.", ""]
    geo = h["geomean_speedup"]
    L.append("Geometric mean speed-up of astitch (other's time / astitch's): " + ", ".join(
        f"**{b}** {geo[b]:.2f}x over {h['cases'][b]} cases" for b in h["against"] if b in geo) + ".")
    L += ["", "| case | astitch us (p25-p75) | " + " | ".join(h["against"]) + " |",
          "|---|---|" + "---|" * len(h["against"])]
    for r in h["per_case"]:
        s = r["astitch_spread"]
        cells = []
        for b in h["against"]:
            x = r["against"].get(b)
            cells.append(f"{x['speedup']:.2f}x ({x['verdict']})" if x else "-")
        L.append(f"| {r['case']} | {r['astitch_us']:.1f} ({s['p25']:.1f}-{s['p75']:.1f}) | " + " | ".join(cells)
                 + " |")
    return L + ["", h["note"] + ".", ""]


__all__ = ["AGAINST", "headline", "markdown", "verdict", "run_spread"]
