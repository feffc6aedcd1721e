"""The graph IR: what a program *is*, before any strategy looks at it.

``Graph`` and ``Node`` (graph), the op table (ops) with its shape and index rules, dtypes, reducers,
comparisons, the numpy reference interpreter (``reference``: the ground truth of every test), flat-index
arithmetic and Graphviz DOT of graphs (viz).

May import: ``errors.py`` only (paths relative to astitch_sim/).  Everything else builds on this package; it
builds on nothing.
"""
