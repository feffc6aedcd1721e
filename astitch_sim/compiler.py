"""``compile(graph, strategy, gpu)``: the one entry point to every strategy."""
from __future__ import annotations

from .errors import AStitchError
from .graph import Graph
from .hardware import gpu as get_gpu

STRATEGIES = ("unfused", "xla", "tvm", "astitch")


def compile(graph: Graph, strategy: str = "astitch", gpu="H100"):
    """Plan ``graph`` with ``strategy`` (unfused | xla | tvm | astitch) for ``gpu`` (V100, A100, H100, H200).

    The returned Plan holds every decision; it is validated before it is returned.
    """
    if not isinstance(graph, Graph):
        raise AStitchError(f"compile needs a Graph (from asim.from_hlo or asim.workload), got {type(graph).__name__}")
    graph.validate()
    hw = get_gpu(gpu)
    if strategy in ("unfused", "xla", "tvm"):
        from .strategies.fusion import partition_plan
        plan = partition_plan(graph, hw, strategy)
    elif strategy == "astitch":
        from .strategies.astitch import astitch_plan
        plan = astitch_plan(graph, hw)
    else:
        raise AStitchError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    return plan.validate()
