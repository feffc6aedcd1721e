"""Fit the SIMT cost model to GPU measurements, and check how well it predicts them.

    python -m benchmarks.calibrate benchmarks/results/<dir>/results.json [--max-elements N] [--params a,b,...]

Reads a ``results.json`` written by ``benchmarks.gpu_bench`` on a real GPU and writes,
beside it:

``calibration.json``  the fitted constants for the GPU preset the plans were
                      compiled for, the data they were fitted on, and how well
                      each parameter is pinned down by that data;
``crosscheck.md``     per (workload, shape, strategy): measured GPU time, the
                      model's prediction with the constants now in
                      ``astitch_sim/simt/cost.py`` and with the fitted ones;
                      Spearman rank correlation, median absolute relative
                      error, how often the model picks the GPU's fastest
                      strategy -- against the targets (Spearman >= 0.9, median
                      error <= 25%);
``crosscheck.png``    predicted vs measured, log-log (matplotlib, if installed).

It prints the exact snippet to paste into ``COST_CONSTANTS`` in
``astitch_sim/simt/cost.py`` (it never edits that file itself).

How the fit works
-----------------
1. For every plan that ran (one per workload, shape and strategy), the SIMT
   model's counters (bytes, sectors, flops, barriers ... per kernel and stage:
   :mod:`astitch_sim.simt.stats`) are obtained by ``asim.simulate`` of the same
   plan.  Counters do not depend on the cost constants, so this is done once.
2. The cost model (:func:`astitch_sim.simt.cost.predict_kernel`, the real one,
   not a copy) turns counters into microseconds for a trial set of constants
   (swapped into ``COST_CONSTANTS[gpu]`` for the duration of the call).
3. ``scipy.optimize.least_squares`` minimises the *log* ratio predicted /
   measured over every kernel that was timed (relative error: a 5 us kernel
   counts as much as a 5 ms one), the parameters in log space within bounds.

What is measured: the per-kernel GPU time between CUDA events, kernels queued
back to back behind a sleeping kernel (see ``benchmarks.gpu_bench``), so the host's
launch cost is *not* in it: ``kernel_launch_us`` fits the GPU-side cost of one
kernel in a stream (launch latency + drain), not Python's dispatch.  The host
side is reported separately (end-to-end minus GPU time, per kernel).

Big shapes (``--max-elements``)
-------------------------------
Simulating a 262M-element plan takes a while.  A case whose largest tensor has
more than ``--max-elements`` elements is simulated at a *scaled* shape: its
first shape keyword (rows / size / n) divided until it fits.  The counters are
then extrapolated to the measured shape, kernel by kernel and stage by stage,
provided the scaled plan has the same structure (kernels, stages, mapping kinds,
barriers; else the factor is halved until it does):

* elements, bytes, sectors, requests, shared-memory traffic, bank conflicts,
  register reuse and flops scale with the stage's domain size (exact for
  row-wise work: every row does the same);
* block barriers and atomics scale with the grid (one per block);
* grid barriers stay (one per barrier point);
* memset bytes scale with the kernel's output bytes.

The grid, block, shared memory and registers are the full plan's, so residency,
waves and the tail effect are the measured shape's own.  Extrapolated rows are
marked in ``crosscheck.md``.  ``--max-elements 0`` simulates everything at full
size.

The parts, one idea each: common (targets, parameters, log), stats, model (the cost model with trial
constants), fit, counters (simulated, scaled and extrapolated), crosscheck_report, synthetic, run (``calibrate``
and the command line).  Every public name is re-exported here: ``from benchmarks import calibrate as C``.
"""
from __future__ import annotations

from .common import DEFAULT_PARAMS, PARAM_BOUNDS, TARGET_MEDIAN_ERROR, TARGET_SPEARMAN, log  # noqa: F401
from .stats import median_abs_rel_error, ranks, relative_errors, same_fastest, spearman  # noqa: F401
from .model import Sample, current_constants, override_constants, predict_all, predict_sample  # noqa: F401
from .fit import Fit, fit_constants, sample_points  # noqa: F401
from .counters import counters_for, extrapolate_stats, samples_from_results, samples_from_sweeps, simulate_stats  # noqa: F401
from .crosscheck_report import crosscheck, format_value, leave_one_out, plot_crosscheck, snippet, summary_lines, verdict, write_crosscheck_md  # noqa: F401
from .synthetic import SYNTHETIC_BANNER, make_synthetic_results  # noqa: F401
from .run import calibrate, main  # noqa: F401
