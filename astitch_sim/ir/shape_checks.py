"""The checks every shape rule is made of, and the question each rule answers.

A leaf module (it imports nothing of ours but the errors and dtypes), so that the
op table (``ops.py``), the shape rules it names (``shape_rules.py``) and
``shapes.infer`` can all use it without importing each other in a circle.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional

import numpy as np

from ..errors import AStitchError

#: largest tensor, in elements: CUDA indexes a grid with 32-bit ints, and numpy must hold it
MAX_ELEMENTS = 2**31 - 1


def fmt_shape(shape, dtype=None) -> str:
    """``f32[4,8]`` (or ``[4,8]`` without a dtype): how every shape message writes a shape."""
    body = "[" + ",".join(str(d) for d in shape) + "]"
    return (dtype or "") + body


def require(cond, name, message):
    """Raise ``AStitchError("name: message")`` unless ``cond``: the one way a rule rejects input."""
    if not cond:
        raise AStitchError(f"{name}: {message}")


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
    require(all(d >= 0 for d in dims), name, f"{what} {fmt_shape(dims)} has a negative dimension")
    require(prod(dims) <= MAX_ELEMENTS, name,
            f"{what} {fmt_shape(dims)} has {prod(dims)} elements, more than the {MAX_ELEMENTS} one tensor may hold "
            "(32-bit indexing); use a smaller shape")
    return dims


def check_dims(value, name, rank, what="dimensions"):
    """Dimension numbers of a rank-``rank`` tensor: integers in ``[0, rank)``, none repeated."""
    dims = int_list(value, name, what)
    require(all(0 <= d < rank for d in dims), name, f"{what} {dims} out of range for rank {rank}")
    require(len(set(dims)) == len(dims), name, f"{what} {dims} repeat a dimension")
    return dims


@dataclass
class ShapeCall:
    """One question to a shape rule: what does ``op`` of these ``operands`` with ``attrs`` give?

    ``op`` is the name the caller used (an alias such as ``exp`` stays ``exp`` in messages);
    ``name`` is the node's name, which every error message starts with; ``shape`` and
    ``dtype`` are what the caller declared, or None.  A rule may normalise ``attrs`` in
    place (sorted reduce dimensions, a default stride...): the node keeps them.
    """
    op: str
    operands: tuple
    attrs: dict
    name: str
    shape: Optional[tuple] = None
    dtype: Optional[str] = None

    @property
    def shapes(self) -> list:
        return [tuple(o.shape) for o in self.operands]

    @property
    def dtypes(self) -> list:
        return [o.dtype for o in self.operands]

    def require(self, cond, message):
        require(cond, self.name, message)
