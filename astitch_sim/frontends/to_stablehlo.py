"""Print a Graph as StableHLO text (MLIR's generic op form), the inverse of :mod:`astitch_sim.frontends.stablehlo`.

Its use is checking the importer: a graph printed here and read back with
:func:`~astitch_sim.frontends.stablehlo.from_stablehlo` must compute the same values (the
property suite does it for random graphs).  Every op is printed in MLIR's generic
form, ``%v3 = "stablehlo.add"(%v1, %v2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>``,
attributes as properties (``<{broadcast_dimensions = array<i64: 1>}>``), constants as
hex blobs of their exact bits, a reduce's region as one op of its two arguments.

Printed: parameters, constants, iota, every elementwise op of the op table (compare,
select, clamp and convert among them), broadcast, reduce with a one-value reducer,
reshape, transpose, reverse, slice, concatenate, pad, dot, dynamic-slice and
dynamic-update-slice.  Anything else (gather, scatter, sort, topk, reduce-window, the
two-value argmax reduce, copy, bitcast) is an :class:`AStitchError` naming it.
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import AStitchError
from ..ir.graph import Graph, Node
from ..ir.ops import OPS
from ..ir.reducers import REDUCERS
from .stablehlo_ops import OPS as STABLEHLO_OPS
from .stablehlo_values import MLIR_DTYPES

__all__ = ["to_stablehlo"]

#: XLA dtype -> MLIR element type (the first MLIR spelling of each)
_ELEMENT = {}
for _mlir, _xla in MLIR_DTYPES.items():
    _ELEMENT.setdefault(_xla, _mlir)
#: HLO opcode of an elementwise op -> its StableHLO name (chlo.erf is CHLO's)
_ELEMENTWISE = {hlo_op: f"stablehlo.{short}" for short, (hlo_op, _) in STABLEHLO_OPS.items()
                if hlo_op in OPS and OPS[hlo_op].kind == "elementwise"}
_ELEMENTWISE["erf"] = "chlo.erf"
#: bits of each float dtype, for the exact hex blob of a constant
_BITS = {"f64": np.uint64, "f32": np.uint32, "f16": np.uint16}


def tensor(shape, dtype) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + _ELEMENT[dtype] + ">"


def _ints(values) -> str:
    values = [int(v) for v in values]
    return "array<i64" + (": " + ", ".join(map(str, values)) if values else "") + ">"


def _list(values) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def _hex(node: Node) -> str:
    """The constant's values as MLIR's hex blob, little-endian, exactly (bf16: the top 16 bits of f32)."""
    value = np.asarray(node.attrs["value"])
    if node.dtype == "bf16":
        raw = (value.astype(np.float32).view(np.uint32) >> 16).astype("<u2")
    elif node.dtype == "pred":
        raw = value.astype(np.uint8)
    else:
        raw = value.astype(np.dtype(value.dtype).newbyteorder("<"))
    return '"0x' + np.ascontiguousarray(raw).tobytes().hex().upper() + '"'


def _props(node: Node) -> str:
    """The op's properties ``<{...}>`` (empty string when it has none)."""
    a, op = node.attrs, node.op
    props = {
        "constant": lambda: {"value": f"dense<{_hex(node)}> : {tensor(node.shape, node.dtype)}"},
        "iota": lambda: {"iota_dimension": f"{a['iota_dimension']} : i64"},
        "broadcast": lambda: {"broadcast_dimensions": _ints(a["dimensions"])},
        "transpose": lambda: {"permutation": _ints(a["permutation"])},
        "reverse": lambda: {"dimensions": _ints(a["dimensions"])},
        "slice": lambda: {"start_indices": _ints(a["starts"]), "limit_indices": _ints(a["limits"]),
                          "strides": _ints(a["strides"])},
        "concatenate": lambda: {"dimension": f"{a['dimension']} : i64"},
        "pad": lambda: {"edge_padding_low": _ints(a["low"]), "edge_padding_high": _ints(a["high"]),
                        "interior_padding": _ints(a["interior"])},
        "reduce": lambda: {"dimensions": _ints(a["dimensions"])},
        "dynamic-slice": lambda: {"slice_sizes": _ints(a["slice_sizes"])},
        "dot": lambda: {"dot_dimension_numbers": "#stablehlo.dot<" + ", ".join(
            f"{k} = {_list(a[h])}" for k, h in (("lhs_batching_dimensions", "lhs_batch_dims"),
                                                 ("rhs_batching_dimensions", "rhs_batch_dims"),
                                                 ("lhs_contracting_dimensions", "lhs_contracting_dims"),
                                                 ("rhs_contracting_dimensions", "rhs_contracting_dims"))
            if a.get(h)) + ">"},
        "compare": lambda: {"comparison_direction": f"#stablehlo<comparison_direction {a['direction']}>",
                            **({"compare_type": f"#stablehlo<comparison_type {a['type']}>"} if a.get("type") else {})},
    }.get(op, dict)()
    return "<{" + ", ".join(f"{k} = {v}" for k, v in props.items()) + "}>" if props else ""


def _name(node: Node) -> str:
    if node.op in _ELEMENTWISE:
        return _ELEMENTWISE[node.op]
    names = {"constant": "stablehlo.constant", "iota": "stablehlo.iota", "broadcast": "stablehlo.broadcast_in_dim",
             "reshape": "stablehlo.reshape", "transpose": "stablehlo.transpose", "reverse": "stablehlo.reverse",
             "slice": "stablehlo.slice", "concatenate": "stablehlo.concatenate", "pad": "stablehlo.pad",
             "reduce": "stablehlo.reduce", "dot": "stablehlo.dot_general", "dynamic-slice": "stablehlo.dynamic_slice",
             "dynamic-update-slice": "stablehlo.dynamic_update_slice"}
    if node.op not in names or (node.op == "reduce" and REDUCERS[node.attrs["reducer"]].values != 1):
        what = f"a {node.attrs['reducer']} reduce" if node.op == "reduce" else f"op {node.op!r}"
        raise AStitchError(f"to_stablehlo: {node.name}: {what} is not printed (see the module docstring for "
                           "what is)")
    return names[node.op]


def _region(node: Node) -> str:
    """A reduce's region: the reducer's binary op of its two scalar arguments."""
    region_op = REDUCERS[node.attrs["reducer"]].region_op
    scalar = tensor((), node.dtype)
    return (f' ({{\n    ^bb0(%a: {scalar}, %b: {scalar}):\n'
            f'      %r = "{_ELEMENTWISE[region_op]}"(%a, %b) : ({scalar}, {scalar}) -> {scalar}\n'
            f'      "stablehlo.return"(%r) : ({scalar}) -> ()\n    }})')


def to_stablehlo(graph: Graph) -> str:
    """``graph`` as a StableHLO module text: ``@main`` takes its inputs and returns its outputs."""
    if not isinstance(graph, Graph):
        raise AStitchError(f"to_stablehlo expects a Graph, got {type(graph).__name__}")
    ids = {p.name: f"%arg{i}" for i, p in enumerate(graph.inputs)}
    lines = []
    for node in graph:
        if node.op == "parameter":
            continue
        name = _name(node)
        ids[node.name] = f"%v{len(ids)}"
        operands = ", ".join(ids[o.name] for o in node.operands)
        types = ", ".join(tensor(o.shape, o.dtype) for o in node.operands)
        region = _region(node) if node.op == "reduce" else ""
        lines.append(f'    {ids[node.name]} = "{name}"({operands}) {_props(node)}{region} : ({types}) -> '
                     f"{tensor(node.shape, node.dtype)}")
    args = ", ".join(f"{ids[p.name]}: {tensor(p.shape, p.dtype)}" for p in graph.inputs)
    results = ", ".join(tensor(o.shape, o.dtype) for o in graph.outputs)
    returned = ", ".join(ids[o.name] for o in graph.outputs)
    return (f"module @{_symbol(graph.name)} {{\n  func.func public @main({args}) -> ({results}) {{\n"
            + "\n".join(lines) + ("\n" if lines else "")
            + f"    return {returned} : {results}\n  }}\n}}\n")


def _symbol(name: str) -> str:
    """A graph name as an MLIR symbol (quoted when it has characters a bare symbol cannot)."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$.]*", name) else '"' + name.replace('"', "'") + '"'
