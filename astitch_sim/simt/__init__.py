"""The SIMT model: runs a Plan block by block, thread by thread (vectorised), counting every access.

``simulate(plan, inputs, trace=False) -> SimResult`` (``executor.py``); the
pieces: ``geometry`` (where elements run), ``evaluate`` (index propagation),
``reduce`` (per thread, tree, split combine), ``memory`` (the counters and
their definitions), ``trace`` (per-thread traces, races, divergent barriers),
``stats`` (the counters' containers), ``cost`` and ``schedule`` (predicted time and the timeline), ``l2``.
Work the simulation would repeat is done once, each shortcut changing no counter, time or output bit
(the SIMT fingerprints hold them to it): ``kept_geometries`` (a geometry for every kernel of its mapping),
``count_memo`` (an access's counters once per geometry), ``periodic`` (rows packed to a warp counted one
period at a time), ``pairs`` (distinct block-element pairs counted without a sort), ``boxes`` (a masked load
inside its box only), ``recomputed`` (a value the plan recomputes, computed once).

A reader of the Plan: it follows the plan and decides nothing.  May import (of astitch_sim/): ``plan/``,
``ir/``, ``hardware/`` and ``errors.py`` -- never ``planning/``.
"""
from .executor import SimResult, simulate
from .stats import KernelStats, SimStats, StageStats
from .trace import BarrierDivergence, Race, Trace, TraceEvent

__all__ = ["simulate", "SimResult", "KernelStats", "SimStats", "StageStats", "Trace", "TraceEvent", "Race",
           "BarrierDivergence"]
