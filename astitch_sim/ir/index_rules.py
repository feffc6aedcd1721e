"""The index rules the op table names: which operand element an output element reads.

Every fusible row of the op table (``ops.py``) names its rule in the ``index`` column;
``indexing.operand_index`` looks it up.  A rule is ``rule(node, i, idx) -> (index, mask)``:
``idx`` is a tuple of integer arrays (one per output dim, a whole stage at once), ``index``
the tuple that operand ``i`` is read at, and ``mask`` (or None: everywhere) says which
elements really read that operand (concatenate and pad read one of several).  Operands of
rank 0 never reach a rule: a scalar is read at ``()``.

Indexed ops also name a ``runtime_index`` rule, ``rule(node, i, idx, fetch)``, for the
SIMT model, which has the index values: ``fetch(j, index)`` is operand ``j`` at ``index``.
It answers None for an operand whose reading does not depend on values (then the
static rule's answer holds).  Indices read from values are clamped into the operand,
as XLA does, and a masked-out element still gets a legal index.
"""
from __future__ import annotations

import numpy as np

from . import indexed
from ..errors import AStitchError
from .flatindex import ravel, row_major_strides, unravel


def same_index(node, i, idx):
    """Elementwise (one-to-one): every operand is read at the output's own index."""
    return idx, None


def reduce_input(node, i, idx):
    """A reduce is evaluated per *input* element while it accumulates: ``idx`` indexes its inputs.

    Its init values are scalars; a non-scalar one has no element-level reading."""
    if i < len(node.operands) // 2:
        return idx, None
    return cannot_propagate(node, i, idx)


def at_runtime(node, i, idx):
    """An indexed op reads where its index *values* say: unknown before run time (``None``:
    anywhere); ``indexing.runtime_operand_index`` computes it from the values."""
    return None, None


def update_or_runtime(node, i, idx):
    """dynamic-update-slice: the operand is read at the output's index (a superset: every
    element, also where the update lands); the update and starts at run time."""
    if i == 0:
        return idx, None
    return at_runtime(node, i, idx)


def broadcast(node, i, idx):
    """One-to-many: the operand has only the output dims listed in ``dimensions``."""
    return tuple(idx[d] for d in node.attrs["dimensions"]), None


def same_flat_position(node, i, idx):
    """reshape and bitcast: the element at the same row-major position of the operand.

    Dim by dim where the two shapes split into groups of equal size (``(32, 512, 3072)`` from
    ``(16384, 3072)``: the first two output dims make the operand's first): each group is ravelled and
    unravelled on its own, so an index that varies along few dims stays that small -- the same numbers
    as going through one flat position of the whole domain, which at 50M elements is a 400 MB array per
    dim of the operand."""
    return reshape_index(idx, node.shape, node.operands[i].shape), None


def reshape_index(idx: tuple, shape, src) -> tuple:
    """The index into a tensor of shape ``src`` at the row-major positions of ``idx`` (an index into ``shape``,
    of as many elements): :func:`same_flat_position`'s arithmetic, also how a stage finds the index of an op that
    is its domain reshaped (``flatindex.reshapes``) at each domain element."""
    shape, src = tuple(shape), tuple(src)
    if shape == src:
        return tuple(idx)
    groups = dim_groups(shape, src)
    if groups is None:
        flat = ravel(idx, shape) if shape else np.zeros_like(idx[0] if idx else 0)
        return tuple(unravel(flat, src))
    out = []
    for o, s in groups:
        refined = _through_common_factors([idx[k] for k in o], [shape[k] for k in o], [src[k] for k in s])
        if refined is not None:
            out += refined
            continue
        flat = ravel([idx[k] for k in o], [shape[k] for k in o]) if o else np.zeros((), np.int64)
        out += unravel(flat, [src[k] for k in s])
    return tuple(out)


def _through_common_factors(idx: list, shape: list, src: list):
    """:func:`reshape_index` of one group of dims through the factors both shapes are made of, or None.

    ``[4096, 1024]`` read as ``[1024, 4096]``: both are ``[1024, 4, 1024]`` (the row-major boundaries of one,
    1024 and 4096 elements, divide those of the other), so the first index is ``i0 // 4`` and the second
    ``(i0 % 4) * 1024 + i1``: each factor's coordinate comes from one dim's index, which varies along its own
    dims only, and a result index is as large as the dims its factors come from -- not one flat position of
    the whole domain, divided again per dim (4M-element arrays for a stage over a view of a ``[4096, 1024]``
    optimizer state).  None where one shape's boundaries do not divide the other's (``[6, 10]`` as ``[4, 15]``)
    or a group has one dim on each side (nothing to gain)."""
    if len(shape) < 2 and len(src) < 2:
        return None
    # the row-major boundaries: elements under each dim and the dim itself, of both shapes (one element: none)
    bounds = sorted({st * int(n) for dims in (shape, src) for st, n in zip(row_major_strides(dims), dims)} - {1})
    if not bounds or any(b % a for a, b in zip([1] + bounds, bounds)):
        return None
    # factor k spans elements bounds[k-1] .. bounds[k] (row-major, innermost first): its coordinate in a dim
    # whose inner elements are `inner` is (index // (bounds[k-1] // inner)) % (bounds[k] // bounds[k-1])
    lows = [1] + bounds[:-1]
    inner_of = row_major_strides(shape)        # elements under each dim
    coords = []
    for lo, hi in zip(lows, bounds):
        d = next(d for d in range(len(shape)) if inner_of[d] <= lo and hi <= inner_of[d] * int(shape[d]))
        a = np.asarray(idx[d], dtype=np.int64)
        step, size = lo // inner_of[d], hi // lo
        a = a // step if step > 1 else a
        coords.append(a % size if hi < inner_of[d] * int(shape[d]) else a)
    out = []
    src_inner = row_major_strides(src)
    for e in range(len(src)):
        total = None
        for k, (lo, hi) in enumerate(zip(lows, bounds)):
            if src_inner[e] <= lo and hi <= src_inner[e] * int(src[e]):
                term = coords[k] * (lo // src_inner[e]) if lo > src_inner[e] else coords[k]
                total = term if total is None else total + term
        out.append(np.zeros((1,) * max((np.ndim(a) for a in idx), default=0), np.int64) if total is None else total)
    return out


def dim_groups(shape, src):
    """``[(output dims, operand dims)]``: consecutive dims of equal element count, in order, or None where
    the shapes do not split so (a zero extent).  Dims of extent 1 join the group before them (the first
    group if none precedes)."""
    shape, src = tuple(int(x) for x in shape), tuple(int(x) for x in src)
    if 0 in shape or 0 in src:
        return None
    groups, i, j = [], 0, 0
    while i < len(shape) or j < len(src):
        o, s, po, ps = [], [], 1, 1
        while True:
            if po <= ps and i < len(shape) and (po < ps or not o or shape[i] == 1):
                o.append(i)
                po *= shape[i]
                i += 1
            elif j < len(src) and (ps < po or not s or src[j] == 1):
                s.append(j)
                ps *= src[j]
                j += 1
            else:
                break
        if po != ps:
            return None
        groups.append((o, s))
    return groups


def transpose(node, i, idx):
    """Output dim j is operand dim ``permutation[j]``: the index is permuted back."""
    perm = node.attrs["permutation"]
    out = [None] * len(perm)
    for j, p in enumerate(perm):
        out[p] = idx[j]
    return tuple(out), None


def reverse(node, i, idx):
    """The flipped dims count from the other end."""
    dims, shape = set(node.attrs["dimensions"]), node.operands[i].shape
    return tuple(shape[d] - 1 - x if d in dims else x for d, x in enumerate(idx)), None


def slice_(node, i, idx):
    """Output element x of a dim reads ``start + x * stride``."""
    return tuple(s + x * st for x, s, st in zip(idx, node.attrs["starts"], node.attrs["strides"])), None


def concatenate(node, i, idx):
    """Operand i covers its own range of ``dimension``; elsewhere it is masked out (index clipped)."""
    operand, dim = node.operands[i], node.attrs["dimension"]
    start = sum(o.shape[dim] for o in node.operands[:i])
    pos = idx[dim] - start
    mask = (pos >= 0) & (pos < operand.shape[dim])
    return tuple(np.clip(pos, 0, operand.shape[dim] - 1) if d == dim else x for d, x in enumerate(idx)), mask


def pad(node, i, idx):
    """The operand is read ``low`` elements in, masked out in the padding; the pad value at ``()``."""
    if i == 1:
        return (), None
    operand = node.operands[i]
    pos = tuple(x - lo for x, lo in zip(idx, node.attrs["low"]))
    mask = np.ones(np.broadcast_shapes(*(np.shape(x) for x in idx)), dtype=bool)
    for p, n in zip(pos, operand.shape):
        mask &= (p >= 0) & (p < n)
    return tuple(np.clip(p, 0, n - 1) for p, n in zip(pos, operand.shape)), mask


def cannot_propagate(node, i, idx):
    """Library ops (and anything else with no rule) are not fusible: no element-level reading."""
    raise AStitchError(f"{node.name}: cannot propagate an index through {node.op} (it is not fusible)")


# -- the indexed ops at run time ----------------------------------------------


def clamp_index(v, lo, hi):
    """An index value as int64, clamped into ``[lo, hi]``."""
    return np.clip(np.asarray(v).astype(np.int64), lo, hi)


def gather_at_runtime(node, i, idx, fetch):
    """gather reads its operand (0) where the start indices (operand 1) say."""
    if i != 0:
        return None
    return indexed.gather_index(node, idx, lambda w: fetch(1, w), np.add, clamp_index), None


def dynamic_slice_at_runtime(node, i, idx, fetch):
    """dynamic-slice reads its operand (0) offset by the scalar starts (operands 1...)."""
    if i != 0:
        return None
    return indexed.dynamic_slice_index(node, idx, lambda j: fetch(j, ()), np.add, clamp_index), None


def update_at_runtime(node, i, idx, fetch):
    """dynamic-update-slice: the update (1) is read inside the window the starts (2...) place,
    the operand (0) outside it (the mask says which)."""
    upd = node.operands[1]
    starts = indexed.dynamic_starts(node, upd.shape, lambda j: fetch(j, ()), clamp_index)
    pos = [np.asarray(x) - s for x, s in zip(idx, starts)]
    # only the dims the window narrows enter the mask: a cache row's update ([2, 1, 8, 64] into [2, 1024, 8,
    # 64]) is masked along dim 1 alone, so the mask stays [1, 1024, 1, 1] and its reads count separably
    inside = np.ones((1,) * len(np.broadcast_shapes(*(np.shape(p) for p in pos))), dtype=bool)   # the index's rank
    for p, n in zip(pos, upd.shape):
        within = (p >= 0) & (p < n)
        if not within.all():
            inside = inside & within
    if i == 0:
        return idx, ~inside
    return tuple(np.clip(p, 0, max(n - 1, 0)) for p, n in zip(pos, upd.shape)), inside
