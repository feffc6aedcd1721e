"""gpu_backend: run astitch-sim Plans as real Numba-CUDA kernels (on a GPU, or in Numba's CUDA simulator).

Usage::

    import os; os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")   # no GPU: before numba.cuda is imported
    import astitch_sim as asim, gpu_backend
    g = asim.workload("layernorm", rows=4, cols=32)
    plan = asim.compile(g, "astitch", "H100")
    print(gpu_backend.generate_source(plan))        # the kernels, readable Python
    outs = gpu_backend.run(plan, asim.workloads.workload_inputs(g))
    ref = asim.reference(g, asim.workloads.workload_inputs(g))

``generate_source(plan)`` writes one ``@cuda.jit`` kernel per kernel of the
plan, following the plan exactly (see :mod:`gpu_backend.codegen` for how each
plan decision becomes code).  ``run(plan, inputs)`` validates the inputs,
allocates device buffers (inputs, array constants, outputs, Global scratch,
split-reduction result buffers pre-filled with the reduce's init value),
launches the kernels in plan order with each kernel's ``(grid, block)`` --
cooperatively when it has a grid barrier, and only if the grid fits the blocks
the device keeps resident (else :class:`~astitch_sim.AStitchError`) -- and
returns the outputs in graph output order.  Compiled kernels are cached per
plan (the hash of ``plan.to_json()``); the generated module is written to
``$ASTITCH_GPU_CACHE`` (default ``<tmp>/astitch_gpu_backend``) so tracebacks
show its lines.

Simulator vs GPU -- what differs when ``NUMBA_ENABLE_CUDASIM=1``:

* **Grid barriers.**  Numba's simulator runs blocks one at a time and turns
  ``this_grid().sync()`` into a block barrier.  :mod:`gpu_backend.cudasim`
  launches cooperative kernels itself: every thread of every block at once,
  each block with its own shared memory, ``this_grid().sync()`` a barrier over
  all of them -- so the generated code is the code a GPU runs.  The
  co-residency limit is taken from the plan's GPU preset
  (``gpu.blocks_per_wave``), capped at ``cudasim.MAX_CONCURRENT_THREADS``
  threads; on a GPU it is Numba's ``max_cooperative_grid_blocks``.
* **Scheduling.**  Threads are Python threads, interleaved by the interpreter:
  no warps, no lock-step, no memory model subtleties (every store is visible
  at once).  A missing barrier may go unnoticed in the simulator; run
  ``compute-sanitizer --tool racecheck`` on a GPU (the ``gpu`` test suite does).
  Barrier divergence (a thread returning while others wait) is an error here.
* **Arithmetic.**  ``math`` functions of float32 values are computed in double
  and rounded (a GPU uses its float32 intrinsics: last-bit differences);
  float32 add/mul/div are numpy's, IEEE like the GPU's (no FMA contraction).
* **Speed.**  About a millisecond per simulated thread: use tiny shapes.
* **Warp shuffles / dynamic shared memory** are not used by the generated code
  at all, so nothing differs there.

Formats: float16 is computed in float32 and rounded after every op; bfloat16
likewise, and stored in device memory as its 16 raw bits; pred is ``bool``.
Matrix products (library kernels) run a naive batched matmul (``library``).

Tests: ``pytest tests/test_gpu_backend.py`` runs everything in the simulator
(``tests/conftest.py`` sets ``NUMBA_ENABLE_CUDASIM=1`` when no GPU is found).
On a machine with a CUDA GPU, ``pytest -m gpu`` runs ``tests/test_gpu_backend_device.py``:
every catalog workload at its real size under every strategy on the device
against the reference, plus ``compute-sanitizer`` memcheck and racecheck of the
generated kernels.  ``NUMBA_ENABLE_CUDASIM=1 pytest tests/test_gpu_backend.py``
forces the simulator suite on a GPU machine.
"""
from __future__ import annotations

from .codegen import GeneratedModule, KernelSpec, ParamSpec
from .launch import compile_plan, run, simulator


def generate_source(plan) -> str:
    """The Python source of the plan's Numba-CUDA kernels (one ``@cuda.jit`` function per kernel)."""
    from .codegen import ModuleWriter
    return ModuleWriter(plan).write().source


__all__ = ["generate_source", "run", "compile_plan", "simulator", "GeneratedModule", "KernelSpec", "ParamSpec"]
