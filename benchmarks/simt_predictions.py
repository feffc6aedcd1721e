"""What the SIMT model predicts for every strategy on the paper's shapes and the catalog.

These are *predictions* of the cost model (uncalibrated constants, see
astitch_sim/simt/cost.py), not GPU measurements: they show what the model
says the plans do -- kernels, global traffic, predicted time -- so the
README can say where AStitch should win and where it should not.

    python -m benchmarks.simt_predictions [--out benchmarks/results] [--gpus V100 H100]

Writes simt_predictions.json (with provenance) and simt_predictions.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs

#: (label, workload, shape) -- the paper's irregular shapes first, then the catalog at real sizes
CASES = [
    ("paper Figure 7", "paper_fig7", {}),
    ("softmax <750000,32> (DIEN)", "softmax", dict(rows=750000, cols=32)),
    ("softmax <64,30000> (Transformer)", "softmax", dict(rows=64, cols=30000)),
    ("layernorm 16384x768 (BERT)", "layernorm", {}),
    ("rmsnorm 4096x4096", "rmsnorm", {}),
    ("attention softmax 16x12x128x128", "attention_softmax", {}),
    ("bias+GELU 16384x3072", "bias_gelu", {}),
    ("layernorm backward 16384x768", "layernorm_backward", {}),
    ("batchnorm training 65536x64", "batchnorm_train", {}),
    ("Adam step 1M params", "adam_step", {}),
    ("global-norm clipping 1024x1024", "global_norm", {}),
    ("cross-entropy 1024x32000", "cross_entropy", dict(rows=1024)),
]


def provenance(argv) -> dict:
    """Who made a result: date, commit, versions, machine, and the command (``argv``: what follows ``python``,
    e.g. ``["-m", "benchmarks.simt_predictions", "--gpus", "H100"]``)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        commit = ""
    return {"what": "SIMT-model predictions (cost model, uncalibrated constants) -- not GPU measurements",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python"] + argv), "git_commit": commit, "python": platform.python_version(),
            "numpy": np.__version__, "machine": platform.machine(), "processor": platform.processor()}


def run(gpus, strategies=asim.STRATEGIES) -> list:
    rows = []
    for label, name, shape in CASES:
        g = asim.workload(name, **shape)
        inputs = workload_inputs(g, 0)
        for gpu in gpus:
            for s in strategies:
                t0 = time.perf_counter()
                res = asim.simulate(asim.compile(g, s, gpu), inputs)
                rows.append({"case": label, "workload": name, "shape": shape, "gpu": gpu, "strategy": s,
                             "kernels": res.stats.kernel_launches, "global_bytes": res.stats.global_bytes,
                             "grid_barriers": res.stats.grid_barriers, "predicted_us": res.stats.predicted_us,
                             "simulate_s": time.perf_counter() - t0})
                print(f"{label:36s} {gpu} {s:8s} {res.stats.predicted_us:10.1f} us  "
                      f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return rows


def markdown(rows, prov) -> str:
    lines = ["# SIMT-model predictions", "",
             f"{prov['what']}. {prov['date']}, `{prov['command']}`, commit {prov['git_commit'][:12]}.", ""]
    for gpu in dict.fromkeys(r["gpu"] for r in rows):
        shown = " / ".join(s for s in asim.STRATEGIES if any(r["strategy"] == s for r in rows))
        lines += [f"## {gpu}", "", "| case | kernels xla -> astitch | global MiB xla -> astitch | "
                  f"predicted us {shown} | astitch vs xla |", "|---|---|---|---|---|"]
        speedups = []
        for case in dict.fromkeys(r["case"] for r in rows):
            by = {r["strategy"]: r for r in rows if r["case"] == case and r["gpu"] == gpu}
            x, a = by["xla"], by["astitch"]
            sp = x["predicted_us"] / a["predicted_us"]
            speedups.append(sp)
            times = " / ".join(f"{by[s]['predicted_us']:.1f}" for s in asim.STRATEGIES if s in by)
            lines.append(f"| {case} | {x['kernels']} -> {a['kernels']} | {x['global_bytes'] / 2**20:.1f} -> "
                         f"{a['global_bytes'] / 2**20:.1f} | {times} | {sp:.2f}x |")
        geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        lines += ["", f"Geometric mean of astitch over xla on {gpu}: **{geo:.2f}x** (predicted).", ""]
    return "\n".join(lines) + "\n"


def write_results(out: str, stem: str, prov: dict, rows: list, text: str) -> None:
    """``out/stem.json`` (provenance and raw rows) and ``out/stem.md`` (the table), and print the table."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{stem}.json"), "w") as fh:
        json.dump({"provenance": prov, "rows": rows}, fh, indent=1)
    with open(os.path.join(out, f"{stem}.md"), "w") as fh:
        fh.write(text)
    print(text)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.simt_predictions", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--gpus", nargs="+", default=["V100", "H100"])
    args = ap.parse_args(argv)
    rows = run(args.gpus)
    prov = provenance(["-m", "benchmarks.simt_predictions"] + argv)
    write_results(args.out, "simt_predictions", prov, rows, markdown(rows, prov))


if __name__ == "__main__":
    main()
