"""Library kernels: the naive kernels that stand for a library call (matrix product, scatter, sort/top-k,
reduce-window), written into the same generated module (kernels: the dispatch and the matmul).

May import: the code generator's shared pieces (``gpu_backend.codegen.generate``: exprs, dtypes, source, specs) and
``astitch_sim.ir``, ``astitch_sim.plan.plan``, ``astitch_sim.errors``.
"""
