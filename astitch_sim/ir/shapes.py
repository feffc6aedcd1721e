"""Shape and dtype inference: what each op's result must look like.

The builder uses it to fill in result shapes; the HLO importer uses it to check
that the shape HLO declares for an instruction is the one its operands imply
(a mismatch is bad input, reported with the instruction's name).

What one op's result looks like is its row's ``shape`` rule in the op table
(``ops.py``; the rules are in ``shape_rules.py``): :func:`infer` looks it up and
adds the checks every op shares.
"""
from __future__ import annotations

from typing import Optional

from .dtypes import check_dtype
from ..errors import AStitchError
from .ops import op_def
from .shape_checks import MAX_ELEMENTS, ShapeCall, check_shape, fmt_shape, int_list, is_int, require

#: the checks graph builders use on their own arguments, re-exported from ``shape_checks``
__all__ = ["infer", "check_shape", "int_list", "is_int", "MAX_ELEMENTS", "shape_str"]


def shape_str(shape, dtype: Optional[str] = None) -> str:
    """``f32[16,8]`` -- the way HLO and jaxprs print a tensor type."""
    return f"{dtype or ''}[{','.join(str(s) for s in shape)}]"


def infer(op: str, operands, attrs: dict, name: str, shape=None, dtype=None):
    """Return ``(shape, dtype)`` of ``op`` applied to ``operands`` (Nodes) with ``attrs``.

    ``shape``/``dtype`` are what the caller declared (HLO always declares them);
    sources need them, and for other ops they are checked against the inferred ones.
    Raises AStitchError naming ``name`` when operands do not fit together.
    """
    d = op_def(op)
    if d.arity is not None:
        require(len(operands) == d.arity, name, f"{op} takes {d.arity} operand(s), got {len(operands)}")
    out_shape, out_dtype = d.shape(ShapeCall(op, tuple(operands), attrs, name, shape, dtype))
    if shape is not None and check_shape(shape, name, "declared shape") != tuple(out_shape):
        raise AStitchError(f"{name}: declared shape {fmt_shape(shape)} but {op} of "
                           f"{', '.join(fmt_shape(o.shape) for o in operands) or 'nothing'} gives "
                           f"{fmt_shape(out_shape)}")
    if dtype is not None and check_dtype(dtype) != out_dtype:
        raise AStitchError(f"{name}: declared dtype {dtype} but {op} of {', '.join(o.dtype for o in operands)} "
                           f"gives {out_dtype}")
    return tuple(out_shape), out_dtype
