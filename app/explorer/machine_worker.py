"""Compile a plan's kernels to PTX and SASS in a fresh process, for the Code view's machine-code pane.

Run as ``python -m explorer.machine_worker`` (from ``app/``) with the plan's JSON on stdin; prints one JSON
object.  A fresh process because compiling needs the real ``numba.cuda`` (no GPU is asked: the target is
named), while the page's process may have Numba's CUDA simulator switched on.  Everything it reports
was recorded by the compiler chain (``gpu_backend.machine.machine_code``: NVVM -> PTX -> ptxas -> nvdisasm;
``gpu_backend.machine.sass_profile``: the static SASS counts); it decides nothing.
"""
from __future__ import annotations

import json
import math
import sys


def elements_per_thread(k) -> float:
    """Elements one thread handles in the kernel's largest stage (the mapping's domain over its threads)."""
    threads = max(1, k.grid * k.block)
    return max([max(1.0, math.ceil(s.mapping.size / threads)) for s in k.stages] or [1.0])


def text_section(sass: str, entry: str) -> str:
    """The kernel's own code in an nvdisasm listing (its ``.text.<entry>`` section), without the ELF's other
    sections (headers, debug frames, constant banks); the whole listing if the section is not found."""
    lines, keep, inside = sass.splitlines(), [], False
    for line in lines:
        words = line.split()
        if words and words[0] == ".section":
            inside = len(words) > 1 and words[1].split(",")[0] == f".text.{entry}"
        if inside:
            keep.append(line)
    return "\n".join(keep) if keep else sass


def compile_plan_json(text: str) -> dict:
    import astitch_sim as asim
    from astitch_sim import AStitchError
    from gpu_backend.machine.machine_code import arch_of, assemble, entry_name, kernel_ptx, sass_listing
    from gpu_backend.machine.sass_profile import profile
    from gpu_backend.machine.source_counts import plan_accesses
    plan = asim.Plan.from_json(text)
    arch = arch_of(plan.gpu)
    counted = plan_accesses(plan)
    kernels = []
    for spec, ptx in kernel_ptx(plan, arch):
        k = plan.kernels[spec.index]
        cap = k.registers_per_thread
        r = assemble(ptx, arch, cap, spec.cooperative, disassemble=False)
        res = r["resources"]
        entry = {"index": spec.index, "name": k.name, "ptx": ptx, "resources": res, "sass": None}
        try:
            sass = sass_listing(ptx, arch, cap, spec.cooperative)
        except AStitchError as e:   # no disassembler, or one too new for this architecture (sm_70)
            entry["sass_missing"] = str(e)
        else:
            prof = profile(sass, entry_name(ptx))
            ept = elements_per_thread(k)
            entry.update(sass=text_section(sass, entry_name(ptx)), instructions=prof.total, classes=dict(prof.classes),
                         global_loads=prof.widths("load"), global_stores=prof.widths("store"),
                         loop=bool(prof.loop_body), elements_per_thread=ept,
                         instructions_per_element=prof.per_thread(ept, counted[spec.index]) / ept)
        kernels.append(entry)
    return {"arch": arch, "kernels": kernels}


def main() -> int:
    try:
        out = compile_plan_json(sys.stdin.read())
    except Exception as e:          # noqa: BLE001 -- the page shows the reason, whatever it is
        out = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
