"""Index propagation: which operand element does an op read for a given output element?

This is the element-level view of the paper.  Evaluating an op at output index
``idx`` reads each operand at an index this module computes: the same index for
elementwise ops (one-to-one), fewer dims for a broadcast (one-to-many: many
output elements read one operand element), a permuted one for a transpose, an
offset one for a slice...  The compiler uses it to check block locality, the
SIMT model to know which thread reads which address, the code generator to
write the index arithmetic.

Indices are tuples of numpy integer arrays (one per dim), so a whole stage is
propagated at once.  ``mask`` (for concatenate and pad) says which elements
really read that operand.

Indexed ops (gather, dynamic-slice, dynamic-update-slice) read some operands at
indices that are *values*: :func:`operand_index` (the compiler's view, before
any value exists) answers ``None`` -- "anywhere" -- for those, and
:func:`runtime_operand_index` computes them from the values (the SIMT model).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .errors import AStitchError
from .flatindex import ravel, unravel


def operand_index(node, i: int, idx: tuple) -> tuple[tuple, Optional[np.ndarray]]:
    """Index into operand ``i`` of ``node`` read when ``node`` is evaluated at ``idx``.

    For a reduce, ``idx`` is an index into its *input* (the reduce is evaluated
    per input element while it accumulates); its init value is a scalar.
    """
    op, operand = node.op, node.operands[i]
    if operand.rank == 0:
        return (), None
    kind = node.kind
    if kind == "elementwise" or op == "reduce" and i < len(node.operands) // 2:
        return idx, None
    if kind == "indexed":
        if op == "dynamic-update-slice" and i == 0:
            return idx, None           # the operand where the update is not (a superset: every element)
        return None, None              # read where index values say: unknown before run time
    if op == "broadcast":
        return tuple(idx[d] for d in node.attrs["dimensions"]), None
    if op in ("reshape", "bitcast"):
        flat = ravel(idx, node.shape) if node.rank else np.zeros_like(idx[0] if idx else 0)
        return tuple(unravel(flat, operand.shape)), None
    if op == "transpose":
        perm = node.attrs["permutation"]
        out = [None] * len(perm)
        for j, p in enumerate(perm):
            out[p] = idx[j]
        return tuple(out), None
    if op == "reverse":
        dims = set(node.attrs["dimensions"])
        return tuple(operand.shape[d] - 1 - x if d in dims else x for d, x in enumerate(idx)), None
    if op == "slice":
        return tuple(s + x * st for x, s, st in zip(idx, node.attrs["starts"], node.attrs["strides"])), None
    if op == "concatenate":
        dim = node.attrs["dimension"]
        start = sum(o.shape[dim] for o in node.operands[:i])
        pos = idx[dim] - start
        mask = (pos >= 0) & (pos < operand.shape[dim])
        return tuple(np.clip(pos, 0, operand.shape[dim] - 1) if d == dim else x for d, x in enumerate(idx)), mask
    if op == "pad":
        if i == 1:
            return (), None
        pos = tuple(x - lo for x, lo in zip(idx, node.attrs["low"]))
        mask = np.ones(np.broadcast_shapes(*(np.shape(x) for x in idx)), dtype=bool)
        for p, n in zip(pos, operand.shape):
            mask &= (p >= 0) & (p < n)
        return tuple(np.clip(p, 0, n - 1) for p, n in zip(pos, operand.shape)), mask
    raise AStitchError(f"{node.name}: cannot propagate an index through {op} (it is not fusible)")


def runtime_operand_index(node, i: int, idx: tuple, fetch) -> tuple[tuple, Optional[np.ndarray]]:
    """:func:`operand_index` for the operands an indexed op reads at value-dependent indices.

    ``fetch(j, index)`` is the value of operand ``j`` at ``index`` (the index operands);
    the result is clipped into the operand (a masked-out element still needs a legal index).
    """
    from . import indexed
    op = node.op
    clamp = lambda v, lo, hi: np.clip(np.asarray(v).astype(np.int64), lo, hi)     # noqa: E731
    if op == "gather" and i == 0:
        return indexed.gather_index(node, idx, lambda w: fetch(1, w), np.add, clamp), None
    if op == "dynamic-slice" and i == 0:
        return indexed.dynamic_slice_index(node, idx, lambda j: fetch(j, ()), np.add, clamp), None
    if op == "dynamic-update-slice":
        upd = node.operands[1]
        starts = indexed.dynamic_starts(node, upd.shape, lambda j: fetch(j, ()), clamp)
        pos = [np.asarray(x) - s for x, s in zip(idx, starts)]
        inside = np.ones(np.broadcast_shapes(*(np.shape(p) for p in pos)), dtype=bool)
        for p, n in zip(pos, upd.shape):
            inside = inside & (p >= 0) & (p < n)
        if i == 0:
            return idx, ~inside
        return tuple(np.clip(p, 0, max(n - 1, 0)) for p, n in zip(pos, upd.shape)), inside
    return operand_index(node, i, idx)
