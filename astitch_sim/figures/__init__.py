"""Pictures of plans, thread mappings, timelines, traces and counters (matplotlib).

Every function draws from the same objects the rest of the package uses -- a
:class:`~astitch_sim.plan.plan.Plan`, a :class:`~astitch_sim.plan.mapping.ThreadMapping`,
a :class:`~astitch_sim.simt.executor.SimResult` -- and returns a matplotlib
``Figure`` (shown inline in Jupyter; ``fig.savefig("x.png")`` to keep it).
matplotlib is imported only when a picture is drawn (``pip install
'astitch-sim[tutorials]'``); nothing here needs the graphviz ``dot`` program,
so the pictures work on a laptop, in CI and in Colab alike (``plan.to_dot()``
gives the Graphviz version where ``dot`` is installed).

May import (of astitch_sim/): ``plan/``, ``ir/``, ``hardware/``, ``simt/`` and ``errors.py`` (it draws what
a plan and a simulation say; it plans nothing).

=====================  =====================================================
``draw_plan``          the graph in kernel lanes: nodes coloured by stitch
                       scheme, barriers as lines, global round trips dashed
``draw_mapping``       a tensor coloured by the block that computes each
                       element (triton-viz style), one block's threads marked
``draw_timeline``      SM x time Gantt chart of a simulation: waves, launch
                       gaps, grid-barrier waits
``draw_accesses``      one stage of a trace: which thread reads what from
                       where (GPU-Puzzles style arrows)
``compare_bars``       one bar chart per metric, strategies side by side
``draw_breakdown``     the cost model's terms per kernel, stacked
``new_figure``         an empty Figure for your own plot (shown once in Jupyter)
=====================  =====================================================
"""
from .backend import new_figure
from .charts import STRATEGY_COLOURS, compare_bars, draw_breakdown
from .mapping_figure import draw_mapping
from .plan_figure import draw_plan, plan_layout
from .timeline_figure import draw_timeline
from .trace_figure import draw_accesses

__all__ = ["draw_plan", "plan_layout", "draw_mapping", "draw_timeline", "draw_accesses", "compare_bars",
           "draw_breakdown", "new_figure", "STRATEGY_COLOURS"]
