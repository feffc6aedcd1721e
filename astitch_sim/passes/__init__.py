"""Graph passes: rewrites that run before planning (zero_size, trivial_reduce, unit_dims) and the dependency analysis
the strategies and the plan validator read (analysis: edge classes, light/expensive ops, reduction kinds).

May import: ``ir/`` and ``errors.py`` (of astitch_sim/).
"""
