"""Graph <-> plain dict (JSON-safe), so a Plan's JSON carries the graph it runs.

Constants keep their exact values: arrays are written as nested lists with
``"inf"``, ``"-inf"`` and ``"nan"`` spelled out (JSON has no such numbers).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import cast
from ..errors import AStitchError
from ..ir.graph import Graph


def _encode_value(arr: np.ndarray):
    def enc(x):
        if isinstance(x, list):
            return [enc(v) for v in x]
        if isinstance(x, float) and not math.isfinite(x):
            return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
        return x
    return enc(np.asarray(arr).tolist())


def _decode_value(v, dtype):
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
