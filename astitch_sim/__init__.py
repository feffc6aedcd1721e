"""astitch-sim: the AStitch compiler (ASPLOS'22), a SIMT model to run its plans, and the tools to see them.

Public API (see docs/architecture.md)::

    import astitch_sim as asim
    g = asim.workload("layernorm")            # or asim.from_hlo(text)
    outs = asim.reference(g, inputs)          # numpy truth
    plan = asim.compile(g, strategy="astitch", gpu="H100")
    res = asim.simulate(plan, inputs)
    us = asim.estimate(plan)                  # the cost model's static estimate (no values computed)
    found = asim.gpu_measurements("benchmarks/results")   # GPU times committed, with provenance

The package's folders follow the pipeline (docs/architecture.md): ``ir/`` <- ``frontends/``, ``passes/``
<- ``plan/`` (with ``hardware/``) <- ``simt/``, ``figures/`` <- ``planning/`` <- ``compiler.compile``.
May import: all of them (this file is the public API; nothing inside the package imports it).
"""
from .errors import AStitchError
from .ir.graph import Graph, Node
from .hardware.gpus import GPU, gpu
from .frontends.from_text import from_hlo, from_hlo_file
from .frontends.stablehlo import from_stablehlo
from .frontends.torch_import import from_torch, torch_inputs
from .plan.mapping import ThreadMapping
from .ir.ops import OPS
from .plan.plan import Kernel, Plan, Stage, Value
from .plan.vocabulary import Barrier, Combine, Scheme, Space
from .ir.reference import random_inputs, reference
from .frontends.workloads import WORKLOADS, list_workloads, workload
from .frontends import workloads  # noqa: F401  (asim.workloads.workload_inputs, as the tutorials and the README use it)
from .compiler import STRATEGIES, compile, estimate
from .planning.strategies.options import AStitchOptions
from .planning.strategies.xla_options import XlaOptions
from .simt import SimResult, simulate
from .hardware.measured import gpu_measurements
from . import figures

__all__ = ["AStitchError", "Graph", "Node", "GPU", "gpu", "from_hlo", "from_hlo_file", "from_stablehlo", "from_torch",
           "torch_inputs", "ThreadMapping", "OPS",
           "Kernel", "Plan", "Stage", "Value", "Space", "Scheme", "Barrier", "Combine", "random_inputs", "reference", "WORKLOADS", "list_workloads",
           "workload", "STRATEGIES", "compile", "estimate", "AStitchOptions", "XlaOptions", "simulate", "SimResult", "gpu_measurements",
           "figures"]
__version__ = "0.1.0"
