"""astitch-sim: the AStitch compiler (ASPLOS'22), a SIMT model to run its plans, and the tools to see them.

Public API (see DESIGN.md)::

    import astitch_sim as asim
    g = asim.workload("layernorm")            # or asim.from_hlo(text)
    outs = asim.reference(g, inputs)          # numpy truth
    plan = asim.compile(g, strategy="astitch", gpu="H100")
    res = asim.simulate(plan, inputs)
"""
from .errors import AStitchError
from .graph import Graph, Node
from .ops import OPS
from .reference import reference, random_inputs

__all__ = ["AStitchError", "Graph", "Node", "OPS", "reference", "random_inputs"]
__version__ = "0.1.0"
