"""How fast is the SIMT model?  Measured ratios, with provenance.

(a) ``simulate(plan)`` against ``asim.reference`` for every catalog workload at its
    paper size (the workload's default shape; softmax also at the paper's DIEN shape
    <750000,32>), under every strategy.  The simulator computes the same values
    *and* locates every element on its block/thread/iteration, counts every
    load/store, and schedules the timeline; the goal is at most 3x the numpy
    reference (issue 28; issue 14 asked for 5x, and both counts are printed).
(c) The same for every real model under ``tests/fixtures/models`` (JAX's HLO of a GPT forward and training
    step, optimizers, attention, rotary embedding, a KV-cache update...) with their seeded inputs: the sizes
    users bring, whose graphs mix every op and mapping.
(b) Elements per second of the SIMT model against Numba's CUDA simulator
    (``NUMBA_ENABLE_CUDASIM=1``, which runs every CUDA thread as a Python thread)
    on the same computation: a one-block-per-row layernorm kernel, written below
    in plain ``numba.cuda`` (shared-memory tree reductions for the mean and the
    variance), at 16 x 128 so it finishes in seconds.  The SIMT model runs the
    astitch plan of that layernorm at the same shape, and at BERT size (its
    throughput grows with size; the CUDA simulator's does not).  Target: >= 1000x.

Each timing is repeated (``--repeat``, after one warm-up run) and reported as the
median; wall clock (``time.perf_counter``) and the process's CPU time
(``time.process_time``) are both kept, since a shared machine stretches wall clock
but not CPU time (numpy runs these on one core).  Compiling the plan is not timed.
The biggest catalog shapes (log_softmax and cross_entropy at 8192 x 32000: 262M
elements, 1 GB per f32 array) need several GB of memory.

    python -m benchmarks.simt_speed                         # everything -> benchmarks/results/simt_speed.{json,md}
    python -m benchmarks.simt_speed --only softmax layernorm --repeat 5 --out /tmp/s --skip-numba   # (a) only
    python -m benchmarks.simt_speed --skip-models --skip-numba                                      # (a)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np

import astitch_sim as asim
from astitch_sim.frontends.workloads import list_workloads, workload_inputs

OUT = Path(__file__).parent / "results"
MODELS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"
BERT = dict(rows=16384, cols=768)
TINY = dict(rows=16, cols=128)
#: issue 28's goal (issue 14 asked for 5x; both counts are reported)
TARGET_RATIO = 3
EARLIER_TARGET = 5
#: the summary also counts the rows whose numpy reference takes at least this long apart: below it the
#: simulator's cost per kernel (a few hundred microseconds of Python for even a two-op kernel: locating,
#: counting, pricing, the timeline) is more than the whole reference
LONG_REFERENCE_S = 1e-3
#: paper shapes beyond the catalog's defaults (the catalog's softmax default is the Transformer <64,30000>)
EXTRA_SHAPES = [("softmax", dict(rows=750000, cols=32))]

NUMBA_KERNEL = r'''
import sys, time, json
import numpy as np
from numba import cuda, float32

ROWS, COLS = int(sys.argv[1]), int(sys.argv[2])
THREADS = COLS          # one block per row, one thread per column

@cuda.jit
def layernorm(x, gamma, beta, out, eps):
    row = cuda.blockIdx.x
    t = cuda.threadIdx.x
    buf = cuda.shared.array(shape=128, dtype=float32)
    v = x[row, t]
    buf[t] = v
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    mean = buf[0] / COLS
    cuda.syncthreads()
    d = v - mean
    buf[t] = d * d
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    rstd = 1.0 / (buf[0] / COLS + eps) ** 0.5
    out[row, t] = d * rstd * gamma[t] + beta[t]

rng = np.random.default_rng(0)
x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
gamma = rng.standard_normal(COLS).astype(np.float32)
beta = rng.standard_normal(COLS).astype(np.float32)
out = np.zeros_like(x)
layernorm[1, THREADS](x[:1], gamma, beta, out[:1], np.float32(1e-12))     # compile / warm up on one row
t = time.perf_counter()
layernorm[ROWS, THREADS](x, gamma, beta, out, np.float32(1e-12))
dt = time.perf_counter() - t
mean = x.mean(1, keepdims=True)
want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + 1e-12) * gamma + beta
print(json.dumps({"seconds": dt, "max_error": float(np.abs(out - want).max())}))
'''


def cases(only=None) -> list:
    """``(workload, shape)`` at paper size: every catalog entry's default shape, plus EXTRA_SHAPES."""
    out = [(w.name, dict(w.defaults)) for w in list_workloads()] + EXTRA_SHAPES
    out = [c for c in out if not only or c[0] in only]
    return sorted(out, key=lambda c: int(np.prod(list(c[1].values()))))     # smallest first: the table fills fast


def timed(fn, repeat: int) -> tuple:
    """``(wall seconds, CPU seconds, last result)`` of ``repeat`` runs after one warm-up run."""
    result = fn()
    wall, cpu = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return wall, cpu, result


def max_error(want: list, got: list) -> float:
    """Largest |difference| over the outputs, relative to each output's largest |value| (NaN-safe)."""
    worst = 0.0
    for a, b in zip(want, got):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.size:
            scale = max(float(np.nanmax(np.abs(a))), 1e-30)
            worst = max(worst, float(np.nanmax(np.abs(a - b))) / scale)
    return worst


def part_a(repeat: int, strategies, only=None, log=print, rows=None, on_row=lambda rows: None) -> list:
    rows = [] if rows is None else rows
    for name, shape in cases(only):
        g = asim.workload(name, **shape)
        _time_graph(g, workload_inputs(g, 0), repeat, strategies, f"{name:20s} {_shape(shape):14s}",
                    {"workload": name, "shape": shape, "elements": int(max(n.size for n in g))}, log, rows, on_row)
    return rows


def part_c(repeat: int, strategies, log=print, rows=None, on_row=lambda rows: None, paths=None) -> list:
    """Every model fixture (or the HLO files ``paths``): reference and simulate times per strategy (the
    fixture's seeded inputs)."""
    from astitch_sim.frontends.seeded import fixture_inputs
    rows = [] if rows is None else rows
    for path in sorted(MODELS.glob("*.hlo")) if paths is None else [Path(p) for p in paths]:
        g = asim.from_hlo_file(path)
        _time_graph(g, fixture_inputs(path), repeat, strategies, f"{path.stem:35s}",
                    {"model": path.stem, "ops": len(list(g))}, log, rows, on_row)
    return rows


def _time_graph(g, x, repeat: int, strategies, label: str, fields: dict, log, rows: list, on_row) -> None:
    """The reference once, then each strategy's plan simulated: a row per strategy (``fields`` first) appended to
    ``rows``, ``on_row(rows)`` after each (the partial results are saved as they come)."""
    ref_wall, ref_cpu, want = timed(lambda: asim.reference(g, x), repeat)
    for strategy in strategies:
        plan = asim.compile(g, strategy, "H100")
        sim_wall, sim_cpu, res = timed(lambda: asim.simulate(plan, x), repeat)
        row = {**fields, "strategy": strategy, "gpu": "H100", "kernels": res.stats.kernel_launches,
               "reference_s": ref_wall, "simulate_s": sim_wall, "reference_cpu_s": ref_cpu, "simulate_cpu_s": sim_cpu,
               "ratio": median(sim_wall) / median(ref_wall), "ratio_cpu": median(sim_cpu) / median(ref_cpu),
               "max_rel_error": max_error(want, res.outputs)}
        rows.append(row)
        on_row(rows)
        log(f"{label} {strategy:16s} reference {median(ref_wall):7.3f} s  simulate {median(sim_wall):7.3f} s  "
            f"ratio {row['ratio']:5.1f}x (CPU time {row['ratio_cpu']:5.1f}x)")
        del res


def _over(rows: list) -> str:
    """How many rows are over the goal and over the earlier target, and the worst."""
    if not rows:
        return ""
    worst = max(rows, key=lambda x: x["ratio"])
    name = worst.get("model") or f"{worst['workload']} {_shape(worst['shape'])}"
    over = sum(x["ratio"] > TARGET_RATIO for x in rows)
    earlier = sum(x["ratio"] > EARLIER_TARGET for x in rows)
    big = [x for x in rows if median(x["reference_s"]) >= LONG_REFERENCE_S]
    return (f"Worst: {name} {worst['strategy']} at {worst['ratio']:.1f}x (CPU {worst['ratio_cpu']:.1f}x); "
            f"{over} of {len(rows)} over {TARGET_RATIO}x, {earlier} over {EARLIER_TARGET}x.  Rows whose reference "
            f"takes at least {LONG_REFERENCE_S * 1e3:g} ms: {sum(x['ratio'] > TARGET_RATIO for x in big)} of "
            f"{len(big)} over {TARGET_RATIO}x.")


def _shape(shape: dict) -> str:
    return "x".join(str(v) for v in shape.values())


def part_b(repeat: int = 3) -> dict:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-c", NUMBA_KERNEL, str(TINY["rows"]), str(TINY["cols"])],
                          capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode:
        raise RuntimeError(f"Numba CUDA simulator run failed:\n{proc.stderr[-2000:]}")
    numba_run = json.loads(proc.stdout.strip().splitlines()[-1])
    n_tiny = TINY["rows"] * TINY["cols"]
    numba_eps = n_tiny / numba_run["seconds"]
    out = {"numba_cudasim": {"shape": TINY, "elements": n_tiny, "seconds": numba_run["seconds"],
                             "elements_per_s": numba_eps, "max_error": numba_run["max_error"]}}
    for label, shape in (("simt_same_shape", TINY), ("simt_bert", BERT)):
        g = asim.workload("layernorm", **shape)
        x = workload_inputs(g, 0)
        plan = asim.compile(g, "astitch", "H100")
        ts, _, _ = timed(lambda: asim.simulate(plan, x), repeat)
        n = g["x"].size
        out[label] = {"shape": shape, "elements": n, "seconds_min": min(ts), "seconds_median": median(ts),
                      "elements_per_s": n / median(ts), "ratio_vs_numba": n / median(ts) / numba_eps}
    out["target_ratio"] = 1000
    return out


def provenance(argv) -> dict:
    import numba
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "")
    except OSError:
        cpu = platform.processor()
    try:
        here = Path(__file__).parent
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=here).stdout.strip()
        if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "astitch_sim", "benchmarks"], cwd=here.parent).returncode:
            commit += "+uncommitted changes"
    except OSError:
        commit = ""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpu": cpu, "cores": os.cpu_count(),
            "load_average_1min_at_end": load, "platform": platform.platform(), "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "astitch_sim": asim.__version__,
            "git_commit": commit, "command": " ".join(["python", "-m", "benchmarks.simt_speed"] + list(argv))}


def markdown(r: dict) -> str:
    p, a = r["provenance"], r["a"]
    load = p.get("load_average_1min_at_end")
    lines = [
        "# SIMT model speed", "",
        f"{p['date']} -- {p['cpu']} ({p['cores']} cores{'' if load is None else f', 1-min load average {load:.1f} at the end'}), "
        f"Python {p['python']}, numpy {p['numpy']}, numba {p['numba']}, commit {p['git_commit']}; `{p['command']}`", "",
    ] + ([] if r.get("complete", True) else ["**Partial run**: the command was still running (or was stopped) "
                                             "when this was written; the rows below are the cases it finished.", ""]) + ([
        "## (a) simulate vs the numpy reference: the catalog at paper size, every strategy, H100 plans", "",
        f"Median of {r['repeat']} runs after a warm-up.  *Ratio* is simulate / reference in wall-clock time; "
        "*CPU ratio* the same in process CPU time (the machine may be shared: wall clock stretches with "
        f"other load, CPU time much less).  Goal: ratio <= {TARGET_RATIO}x (issue 28; issue 14 asked for "
        f"{EARLIER_TARGET}x).  *Error*: largest |simulate - reference| over the outputs, relative to the output's "
        "largest |value|.", "",
        "| workload | shape | strategy | kernels | reference s | simulate s | ratio | CPU ratio | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ] if a else [])                         # (a part (c) run alone: no empty table for (a))
    for row in a:
        over = " **over**" if row["ratio"] > TARGET_RATIO else ""
        lines.append(f"| {row['workload']} | {_shape(row['shape'])} | {row['strategy']} | {row['kernels']} | "
                     f"{median(row['reference_s']):.3f} | {median(row['simulate_s']):.3f} | "
                     f"{row['ratio']:.1f}x{over} | {row['ratio_cpu']:.1f}x | {row['max_rel_error']:.1e} |")
    if a:
        lines += ["", _over(a)]
    c = r.get("c")
    if c:
        lines += ["", "## (c) simulate vs the numpy reference: every model fixture, every strategy, H100 plans", "",
                  "The HLO JAX printed for real model code (`tests/fixtures/models`), with its seeded inputs.  "
                  f"Median of {r['repeat']} runs after a warm-up; *ratio* is simulate / reference in wall-clock time, "
                  f"*CPU ratio* in process CPU time; goal <= {TARGET_RATIO}x.", "",
                  "| model | ops | strategy | kernels | reference s | simulate s | ratio | CPU ratio | error |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in c:
            over = " **over**" if row["ratio"] > TARGET_RATIO else ""
            lines.append(f"| {row['model']} | {row['ops']} | {row['strategy']} | {row['kernels']} | "
                         f"{median(row['reference_s']):.4f} | {median(row['simulate_s']):.4f} | "
                         f"{row['ratio']:.1f}x{over} | {row['ratio_cpu']:.1f}x | {row['max_rel_error']:.1e} |")
        lines += ["", _over(c)]
    b = r.get("b")
    if b:
        nb = b["numba_cudasim"]
        lines += [
            "", "## (b) elements/s: SIMT model vs Numba's CUDA simulator (one-block-per-row layernorm)", "",
            "| | shape | elements | seconds | elements/s | vs Numba cudasim |", "|---|---|---|---|---|---|",
            f"| Numba CUDA simulator | 16x128 | {nb['elements']} | {nb['seconds']:.2f} | {nb['elements_per_s']:.0f} | 1x |",
        ]
        for key, label in (("simt_same_shape", "SIMT model, same shape"), ("simt_bert", "SIMT model, BERT size")):
            s = b[key]
            lines.append(f"| {label} | {s['shape']['rows']}x{s['shape']['cols']} | {s['elements']} | "
                         f"{s['seconds_median']:.4f} | {s['elements_per_s']:.3g} | {s['ratio_vs_numba']:.0f}x |")
        lines += ["", f"Target: >= {b['target_ratio']}x.  Both compute the same layernorm; the SIMT model also "
                  "counts every access (bytes, sectors, bank conflicts, flops).  Seconds: median."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.simt_speed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="WORKLOAD", help="only these catalog workloads")
    ap.add_argument("--strategies", nargs="+", default=list(asim.STRATEGIES), choices=list(asim.STRATEGIES))
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (after one warm-up)")
    ap.add_argument("--skip-numba", action="store_true", help="leave out part (b), the Numba CUDA simulator run")
    ap.add_argument("--skip-models", action="store_true", help="leave out part (c), the model fixtures")
    ap.add_argument("--out", default=str(OUT), help="folder for simt_speed.json / simt_speed.md")
    args = ap.parse_args(argv)
    known = {w.name for w in list_workloads()}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; the catalog has {sorted(known)}")
    log = lambda msg: print(msg, file=sys.stderr, flush=True)      # noqa: E731  (progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    r = {"repeat": args.repeat, "target_ratio": TARGET_RATIO, "complete": False, "a": []}

    started = provenance(argv)               # the commit measured: taken before any case runs

    def save():
        now = provenance(argv)
        r["provenance"] = dict(started, date=now["date"], load_average_1min_at_end=now["load_average_1min_at_end"])
        (out / "simt_speed.json").write_text(json.dumps(r, indent=1))
        (out / "simt_speed.md").write_text(markdown(r))

    part_a(args.repeat, args.strategies, args.only, log, rows=r["a"], on_row=lambda rows: save())
    if not args.skip_models and not args.only:
        r["c"] = []
        part_c(args.repeat, args.strategies, log, rows=r["c"], on_row=lambda rows: save())
    if not args.skip_numba:
        r["b"] = part_b(args.repeat)
    r["complete"] = True
    save()
    print(markdown(r))
    ok = all(row["ratio"] <= TARGET_RATIO for row in r["a"] + r.get("c", []))
    if "b" in r:
        ok = ok and r["b"]["simt_same_shape"]["ratio_vs_numba"] >= 1000
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
