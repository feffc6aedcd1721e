"""Launch and run: compile the generated module, allocate and upload, launch every kernel in plan order,
copy the outputs back (plans: ``run``, ``prepare``, ``PreparedPlan``), and the cooperative launch of grid
barriers under Numba's CUDA simulator (cudasim).

May import: gpu_backend's ``codegen/`` and ``numba_compat.py``; astitch_sim's ``ir/``, ``plan/``, ``errors.py``.
"""
