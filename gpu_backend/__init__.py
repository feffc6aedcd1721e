"""gpu_backend: run astitch-sim Plans as real Numba-CUDA kernels (on a GPU, or in Numba's CUDA simulator).

Usage::

    import os; os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")   # no GPU: before numba.cuda is imported
    import astitch_sim as asim, gpu_backend
    g = asim.workload("layernorm", rows=4, cols=32)
    plan = asim.compile(g, "astitch", "H100")
    print(gpu_backend.generate_source(plan))        # the kernels, readable Python
    outs = gpu_backend.run(plan, asim.workloads.workload_inputs(g))
    ref = asim.reference(g, asim.workloads.workload_inputs(g))

    prepared = gpu_backend.prepare(plan, asim.workloads.workload_inputs(g))   # allocate + upload once
    for _ in range(10):
        prepared.launch()                            # all kernels, plan order; no copies, no sync
    outs = prepared.outputs()                        # wait, copy back (graph output order)

``generate_source(plan)`` writes one ``@cuda.jit`` kernel per kernel of the
plan, following the plan exactly (see :mod:`gpu_backend.codegen.generate` for how each
plan decision becomes code).  ``run(plan, inputs)`` validates the inputs,
allocates device buffers (inputs, array constants, outputs, Global scratch,
split-reduction result buffers pre-filled with the reduce's init value),
launches the kernels in plan order with each kernel's ``(grid, block)`` --
cooperatively when it has a grid barrier, and only if the grid fits the blocks
the device keeps resident (else :class:`~astitch_sim.AStitchError`) -- and
returns the outputs in graph output order.

``run`` is three steps, public for whoever launches a plan many times (timing it:
``python -m benchmarks.gpu_bench``): ``prepared = prepare(plan, inputs)`` does everything
up to the launches, once (a :class:`~gpu_backend.launch.plans.PreparedPlan`);
``prepared.launch()`` enqueues every kernel in plan order on those buffers --
first copying each split reduction's result buffer back to the init value, on the
device, so a second launch computes the same as the first -- with no host copies
and no synchronisation (``launch(after_kernel=f)`` calls ``f(i)`` after enqueuing
kernel ``i``, e.g. to record a CUDA event; ``launch_kernel(i)`` enqueues one);
``prepared.outputs()`` waits and copies the outputs back; ``prepared.release()``
drops the buffers.

Compiled kernels are cached per plan (the hash of ``plan.to_json()``); the
generated module is written to ``$ASTITCH_GPU_CACHE`` (default
``<tmp>/astitch_gpu_backend``) so tracebacks show its lines.

Simulator vs GPU -- what differs when ``NUMBA_ENABLE_CUDASIM=1`` (the kernels are the same source):

1. **Grid barriers.**  Numba's simulator runs blocks one at a time and turns
   ``this_grid().sync()`` into a block barrier (right only for one block).
   :mod:`gpu_backend.launch.cudasim` launches a cooperative kernel itself: every thread of
   every block at once, each block with its own shared memory, ``this_grid().sync()``
   a barrier over all of them.  Non-cooperative kernels run block by block, as in
   Numba's simulator.  Barriers are condition variables, not Numba's polling loop.
2. **Co-residency limit.**  A cooperative launch is allowed up to the plan's GPU
   preset ``blocks_per_wave(block, shared, registers)`` and at most
   ``cudasim.MAX_CONCURRENT_THREADS`` (16384) simulated threads; on a GPU the limit
   is Numba's ``max_cooperative_grid_blocks`` for the compiled kernel (its real
   register count).  Either way a grid that does not fit is an AStitchError, never a hang.
3. **Scheduling and memory model.**  Threads are Python threads interleaved by the
   interpreter: no warps, no lock-step, every store visible at once.  A kernel whose
   code names no barrier, shuffle or grid group runs its threads one after another in
   one Python thread instead (``cudasim.meets_barrier``): one of the orders the
   interleaving allows, without starting a thread per CUDA thread.  A missing
   barrier may or may not show up as a wrong result (one did: see codegen's
   reduction-scratch layout); the ``gpu`` suite runs ``compute-sanitizer`` racecheck.
   A thread that returns while others wait at a barrier is an error here
   (``cudasim.BarrierError``); on a GPU that is undefined behaviour.
4. **math functions.**  The kernels call ``math.exp`` etc.; on a GPU those are
   libdevice's float32 routines (``expf`` within 2 ulp), in the simulator an IEEE
   twin of Python's ``math`` (``prelude.math``: numpy in float64, rounded to the
   node's type; ``exp(1000)`` gives ``inf`` instead of raising).
5. **Float arithmetic.**  The simulator does every float32 op in numpy float32
   (IEEE, round to nearest).  On a GPU, NVVM may contract ``a * b + c`` into a fused
   multiply-add (one rounding instead of two): last-bit differences.
6. **Atomics.**  Simulated with a lock; on a GPU float atomics land in any order,
   so a split reduction's last bits can change from run to run (in the simulator too,
   with the thread schedule).
7. **Out-of-bounds indexing.**  numpy raises ``IndexError`` past the end but wraps
   negative indices; a GPU reads or writes out of bounds (``compute-sanitizer
   memcheck`` catches it).  Uninitialised device memory is ``np.empty`` garbage in both.
8. **Registers.**  On a GPU each kernel is compiled with ``max_registers`` = the
   plan's ``registers_per_thread`` (``prelude.jit``; the "apply" of
   assume-relax-apply: spills rather than losing the occupancy the plan counted on);
   the simulator has no register file and drops the cap.
9. **Speed.**  About 0.1 ms per simulated thread; a barrier costs a wake-up of every
   thread.  Use tiny shapes (the astitch compiler picks small blocks for them).

Nothing else differs: no warp shuffles, no dynamic shared memory, no
``syncthreads_count`` -- the generated code uses none of what the simulator lacks.

Checking Numba's compiler without a GPU: ``python -m gpu_backend.machine.typecheck
WORKLOAD[:k=v,...]|FILE.hlo|PLAN.json`` runs Numba-CUDA's type inference and
lowering on every generated kernel for compute capability 9.0 (no driver needed;
see :mod:`gpu_backend.machine.typecheck`), which the simulator cannot: it runs Python.

Formats: float16 is computed in float32 and rounded after every op; bfloat16
likewise, and stored in device memory as its 16 raw bits; pred is ``bool``.
Matrix products (library kernels) run a naive batched matmul (``codegen/library``).

Folders: ``codegen/`` (Plan -> source; ``codegen/library/`` the library kernels), ``launch/`` (compile,
allocate, launch, copy back), ``machine/`` (PTX/SASS, ptxas, the toolchain tools); at the top the runtime
the generated modules import (``prelude``, ``intrinsics``, ``numba_compat``).  May import: all of them
(this file is the public API: ``run``, ``prepare``, ``generate_source``, ``apply_compiler``).

Tests: ``pytest tests/gpu_backend/test_gpu_backend.py`` runs everything in the simulator
(``tests/conftest.py`` sets ``NUMBA_ENABLE_CUDASIM=1`` when no GPU is found).
On a machine with a CUDA GPU, ``pytest -m gpu`` runs ``tests/gpu_backend/test_gpu_backend_device.py``:
every catalog workload at its real size under every strategy on the device
against the reference, plus ``compute-sanitizer`` memcheck and racecheck of the
generated kernels.  ``NUMBA_ENABLE_CUDASIM=1 pytest tests/gpu_backend/test_gpu_backend.py``
forces the simulator suite on a GPU machine.
"""
from __future__ import annotations

from . import numba_compat  # noqa: F401  (first: restores NumPy aliases numba-cuda looks up when compiling)
from .codegen.generate import GeneratedModule, KernelSpec, ParamSpec, generate_source
from .launch.plans import PreparedPlan, compile_plan, prepare, run, simulator

__all__ = ["generate_source", "run", "prepare", "PreparedPlan", "compile_plan", "simulator", "GeneratedModule",
           "KernelSpec", "ParamSpec"]

from .machine.apply import apply_compiler  # noqa: E402  (after the backend's own names: it builds on them)

__all__ += ["apply_compiler"]
