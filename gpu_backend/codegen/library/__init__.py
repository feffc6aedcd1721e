"""Library kernels: the naive kernels that stand for a library call (matrix product, scatter, sort/top-k,
reduce-window), written into the same generated module (kernels: the dispatch and the matmul).

May import: the code generator's shared pieces (gpu_backend/codegen/: exprs, dtypes, source, specs) and
astitch_sim's ``ir/``, ``plan/``, ``errors.py``.
"""
