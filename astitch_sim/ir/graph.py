"""The Graph IR: named nodes with static shapes and dtypes (torch.fx style).

A :class:`Graph` is an ordered set of :class:`Node` objects; nodes are added in
topological order (an operand must exist before its user), so iterating a graph
visits producers first.  Parameters are the inputs (in parameter order), and
``outputs`` lists the results (several, for a tuple root).

Build one by hand::

    g = Graph("scale_add")
    x = g.parameter("x", (4, 8))
    y = g.add(g.multiply(x, 2.0), x)      # python numbers become broadcast constants
    g.set_outputs(y)
    print(g)

or import it from XLA HLO text with ``astitch_sim.from_hlo``, or take one from
the workload catalog with ``astitch_sim.workload``.
"""
from __future__ import annotations

from math import prod
from typing import Optional, Sequence

import numpy as np

from .dtypes import cast, check_dtype, itemsize, xla_name
from ..errors import AStitchError
from .ops import OP_ALIASES, OPS, op_def
from .reducers import REDUCERS
from .shapes import check_shape, infer, int_list, is_int, shape_str


def unique_name(name: str, names: set) -> str:
    """``name``, or ``name2``, ``name3``...: the first not in ``names`` (which then holds it).

    For passes that add nodes to a rewritten graph next to the user's names."""
    out, k = name, 1
    while out in names:
        k += 1
        out = f"{name}{k}"
    names.add(out)
    return out


class Node:
    """One value in the graph: ``name = op[attrs](operands)`` with a static shape and dtype."""

    __slots__ = ("name", "op", "operands", "shape", "dtype", "attrs", "graph")

    def __init__(self, name, op, operands, shape, dtype, attrs, graph=None):
        self.name, self.op, self.operands = name, op, tuple(operands)
        self.shape, self.dtype, self.attrs, self.graph = tuple(shape), dtype, attrs, graph

    @property
    def opdef(self):
        return OPS[self.op]

    @property
    def kind(self) -> str:
        return OPS[self.op].kind

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * itemsize(self.dtype)

    @property
    def layout(self) -> tuple:
        """Minor-to-major dimension order (HLO's ``{1,0}``); row-major unless HLO said otherwise."""
        return tuple(self.attrs.get("layout") or range(self.rank - 1, -1, -1))

    @property
    def row_major(self) -> bool:
        """Is the layout row-major (the last dim fastest in memory: element ``e`` of the shape at offset ``e``)?"""
        return self.layout == tuple(range(self.rank - 1, -1, -1))

    @property
    def users(self) -> list["Node"]:
        return self.graph.users(self) if self.graph is not None else []

    def attr_str(self) -> str:
        a = self.attrs
        if self.op == "reduce":
            res = f", result={a['result']}" if len(self.operands) > 2 else ""
            return f"[{a['reducer']}, dims={tuple(a['dimensions'])}{res}]"
        if self.op == "constant":
            v = a["value"]
            return f"[{v.item()!r}]" if v.ndim == 0 else f"[{shape_str(v.shape)} array]"
        if self.op == "compare":
            return f"[{a['direction']}]"
        if self.op == "parameter":
            return f"[{a.get('index', '?')}]"
        keys = {"broadcast": ("dimensions",), "transpose": ("permutation",), "iota": ("iota_dimension",),
                "slice": ("starts", "limits", "strides"), "concatenate": ("dimension",),
                "pad": ("low", "high", "interior"),
                "dot": ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims"),
                "gather": ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "slice_sizes",
                           "operand_batching_dims", "start_indices_batching_dims"),
                "dynamic-slice": ("slice_sizes",),
                "scatter": ("combiner", "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                            "index_vector_dim", "input_batching_dims", "scatter_indices_batching_dims"),
                "sort": ("dimension", "orders", "result"), "topk": ("k", "largest", "result"),
                "reduce-window": ("reducer", "window_dimensions", "window_strides", "padding_low", "padding_high")}
        shown = [f"{k}={tuple(a[k]) if isinstance(a[k], (list, tuple)) else a[k]}" for k in keys.get(self.op, ())
                 if k in a and a[k] != ()]
        return f"[{', '.join(shown)}]" if shown else ""

    def __str__(self) -> str:
        args = ", ".join(o.name for o in self.operands)
        return f"{self.name}: {shape_str(self.shape, self.dtype)} = {self.op}{self.attr_str()}({args})"

    def __repr__(self) -> str:
        return f"<Node {self.name}: {shape_str(self.shape, self.dtype)} {self.op}>"


class Graph:
    """A dataflow graph of tensor ops; see the module docstring."""

    def __init__(self, name: str = "graph"):
        if not isinstance(name, str):
            raise AStitchError(f"a graph name must be a str, got {type(name).__name__} {name!r}")
        self.name = name
        self.nodes: dict[str, Node] = {}
        self.inputs: list[Node] = []
        self.outputs: list[Node] = []
        self._users: dict[str, list[Node]] = {}
        self._counter = 0
        #: the text format an importer read it from ("hlo", "stablehlo", "mhlo"); None when built in Python
        self.source: Optional[str] = None

    # -- core -----------------------------------------------------------------
    def add_node(self, op: str, operands: Sequence[Node] = (), *, shape=None, dtype=None,
                 name: Optional[str] = None, **attrs) -> Node:
        """Add ``op(operands)``; the result shape/dtype is inferred (and checked against ``shape``/``dtype``)."""
        op = OP_ALIASES.get(op, op)
        op_def(op)
        if name is not None and (not isinstance(name, str) or not name):
            raise AStitchError(f"node name must be a non-empty str, got {name!r}")
        name = name or self._fresh(op)
        if name in self.nodes:
            raise AStitchError(f"node name {name!r} is used twice; node names must be unique")
        operands = tuple(operands)
        for o in operands:
            if not isinstance(o, Node) or self.nodes.get(o.name) is not o:
                raise AStitchError(f"{name}: operand {o!r} is not a node of graph {self.name!r}; "
                                   "define operands before their users")
        out_shape, out_dtype = infer(op, operands, attrs, name, shape, dtype)
        node = Node(name, op, operands, out_shape, out_dtype, attrs, self)
        self.nodes[name] = node
        self._users[name] = []
        for o in dict.fromkeys(operands):
            self._users[o.name].append(node)
        if op == "parameter":
            index = attrs.setdefault("index", len(self.inputs))
            taken = {p.attrs["index"]: p.name for p in self.inputs}
            if not is_int(index) or index < 0 or index in taken:
                del self.nodes[name], self._users[name]
                raise AStitchError(f"parameter {name!r}: index {index!r} is "
                                   + (f"already taken by {taken[index]!r}" if index in taken else "not an int >= 0")
                                   + "; every parameter needs its own parameter number")
            self.inputs.append(node)
            self.inputs.sort(key=lambda n: n.attrs["index"])
        return node

    def _fresh(self, op: str) -> str:
        while True:
            self._counter += 1
            name = f"{op.replace('-', '_')}_{self._counter}"
            if name not in self.nodes:
                return name

    def set_outputs(self, *nodes) -> None:
        """Declare the results, in order (several for a tuple root)."""
        flat = [n for item in nodes for n in (item if isinstance(item, (list, tuple)) else [item])]
        for n in flat:
            if not isinstance(n, Node) or self.nodes.get(n.name) is not n:
                raise AStitchError(f"output {n!r} is not a node of graph {self.name!r}")
        if not flat:
            raise AStitchError(f"graph {self.name!r} needs at least one output")
        self.outputs = flat

    def users(self, node) -> list[Node]:
        """Nodes that read ``node`` (each once, in graph order)."""
        name = node.name if isinstance(node, Node) else node
        if name not in self._users:
            raise AStitchError(f"no node named {name!r} in graph {self.name!r}")
        return list(self._users[name])

    def rename(self, node: Node, name: str) -> Node:
        """Give ``node`` a new, unused name (an importer naming a node after the source op it completes);
        its place in the graph and its users stay as they are."""
        if self.nodes.get(node.name) is not node or not isinstance(name, str) or not name or name in self.nodes:
            raise AStitchError(f"cannot rename {node!r} to {name!r}: it must be a node of graph {self.name!r} "
                               "and the new name a non-empty str no node has")
        self.nodes = {(name if k == node.name else k): v for k, v in self.nodes.items()}
        self._users[name] = self._users.pop(node.name)
        node.name = name
        return node

    def __getitem__(self, name: str) -> Node:
        if name not in self.nodes:
            close = [n for n in self.nodes if str(name).lower() in n.lower()][:5]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise AStitchError(f"no node named {name!r} in graph {self.name!r}{hint}")
        return self.nodes[name]

    def __iter__(self):
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, name) -> bool:
        return (name.name if isinstance(name, Node) else name) in self.nodes

    # -- builder helpers --------------------------------------------------------
    def parameter(self, name: str, shape, dtype: str = "f32", index: Optional[int] = None) -> Node:
        attrs = {} if index is None else {"index": index}
        return self.add_node("parameter", (), shape=shape, dtype=check_dtype(dtype), name=name, **attrs)

    def constant(self, value, dtype: Optional[str] = None, name: Optional[str] = None) -> Node:
        """A constant (scalar or array); ``float('inf')``/``nan`` are fine."""
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as e:
            raise AStitchError(f"constant {name or ''}: {value!r} is not a number or a rectangular array: {e}") from None
        dtype = check_dtype(dtype) if dtype else (xla_name(arr.dtype) if arr.dtype.kind != "f" else "f32")
        arr = cast(arr, dtype)
        return self.add_node("constant", (), shape=arr.shape, dtype=dtype, name=name, value=arr)

    def iota(self, shape, dimension: int, dtype: str = "s32", name=None) -> Node:
        return self.add_node("iota", (), shape=shape, dtype=dtype, name=name, iota_dimension=dimension)

    def broadcast(self, x, shape, dimensions=None, name=None) -> Node:
        """XLA broadcast: operand dim ``i`` becomes output dim ``dimensions[i]`` (default: trailing dims)."""
        x = self._as_node(x)
        shape = check_shape(shape, name or "broadcast", "broadcast shape")
        if dimensions is None:
            if len(shape) < x.rank:
                raise AStitchError(f"broadcast of {x.name} {shape_str(x.shape)} to {shape_str(shape)}: the result "
                                   "needs at least the operand's rank")
            dimensions = tuple(range(len(shape) - x.rank, len(shape)))
        return self.add_node("broadcast", (x,), shape=shape, name=name,
                             dimensions=int_list(dimensions, name or "broadcast", "dimensions"))

    def reshape(self, x, shape, name=None) -> Node:
        return self.add_node("reshape", (x,), shape=shape, name=name)

    def transpose(self, x, permutation, name=None) -> Node:
        return self.add_node("transpose", (x,), name=name,
                             permutation=int_list(permutation, name or "transpose", "permutation"))

    def convert(self, x, dtype: str, name=None) -> Node:
        return self.add_node("convert", (x,), dtype=check_dtype(dtype), name=name)

    def slice(self, x, starts, limits, strides=None, name=None) -> Node:
        w = name or "slice"
        return self.add_node("slice", (x,), name=name, starts=int_list(starts, w, "starts"),
                             limits=int_list(limits, w, "limits"), strides=int_list(strides, w, "strides") if strides else None)

    def concatenate(self, xs, dimension: int, name=None) -> Node:
        if not isinstance(xs, (list, tuple)):
            raise AStitchError(f"concatenate needs a list of Nodes, got {type(xs).__name__}")
        if not is_int(dimension):
            raise AStitchError(f"concatenate dimension must be an int, got {dimension!r}")
        return self.add_node("concatenate", tuple(xs), name=name, dimension=dimension)

    def compare(self, a, b, direction: str, name=None) -> Node:
        a, b = self._match(a, b)
        if not isinstance(direction, str):
            raise AStitchError(f"compare direction must be one of EQ, NE, LT, LE, GT, GE, got {direction!r}")
        return self.add_node("compare", (a, b), name=name, direction=direction.upper())

    def select(self, pred, a, b, name=None) -> Node:
        a, b = self._match(a, b)
        return self.add_node("select", (pred, a, b), name=name)

    def clamp(self, lo, x, hi, name=None) -> Node:
        x = self._as_node(x)
        lo, hi = (self._as_node(v, x.dtype) for v in (lo, hi))
        return self.add_node("clamp", (lo, x, hi), name=name)

    def reduce(self, x, dims, reducer: str = "sum", name=None) -> Node:
        """Reduce ``x`` over ``dims`` with ``sum|max|min|prod|and|or``; the init value is the identity."""
        x = self._as_node(x)
        if not isinstance(reducer, str) or reducer not in REDUCERS or REDUCERS[reducer].values != 1:
            raise AStitchError(f"reducer {reducer!r} is not one of {', '.join(r for r in REDUCERS if REDUCERS[r].values == 1)}"
                               " (for argmax/argmin use g.argmax / g.argmin)")
        identity = self._identity(reducer, x.dtype)
        where = name or "reduce"
        dims = int_list((dims,) if is_int(dims) else dims, where, "reduce dims")
        bad = [d for d in dims if not -x.rank <= d < x.rank]
        if bad:
            raise AStitchError(f"{where}: reduce dims {dims} out of range for {x.name} {shape_str(x.shape)} "
                               f"(rank {x.rank}: use 0..{x.rank - 1}, or negatives from the end)")
        dims = tuple(d % x.rank for d in dims)
        init = self.constant(identity, x.dtype)
        return self.add_node("reduce", (x, init), name=name, dimensions=dims, reducer=reducer)

    def dot(self, a, b, lhs_contracting=None, rhs_contracting=(0,), lhs_batch=(), rhs_batch=(), name=None) -> Node:
        if not (isinstance(a, Node) and isinstance(b, Node)):
            raise AStitchError(f"dot needs two Nodes, got {type(a).__name__} and {type(b).__name__}")
        w = name or "dot"
        lhs_contracting = (a.rank - 1,) if lhs_contracting is None else lhs_contracting
        return self.add_node("dot", (a, b), name=name, lhs_contracting_dims=int_list(lhs_contracting, w, "lhs_contracting"),
                             rhs_contracting_dims=int_list(rhs_contracting, w, "rhs_contracting"),
                             lhs_batch_dims=int_list(lhs_batch, w, "lhs_batch"), rhs_batch_dims=int_list(rhs_batch, w, "rhs_batch"))

    # -- indexed loads (stitched: see indexed.py for XLA's exact semantics) ---------------------
    def gather(self, operand, start_indices, *, offset_dims, collapsed_slice_dims, start_index_map, slice_sizes,
               index_vector_dim=None, operand_batching_dims=(), start_indices_batching_dims=(), name=None) -> Node:
        """XLA gather (every attribute as HLO spells it); start indices are integers, clamped into the operand.

        ``index_vector_dim`` defaults to the rank of ``start_indices`` (one index per position).
        Most code wants :meth:`take` or :meth:`take_along_axis`."""
        w = name or "gather"
        ivd = start_indices.rank if index_vector_dim is None and isinstance(start_indices, Node) else index_vector_dim
        return self.add_node("gather", (operand, start_indices), name=name, offset_dims=int_list(offset_dims, w, "offset_dims"),
                             collapsed_slice_dims=int_list(collapsed_slice_dims, w, "collapsed_slice_dims"),
                             start_index_map=int_list(start_index_map, w, "start_index_map"), index_vector_dim=ivd,
                             slice_sizes=int_list(slice_sizes, w, "slice_sizes"),
                             operand_batching_dims=int_list(operand_batching_dims, w, "operand_batching_dims"),
                             start_indices_batching_dims=int_list(start_indices_batching_dims, w,
                                                               "start_indices_batching_dims"))

    def take(self, x, indices, axis: int = 0, name=None) -> Node:
        """``x`` indexed along ``axis`` by an integer array (an embedding lookup: ``table[ids]``).

        Result shape: ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``; indices are clamped to
        ``0..x.shape[axis]-1`` (XLA gather semantics; JAX normalises negative ones before)."""
        x, axis = self._node_axis(x, axis, "take")
        if not isinstance(indices, Node):
            raise AStitchError(f"take: indices must be a Node of integers, got {type(indices).__name__}")
        ir = indices.rank
        offset = tuple(range(axis)) + tuple(range(axis + ir, x.rank - 1 + ir))
        sizes = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
        return self.gather(x, indices, offset_dims=offset, collapsed_slice_dims=(axis,), start_index_map=(axis,),
                           slice_sizes=sizes, index_vector_dim=ir, name=name)

    def take_along_axis(self, x, indices, axis: int, name=None) -> Node:
        """``jnp.take_along_axis``: ``out[..., i, ...] = x[..., indices[..., i, ...], ...]`` along ``axis``.

        ``indices`` has ``x``'s rank and its shape off ``axis`` (cross-entropy with integer labels:
        ``take_along_axis(logp, labels[:, None], 1)``); the result has ``indices``' shape."""
        x, axis = self._node_axis(x, axis, "take_along_axis")
        if not isinstance(indices, Node) or indices.rank != x.rank or any(
                a != b for d, (a, b) in enumerate(zip(x.shape, indices.shape)) if d != axis):
            raise AStitchError(f"take_along_axis: indices must be a Node of {x.name}'s rank and shape off axis "
                               f"{axis} ({shape_str(x.shape)}), got "
                               f"{shape_str(indices.shape) if isinstance(indices, Node) else type(indices).__name__}")
        batch = tuple(d for d in range(x.rank) if d != axis)
        return self.gather(x, indices, offset_dims=(), collapsed_slice_dims=(axis,), start_index_map=(axis,),
                           slice_sizes=(1,) * x.rank, index_vector_dim=x.rank, operand_batching_dims=batch,
                           start_indices_batching_dims=batch, name=name)

    def dynamic_slice(self, x, starts, sizes, name=None) -> Node:
        """``lax.dynamic_slice``: the ``sizes`` slice at ``starts`` (ints or scalar integer Nodes), each start
        clamped to ``0..dim-size`` (XLA semantics: a KV-cache read at a run-time position)."""
        x = self._as_node(x)
        w = name or "dynamic_slice"
        return self.add_node("dynamic-slice", (x,) + self._starts(starts, x, w), name=name,
                             slice_sizes=int_list(sizes, w, "sizes"))

    def dynamic_update_slice(self, x, update, starts, name=None) -> Node:
        """``lax.dynamic_update_slice``: ``x`` with ``update`` written at ``starts`` (clamped so it fits):
        a KV-cache update at a run-time position."""
        x = self._as_node(x)
        w = name or "dynamic_update_slice"
        return self.add_node("dynamic-update-slice", (x, update) + self._starts(starts, x, w), name=name)

    def _starts(self, starts, x, where) -> tuple:
        if not isinstance(starts, (list, tuple)):
            raise AStitchError(f"{where}: starts must be a list with one int or scalar integer Node per dim of "
                               f"{x.name} ({x.rank}), got {starts!r}")
        return tuple(s if isinstance(s, Node) else self.constant(s, "s32") if is_int(s) else
                     self._bad_start(where, s) for s in starts)

    @staticmethod
    def _bad_start(where, s):
        raise AStitchError(f"{where}: start {s!r} is neither an int nor a scalar integer Node")

    def _node_axis(self, x, axis, where):
        if not isinstance(x, Node):
            raise AStitchError(f"{where}: expected a Node, got {type(x).__name__}")
        if not is_int(axis) or not -x.rank <= axis < x.rank:
            raise AStitchError(f"{where}: axis {axis!r} out of range for {x.name} {shape_str(x.shape)}")
        return x, axis % x.rank

    # -- argmax / argmin: a two-value reduce (stitched like any reduce) -------------------------
    def argmax(self, x, axis: int, index_dtype: str = "s32", name=None) -> Node:
        """Index of the largest element along ``axis`` (the first one; a NaN counts as the largest, the first
        NaN wins), as JAX lowers ``jnp.argmax``: a reduce of (x, iota) pairs."""
        return self._arg(x, axis, index_dtype, "argmax", name)

    def argmin(self, x, axis: int, index_dtype: str = "s32", name=None) -> Node:
        """Index of the smallest element along ``axis`` (first one; NaN wins as for argmax)."""
        return self._arg(x, axis, index_dtype, "argmin", name)

    def _arg(self, x, axis, index_dtype, which, name):
        x, axis = self._node_axis(x, axis, which)
        index_dtype = check_dtype(index_dtype)
        idx = self.iota(x.shape, axis, index_dtype)
        init = self.constant(self._identity("max" if which == "argmax" else "min", x.dtype), x.dtype)
        zero = self.constant(0, index_dtype)
        return self.add_node("reduce", (x, idx, init, zero), name=name, dimensions=(axis,), reducer=which, result=1)

    # -- library ops (each its own kernel: boundary.py) -----------------------------------------
    def reduce_window(self, x, window, strides=None, padding=None, reducer: str = "sum", name=None) -> Node:
        """XLA reduce-window: ``window`` sizes, ``strides`` (default 1), ``padding`` ((low, high) per dim,
        default 0); padding positions are skipped; the init is the reducer's identity."""
        x = self._as_node(x)
        w = name or "reduce_window"
        if not isinstance(reducer, str) or reducer not in REDUCERS or REDUCERS[reducer].values != 1:
            raise AStitchError(f"{w}: reducer {reducer!r} is not one of sum, max, min, prod, and, or")
        pads = padding if padding is not None else [(0, 0)] * x.rank
        if not isinstance(pads, (list, tuple)) or any(not isinstance(p, (list, tuple)) or len(p) != 2 for p in pads):
            raise AStitchError(f"{w}: padding must be one (low, high) pair per dim, got {padding!r}")
        init = self.constant(self._identity(reducer, x.dtype), x.dtype)
        return self.add_node("reduce-window", (x, init), name=name, reducer=reducer,
                             window_dimensions=int_list(window, w, "window"),
                             window_strides=int_list(strides, w, "strides") if strides is not None else None,
                             padding_low=int_list([p[0] for p in pads], w, "padding"),
                             padding_high=int_list([p[1] for p in pads], w, "padding"))

    def cumsum(self, x, axis: int, reverse: bool = False, reducer: str = "sum", name=None) -> Node:
        """``jnp.cumsum`` (or cumulative max/min/prod), as JAX lowers it: a reduce-window over the whole axis."""
        x, axis = self._node_axis(x, axis, "cumsum")
        n = x.shape[axis]
        window = [max(n, 1) if d == axis else 1 for d in range(x.rank)]    # an empty axis: windows are >= 1
        pads = [((0, n - 1) if reverse else (n - 1, 0)) if d == axis and n else (0, 0) for d in range(x.rank)]
        return self.reduce_window(x, window, padding=pads, reducer=reducer, name=name)

    def sort(self, xs, dimension: int = -1, descending: bool = False, num_keys: int = 1, name=None) -> list:
        """``lax.sort``: sort ``xs`` (a Node or a list of same-shape Nodes) along ``dimension`` by the first
        ``num_keys`` of them (lexicographic, stable; JAX's order: -0 == 0, NaNs last), permuting the others
        alike.  Returns one Node per operand (results ``#0``, ``#1``...)."""
        xs = [xs] if isinstance(xs, Node) else list(xs) if isinstance(xs, (list, tuple)) else None
        if not xs or not all(isinstance(x, Node) for x in xs):
            raise AStitchError("sort needs a Node or a non-empty list of Nodes")
        x0, dim = self._node_axis(xs[0], dimension, "sort")
        if not is_int(num_keys) or not 1 <= num_keys <= len(xs):
            raise AStitchError(f"sort: num_keys={num_keys!r} must be 1..{len(xs)}")
        orders = tuple(("desc" if descending else "asc") if i < num_keys else "" for i in range(len(xs)))
        base = name or self._fresh("sort")
        return [self.add_node("sort", xs, name=f"{base}#{i}", dimension=dim, orders=orders, result=i, is_stable=True)
                for i in range(len(xs))]

    def top_k(self, x, k: int, largest: bool = True, name=None) -> tuple:
        """``lax.top_k``: the ``k`` largest of each last-dim row (NaNs first, ties to the lower index) and their
        s32 indices: ``(values, indices)``."""
        x = self._as_node(x)
        base = name or self._fresh("topk")
        return tuple(self.add_node("topk", (x,), name=f"{base}#{i}", k=k, largest=largest, result=i) for i in (0, 1))

    def scatter(self, operand, indices, updates, *, update_window_dims, inserted_window_dims,
                scatter_dims_to_operand_dims, index_vector_dim=None, input_batching_dims=(),
                scatter_indices_batching_dims=(), combiner: str = "sum", name=None) -> Node:
        """XLA scatter (attributes as HLO spells them); ``combiner`` is ``assign`` (last update wins) or a
        reducer (``sum``...).  Updates whose window does not fit are dropped.  Most code wants :meth:`index_add`."""
        w = name or "scatter"
        ivd = indices.rank if index_vector_dim is None and isinstance(indices, Node) else index_vector_dim
        return self.add_node("scatter", (operand, indices, updates), name=name, combiner=combiner,
                             update_window_dims=int_list(update_window_dims, w, "update_window_dims"),
                             inserted_window_dims=int_list(inserted_window_dims, w, "inserted_window_dims"),
                             scatter_dims_to_operand_dims=int_list(scatter_dims_to_operand_dims, w,
                                                                "scatter_dims_to_operand_dims"),
                             index_vector_dim=ivd, input_batching_dims=int_list(input_batching_dims, w, "input_batching_dims"),
                             scatter_indices_batching_dims=int_list(scatter_indices_batching_dims, w,
                                                                 "scatter_indices_batching_dims"))

    def index_add(self, x, indices, updates, axis: int = 0, combiner: str = "sum", name=None) -> Node:
        """``x.at[indices].add(updates)`` along ``axis`` (the gradient of :meth:`take`: an embedding gradient).

        ``updates`` has shape ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``; ``combiner="assign"``
        is ``.at[].set`` (the last update wins).  Out-of-range indices are dropped."""
        x, axis = self._node_axis(x, axis, "index_add")
        if not isinstance(indices, Node) or not isinstance(updates, Node):
            raise AStitchError("index_add: indices and updates must be Nodes")
        ir = indices.rank
        window = tuple(range(axis)) + tuple(range(axis + ir, updates.rank))
        return self.scatter(x, indices, updates, update_window_dims=window, inserted_window_dims=(axis,),
                            scatter_dims_to_operand_dims=(axis,), index_vector_dim=ir, combiner=combiner, name=name)

    @staticmethod
    def _identity(reducer, dtype):
        identity = {"sum": 0, "prod": 1, "max": -np.inf, "min": np.inf, "and": True, "or": False}[reducer]
        if dtype == "pred" and reducer in ("max", "min"):
            return reducer == "min"
        if dtype not in ("f32", "f64", "f16", "bf16") and reducer in ("max", "min"):
            info = np.iinfo(np.dtype(dtype.replace("s", "int").replace("u", "uint")))
            return info.min if reducer == "max" else info.max
        return identity

    def _as_node(self, x, dtype="f32") -> Node:
        if isinstance(x, Node):
            return x
        if isinstance(x, (int, float, bool, np.number, np.bool_)):
            return self.constant(x, dtype)
        raise AStitchError(f"expected a Node or a python number, got {type(x).__name__}")

    def _match(self, *xs) -> list[Node]:
        """Turn python numbers into constants broadcast to the shape of the node operands."""
        nodes = [x for x in xs if isinstance(x, Node)]
        if not nodes:
            raise AStitchError("at least one operand must be a Node")
        ref = max(nodes, key=lambda n: n.rank)
        out = []
        for x in xs:
            if not isinstance(x, Node):
                c = self._as_node(x, ref.dtype)
                x = self.broadcast(c, ref.shape, ()) if ref.rank else c
            out.append(x)
        return out

    def __getattr__(self, opname):
        """``g.add(a, b)``, ``g.exp(x)``... for every elementwise op in the table."""
        op = OP_ALIASES.get(opname, opname.replace("_", "-"))
        if op in OPS and OPS[op].kind == "elementwise" and op not in ("compare", "select", "clamp", "convert"):
            def build(*operands, name=None):
                return self.add_node(op, self._match(*operands), name=name)
            build.__name__ = opname
            return build
        raise AttributeError(f"Graph has no attribute {opname!r}")

    # -- views ------------------------------------------------------------------
    def live_nodes(self) -> list[Node]:
        """Nodes some output depends on (dead code dropped), in topological order."""
        live, stack = set(), [o.name for o in self.outputs]
        while stack:
            n = stack.pop()
            if n in live:
                continue
            live.add(n)
            stack.extend(o.name for o in self.nodes[n].operands)
        return [n for n in self.nodes.values() if n.name in live or n.op == "parameter"]

    def signature(self) -> str:
        ins = ", ".join(f"{p.name}: {shape_str(p.shape, p.dtype)}" for p in self.inputs)
        outs = ", ".join(f"{o.name}: {shape_str(o.shape, o.dtype)}" for o in self.outputs)
        return f"graph {self.name}({ins}) -> ({outs})"

    def __str__(self) -> str:
        lines = [self.signature() + " {"]
        for n in self.nodes.values():
            if n.op != "parameter":
                lines.append("  " + str(n))
        lines.append(f"  return ({', '.join(o.name for o in self.outputs)})")
        lines.append("}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.nodes)} nodes, {len(self.inputs)} inputs, {len(self.outputs)} outputs>"

    def to_dot(self) -> str:
        """Graphviz DOT: parameters as ellipses, reduces as inverted houses, outputs double-bordered."""
        from .viz import graph_to_dot
        return graph_to_dot(self)

    def validate(self) -> "Graph":
        """Check the graph is complete: outputs declared and every node well formed."""
        if not self.outputs:
            raise AStitchError(f"graph {self.name!r} has no outputs: call set_outputs(...)")
        return self
