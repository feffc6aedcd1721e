"""Machine code and NVIDIA's toolchain: PTX and SASS of every kernel (machine_code, toolchain), what ptxas
reports written back into the plan (apply: ``apply_compiler``), the SASS profile (sass_profile), Numba's type
check without a GPU (typecheck), and the command-line tools built on them (resource_check, mix_vs_model).

May import: ``gpu_backend.launch.plans``, ``gpu_backend.codegen.generate``, ``gpu_backend.numba_compat``; from astitch_sim
what readers may (``ir``, ``plan``, ``hardware``, ``errors``) and, for its command-line tools, the public API
(``astitch_sim``, ``astitch_sim.compiler``), ``astitch_sim.frontends`` and ``astitch_sim.simt``.
"""
