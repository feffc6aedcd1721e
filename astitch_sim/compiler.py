"""``compile(graph, strategy, gpu)``: the one entry point to every strategy."""
from __future__ import annotations

from .errors import AStitchError
from .graph import Graph
from .hardware import gpu as get_gpu
from .zero_size import eliminate_zero_size

STRATEGIES = ("unfused", "xla", "tvm", "astitch")


def compile(graph: Graph, strategy: str = "astitch", gpu="H100"):
    """Plan ``graph`` with ``strategy`` (unfused | xla | tvm | astitch) for ``gpu`` (V100, A100, H100, H200).

    The returned Plan holds every decision; it is validated before it is returned.
    Values with no elements (a 0-length dimension) are removed first, as XLA does
    (``astitch_sim.zero_size``): then ``plan.graph`` is the rewritten graph, same
    parameters and output names, and no kernel iterates over an empty domain.
    """
    if not isinstance(graph, Graph):
        raise AStitchError(f"compile needs a Graph (from asim.from_hlo or asim.workload), got {type(graph).__name__}")
    graph.validate()
    hw = get_gpu(gpu)
    graph, zero_notes = eliminate_zero_size(graph)
    if strategy in ("unfused", "xla", "tvm"):
        from .strategies.fusion import partition_plan
        plan = partition_plan(graph, hw, strategy)
    elif strategy == "astitch":
        from .strategies.astitch import astitch_plan
        plan = astitch_plan(graph, hw)
    else:
        raise AStitchError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    plan.notes[:0] = zero_notes
    return plan.validate()
