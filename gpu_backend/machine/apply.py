"""Assume-relax-apply with the real compiler: check a plan's register assumption against ptxas, fix it.

AStitch (ASPLOS'22, section 5) sizes a kernel's launch before it knows the kernel's
real register use: it *assumes* a register count, derives how many blocks stay
resident per SM (so the one-wave grid a grid barrier needs), *relaxes* the count
to the largest that keeps that occupancy, and *applies* it as the compiler's cap.
The compiler core does the first two with an estimate; :func:`apply_compiler`
does the rest with NVIDIA's ``ptxas``:

1. compile every kernel with the plan's cap (``-maxrregcount``, Numba's ``max_registers``);
2. if the code fits (no spills), keep the cap and record ptxas's numbers;
3. if it spills, compile without the cap to learn what the code needs, and relax the
   plan's registers to that -- unless the kernel is cooperative and fewer blocks would
   then stay resident than its grid has (its grid barriers would deadlock): then relax
   only as far as the whole grid stays in one wave, and say so if spills remain -- or its block
   cannot hold more; if the code still spills at the cap it may have and its row stages load several
   trips at once, load them fewer at a time (4, 2, 1: ``astitch_sim/plan/loads_in_flight.py``) and keep
   the first group that does not spill, recorded on the plan (``ThreadMapping.load_trips``);
4. check every cooperative kernel's grid against CUDA's occupancy rules with the
   real registers and the real shared memory (the kernel's own plus what the linked
   device runtime adds).

The returned plan is a new (sealed) plan with ``Kernel.machine`` set (``print(plan)`` shows
"ptxas sm_90: 40 registers, 0 spills, ..., 212 SASS instructions") and each relaxation written in the
kernel's notes; the SASS counts (:mod:`gpu_backend.machine.sass_profile`, nvdisasm on the code at the
applied cap; left out where no nvdisasm reads the target, as CUDA 13's does not read sm_70) feed the
cost model's instruction-issue term, its spills the spill term (``astitch_sim/simt/cost.py``); it validates like any plan, and ``gpu_backend.run`` launches it
with the relaxed caps.  Without the toolchain it raises
:class:`~gpu_backend.machine.toolchain.ToolchainMissing` (an AStitchError) saying how to
install it; the plan's registers then stay the strategy's estimate (``regs=32
(estimate)`` in ``print(plan)``).
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace

from astitch_sim.errors import AStitchError
from astitch_sim.plan.machine import MachineResources
from astitch_sim.plan.plan import Plan

from .machine_code import arch_of, assemble, kernel_ptx
from .source_counts import plan_accesses


def _progress_printer(enabled):
    if callable(enabled):
        return enabled
    if not enabled:
        return None
    start = time.monotonic()

    def show(i, n, name):
        print(f"\r[ptxas {i + 1}/{n}] {name[:60]:<60} {time.monotonic() - start:5.1f}s", end="" if i + 1 < n else "\n",
              file=sys.stderr, flush=True)
    return show


def _fits(gpu, k, res: MachineResources) -> tuple:
    """(fits, blocks per wave) for ``k`` with ptxas's numbers; a block that cannot fit at all: (False, 0)."""
    try:
        wave = gpu.blocks_per_wave(k.block, res.shared_total, max(1, res.registers))
    except AStitchError:
        return False, 0
    return (not k.cooperative or k.grid <= wave), wave


def _with_sass_counts(res: MachineResources, ptx: str, arch: str, cooperative: bool,
                      accesses=None) -> MachineResources:
    """``res`` with the SASS instruction counts of the code at its cap (main body, and inside kept loops)
    and, where the loops hold global accesses and ``accesses`` (the source's count,
    :func:`.source_counts.global_accesses`) is known, the trips a thread makes through them on average;
    ``res`` unchanged where no installed nvdisasm reads ``arch``."""
    from .machine_code import compute_capability, entry_name, sass_listing
    from .sass_profile import profile
    from .toolchain import find
    if not find().nvdisasm or compute_capability(arch) < (7, 5):
        return res
    p = profile(sass_listing(ptx, arch, res.max_registers, cooperative), entry_name(ptx))
    trips = p.counted_trips(accesses) if p.loop_body else None
    return replace(res, sass_instructions=p.total, sass_loop_instructions=p.loop_body, sass_loop_trips=trips)


def apply_compiler(plan: Plan, arch: str | None = None, progress=False, disassemble: bool = False,
                   replan: bool = True, count_instructions: bool = True) -> Plan:
    """A copy of ``plan`` whose register caps ptxas has checked (and relaxed where the code spilled).

    ``arch`` (``"sm_90"``) defaults to the plan's GPU preset; ``progress=True``
    prints one line per kernel on stderr (or pass ``progress(i, n, name)``);
    ``disassemble=True`` also runs nvdisasm (the instruction mix, cached for
    :mod:`gpu_backend.machine.mix_vs_model`; the check itself needs only ptxas).
    Where a cooperative kernel still spills because its one-wave grid leaves no room to
    relax, an astitch plan is re-planned assuming the registers ptxas needs (smaller
    grids, more tasks per block) and checked again; the re-plan is kept if it spills
    less (``replan=False``: keep the plan's grids and the spills).
    ``count_instructions`` records each kernel's SASS counts (one more ptxas and nvdisasm run per
    kernel, cached on disk); a check of resources alone (``resource_check``) passes False.
    Raises AStitchError if a cooperative kernel's grid cannot stay in one wave with
    the real numbers even at the plan's own cap (re-plan with a smaller block).
    """
    if not isinstance(plan, Plan):
        raise AStitchError(f"apply_compiler needs a Plan (from asim.compile), got {type(plan).__name__}")
    arch = arch or arch_of(plan.gpu)
    gpu = plan.gpu
    show = _progress_printer(progress)
    ptxs = kernel_ptx(plan, arch)
    accesses = plan_accesses(plan) if count_instructions else {}
    kernels = list(plan.kernels)
    stuck = []                  # cooperative kernels that still spill: (name, bytes per thread, registers needed)
    for i, (spec, ptx) in enumerate(ptxs):
        k = plan.kernels[spec.index]
        if show is not None:
            show(i, len(ptxs), k.name)
        res, need, notes = _check(gpu, k, ptx, arch, spec.cooperative, disassemble)
        if res.spills:
            k, ptx, res, need, notes = _fewer_loads_in_flight(plan, spec.index, k, ptx, res, need, notes, arch,
                                                              disassemble)
            if res.spills and k.cooperative:
                stuck.append((k.name, res.spills, need))
        fits, wave = _fits(gpu, k, res)
        if not fits:
            raise AStitchError(
                f"{k.name}: ptxas ({arch}) needs {res.registers} registers and {res.shared_total} B shared per block "
                f"({res.shared_static} B the kernel's own + {res.shared_runtime} B CUDA's device runtime): only "
                f"{wave} blocks of {k.block} threads stay resident, but the cooperative grid has {k.grid} (its grid "
                f"barriers would deadlock). Re-plan with smaller blocks (asim.compile(..., max_block_threads=...)) "
                f"or without grid barriers (global_stitching=False)")
        if count_instructions:
            res = _with_sass_counts(res, ptx, arch, spec.cooperative, accesses.get(spec.index))
        # the cap applied is Numba's max_registers
        kernels[spec.index] = replace(k, machine=res, registers_per_thread=res.max_registers,
                                      notes=[*k.notes, *notes])
    out = replace(plan, kernels=kernels).with_notes(
        f"machine code: every kernel compiled with ptxas for {arch} (gpu_backend.apply_compiler)").validate()
    if stuck and replan and plan.strategy == "astitch":
        return _replan(plan, out, stuck, arch, show, disassemble, count_instructions)
    return out


def _check(gpu, k, ptx: str, arch: str, cooperative: bool, disassemble: bool) -> tuple:
    """ptxas on one kernel at the plan's cap, relaxed where it spills (:func:`_relax`): (ptxas's result at the
    cap applied, the registers the code needs, the kernel's notes saying what was relaxed)."""
    def compile_at(cap):
        return MachineResources.from_dict(assemble(ptx, arch, cap, cooperative, disassemble)["resources"])

    assumed = k.registers_per_thread
    res = compile_at(assumed)
    if not res.spills:
        return res, res.registers, []
    res, need, note = _relax(gpu, k, compile_at, res, assumed, arch)
    return res, need, [note]


def _fewer_loads_in_flight(plan: Plan, index: int, k, ptx: str, res: MachineResources, need: int, notes: list,
                           arch: str, disassemble: bool) -> tuple:
    """The kernel still spills at the cap it may have: where its row stages load several trips at once, fewer
    at a time (``astitch_sim/plan/loads_in_flight.py``), largest group first, until ptxas says it does not
    spill.  Keeps the group that spills least (the largest among equals) if it spills less than all trips at
    once did; returns ``(kernel, ptx, result, registers needed, notes)``, the kernel's own where no group helps."""
    from astitch_sim.plan.loads_in_flight import groups_to_try, trips_in_flight, with_load_trips
    tries = groups_to_try(k)
    if not tries:
        return k, ptx, res, need, notes
    before, most = res.spills, max(trips_in_flight(s.mapping) for s in k.stages)
    results, tried = [], []
    for group in tries:
        k2 = with_load_trips(k, group)
        kernels = list(plan.kernels)
        kernels[index] = k2
        (spec, ptx2), = kernel_ptx(replace(plan, kernels=kernels), arch, indices={index})
        res2, need2, notes2 = _check(plan.gpu, k2, ptx2, arch, spec.cooperative, disassemble)
        tried.append(f"{group} at a time: {f'{res2.spills} B spilled' if res2.spills else 'no spill'}")
        results.append((res2.spills, group, k2, ptx2, res2, need2, notes2))
        if not res2.spills:
            break
    # the fewest spills; among equals the first tried, the largest group (min keeps the first of equal keys)
    spills, group, k2, ptx2, res2, need2, notes2 = min(results, key=lambda r: r[0])
    if spills >= before:
        return k, ptx, res, need, [*notes, f"assume-relax-apply (ptxas {arch}): {before} B per thread still spill "
                                           f"with all {most} trips' loads in flight; fewer did not spill less "
                                           f"({'; '.join(tried)}): the kernel loads every trip at once"]
    return k2, ptx2, res2, need2, [*notes2, (
        f"assume-relax-apply (ptxas {arch}): with all {most} trips of a row lane loaded at once the code spilled "
        f"{before} B per thread at the {res.max_registers}-register cap; fewer trips' loads in flight: "
        f"{'; '.join(tried)}. The row stages load {group} trip(s) at a time (load_trips={group}): "
        f"{res2.registers} registers, {f'{res2.spills} B spilled' if res2.spills else 'no spill'}")]


def _replan(plan: Plan, checked: Plan, stuck: list, arch: str, show, disassemble: bool,
            count_instructions: bool = True) -> Plan:
    """The paper's fallback when relaxing is not enough: plan again assuming the registers the code needs.

    A cooperative kernel whose one-wave grid already fills the GPU at the assumed registers cannot take
    more registers without breaking its grid barrier; assuming ptxas's count from the start gives the
    planner fewer resident blocks per SM, so it packs more tasks into each block (a smaller grid) and
    the kernel can have the registers.  The re-plan is compiled and checked like any plan and kept if
    it spills less than ``checked``; either way the returned plan's notes say what was tried."""
    from astitch_sim.compiler import compile as compile_plan

    assumed = plan.options.get("assumed_registers", 32)
    gpu = plan.gpu
    # what the code took uncapped (registers are allocated 8 per thread at a time); capped lower it often fits
    # anyway, so first try the most a block of the plan's size may have, then the full count (smaller blocks)
    full = min(gpu.max_registers_per_thread, -(-max(need for _, _, need in stuck) // 8) * 8)
    block = max(k.block for k in checked.kernels if k.cooperative)
    same_block = gpu.registers_per_sm // block // 8 * 8
    tries = sorted({r for r in (min(full, same_block), full) if r > assumed})
    what = ", ".join(f"{name} ({spills} B per thread)" for name, spills, _ in stuck)
    before = best = sum(spills for _, spills, _ in stuck)
    kept = None
    for regs in tries:
        again = apply_compiler(compile_plan(plan.graph, "astitch", gpu, **{**plan.options, "assumed_registers": regs}),
                               arch, show, disassemble, replan=False, count_instructions=count_instructions)
        after = sum(k.machine.spills for k in again.kernels if k.machine is not None and k.cooperative)
        if after < best:
            best, kept = after, (regs, again)
        if after == 0:
            break
    if kept is None:
        return checked.with_notes(f"assume-relax-apply: re-planning at {' and '.join(map(str, tries))} assumed "
                                  f"registers did not spill less than {before} B per thread; the plan keeps its grids")
    regs, again = kept
    return again.with_notes(f"assume-relax-apply re-planned (ptxas {arch}): at {assumed} assumed registers {what} "
                            f"still spilled, their one-wave grids leaving no room to relax; planned again assuming "
                            f"{regs} registers per thread, cooperative kernels spill {best} B per thread")


def _relax(gpu, k, compile_at, capped: MachineResources, assumed: int, arch: str) -> tuple:
    """The kernel spilled at the assumed cap: raise the cap to what the code needs, if the grid allows.
    Returns (ptxas's result at the cap applied, the registers the code needs, the kernel's note saying so)."""
    free = compile_at(gpu.max_registers_per_thread)
    need = max(free.registers, assumed + 1)
    relaxed = compile_at(need)
    if relaxed.registers < need and not relaxed.spills:
        # ptxas fitted the code in fewer registers under this cap than it took uncapped: apply that tighter cap
        # (the plan's cap is what occupancy is checked with: 1024 threads x 74 would not fit, x 64 does)
        tighter = compile_at(relaxed.registers)
        if not tighter.spills:
            need, relaxed = relaxed.registers, tighter
    ok, wave = _fits(gpu, k, relaxed)
    before = gpu.blocks_per_wave(k.block, capped.shared_total, assumed)
    if ok and not relaxed.spills:
        return relaxed, need, (f"assume-relax-apply (ptxas {arch}): assumed {assumed} registers, the code spilled "
                               f"{capped.spills} B per thread there; needs {relaxed.registers}: cap relaxed to {need} "
                               f"({before} -> {wave} blocks per wave" +
                               (f", the cooperative grid of {k.grid} still fits)" if k.cooperative else ")"))
    # a cooperative grid limits the relaxation: the largest cap whose occupancy still holds the grid.  ptxas
    # never uses more registers than the cap, and fewer registers never lower occupancy, so a cap that fits
    # with ``registers = cap`` fits whatever ptxas then uses: find it by arithmetic, compile once
    best = capped
    for cap in range(need - 1, assumed, -1):
        if _fits(gpu, k, replace(capped, registers=cap))[0]:
            trial = compile_at(cap)
            if _fits(gpu, k, trial)[0]:
                best = trial
            break
    if _fits(gpu, k, replace(capped, registers=need))[1] == 0:
        why = (f"a block of {k.block} threads cannot hold {need} registers per thread on one SM (the plan's block "
               f"size is fixed; a smaller block would need a re-plan)")
    else:
        why = f"a cap above {best.max_registers} would leave fewer than the {k.grid} blocks of the cooperative grid resident"
    head = f"assume-relax-apply (ptxas {arch}): assumed {assumed} registers, the code needs {need} uncapped; {why}"
    if not best.spills:         # under the lower cap ptxas fitted the code after all
        return best, need, (f"{head}, so the cap relaxed to {best.max_registers} only, where the code does not spill "
                            f"({best.registers} registers)")
    return best, need, f"{head}, so the cap is {best.max_registers} and {best.spills} B per thread still spill"
