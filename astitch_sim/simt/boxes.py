"""Values under a mask that is a box: computed only inside it.

A concatenate reads each operand over the whole domain, masked to the operand's own range of the joined dim
(``index_rules.concatenate``: outside it the index is clipped and the lanes idle); a pad reads its operand
masked to the inside.  The counters follow the mask (a masked lane loads nothing, computes nothing), but numpy
computes every element of an array: rotary embedding's two halves of ``q``, joined along the head dim, each
ran their products and the gather of ``q`` over both halves -- twice the arithmetic the numpy reference does.

Where the mask is a box (on exactly a range of each dim, :func:`mask_box`), two things are done inside the box
only (:func:`inside`):

* a load through the operand's clipped index: the index cut to the box is a slice, so the tensor's own memory
  is taken through steps and placed in an array of the full shape, zero outside the box (:func:`placed`),
  instead of numpy's gather over the whole domain (rotary's ``q``: a third of the time);
* a concatenate whose operands' masks are all boxes is assembled by copying each operand's box into one array
  (the boxes tile the domain) instead of one ``np.where`` over the whole domain per operand.

The values outside a box are never used: the mask's owner (the concatenate, the pad's ``np.where``, the
dynamic-update-slice's) takes the other branch there, and a value is memoised with its mask, so no unmasked
reader sees them.  Inside, the values are the same numbers.  The counters are untouched: every access is still
counted with its full index and its mask.  Elementwise ops under the mask still compute the whole domain:
placing a box result back costs a zero-filled array, more than the half of an add or a multiply it would save.
"""
from __future__ import annotations

import numpy as np

#: the most elements a mask may have for :func:`mask_box` to check it (masks of index lines are small; a mask the
#: size of a whole domain is checked no further: computing everywhere is then the cheaper)
BOX_CHECK_MAX = 1 << 16


def mask_box(mask):
    """``mask`` as a box, one slice per dim (``slice(None)``: the whole dim), or None where it is no box, is
    on everywhere (nothing to skip) or nowhere, or has more than :data:`BOX_CHECK_MAX` elements."""
    m = np.asarray(mask)
    if m.dtype != bool or m.ndim == 0 or m.size > BOX_CHECK_MAX:
        return None
    box = []
    for ax in range(m.ndim):
        line = m.any(axis=tuple(a for a in range(m.ndim) if a != ax)) if m.ndim > 1 else m
        on = np.flatnonzero(line)
        if on.size == 0:
            return None
        lo, hi = int(on[0]), int(on[-1]) + 1
        if hi - lo != on.size:
            return None                     # a gap: no box
        box.append(slice(None) if (lo, hi) == (0, m.shape[ax]) else slice(lo, hi))
    box = tuple(box)
    if all(s == slice(None) for s in box):
        return None
    want = np.zeros(m.shape, dtype=bool)
    want[box] = True
    return box if np.array_equal(want, m) else None


def inside(box: tuple, shapes: list):
    """The box as a slice of a value of the broadcast of ``shapes`` (the box's dims aligned right; a dim of
    extent 1 is taken whole), or None where that slice keeps every element (nothing to skip) or the value has
    fewer dims than the box."""
    shape = np.broadcast_shapes(*shapes)
    if len(box) > len(shape):
        return None
    full = (slice(None),) * (len(shape) - len(box)) + tuple(box)
    sl = tuple(s if n > 1 else slice(None) for s, n in zip(full, shape))
    if all(s == slice(None) for s in sl):
        return None
    return shape, sl


def cut(a, sl: tuple):
    """``a`` (broadcastable over a value whose slice is ``sl``) cut to the slice: each of its dims of extent
    above 1 sliced as ``sl`` says (aligned right); a scalar as it is."""
    if np.ndim(a) == 0:
        return a
    sub = sl[len(sl) - np.ndim(a):]
    return a[tuple(s if n > 1 else slice(None) for s, n in zip(sub, np.shape(a)))]


def placed(shape: tuple, sl: tuple, part) -> np.ndarray:
    """An array of ``shape``, ``part`` in the slice ``sl`` and zero elsewhere."""
    part = np.asarray(part)
    out = np.zeros(shape, dtype=part.dtype)
    out[sl] = part
    return out
