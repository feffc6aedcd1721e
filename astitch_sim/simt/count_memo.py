"""An access's counters, counted once per geometry.

Kernels of one simulation repeat accesses: a stitched softmax reads ``x`` in two stages of one row mapping,
xla's softmax in two kernels, and an unfused training step stores a thousand elementwise results through a few
dozen mappings (kernels of one mapping share their geometry: ``kept_geometries.py``).  Counting an access walks
its index over a whole line or domain (a 30000-element row: 0.15 ms; a third of a GPT step's simulation), and
the counters depend only on

* the geometry (which block, warp and trip performs each element),
* the access's space, element size, index terms, mask, dedup and identity flags, and extra arrays -- not its
  kind: a read, a write and an atomic at the same addresses touch the same sectors in the same warp
  instructions (a stitched kernel's identity store of ``out`` is counted as its identity load of ``x`` was), and
  not ``dedup`` where the index is the domain's own (``identity``: every element is touched by one thread, so
  its distinct (block, element) pairs are its elements),
* its base address -- and for a global buffer not even that: every buffer starts on a 256-byte boundary
  (``memory.ALIGN``), and moving all of an access's addresses by a multiple of 256 bytes moves its 32-byte
  sectors, 128-byte lines and aligned vectors (at most 32 bytes) one for one, so each counter (distinct sectors
  per warp, requests, distinct block-element pairs, lane classes) is unchanged.  A shared access's offset stays
  in the key (it places the words in banks).

So the counters are kept on the geometry under those inputs (``Geometry.cached``; the kept-geometry budget reads
what their arrays weigh from ``KeptCounts.nbytes`` instead of walking them after every kernel), the arrays
compared by value (a new ``row * 30000`` term equals the last one).  Only accesses whose arrays are small
together (:data:`MEMO_ELEMENTS`) are kept: comparing is then far cheaper than counting, and the kept arrays never
weigh a geometry out of the budget.
"""
from __future__ import annotations

import numpy as np

from ..plan.vocabulary import Space
from .kept_geometries import held_bytes
from .memory import ALIGN, Access, count

#: the most index, mask and extra elements an access may hold, together, for its counters to be kept (1 MB of
#: int64 indices; a longer access's arrays are domain-sized and usually made for one kernel)
MEMO_ELEMENTS = 1 << 17


def count_once(geom, acc: Access) -> dict:
    """``memory.count(geom, acc)`` (a copy of it), counted only the first time this geometry sees an equal
    access."""
    cached = getattr(geom, "cached", None)
    arrays = _arrays(acc)
    if cached is None or arrays is None:
        return count(geom, acc)
    if acc.space == Space.GLOBAL and acc.base % ALIGN:
        return count(geom, acc)             # (never: the allocator aligns every buffer) the proof above needs it
    key = (acc.space, acc.itemsize, acc.base if acc.space != Space.GLOBAL else 0, acc.dedup and not acc.identity,
           acc.identity, tuple((k, acc.extra[k] is None) for k in sorted(acc.extra)), tuple(_meta(a) for a in arrays))
    kept = cached("counts", KeptCounts)
    seen = kept.by_key.setdefault(key, [])
    for held, counters in seen:
        if all(a is b or bool((a == b).all()) for a, b in zip(arrays, held)):       # (shapes and dtypes: the key)
            return dict(counters)
    counters = count(geom, acc)
    seen.append((arrays, dict(counters)))
    kept.nbytes += held_bytes(arrays)
    return counters


class KeptCounts:
    """The counters kept on one geometry: ``by_key`` -> ``[(arrays, counters), ...]``, and ``nbytes``, what the
    arrays weigh (a view's whole base: an over-estimate where the geometry holds that base too)."""

    def __init__(self):
        self.by_key: dict = {}
        self.nbytes = 0

    def held_bytes(self) -> int:
        return self.nbytes


def _arrays(acc: Access):
    """The access's arrays in a fixed order (terms, mask, extra values by key, those not None), or None when
    together they are over :data:`MEMO_ELEMENTS` or an extra value is no array or number."""
    out = [np.asarray(t) for t in acc.terms]
    if acc.mask is not None:
        out.append(np.asarray(acc.mask))
    for k in sorted(acc.extra):
        v = acc.extra[k]
        if v is None:
            continue
        if not isinstance(v, (np.ndarray, int, np.integer)):
            return None
        out.append(np.asarray(v))
    return out if sum(a.size for a in out) <= MEMO_ELEMENTS else None


def _meta(a: np.ndarray) -> tuple:
    return a.shape, a.dtype.str
