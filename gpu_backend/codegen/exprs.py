"""Tiny index-expression algebra for the code generator.

An index expression is either a Python ``int`` (known while generating) or a
string of Python source.  The helpers fold constants (``x * 1 -> x``,
``x // 1 -> x``, ``x % 1 -> 0``, ``0 + x -> x``) so the generated index
arithmetic reads like hand-written code: ``d0 * 32 + d1``, not
``(d0 * 32 + 0) + d1 * 1``.
"""
from __future__ import annotations

import re

_ATOM = re.compile(r"[A-Za-z_][\w.]*(\[[^\[\]]*\])?|\d+")


def atom(x) -> str:
    """``x`` as source, parenthesised unless it is a name, a number or a subscript."""
    s = str(x)
    if isinstance(x, int) and x < 0:
        return f"({s})"
    return s if _ATOM.fullmatch(s) else f"({s})"


def add(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if a == 0:
        return b
    if b == 0:
        return a
    if isinstance(b, int) and b < 0:
        return f"{a} - {-b}"
    return f"{a} + {b}"


def sub(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if b == 0:
        return a
    return f"{a} - {atom(b)}"


def mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 0 or b == 0:
        return 0
    if a == 1:
        return b
    if b == 1:
        return a
    return f"{atom(a)} * {atom(b)}"


def floordiv(a, b: int):
    if isinstance(a, int):
        return a // b
    if b == 1:
        return a
    return f"{atom(a)} // {b}"


def mod(a, b: int):
    if isinstance(a, int):
        return a % b
    if b == 1:
        return 0
    return f"{atom(a)} % {b}"


def ravel(idx, shape) -> object:
    """Row-major flat position of index ``idx`` (expressions) in ``shape``."""
    out, stride = 0, 1
    terms = []
    for x, n in reversed(list(zip(idx, shape))):
        if n != 1:
            terms.append(mul(x, stride))
        stride *= n
    for t in reversed(terms):
        out = add(out, t)
    return out


def unravel(flat, shape, bounded: bool = True) -> tuple:
    """Index in ``shape`` of row-major position ``flat``.

    ``bounded``: ``flat`` is known to be ``< prod(shape)``, so the outermost
    dim needs no ``% size``.
    """
    out = []
    stride = 1
    strides = []
    for n in reversed(shape):
        strides.append(stride)
        stride *= n
    strides.reverse()
    for d, (n, st) in enumerate(zip(shape, strides)):
        if n == 1:
            out.append(0)
            continue
        q = floordiv(flat, st)
        outermost = all(m == 1 for m in shape[:d])
        out.append(q if (outermost and bounded) else mod(q, n))
    return tuple(out)


def lt(a, n: int):
    """``a < n`` as source, or True/False when known."""
    if isinstance(a, int):
        return a < n
    return f"{a} < {n}"


def all_of(conds) -> object:
    """Conjunction of conditions, dropping the ones known true; False if one is known false."""
    parts = []
    for c in conds:
        if c is True:
            continue
        if c is False:
            return False
        parts.append(c)
    if not parts:
        return True
    return " and ".join(parts)


def reshape_index(idx, out_shape, in_shape) -> tuple:
    """Index into ``in_shape`` read by a reshape to ``out_shape`` evaluated at ``idx``.

    Row-major reshape keeps the flat position.  Dims are matched in groups whose sizes
    multiply to the same product ([2,4,8] -> [8,8]: (2,4)<->(8,), (8,)<->(8,)), and each
    group is re-raveled on its own, so squeezes and merges give short expressions.
    """
    out_shape, in_shape = list(out_shape), list(in_shape)
    result = []
    i = j = 0
    while i < len(out_shape) or j < len(in_shape):
        gi, gj = [i], [j]
        pi = out_shape[i] if i < len(out_shape) else 1
        pj = in_shape[j] if j < len(in_shape) else 1
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                pi *= out_shape[i]
                gi.append(i)
                i += 1
            else:
                pj *= in_shape[j]
                gj.append(j)
                j += 1
        # absorb trailing size-1 dims into this group
        while i < len(out_shape) and out_shape[i] == 1 and (j >= len(in_shape) or in_shape[j] != 1):
            gi.append(i)
            i += 1
        while j < len(in_shape) and in_shape[j] == 1 and (i >= len(out_shape) or out_shape[i] != 1):
            gj.append(j)
            j += 1
        gi = [d for d in gi if d < len(out_shape)]
        gj = [d for d in gj if d < len(in_shape)]
        flat = ravel([idx[d] for d in gi], [out_shape[d] for d in gi])
        result.extend(unravel(flat, [in_shape[d] for d in gj]))
    return tuple(result)
