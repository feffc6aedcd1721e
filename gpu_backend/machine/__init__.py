"""Machine code and NVIDIA's toolchain: PTX and SASS of every kernel (machine_code, toolchain), what ptxas
reports written back into the plan (apply: ``apply_compiler``), the SASS profile (sass_profile), Numba's type
check without a GPU (typecheck), and the command-line tools built on them (resource_check, mix_vs_model).

May import: gpu_backend's ``launch/``, ``codegen/``, ``numba_compat.py``; astitch_sim's ``ir/``, ``plan/``,
``hardware/``, ``errors.py`` (what readers may) and, for its command-line tools, the public API (``import
astitch_sim``, ``compiler.py``), ``frontends/`` and ``simt/``.
"""
