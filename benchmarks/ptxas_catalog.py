"""Every catalog plan's resource claims against NVIDIA's real compiler (ptxas), per preset architecture.

For each GPU preset asked for (V100 = sm_70, A100 = sm_80, H100 = sm_90) and every
catalog workload at its default size under every strategy, the plan is compiled,
then :func:`gpu_backend.apply_compiler` compiles each kernel to machine code at the
plan's register cap and relaxes it where the code spills (see ``gpu_backend/machine/apply.py``).
Per kernel we record the plan's estimate, the cap applied, ptxas's registers, spills,
stack, shared memory (the kernel's own and what CUDA's device runtime adds), and
blocks per wave with the estimate and with the real numbers; for a cooperative
kernel the check that its grid still fits one wave.  No GPU needed::

    python -m benchmarks.ptxas_catalog [--gpus V100 A100 H100] [--jobs 2] [--out benchmarks/results]

Writes ``ptxas_catalog_<GPU>.json`` (provenance and every kernel's record) and
``ptxas_catalog_<GPU>.md`` (per-plan summary, the kernels where ptxas and the plan
disagree, and every kernel) for each GPU.  Results are cached on disk
(``$ASTITCH_MACHINE_CACHE``), so a second run costs file reads.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import astitch_sim as asim
from astitch_sim.frontends.workloads import list_workloads
from benchmarks.simt_predictions import provenance
from gpu_backend.machine import toolchain
from gpu_backend.machine.resource_check import run_cases

ARCH = {"V100": "sm_70", "A100": "sm_80", "H100": "sm_90", "H200": "sm_90"}


def catalog_cases(gpu: str, strategies=asim.STRATEGIES) -> list:
    return [{"id": f"{w.name}/{s}/{gpu}", "graph": w.name, "strategy": s, "gpu": gpu}
            for w in list_workloads() for s in strategies]


def tool_versions() -> dict:
    from importlib.metadata import version
    tc = toolchain.find()
    out = {"toolchain": tc.describe}
    for pkg in ("numba", "numba-cuda", "nvidia-cuda-nvcc-cu12", "nvidia-nvjitlink-cu12", "nvidia-cuda-nvdisasm"):
        try:
            out[pkg] = version(pkg)
        except Exception:       # noqa: BLE001
            out[pkg] = "not installed"
    return out


def disagreements(records: dict) -> list:
    """(plan id, kernel record) where ptxas's numbers change the plan: relaxed cap, spills, shared or wave."""
    rows = []
    for pid, rec in records.items():
        for k in rec.get("kernels", []):
            m = k["machine"]
            if m is None:
                continue
            shared_off = k["kind"] == "generated" and m["shared_static"] != k["plan_shared"]
            if (k["applied_registers"] != k["plan_registers"] or m["spill_stores"] or m["spill_loads"]
                    or shared_off or (k["wave_real"] != k["wave_estimate"] and k["cooperative"])):
                rows.append((pid, k))
    return rows


def _kernel_cells(pid, k) -> str:
    m = k["machine"]
    plan = pid.rsplit("/", 1)[0]
    regs = (f"{k['plan_registers']} -> {k['applied_registers']} (relaxed)"
            if k["applied_registers"] != k["plan_registers"] else f"{k['plan_registers']} (kept)")
    spills = m["spill_stores"] + m["spill_loads"]
    shared = f"{m['shared_static']}" + (f"+{m['shared_runtime']}" if m["shared_runtime"] else "")
    fits = ("yes" if k["grid"] <= k["wave_real"] else "**NO**") if k["cooperative"] else "-"
    wave = (f"{k['wave_estimate']} -> {k['wave_real']}" if k["wave_estimate"] != k["wave_real"]
            else f"{k['wave_real']}")
    return (f"| {plan} | {k['name']}{' (coop)' if k['cooperative'] else ''} | {regs} | {m['registers']} | {spills} | "
            f"{m['stack']} | {shared} (plan {k['plan_shared']}) | {wave} | {k['grid']} | {fits} |")


HEADER = ("| plan | kernel | plan regs -> applied | ptxas regs | spills (B/thread, stores + loads) | stack (B) | "
          "shared B/block: own+runtime | blocks/wave estimate -> real | grid | one wave? |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def markdown(gpu: str, records: dict, prov: dict, wall_s: float) -> str:
    arch = ARCH[gpu]
    kernels = [(pid, k) for pid, r in records.items() for k in r.get("kernels", [])]
    errors = {pid: r["error"] for pid, r in records.items() if "error" in r}
    coop = [(p, k) for p, k in kernels if k["cooperative"]]
    spilling = [(p, k) for p, k in kernels if k["machine"] and k["machine"]["spill_stores"] + k["machine"]["spill_loads"]]
    relaxed = [(p, k) for p, k in kernels if k["applied_registers"] != k["plan_registers"]]
    replanned = [(pid, r) for pid, r in records.items() if r.get("replanned")]
    shared_off = [(p, k) for p, k in kernels if k["kind"] == "generated" and k["machine"]
                  and k["machine"]["shared_static"] != k["plan_shared"]]
    lines = [
        f"# Plans' resource claims against ptxas: {gpu} preset ({arch}), no GPU", "",
        f"Every catalog workload at its default size x {{{', '.join(asim.STRATEGIES)}}}: {len(records)} plans, "
        f"{len(kernels)} kernels ({len(coop)} cooperative). Raw records: `ptxas_catalog_{gpu}.json`.", "",
        f"Provenance: {prov['date']}, `{prov['command']}`, commit {prov['git_commit'][:12]}, "
        f"{prov['machine']} ({os.cpu_count()} cores, shared), no GPU. Tools: {prov['tools']['toolchain']}; "
        f"numba {prov['tools']['numba']}, numba-cuda {prov['tools']['numba-cuda']}. "
        f"Wall time {wall_s:.0f} s ({prov['cache']})." + (f" Amended: {prov['amended']}." if prov.get("amended") else ""), "",
        "## Summary", "",
        f"- plans that failed to compile or apply: {len(errors)}" +
        "".join(f"\n  - `{p}`: {e}" for p, e in errors.items()),
        f"- kernels whose register cap ptxas relaxed (the code spilled at the estimate): {len(relaxed)}",
        f"- plans re-planned assuming more registers (a cooperative kernel still spilled at the assumed 32 with "
        f"no room to relax): {len(replanned)}" +
        "".join(f"\n  - `{p.rsplit('/', 1)[0]}`: assumed {r['assumed_registers']}" for p, r in replanned),
        f"- kernels that still spill after assume-relax-apply: {len(spilling)}",
        f"- generated kernels whose static shared memory differs from the plan's: {len(shared_off)}",
        f"- cooperative kernels whose grid fits one wave with the real numbers: "
        f"{sum(k['grid'] <= k['wave_real'] for _, k in coop)} of {len(coop)}",
        f"- most registers any kernel uses: {max((k['machine']['registers'] for _, k in kernels if k['machine']), default=0)}; "
        f"largest stack frame: {max((k['machine']['stack'] for _, k in kernels if k['machine']), default=0)} B", "",
        "## Where ptxas and the plan disagree", "",
        "Kernels whose cap was relaxed, that spill, whose shared memory differs, or (cooperative) whose "
        "blocks per wave change with the real numbers:", "", HEADER]
    lines += [_kernel_cells(p, k) for p, k in disagreements(records)] or ["| (none) |"]
    lines += ["", "## Per plan", "", "| plan | kernels | max ptxas regs | spilling kernels | max stack (B) | "
              "cooperative kernels in one wave |", "|---|---|---|---|---|---|"]
    for pid, r in records.items():
        ks = [k for k in r.get("kernels", []) if k["machine"]]
        if "error" in r:
            lines.append(f"| {pid.rsplit('/', 1)[0]} | error: {r['error'][:80]} | | | | |")
            continue
        co = [k for k in ks if k["cooperative"]]
        in_wave = f"{sum(k['grid'] <= k['wave_real'] for k in co)}/{len(co)}" if co else "-"
        lines.append(f"| {pid.rsplit('/', 1)[0]} | {len(ks)} | {max((k['machine']['registers'] for k in ks), default=0)} | "
                     f"{sum(1 for k in ks if k['machine']['spill_stores'] + k['machine']['spill_loads'])} | "
                     f"{max((k['machine']['stack'] for k in ks), default=0)} | "
                     f"{in_wave} |")
    lines += ["", "## Every kernel", "", HEADER] + [_kernel_cells(p, k) for p, k in kernels if k["machine"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ptxas_catalog", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", nargs="+", default=["V100", "A100", "H100"], choices=sorted(ARCH))
    ap.add_argument("--jobs", type=int, default=1, help="plans compiled at once (worker processes)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--redraw", action="store_true", help="rewrite the .md files from the .json ones (no compiling)")
    args = ap.parse_args(argv)
    if args.redraw:
        for gpu in args.gpus:
            data = json.loads((Path(args.out) / f"ptxas_catalog_{gpu}.json").read_text())
            prov = data["provenance"]
            (Path(args.out) / f"ptxas_catalog_{gpu}.md").write_text(markdown(gpu, data["records"], prov, prov["wall_s"]))
        return
    if not toolchain.available():
        sys.exit(f"NVIDIA's toolchain is missing: {toolchain.missing_reason()}")
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    cache = toolchain.cache_dir()
    def entries():
        return sum(1 for _ in cache.iterdir()) if cache.exists() else 0
    for gpu in args.gpus:
        t0, before = time.monotonic(), entries()
        records = run_cases(catalog_cases(gpu), jobs=args.jobs)
        wall = time.monotonic() - t0
        prov = provenance(["-m", "benchmarks.ptxas_catalog"] + list(argv))
        prov.update(what=f"ptxas resource check of the catalog, {gpu} preset ({ARCH[gpu]})", tools=tool_versions(),
                    cache=f"{args.jobs} job(s); disk cache: {before} entries at start, {entries() - before} added", wall_s=round(wall, 1))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"ptxas_catalog_{gpu}.json").write_text(json.dumps({"provenance": prov, "records": records}, indent=1))
        text = markdown(gpu, records, prov, wall)
        (out / f"ptxas_catalog_{gpu}.md").write_text(text)
        print(text.split("## Per plan")[0])


if __name__ == "__main__":
    main()
