"""The compiler's instruction mix against the SIMT model's per-thread accounting, every catalog workload.

For each catalog workload (at a shape small enough for the model's per-thread trace),
each strategy and each architecture asked for, the plan is simulated with
``trace=True`` and every generated kernel is compiled to SASS and disassembled
(nvdisasm; CUDA 13's, which reads sm_75 and newer: V100's sm_70 cannot be disassembled,
so the architectures are A100's sm_80 and H100's sm_90).  Per kernel and class
(global / shared loads and stores and their widths, atomics, barriers, grid
barriers, shuffles) the busiest thread's count in the model is held against the
static SASS count: ``gpu_backend/machine/mix_vs_model.py`` explains the normalisation.
No GPU needed::

    python -m benchmarks.ptxas_vs_model [--gpus H100 A100] [--strategies ...] [--jobs 2]

Writes ``ptxas_vs_model_<GPU>.json`` (provenance and every row) and ``ptxas_vs_model_<GPU>.md``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import astitch_sim as asim
from benchmarks.ptxas_catalog import ARCH, tool_versions
from benchmarks.simt_predictions import provenance
from gpu_backend.machine import toolchain

#: the catalog at shapes the per-thread trace accepts (at most TRACE_LIMIT = 65536 elements per kernel);
#: rows shrink, the reduced widths stay the real ones where they fit
SHAPES = {
    "layernorm": dict(rows=64, cols=768), "rmsnorm": dict(rows=16, cols=4096),
    "batchnorm_train": dict(rows=1024, cols=64), "layernorm_backward": dict(rows=64, cols=768),
    "global_norm": dict(rows=64, cols=1024), "softmax": dict(rows=2, cols=30000),
    "attention_softmax": dict(batch=1, heads=2, seq=128), "log_softmax": dict(rows=2, cols=32000),
    "cross_entropy": dict(rows=2, cols=32000), "bias_gelu": dict(rows=16, cols=3072),
    "swiglu": dict(rows=4, cols=11008), "adam_step": dict(size=65536), "paper_fig7": {},
    "row_reduce": dict(rows=2048, cols=32), "column_reduce": dict(rows=16, cols=3072),
}


def run_case(case: dict) -> dict:
    from astitch_sim.frontends.workloads import workload_inputs
    from gpu_backend.machine.mix_vs_model import compare
    try:
        g = asim.workload(case["workload"], **case["shape"])
        plan = asim.compile(g, case["strategy"], case["gpu"])
        return {"rows": compare(plan, workload_inputs(g, 0), ARCH[case["gpu"]])}
    except Exception as e:          # noqa: BLE001 - reported per case
        return {"error": f"{type(e).__name__}: {e}"}


def run(cases: list, jobs: int) -> dict:
    out, start = {}, time.monotonic()
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run_case, c): c for c in cases}
        for i, fut in enumerate(as_completed(futures)):
            c = futures[fut]
            out[c["id"]] = fut.result()
            print(f"[{i + 1}/{len(cases)} {time.monotonic() - start:6.1f}s] {c['id']}"
                  + (f"  ERROR {out[c['id']]['error'][:100]}" if "error" in out[c["id"]] else ""),
                  file=sys.stderr, flush=True)
    return {c["id"]: out[c["id"]] for c in cases}


SHORT = {"global_load": "LDG", "global_store": "STG", "global_atomic": "ATOM/RED", "shared_load": "LDS",
         "shared_store": "STS", "barrier": "BAR", "grid_sync": "grid.sync", "shuffle": "SHFL"}


def markdown(gpu: str, results: dict, prov: dict) -> str:
    from gpu_backend.machine.mix_vs_model import COMPARED
    rows = [dict(r, plan=pid.rsplit("/", 1)[0]) for pid, res in results.items() for r in res.get("rows", [])]
    errors = {pid: res["error"] for pid, res in results.items() if "error" in res}
    kernels = {(r["plan"], r["kernel"]) for r in rows}
    straight = {(r["plan"], r["kernel"]) for r in rows if r["loops"] == 0}
    lines = [f"# Instruction mix (SASS, {ARCH[gpu]}) against the SIMT model's per-thread accounting: {gpu} preset", "",
             f"{len(results)} plans (catalog workloads at traceable shapes x {{{', '.join(sorted({p.split('/')[1] for p in results}))}}}), "
             f"{len(kernels)} generated kernels, {len(straight)} of them straight-line SASS (no backward branch). "
             "Model: the busiest thread's dynamic count (summed over stages and task trips; reduction trees "
             "analytically, lane 0). SASS: static count in the kernel's code. "
             "See `gpu_backend/machine/mix_vs_model.py` for the normalisation.", "",
             f"Provenance: {prov['date']}, `{prov['command']}`, commit {prov['git_commit'][:12]}, {prov['machine']}, "
             f"no GPU. Tools: {prov['tools']['toolchain']}; numba {prov['tools']['numba']}, "
             f"numba-cuda {prov['tools']['numba-cuda']}. Wall time {prov['wall_s']:.0f} s.", ""]
    if errors:
        lines += ["Plans not compared:", ""] + [f"- `{p}`: {e[:200]}" for p, e in errors.items()] + [""]
    lines += ["## Agreement by class", "",
              "| class | kernels | agree | agree (straight-line SASS) | SASS more | SASS fewer |", "|---|---|---|---|---|---|"]
    for cls in COMPARED:
        rs = [r for r in rows if r["class"] == cls]
        sl = [r for r in rs if r["loops"] == 0]
        lines.append(f"| {SHORT[cls]} ({cls}) | {len(rs)} | {sum(r['model'] == r['sass'] for r in rs)} | "
                     f"{sum(r['model'] == r['sass'] for r in sl)} of {len(sl)} | "
                     f"{sum(r['sass'] > r['model'] for r in rs)} | {sum(r['sass'] < r['model'] for r in rs)} |")
    whys = Counter(r["why"].split(":")[0] for r in rows if r["why"] != "agree")
    example = {r["why"].split(":")[0]: r for r in rows if r["why"] != "agree"}
    lines += ["", "## Why they differ (kernel x class pairs)", "", "| cause | pairs | e.g. | the explanation there |",
              "|---|---|---|---|"]
    lines += [f"| {w} | {n} | {example[w]['plan']} {example[w]['kernel']} {SHORT[example[w]['class']]} "
              f"{example[w]['model']}/{example[w]['sass']} | {example[w]['why']} |" for w, n in whys.most_common()]
    widths = Counter()
    for r in rows:
        for key, n in r["sass_widths"].items():
            widths[key] += n
    lines += ["", "SASS access widths over all kernels (static instructions): " +
              ", ".join(f"{k} {v}" for k, v in sorted(widths.items())), ""]
    lines += ["## Per kernel", "", "model (busiest thread) / SASS (static); **bold** where they differ.", "",
              "| plan | kernel | regs | loops | " + " | ".join(SHORT[c] for c in COMPARED) + " |",
              "|---|---|---|---|" + "---|" * len(COMPARED)]
    by_kernel: dict = {}
    for r in rows:
        by_kernel.setdefault((r["plan"], r["kernel"]), {})[r["class"]] = r
    for (plan, kernel), cls_rows in by_kernel.items():
        any_row = next(iter(cls_rows.values()))
        cells = []
        for cls in COMPARED:
            r = cls_rows[cls]
            cell = f"{r['model']}/{r['sass']}"
            cells.append(cell if r["model"] == r["sass"] else f"**{cell}**")
        lines.append(f"| {plan} | {kernel} | {any_row['registers']} | {any_row['loops']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ptxas_vs_model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", nargs="+", default=["H100", "A100"], choices=["A100", "H100", "H200"])
    ap.add_argument("--strategies", nargs="+", default=list(asim.STRATEGIES), choices=list(asim.STRATEGIES))
    ap.add_argument("--workloads", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--redraw", action="store_true", help="rewrite the .md files from the .json ones (no compiling)")
    args = ap.parse_args(argv)
    if args.redraw:
        for gpu in args.gpus:
            data = json.loads((Path(args.out) / f"ptxas_vs_model_{gpu}.json").read_text())
            (Path(args.out) / f"ptxas_vs_model_{gpu}.md").write_text(markdown(gpu, data["results"], data["provenance"]))
        return
    if not toolchain.available():
        sys.exit(f"NVIDIA's toolchain is missing: {toolchain.missing_reason()}")
    if not toolchain.find().nvdisasm:
        sys.exit(f"no nvdisasm: the instruction mix needs it ({toolchain.INSTALL})")
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    for gpu in args.gpus:
        cases = [{"id": f"{w}/{s}/{gpu}", "workload": w, "shape": SHAPES[w], "strategy": s, "gpu": gpu}
                 for w in args.workloads for s in args.strategies]
        t0 = time.monotonic()
        results = run(cases, args.jobs)
        prov = provenance(["-m", "benchmarks.ptxas_vs_model"] + list(argv))
        prov.update(what=f"SASS instruction mix ({ARCH[gpu]}) against the SIMT model's per-thread counts",
                    tools=tool_versions(), wall_s=round(time.monotonic() - t0, 1), shapes=SHAPES)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"ptxas_vs_model_{gpu}.json").write_text(json.dumps({"provenance": prov, "results": results}, indent=1))
        text = markdown(gpu, results, prov)
        (out / f"ptxas_vs_model_{gpu}.md").write_text(text)
        print(text.split("## Per kernel")[0])


if __name__ == "__main__":
    main()
