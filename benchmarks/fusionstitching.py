"""Search versus rules: unfused / xla / tvm / fusionstitching / astitch on the workload catalog.

For every catalog workload at its default (paper-size) shape: kernels, global
memory traffic and predicted time from the SIMT model (``asim.simulate``), and
the wall-clock time each strategy took to *plan* (``asim.compile``).  Then the
planning time of fusionstitching on every HLO fixture as well (a distribution:
the search is bounded by ``search_budget``, default 2000 schedules priced).

Predicted times are the SIMT model's cost model (uncalibrated constants; no GPU
was used).  Planning times are this machine's wall clock, best of ``--repeat``.

    python -m benchmarks.fusionstitching [--gpu H100] [--repeat 3] [--out benchmarks/results] [--no-fixtures]

Writes fusionstitching.json (with provenance) and fusionstitching.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import astitch_sim as asim
from astitch_sim.errors import AStitchError
from astitch_sim.frontends.workloads import workload_inputs

from benchmarks.simt_predictions import provenance

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures"

FIXTURE_DIRS = ("hlo", "ops", "models", "real_hlo")


def plan_time(graph, strategy, gpu, repeat):
    best, plan = None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = asim.compile(graph, strategy, gpu)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return plan, best


def catalog(gpu, repeat) -> list:
    rows = []
    for w in asim.list_workloads():
        g = asim.workload(w.name)
        inputs = workload_inputs(g)
        for s in asim.STRATEGIES:
            plan, dt = plan_time(g, s, gpu, repeat)
            res = asim.simulate(plan, inputs)
            rows.append({"workload": w.name, "shape": w.shape_str, "strategy": s,
                         "kernels": res.stats.kernel_launches, "global_bytes": res.stats.global_bytes,
                         "grid_barriers": res.stats.grid_barriers, "predicted_us": res.stats.predicted_us,
                         "plan_ms": dt * 1e3,
                         "search_estimate_us": plan.search.get("chosen_us") if plan.search else None})
            print(f"{w.name:20s} {s:16s} {res.stats.kernel_launches:3d} kernels {res.stats.predicted_us:9.2f} us "
                  f"plan {dt * 1e3:7.1f} ms", file=sys.stderr, flush=True)
    return rows


def fixtures(gpu, repeat) -> list:
    rows = []
    for d in FIXTURE_DIRS:
        for path in sorted((FIXTURES / d).glob("*.hlo")):
            try:
                g = asim.from_hlo_file(path)
            except AStitchError:
                continue
            plan, dt = plan_time(g, "fusionstitching", gpu, repeat)
            rows.append({"fixture": f"{d}/{path.name}", "plan_ms": dt * 1e3, "kernels": len(plan.kernels),
                         "xla_kernels": plan.search.get("xla_kernels", 0) + len(plan.library),
                         "budget_hit": plan.search.get("budget_hit", False)})
    return rows


def distribution(ms: list) -> dict:
    a = np.asarray(ms)
    return {"n": int(a.size), "min": float(a.min()), "median": float(np.median(a)),
            "p90": float(np.percentile(a, 90)), "max": float(a.max()), "over_1s": int((a >= 1000).sum())}


def markdown(prov, gpu, rows, fixture_rows) -> str:
    out = [f"# Search vs rules on the catalog ({gpu} preset)", "",
           f"{prov['what']}. Planning time: wall clock of `asim.compile`, best of {prov['repeat']}.", "",
           f"Date {prov['date']}, commit `{prov['git_commit'][:10]}`, python {prov['python']}, numpy {prov['numpy']}, "
           f"{prov['machine']}; command `{prov['command']}`.", ""]
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    out.append("| workload | " + " | ".join(strategies) + " |")
    out.append("|---|" + "---|" * len(strategies))
    by = {(r["workload"], r["strategy"]): r for r in rows}
    for w in dict.fromkeys(r["workload"] for r in rows):
        cells = []
        for s in strategies:
            r = by[(w, s)]
            cells.append(f"{r['kernels']} k, {r['global_bytes'] / 2**20:.1f} MiB, {r['predicted_us']:.1f} us, "
                         f"{r['plan_ms']:.0f} ms")
        out.append(f"| {w} ({by[(w, strategies[0])]['shape']}) | " + " | ".join(cells) + " |")
    out += ["", "Cells: kernels, global memory traffic, predicted time (SIMT model), planning time.", ""]
    tot = {s: sum(by[(w, s)]["predicted_us"] for w in dict.fromkeys(r["workload"] for r in rows)) for s in strategies}
    out.append("Sum of predicted times: " + ", ".join(f"{s} {tot[s]:.0f} us" for s in strategies) + ".")
    if fixture_rows is not None:
        cat = [by[(w, "fusionstitching")]["plan_ms"] for w in dict.fromkeys(r["workload"] for r in rows)]
        dc, df = distribution(cat), distribution([r["plan_ms"] for r in fixture_rows])
        out += ["", "## fusionstitching planning time (ms)", "",
                "| set | n | min | median | p90 | max | >= 1 s |", "|---|---|---|---|---|---|---|",
                f"| catalog | {dc['n']} | {dc['min']:.1f} | {dc['median']:.1f} | {dc['p90']:.1f} | {dc['max']:.1f} | "
                f"{dc['over_1s']} |",
                f"| HLO fixtures | {df['n']} | {df['min']:.1f} | {df['median']:.1f} | {df['p90']:.1f} | {df['max']:.1f} "
                f"| {df['over_1s']} |"]
        slow = sorted(fixture_rows, key=lambda r: -r["plan_ms"])[:5]
        out += ["", "Slowest fixtures: " + ", ".join(f"{r['fixture']} {r['plan_ms']:.0f} ms"
                                                    + (" (budget hit)" if r["budget_hit"] else "") for r in slow) + "."]
    return "\n".join(out) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fusionstitching", description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--no-fixtures", action="store_true", help="skip the planning-time distribution on HLO fixtures")
    a = ap.parse_args(argv)
    prov = provenance(["-m", "benchmarks.fusionstitching"] + list(argv))
    prov["what"] = ("Predicted times are SIMT-model predictions (cost model, uncalibrated constants) -- not GPU "
                    "measurements; planning times are measured wall clock on this machine")
    prov["repeat"] = a.repeat
    rows = catalog(a.gpu, a.repeat)
    fixture_rows = None if a.no_fixtures else fixtures(a.gpu, a.repeat)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fusionstitching.json").write_text(json.dumps({"provenance": prov, "gpu": a.gpu, "catalog": rows,
                                                          "fixtures": fixture_rows}, indent=1))
    md = markdown(prov, a.gpu, rows, fixture_rows)
    (out / "fusionstitching.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
