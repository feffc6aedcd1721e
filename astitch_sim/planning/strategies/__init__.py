"""The strategies (registry.py lists them); each turns a Graph into a Plan (see compiler.compile).

May import: what ``astitch_sim.planning`` may (its __init__ says), and ``planning.kernel_builder``.
"""
