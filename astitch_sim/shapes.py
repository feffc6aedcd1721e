"""Shape and dtype inference: what each op's result must look like.

The builder uses it to fill in result shapes; the HLO importer uses it to check
that the shape HLO declares for an instruction is the one its operands imply
(a mismatch is bad input, reported with the instruction's name).
"""
from __future__ import annotations

from math import prod

import numpy as np

from .dtypes import check_dtype, is_float
from .indexed import infer_dynamic_slice, infer_dynamic_update_slice, infer_gather
from .scatter import infer_scatter
from .sorting import infer_sort, infer_topk
from .windows import infer_reduce_window
from .errors import AStitchError
from .ops import COMPARE_DIRECTIONS, op_def
from .reducers import REDUCERS


def _fmt(shape, dtype=None):
    body = "[" + ",".join(str(d) for d in shape) + "]"
    return (dtype or "") + body


def _require(cond, name, message):
    if not cond:
        raise AStitchError(f"{name}: {message}")


#: largest tensor, in elements: CUDA indexes a grid with 32-bit ints, and numpy must hold it
MAX_ELEMENTS = 2**31 - 1


def is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def int_list(value, name, what):
    """A tuple of python ints from a sequence of ints (no bools, floats, strings or None)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, np.ndarray, range)):
        raise AStitchError(f"{name}: {what} must be a tuple of integers, got {value!r}")
    if not all(is_int(v) for v in value):
        raise AStitchError(f"{name}: {what} {tuple(value)!r} must all be integers")
    return tuple(int(v) for v in value)


def check_shape(shape, name, what="shape"):
    """A static shape: a tuple of non-negative ints whose product fits ``MAX_ELEMENTS``."""
    dims = int_list(shape, name, what)
    _require(all(d >= 0 for d in dims), name, f"{what} {_fmt(dims)} has a negative dimension")
    _require(prod(dims) <= MAX_ELEMENTS, name,
             f"{what} {_fmt(dims)} has {prod(dims)} elements, more than the {MAX_ELEMENTS} one tensor may hold "
             "(32-bit indexing); use a smaller shape")
    return dims


def _dims(value, name, rank, what="dimensions"):
    dims = int_list(value, name, what)
    _require(all(0 <= d < rank for d in dims), name, f"{what} {dims} out of range for rank {rank}")
    _require(len(set(dims)) == len(dims), name, f"{what} {dims} repeat a dimension")
    return dims


def infer(op: str, operands, attrs: dict, name: str, shape=None, dtype=None):
    """Return ``(shape, dtype)`` of ``op`` applied to ``operands`` (Nodes) with ``attrs``.

    ``shape``/``dtype`` are what the caller declared (HLO always declares them);
    sources need them, and for other ops they are checked against the inferred ones.
    Raises AStitchError naming ``name`` when operands do not fit together.
    """
    d = op_def(op)
    if d.arity is not None:
        _require(len(operands) == d.arity, name, f"{op} takes {d.arity} operand(s), got {len(operands)}")
    shapes = [tuple(o.shape) for o in operands]
    dtypes = [o.dtype for o in operands]
    out_shape, out_dtype = None, None

    if d.kind == "source":
        _require(shape is not None and dtype is not None, name, f"{op} needs an explicit shape and dtype")
        out_shape, out_dtype = check_shape(shape, name), check_dtype(dtype)
        if op == "constant" and "value" in attrs and np.shape(attrs["value"]) != out_shape:
            raise AStitchError(f"{name}: constant value has shape {_fmt(np.shape(attrs['value']))} but the node "
                               f"is declared {_fmt(out_shape, out_dtype)}")
        if op == "iota":
            attrs["iota_dimension"] = _dims([attrs.get("iota_dimension", 0)], name, len(out_shape),
                                            "iota_dimension")[0]
    elif d.kind == "elementwise":
        full = [s for s in shapes if s != ()] or [()]
        out_shape = full[0]
        scalar_ok = {"clamp": (0, 2), "select": (0,)}.get(op, ())
        for i, s in enumerate(shapes):
            _require(s == out_shape or (s == () and i in scalar_ok), name,
                     f"operand shapes {', '.join(_fmt(x, t) for x, t in zip(shapes, dtypes))} do not agree; "
                     "elementwise ops need equal shapes: broadcast the smaller operand first")
        if op == "compare":
            _require(attrs.get("direction") in COMPARE_DIRECTIONS, name,
                     f"compare needs direction= one of {COMPARE_DIRECTIONS}, got {attrs.get('direction')!r}")
            _require(attrs.get("type") in (None, "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"), name,
                     f"compare type={attrs.get('type')!r} is not FLOAT, TOTALORDER, SIGNED or UNSIGNED")
            _require(dtypes[0] == dtypes[1], name, f"compare of {dtypes[0]} with {dtypes[1]}: convert one first")
            out_dtype = "pred"
        elif op == "convert":
            out_dtype = check_dtype(dtype if dtype is not None else attrs.get("to"))
        elif op == "select":
            _require(dtypes[0] == "pred", name, f"select's first operand must be pred, got {dtypes[0]}")
            _require(dtypes[1] == dtypes[2], name, f"select between {dtypes[1]} and {dtypes[2]}: convert one first")
            out_dtype = dtypes[1]
        else:
            _require(len(set(dtypes)) == 1, name,
                     f"operands have dtypes {dtypes}; {op} needs one dtype: insert a convert")
            out_dtype = dtypes[0]
            if op == "is-finite":
                out_dtype = "pred"
    elif op == "broadcast":
        _require(shape is not None, name, "broadcast needs the result shape")
        out_shape = check_shape(shape, name)
        dims = _dims(attrs.get("dimensions", ()), name, len(out_shape))
        _require(len(dims) == len(shapes[0]), name,
                 f"broadcast dimensions {dims} must name one output dim per operand dim of {_fmt(shapes[0])}")
        for i, dim in enumerate(dims):
            _require(shapes[0][i] == out_shape[dim], name,
                     f"operand dim {i} has size {shapes[0][i]} but output dim {dim} has {out_shape[dim]}")
        attrs["dimensions"] = dims
        out_dtype = dtypes[0]
    elif op in ("reshape", "bitcast"):
        _require(shape is not None, name, f"{op} needs the result shape")
        out_shape = check_shape(shape, name)
        _require(prod(out_shape) == prod(shapes[0]), name,
                 f"cannot reshape {_fmt(shapes[0])} ({prod(shapes[0])} elements) to {_fmt(out_shape)}")
        out_dtype = dtypes[0]
    elif op == "transpose":
        perm = _dims(attrs.get("permutation", attrs.get("dimensions", ())), name, len(shapes[0]), "permutation")
        _require(len(perm) == len(shapes[0]), name, f"permutation {perm} must list all {len(shapes[0])} dims")
        attrs["permutation"] = perm
        attrs.pop("dimensions", None)
        out_shape, out_dtype = tuple(shapes[0][p] for p in perm), dtypes[0]
    elif op == "reverse":
        attrs["dimensions"] = _dims(attrs.get("dimensions", ()), name, len(shapes[0]))
        out_shape, out_dtype = shapes[0], dtypes[0]
    elif op == "slice":
        rank = len(shapes[0])
        starts, limits = int_list(attrs.get("starts", ()), name, "starts"), int_list(attrs.get("limits", ()), name, "limits")
        strides = int_list(attrs.get("strides") or (1,) * rank, name, "strides")
        _require(len(starts) == len(limits) == len(strides) == rank, name, f"slice needs {rank} start:limit:stride")
        for s, l, st, n in zip(starts, limits, strides, shapes[0]):
            _require(0 <= s <= l <= n and st >= 1, name, f"slice [{s}:{l}:{st}] is outside a dim of size {n}")
        attrs.update(starts=starts, limits=limits, strides=strides)
        out_shape = tuple(-(-(l - s) // st) for s, l, st in zip(starts, limits, strides))
        out_dtype = dtypes[0]
    elif op == "concatenate":
        _require(len(operands) >= 1, name, "concatenate needs operands")
        dim = attrs.get("dimension")
        if isinstance(dim, (tuple, list)):
            dim = dim[0]
        dim = _dims([dim if dim is not None else 0], name, len(shapes[0]), "dimension")[0]
        for s in shapes:
            _require(len(s) == len(shapes[0]) and all(a == b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != dim),
                     name, f"concatenate operands {[_fmt(s) for s in shapes]} differ outside dimension {dim}")
        _require(len(set(dtypes)) == 1, name, f"concatenate of dtypes {dtypes}: convert first")
        attrs["dimension"] = dim
        out_shape = tuple(sum(s[dim] for s in shapes) if i == dim else n for i, n in enumerate(shapes[0]))
        out_dtype = dtypes[0]
    elif op == "pad":
        rank = len(shapes[0])
        _require(shapes[1] == (), name, "pad value must be a scalar")
        low, high = int_list(attrs.get("low", (0,) * rank), name, "low"), int_list(attrs.get("high", (0,) * rank), name, "high")
        interior = int_list(attrs.get("interior", (0,) * rank), name, "interior")
        _require(len(low) == len(high) == len(interior) == rank, name,
                 f"pad needs low, high and interior padding for each of the {rank} dims, got {low}, {high}, {interior}")
        attrs.update(low=low, high=high, interior=interior)
        out_shape = tuple(l + h + n + max(n - 1, 0) * i for l, h, n, i in zip(low, high, shapes[0], interior))
        out_dtype = dtypes[0]
    elif op == "reduce":
        n = len(operands) // 2
        _require(len(operands) in (2, 4), name, f"reduce takes (input, init) or, for argmax/argmin, (values, "
                 f"indices, value init, index init): 2 or 4 operands, got {len(operands)}")
        reducer = attrs.get("reducer")
        _require(reducer in REDUCERS, name, f"reducer {reducer!r} is not one of {', '.join(REDUCERS)}")
        _require(REDUCERS[reducer].values == n, name, f"reducer {reducer!r} folds {REDUCERS[reducer].values} "
                 f"value(s) per element but the reduce has {n} input(s)")
        for x, init in zip(operands[:n], operands[n:]):
            _require(init.shape == (), name, f"reduce init value must be a scalar, got {_fmt(init.shape)}")
            _require(x.dtype == init.dtype, name, f"reduce of {x.dtype} with a {init.dtype} init value")
            _require(x.shape == shapes[0], name, f"reduce inputs {', '.join(_fmt(s) for s in shapes[:n])} must "
                     "have one shape")
        _require(reducer not in ("and", "or") or dtypes[0] == "pred", name,
                 f"reducer {reducer!r} needs pred values, got {dtypes[0]}: compare first (x != 0), or use max/min")
        if n == 2:
            _require(dtypes[1] != "pred" and not is_float(dtypes[1]), name,
                     f"{reducer} needs integer indices as its second input, got {dtypes[1]}")
        result = attrs.get("result", 0)
        _require(is_int(result) and 0 <= result < n, name, f"result={result!r} must pick one of the {n} "
                 "reduced values")
        dims = tuple(sorted(_dims(attrs.get("dimensions", ()), name, len(shapes[0]))))
        attrs["dimensions"] = dims
        if n == 2:
            attrs["result"] = int(result)
        out_shape = tuple(n_ for i, n_ in enumerate(shapes[0]) if i not in dims)
        out_dtype = dtypes[result]
    elif op in _TABLE_RULES:
        least = _LEAST_OPERANDS.get(op, 1)
        _require(len(operands) >= least, name, f"{op} takes at least {least} operand(s), got {len(operands)}")
        out_shape, out_dtype = _TABLE_RULES[op](operands, attrs, name)
    elif op == "dot":
        a, b = shapes
        lb = _dims(attrs.get("lhs_batch_dims", ()), name, len(a), "lhs_batch_dims")
        lc = _dims(attrs.get("lhs_contracting_dims", (len(a) - 1,)), name, len(a), "lhs_contracting_dims")
        rb = _dims(attrs.get("rhs_batch_dims", ()), name, len(b), "rhs_batch_dims")
        rc = _dims(attrs.get("rhs_contracting_dims", (0,)), name, len(b), "rhs_contracting_dims")
        _require(len(lb) == len(rb) and len(lc) == len(rc), name, "dot needs as many lhs as rhs batch/contracting dims")
        for x, y in zip(lb + lc, rb + rc):
            _require(a[x] == b[y], name, f"dot dims do not agree: lhs {_fmt(a)} dim {x} vs rhs {_fmt(b)} dim {y}")
        attrs.update(lhs_batch_dims=lb, lhs_contracting_dims=lc, rhs_batch_dims=rb, rhs_contracting_dims=rc)
        out_shape = (tuple(a[d] for d in lb) + tuple(n for i, n in enumerate(a) if i not in lb + lc)
                     + tuple(n for i, n in enumerate(b) if i not in rb + rc))
        out_dtype = check_dtype(dtype) if dtype is not None else dtypes[0]
    else:  # pragma: no cover - every op row has a rule above
        raise AStitchError(f"{name}: no shape rule for op {op!r}")

    if shape is not None and check_shape(shape, name, "declared shape") != tuple(out_shape):
        raise AStitchError(f"{name}: declared shape {_fmt(shape)} but {op} of "
                           f"{', '.join(_fmt(s) for s in shapes) or 'nothing'} gives {_fmt(out_shape)}")
    if dtype is not None and op != "dot" and check_dtype(dtype) != out_dtype:
        raise AStitchError(f"{name}: declared dtype {dtype} but {op} of {', '.join(dtypes)} gives {out_dtype}")
    return tuple(out_shape), out_dtype


#: shape rules of the indexed and library ops, kept next to each op's semantics
_TABLE_RULES = {
    "gather": lambda ops, attrs, name: infer_gather(ops, attrs, name, int_list, _dims),
    "dynamic-slice": lambda ops, attrs, name: infer_dynamic_slice(ops, attrs, name, int_list),
    "dynamic-update-slice": infer_dynamic_update_slice,
    "scatter": lambda ops, attrs, name: infer_scatter(ops, attrs, name, int_list, _dims),
    "sort": lambda ops, attrs, name: infer_sort(ops, attrs, name, _require),
    "topk": lambda ops, attrs, name: infer_topk(ops, attrs, name, _require),
    "reduce-window": lambda ops, attrs, name: infer_reduce_window(ops, attrs, name, int_list),
}
_LEAST_OPERANDS = {"dynamic-update-slice": 2}
