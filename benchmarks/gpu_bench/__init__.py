"""Run the benchmark suite on a GPU: every strategy's plan through ``gpu_backend``, plus real baselines.

    python3 -m benchmarks.gpu_bench --out benchmarks/results/<dir> [--quick] [--gpu-preset H100]
    python3 -m benchmarks.gpu_bench --simulator --out /tmp/sim      # no GPU: Numba's CUDA simulator, tiny shapes

(from the repository root: ``astitch_sim``, ``gpu_backend`` and ``benchmarks`` are imported from the checkout).
For every case of :mod:`benchmarks.suite` (workload + shape):

1. inputs from ``workload_inputs`` (fixed seed) and the numpy reference ``asim.reference``;
2. each strategy's plan (``asim.compile(graph, strategy, gpu=<preset>)``) compiled by
   ``gpu_backend`` (kernels cached per plan), run once and **validated** against the
   reference (relative L2 error per output, NaN check), then timed;
3. the baselines, when importable: ``jax.jit`` of the same formula in ``jax.numpy``,
   PyTorch eager, PyTorch's own fused op where it has one, and ``torch.compile``
   (:mod:`benchmarks.baselines`), validated the same way, timed on the same input values.

How time is measured (read this before quoting a number)
--------------------------------------------------------
*GPU time* (``gpu_us``): CUDA events on the stream, recorded before the first kernel and
after each kernel; median of ``--reps`` (>= 20) repetitions after warm-up.  Before every
repetition the L2 is flushed (a kernel writes a buffer several times the L2 size) and a
*sleeping kernel* (``nanosleep`` loop, sized from the measured host enqueue time) holds the
stream while the host queues the plan's kernels behind it, so the kernels run back to back
and the events measure the GPU, not Python's dispatch.  A repetition in which the host
took longer to queue than the sleep lasted is dropped and the sleep lengthened.
Per-kernel times are the differences of consecutive events.  PyTorch: the same, with
``torch.cuda.Event`` and ``torch.cuda._sleep``.  JAX has no event API: its GPU time is
``(T[flush + f] - T[flush]) / N`` over N calls queued without waiting ("pipelined").

*End-to-end time* (``e2e_us``): host wall clock from the first launch call to
``synchronize()`` returning, L2 flushed before; launch overhead (Numba's dispatch,
PyTorch's, JAX's) included.  Median of the same number of repetitions.

*Bandwidth* = minimum bytes (every input read once + every output written once) / GPU
time, and its share of the device-to-device copy bandwidth measured in the same run
(``cudaMemcpyDtoD`` of 1 GiB, bytes read + written).

``--simulator`` (automatic when no GPU is found): Numba's CUDA simulator at the suite's
tiny shapes; times are host wall clock of the simulator and every output says
"CUDA simulator, not GPU timing".  It checks the pipeline and the validation, nothing else.

Outputs in ``--out``: ``results.json`` (everything, with provenance), ``results.md``
(a table per case), ``plot.png`` (matplotlib, if installed), written after every case so
an interrupted run keeps what it measured.  Progress goes to stderr.

The parts, one idea each: common (format, labels, log), mode (GPU or simulator), provenance, clock (flush,
sleep, events), plans (our plans through gpu_backend), check (validation), baseline_runs (JAX and PyTorch),
case (one workload and shape), report (results.md, plot.png, results.json), run (the suite, the command line).
Every public name is re-exported here, so ``from benchmarks import gpu_bench as gb; gb.run_suite(...)`` works.
"""
from __future__ import annotations

import os

# JAX must not grab 75% of the GPU before numba and torch have their share
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# small grids (Figure 7, few long rows) are the point here, not a mistake to warn about on every launch
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")


from .common import FORMAT, REL_TOL, ROOT, SIM_NOTE, log  # noqa: E402, F401
from .mode import choose_mode, gpu_present  # noqa: E402, F401
from .provenance import detect_preset, provenance, source_digest  # noqa: E402, F401
from .clock import Clock  # noqa: E402, F401
from .plans import PlanRunner, make_plan_runner  # noqa: E402, F401
from .check import compare  # noqa: E402, F401
from .baseline_runs import check_run, run_baselines, time_host, time_torch  # noqa: E402, F401
from .case import derive, run_case, run_plan  # noqa: E402, F401
from .report import fmt_value, summarize, write_markdown, write_outputs, write_plot  # noqa: E402, F401
from .run import BASELINES, main, merge_results, print_table, run_suite  # noqa: E402, F401
