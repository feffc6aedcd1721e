"""Check plans' resource claims against ptxas, many plans in one process (what the tests and benchmarks run).

``apply_compiler`` needs the real ``numba.cuda``, and the test suite runs with Numba's
CUDA simulator switched on for the whole process; so the tests run this module in a
subprocess (``NUMBA_ENABLE_CUDASIM`` unset), once for a whole batch of plans::

    python -m gpu_backend.resource_check cases.json > records.json

``cases.json`` is a list of ``{"id", "graph": "workload:k=v,..." | "path.hlo" | "plan.json", "strategy",
"gpu"}``; the output maps each id to ``{"kernels": [...]}`` (one record per kernel: the plan's claims
before and after :func:`~gpu_backend.apply.apply_compiler`, ptxas's numbers, blocks per wave with
them) or ``{"error": "..."}``.  Progress goes to stderr.
"""
from __future__ import annotations

import json
import sys
import time

from astitch_sim.machine import blocks_per_wave


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


def run_cases(cases: list, progress=True) -> dict:
    import astitch_sim as asim

    from .apply import apply_compiler
    results = {}
    start = time.monotonic()
    for i, c in enumerate(cases):
        if progress:
            print(f"[{i + 1}/{len(cases)} {time.monotonic() - start:6.1f}s] {c['id']}", file=sys.stderr, flush=True)
        try:
            if c["graph"].endswith(".json"):
                with open(c["graph"]) as f:
                    plan = asim.Plan.from_json(f.read())
            else:
                plan = asim.compile(load_graph(c["graph"]), c["strategy"], c["gpu"])
            after = apply_compiler(plan)
            results[c["id"]] = {"kernels": kernel_records(plan, after)}
        except Exception as e:      # noqa: BLE001 - every failure is reported by id; the caller asserts
            results[c["id"]] = {"error": f"{type(e).__name__}: {e}"}
    return results


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        cases = json.load(f)
    json.dump(run_cases(cases), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
