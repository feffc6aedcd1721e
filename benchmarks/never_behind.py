"""Never behind XLA: the raw stitch plan (``never_behind=False``) and the final astitch plan against xla.

For every catalog case of ``simt_predictions.py`` (the paper's shapes), every HLO
fixture where a stitch scope falls back to XLA's kernels, and the fixtures issue 28
found astitch behind fusionstitching on, five plans run on the SIMT model: xla,
astitch's raw stitch plan, astitch with the never-behind step (the default), astitch
with the paper's launch rules alone (``launch_search=False``) and fusionstitching.  Printed and written: kernels, global bytes and predicted time of
each, and the ratios astitch/xla before and after.  These are *predictions* of the
cost model (uncalibrated constants), not GPU measurements.

    python -m benchmarks.never_behind [--out benchmarks/results] [--gpus H100]

Writes never_behind.json (with provenance) and never_behind.md.  Re-run it after
any change to the astitch planner: "before" is always the raw stitch plan of the
code as it is, "after" the plan the default ``compile`` returns.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import astitch_sim as asim
from astitch_sim.frontends import seeded
from astitch_sim.planning.strategies.never_behind import plan_combine_bytes
from astitch_sim.frontends.workloads import workload_inputs
from benchmarks.simt_predictions import CASES, provenance, write_results

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures"

#: HLO fixtures whose raw stitch plan is behind xla (tests/planning/test_never_behind.py: KNOWN_BEHIND), as
#: (fixture dir, name).  Before issue 13's sibling-reduction and register-reuse work these were hlo/groupnorm,
#: convert_bf16_layernorm, grad_layernorm and transformer_ffn; their raw plans are no longer behind.
FIXTURE_CASES = [("models", "embedding_and_grad"), ("models", "argmax_accuracy")]
#: cases issue 28 found astitch behind fusionstitching on (before the launch search, strategies/astitch_launch.py):
#: (fixture dir, name); the stablehlo one is read from tests/fixtures/stablehlo/families/<name>.mlir
FS_CASES = [("models", "cumsum_positions"), ("stablehlo", "llama_rmsnorm_swiglu")]


def fixture(sub, name):
    """A fixture's graph and inputs (its saved arrays, or for model fixtures their seeded input spec)."""
    if sub == "stablehlo":
        path = FIXTURES / sub / "families" / f"{name}.mlir"
        return asim.from_stablehlo(path.read_text()), seeded.fixture_inputs(path)
    path = FIXTURES / sub / f"{name}.hlo"
    return asim.from_hlo_file(path), seeded.fixture_inputs(path)


def cases():
    for label, name, shape in CASES:
        g = asim.workload(name, **shape)
        yield label, g, workload_inputs(g, 0)
    for sub, name in FIXTURE_CASES + FS_CASES:
        g, inputs = fixture(sub, name)
        yield f"fixture {sub}/{name}", g, inputs


def run(gpus) -> list:
    rows = []
    for label, g, inputs in cases():
        for gpu in gpus:
            row = {"case": label, "graph": g.name, "gpu": gpu}
            for key, strategy, opts in (("xla", "xla", {}), ("before", "astitch", {"never_behind": False}),
                                        ("after", "astitch", {}), ("paper_launch", "astitch", {"launch_search": False}),
                                        ("fusionstitching", "fusionstitching", {})):
                t0 = time.perf_counter()
                plan = asim.compile(g, strategy, gpu, **opts)
                st = asim.simulate(plan, inputs).stats
                row[key] = {"kernels": st.kernel_launches, "global_bytes": st.global_bytes,
                            "predicted_us": st.predicted_us, "seconds": time.perf_counter() - t0}
                if key == "after":
                    row["notes"] = [n for n in plan.notes if n.startswith("never behind")]
                    row["combine_bytes"] = plan_combine_bytes(plan)
            rows.append(row)
            x, b, a = row["xla"], row["before"], row["after"]
            print(f"{label:36s} {gpu} bytes/xla {b['global_bytes'] / x['global_bytes']:.3f} -> "
                  f"{a['global_bytes'] / x['global_bytes']:.3f}  time/xla {b['predicted_us'] / x['predicted_us']:.3f} -> "
                  f"{a['predicted_us'] / x['predicted_us']:.3f}", file=sys.stderr, flush=True)
    return rows


def _mib(n):
    return f"{n / 2**20:.2f}" if n >= 2**16 else f"{n / 2**20:.4f}"


def markdown(rows, prov) -> str:
    lines = ["# Never behind XLA: the raw stitch plan (before) and astitch's plan (after)", "",
             f"{prov['what']}. {prov['date']}, `{prov['command']}`, commit {prov['git_commit'][:12]}.", ""]
    for gpu in dict.fromkeys(r["gpu"] for r in rows):
        lines += [f"## {gpu}", "", "| case | kernels xla / before / after | global MiB xla / before / after | "
                  "predicted us xla / before / after | bytes vs xla before -> after | time vs xla before -> after |",
                  "|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["gpu"] == gpu):
            x, b, a = r["xla"], r["before"], r["after"]
            lines.append(
                f"| {r['case']} | {x['kernels']} / {b['kernels']} / {a['kernels']} | {_mib(x['global_bytes'])} / "
                f"{_mib(b['global_bytes'])} / {_mib(a['global_bytes'])} | {x['predicted_us']:.1f} / "
                f"{b['predicted_us']:.1f} / {a['predicted_us']:.1f} | "
                f"{b['global_bytes'] / x['global_bytes']:.3f} -> {a['global_bytes'] / x['global_bytes']:.3f} | "
                f"{b['predicted_us'] / x['predicted_us']:.3f} -> {a['predicted_us'] / x['predicted_us']:.3f} |")
        behind = [r["case"] for r in rows if r["gpu"] == gpu and (
            r["after"]["global_bytes"] > r["xla"]["global_bytes"] + r["combine_bytes"]
            or r["after"]["predicted_us"] > 1.01 * r["xla"]["predicted_us"])]
        lines += ["", f"Cases where astitch (after) is still behind xla on {gpu}: "
                  f"{', '.join(behind) if behind else 'none'}.", "",
                  f"Against fusionstitching on {gpu} (predicted us; *paper launch*: astitch with "
                  "`launch_search=False`, the launch rules alone, as before issue 28's launch search):", "",
                  "| case | fusionstitching | astitch, paper launch | astitch (after) | after vs fusionstitching |",
                  "|---|---|---|---|---|"]
        for r in (r for r in rows if r["gpu"] == gpu):
            f, p, a = r["fusionstitching"], r["paper_launch"], r["after"]
            lines.append(f"| {r['case']} | {f['predicted_us']:.1f} | {p['predicted_us']:.1f} | "
                         f"{a['predicted_us']:.1f} | {a['predicted_us'] / f['predicted_us']:.3f} |")
        fs_behind = [r["case"] for r in rows if r["gpu"] == gpu
                     and r["after"]["predicted_us"] > 1.01 * r["fusionstitching"]["predicted_us"]]
        lines += ["", f"Cases where astitch (after) is predicted more than 1% behind fusionstitching on {gpu}: "
                  f"{', '.join(fs_behind) if fs_behind else 'none'}.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.never_behind", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--gpus", nargs="+", default=["H100"])
    args = ap.parse_args(argv)
    rows = run(args.gpus)
    prov = provenance(["-m", "benchmarks.never_behind"] + argv)
    write_results(args.out, "never_behind", prov, rows, markdown(rows, prov))


if __name__ == "__main__":
    main()
