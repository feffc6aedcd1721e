"""What the SIMT model predicts for real model code: the small flax GPT and the idioms of issue 9.

Every module of ``tests/fixtures/models`` (HLO written by JAX, inputs rebuilt
from their seeds) is planned under every strategy and run on the SIMT model:
kernels (library kernels -- matrix products, scatters, sorts, scans -- and
generated ones), global traffic and predicted time.  These are *predictions*
of the cost model (uncalibrated constants, see astitch_sim/simt/cost.py), not
GPU measurements.

    python -m benchmarks.model_predictions [--out benchmarks/results] [--gpus H100] [--models gpt_forward ...]

Writes model_predictions.json (with provenance) and model_predictions.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import astitch_sim as asim
from astitch_sim.frontends import seeded
from benchmarks.simt_predictions import provenance, write_results

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures"

GPT = ["gpt_forward", "gpt_train_step"]


def load(name):
    g = asim.from_hlo_file(FIXTURES / "models" / f"{name}.hlo", name=name)
    z = np.load(FIXTURES / "models" / f"{name}.npz")
    spec = json.loads(str(z["spec"]))
    return g, [seeded.make(s) for s in spec["inputs"]], spec["note"]


def run(models, gpus) -> list:
    rows = []
    for name in models:
        g, inputs, note = load(name)
        for gpu in gpus:
            for s in asim.STRATEGIES:
                t0 = time.perf_counter()
                plan = asim.compile(g, s, gpu)
                res = asim.simulate(plan, inputs)
                rows.append({"model": name, "note": note, "gpu": gpu, "strategy": s,
                             "kernels": res.stats.kernel_launches, "library_kernels": len(plan.library),
                             "generated_kernels": len(plan.generated), "global_bytes": res.stats.global_bytes,
                             "grid_barriers": res.stats.grid_barriers, "predicted_us": res.stats.predicted_us,
                             "simulate_s": time.perf_counter() - t0})
                print(f"{name:24s} {gpu} {s:8s} {len(plan.kernels):5d} kernels {res.stats.predicted_us:10.1f} us  "
                      f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return rows


def markdown(rows, prov) -> str:
    lines = ["# SIMT-model predictions for real model code", "",
             f"{prov['what']}. {prov['date']}, `{prov['command']}`, commit {prov['git_commit'][:12]}.", ""]
    for gpu in dict.fromkeys(r["gpu"] for r in rows):
        lines += [f"## {gpu}", "", "| model | strategy | kernels (library + generated) | global MiB | "
                  "predicted us | vs xla |", "|---|---|---|---|---|---|"]
        for model in dict.fromkeys(r["model"] for r in rows):
            by = {r["strategy"]: r for r in rows if r["model"] == model and r["gpu"] == gpu}
            for s in asim.STRATEGIES:
                r = by[s]
                lines.append(f"| {model} | {s} | {r['kernels']} ({r['library_kernels']} + {r['generated_kernels']}) | "
                             f"{r['global_bytes'] / 2**20:.2f} | {r['predicted_us']:.1f} | "
                             f"{by['xla']['predicted_us'] / r['predicted_us']:.2f}x |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.model_predictions", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--gpus", nargs="+", default=["H100"])
    ap.add_argument("--models", nargs="+", default=GPT + sorted(p.stem for p in (FIXTURES / "models").glob("*.hlo")
                                                                 if p.stem not in GPT))
    args = ap.parse_args(argv)
    rows = run(args.models, args.gpus)
    prov = provenance(["-m", "benchmarks.model_predictions"] + argv)
    write_results(args.out, "model_predictions", prov, rows, markdown(rows, prov))


if __name__ == "__main__":
    main()
