"""Planning: the strategies (strategies/) and the kernel builder they share (kernel_builder) -- the one
place where decisions are made; each decision is written into the Plan.

May import: ``astitch_sim.ir``, ``astitch_sim.passes``, ``astitch_sim.plan.plan``, ``astitch_sim.hardware.gpus``,
``astitch_sim.simt`` (the cost model prices candidates; never-behind-XLA compares predicted times),
``astitch_sim.frontends`` (never-behind draws a catalog workload's inputs) and ``astitch_sim.errors``.
Imported only by ``astitch_sim.compiler`` (``compile``) and the command line.
"""
