"""Flat <-> multi-dimensional indices, by plain integer arithmetic.

Every reader of a Plan turns flat element numbers into per-dim indices and
back (index propagation through a reshape, the block-locality check, the SIMT
model's geometry).  numpy has ``unravel_index`` and ``ravel_multi_index`` for
this, but ``np.unravel_index`` returns wrong indices in numpy 2.3 and 2.4 for
an index array shaped ``(N, 1)`` with N > 8192 (its internal iterator buffer
is 8192 elements): every element past 8192 came back as 8192, and a layernorm
over 16k rows was silently wrong.  These two functions are what the index
arithmetic of a GPU kernel does anyway (a divide and a remainder per dim), so
they are also the honest model of it; they work on any array shape, any
numpy version, and keep int64 throughout.

:func:`distinct` is ``np.unique`` of an integer array by sorting: numpy 2.3+
finds unique values with a hash table, about 70 times slower than a sort for
the millions of distinct addresses the SIMT model counts at real sizes.
"""
from __future__ import annotations

import numpy as np


def unravel(flat, shape, in_range: bool = False) -> tuple:
    """Row-major multi-index of flat element numbers ``flat`` in an array of ``shape``.

    Returns one int64 array per dim, each shaped like ``flat``; ``()`` for a scalar shape.  Dims of
    extent 1 and of a power-of-two extent skip the division (the same numbers, without its cost:
    unravelling a rank-4 domain of 4M elements was a large part of simulating a reshape-heavy model).
    ``in_range``: the caller knows every number lies in ``[0, prod(shape))``, so the outermost index is what
    the inner dims leave, with no division (without it, a number past the end wraps around the outermost dim).
    """
    flat = np.asarray(flat, dtype=np.int64)
    out = []
    extents = [int(e) for e in shape]
    for k in range(len(extents) - 1, -1, -1):
        extent = extents[k]
        if extent == 1 or extent <= 0:   # divmod by 1 leaves flat and gives 0; an empty dim: no element exists
            rem = np.zeros_like(flat)
        elif k == 0 and in_range:
            rem = flat
        else:
            flat, rem = divmod_by(flat, extent)
        out.append(rem)
    return tuple(reversed(out))


def divmod_by(a, d: int, bound: int | None = None):
    """``(a // d, a % d)`` for an int64 index array ``a`` and a divisor ``d >= 1``, at the cost the divisor
    allows: ``(a, 0)`` for 1 (the remainder a scalar), a shift and a mask for a power of two (exactly the
    floored divmod, negatives too, and several times faster than an int64 division over a whole domain), one
    ``np.divmod`` pass otherwise.  ``bound``: the caller knows every value of ``a`` lies in ``[0, bound)``;
    where ``bound <= d`` the quotient is 0 and the remainder ``a`` itself, with no pass at all (a rows mapping's
    grid covers every row at once: ``row // slots`` is 0 for 750000 rows, and an int64 division of them took
    3.5 ms)."""
    d = int(d)
    if d == 1:
        return a, 0
    if bound is not None and bound <= d:
        return 0, a
    if d > 0 and d & (d - 1) == 0:
        shift = d.bit_length() - 1
        return a >> shift, a & (d - 1)
    return np.divmod(a, d)


def ravel(multi, shape) -> np.ndarray:
    """Flat row-major element number of the multi-index ``multi`` (one index array per dim) in ``shape``.

    The index arrays broadcast against each other; a scalar shape gives 0.
    """
    shape = tuple(int(s) for s in shape)
    if not shape:
        return np.zeros((), dtype=np.int64)
    flat = np.zeros((), dtype=np.int64)
    for idx, extent in zip(multi, shape):
        flat = flat * extent + np.asarray(idx, dtype=np.int64)
    return flat


def increasing(a: np.ndarray) -> bool:
    """Are the values of the 1-D array ``a`` strictly increasing?  The first steps are compared first: an array
    that repeats or turns early (a warp's 32 lanes of one instruction) is told at once, without a pass over
    all of it."""
    k = min(64, a.size - 1)
    return k < 1 or (bool((a[1:k + 1] > a[:k]).all()) and bool((a[1:] > a[:-1]).all()))


#: the widest range of values, per value, that :func:`distinct` marks in a table instead of sorting
DISTINCT_TABLE_SPAN = 8


def distinct(a) -> np.ndarray:
    """The sorted distinct values of an integer array (``np.unique(a)``): by marking each value in a table over
    their range where the range is at most :data:`DISTINCT_TABLE_SPAN` times the values (block ids, sectors,
    warp numbers: 2-5x faster than a sort); values already increasing (a row's start offsets, ``r * 32`` for
    the paper's 750000 DIEN rows: too sparse for the table) are their own answer, one comparison pass instead
    of a sort (a tenth of the unfused DIEN row reduce's simulation); else by one sort."""
    a = np.asarray(a).reshape(-1)
    if a.size > 64 and (a.dtype.kind == "i" or (a.dtype.kind == "u" and a.dtype.itemsize < 8)):
        lo, hi = int(a.min()), int(a.max())
        if hi - lo < DISTINCT_TABLE_SPAN * a.size:
            seen = np.zeros(hi - lo + 1, dtype=bool)
            seen[a.astype(np.int64, copy=False) - lo] = True        # (in int64: an int8's range overflows int8)
            return (np.flatnonzero(seen) + lo).astype(a.dtype, copy=False)
        if increasing(a):
            return a.copy()                 # (a copy, as np.unique gives: the caller may write to it)
    s = np.sort(a)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def walks_in_order(idx: tuple, shape, domain) -> bool:
    """Does the multi-index ``idx`` (broadcastable arrays over ``domain``, one per dim of a tensor of ``shape``)
    read the tensor in row-major order: the domain's element ``e`` at the tensor's element ``e``?  So it does
    when the tensor is the domain reshaped (a bitcast: Inductor's ``[32, 512, 3072]`` view of a
    ``[16384, 3072]`` tensor); then the read is the tensor's own memory, reshaped, with nothing gathered.

    Checked on the index arrays as they are (each over its own dims, no domain-sized array built): the lines
    of each array through its first element, weighted by the tensor's strides, must add up to the domain's own
    row-major strides (cheap: most indices fail here), and each array must be the sum of its lines."""
    domain = tuple(int(n) for n in domain)
    rank = len(domain)
    if len(idx) != len(shape) or int(np.prod(shape, dtype=np.int64)) != int(np.prod(domain, dtype=np.int64)):
        return False
    arrays, lines, start = [], [np.zeros(n, dtype=np.int64) for n in domain], 0
    for a, stride in zip(idx, row_major_strides(shape)):
        a = np.asarray(a, dtype=np.int64)
        if a.ndim > rank or any(e not in (1, n) for e, n in zip(a.shape[::-1], domain[::-1])):
            return False
        a = a.reshape((1,) * (rank - a.ndim) + a.shape)
        origin = int(a[(0,) * rank])
        own = {k: a[tuple(slice(None) if j == k else 0 for j in range(rank))].reshape(-1) - origin
               for k in range(rank) if a.shape[k] > 1}
        for k, line in own.items():
            lines[k] += line * stride
        start += origin * stride
        arrays.append((a, origin, own))
    if start != 0 or not all(np.array_equal(line, np.arange(n, dtype=np.int64) * s)
                             for line, n, s in zip(lines, domain, row_major_strides(domain))):
        return False
    for a, origin, own in arrays:
        lines_k = [np.full((1,) * rank, origin, dtype=np.int64)]
        lines_k += [line.reshape((1,) * k + (-1,) + (1,) * (rank - k - 1)) for k, line in own.items()]
        if not is_sum(a, lines_k):
            return False
    return True


#: elements of a block :func:`is_sum` compares at a time (it stays in cache)
SUM_BLOCK = 1 << 16


def is_sum(a, parts) -> bool:
    """Is the array ``a`` the broadcast sum of ``parts`` (of ``a``'s very shape)?  Compared a cache-sized block of
    the leading axis at a time: the sum of a 4M-element index is never made whole (a 32 MB array, and the page
    faults of a fresh one, per check)."""
    a = np.asarray(a)
    if np.broadcast_shapes(*(np.shape(p) for p in parts)) != a.shape:
        return False
    parts = [np.asarray(p).reshape((1,) * (a.ndim - np.ndim(p)) + np.shape(p)) for p in parts]   # a's rank
    if a.ndim == 0 or a.size <= SUM_BLOCK:
        return bool(np.array_equal(sum(parts[1:], parts[0]), a))
    rows = max(1, SUM_BLOCK // max(1, a.size // a.shape[0]))
    for s in range(0, a.shape[0], rows):
        block = a[s:s + rows]
        total = sum((p[s:s + rows] if np.shape(p)[0] > 1 else p for p in parts[1:]),
                    parts[0][s:s + rows] if np.shape(parts[0])[0] > 1 else parts[0])
        if not np.array_equal(np.broadcast_to(total, block.shape), block):
            return False
    return True


def row_major_strides(shape) -> list:
    """Elements between neighbours along each dim of a row-major array of ``shape``."""
    strides, acc = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        acc *= int(shape[d])
    return strides


def reshapes(domain, shape) -> bool:
    """Is a tensor of ``shape`` the ``domain`` reshaped: as many elements (neither a scalar nor zero-sized)?  Then the
    domain's element ``e``, row-major, is the tensor's element ``e``, and a stage over the domain can compute an
    op of ``shape`` at every element, its index one reshape of the domain's (``index_rules.reshape_index``):
    a group norm's statistics over ``x`` viewed as ``[N, G, C/G * H * W]`` and its normalisation over
    ``[N, C, H, W]`` can share one mapping, so the threads that loaded ``x`` for the one still hold it for the
    other.  Row-major positions only: layouts do not enter (they change addresses, not indices)."""
    domain, shape = tuple(int(d) for d in domain), tuple(int(d) for d in shape)
    if domain == shape:
        return True
    return bool(domain) and bool(shape) and 0 not in domain and 0 not in shape and \
        int(np.prod(domain, dtype=np.int64)) == int(np.prod(shape, dtype=np.int64))


def strided_view(arr: np.ndarray, idx: tuple, rank: int):
    """``arr[idx]`` as a strided view of ``arr``, broadcastable over a domain of ``rank`` dims, or None where
    the gather is not one.  So it is when every index array varies along at most one domain dim, as an
    arithmetic progression inside the tensor, and no two along the same dim: a slice, a stride, a reversal, a
    transpose, a broadcast -- the values are then the tensor's own memory seen through steps (a transposed
    ``[batch, head, seq, dim]``), nothing gathered.  One index may instead hold any values along its dim (the
    two halves of rotary embedding's ``q`` read through a concatenate, the other half's lanes masked out): that
    axis is taken with ``np.take`` after the others are sliced, five times faster than numpy's gather with an
    index array per dim (4M elements: 13 ms).  Where an index is the same all along its dim (a broadcast), the
    view keeps that dim at extent 1."""
    if arr.ndim != len(idx) or arr.ndim == 0:
        return None
    picks, dims, taken = [], [], None
    for d, a in enumerate(idx):
        a = np.asarray(a)
        if a.ndim != rank or a.dtype.kind not in "iu":
            return None
        support = [k for k, n in enumerate(a.shape) if n != 1]
        if len(support) > 1:
            return None
        line = a.reshape(-1)
        start = int(line[0])
        step = int(line[1]) - start if line.size > 1 else 0
        last = start + step * (line.size - 1)
        if step == 0 and (line.size == 1 or (line == start).all()):
            if not 0 <= start < arr.shape[d]:
                return None              # outside the tensor: numpy's gather wraps or raises, as it will
            picks.append(start)          # one element along this dim: the dim drops out of the view
            continue
        if step != 0 and np.array_equal(line, start + step * np.arange(line.size, dtype=np.int64)):
            if not (0 <= start < arr.shape[d] and 0 <= last < arr.shape[d]):
                return None
            end = last + (1 if step > 0 else -1)
            picks.append(slice(start, end if end >= 0 else None, step))
        elif taken is None and 0 <= int(line.min()) and int(line.max()) < arr.shape[d]:
            taken = (len(dims), line)    # any values along its dim: taken after the slicing
            picks.append(slice(None))
        else:
            return None
        dims.append(support[0])
    if len(set(dims)) != len(dims):
        return None
    view = arr[tuple(picks)]
    if taken is not None:
        view = np.take(view, taken[1], axis=taken[0])
    view = view.transpose(np.argsort(dims)) if dims else view
    shape = [1] * rank
    for k, n in zip(sorted(dims), view.shape):
        shape[k] = n
    return view.reshape(shape)
