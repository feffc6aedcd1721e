"""astitch-sim: the AStitch compiler (ASPLOS'22), a SIMT model to run its plans, and the tools to see them.

Public API (see docs/architecture.md)::

    import astitch_sim as asim
    g = asim.workload("layernorm")            # or asim.from_hlo(text)
    outs = asim.reference(g, inputs)          # numpy truth
    plan = asim.compile(g, strategy="astitch", gpu="H100")
    res = asim.simulate(plan, inputs)
"""
from .errors import AStitchError
from .graph import Graph, Node
from .hardware import GPU, gpu
from .from_text import from_hlo, from_hlo_file
from .stablehlo import from_stablehlo
from .torch_import import from_torch, torch_inputs
from .mapping import ThreadMapping
from .ops import OPS
from .plan import Kernel, Plan, Stage, Value
from .vocabulary import Barrier, Combine, Scheme, Space
from .reference import random_inputs, reference
from .workloads import WORKLOADS, list_workloads, workload
from .compiler import STRATEGIES, compile
from .strategies.options import AStitchOptions
from .strategies.xla_options import XlaOptions
from .simt import SimResult, simulate
from .measured import gpu_measurements
from . import figures

__all__ = ["AStitchError", "Graph", "Node", "GPU", "gpu", "from_hlo", "from_hlo_file", "from_stablehlo", "from_torch",
           "torch_inputs", "ThreadMapping", "OPS",
           "Kernel", "Plan", "Stage", "Value", "Space", "Scheme", "Barrier", "Combine", "random_inputs", "reference", "WORKLOADS", "list_workloads",
           "workload", "STRATEGIES", "compile", "AStitchOptions", "XlaOptions", "simulate", "SimResult", "gpu_measurements",
           "figures"]
__version__ = "0.1.0"
