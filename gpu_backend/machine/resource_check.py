"""Check plans' resource claims against ptxas, many plans in one process (what the tests and benchmarks run).

``apply_compiler`` needs the real ``numba.cuda``, and the test suite runs with Numba's
CUDA simulator switched on for the whole process; so the tests run this module in a
subprocess (``NUMBA_ENABLE_CUDASIM`` unset), once for a whole batch of plans::

    python -m gpu_backend.machine.resource_check [--jobs N] cases.json > records.json

``cases.json`` is a list of ``{"id", "graph": "workload:k=v,..." | "path.hlo" | "plan.json", "strategy",
"gpu"}``; the output maps each id to ``{"kernels": [...]}`` (one record per kernel: the plan's claims
before and after :func:`~gpu_backend.machine.apply.apply_compiler`, ptxas's numbers, blocks per wave with
them) or ``{"error": "..."}``.  Progress goes to stderr.

``--jobs N`` compiles N plans at once in worker processes (ptxas is single-threaded;
NVVM and ptxas dominate a cold run).  Identical kernel sources -- the same kernel in
two plans, or a plan whose kernels repeat across strategies -- are compiled once:
the disk cache (:mod:`gpu_backend.machine.toolchain`) is keyed by the source text, the
target, the flags and the tools' versions, and the workers share it.
"""
from __future__ import annotations

import json
import sys
import time

from astitch_sim.plan.machine import blocks_per_wave


def load_graph(spec: str):
    import astitch_sim as asim
    if spec.endswith(".hlo"):
        return asim.from_hlo_file(spec)
    name, _, shape = spec.partition(":")
    kw = dict(kv.split("=") for kv in shape.split(",") if kv)
    return asim.workload(name, **{k: int(v) for k, v in kw.items()})


def kernel_records(before, after) -> list:
    """One dict per kernel: the plan's claims before ptxas, after it, and ptxas's own numbers."""
    out = []
    for kb, ka in zip(before.kernels, after.kernels):
        m = ka.machine
        out.append({
            "name": ka.name, "kind": ka.kind, "cooperative": ka.cooperative, "grid": ka.grid, "block": ka.block,
            "plan_shared": kb.shared_bytes, "plan_registers": kb.registers_per_thread,
            "applied_registers": ka.registers_per_thread,
            "machine": m.to_dict() if m else None,
            "wave_estimate": before.gpu.blocks_per_wave(kb.block, kb.shared_bytes, kb.registers_per_thread),
            "wave_real": blocks_per_wave(after.gpu, ka) if m else None,
            "notes": [n for n in ka.notes if n.startswith("assume-relax-apply (ptxas")],
        })
    return out


def run_case(c: dict) -> dict:
    """One case: compile the plan, apply ptxas, the per-kernel records (or the error, by id)."""
    import astitch_sim as asim

    from .apply import apply_compiler
    try:
        if c["graph"].endswith(".json"):
            with open(c["graph"]) as f:
                plan = asim.Plan.from_json(f.read())
        else:
            plan = asim.compile(load_graph(c["graph"]), c["strategy"], c["gpu"])
        after = apply_compiler(plan, count_instructions=False)   # resources only: no nvdisasm
        replanned = after.options != plan.options           # apply_compiler re-planned with more assumed registers
        if replanned:       # ptxas checked that plan: hold it to that plan's own claims
            plan = asim.compile(plan.graph, plan.strategy, plan.gpu, **after.options)
        return {"plan_kernels": len(plan.kernels), "kernels": kernel_records(plan, after), "replanned": replanned,
                "assumed_registers": after.options.get("assumed_registers", 32)}
    except Exception as e:      # noqa: BLE001 - every failure is reported by id; the caller asserts
        return {"error": f"{type(e).__name__}: {e}"}


def run_cases(cases: list, progress=True, jobs: int = 1, run=None) -> dict:
    """``{id: record}`` for every case, in the cases' order; ``jobs > 1`` runs them in that many worker
    processes.  ``run`` (default :func:`run_case`) makes one case's record: a module-level function, so
    that a worker process can import it (``benchmarks.sass_budget`` passes its own)."""
    run_case_ = run or run_case
    start = time.monotonic()

    def show(i, c):
        if progress:
            print(f"[{i}/{len(cases)} {time.monotonic() - start:6.1f}s] {c['id']}", file=sys.stderr, flush=True)

    if jobs <= 1:
        results = {}
        for i, c in enumerate(cases):
            show(i + 1, c)
            results[c["id"]] = run_case_(c)
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    results = {}
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run_case_, c): c for c in cases}
        for done, fut in enumerate(as_completed(futures)):
            c = futures[fut]
            results[c["id"]] = fut.result()
            show(done + 1, c)
    return {c["id"]: results[c["id"]] for c in cases}


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m gpu_backend.machine.resource_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", help="JSON list of cases")
    ap.add_argument("--jobs", type=int, default=1, help="plans compiled at once (worker processes)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    with open(args.cases) as f:
        cases = json.load(f)
    json.dump(run_cases(cases, jobs=args.jobs), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
