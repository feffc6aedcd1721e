"""What NVIDIA's compiler made of one kernel: the numbers a plan's launch configuration rests on.

A strategy *assumes* a register count per thread when it sizes a kernel's grid
(AStitch's "assume-relax-apply"): registers decide how many blocks stay resident
on an SM, so a cooperative kernel's one-wave grid, and so its grid barriers,
rest on that assumption.  The compiler core cannot know the real number (it
would need NVIDIA's ``ptxas``); ``gpu_backend.apply_compiler(plan)`` compiles
every kernel to machine code and writes what ``ptxas`` reports here, one
:class:`MachineResources` per kernel (``Kernel.machine``; ``None`` means the
plan's registers are still the strategy's estimate).

The fields are ``ptxas -v``'s words:

* ``registers``: registers per thread of the final code (after linking CUDA's
  device runtime for a grid barrier);
* ``spill_stores`` / ``spill_loads``: bytes per thread moved to and from local
  memory because ``registers`` was capped below what the code wanted (each
  spill is a global-memory round trip the plan did not count);
* ``stack``: bytes of stack frame per thread (a call to the grid-sync runtime
  needs a small one; not a spill);
* ``shared_static``: the kernel's own static shared memory, bytes per block (the
  plan's ``shared_bytes``);
* ``shared_runtime``: shared memory the linked device runtime adds per block
  (Hopper's grid-sync runtime reserves some); occupancy counts both;
* ``max_registers``: the cap it was compiled with (``-maxrregcount``, Numba's
  ``max_registers``);
* ``arch``, ``tool``: the target (``sm_90``) and the compiler's version;
* ``sass_instructions`` / ``sass_loop_instructions``: SASS instructions of the kernel's main body and,
  of those, the ones inside loops the compiler kept (``gpu_backend.machine.sass_profile``: nvdisasm's
  listing of the code at the applied cap; ``None`` where no disassembler reads the target).  The cost
  model's instruction-issue term reads them through :func:`thread_instructions`;
* ``sass_loop_trips``: trips one thread makes through those loops, from the global accesses the
  generated source executes per thread against those of the SASS outside and inside the loops
  (``gpu_backend.machine.source_counts``: ptxas unrolls the generated loops, so a trip is several
  elements); ``None`` where the loops hold no access to count by.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..errors import AStitchError


@dataclass(frozen=True)
class MachineResources:
    arch: str
    tool: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    shared_static: int
    shared_runtime: int
    max_registers: int
    sass_instructions: int | None = None
    sass_loop_instructions: int = 0
    sass_loop_trips: float | None = None

    @property
    def spills(self) -> int:
        """Bytes per thread spilled to local memory (stores + loads)."""
        return self.spill_stores + self.spill_loads

    @property
    def shared_total(self) -> int:
        """Shared memory one block occupies: the kernel's own plus the device runtime's."""
        return self.shared_static + self.shared_runtime

    def describe(self) -> str:
        """One line, the way ``print(plan)`` shows it: ``ptxas sm_90: 36 registers, 0 spills``."""
        words = [f"{self.registers} registers", f"{self.spills} B spilled" if self.spills else "0 spills"]
        if self.stack:
            words.append(f"{self.stack} B stack")
        words.append(f"{self.shared_static} B shared" +
                     (f" (+{self.shared_runtime} B device runtime)" if self.shared_runtime else ""))
        if self.sass_instructions is not None:
            trips = f", {self.sass_loop_trips:.4g} trips" if self.sass_loop_trips is not None else ""
            words.append(f"{self.sass_instructions} SASS instructions" +
                         (f" ({self.sass_loop_instructions} in loops{trips})" if self.sass_loop_instructions else ""))
        return f"ptxas {self.arch}: " + ", ".join(words) + f"  (cap {self.max_registers}; {self.tool})"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d) -> "MachineResources":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known) if isinstance(d, dict) else []
        if unknown:
            raise AStitchError(f"kernel 'machine' entry has field(s) {unknown} this version of astitch-sim does not "
                               f"know: the plan (or a cached ptxas record) was written by another version; compile "
                               f"the plan again with this one, or install the version that wrote it")
        try:
            return cls(**d)
        except TypeError as e:
            raise AStitchError(f"kernel 'machine' entry is malformed ({e}); write plans with plan.to_json()") from None


def resident_resources(kernel) -> tuple:
    """``(shared bytes per block, registers per thread)`` that decide how many blocks of ``kernel`` stay
    resident: what ptxas reports when the plan has it, else the plan's own numbers.

    Occupancy follows the registers the code *uses*, not the cap it was compiled under: ptxas fits
    the Adam step's loop kernel in 32 registers under xla's cap of 36 (its estimate), and the SM holds
    blocks by the 32.  The SIMT model (``KernelStats``) and the grid-barrier checks read this one rule,
    so a kernel gets the same occupancy whichever strategy set its cap.
    """
    m = kernel.machine
    if m is None:
        return kernel.shared_bytes, kernel.registers_per_thread
    return m.shared_total, max(m.registers, 1)


def blocks_per_wave(gpu, kernel) -> int:
    """Blocks of ``kernel`` the GPU keeps resident at once: with ptxas's numbers when the plan has them.

    The real registers and the real shared memory (the kernel's own plus what the
    linked device runtime adds) decide occupancy; without them, the plan's estimate.
    """
    return gpu.blocks_per_wave(kernel.block, *resident_resources(kernel))


def loop_trips(mapping) -> int:
    """Trips of a stage's kept loop each thread makes: its elements per thread over the elements one trip
    handles (``vector x unroll`` of a flat mapping, loads issued together; one element otherwise)."""
    per_trip = max(1, mapping.vector) * mapping.unroll if mapping.kind == "flat" else max(1, mapping.vector)
    return max(1, -(-mapping.elements_per_thread // per_trip))


def thread_instructions(kernel) -> float | None:
    """SASS instructions one thread of ``kernel`` issues, from the counts ptxas's code gave
    (``kernel.machine``); ``None`` when the plan has no count (no ``apply_compiler``, or no disassembler).

    Straight-line code runs once per thread (an upper bound: predicated-off and skipped epilogue
    instructions are counted); a loop the compiler kept runs once per trip: the trips counted by the
    accesses (``sass_loop_trips``), else the most any stage of the kernel makes (:func:`loop_trips`, one
    per element, as if ptxas unrolled nothing): an estimate, as ``benchmarks.sass_budget`` says."""
    m = kernel.machine if kernel is not None else None
    if m is None or m.sass_instructions is None:
        return None
    trips = m.sass_loop_trips if m.sass_loop_trips is not None else \
        max((loop_trips(s.mapping) for s in kernel.stages), default=1)
    return float(m.sass_instructions - m.sass_loop_instructions + m.sass_loop_instructions * trips)
