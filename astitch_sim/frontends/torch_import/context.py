"""What every ATen builder needs: the Graph being built, names, and PyTorch's implicit rules made explicit.

An ATen op reads like numpy: ``add(x[4,1,8], y[8])`` broadcasts, promotes ``x_f16 + 2.5`` to f16 and takes
Python numbers anywhere.  The Graph (XLA-style) has none of that implicitness: an elementwise op needs
operands of one shape and one dtype, and a broadcast names which output dimension each operand dimension
becomes.  :class:`Builder` turns one into the other:

* :meth:`Builder.elementwise` promotes the operands (``promotion.result_type``), casts them, broadcasts each to
  the common shape (a size-1 dimension that stretches is reshaped away first, then ``broadcast`` maps the
  remaining ones) and adds the op;
* Python numbers become scalar constants of the computation's type;
* every node it adds for ATen node ``mul_3`` is named ``mul_3.<op>``, and the one the op returns is then
  renamed ``mul_3`` (:meth:`Builder.finish`), so a printed plan can be read against torch.export's graph.
"""
from __future__ import annotations

import numpy as np

from ...errors import AStitchError
from ...ir.graph import Graph, Node, unique_name
from .promotion import result_type


def broadcast_shape(*shapes) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise AStitchError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast") from None


class Builder:
    """Adds the nodes of one ATen node at a time to ``graph``; ``here`` is that node's name."""

    def __init__(self, graph: Graph):
        self.g = graph
        self.names: set = set()
        self.here = "node"
        self.out_shape: tuple = ()
        self.out_dtype: str = "f32"

    # -- names ----------------------------------------------------------------------------
    def start(self, name: str, shape, dtype) -> None:
        """Begin ATen node ``name``, whose result torch.export recorded as ``shape``/``dtype``."""
        self.here, self.out_shape, self.out_dtype = name, tuple(shape), dtype

    def fresh(self, op: str) -> str:
        return unique_name(f"{self.here}.{op.replace('-', '_')}", self.names)

    def add(self, op, operands, **attrs) -> Node:
        return self.g.add_node(op, operands, name=self.fresh(op), **attrs)

    def finish(self, node: Node) -> Node:
        """Give the node an ATen op returned the ATen node's own name, if it was made for this op (a view
        that returned its operand unchanged keeps the operand's name)."""
        if node.name.startswith(self.here + ".") and self.here not in self.g.nodes:
            self.names.add(self.here)
            self.g.rename(node, self.here)
        return node

    # -- values ---------------------------------------------------------------------------
    def constant(self, value, dtype: str) -> Node:
        return self.g.constant(value, dtype, name=self.fresh("constant"))

    def cast(self, x: Node, dtype: str) -> Node:
        return x if x.dtype == dtype else self.g.convert(x, dtype, name=self.fresh("convert"))

    def reshape(self, x: Node, shape) -> Node:
        shape = tuple(shape)
        if x.shape == shape:
            return x
        return self.g.reshape(x, shape, name=self.fresh("reshape"))

    def broadcast_to(self, x: Node, shape) -> Node:
        """numpy broadcasting, made explicit: drop the size-1 dims that stretch, then ``broadcast``."""
        shape = tuple(shape)
        if x.shape == shape:
            return x
        lead = len(shape) - x.rank
        if lead < 0 or any(n not in (1, shape[lead + i]) for i, n in enumerate(x.shape)):
            raise AStitchError(f"{self.here}: cannot broadcast {x.name} {x.shape} to {shape}")
        kept = [i for i, n in enumerate(x.shape) if n == shape[lead + i]]
        if len(kept) < x.rank:
            x = self.reshape(x, [x.shape[i] for i in kept])
        return self.g.broadcast(x, shape, [lead + i for i in kept], name=self.fresh("broadcast"))

    def operand(self, x, dtype: str, shape) -> Node:
        """A Node or a Python number as an operand of type ``dtype`` and shape ``shape``."""
        if isinstance(x, Node):
            return self.broadcast_to(self.cast(x, dtype), shape)
        if isinstance(x, (bool, int, float)):
            c = self.constant(x, dtype)
            return self.broadcast_to(c, shape) if shape else c
        raise AStitchError(f"{self.here}: operand {x!r} is neither a tensor nor a number")

    def promoted(self, *xs) -> str:
        return result_type([(x.dtype, x.rank) if isinstance(x, Node) else x for x in xs])

    def elementwise(self, op: str, *xs, dtype=None, result=None, **attrs) -> Node:
        """``op`` over ``xs`` (Nodes and numbers) computed in ``dtype`` (default: PyTorch's promotion),
        broadcast to their common shape; ``result`` casts the value afterwards (comparisons give pred)."""
        dtype = dtype or self.promoted(*xs)
        shape = broadcast_shape(*(x.shape for x in xs if isinstance(x, Node)))
        operands = [self.operand(x, dtype, shape) for x in xs]
        node = self.add(op, operands, **attrs)
        return node if result in (None, "pred") else self.cast(node, result)

    def compare(self, a, b, direction: str) -> Node:
        return self.elementwise("compare", a, b, direction=direction, result="pred")

    def select(self, pred: Node, a, b) -> Node:
        dtype = self.promoted(a, b)
        shape = broadcast_shape(*(x.shape for x in (pred, a, b) if isinstance(x, Node)))
        return self.add("select", [self.broadcast_to(pred, shape), self.operand(a, dtype, shape),
                                   self.operand(b, dtype, shape)])

    def reduce(self, x: Node, dims, reducer: str) -> Node:
        return self.g.reduce(x, tuple(dims), reducer, name=self.fresh("reduce"))

    def dim(self, d, rank: int) -> int:
        if not -max(rank, 1) <= d < max(rank, 1):
            raise AStitchError(f"{self.here}: dim {d} out of range for rank {rank}")
        return d % max(rank, 1)
