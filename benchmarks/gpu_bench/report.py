"""Reports: the summary, results.md (a table per case), plot.png, results.json."""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from .common import SIM_NOTE


def summarize(results: dict) -> dict:
    """The issue's targets, computed from the results (None where there is nothing to compute)."""
    if results.get("mode") == "simulator":
        return {"note": f"{SIM_NOTE}: no targets are evaluated"}
    sp = []
    irregular = []
    large = []
    for c in results["cases"]:
        runs = {r["name"]: r for r in c["runs"] if r.get("gpu_us") and (r.get("validation") or {}).get("ok")}
        a, x = runs.get("astitch"), runs.get("xla")
        if a and x:
            sp.append(x["gpu_us"] / a["gpu_us"])
        if c.get("irregular") and a:
            for b in ("jax.jit", "torch.compile"):
                if b in runs:
                    irregular.append({"case": c["key"], "baseline": b, "astitch_us": a["gpu_us"],
                                      "baseline_us": runs[b]["gpu_us"], "ok": a["gpu_us"] <= runs[b]["gpu_us"]})
        if c.get("large") and a and a.get("pct_of_copy") is not None:
            large.append({"case": c["key"], "pct_of_copy": a["pct_of_copy"], "ok": a["pct_of_copy"] >= 80})
    geo = float(np.exp(np.mean(np.log(sp)))) if sp else None
    from benchmarks.headline import headline
    return {"headline": headline(results), "astitch_vs_xla_geomean": geo, "astitch_vs_xla_cases": len(sp),
            "astitch_vs_xla_ok": (geo >= 1.5) if geo else None,
            "irregular_vs_baselines": irregular, "large_pct_of_copy": large}


def fmt_value(v, fmt="{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def table_cell(text: str, limit: int = 120) -> str:
    """``text`` fit for one Markdown table cell: one line (an error's message often spans several), no bare
    ``|``, at most ``limit`` characters."""
    one = " ".join(str(text).split()).replace("|", "\\|")
    return one if len(one) <= limit else one[:limit - 1] + "…"


def write_markdown(results: dict, path: str) -> None:
    prov = results["provenance"]
    sim = results["mode"] == "simulator"
    L = [f"# gpu_bench results: {prov.get('device')}", ""]
    if sim:
        L += [f"**{SIM_NOTE}.** Every time below is the host wall clock of Numba's CUDA simulator at tiny "
              "shapes: it says the pipeline runs and the plans validate, nothing about speed.", ""]
    copy = results.get("copy") or {}
    L += [f"- date {prov.get('date')}, commit `{prov.get('git_commit')}`, sources `{prov.get('source_digest')}`",
          f"- device {prov.get('device')} (cc {prov.get('compute_capability')}), driver {prov.get('driver')}, "
          f"CUDA driver API {prov.get('cuda_driver_version')}, runtime {prov.get('cuda_runtime_version')}",
          "- " + ", ".join(f"{k} {v}" for k, v in prov.get("versions", {}).items() if v),
          f"- command `{prov.get('command')}`",
          f"- plans compiled for the **{results['gpu_preset']}** preset; shapes: {results['settings']['shapes']}; "
          f"{results['settings']['reps']} timed repetitions (median), {results['settings']['warmup']} warm-up, "
          f"L2 flushed with {results['settings']['flush_bytes'] / 2**20:.0f} MiB before each",
          f"- device-to-device copy: {fmt_value(copy.get('bandwidth_gbs'))} GB/s (memcpy, "
          f"{fmt_value(copy.get('bytes', 0) / 2**20, '{:.0f}')} MiB read+written); Numba copy kernel "
          f"{fmt_value(copy.get('numba_copy_kernel_bandwidth_gbs'))} GB/s" + (f" ({SIM_NOTE})" if sim else ""), ""]
    s = results.get("summary") or {}
    if not sim:
        from benchmarks.headline import markdown as headline_markdown
        L += headline_markdown(s.get("headline") or {})
        L += ["## Targets", "",
              f"- astitch over our xla plans, geomean GPU time: {fmt_value(s.get('astitch_vs_xla_geomean'), '{:.2f}')}x "
              f"over {s.get('astitch_vs_xla_cases')} cases (target >= 1.5x: "
              f"{'met' if s.get('astitch_vs_xla_ok') else 'not met' if s.get('astitch_vs_xla_ok') is False else '-'})"]
        for r in s.get("irregular_vs_baselines", []):
            L.append(f"- {r['case']}: astitch {r['astitch_us']:.1f} us vs {r['baseline']} {r['baseline_us']:.1f} us "
                     f"({'met' if r['ok'] else 'not met'}: target astitch <= baseline)")
        for r in s.get("large_pct_of_copy", []):
            L.append(f"- {r['case']}: astitch at {r['pct_of_copy']:.0f}% of copy bandwidth "
                     f"({'met' if r['ok'] else 'not met'}: target >= 80%)")
        L.append("")
    unit = f" ({SIM_NOTE})" if sim else ""
    for c in results["cases"]:
        L += [f"## {c['key']}: {c.get('title', '')}", "",
              f"shape {c['shape']}; minimum traffic {c['min_bytes']['total'] / 1e6:.2f} MB"
              + ("; irregular shape" if c.get("irregular") else "") + ("; large" if c.get("large") else "")
              + (f"; {c['notes']}" if c.get("notes") else ""), "",
              f"| run | kernels | GPU time us{unit} | end-to-end us | GB/s | % of copy | speedup vs xla | valid "
              "(rel err) |", "|---|---|---|---|---|---|---|---|"]
        for r in c["runs"]:
            if r.get("skipped"):
                L.append(f"| {r['name']} | - | skipped: {r['skipped']} | | | | | |")
                continue
            if r.get("error"):
                L.append(f"| {r['name']} | - | error: {table_cell(r['error'])} | | | | | |")
                continue
            v = r.get("validation") or {}
            nk = len(r["kernels"]) if r.get("kernels") else "-"
            label = r["name"] + (f" ({r['device']})" if r.get("device") == "cpu" else "")
            L.append(f"| {label} | {nk} | {fmt_value(r.get('gpu_us'))} | {fmt_value(r.get('e2e_us'))} "
                     f"| {fmt_value(r.get('bandwidth_gbs'))} | {fmt_value(r.get('pct_of_copy'), '{:.0f}%')} "
                     f"| {fmt_value(r.get('speedup_vs_xla'), '{:.2f}x')} "
                     f"| {'yes' if v.get('ok') else 'NO'} ({fmt_value(v.get('max_rel_l2'), '{:.1e}')}) |")
        L.append("")
    L += ["GPU time: CUDA events, kernels queued back to back (host launch cost excluded); end-to-end: host wall "
          "clock from the first launch to synchronize (launch overhead included). JAX GPU time is pipelined "
          "(no event API). See benchmarks/README.md."]
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def write_plot(results: dict, path: str) -> Optional[str]:
    """Speedup over our xla plan and % of copy bandwidth, per case and run. Returns why not, if skipped."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: plot.png skipped"
    if results.get("mode") == "simulator":
        return f"plot.png skipped: {SIM_NOTE} (no speedups or bandwidths to draw)"
    cases = [c for c in results["cases"] if any(r.get("gpu_us") for r in c["runs"])]
    if not cases:
        return "no timed runs: plot.png skipped"
    names = []
    for c in cases:
        for r in c["runs"]:
            if r.get("gpu_us") and r["name"] not in names:
                names.append(r["name"])
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.1 * len(cases) + 3), 9), sharex=True)
    width = 0.8 / max(1, len(names))
    for j, n in enumerate(names):
        xs, sp, bw = [], [], []
        for i, c in enumerate(cases):
            r = next((r for r in c["runs"] if r["name"] == n and r.get("gpu_us")), None)
            if r is None:
                continue
            xs.append(i + (j - (len(names) - 1) / 2) * width)
            sp.append(r.get("speedup_vs_xla") or 0)
            bw.append(r.get("pct_of_copy") or 0)
        axes[0].bar(xs, sp, width, label=n)
        axes[1].bar(xs, bw, width, label=n)
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("speedup vs our xla plan (GPU time)")
    axes[1].axhline(80, color="r", lw=0.8, ls="--")
    axes[1].set_ylabel("% of device copy bandwidth")
    axes[1].set_xticks(range(len(cases)))
    axes[1].set_xticklabels([c["key"] for c in cases], rotation=35, ha="right", fontsize=8)
    axes[0].legend(fontsize=8, ncol=4)
    prov = results["provenance"]
    title = f"gpu_bench on {prov.get('device')} ({str(prov.get('date'))[:10]}, {results['gpu_preset']} plans)"
    if results.get("mode") == "synthetic":
        title = "SYNTHETIC (not measured) -- " + title
    fig.suptitle(title, color="red" if results.get("mode") != "gpu" else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_outputs(results: dict, out_dir: str, plot: bool = True) -> None:
    os.makedirs(out_dir, exist_ok=True)
    results["summary"] = summarize(results)
    tmp = os.path.join(out_dir, "results.json.tmp")
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1, default=_json_default)
    os.replace(tmp, os.path.join(out_dir, "results.json"))
    write_markdown(results, os.path.join(out_dir, "results.md"))
    if plot:
        why = write_plot(results, os.path.join(out_dir, "plot.png"))
        results["plot"] = why or "plot.png"
        with open(os.path.join(out_dir, "results.json"), "w") as f:   # record whether there is a plot
            json.dump(results, f, indent=1, default=_json_default)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)
