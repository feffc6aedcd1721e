"""Code generation: a Plan -> one Python module of ``@cuda.jit`` kernels (generate: ``generate_source``;
the module, kernel and stage writers; the emitters of values, elements, loops, reductions, slots and casts;
the library kernels in library/).

May import: astitch_sim's ``ir/``, ``plan/`` and ``errors.py`` (a reader of the Plan: it follows the plan and
decides nothing); nothing else of gpu_backend.
"""
