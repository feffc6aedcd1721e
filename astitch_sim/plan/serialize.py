"""Graph <-> plain dict (JSON-safe), so a Plan's JSON carries the graph it runs.

Constants keep their exact values: arrays are written as nested lists with
``"inf"``, ``"-inf"`` and ``"nan"`` spelled out (JSON has no such numbers).  An
array without elements is written ``[]``, whatever its shape: the node's shape
says it (nested, a ``[256, 37, 2, 0]`` constant was 19,000 empty lists, a line
each in the indented JSON: 3 MB and a second per plan for a 13-node graph).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import cast
from ..errors import AStitchError
from ..ir.graph import Graph


def _encode_value(arr: np.ndarray):
    a = np.asarray(arr)
    if a.size == 0:
        return []
    if a.dtype.kind != "f" or bool(np.isfinite(a).all()):
        return a.tolist()                       # nothing to spell out: no walk over the elements
    def enc(x):
        if isinstance(x, list):
            return [enc(v) for v in x]
        if isinstance(x, float) and not math.isfinite(x):
            return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
        return x
    return enc(a.tolist())


def _decode_value(v, dtype):
    a = np.asarray(v)
    if a.dtype.kind in "biuf":
        return cast(a, dtype)                   # no "inf"/"nan" spelled out: numbers only
    def dec(x):
        if isinstance(x, list):
            return [dec(y) for y in x]
        return float(x) if isinstance(x, str) else x
    return cast(np.asarray(dec(v)), dtype)


def _jsonable(v):
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    return v


def graph_to_dict(g: Graph) -> dict:
    nodes = []
    for n in g:
        attrs = {k: _jsonable(v) for k, v in n.attrs.items() if k != "value"}
        if n.op == "constant":
            attrs["value"] = _encode_value(n.attrs["value"])
        nodes.append({"name": n.name, "op": n.op, "operands": [o.name for o in n.operands],
                      "shape": list(n.shape), "dtype": n.dtype, "attrs": attrs})
    return {"name": g.name, "nodes": nodes, "outputs": [o.name for o in g.outputs]}


def graph_from_dict(d: dict) -> Graph:
    try:
        g = Graph(d["name"])
        for nd in d["nodes"]:
            attrs = dict(nd["attrs"])
            if nd["op"] == "constant":
                # an empty array's JSON ([] or [[], []]) does not say its inner sizes: the node's shape does
                attrs["value"] = _decode_value(attrs["value"], nd["dtype"]).reshape(nd["shape"])
            for k, v in list(attrs.items()):
                if isinstance(v, list) and k != "value":
                    attrs[k] = tuple(v)
            g.add_node(nd["op"], [g[o] for o in nd["operands"]], shape=nd["shape"], dtype=nd["dtype"],
                       name=nd["name"], **attrs)
        g.set_outputs([g[o] for o in d["outputs"]])
        return g
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        if isinstance(e, AStitchError):
            raise
        raise AStitchError(f"graph JSON is malformed ({type(e).__name__}: {e}); "
                           "write it with plan.to_json()") from None
