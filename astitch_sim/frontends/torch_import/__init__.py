"""Import PyTorch modules and functions (torch.export) as Graphs: ``asim.from_torch(module, *args)``.

How a module becomes a Graph::

    module, example args --torch.export--> ATen graph --run_decompositions(ours)--> core ATen, with
    softmax, layer/group/batch norm and GELU as elementwise + reduce ops --op table--> Graph

* :mod:`.export`: torch.export, torch's refusals as AStitchErrors; torch is imported only when called
  (an optional dependency: ``pip install 'astitch-sim[torch]'``);
* :mod:`.decompositions`: the decomposition table (torch's defaults plus the normalisations written out);
* :mod:`.promotion`: PyTorch's dtypes and type promotion;
* :mod:`.context`: broadcasting and promotion made explicit, node names;
* :mod:`.table` (rows in ``ops_*``): ATen op -> builder, and the refusals with their fixes;
* :mod:`.convert`: the walk over the ATen graph, checking every node against torch.export's record.

May import: ``astitch_sim.ir``, ``astitch_sim.errors`` and the rest of ``astitch_sim.frontends``.
"""
from __future__ import annotations

from .export import as_module, decompose, export, require_torch

__all__ = ["from_torch", "torch_inputs"]


def from_torch(module_or_function, *example_args, **example_kwargs):
    """The Graph of ``module_or_function(*example_args, **example_kwargs)``, exported by torch.export.

    Parameters: the module's parameters, then its buffers, then the call's tensor arguments (flattened),
    named after state-dict entries and argument names; :func:`torch_inputs` gives their values.  Outputs:
    the forward's tensors, flattened.  Shapes are those of the example arguments.  Export in eval mode
    (``module.eval()``): dropout and batch norm's training behaviour are refused."""
    from .convert import convert
    torch = require_torch()
    module = as_module(torch, module_or_function)
    program = decompose(export(module, example_args, example_kwargs))
    name = getattr(module_or_function, "__name__", None) or type(module).__name__
    return convert(program, name)


def _numpy(t):
    import torch
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def torch_inputs(module_or_function, *args, **kwargs) -> list:
    """The values of :func:`from_torch`'s Graph parameters, in order, as numpy arrays (bf16 as float32)."""
    torch = require_torch()
    from torch.utils._pytree import tree_leaves
    module = as_module(torch, module_or_function)
    leaves = [x for x in tree_leaves((tuple(args), kwargs)) if isinstance(x, torch.Tensor)]
    if next(module.parameters(), None) is None and next(module.buffers(), None) is None:
        return [_numpy(x) for x in leaves]        # no state: the inputs are the call's tensors, no export needed
    program = export(module, args, kwargs)
    leaves = iter(tree_leaves((tuple(args), kwargs)))      # keyword arguments in the call's order, as torch.export
    out = []
    for spec in program.graph_signature.input_specs:
        kind = spec.kind.name
        if kind in ("PARAMETER", "BUFFER"):
            t = program.state_dict.get(spec.target)
            t = program.constants.get(spec.target) if t is None else t
            out.append(_numpy(t))
        elif kind == "USER_INPUT":
            leaf = next(leaves, None)
            if isinstance(leaf, torch.Tensor):
                out.append(_numpy(leaf))
    return out
