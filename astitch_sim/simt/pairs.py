"""Counting distinct (block, element) pairs without sorting them: the global-read byte count.

``global_bytes_read`` counts, per block, the distinct elements the block reads
(``memory.py``).  Where no formula gives that count, the pairs are listed as
integer keys ``block * K + element`` (``K``: the buffer's element count) and
the distinct keys counted.  Sorting them (``flatindex.distinct``) costs
O(n log n) and was most of some plans' simulation time (llama_rotary under
xla: 8M keys from four masked reads of one buffer, 3 s of sorts).  Two tables
count the same set in linear time:

* a *presence table* over the keys' range, one byte per possible pair, when
  that range is small next to the keys listed (a broadcast operand of a few
  elements that every block reads: 2M keys, 131K possible pairs);
* an *owner table* over the ``K`` elements, remembering the first block seen
  reading each element.  The pairs split into ``{(owner[e], e)}``, exactly one
  per element read, and the pairs of any other block, disjoint from those; only
  the latter are sorted, and an elementwise plan (each element read by one
  block) has none.

Otherwise (the key range too wide for either table, or keys outside it) the
keys are sorted as before, merged as they come so that memory stays bounded.
Each way counts the same set; :class:`PairSet` picks one once, from bounds the
caller knows before listing the keys.
"""
from __future__ import annotations

import numpy as np

from ..ir.flatindex import distinct

#: a presence table may take at most this many bytes (entries) per key expected
TABLE_PER_KEY = 16
#: an owner table (one int32 per element of the buffer) at most this many entries per key expected: then it
#: is no bigger than the keys themselves, and smaller than the sorted copy the sort would make
OWNER_PER_KEY = 2
#: and neither table is ever bigger than this many entries, whatever the keys' number (a plan over an
#: 8192x32000 domain expects 262M keys: its tables would be gigabytes; the sort merges distinct keys as they
#: come instead, so that its memory follows the distinct pairs, not the domain)
TABLE_MAX = 1 << 26


class PairSet:
    """The distinct keys among arrays added one by one (:meth:`add`), counted by :meth:`count`.

    ``K`` is the key's element radix (``key = block * K + element``); every key must lie in
    ``[lo, hi]`` for the tables to be used (a key outside turns them into the sort), and about
    ``expected`` keys will be added (it sizes the tables)."""

    def __init__(self, K: int, lo: int, hi: int, expected: int):
        self.K, self.lo, self.hi = int(K), int(lo), int(hi)
        self.sorted = np.zeros(0, np.int64)      # distinct keys merged so far (sort mode, owner's rest)
        self.pending: list = []
        self.seen = self.owner = None
        if self.hi - self.lo < min(TABLE_PER_KEY * expected, TABLE_MAX):
            self.seen = np.zeros(self.hi - self.lo + 1, dtype=bool)
        elif self.lo >= 0 and self.K <= min(OWNER_PER_KEY * expected, TABLE_MAX):
            wide = self.hi // self.K >= np.iinfo(np.int32).max
            self.owner = np.full(self.K, -1, dtype=np.int64 if wide else np.int32)

    def add(self, keys: np.ndarray) -> None:
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        if keys.size == 0:
            return
        if (self.seen is not None or self.owner is not None) and \
                (int(keys.min()) < self.lo or int(keys.max()) > self.hi):
            self._to_sort()                       # outside the tables' bounds: count by sorting from here on
        if self.seen is not None:
            self.seen[keys - self.lo] = True
            return
        if self.owner is not None:
            b, e = np.divmod(keys, self.K)
            new = self.owner[e] < 0
            self.owner[e[new]] = b[new]           # some block reading e among these pairs
            keys = keys[self.owner[e] != b]
            if keys.size == 0:
                return
        self.pending.append(distinct(keys))
        if sum(a.size for a in self.pending) > max(1 << 21, self.sorted.size):   # merge: amortised doubling
            self.sorted, self.pending = distinct(np.concatenate([self.sorted] + self.pending)), []

    def _to_sort(self) -> None:
        """Turn the table's contents into sorted keys and continue by sorting (same set, other way)."""
        if self.seen is not None:
            self.pending.append(np.flatnonzero(self.seen).astype(np.int64) + self.lo)
        if self.owner is not None:
            e = np.flatnonzero(self.owner >= 0)
            self.pending.append(distinct(self.owner[e].astype(np.int64) * self.K + e))
        self.seen = self.owner = None

    def count(self) -> int:
        if self.seen is not None:
            return int(np.count_nonzero(self.seen))
        if self.pending:
            self.sorted, self.pending = distinct(np.concatenate([self.sorted] + self.pending)), []
        owned = int(np.count_nonzero(self.owner >= 0)) if self.owner is not None else 0
        return owned + int(self.sorted.size)


def count_distinct_keys(keys: list, K: int) -> int:
    """Distinct values among the key arrays ``keys`` (``block * K + element``, possibly repeated)."""
    keys = [np.asarray(k).reshape(-1) for k in keys]
    keys = [k for k in keys if k.size]
    if not keys:
        return 0
    ps = PairSet(K, min(int(k.min()) for k in keys), max(int(k.max()) for k in keys), sum(k.size for k in keys))
    for k in keys:
        ps.add(k)
    return ps.count()


#: below this many pairs a sort is cheap and a table's allocation would dominate
OWNER_MIN_PAIRS = 1 << 12


def pairs_by_owner(W: np.ndarray, S: np.ndarray):
    """(distinct (W, S) pairs, distinct W) by an owner table over the ``S`` values, or None if there
    are few pairs or ``S`` spans more than ``OWNER_PER_KEY`` entries per pair (then the caller sorts).

    The dense count's (block, element) pairs of a column reduction read row by row (12.6M reads, each
    element by one block) took two 12.6M-element sorts; here each pair is looked up once, and only the
    pairs whose ``W`` is not the one the table kept for their ``S`` are sorted (none in that case).
    Which of an element's blocks the table keeps does not matter (any one splits the pairs as
    :class:`PairSet` says), so it is filled by one scatter, with no copies of the pairs beyond their
    int64 offsets: its memory stays below the sort's (column_reduce at its default size under inductor,
    50M pairs: 4.5 GB peak against 5.1 GB)."""
    n = W.size
    if n < OWNER_MIN_PAIRS:
        return None
    w0, s0 = int(W.min()), int(S.min())
    wspan, sspan = int(W.max()) - w0 + 1, int(S.max()) - s0 + 1
    if sspan > min(OWNER_PER_KEY * n, TABLE_MAX):
        return None
    b, e = np.asarray(W, dtype=np.int64), np.asarray(S, dtype=np.int64)    # no copy of int64 input
    b, e = (b - w0 if w0 else b), (e - s0 if s0 else e)
    owner = np.full(sspan, -1, dtype=np.int64 if wspan >= np.iinfo(np.int32).max else np.int32)
    owner[e] = b                    # all at once: of the pairs sharing an element, one's block is kept
    other = owner[e] != b
    pairs = int(np.count_nonzero(owner >= 0))
    if other.any():
        pairs += int(distinct(b[other] * sspan + e[other]).size)
    if wspan <= min(TABLE_PER_KEY * n, TABLE_MAX):
        seen = np.zeros(wspan, dtype=bool)
        seen[b] = True
        return pairs, int(np.count_nonzero(seen))
    return pairs, int(distinct(b).size)
