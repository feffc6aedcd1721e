"""The plans a benchmark measures: each strategy's plan after :func:`gpu_backend.apply_compiler`.

``asim.compile`` sizes every kernel with an *estimated* register count; the real
compiler can need more, and a kernel compiled at the estimate then spills
(softmax <64,30000> astitch: 144 B per thread).  That is not what AStitch ships:
its assume-relax-apply step (``apply_compiler``: ptxas on every kernel, caps
relaxed where the code spilled, a cooperative plan re-planned) is part of the
compiler.  So the benchmark measures the plan *after* it, and records what it
changed (:func:`compiler_record`).

``apply_compiler`` needs the real ``numba.cuda`` (it compiles to PTX, then runs
ptxas; no GPU needed).  On a GPU it runs in-process.  In a process that runs
Numba's CUDA simulator (the dry run) :func:`apply_all` runs it in one child
process per batch (``python -m benchmarks.applied_plans``: plan JSON in, plan
JSON out), so the simulator measures the very plans a GPU would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compiler_record(before, after) -> dict:
    """What apply_compiler did to a plan: kernels before/after, ptxas's registers and spills per kernel."""
    rec = {"applied": True, "kernels_before": len(before.kernels), "kernels_after": len(after.kernels),
           "replanned": after.options != before.options, "kernels": []}
    for k in after.kernels:
        m = k.machine
        rec["kernels"].append({"name": k.name, "registers": m.registers if m else None,
                               "spill_bytes": m.spills if m else None, "arch": m.arch if m else None})
    rec["spill_bytes"] = sum(k["spill_bytes"] or 0 for k in rec["kernels"])
    return rec


def _apply_here(plans: list) -> list:
    from gpu_backend import apply_compiler
    out = []
    for p in plans:
        try:
            out.append((apply_compiler(p), None))
        except Exception as e:      # noqa: BLE001 - reported per plan; the benchmark measures the rest
            out.append((None, f"{type(e).__name__}: {e}"))
    return out


def apply_all(plans: list, timeout: float = 600) -> list:
    """``[(applied plan or None, error or None)]`` per plan, in order."""
    from gpu_backend.launch.plans import simulator
    if not simulator():
        return _apply_here(plans)
    import astitch_sim as asim
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    r = subprocess.run([sys.executable, "-m", "benchmarks.applied_plans"], check=False, cwd=ROOT, env=env,
                       input=json.dumps([p.to_json(indent=None) for p in plans]), capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        why = f"apply_compiler child failed (exit {r.returncode}): {r.stderr.strip()[-800:]}"
        return [(None, why) for _ in plans]
    return [(asim.Plan.from_json(rec["plan"]), None) if "plan" in rec else (None, rec["error"])
            for rec in json.loads(r.stdout)]


def apply_for_case(plans: dict, log=lambda msg: None) -> tuple:
    """``{strategy: plan}`` -> (applied plans, ``{strategy: compiler record}``, seconds).  A plan ptxas cannot
    take keeps its estimate and its record says why (the benchmark still measures it)."""
    import time
    t0 = time.perf_counter()
    out, records = dict(plans), {}
    for (strategy, before), (after, err) in zip(list(plans.items()), apply_all(list(plans.values())), strict=True):
        if after is None:
            records[strategy] = {"applied": False, "error": err}
            log(f"{strategy}: apply_compiler FAILED ({err}); measuring the plan as compiled")
        else:
            out[strategy], records[strategy] = after, compiler_record(before, after)
    return out, records, time.perf_counter() - t0


def main(argv=None) -> int:
    """stdin: a JSON list of plan JSON texts; stdout: ``[{"plan": json} | {"error": why}]``."""
    import argparse
    argparse.ArgumentParser(prog="python -m benchmarks.applied_plans", description=__doc__.split("\n\n")[0],
                            epilog="reads a JSON list of plan JSON texts on stdin, writes the applied plans "
                                   "on stdout").parse_args(argv)
    import astitch_sim as asim
    plans = [asim.Plan.from_json(t) for t in json.load(sys.stdin)]
    out = [{"plan": p.to_json(indent=None)} if p is not None else {"error": e} for p, e in _apply_here(plans)]
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
