"""Launch and run: compile the generated module, allocate and upload, launch every kernel in plan order,
copy the outputs back (plans: ``run``, ``prepare``, ``PreparedPlan``), and the cooperative launch of grid
barriers under Numba's CUDA simulator (cudasim).

May import: ``gpu_backend.codegen.generate``, ``gpu_backend.numba_compat``, ``astitch_sim.ir``, ``astitch_sim.plan.plan``,
``astitch_sim.errors``.
"""
