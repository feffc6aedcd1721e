"""The suite: every case in turn, the outputs written after each; the command line; merging runs."""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from typing import Optional

from .case import run_case
from .clock import Clock
from .common import FORMAT, REL_TOL, SIM_NOTE, log
from .mode import choose_mode
from .provenance import detect_preset, provenance
from .report import fmt_value, write_outputs


BASELINES = ("jax.jit", "torch.eager", "torch.native", "torch.compile")


def run_suite(out_dir: str, quick: bool = False, simulator: Optional[bool] = None, gpu_preset: Optional[str] = None,
              only=None, strategies=None, baselines=BASELINES, reps: Optional[int] = None,
              warmup: Optional[int] = None, seed: int = 0, commit: Optional[str] = None, plot: bool = True,
              argv: Optional[list] = None, copy_bytes: Optional[int] = None, apply_compiler: bool = False,
              copy: bool = True) -> dict:
    """The Python API of the command: runs the suite and writes results.json/md/png into ``out_dir``.

    ``apply_compiler``: measure each plan after ``gpu_backend.apply_compiler`` (ptxas-checked register caps:
    what AStitch ships; :mod:`benchmarks.applied_plans`).  ``copy=False`` skips the copy-bandwidth
    measurement (the runbook measures it in its own step)."""
    from benchmarks.suite import select
    cases = select(only)            # a typo in --only fails here, before the GPU is touched
    mode = choose_mode(simulator)
    import astitch_sim as asim
    sim = mode == "simulator"
    shapes = "sim" if sim else ("quick" if quick else "full")
    reps = reps or (1 if sim else (10 if quick else 20))
    warmup = warmup if warmup is not None else (0 if sim else 3)
    if not sim and reps < 20 and not quick:
        log(f"note: --reps {reps} is below the 20 the method asks for")
    prov = provenance(mode, argv if argv is not None else sys.argv, commit)
    if gpu_preset is None:
        gpu_preset = "H100" if sim else detect_preset(prov["device"])
        if gpu_preset is None:
            raise SystemExit(f"cannot tell the preset of {prov['device']!r}: pass --gpu-preset "
                             f"({', '.join(asim.hardware.gpus.GPUS)})")
    hw = asim.gpu(gpu_preset)
    if not sim and prov.get("sms") and prov["sms"] != hw.sms:
        log(f"warning: the device has {prov['sms']} SMs, the {hw.name} preset {hw.sms}: plans are sized for the "
            "preset (grid barriers need every block resident: a smaller GPU may refuse a cooperative launch)")
    l2 = prov.get("l2_bytes") or hw.l2_bytes
    clock = Clock(sim, l2, reps, warmup, clock_ghz=hw.clock_ghz)
    settings = {"mode": mode, "shapes": shapes, "reps": reps, "warmup": warmup, "seed": seed,
                "gpu_preset": hw.name, "flush_bytes": clock.flush_bytes, "clock_ghz": hw.clock_ghz,
                "rel_tol": REL_TOL, "apply_compiler": bool(apply_compiler)}
    results = {"format": FORMAT, "mode": mode, "timing_note": SIM_NOTE if sim else "GPU timing",
               "gpu_preset": hw.name, "provenance": prov, "settings": settings, "cases": []}
    log(f"gpu_bench: {mode} mode, device {prov.get('device')}, preset {hw.name}, shapes {shapes}, reps {reps}")
    copy_bytes = copy_bytes or (2**14 if sim else (256 * 2**20 if quick else 2**30))
    if copy:
        log(f"device-to-device copy bandwidth ({copy_bytes / 2**20:.0f} MiB)")
        results["copy"] = clock.copy_bandwidth(copy_bytes)
        settings["copy_bandwidth_gbs"] = results["copy"]["bandwidth_gbs"]
        log(f"  copy {results['copy']['bandwidth_gbs']:.1f} GB/s" + (f" ({SIM_NOTE})" if sim else ""))
    strategies = list(strategies or asim.STRATEGIES)
    t_start = time.time()
    for i, case in enumerate(cases, 1):
        log(f"[{i}/{len(cases)}] {case.key} {case.shape_for(shapes)}")
        t0 = time.time()
        try:
            rec = run_case(case, shapes, settings, clock, strategies, list(baselines))
        except Exception as e:             # one broken case must not cost the others
            rec = {"key": case.key, "workload": case.workload, "shape": case.shape_for(shapes), "runs": [],
                   "min_bytes": {"inputs": 0, "outputs": 0, "total": 0},
                   "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}
            log(f"  case FAILED: {rec['error']}")
        rec["wall_s"] = time.time() - t0
        results["cases"].append(rec)
        settings["dropped_host_bound_reps"] = clock.dropped
        write_outputs(results, out_dir, plot=False)
    results["wall_s"] = time.time() - t_start
    write_outputs(results, out_dir, plot=plot)
    if plot and results.get("plot") != "plot.png":
        log(results["plot"])
    log(f"done in {results['wall_s']:.0f}s: {out_dir}/results.json, results.md"
        + (", plot.png" if results.get("plot") == "plot.png" else ""))
    return results


def print_table(results: dict) -> None:
    sim = results["mode"] == "simulator"
    print(f"{'case':<30} {'run':<14} {'GPU us':>10} {'e2e us':>10} {'GB/s':>8} {'%copy':>6} {'vs xla':>7} valid")
    for c in results["cases"]:
        for r in c["runs"]:
            if not r.get("gpu_us"):
                why = r.get("skipped") or r.get("error") or "-"
                print(f"{c['key']:<30} {r['name']:<14} {why[:60]}")
                continue
            v = (r.get("validation") or {}).get("ok")
            print(f"{c['key']:<30} {r['name']:<14} {r['gpu_us']:>10.1f} {fmt_value(r.get('e2e_us')):>10} "
                  f"{fmt_value(r.get('bandwidth_gbs')):>8} {fmt_value(r.get('pct_of_copy'), '{:.0f}'):>6} "
                  f"{fmt_value(r.get('speedup_vs_xla'), '{:.2f}x'):>7} {'yes' if v else 'NO'}")
    s = results.get("summary") or {}
    if sim:
        print(f"*** {SIM_NOTE}: these numbers say nothing about speed ***")
    else:
        geo = (s.get("headline") or {}).get("geomean_speedup") or {}
        for b, v in geo.items():
            print(f"astitch vs {b}: geomean speed-up {v:.2f}x over {s['headline']['cases'][b]} cases")
    if not sim and s.get("astitch_vs_xla_geomean"):
        print(f"astitch vs xla geomean {s['astitch_vs_xla_geomean']:.2f}x (target >= 1.5x)")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out", required=True, help="output folder (results.json, results.md, plot.png)")
    ap.add_argument("--quick", action="store_true", help="smaller shapes and 10 repetitions: a fast check")
    ap.add_argument("--simulator", action="store_true", default=None,
                    help="Numba's CUDA simulator at tiny shapes (automatic when no GPU is found)")
    ap.add_argument("--gpu-preset", help="preset the plans are compiled for (default: from the device name)")
    ap.add_argument("--only", nargs="+", help="case keys or workload names (default: the whole suite)")
    ap.add_argument("--part", metavar="K/N",
                    help="run only the K-th of N equal slices of the suite (e.g. 1/2 and 2/2 in two device calls "
                         "that each must end within 10 minutes; merge them with --render a.json b.json)")
    ap.add_argument("--strategies", nargs="+", help="default: unfused xla tvm astitch")
    ap.add_argument("--baselines", nargs="*", default=list(BASELINES),
                    help=f"default: {' '.join(BASELINES)}; give none to skip them")
    ap.add_argument("--reps", type=int, help="timed repetitions (default 20; 10 with --quick)")
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--commit", help="git commit to record (where the machine has no .git)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--apply-compiler", action=argparse.BooleanOptionalAction, default=False,
                    help="measure each plan after gpu_backend.apply_compiler (ptxas-checked register caps, what "
                         "AStitch ships); the runbook (benchmarks.gpu_session) turns it on")
    ap.add_argument("--render", metavar="RESULTS_JSON", nargs="+",
                    help="only re-render results.md / plot.png from results.json file(s) into --out "
                         "(several files: their cases are merged, first file's provenance kept)")
    a = ap.parse_args(argv)
    if a.render:
        results = merge_results(a.render)
        write_outputs(results, a.out, plot=not a.no_plot)
        print_table(results)
        return 0
    only = a.only
    if a.part:
        from benchmarks.suite import part
        only = [c.key for c in part(a.part, only)]
    results = run_suite(a.out, quick=a.quick, simulator=a.simulator, gpu_preset=a.gpu_preset, only=only,
                        strategies=a.strategies, baselines=a.baselines, reps=a.reps, warmup=a.warmup, seed=a.seed,
                        commit=a.commit, plot=not a.no_plot, argv=["-m", "benchmarks.gpu_bench"] + argv,
                        apply_compiler=a.apply_compiler)
    print_table(results)
    return 0


def merge_results(paths: list) -> dict:
    """Cases of several results.json (e.g. a suite split over two device calls) in one results dict."""
    merged = None
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        if merged is None:
            merged = r
            merged["merged_from"] = [p]
            continue
        if r.get("gpu_preset") != merged.get("gpu_preset") or r.get("mode") != merged.get("mode"):
            raise SystemExit(f"{p}: preset/mode differ from {paths[0]}; not merging")
        have = {c["key"] for c in merged["cases"]}
        merged["cases"] += [c for c in r["cases"] if c["key"] not in have]
        merged["merged_from"].append(p)
        merged.setdefault("provenance_merged", []).append(r.get("provenance"))
    return merged
