"""Benchmarks: every number the README quotes comes from one of these commands, with provenance.

Run them from the repository root as modules (the checkout's ``astitch_sim``, ``gpu_backend`` and
``benchmarks`` are then importable, nothing to install); each one's ``--help`` says what it takes::

    python -m benchmarks.<name> [options]          # e.g. python -m benchmarks.simt_predictions --gpus H100

Results go to ``benchmarks/results/`` (``--out`` elsewhere) with the date, commit, versions, machine and
the command that made them.  The commands:

``gpu_session``        the GPU window's runbook: ``--plan`` fits the steps (probe, copy bandwidth, the suite against
                       jax.jit/torch.compile, launch sweeps, correctness, sanitizer) to a window of device time,
                       ``--part K/N`` per device command, ``--render`` here (calibration, cross-check); ``--simulator``
                       dry-runs it all
``launch_sweep``       one suite case's astitch plan at several block-size caps, timed beside the model's predictions
``gpu_bench``          the suite on a real GPU (Numba's CUDA simulator at tiny shapes without one): validate, time
``calibrate``          fit the cost model's constants to a ``gpu_bench`` results.json, cross-check its predictions
``simt_predictions``   the SIMT model's predictions (no GPU) on the paper's shapes and the catalog
``model_predictions``  the same for real model code (``tests/fixtures/models``: the flax GPT, the idioms)
``never_behind``       the raw stitch plan and the final astitch plan against xla, every case and fixture
``fusionstitching``    search (fusionstitching) against rules (unfused, xla, tvm, astitch) on the catalog
``before_after``       plans at an older commit against the working tree: kernels, bytes, predicted time
``simt_speed``         how fast the SIMT model is against the numpy reference and Numba's CUDA simulator
``ptxas_catalog``      every catalog plan through NVIDIA's ptxas (no GPU): registers, spills, shared memory
``ptxas_vs_model``     the machine code's instruction mix (nvdisasm) against the SIMT model's accounting
``sass_budget``        every generated kernel's SASS per element (no GPU) and its issue-rate bound vs copy bandwidth
``applied_plans``      (a helper run in a child) gpu_backend.apply_compiler on plans, JSON in and out
``image_like``         a command run with the packages the GPU image lacks hidden (``pytest -m gpu`` collects?)
``unit_speed``         the speed claims unit tests used to time: a 750000-block timeline, paper-size graph builds

and modules they share: ``suite`` (the GPU suite's workloads and shapes), ``baselines`` (the same
workloads as array code for ``jax.jit`` and PyTorch), ``validation`` (outputs against the reference, once
per case), ``jax_timing`` (pipelined JAX timing with its spread), ``headline`` (astitch against jax.jit and
torch.compile), ``sanitizer`` (compute-sanitizer on sample kernels), ``gpu_probe`` (what the GPU machine
has), ``crosscheck`` (predicted against measured, a third held out).  ``benchmarks/README.md`` says how to run the GPU
suite on a lent machine and how to read the results.
"""

from gpu_backend import numba_compat as _numba_compat  # noqa: E402,F401  (restores NumPy aliases numba-cuda looks up)
