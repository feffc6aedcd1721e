"""An ExportedProgram's ATen graph -> a Graph, one ATen node at a time through the op table.

Inputs: torch.export's signature lists them in order -- the module's parameters, its buffers, then the
call's tensor arguments, flattened -- and each becomes a Graph parameter in that order, named after its
state-dict entry (``ln.weight``, ``bn.running_mean``) or its argument (``x``, ``mask``).  Tensors the
forward made itself (``torch.tensor(...)`` constants, lifted by torch.export) become constants.

Only the ATen nodes the outputs depend on are converted (torch.export leaves unused results of
multi-output ops, e.g. batch norm's saved statistics).  After each node, the shape and type built are
checked against the ones torch.export recorded (``node.meta["val"]``): the importer's promotion and
shape rules must agree with PyTorch's on every node, and a disagreement is an error, never a silent
difference in the numbers.
"""
from __future__ import annotations

import operator
from itertools import pairwise

from ...errors import AStitchError
from ...ir.graph import Graph, Node
from .context import Builder
from .promotion import xla_dtype
from .table import ATEN, REFUSED

_TAKEN_INPUTS = ("PARAMETER", "BUFFER", "USER_INPUT")


def _is_tensor(torch, v) -> bool:
    return isinstance(v, torch.Tensor)


def _refuse_mutations(sig):
    mutated = dict(getattr(sig, "buffers_to_mutate", {}) or {})
    if mutated:
        raise AStitchError(f"the forward updates buffers {', '.join(sorted(mutated.values()))} in place (batch norm's "
                           "running statistics in training mode): export in eval mode (call module.eval() first)")
    inputs = dict(getattr(sig, "user_inputs_to_mutate", {}) or {})
    if inputs:
        raise AStitchError(f"the forward updates its inputs {', '.join(sorted(inputs.values()))} in place "
                           "(x.add_(...), x[i] = ...): return the new value instead of writing into the argument")


def _where(node) -> str:
    """The source line torch.export recorded for ``node``: the innermost module ``forward`` that made it."""
    lines = [x.strip() for x in (node.meta.get("stack_trace") or "").strip().splitlines()]
    frames = [(a, b) for a, b in pairwise(lines) if a.startswith("File ")]
    return f" (from {frames[-1][0]}: {frames[-1][1]})" if frames else ""


def _key(node) -> str:
    name = str(node.target)                      # "aten.add.Tensor"; a higher-order op: "cond", "while_loop"
    return name.removeprefix("aten.")


def _expected(torch, val, node=None):
    if not _is_tensor(torch, val):
        return None
    if not all(isinstance(s, int) for s in val.shape):     # an unbacked SymInt: a size known only at run time
        where = f"{node.name}: {_key(node)}" if node is not None else "an input"
        raise AStitchError(f"{where} {REFUSED['nonzero.default']} (its shape is {list(val.shape)})"
                           f"{_where(node) if node is not None else ''}")
    return tuple(val.shape), xla_dtype(val.dtype)


def _check(torch, node, result, val):
    got = result if isinstance(result, (tuple, list)) else (result,)
    want = val if isinstance(val, (tuple, list)) else (val,)
    for r, v in zip(got, want):
        exp = _expected(torch, v, node)
        if exp is None or not isinstance(r, Node):
            continue
        if (r.shape, r.dtype) != exp:
            raise AStitchError(f"{node.name}: the importer built {r.dtype}{list(r.shape)} for {_key(node)} where "
                               f"PyTorch computes {exp[1]}{list(exp[0])}: a bug in astitch_sim.frontends.torch_import "
                               "(please report it with the module)")


def _live(graph):
    out = next(n for n in graph.nodes if n.op == "output")
    live, stack = set(), [out]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(n.all_input_nodes)
    return live


def convert(program, name: str = "torch") -> Graph:
    """The Graph of ``program`` (an ExportedProgram, already decomposed)."""
    import torch
    sig = program.graph_signature
    _refuse_mutations(sig)
    g = Graph(name)
    b = Builder(g)
    env: dict = {}
    fx = program.graph
    placeholders = [n for n in fx.nodes if n.op == "placeholder"]
    for spec, ph in zip(sig.input_specs, placeholders, strict=True):
        kind = spec.kind.name
        val = ph.meta.get("val")
        if kind in _TAKEN_INPUTS and _is_tensor(torch, val):
            pname = spec.target if kind in ("PARAMETER", "BUFFER") else ph.name
            b.names.add(pname)
            env[ph] = g.parameter(pname, tuple(int(s) for s in val.shape), xla_dtype(val.dtype))
        elif kind == "USER_INPUT":
            env[ph] = val                                      # a Python number the trace specialised on
        elif kind == "CONSTANT_TENSOR":
            t = program.constants[spec.target]
            b.start(ph.name, (), "f32")
            env[ph] = b.constant(t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy(),
                                 xla_dtype(t.dtype))
        else:
            raise AStitchError(f"input {ph.name} is a {kind}, which astitch-sim cannot take: pass tensors")
    live = _live(fx)
    for node in fx.nodes:
        if node.op != "call_function" or node not in live:
            continue
        env[node] = _convert_node(torch, b, node, env)
    out = next(n for n in fx.nodes if n.op == "output")
    results = []
    for spec, arg in zip(sig.output_specs, out.args[0], strict=True):
        if spec.kind.name != "USER_OUTPUT":
            continue
        value = env.get(arg) if isinstance(arg, torch.fx.Node) else arg
        if not isinstance(value, Node):
            raise AStitchError(f"output {spec.arg} is {value!r}, not a tensor: return tensors only")
        results.append(value)
    g.set_outputs(results)
    return g


def _convert_node(torch, b: Builder, node, env):
    if node.target is operator.getitem:
        seq, i = node.args
        return env[seq][i]
    key = _key(node)
    if key in REFUSED:
        raise AStitchError(f"{node.name}: {key} {REFUSED[key]}{_where(node)}")
    if key not in ATEN:
        raise AStitchError(f"{node.name}: ATen op {key} is not supported by the PyTorch importer{_where(node)}; "
                           "rewrite it with supported ops or import the code around it "
                           f"(the {len(ATEN)} supported ATen ops: sorted(astitch_sim.frontends.torch_import.table.ATEN))")
    val = node.meta.get("val")
    first = val if _is_tensor(torch, val) else next((v for v in (val or ()) if _is_tensor(torch, v)), None)
    exp = _expected(torch, first, node) if first is not None else ((), "f32")
    b.start(node.name, *exp)

    def arg(a):
        if isinstance(a, torch.fx.Node):
            return env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(arg(x) for x in a)
        return a

    result = ATEN[key](b, *arg(node.args), **{k: arg(v) for k, v in node.kwargs.items()})
    if isinstance(result, Node):
        result = b.finish(result)
    _check(torch, node, result, val)
    return result
