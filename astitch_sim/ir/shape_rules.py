"""The shape rules the op table names: one function per rule, each answering a ShapeCall.

Every row of the op table (``ops.py``) names its rule in the ``shape`` column, so what an
op's result looks like is defined where the op is; ``shapes.infer`` looks the rule up and
adds the checks every op shares (operand count, the declared shape and dtype).  A rule
returns ``(shape, dtype)`` of the result, normalises ``attrs`` in place where HLO allows
several spellings (a default stride, unsorted reduce dimensions), and rejects operands that
do not fit together with an ``AStitchError`` that names the node, the problem and the fix.
"""
from __future__ import annotations

from math import prod

import numpy as np

from .comparisons import COMPARE_DIRECTIONS, COMPARE_TYPES
from .dtypes import check_dtype, is_float
from ..errors import AStitchError
from .indexed import infer_dynamic_slice, infer_dynamic_update_slice, infer_gather
from .reducers import REDUCERS
from .scatter import infer_scatter
from .shape_checks import ShapeCall, check_dims, check_shape, fmt_shape, int_list, is_int, require
from .sorting import infer_sort, infer_topk
from .windows import infer_reduce_window

# -- sources: the caller says what they are ----------------------------------


def declared_source(q: ShapeCall):
    """A source (parameter) is what the caller declares: a shape and a dtype are required."""
    q.require(q.shape is not None and q.dtype is not None, f"{q.op} needs an explicit shape and dtype")
    return check_shape(q.shape, q.name), check_dtype(q.dtype)


def constant(q: ShapeCall):
    """A declared source whose ``value`` (if given) must have the declared shape."""
    out_shape, out_dtype = declared_source(q)
    if "value" in q.attrs and np.shape(q.attrs["value"]) != out_shape:
        raise AStitchError(f"{q.name}: constant value has shape {fmt_shape(np.shape(q.attrs['value']))} but the "
                           f"node is declared {fmt_shape(out_shape, out_dtype)}")
    return out_shape, out_dtype


def iota(q: ShapeCall):
    """A declared source counting along ``iota_dimension`` (default 0), which must be a dim of it."""
    out_shape, out_dtype = declared_source(q)
    q.attrs["iota_dimension"] = check_dims([q.attrs.get("iota_dimension", 0)], q.name, len(out_shape),
                                           "iota_dimension")[0]
    return out_shape, out_dtype


# -- elementwise: equal shapes, then a dtype rule ------------------------------


def elementwise_shape(q: ShapeCall, scalar_ok=()):
    """The shape every elementwise op shares: all operands have one shape, except that the
    operands at positions ``scalar_ok`` may be scalars (clamp's bounds, select's predicate)."""
    shapes = q.shapes
    out_shape = ([s for s in shapes if s != ()] or [()])[0]
    for i, s in enumerate(shapes):
        q.require(s == out_shape or (s == () and i in scalar_ok),
                  f"operand shapes {', '.join(fmt_shape(x, t) for x, t in zip(shapes, q.dtypes))} do not agree; "
                  "elementwise ops need equal shapes: broadcast the smaller operand first")
    return out_shape


def one_dtype(q: ShapeCall):
    """The operands' one dtype (arithmetic never converts implicitly)."""
    dtypes = q.dtypes
    q.require(len(set(dtypes)) == 1, f"operands have dtypes {dtypes}; {q.op} needs one dtype: insert a convert")
    return dtypes[0]


def elementwise(q: ShapeCall):
    """Arithmetic and logic: operands of one shape and one dtype give that shape and dtype."""
    out_shape = elementwise_shape(q)
    return out_shape, one_dtype(q)


def clamp(q: ShapeCall):
    """``clamp(lo, x, hi)``: like :func:`elementwise`, but ``lo`` and ``hi`` may be scalars."""
    out_shape = elementwise_shape(q, scalar_ok=(0, 2))
    return out_shape, one_dtype(q)


def predicate(q: ShapeCall):
    """A test of one dtype's values (is-finite): the operands' shape, dtype ``pred``."""
    out_shape = elementwise_shape(q)
    one_dtype(q)
    return out_shape, "pred"


def compare(q: ShapeCall):
    """``compare``: a known direction and type, two operands of one dtype; gives ``pred``."""
    out_shape, dtypes, attrs = elementwise_shape(q), q.dtypes, q.attrs
    q.require(attrs.get("direction") in COMPARE_DIRECTIONS,
              f"compare needs direction= one of {COMPARE_DIRECTIONS}, got {attrs.get('direction')!r}")
    q.require(attrs.get("type") in COMPARE_TYPES,
              f"compare type={attrs.get('type')!r} is not FLOAT, TOTALORDER, SIGNED or UNSIGNED")
    q.require(dtypes[0] == dtypes[1], f"compare of {dtypes[0]} with {dtypes[1]}: convert one first")
    return out_shape, "pred"


def convert(q: ShapeCall):
    """``convert``: the operand's shape, in the declared dtype (or the ``to=`` attribute)."""
    out_shape = elementwise_shape(q)
    return out_shape, check_dtype(q.dtype if q.dtype is not None else q.attrs.get("to"))


def select(q: ShapeCall):
    """``select(p, a, b)``: ``p`` is pred (maybe a scalar), ``a`` and ``b`` share a dtype, the result's."""
    out_shape, dtypes = elementwise_shape(q, scalar_ok=(0,)), q.dtypes
    q.require(dtypes[0] == "pred", f"select's first operand must be pred, got {dtypes[0]}")
    q.require(dtypes[1] == dtypes[2], f"select between {dtypes[1]} and {dtypes[2]}: convert one first")
    return out_shape, dtypes[1]


# -- data movement -------------------------------------------------------------


def broadcast(q: ShapeCall):
    """``broadcast``: the declared shape; operand dim i becomes output dim ``dimensions[i]``, same size."""
    q.require(q.shape is not None, "broadcast needs the result shape")
    out_shape, operand = check_shape(q.shape, q.name), q.shapes[0]
    dims = check_dims(q.attrs.get("dimensions", ()), q.name, len(out_shape))
    q.require(len(dims) == len(operand),
              f"broadcast dimensions {dims} must name one output dim per operand dim of {fmt_shape(operand)}")
    for i, dim in enumerate(dims):
        q.require(operand[i] == out_shape[dim],
                  f"operand dim {i} has size {operand[i]} but output dim {dim} has {out_shape[dim]}")
    q.attrs["dimensions"] = dims
    return out_shape, q.dtypes[0]


def same_elements(q: ShapeCall):
    """``reshape`` and ``bitcast``: the declared shape, holding as many elements as the operand."""
    q.require(q.shape is not None, f"{q.op} needs the result shape")
    out_shape, operand = check_shape(q.shape, q.name), q.shapes[0]
    q.require(prod(out_shape) == prod(operand),
              f"cannot reshape {fmt_shape(operand)} ({prod(operand)} elements) to {fmt_shape(out_shape)}")
    return out_shape, q.dtypes[0]


def transpose(q: ShapeCall):
    """``transpose``: output dim j is operand dim ``permutation[j]`` (HLO spells it ``dimensions``)."""
    operand = q.shapes[0]
    perm = check_dims(q.attrs.get("permutation", q.attrs.get("dimensions", ())), q.name, len(operand), "permutation")
    q.require(len(perm) == len(operand), f"permutation {perm} must list all {len(operand)} dims")
    q.attrs["permutation"] = perm
    q.attrs.pop("dimensions", None)
    return tuple(operand[p] for p in perm), q.dtypes[0]


def reverse(q: ShapeCall):
    """``reverse``: the operand's shape; ``dimensions`` (the ones flipped) must be dims of it."""
    q.attrs["dimensions"] = check_dims(q.attrs.get("dimensions", ()), q.name, len(q.shapes[0]))
    return q.shapes[0], q.dtypes[0]


def slice_(q: ShapeCall):
    """``slice``: ``starts:limits:strides`` per dim (stride 1 by default), inside the operand."""
    operand = q.shapes[0]
    rank, attrs = len(operand), q.attrs
    starts, limits = int_list(attrs.get("starts", ()), q.name, "starts"), int_list(attrs.get("limits", ()), q.name, "limits")
    strides = int_list(attrs.get("strides") or (1,) * rank, q.name, "strides")
    q.require(len(starts) == len(limits) == len(strides) == rank, f"slice needs {rank} start:limit:stride")
    for s, l, st, n in zip(starts, limits, strides, operand):
        q.require(0 <= s <= l <= n and st >= 1, f"slice [{s}:{l}:{st}] is outside a dim of size {n}")
    attrs.update(starts=starts, limits=limits, strides=strides)
    return tuple(-(-(l - s) // st) for s, l, st in zip(starts, limits, strides)), q.dtypes[0]


def concatenate(q: ShapeCall):
    """``concatenate``: operands of one dtype that agree outside ``dimension``, stacked along it."""
    q.require(len(q.operands) >= 1, "concatenate needs operands")
    shapes, dtypes = q.shapes, q.dtypes
    dim = q.attrs.get("dimension")
    if isinstance(dim, (tuple, list)):
        dim = dim[0]
    dim = check_dims([dim if dim is not None else 0], q.name, len(shapes[0]), "dimension")[0]
    for s in shapes:
        q.require(len(s) == len(shapes[0]) and all(a == b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != dim),
                  f"concatenate operands {[fmt_shape(s) for s in shapes]} differ outside dimension {dim}")
    q.require(len(set(dtypes)) == 1, f"concatenate of dtypes {dtypes}: convert first")
    q.attrs["dimension"] = dim
    return tuple(sum(s[dim] for s in shapes) if i == dim else n for i, n in enumerate(shapes[0])), dtypes[0]


def pad(q: ShapeCall):
    """``pad(x, value)``: a scalar pad value; ``low``, ``high`` and ``interior`` padding per dim."""
    operand, attrs = q.shapes[0], q.attrs
    rank = len(operand)
    q.require(q.shapes[1] == (), "pad value must be a scalar")
    low, high = int_list(attrs.get("low", (0,) * rank), q.name, "low"), int_list(attrs.get("high", (0,) * rank), q.name, "high")
    interior = int_list(attrs.get("interior", (0,) * rank), q.name, "interior")
    q.require(len(low) == len(high) == len(interior) == rank,
              f"pad needs low, high and interior padding for each of the {rank} dims, got {low}, {high}, {interior}")
    attrs.update(low=low, high=high, interior=interior)
    return tuple(l + h + n + max(n - 1, 0) * i for l, h, n, i in zip(low, high, operand, interior)), q.dtypes[0]


# -- reduction and the library ops ---------------------------------------------


def reduce(q: ShapeCall):
    """``reduce``: (input, init) or, for argmax/argmin, (values, indices, value init, index init).

    The reducer must fold as many values as there are inputs; inits are scalars of their
    input's dtype; ``dimensions`` (sorted here) leave the result; ``result`` picks which
    folded value a two-input reduce gives.
    """
    operands, shapes, dtypes, attrs, name = q.operands, q.shapes, q.dtypes, q.attrs, q.name
    n = len(operands) // 2
    q.require(len(operands) in (2, 4), f"reduce takes (input, init) or, for argmax/argmin, (values, "
              f"indices, value init, index init): 2 or 4 operands, got {len(operands)}")
    reducer = attrs.get("reducer")
    q.require(reducer in REDUCERS, f"reducer {reducer!r} is not one of {', '.join(REDUCERS)}")
    q.require(REDUCERS[reducer].values == n, f"reducer {reducer!r} folds {REDUCERS[reducer].values} "
              f"value(s) per element but the reduce has {n} input(s)")
    for x, init in zip(operands[:n], operands[n:]):
        q.require(init.shape == (), f"reduce init value must be a scalar, got {fmt_shape(init.shape)}")
        q.require(x.dtype == init.dtype, f"reduce of {x.dtype} with a {init.dtype} init value")
        q.require(x.shape == shapes[0], f"reduce inputs {', '.join(fmt_shape(s) for s in shapes[:n])} must "
                  "have one shape")
    q.require(reducer not in ("and", "or") or dtypes[0] == "pred",
              f"reducer {reducer!r} needs pred values, got {dtypes[0]}: compare first (x != 0), or use max/min")
    if n == 2:
        q.require(dtypes[1] != "pred" and not is_float(dtypes[1]),
                  f"{reducer} needs integer indices as its second input, got {dtypes[1]}")
    result = attrs.get("result", 0)
    q.require(is_int(result) and 0 <= result < n, f"result={result!r} must pick one of the {n} reduced values")
    dims = tuple(sorted(check_dims(attrs.get("dimensions", ()), name, len(shapes[0]))))
    attrs["dimensions"] = dims
    if n == 2:
        attrs["result"] = int(result)
    return tuple(n_ for i, n_ in enumerate(shapes[0]) if i not in dims), dtypes[result]


def dot(q: ShapeCall):
    """``dot`` (dot_general): batch dims, then lhs free dims, then rhs free dims; contracted
    and batch dims must agree in size.  The dtype is the declared one (HLO may widen)."""
    (a, b), attrs, name = q.shapes, q.attrs, q.name
    lb = check_dims(attrs.get("lhs_batch_dims", ()), name, len(a), "lhs_batch_dims")
    lc = check_dims(attrs.get("lhs_contracting_dims", (len(a) - 1,)), name, len(a), "lhs_contracting_dims")
    rb = check_dims(attrs.get("rhs_batch_dims", ()), name, len(b), "rhs_batch_dims")
    rc = check_dims(attrs.get("rhs_contracting_dims", (0,)), name, len(b), "rhs_contracting_dims")
    q.require(len(lb) == len(rb) and len(lc) == len(rc), "dot needs as many lhs as rhs batch/contracting dims")
    for x, y in zip(lb + lc, rb + rc):
        q.require(a[x] == b[y], f"dot dims do not agree: lhs {fmt_shape(a)} dim {x} vs rhs {fmt_shape(b)} dim {y}")
    attrs.update(lhs_batch_dims=lb, lhs_contracting_dims=lc, rhs_batch_dims=rb, rhs_contracting_dims=rc)
    out_shape = (tuple(a[d] for d in lb) + tuple(n for i, n in enumerate(a) if i not in lb + lc)
                 + tuple(n for i, n in enumerate(b) if i not in rb + rc))
    return out_shape, check_dtype(q.dtype) if q.dtype is not None else q.dtypes[0]


def at_least(q: ShapeCall, least: int):
    """The operand count of an op that takes a variable number of them."""
    q.require(len(q.operands) >= least, f"{q.op} takes at least {least} operand(s), got {len(q.operands)}")


def gather(q: ShapeCall):
    """``gather``: XLA's gather dimension numbers (``indexed.infer_gather`` says what each means)."""
    at_least(q, 1)
    return infer_gather(q.operands, q.attrs, q.name, int_list, check_dims)


def dynamic_slice(q: ShapeCall):
    """``dynamic-slice(x, *starts)``: a ``slice_sizes`` window of x (``indexed.infer_dynamic_slice``)."""
    at_least(q, 1)
    return infer_dynamic_slice(q.operands, q.attrs, q.name, int_list)


def dynamic_update_slice(q: ShapeCall):
    """``dynamic-update-slice(x, update, *starts)``: x's shape (``indexed.infer_dynamic_update_slice``)."""
    at_least(q, 2)
    return infer_dynamic_update_slice(q.operands, q.attrs, q.name)


def scatter(q: ShapeCall):
    """``scatter``: XLA's scatter dimension numbers (``scatter.infer_scatter``)."""
    at_least(q, 1)
    return infer_scatter(q.operands, q.attrs, q.name, int_list, check_dims)


def sort(q: ShapeCall):
    """``sort`` of one or more operands of one shape along ``dimension`` (``sorting.infer_sort``)."""
    at_least(q, 1)
    return infer_sort(q.operands, q.attrs, q.name, require)


def topk(q: ShapeCall):
    """``topk``: the ``k`` largest (or smallest) along the last dim (``sorting.infer_topk``)."""
    at_least(q, 1)
    return infer_topk(q.operands, q.attrs, q.name, require)


def reduce_window(q: ShapeCall):
    """``reduce-window``: windows, strides and padding per dim (``windows.infer_reduce_window``)."""
    at_least(q, 1)
    return infer_reduce_window(q.operands, q.attrs, q.name, int_list)
