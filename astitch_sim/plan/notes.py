"""The prefixes of the plan-level notes a strategy writes and ``print(plan)`` shows.

A strategy explains a plan-wide decision in ``plan.notes`` (never-behind kept XLA's
kernels here, the xla strategy followed these fusion rules, inductor split this
reduction); the plan's printer picks those notes out by their prefix.  The prefixes
live here, with the Plan, because the printer is part of the Plan and must not import
the strategies that write them: the strategies import their prefix from here.
(Graph passes keep their own prefix: the printer may import a pass, which sits below
the Plan.)
"""
from __future__ import annotations

#: notes of AStitch's never-behind-XLA step (``strategies/never_behind.py``)
NEVER_BEHIND = "never behind XLA"
#: plan-level notes of the inductor strategy (``strategies/inductor_rules.py``)
INDUCTOR = "inductor"
#: the note naming the fusion rules an xla plan followed (``strategies/xla_rules.py``)
XLA_RULES = "xla: fusion rules"
