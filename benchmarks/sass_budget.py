"""Can the generated kernels reach the bandwidth limit?  Their SASS, counted per element, says -- no GPU needed.

Every catalog workload at its default (paper) size, plus the paper's DIEN softmax <750000,32> and an
Adam update over 2^20 - 3 elements (an extent no vector divides: vectors across rows and a scalar tail), is
planned under every strategy for the preset of each architecture asked for (A100 -> sm_80,
H100 -> sm_90), checked by :func:`gpu_backend.apply_compiler` (the register caps that launch),
and each kernel's machine code is profiled (:mod:`gpu_backend.machine.sass_profile`).  Per kernel::

    elements/thread   the largest stage domain / (grid x block)
    regs, spills      ptxas -v at the applied cap
    instr/elem        main-body SASS per thread / elements per thread (straight-line code: an upper
                      bound; "loop": a kept loop's body counted once per trip, an estimate: the trips
                      from the global accesses the generated source executes per thread, against
                      the SASS's outside and inside one trip -- ptxas unrolls the generated loops)
    int%              integer / address / move instructions as a share of the main body
    LDG, STG          global loads and stores by width ("4x32 1x128": four 32-bit, one 128-bit)
    BAR, SHFL         block barriers and warp shuffles
    bound             issue-rate bound as a fraction of copy bandwidth:
                          issue time = instr/thread x threads / 32 / (SMs x 4 schedulers x clock)
                          DRAM time  = (bytes read once + bytes written once) / copy bandwidth
                          bound      = min(1, DRAM time / issue time)
                      H100: 132 SMs, 1.98 GHz, 3.0 TB/s measured copy; A100: 108 SMs, 1.41 GHz,
                      1.835 TB/s (the preset's estimate: 90% of the datasheet, not measured)

and per plan ``sum(DRAM time) / sum(max(issue time, DRAM time))`` over its kernels::

    python -m benchmarks.sass_budget [--gpus A100 H100] [--only layernorm softmax_dien] [--jobs 2]
                                     [--label before] [--out benchmarks/results]
    python -m benchmarks.sass_budget --compare before after      # the target plans, run against run

Writes ``sass_budget_<label>.json`` (provenance and every kernel's record) and ``.md``.
The compiled code is cached on disk (``$ASTITCH_MACHINE_CACHE``): a second run costs file reads.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from math import prod
from pathlib import Path

import astitch_sim as asim
from astitch_sim.ir.dtypes import itemsize
from astitch_sim.frontends.workloads import list_workloads

ARCH = {"A100": "sm_80", "H100": "sm_90"}
#: the paper's shapes beyond the catalog defaults: (case name, workload, shape)
EXTRA = (("softmax_dien", "softmax", {"rows": 750000, "cols": 32}),
         # an extent no vector divides (2^20 - 3): vectors in flat order and a scalar tail (issue 27)
         ("adam_step_odd", "adam_step", {"size": 1048573}))
#: issue 27's target plans (case names): the rows of ``--compare``
TARGETS = ("layernorm", "softmax_dien", "softmax", "rmsnorm", "bias_gelu")


def cases() -> list:
    """(case name, workload, shape): every catalog workload at its default size, then :data:`EXTRA`."""
    return [(w.name, w.name, dict(w.defaults)) for w in list_workloads()] + list(EXTRA)


def _nbytes(g, names) -> int:
    return sum(int(prod(g[n].shape)) * itemsize(g[n].dtype) for n in names)


def kernel_rows(plan, arch: str) -> list:
    """One record per kernel of an applied plan: its profile and issue bound on ``arch``."""
    from gpu_backend.machine.machine_code import entry_name, kernel_ptx, sass_listing
    from gpu_backend.machine.sass_profile import issue_bound, profile
    from gpu_backend.machine.source_counts import plan_accesses
    g, gpu = plan.graph, plan.gpu
    rows = []
    counted = plan_accesses(plan)
    for spec, ptx in kernel_ptx(plan, arch):
        k = plan.kernels[spec.index]
        p = profile(sass_listing(ptx, arch, k.registers_per_thread, spec.cooperative), entry_name(ptx))
        threads = k.grid * k.block
        domain = max((prod(st.mapping.domain) for st in k.stages), default=0) or \
            max(int(prod(g[n].shape)) for n in k.outputs)
        ept = domain / threads
        accesses = counted[spec.index]
        per_thread = p.per_thread(ept, accesses)
        nbytes = _nbytes(g, k.inputs) + _nbytes(g, k.outputs)
        b = issue_bound(gpu, per_thread, threads, nbytes)
        m = k.machine
        rows.append({
            "kernel": spec.index, "name": k.name, "kind": k.kind, "grid": k.grid, "block": k.block,
            "cooperative": k.cooperative, "elements_per_thread": ept,
            "registers": m.registers if m else None, "spill_bytes": m.spills if m else None,
            "instructions": p.total, "loop_instructions": p.loop_body,
            "loop_trips": p.loop_trips(ept, accesses) if p.loop_body else 0,
            "instr_per_element": per_thread / ept if ept else None,
            "int_addr_share": p.int_addr / p.total if p.total else 0.0,
            "loads": {str(w): n for w, n in p.loads.items()}, "stores": {str(w): n for w, n in p.stores.items()},
            "barriers": p.classes.get("barrier", 0), "shuffles": p.classes.get("shuffle", 0),
            "bytes": nbytes, "issue_us": b.issue_us, "dram_us": b.dram_us, "bound": b.fraction,
        })
    return rows


def run_case(c: dict) -> dict:
    """One (case, strategy, GPU): compile, apply ptxas, profile each kernel; an error is recorded by id."""
    from gpu_backend import apply_compiler
    try:
        g = asim.workload(c["workload"], **c["shape"])
        plan = apply_compiler(asim.compile(g, c["strategy"], c["gpu"]))
        rows = kernel_rows(plan, ARCH[c["gpu"]])
        dram = sum(r["dram_us"] for r in rows)
        slow = sum(max(r["issue_us"], r["dram_us"]) for r in rows)
        return {"kernels": rows, "plan_bound": dram / slow if slow else 1.0}
    except Exception as e:      # noqa: BLE001 - reported by id in the tables
        return {"error": f"{type(e).__name__}: {e}"}


def _fmt_widths(d: dict) -> str:
    return " ".join(f"{n}x{w}" for w, n in sorted(d.items(), key=lambda x: int(x[0]))) or "-"


HEADER = ("| plan | kernel | grid x block | elem/thread | regs | spill B | instr/elem | int% | LDG | STG | BAR | "
          "SHFL | bound |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def kernel_line(pid: str, r: dict) -> str:
    ipe = r["instr_per_element"]
    loop = " (loop)" if r["loop_instructions"] else ""
    return (f"| {pid} | {r['name']}{' (coop)' if r['cooperative'] else ''}{' [library]' if r['kind'] == 'library' else ''}"
            f" | {r['grid']} x {r['block']} | {r['elements_per_thread']:.2f} | {r['registers']} | {r['spill_bytes']} | "
            f"{ipe:.1f}{loop} | {100 * r['int_addr_share']:.0f} | {_fmt_widths(r['loads'])} | "
            f"{_fmt_widths(r['stores'])} | {r['barriers']} | {r['shuffles']} | {100 * r['bound']:.0f}% |")


def markdown(label: str, records: dict, prov: dict) -> str:
    lines = [f"# SASS budget ({label}): can each generated kernel issue fast enough to reach copy bandwidth?", "",
             (f"Provenance: {prov['date']}, `{prov['command']}`, commit {prov['git_commit'][:12]}, "
             f"{prov['machine']}, no GPU. Tools: {prov['tools']['toolchain']}; numba {prov['tools']['numba']}, "
             f"numba-cuda {prov['tools']['numba-cuda']}. Wall time {prov['wall_s']:.0f} s. "
             f"Raw records: `sass_budget_{label}.json`."), "",
             ("Static counts of the main body of each kernel's SASS (`gpu_backend/machine/sass_profile.py` says what is "
             "counted). **bound** = min(1, DRAM time / issue time), with issue time = instructions per thread x "
             "threads / 32 / (SMs x 4 schedulers x clock) and DRAM time = (inputs read once + outputs written once) "
             "/ copy bandwidth (H100: 132 SMs, 1.98 GHz, 3.0 TB/s measured copy; A100: 108 SMs, 1.41 GHz, "
             "1.835 TB/s, an estimate). Per plan: sum of DRAM times / sum of max(issue, DRAM) times. These are "
             "upper bounds from instruction issue alone, not predictions of measured speed."), "",
             "## Per plan", "", ("| plan | kernels | instr/elem (max) | int% (max) | global widths | BAR | SHFL | "
             "plan bound |"), "|---|---|---|---|---|---|---|---|"]
    for pid, rec in records.items():
        if "error" in rec:
            lines.append(f"| {pid} | error: {rec['error'][:100]} | | | | | | |")
            continue
        ks = rec["kernels"]
        widths = sorted({int(w) for r in ks for d in (r["loads"], r["stores"]) for w in d})
        lines.append(f"| {pid} | {len(ks)} | {max(r['instr_per_element'] or 0 for r in ks):.1f} | "
                     f"{max(100 * r['int_addr_share'] for r in ks):.0f} | {'/'.join(map(str, widths)) or '-'} | "
                     f"{sum(r['barriers'] for r in ks)} | {sum(r['shuffles'] for r in ks)} | "
                     f"{100 * rec['plan_bound']:.0f}% |")
    lines += ["", "## Every kernel", "", HEADER]
    for pid, rec in records.items():
        for r in rec.get("kernels", []):
            lines.append(kernel_line(pid, r))
    return "\n".join(lines) + "\n"


def compare(labels: list, out: Path, gpu: str = "H100", strategies=("astitch", "xla")) -> str:
    """A markdown table of :data:`TARGETS` under ``strategies`` across the runs named by ``labels`` (their
    JSON files in ``out``): per plan the largest instructions per element, the global access widths and the
    plan's issue-rate bound, run by run."""
    runs = [json.loads((out / f"sass_budget_{label}.json").read_text()) for label in labels]
    head = " | ".join(f"{label}: kernels, instr/elem (max), widths, bound" for label in labels)
    lines = [f"| plan ({gpu}) | {head} |", "|---|" + "---|" * len(labels)]
    for case in TARGETS:
        for s in strategies:
            pid = f"{case}/{s}/{gpu}"
            cells = []
            for run in runs:
                rec = run["records"].get(pid)
                if rec is None or "error" in rec:
                    cells.append("-" if rec is None else "error")
                    continue
                ks = rec["kernels"]
                widths = sorted({int(w) for r in ks for d in (r["loads"], r["stores"]) for w in d})
                cells.append(f"{len(ks)}, {max(r['instr_per_element'] or 0 for r in ks):.0f}, "
                             f"{'/'.join(map(str, widths))}-bit, {100 * rec['plan_bound']:.0f}%")
            lines.append(f"| {pid.rsplit('/', 1)[0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sass_budget", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", nargs="+", default=["A100", "H100"], choices=sorted(ARCH))
    ap.add_argument("--strategies", nargs="+", default=list(asim.STRATEGIES), choices=list(asim.STRATEGIES))
    ap.add_argument("--only", nargs="+", help="case names (catalog workloads, softmax_dien, adam_step_odd)")
    ap.add_argument("--jobs", type=int, default=1, help="plans compiled at once (worker processes)")
    ap.add_argument("--label", default="now", help="names the output files: sass_budget_<label>.{json,md}")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--compare", nargs="+", metavar="LABEL",
                    help="print a before/after table of issue 27's target plans from earlier runs (no compiling)")
    args = ap.parse_args(argv)
    if args.compare:
        print(compare(args.compare, Path(args.out)))
        return
    from benchmarks.ptxas_catalog import tool_versions
    from benchmarks.simt_predictions import provenance
    from gpu_backend.machine import toolchain
    if not toolchain.available():
        sys.exit(f"NVIDIA's toolchain is missing: {toolchain.missing_reason()}")
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    known = {name for name, _, _ in cases()}
    bad = sorted(set(args.only or ()) - known)
    if bad:
        sys.exit(f"unknown case(s) {bad}: choose from {sorted(known)}")
    todo = [{"id": f"{name}/{s}/{gpu}", "workload": wl, "shape": shape, "strategy": s, "gpu": gpu}
            for gpu in args.gpus for name, wl, shape in cases() if not args.only or name in args.only
            for s in args.strategies]
    t0 = time.monotonic()
    from gpu_backend.machine.resource_check import run_cases
    records = run_cases(todo, jobs=args.jobs, run=run_case)
    prov = provenance(["-m", "benchmarks.sass_budget"] + list(argv))
    prov.update(what="static SASS profile of generated kernels and their issue-rate bound; no GPU",
                tools=tool_versions(), wall_s=round(time.monotonic() - t0, 1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sass_budget_{args.label}.json").write_text(json.dumps({"provenance": prov, "records": records}, indent=1))
    text = markdown(args.label, records, prov)
    (out / f"sass_budget_{args.label}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
