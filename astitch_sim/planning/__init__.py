"""Planning: the strategies (strategies/) and the kernel builder they share (kernel_builder) -- the one
place where decisions are made; each decision is written into the Plan.

May import (of astitch_sim/): ``ir/``, ``passes/``, ``plan/``, ``hardware/``, ``simt/`` (the cost model prices
candidates; never-behind-XLA compares predicted times), ``frontends/`` (never-behind draws a catalog
workload's inputs) and ``errors.py``.  Imported only by ``compiler.py`` (``compile``) and the command line.
"""
