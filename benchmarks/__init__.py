"""Benchmarks: every number the README quotes comes from one of these commands, with provenance.

Run them from the repository root as modules (the checkout's ``astitch_sim``, ``gpu_backend`` and
``benchmarks`` are then importable, nothing to install); each one's ``--help`` says what it takes::

    python -m benchmarks.<name> [options]          # e.g. python -m benchmarks.simt_predictions --gpus H100

Results go to ``benchmarks/results/`` (``--out`` elsewhere) with the date, commit, versions, machine and
the command that made them.  The commands:

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
``unit_speed``         the speed claims unit tests used to time: a 750000-block timeline, paper-size graph builds

and two modules they share: ``suite`` (the GPU suite's workloads and shapes) and ``baselines`` (the same
workloads as array code for ``jax.jit`` and PyTorch).  ``benchmarks/README.md`` says how to run the GPU
suite on a lent machine and how to read the results.
"""
