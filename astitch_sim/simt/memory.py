"""Memory spaces and what the SIMT model counts in each (the accounting definitions).

Every load or store the executor performs is described by an :class:`Access`:
the buffer, the element index each domain element touches (``flat``: a sum of
broadcastable terms, row-major or in the node's layout), an optional mask, and
the geometry saying which (block, thread, iteration) performs it.  This module
turns accesses into counters, exactly:

Global memory (parameters, constants, outputs of earlier kernels, Global values,
reduce result buffers).  A buffer of ``n`` elements of ``s`` bytes lives at a
256-byte aligned ``base`` in one flat address space; element ``i`` (in the
node's layout, row-major unless HLO said otherwise) is at ``base + s*i``.

* ``global_bytes_read``: per stage, per block, the *distinct* elements the block
  reads from each buffer, times the element size.  A value broadcast to many
  threads of one block (gamma in layernorm, a row's mean) is fetched once per
  block (L1 catches the rest); the same element read by two blocks counts twice.
  A buffer read several ways in one stage (two index patterns, or by the element
  loop and the epilogue) counts the union (:func:`union_bytes`).  Reads in
  different stages count separately (a stage boundary is a barrier; we do not
  assume L1 survives it).  Epilogue reads count once per split block.
* ``global_bytes_written``: one element size per element stored (an output, a
  Global value, a reduce result), plus one per atomic; the init-value fill of an
  atomic result buffer is ``KernelStats.memset_bytes``.  A split task's
  epilogue results are stored by its first split block only.
* ``global_sectors_read/written``: for each warp instruction (32 threads of a
  block, one loop iteration), the distinct 32-byte sectors its active lanes
  touch (``addr // 32``): 1 for a broadcast, 4 for 32 consecutive floats.
* ``global_requests``: warp instructions with at least one active lane.
* ``atomics``: atomic read-modify-writes (split reductions, ``combine=atomic``).

Shared memory (Regional values; per block, ``Value.offset`` + slot * size).

* ``shared_bytes_read/written``: element size per thread access (no cache).
* ``shared_bank_conflicts``: per warp instruction, 32 banks of 4 bytes: for
  each bank the distinct 4-byte words the warp touches in it; the instruction
  costs ``max`` wavefronts, so ``max - 1`` extra.  One address read by the
  whole warp (a broadcast) is free.
* Reduction trees (``reduce.py``) add their scratch traffic analytically.

Registers: values kept from one stage to a later one are read back per
element (``register_reuse``); registers have no addresses and no bandwidth.

How it stays fast: for a separable geometry (``geometry.py``) whose access
index is a sum of a part over ``X`` and a part over ``Y`` coordinates, every
``X`` line behaves the same up to its start address modulo 32 (sectors) or 128
(banks), so we count one ``Y`` line per alignment class and multiply.  Rows packed several
to a warp (short rows in vectors) repeat per block trip instead of per row: ``periodic.py``
counts one block's rows the same way.  Anything else falls back to the dense count over
every element (same definitions).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from ..ir.flatindex import distinct, increasing
from . import periodic
from .geometry import additive_parts, support
from .pairs import TABLE_MAX, TABLE_PER_KEY, PairSet, count_distinct_keys, pairs_by_owner
from ..plan.vocabulary import Space

SECTOR = 32
SECTOR_SHIFT = 5                # SECTOR == 1 << SECTOR_SHIFT
BANKS = 32
BANK_BYTES = 4
ALIGN = 256
#: counting paths taken (tests look at this to check both agree)
PATHS = {"separable": 0, "dense": 0, "flat": 0}


def took(path: str) -> None:
    """Count one access counted by ``path`` in :data:`PATHS` (read at each call: tests swap the dict)."""
    PATHS[path] = PATHS.get(path, 0) + 1


@dataclass
class Access:
    space: str                  # global | shared | register
    kind: str                   # read | write | atomic
    node: str
    itemsize: int               # bytes per element on the device
    base: int                   # byte address of element 0 (global base, or the shared value's offset)
    terms: list                 # broadcastable int arrays; element index = sum(terms)
    mask: Optional[np.ndarray] = None
    dedup: bool = False         # count bytes as distinct (block, element) pairs (global reads)
    identity: bool = False      # terms are the domain's own row-major index (injective, fast path)
    extra: dict = field(default_factory=dict)

    def flat(self, geom) -> np.ndarray:
        """Element index of every domain element (flattened, masked out elements kept)."""
        if self.identity and not self.extra.get("logical") is not None and geom.kind == "element":
            return np.arange(geom.size, dtype=np.int64)
        # summed into one array, in place past the first two terms: one domain-sized array, not one per term
        terms = list(self.terms)
        total = np.zeros((), np.int64) if not terms else terms[0] if len(terms) == 1 else terms[0] + terms[1]
        for t in terms[2:]:
            if np.broadcast_shapes(np.shape(total), np.shape(t)) == np.shape(total):
                total += t
            else:
                total = total + t
        return np.ascontiguousarray(geom.full(total), dtype=np.int64)


# ---------------------------------------------------------------------------
# counting on plain 1-D arrays
# ---------------------------------------------------------------------------

def _sorted_pairs(W, S):
    """``(W, S)`` pairs sorted by ``W``, then ``S`` (``np.lexsort``'s order).  When both fit in one
    int64 key (``W * span + S``, the usual case) one plain sort of the keys does it, several
    times faster than a two-key lexsort on millions of lane accesses."""
    if W.size:
        w0, s0 = int(W.min()), int(S.min())
        span = int(S.max()) - s0 + 1
        if (int(W.max()) - w0 + 1) * span < (1 << 62):
            key = np.sort((W.astype(np.int64) - w0) * span + (S.astype(np.int64) - s0))
            return key // span + w0, key % span + s0
    order = np.lexsort((S, W))
    return W[order], S[order]


def distinct_pairs(W: np.ndarray, S: np.ndarray) -> tuple[int, int]:
    """(distinct (W, S) pairs, distinct W) -- sectors and requests of a set of lane accesses.

    Linear time when each warp's lanes are contiguous and its sectors monotone
    (the usual case), or when the pairs fit a presence table (``pairs_by_table``) or an owner
    table (:func:`.pairs.pairs_by_owner`); a sort otherwise.  Every lane in a warp instruction of its own
    (``W`` increasing: a reduction's results, each stored by its row's first thread) is one comparison
    pass: every pair and every instruction distinct.
    """
    n = W.size
    if n == 0:
        return 0, 0
    if n > 4096 and increasing(W):
        return n, n
    if n > 4096:
        chg = W[1:] != W[:-1]
        heads = W[np.concatenate(([True], chg))]
        if all_distinct(heads):
            up = (S[1:] > S[:-1]) & ~chg
            down = (S[1:] < S[:-1]) & ~chg
            if not up.any() or not down.any() or not mixed_runs(chg, up, down):
                pairs = 1 + int(np.count_nonzero(chg | (S[1:] != S[:-1])))
                return pairs, int(heads.size)
    if n > 4096:
        # a pair repeated by neighbouring lanes (32 lanes of a warp reading one sector) counts once: drop the
        # repeats before a table or a sort looks at the pairs (12.6M lane accesses of a column stage become 393K)
        keep = np.concatenate(([True], (W[1:] != W[:-1]) | (S[1:] != S[:-1])))
        if not keep.all():
            W, S = W[keep], S[keep]
    table = pairs_by_table(W, S)
    if table is None:
        table = pairs_by_owner(W, S)
    if table is not None:
        return table
    Ws, Ss = _sorted_pairs(W, S)
    new_w = Ws[1:] != Ws[:-1]
    pairs = 1 + int(np.count_nonzero(new_w | (Ss[1:] != Ss[:-1])))
    return pairs, 1 + int(np.count_nonzero(new_w))


#: a presence table of (W, S) pairs replaces the sort for accesses of at least TABLE_MIN_ACCESSES lanes
#: whose pairs span at most TABLE_PER_ACCESS entries per access (one byte each: a BERT-size column
#: reduction's 12.6M reads of a per-row value by 8192 blocks make a 134 MB table, filled in a tenth of the
#: time of the sort); below that size the sort is cheap and a table would only cost memory
TABLE_MIN_ACCESSES = 1 << 16
TABLE_PER_ACCESS = TABLE_PER_KEY       # the same bound as the pair tables' (pairs.py)


def pairs_by_table(W, S):
    """(distinct (W, S) pairs, distinct W) by marking each pair in a table over the pairs' range, or
    None if the access is small or that range too large for a table (then the caller sorts)."""
    if W.size < TABLE_MIN_ACCESSES:
        return None
    w0, s0 = int(W.min()), int(S.min())
    wspan, sspan = int(W.max()) - w0 + 1, int(S.max()) - s0 + 1
    if wspan * sspan > TABLE_PER_ACCESS * W.size:
        return None
    seen = np.zeros((wspan, sspan), dtype=bool)
    seen[W - w0, S - s0] = True
    return int(np.count_nonzero(seen)), int(np.count_nonzero(seen.any(axis=1)))


def distinct_count(W: np.ndarray) -> int:
    """Distinct values of ``W`` (warp instructions of a shared-memory access: its requests).  Only the
    head of each run of equal neighbours can be new, so just the heads are sorted (a columns stage's
    warps recur run after run: 12.6M lane accesses, 393K heads for a BERT-size column reduction)."""
    if W.size == 0:
        return 0
    heads = W[np.concatenate(([True], W[1:] != W[:-1]))]
    return int(heads.size) if all_distinct(heads) else int(distinct(heads).size)


def all_distinct(a: np.ndarray) -> bool:
    """Are the values of the integer array ``a`` all different?  Increasing: yes, at once; values
    within a range at most ``TABLE_PER_ACCESS`` times their number: a presence table says, in linear
    time; otherwise a sort (an index's values are usually one or the other)."""
    if increasing(a):
        return True
    lo, hi = int(a.min()), int(a.max())
    if hi - lo < min(TABLE_PER_ACCESS * a.size, TABLE_MAX):
        seen = np.zeros(hi - lo + 1, dtype=bool)
        seen[a - lo] = True
        return int(np.count_nonzero(seen)) == a.size
    s = np.sort(a)
    return not bool((s[1:] == s[:-1]).any())


def mixed_runs(chg, up, down) -> bool:
    """Does some warp run have its sectors going both up and down?  (``chg``, ``up``, ``down``: per step between
    neighbouring lanes; a run's steps start at a change of warp.)  A logical OR over each run's steps."""
    if chg.size == 0:
        return False
    starts = np.concatenate(([0], np.flatnonzero(chg)))
    return bool((np.logical_or.reduceat(up, starts) & np.logical_or.reduceat(down, starts)).any())


def bank_conflicts(W: np.ndarray, A: np.ndarray, itemsize: int) -> int:
    """Extra shared-memory wavefronts: per warp, max distinct words in one bank, minus one."""
    if W.size == 0:
        return 0
    words_per = max(1, itemsize // BANK_BYTES)
    word = A // BANK_BYTES
    narrow = _narrow_warps(W, word, words_per)
    if narrow is not None:
        # a warp whose words all lie within 32 consecutive words has each distinct word in a bank of its
        # own (a broadcast, a contiguous row, one lane per warp): no conflict; only the other warps are sorted
        if narrow.all():
            return 0
        W, word = W[~narrow], word[~narrow]
    if words_per > 1:
        W = np.repeat(W, words_per)
        word = (np.repeat(word, words_per).reshape(-1, words_per) + np.arange(words_per)).ravel()
    Ws, Ss = _sorted_pairs(W, word)
    keep = np.concatenate(([True], (Ws[1:] != Ws[:-1]) | (Ss[1:] != Ss[:-1])))
    Ws, Ss = Ws[keep], Ss[keep]                      # distinct (warp, word)
    bank = Ss % BANKS
    order = np.lexsort((bank, Ws))
    Wb, Bb = Ws[order], bank[order]
    new = np.concatenate(([True], (Wb[1:] != Wb[:-1]) | (Bb[1:] != Bb[:-1])))
    starts = np.flatnonzero(new)
    counts = np.diff(np.concatenate((starts, [Wb.size])))
    group_w = Wb[starts]
    wstarts = np.flatnonzero(np.concatenate(([True], group_w[1:] != group_w[:-1])))
    worst = np.maximum.reduceat(counts, wstarts)
    return int((worst - 1).sum())


def _narrow_warps(W: np.ndarray, word: np.ndarray, words_per: int):
    """Per lane access: does its warp instruction touch only words within one span of 32 (``BANKS``)?

    Linear time, for the usual layout where each warp instruction's lanes are neighbours in the arrays
    (every warp one run); None when a warp's lanes are scattered (the caller sorts everything)."""
    starts = np.flatnonzero(np.concatenate(([True], W[1:] != W[:-1])))
    if not all_distinct(W[starts]):
        return None
    span = np.maximum.reduceat(word, starts) - np.minimum.reduceat(word, starts) + words_per
    return np.repeat(span <= BANKS, np.diff(np.append(starts, W.size)))


# ---------------------------------------------------------------------------
# counting an Access over a geometry
# ---------------------------------------------------------------------------

def _split(geom, acc):
    """Split an access into X-only and Y-only parts, or None if it mixes them."""
    if not geom.separable or geom.X is None:
        return None
    X, Y = set(geom.X), set(geom.Y)
    fx, fy = [], []
    for t in acc.terms:
        s = set(support(t, geom.rank))
        if s <= X:
            fx.append(t)
        elif s <= Y:
            fy.append(t)
        else:
            parts = additive_parts(t, geom.X, geom.rank)
            if parts is None:
                return None
            fx.append(parts[0])
            fy.append(parts[1])
    mx = my = None
    if acc.mask is not None:
        s = set(support(acc.mask, geom.rank))
        if s <= X:
            mx = geom.flat_part(acc.mask, geom.X)
        elif s <= Y:
            my = geom.flat_part(acc.mask, geom.Y)
        else:
            return None
    nx = int(np.prod([geom.shape[k] for k in geom.X])) if geom.X else 1
    ny = int(np.prod([geom.shape[k] for k in geom.Y])) if geom.Y else 1
    F_X = np.zeros(nx, dtype=np.int64)
    for t in fx:
        F_X = F_X + geom.flat_part(t, geom.X)
    F_Y = np.zeros(ny, dtype=np.int64)
    for t in fy:
        F_Y = F_Y + geom.flat_part(t, geom.Y)
    return F_X, F_Y, mx, my


def terms_injective(terms, shape) -> bool:
    """Does an index that is a sum of ``terms`` (broadcastable over a domain of ``shape``) name a different
    element at every domain element?  Shown when each term is an arithmetic progression along one dim (terms
    of one dim add up to one), every dim longer than 1 has a nonzero step, and the steps, smallest first, each
    pass what the dims before them reach -- mixed-radix digits, as a transpose's or a slice's index is (the
    key-major ``[b, h, d, s]`` tensor read at ``[b, s, h, d]``: steps 1, 256, 16384, 524288).  False when it
    cannot tell (a broadcast's repeats, a gather's looked-up index)."""
    rank, steps = len(shape), {}
    for t in terms:
        a = np.asarray(t)
        varies = [k for k in range(a.ndim) if a.shape[k] > 1]
        if not varies:
            continue
        if len(varies) > 1 or a.ndim > rank:
            return False
        d = np.diff(a.reshape(-1).astype(np.int64))
        if not bool((d == d[0]).all()):
            return False
        k = varies[0] + rank - a.ndim
        steps[k] = steps.get(k, 0) + int(d[0])
    reach = 0
    for step, n in sorted((abs(steps.get(k, 0)), int(n)) for k, n in enumerate(shape) if n > 1):
        if step <= reach:
            return False
        reach += step * (n - 1)
    return True


def _gap_ok(values: np.ndarray, other: np.ndarray) -> bool:
    """Distinct ``values`` spaced more than ``other``'s range apart: sums never collide."""
    if values.size <= 1 or other.size == 0:
        return True
    u = distinct(values)
    return u.size == values.size and int(np.diff(u).min()) > int(other.max() - other.min())


def sums_distinct(P: np.ndarray, Q: np.ndarray) -> bool:
    """Every ``P[i] + Q[j]`` distinct, shown when ``P`` is an arithmetic progression ``a + q*i``, ``i < n``:
    write ``Q = q*hi + lo`` (``0 <= lo < q``); two sums meet only with equal ``lo`` and ``hi`` values fewer
    than ``n`` apart.  (A reshape's split index: ``P`` the middle dim's ``d1*3072``, ``Q`` the outer and inner
    dims' ``d0*512*3072 + d2``.)  False when it cannot tell."""
    u = distinct(P)
    if u.size < 2 or Q.size == 0:
        return u.size == P.size
    steps = np.diff(u)
    q = int(steps[0])
    if u.size != P.size or not (steps == q).all():
        return False
    order = np.lexsort((Q // q, Q % q))
    lo, hi = (Q % q)[order], (Q // q)[order]
    same = lo[1:] == lo[:-1]
    return bool(((hi[1:] - hi[:-1])[same] >= u.size).all())


def _distinct(a: np.ndarray) -> int:
    return int(distinct(a).size)


def count(geom, acc: Access) -> dict:
    """Counters of one access: n (lane accesses), bytes, sectors, requests, conflicts."""
    if acc.space == Space.REGISTER:        # no addresses, no bandwidth: only how many reads
        return {"n": geom.count(acc.mask), "bytes": 0, "sectors": 0, "requests": 0, "conflicts": 0}
    if getattr(geom, "flat", False) and acc.space == Space.GLOBAL:
        took("flat")
        if geom.mapping.per_thread > 1:
            return count_flat_vectors(geom, acc)
        return count_flat(geom, acc)
    fine = getattr(geom, "refined", None)
    if fine is not None:
        out = _count_refined(fine, acc)
        if out is not None:
            took("refined")
            return out
    if geom.kind == "epilogue":
        out = count_first_part(geom, acc)
        if out is not None:
            took("epilogue parts")
            return out
    sp = _split(geom, acc)
    if sp is not None:
        out = _count_separable(geom, acc, *sp)
        if out is not None:
            took("separable")
            return out
    else:
        out = _count_periodic(geom, acc)
        if out is not None:
            took("periodic")
            return out
    took("dense")
    return count_dense(geom, acc)


def _count_refined(fine, acc):
    """The separable count on a split row's parts (``Geometry.refined``), the access's index and mask seen over
    the refined shape (views: the cut dim of a term that varies along it is split in two); None where the
    access does not split over the parts (the caller counts it on the whole row)."""
    reshaped = [fine.over_parts(t) for t in acc.terms]
    mask = None if acc.mask is None else fine.over_parts(acc.mask)
    racc = replace(acc, terms=reshaped, mask=mask)
    sp = _split(fine, racc)
    return None if sp is None else _count_separable(fine, racc, *sp)


def count_first_part(epi, acc):
    """An epilogue access the same in every split part (its index and mask constant over the parts axis: each
    part's block stores ``mean`` to its shared memory, reads the partial sums, adds its partial atomically),
    counted on the first part and times the parts (``EpilogueGeometry.first_part``: no warp, block or sector is
    shared between parts, so every counter adds up); None where the access varies over the parts."""
    one = epi.first_part()
    if one is None or not all(_same_over_parts(a, epi.rank) for a in (*acc.terms, acc.mask)):
        return None
    first = replace(acc, terms=[a[:1] if np.ndim(a) == epi.rank else a for a in acc.terms],
                    mask=acc.mask[:1] if np.ndim(acc.mask) == epi.rank else acc.mask)
    return {k: v * epi.splits for k, v in count(one, first).items()}


def _same_over_parts(a, rank: int) -> bool:
    """Is ``a`` (a term or mask over an epilogue's ``(splits, *task_shape)``) constant along the parts axis: absent
    from it, of length 1 there, or broadcast along it (stride 0)?"""
    if np.ndim(a) < rank:
        return True
    a = np.asarray(a)
    return a.shape[0] == 1 or a.strides[0] == 0


def _count_periodic(geom, acc):
    """Rows packed several to a warp: the separable count over one block's rows, plus the partly filled last
    block counted on its own (``periodic.py``); None where the periods do not repeat."""
    sp = periodic.split(geom, acc)
    if sp is None:
        return None
    view, F_X, F_Y, mx, my, rest = sp
    out = _count_separable(view, acc, F_X, F_Y, mx, my)
    if out is None or rest is None:
        return out
    more = count_lanes(acc, rest.W, rest.F, rest.sel, lambda: rest.block, lambda: rest.iteration, view.vector)
    total = {k: out[k] + more[k] for k in out}
    if acc.space == Space.GLOBAL and acc.dedup and not acc.identity and rest.shares_blocks:
        # the partial block read elements in earlier trips too: a (block, element) pair in both counts once
        b, f = (rest.block, rest.F) if rest.sel is None else (rest.block[rest.sel], rest.F[rest.sel])
        total["bytes"] -= acc.itemsize * _common_pairs((b, f), rest.shared_pairs())
    return total


def _common_pairs(one: tuple, other: tuple) -> int:
    """Distinct ``(block, element)`` pairs found in both lists."""
    (b1, f1), (b2, f2) = one, other
    if b1.size == 0 or b2.size == 0:
        return 0
    lo = min(int(f1.min()), int(f2.min()))
    K = max(int(f1.max()), int(f2.max())) - lo + 1
    return int(np.intersect1d(b1 * K + (f1 - lo), b2 * K + (f2 - lo)).size)


def _residues(A: np.ndarray, modulus: int) -> tuple:
    """The distinct values of ``A % modulus`` and how often each occurs (``np.unique(..., return_counts=True)``
    by counting into ``modulus`` bins: numpy 2.3+'s hash-based unique took a tenth of a model's simulation)."""
    counts = np.bincount(np.asarray(A % modulus, dtype=np.int64).ravel(), minlength=modulus)
    rho = np.flatnonzero(counts)
    return rho, counts[rho]


def sectors_over_starts(W: np.ndarray, A: np.ndarray, rho: np.ndarray, cnt: np.ndarray) -> tuple[int, int]:
    """``(sectors, warps)`` of a line of lane addresses ``A`` (warp instruction ``W`` per lane) read from
    ``cnt[i]`` starts whose addresses are ``rho[i]`` modulo a sector: the sum of ``cnt[i]`` times the distinct
    ``(W, (A + rho[i]) >> 5)`` pairs, and the distinct ``W`` (every start has the same).

    Starts that move the same lanes into the next sector count the same, so each such class is counted once:
    ``(A + r) >> 5`` is ``(A >> 5) + ((A & 31) + r >= 32)``, and which lanes cross is fixed by how many of the
    line's distinct low bits ``A & 31`` reach ``32 - r``.  A broadcast read (``A`` constant: every lane
    crosses at once, or none does) then counts its line at most twice, not once per start (a per-row scalar
    read over 64 rows of 30000: 8 line counts, now 1)."""
    if rho.size == 0:
        return 0, 0
    low = None if rho.size == 1 else np.flatnonzero(np.bincount((A & (SECTOR - 1)).ravel(), minlength=SECTOR))
    seen: dict = {}
    sectors = warps = 0
    for r, c in zip(rho.tolist(), cnt.tolist()):
        crossing = 0 if low is None else int(np.count_nonzero(low >= SECTOR - r))
        if crossing not in seen:
            seen[crossing] = distinct_pairs(W, (A + r) >> SECTOR_SHIFT)       # floor division by 32, negatives too
        pairs, warps = seen[crossing]
        sectors += c * pairs
    return sectors, warps


def _count_separable(geom, acc, F_X, F_Y, mx, my):
    s = acc.itemsize
    W_Y = geom.W_Y
    n_x = F_X.size if mx is None else int(np.count_nonzero(mx))
    n_y = F_Y.size if my is None else int(np.count_nonzero(my))
    n = n_x * n_y
    out = {"n": n, "bytes": 0, "sectors": 0, "requests": 0, "conflicts": 0}
    if n == 0:
        return out
    per_line = acc.space == Space.GLOBAL and my is None and one_value_per_line(geom, F_Y)
    if acc.space == Space.GLOBAL and not per_line and scattered_row_vectors(geom, acc, F_X, F_Y):
        return None                                 # one instruction per element: the dense count says so
    # unmasked lines are used as they are (a masked copy of a 4M-element line costs a pass over it)
    F_Xs = F_X if mx is None else F_X[mx]
    F_Ys, W = (F_Y, W_Y) if my is None else (F_Y[my], W_Y[my])
    A_X = acc.base + s * F_Xs
    A_Y = s * F_Ys
    if per_line:
        # every lane of a warp instruction reads the one address: a sector per instruction (what
        # sectors_over_starts finds, walking the line once per start) -- the line's instructions, counted once
        # per geometry, per X line
        warps = geom.cached("distinct_W_Y", lambda: distinct_count(W_Y))
        out["sectors"], out["requests"] = n_x * warps, n_x * warps
    elif acc.space == Space.GLOBAL:
        out["sectors"], warps = sectors_over_starts(W, A_Y, *_residues(A_X, SECTOR))
        out["requests"] = n_x * warps
    if acc.space == Space.GLOBAL:
        if acc.dedup:
            b = _dedup_separable(geom, F_Xs, F_Ys, mx, my, const_y=True if per_line else None)
            if b is None:
                return None
            out["bytes"] = s * b
        else:
            out["bytes"] = s * n
    elif acc.space == Space.SHARED:
        # moving every address of a warp by a whole number of 4-byte words only rotates its banks (the
        # worst bank's count stays): the X line's start matters modulo one word, not modulo 128 bytes
        rho, cnt = _residues(A_X, BANK_BYTES)
        for r, c in zip(rho.tolist(), cnt.tolist()):
            out["conflicts"] += c * bank_conflicts(W, r + A_Y, s)
        out["requests"] = n_x * distinct_count(W)
        out["bytes"] = s * n
    return out


def one_value_per_line(geom, F_Y) -> bool:
    """Does the access read one element per X line, the same all along Y (a row's max read by every element of
    the row), in whole vectors (a line of a multiple of the vector width: :func:`scattered_row_vectors` then
    finds nothing scattered)?  Then every lane of a warp instruction reads one address: a sector per
    instruction."""
    return bool((F_Y == F_Y[0]).all()) and (getattr(geom, "vector", 1) <= 1 or F_Y.size % geom.vector == 0)


def scattered_row_vectors(geom, acc, F_X, F_Y) -> bool:
    """A rows or columns mapping with vectors whose access is neither contiguous nor uniform within the lanes'
    vectors (the code generator then issues one scalar load per element).  The Y part runs along the vectors
    (a row, or a column tile's columns: the innermost dim last, a multiple of the width), so its line splits
    into the lanes' vectors; every alignment the X part adds is checked."""
    V = getattr(geom, "vector", 1)
    if V <= 1 or geom.mapping.kind not in ("rows", "columns"):
        return False
    s = acc.itemsize
    base = acc.base // s if acc.base % s == 0 else 1
    # lane_class(F_Y, V, b) for every alignment b at once: only its last test (contiguous vectors must
    # start aligned) depends on b, so the row's vectors are classified once and their starts checked per b
    if F_X.size == 0:
        return False                                # no alignment to check: no lane class asked
    if F_Y.size % V:
        return True
    G = F_Y.reshape(-1, V)
    if (G == G[:, :1]).all():
        return False
    if not ((G - G[:, :1]) == np.arange(V)).all():
        return True
    starts, aligns = _residues(G[:, 0], V)[0], _residues(F_X + base, V)[0]    # (by counting: no sort of the row)
    return bool(((starts[:, None] + aligns[None, :]) % V).any())


def _dedup_separable(geom, F_X, F_Y, mx, my, const_y=None):
    """Distinct (block, element) pairs when block = B_X + B_Y and element = F_X + F_Y (``mx``/``my``: the
    lines' masks, None where every element is accessed; ``const_y``: whether ``F_Y`` is one value, where the
    caller knows, :func:`one_value_per_line`)."""
    B_X, B_Y = geom.block_parts()
    B_X = B_X if mx is None else B_X[mx]
    B_Y = B_Y if my is None else B_Y[my]
    const_x = F_X.size == 0 or (F_X == F_X[0]).all()
    if const_y is None:
        const_y = F_Y.size == 0 or (F_Y == F_Y[0]).all()
    if const_y:
        # element depends on x only: pairs (B_X + B_Y, F_X)
        if not _sums_injective(B_X, B_Y):
            return None
        return distinct_pairs(*_as_pairs(B_X, F_X))[0] * _distinct(B_Y)
    if const_x:
        if not _sums_injective(B_X, B_Y):
            return None
        return _distinct(B_X) * distinct_pairs(*_as_pairs(B_Y, F_Y))[0]
    # element depends on both: injective -> every lane access is a distinct element
    if all_distinct(F_X) and all_distinct(F_Y) and (
            _gap_ok(F_X, F_Y) or _gap_ok(F_Y, F_X) or sums_distinct(F_X, F_Y) or sums_distinct(F_Y, F_X)):
        return F_X.size * F_Y.size
    # X lines that share no block, or no element: each line's pairs are the first line's, moved
    if _gap_ok(B_X, B_Y) or _gap_ok(F_X, F_Y):
        return F_X.size * distinct_pairs(*_as_pairs(B_Y, F_Y))[0]
    # both sums injective on their distinct values (a mask[batch, key] read by every head's query rows: the
    # batch part's distinct values lie a key row apart): a (block, element) pair names its X and Y halves
    if _sums_injective(F_X, F_Y) and _sums_injective(B_X, B_Y):
        return distinct_pairs(*_as_pairs(B_X, F_X))[0] * distinct_pairs(*_as_pairs(B_Y, F_Y))[0]
    return None


def _sums_injective(B_X: np.ndarray, B_Y: np.ndarray) -> bool:
    """Every block ``B_X[x] + B_Y[y]`` names its own pair of an X and a Y block part: one part's distinct
    values lie further apart than the other's range (a column mapping's split blocks, ``0 .. splits - 1`` along
    the reduced dim, beside its tiles' ``splits * tile`` across: the tiles' gaps hold the splits)."""
    return _gap_ok(distinct(B_X), B_Y) or _gap_ok(distinct(B_Y), B_X)


def _as_pairs(a, b):
    return np.ascontiguousarray(a, dtype=np.int64), np.ascontiguousarray(b, dtype=np.int64)


BIG = np.iinfo(np.int64).max


def rows_distinct(M: np.ndarray) -> tuple[int, int]:
    """Distinct values per row of ``M`` (``BIG`` marks an empty lane), summed; and rows with a value."""
    if M.size == 0:
        return 0, 0
    if not bool((M[:, 1:] >= M[:, :-1]).all()):
        M = np.sort(M, axis=1)             # a row out of order: sort it (BIG goes last)
    changes = int(np.count_nonzero(M[:, 1:] != M[:, :-1]))
    with_big = int(np.count_nonzero(M[:, -1] == BIG))
    empty = int(np.count_nonzero(M[:, 0] == BIG))
    return M.shape[0] + changes - with_big, M.shape[0] - empty


def count_flat(geom, acc):
    """A flat (grid-stride) mapping: warp instruction = 32 consecutive elements, a block's
    elements = ``block`` consecutive ones per loop trip; count on those runs in linear time."""
    m = geom.mapping
    s, n_all = acc.itemsize, geom.size
    total = m.grid * m.block
    iters = -(-n_all // total)
    if acc.identity and acc.mask is None and acc.extra.get("logical") is None:
        # element e at base + s*e: a warp's lanes are contiguous, its sectors run first..last; every full
        # warp starts at the same address modulo 32 (base + 32*s*w), so all full warps touch as many sectors
        full, rest = divmod(n_all, 32)
        r0 = acc.base % SECTOR
        sectors = full * ((r0 + s * 31) // SECTOR + 1) + (((r0 + s * (rest - 1)) // SECTOR + 1) if rest else 0)
        return {"n": n_all, "bytes": s * n_all, "sectors": sectors, "requests": full + (1 if rest else 0),
                "conflicts": 0}
    if FLAT_STRUCTURED:
        out = _count_flat_by_structure(geom, acc)
        if out is not None:
            return out
    F = acc.flat(geom)
    sel = geom.full(acc.mask) if acc.mask is not None else None
    n = int(sel.sum()) if sel is not None else n_all
    out = {"n": n, "bytes": 0, "sectors": 0, "requests": 0, "conflicts": 0}
    if n == 0:
        return out
    pad = iters * total
    S = np.full(pad, BIG, dtype=np.int64)
    S[:n_all] = (acc.base + s * F) // SECTOR
    if sel is not None:
        S[:n_all][~sel] = BIG
    out["sectors"], out["requests"] = rows_distinct(S.reshape(-1, 32))
    if acc.dedup and not acc.identity and not terms_injective(acc.terms, geom.shape):
        E = np.full(pad, BIG, dtype=np.int64)
        E[:n_all] = F
        if sel is not None:
            E[:n_all][~sel] = BIG
        E = E.reshape(iters, m.grid, m.block).transpose(1, 0, 2).reshape(m.grid, iters * m.block)
        out["bytes"] = s * rows_distinct(E)[0]
    else:
        out["bytes"] = s * n
    return out


def count_flat_uniform(geom, acc, vector: int = 1):
    """One address read at every element of a grid-stride loop (a scalar: a dynamic slice's start, a learning
    rate), no mask: each warp instruction (32 lanes' ``vector``-element vectors: one load of the one element)
    touches one sector, and a block that runs any element reads the one element (a block runs vectors
    ``b * block ..`` in the first trip).  None for any other access, or a domain that ends in a scalar tail."""
    m, n = geom.mapping, geom.size
    if not n or n % vector or acc.mask is not None or any(np.size(t) != 1 for t in acc.terms):
        return None
    warps, blocks = -(-n // (WARP_LANES * vector)), min(m.grid, -(-n // (vector * m.block)))
    reads = blocks if acc.dedup and not acc.identity else n
    return {"n": n, "bytes": acc.itemsize * reads, "sectors": warps, "requests": warps, "conflicts": 0}


def lane_class(F: np.ndarray, V: int, base_elems: int = 0) -> str:
    """How a flat mapping's vectors (``V`` consecutive domain elements) sit in a tensor whose element
    index at each domain element is ``F`` (domain order): ``contiguous`` (each vector reads ``V``
    consecutive, aligned elements: one vector load), ``uniform`` (one element per vector: one scalar
    load), else ``scattered`` (one load per element).  The code generator reaches the same answer
    from the graph's views (``astitch_sim.plan.vector_width``); here it is read off the addresses."""
    if V <= 1 or F.size % V:
        return "scattered"
    G = F.reshape(-1, V)
    # (the first vector tells which of the two whole checks may pass; no vectors at all: uniform, vacuously)
    lanes = G[0] - G[0, 0] if G.shape[0] else np.zeros(V, np.int64)
    if not lanes.any() and (G == G[:, :1]).all():
        return "uniform"
    if (lanes == np.arange(V)).all() and ((G - G[:, :1]) == np.arange(V)).all() \
            and not ((G[:, 0] + base_elems) % V).any():
        return "contiguous"
    return "scattered"


def count_flat_vectors(geom, acc):
    """A flat mapping with vectors: a warp's vector access covers ``32 * vector`` consecutive domain
    elements (its 32 threads' vectors side by side), one request however wide; a tensor read
    scattered is ``vector`` scalar requests.  Sectors are what the addresses touch, as without vectors.

    Six ways to the same counters, cheapest first: the tensor's own index (one formula), one address
    read everywhere (``count_flat_uniform``, one formula), a statistic of the leading dims broadcast
    along the rows (``count_flat_outer`` with the warp's ``32 * vector`` elements), an index that is a
    sum of an outer and an inner part
    (``_count_flat_structured``), one of trailing dims that a warp row holds whole several times
    (``_count_flat_short_period``), and otherwise the addresses chunk by chunk of warp rows
    (``_count_flat_vector_chunks``), so that no array the size of the domain is ever built.

    A domain that is not a whole number of vectors (``flat_vectors``: vectors across rows, the last
    ``size % vector`` elements a scalar tail) is counted by the identity formula or chunk by chunk: the
    whole vectors as above, then the tail's elements, one scalar instruction per distinct address (the one
    thread that takes them loads each address once)."""
    m = geom.mapping
    V = m.vector
    if acc.identity and acc.mask is None and acc.extra.get("logical") is None \
            and (acc.base // acc.itemsize) % V == 0 and acc.base % acc.itemsize == 0:
        return _count_vector_identity(geom, acc)
    if geom.size % V:
        return _count_flat_vector_chunks(geom, acc)
    out = _count_flat_by_structure(geom, acc, vector=V)
    return out if out is not None else _count_flat_vector_chunks(geom, acc)


def _count_flat_by_structure(geom, acc, vector: int = 1):
    """The flat counts that read the index's structure instead of its addresses, cheapest first (one address
    everywhere, an outer statistic, an outer and an inner part, a short period of trailing dims): the first
    that applies, its path counted in :data:`PATHS`; None where none does."""
    for path, way in (("flat_uniform", count_flat_uniform), ("flat_outer", count_flat_outer),
                      ("flat_structured", _count_flat_structured), ("flat_short_period", _count_flat_short_period)):
        out = way(geom, acc, vector=vector)
        if out is not None:
            took(path)
            return out
    return None


def _count_vector_identity(geom, acc):
    """The tensor read (or written) at the domain's own index, vectors aligned: warp row ``r`` covers
    elements ``r * span ..`` (``span = 32 * vector``), all rows start at the same address modulo 32.
    A scalar tail (the elements after the last whole vector) is an instruction, and a sector, per element."""
    s, n, V = acc.itemsize, geom.size, geom.mapping.vector
    span, tail = WARP_LANES * V, n % V
    full, rest = divmod(n - tail, span)
    r0 = acc.base % SECTOR
    sectors = full * ((r0 + s * span - 1) // SECTOR + 1) + (((r0 + s * rest - 1) // SECTOR + 1) if rest else 0)
    return {"n": n, "bytes": s * n, "sectors": sectors + tail, "requests": full + (1 if rest else 0) + tail,
            "conflicts": 0}


#: elements per chunk of the chunked vector count (a multiple of every warp span: 32 lanes x up to 16)
VECTOR_CHUNK = 1 << 21


def _flat_range(geom, a, lo: int, hi: int, coords: dict = None) -> np.ndarray:
    """Elements ``lo .. hi-1`` (domain order) of the broadcastable array ``a``, without broadcasting
    the rest of the domain.

    Only the dims ``a`` varies along need a coordinate (``(e // stride) % extent``, as ``unravel``
    computes it); ``coords`` keeps those already computed for this range, so the index terms and the
    mask of one access share them (a rank-4 domain's chunk used to be unravelled once per term)."""
    a = np.asarray(a)
    if not geom.shape:
        return np.broadcast_to(a, (1,))[lo:hi]
    a = a.reshape((1,) * (geom.rank - a.ndim) + a.shape)
    if all(a.shape[k] == 1 for k in range(geom.rank)):
        return np.broadcast_to(a.reshape(-1), (hi - lo,))
    if a.shape == tuple(geom.shape):       # a whole-domain array (a dynamic-update-slice's mask): its own elements
        return a.reshape(-1)[lo:hi]
    coords = {} if coords is None else coords
    if "flat" not in coords:
        coords["flat"] = np.arange(lo, hi, dtype=np.int64)
    idx = []
    for k in range(geom.rank):
        if a.shape[k] == 1:
            idx.append(0)
            continue
        if k not in coords:
            stride = int(np.prod(geom.shape[k + 1:], dtype=np.int64))
            c = coords["flat"] // stride if stride > 1 else coords["flat"]
            coords[k] = c % int(geom.shape[k]) if k > 0 else c
        idx.append(coords[k])
    return a[tuple(idx)]


def _count_flat_vector_chunks(geom, acc):
    """The addresses themselves, ``VECTOR_CHUNK`` elements (whole warp rows) at a time.  A chunk's
    sectors and requests are counted for both instruction shapes (one vector instruction per warp
    row, or one scalar instruction per vector slot); the tensor's lane class over the whole domain
    (``lane_class``, per chunk, combined) says which applies.  Distinct (block, element) pairs for
    the deduplicated byte count are gathered across chunks (a block's trips lie in different chunks) in a
    :class:`~.pairs.PairSet`, which counts them by table where it can instead of sorting them."""
    m = geom.mapping
    s, n_all, V = acc.itemsize, geom.size, m.vector
    span = WARP_LANES * V
    base_elems = acc.base // s if acc.base % s == 0 else 1
    total = m.grid * m.block
    # (an index that names each element once reads n distinct (block, element) pairs: no pairs to gather)
    dedup = acc.dedup and not acc.identity and not terms_injective(acc.terms, geom.shape)
    pairs, K, f_lo = None, 0, 0
    if dedup:       # keys block * K + (element - f_lo), K the elements' range: in [0, grid * K) (pairs.PairSet)
        f_lo = sum(int(np.min(t)) for t in acc.terms if np.size(t))
        K = 1 + sum(int(np.max(t)) for t in acc.terms if np.size(t)) - f_lo
        pairs = PairSet(K, 0, m.grid * K - 1, n_all)
    whole = n_all - n_all % V                     # elements in whole vectors; the rest: the scalar tail
    classes: set = set()
    n = 0
    counts = {"vector": [0, 0], "scalar": [0, 0]}
    for lo in range(0, whole, VECTOR_CHUNK):
        hi = min(whole, lo + VECTOR_CHUNK)
        coords = {}
        if lo == 0 and hi == n_all:         # one chunk, the whole domain: the terms summed where they are small
            F = acc.flat(geom)
            sel = geom.full(acc.mask).astype(bool) if acc.mask is not None else None
        else:
            F = sum((_flat_range(geom, t, lo, hi, coords).astype(np.int64) for t in acc.terms),
                    np.zeros(hi - lo, np.int64))
            sel = _flat_range(geom, acc.mask, lo, hi, coords).astype(bool) if acc.mask is not None else None
        n += int(sel.sum()) if sel is not None else hi - lo
        if "scattered" not in classes:
            classes.add(lane_class(F, V, base_elems))
        rows = -(-(hi - lo) // span)
        S = np.full(rows * span, BIG, dtype=np.int64)
        S[:hi - lo] = (acc.base + s * F) >> SECTOR_SHIFT
        if sel is not None:
            S[:hi - lo][~sel] = BIG
        # one chunk: its lane class already says which instruction shape counts; several: both, until all are seen
        shapes = ("vector", "scalar") if whole > VECTOR_CHUNK else ("scalar" if "scattered" in classes else "vector",)
        for shape in shapes:
            M = S.reshape(rows, span) if shape == "vector" else \
                S.reshape(rows, WARP_LANES, V).transpose(0, 2, 1).reshape(-1, WARP_LANES)
            sec, req = rows_distinct(M)
            counts[shape][0] += sec
            counts[shape][1] += req
        if dedup:          # the lanes' blocks, only where a lane reads (a dynamic-update-slice's few updated rows)
            e = np.arange(lo, hi, dtype=np.int64) if sel is None else np.flatnonzero(sel) + lo
            B = ((e // V) % total) // m.block
            pairs.add(B * K + ((F if sel is None else F[sel]) - f_lo))
    tail = 0
    if whole < n_all:                             # one thread, one scalar load per distinct address
        coords = {}
        F = sum((_flat_range(geom, t, whole, n_all, coords).astype(np.int64) for t in acc.terms),
                np.zeros(n_all - whole, np.int64))
        if acc.mask is not None:
            F = F[_flat_range(geom, acc.mask, whole, n_all, coords).astype(bool)]
        n += F.size
        tail = int(distinct(F).size)
        if dedup and F.size:
            pairs.add(((whole // V) % total) // m.block * K + (F - f_lo))
    out = {"n": n, "bytes": 0, "sectors": 0, "requests": 0, "conflicts": 0}
    if n == 0:
        return out
    one = "scalar" if "scattered" in classes or len(classes) > 1 else "vector"
    out["sectors"], out["requests"] = counts[one][0] + tail, counts[one][1] + tail
    out["bytes"] = s * (pairs.count() if dedup else n)
    return out


#: threads of a warp
WARP_LANES = 32

#: use the outer x inner decomposition of flat accesses (tests switch it off to compare with the plain count)
FLAT_STRUCTURED = True


def _split_flat(geom, acc, span: int = 32):
    """An ``outer x inner`` view of a flat access: the domain's dims split at ``k`` so that every index
    term and the mask depend on outer dims only or on inner dims only, and a warp (``span`` consecutive
    elements: 32, or 32 vectors) never spans two outer positions (the inner size is a multiple of it).

    Returns ``(F_o, F_i, m_o, m_i)`` (index and mask over the outer and the inner grid, flattened) for
    the cheapest such split, or None.
    """
    shape, rank = geom.shape, geom.rank
    best = None
    for k in range(1, rank):
        P = int(np.prod(shape[k:]))
        if P % span:
            continue
        outer, inner = set(range(k)), set(range(k, rank))
        parts = [set(support(t, rank)) for t in acc.terms]
        if acc.mask is not None:
            parts.append(set(support(acc.mask, rank)))
        if not all(p <= outer or p <= inner for p in parts):
            continue
        cost = int(np.prod(shape[:k])) + 32 * P
        if best is None or cost < best[0]:
            best = (cost, k)
    if best is None:
        return None
    k = best[1]
    outer, inner = tuple(range(k)), tuple(range(k, rank))
    F_o = np.zeros(int(np.prod(shape[:k])), np.int64)
    F_i = np.zeros(int(np.prod(shape[k:])), np.int64)
    for t in acc.terms:
        if set(support(t, rank)) <= set(outer):
            F_o = F_o + geom.flat_part(np.asarray(t, np.int64), outer)
        else:
            F_i = F_i + geom.flat_part(np.asarray(t, np.int64), inner)
    m_o = m_i = None
    if acc.mask is not None:
        if set(support(acc.mask, rank)) <= set(outer):
            m_o = geom.flat_part(acc.mask, outer)
        else:
            m_i = geom.flat_part(acc.mask, inner)
    return F_o, F_i, m_o, m_i


def _count_flat_structured(geom, acc, vector: int = 1):
    """Exact counters of a flat access with an outer x inner structure (``_split_flat``), in
    ``O(outer + 32 * inner)`` instead of ``O(elements)``: every warp lies in one outer position,
    so its sectors depend on that position only through the start address modulo 32 (as in
    ``_count_separable``).  A block's distinct elements (the dedup byte count) are found the same
    way when a block lies inside one outer position, or reads one element per outer position;
    anything else returns None (the plain count runs).

    With ``vector`` elements per thread access (``count_flat_vectors``) a warp row is ``32 * vector``
    inner positions, a block's trip ``block * vector``, and the tensor's lane class (one vector
    instruction per warp row, or one scalar instruction per vector slot) is read off the inner index
    and the outer index's alignment, both of which a vector never leaves."""
    span = WARP_LANES * vector
    sp = _split_flat(geom, acc, span)
    if sp is None:
        return None
    F_o, F_i, m_o, m_i = sp
    m = geom.mapping
    s = acc.itemsize
    scattered = vector > 1 and _inner_lane_class(F_o, F_i, vector, acc) == "scattered"
    sel_o = np.ones(F_o.size, bool) if m_o is None else np.asarray(m_o, bool)
    sel_i = np.ones(F_i.size, bool) if m_i is None else np.asarray(m_i, bool)
    n_o, n_i = int(sel_o.sum()), int(sel_i.sum())
    out = {"n": n_o * n_i, "bytes": 0, "sectors": 0, "requests": 0, "conflicts": 0}
    if n_o * n_i == 0:
        return out
    Fo, Fi = F_o[sel_o], F_i[sel_i]
    pos_i = np.flatnonzero(sel_i)
    # the warp instruction of each inner position: its warp row, and with scattered vectors its slot
    W_i = (pos_i // span) * vector + pos_i % vector if scattered else pos_i // span
    out["sectors"], warps = sectors_over_starts(W_i, s * Fi, *_residues(acc.base + s * Fo, SECTOR))
    out["requests"] = n_o * warps
    if not acc.dedup or acc.identity:
        out["bytes"] = s * n_o * n_i
        return out
    P, chunk = F_i.size, m.block * vector
    one_trip = m.grid * chunk >= geom.size
    if one_trip and P % chunk == 0:
        # a block holds `chunk` consecutive inner positions of one outer position: its distinct elements
        # are the distinct inner offsets of its chunk (the outer offset only shifts them)
        out["bytes"] = s * n_o * distinct_pairs(pos_i // chunk, Fi)[0]
        return out
    if chunk % P == 0:
        pairs = whole_rows_pairs(np.flatnonzero(sel_o), Fo, [Fi], chunk // P, m.grid)
        if pairs is not None:
            took("whole_rows")
            out["bytes"] = s * pairs
            return out
    if all_distinct(Fo) and all_distinct(Fi) and (_gap_ok(Fo, Fi) or _gap_ok(Fi, Fo)):
        out["bytes"] = s * n_o * n_i                # every lane reads its own element: nothing to share
        return out
    if m_o is None and (Fo == Fo[0]).all() and all_distinct(Fi):
        # a column broadcast (bias[j] at every row): a block reads the distinct inner positions its trips cover
        out["bytes"] = s * _inner_positions_covered(geom.size, P, m.grid, chunk, sel_i)
        return out
    if acc.mask is None:
        out["bytes"] = _outer_and_period_bytes(geom, F_o, F_i, chunk, s)
        if out["bytes"] is not None:
            took("outer_and_period")
            return out
    return None


def whole_rows_pairs(pos_o: np.ndarray, Fo: np.ndarray, inner: list, rows: int, grid: int) -> Optional[int]:
    """Distinct (block, element) pairs of flat reads ``Fo[o] + f`` (``f`` in each read's inner values ``inner``)
    at the outer positions ``pos_o``, where a block's trip holds ``rows`` whole outer positions (its chunk a
    multiple of the inner size): the block of outer position ``o`` is ``(o // rows) % grid`` for every inner
    position, whichever trip.  When the distinct outer offsets lie further apart than the inner values span,
    two outer offsets never reach one element: each distinct (block, offset) pair reads every inner value
    once.  (Rotary embedding's ``pos[s]`` read at every ``(s, head, d)`` under the concatenate's mask, and ``q``
    read through the two slices of one concatenate: 4M lane accesses, counted on 32K outer positions.)  None
    where the offsets may meet."""
    values = distinct(np.concatenate([np.asarray(f).reshape(-1) for f in inner])) if inner else np.zeros(0, np.int64)
    if values.size == 0 or not _gap_ok(distinct(Fo), values):
        return None
    return distinct_pairs(*_as_pairs((pos_o // rows) % grid, Fo))[0] * int(values.size)


def union_flat_whole_rows(reads: list) -> Optional[int]:
    """:func:`union_bytes` of reads that all split the same flat geometry at the same outer positions with the
    same outer part and no outer mask, a block's trip holding whole outer positions: the union's inner values
    per offset (:func:`whole_rows_pairs`) in ``O(outer + inner)``; None otherwise (the caller lists pairs)."""
    geom = reads[0][0]
    if not getattr(geom, "flat", False) or any(g is not geom for g, _ in reads):
        return None
    m = geom.mapping
    span = WARP_LANES * m.vector if m.per_thread > 1 else WARP_LANES
    splits = [_split_flat(geom, acc, span) for _, acc in reads]
    if any(sp is None for sp in splits):
        return None
    F_o, F_i0 = splits[0][0], splits[0][1]
    P, chunk = F_i0.size, m.block * m.vector
    if chunk % P or any(sp[2] is not None or sp[1].size != P or not np.array_equal(sp[0], F_o) for sp in splits):
        return None
    inner = [sp[1] if sp[3] is None else sp[1][np.asarray(sp[3], bool)] for sp in splits]
    return whole_rows_pairs(np.arange(F_o.size, dtype=np.int64), F_o, inner, chunk // P, m.grid)


def _constant_runs(values: np.ndarray, dims: tuple) -> int:
    """The largest product ``R`` of trailing extents of ``dims`` (row-major; ``values`` indexed by their flattened
    grid) over whose blocks ``values`` is constant: an outer offset's runs (1 at least)."""
    best = 1
    for j in range(len(dims) - 1, -1, -1):
        R = int(np.prod(dims[j:], dtype=np.int64))
        rows = values.reshape(-1, R)
        if not (rows == rows[:, :1]).all():
            break
        best = R
    return best


def _period(values: np.ndarray, dims: tuple) -> Optional[int]:
    """The smallest product ``Q`` of trailing extents of ``dims`` that ``values`` (indexed by their flattened grid)
    repeats with: every block of ``Q`` equals the first (the whole grid at most; None only for no dims)."""
    for j in range(len(dims) - 1, -1, -1):
        Q = int(np.prod(dims[j:], dtype=np.int64))
        if (values.reshape(-1, Q) == values[:Q]).all():
            return Q
    return None


def _outer_and_period_bytes(geom, F_o, F_i, chunk: int, s: int) -> Optional[int]:
    """Bytes of the distinct (block, element) pairs of an unmasked flat access ``A[e // P_o] + G[e % Q]``:
    an outer offset constant over runs of ``P_o`` elements, a multiple of a block's trip (``chunk``
    elements, so a trip lies in one run), and an inner part repeating with the period ``Q`` of some
    trailing dims, ``G`` all distinct, distinct outer offsets further apart than ``G`` spans -- attention's
    ``mask[batch, key]`` read at every ``(batch, head, query, key)``, a block's two unrolled trips in two
    batches.  Elements of different outer offsets never meet, so a block's distinct elements are, per outer
    offset, the residues mod ``Q`` its trips there cover (:func:`_inner_positions_covered`, keyed by block
    and offset); None when the access is not of that form."""
    P = F_i.size
    dims = geom.shape
    k = next(j for j in range(geom.rank + 1) if int(np.prod(dims[j:], dtype=np.int64)) == P)
    Q = _period(F_i, dims[k:])
    R = _constant_runs(F_o, dims[:k])
    if Q is None or (R * P) % chunk or not all_distinct(F_i[:Q]) or not _gap_ok(distinct(F_o), F_i[:Q]):
        return None
    run = R * P                                   # P_o: elements per run of one outer offset
    runs = F_o[::R]                               # each run's offset, coded densely
    codes = np.searchsorted(distinct(runs), runs)
    m = geom.mapping
    return s * _inner_positions_covered(geom.size, Q, m.grid, chunk, np.ones(Q, bool), outer=(run, codes))


def _count_flat_short_period(geom, acc, vector: int = 1):
    """Exact counters of a flat access whose index and mask depend only on trailing dims of ``P``
    elements that a warp row (``32 * vector`` elements) holds a whole number of times: a per-column
    statistic over short rows (batch norm's ``mean[c]`` read at every ``(r, c)`` of ``[65536, 64]``,
    two rows per warp row of 4-element vectors), which ``_split_flat`` cannot split since a warp spans
    rows.  Every warp row starts at a multiple of ``P``, so every full one reads the same addresses and
    the last, partial one a prefix of them: two rows counted instead of ``O(elements)``.  A block's
    distinct elements are the inner positions its trips cover (``_inner_positions_covered``) where the
    inner index is one element per position; anything else returns None."""
    shape, rank = geom.shape, geom.rank
    span = WARP_LANES * vector
    used = set().union(*(support(t, rank) for t in acc.terms))
    if acc.mask is not None:
        used |= set(support(acc.mask, rank))
    k = min(used, default=rank)
    P = int(np.prod(shape[k:], dtype=np.int64))
    n = geom.size
    if k == 0 or span % P or n % vector:
        return None
    inner = tuple(range(k, rank))
    F_i = sum((geom.flat_part(np.asarray(t, np.int64), inner) for t in acc.terms), np.zeros(P, np.int64))
    m_i = np.ones(P, bool) if acc.mask is None else geom.flat_part(np.asarray(acc.mask, bool), inner)
    if acc.dedup and not acc.identity and not all_distinct(F_i[m_i]):
        return None
    s = acc.itemsize
    F_w, m_w = np.tile(F_i, span // P), np.tile(m_i, span // P)
    full, rest = divmod(n, span)
    scattered = vector > 1 and lane_class(F_w[:min(n, span)], vector,
                                          acc.base // s if acc.base % s == 0 else 1) == "scattered"
    out = {"n": full * int(m_w.sum()) + int(m_w[:rest].sum()), "bytes": 0, "sectors": 0, "requests": 0,
           "conflicts": 0}
    if out["n"] == 0:
        return out
    S = np.where(m_w, (acc.base + s * F_w) // SECTOR, BIG)
    for rows, length in ((full, span), (1 if rest else 0, rest)):
        row = np.where(np.arange(span) < length, S, BIG)
        M = row.reshape(WARP_LANES, vector).T if scattered else row.reshape(1, span)
        sec, req = rows_distinct(M)
        out["sectors"] += rows * sec
        out["requests"] += rows * req
    if acc.dedup and not acc.identity:
        m = geom.mapping
        out["bytes"] = s * _inner_positions_covered(n, P, m.grid, m.block * vector, m_i)
    else:
        out["bytes"] = s * out["n"]
    return out


def _inner_positions_covered(n: int, P: int, grid: int, chunk: int, sel_i, outer=None) -> int:
    """Sum over blocks of the selected inner positions (``e % P``) a block's trips cover, where block
    ``b``'s trip ``t`` covers elements ``[(t * grid + b) * chunk, + chunk)`` of an ``n``-element domain.
    Each trip is an interval of inner positions (two where it wraps past ``P``); a block's intervals are
    merged by a running maximum over them sorted by start, blocks kept apart by an offset.  ``outer``:
    ``(P_o, codes)``, trips of one block counted apart where ``codes[e // P_o]`` differ (a trip lies in
    one outer position: ``P_o`` a multiple of ``chunk``)."""
    cs = np.concatenate(([0], np.cumsum(sel_i, dtype=np.int64)))
    trips = -(-n // (grid * chunk))
    e0 = (np.arange(trips, dtype=np.int64)[None, :] * grid + np.arange(grid, dtype=np.int64)[:, None]) * chunk
    blk = np.broadcast_to(np.arange(grid, dtype=np.int64)[:, None], e0.shape)
    valid = e0 < n
    e0, blk = e0[valid], blk[valid]
    keys = grid
    if outer is not None:        # a block's trips in different runs cover positions apart: key by (block, run code)
        P_o, codes = outer
        blk = blk * (int(codes.max()) + 1) + codes[e0 // P_o]
        used, blk = np.unique(blk, return_inverse=True)        # dense keys, as the blocks are
        keys = used.size
    length = np.minimum(e0 + chunk, n) - e0
    whole = np.zeros(keys, bool)
    whole[blk[length >= P]] = True                        # a trip as long as a row covers every position
    part = ~whole[blk]
    lo, blk, length = e0[part] % P, blk[part], length[part]
    hi = lo + length
    wrap = hi > P
    lo = np.concatenate((lo, np.zeros(int(wrap.sum()), np.int64)))
    hi = np.concatenate((np.minimum(hi, P), hi[wrap] - P))
    blk = np.concatenate((blk, blk[wrap]))
    off = blk * (2 * P + 2)
    order = np.argsort(off + lo, kind="stable")
    lo, hi, off = lo[order] + off[order], hi[order] + off[order], off[order]
    reach = np.maximum.accumulate(hi)
    start = np.maximum(lo, np.concatenate(([0], reach[:-1])))
    keep = start < hi
    covered = int((cs[hi[keep] - off[keep]] - cs[start[keep] - off[keep]]).sum())
    return covered + int(whole.sum()) * int(cs[-1])


def _inner_lane_class(F_o, F_i, vector: int, acc) -> str:
    """``lane_class`` of ``F_o[o] + F_i[i]`` over the whole domain, from the two parts: a vector lies in
    one outer position, so it is uniform or contiguous as its inner part is; contiguous vectors must
    also start aligned for every outer offset."""
    inner = lane_class(F_i, vector)
    if inner != "contiguous":
        return inner
    base_elems = acc.base // acc.itemsize if acc.base % acc.itemsize == 0 else 1
    starts = distinct(F_i.reshape(-1, vector)[:, 0] % vector)
    offsets = distinct((F_o + base_elems) % vector)
    return "contiguous" if not ((starts[:, None] + offsets[None, :]) % vector).any() else "scattered"


def count_flat_outer(geom, acc, vector: int = 1):
    """Exact counters of an unmasked flat access whose index depends only on the leading dims
    (a row's statistic broadcast along the row: ``max[r]`` read at every ``(r, c)``), for any
    row length: element ``e`` reads ``F_o[e // P]`` (``P`` = the trailing dims' size), so a warp
    (32 consecutive elements) and a block's chunk of one loop trip (``block`` consecutive
    elements) each read a contiguous range of rows.  With the rows' sectors in order and the
    rows' elements all different, a range's distinct sectors and elements follow from its ends:
    ``O(warps + grid * trips)`` instead of ``O(elements)``.  Anything else returns None.

    With ``vector`` elements per thread access a warp instruction covers ``32 * vector`` consecutive
    elements and a block's trip ``block * vector``; that holds while no vector crosses a row (the
    trailing size a multiple of ``vector``: each vector then reads one element, ``lane_class``'s
    "uniform")."""
    if acc.mask is not None or acc.dedup and acc.identity:
        return None
    shape, rank = geom.shape, geom.rank
    k = max((max(support(t, rank), default=-1) for t in acc.terms), default=-1) + 1
    if k == 0 or k == rank:
        return None
    outer = tuple(range(k))
    F_o = np.zeros(int(np.prod(shape[:k])), np.int64)
    for t in acc.terms:
        F_o = F_o + geom.flat_part(np.asarray(t, np.int64), outer)
    s, n, P = acc.itemsize, geom.size, int(np.prod(shape[k:]))
    if P % vector:
        return None
    sec = (acc.base + s * F_o) // SECTOR
    if F_o.size > 1 and not (bool((sec[1:] >= sec[:-1]).all()) and bool((F_o[1:] > F_o[:-1]).all())):
        return None
    # sectors: a warp's rows run lo..hi; its distinct sectors are 1 + the sector changes between them
    changes = np.concatenate(([0], np.cumsum(sec[1:] != sec[:-1])))
    span = WARP_LANES * vector
    first = np.arange(0, n, span, dtype=np.int64)
    last = np.minimum(first + span - 1, n - 1)
    sectors = first.size + int((changes[last // P] - changes[first // P]).sum())
    out = {"n": n, "bytes": s * n, "sectors": sectors, "requests": int(first.size), "conflicts": 0}
    if acc.dedup:
        # a block's trips read row ranges in increasing order: their union counts each row once
        m = geom.mapping
        total, chunk = m.grid * m.block * vector, m.block * vector
        trips = -(-n // total)
        e0 = (np.arange(trips, dtype=np.int64)[None, :] * total
              + np.arange(m.grid, dtype=np.int64)[:, None] * chunk)            # [block, trip]
        valid = e0 < n
        lo, hi = e0 // P, (np.minimum(e0 + chunk, n) - 1) // P
        rows = int(((hi - lo + 1) * valid).sum())
        overlap = np.maximum(0, hi[:, :-1] - lo[:, 1:] + 1) * valid[:, 1:]
        out["bytes"] = s * (rows - int(overlap.sum()))
    return out


def count_dense(geom, acc):
    """Every lane access of the domain counted (the definition the fast paths shortcut)."""
    sel = geom.full(acc.mask) if acc.mask is not None else None
    if acc.space == Space.REGISTER or (sel is not None and not sel.any()) or geom.size == 0:
        n = int(sel.sum()) if sel is not None else geom.size
        return {"n": n, "bytes": 0, "sectors": 0, "requests": 0, "conflicts": 0}
    V = getattr(geom, "vector", 1)
    if acc.space == Space.GLOBAL and geom.size % V:
        return _count_dense_tail(geom, acc, sel)
    return count_lanes(acc, geom.W, acc.flat(geom), sel, lambda: geom.full(geom.block),
                       lambda: geom.full(geom.iteration), V)


def _count_dense_tail(geom, acc, sel):
    """:func:`count_dense` of a flat domain that ends in a scalar tail (``flat_vectors``): the whole vectors
    as :func:`count_lanes` counts them, then the tail's elements, one scalar instruction (and sector) per
    distinct address, as the one thread that takes them loads each address once; bytes over both."""
    V, s = geom.vector, acc.itemsize
    whole = geom.size - geom.size % V
    F, B, it = acc.flat(geom), geom.full(geom.block), geom.full(geom.iteration)
    body = count_lanes(acc, geom.W[:whole], F[:whole], None if sel is None else sel[:whole],
                       lambda: B[:whole], lambda: it[:whole], V)
    F_t = F[whole:] if sel is None else F[whole:][sel[whole:]]
    tail = int(distinct(F_t).size)
    out = {**body, "n": body["n"] + F_t.size}
    out["sectors"] += tail
    out["requests"] += tail
    if acc.dedup and not acc.identity:
        out["bytes"] = s * distinct_pairs(B if sel is None else B[sel], F if sel is None else F[sel])[0]
    else:
        out["bytes"] = s * out["n"]
    return out


def count_lanes(acc, W, F, sel, block, iteration, vector: int) -> dict:
    """The counters of lane accesses given as flat arrays: warp instruction ``W`` and element ``F`` of each
    (``sel``: which take part; ``block()``, ``iteration()``: their block and loop trip, asked for only when
    needed; ``vector``: the mapping's vector width)."""
    s = acc.itemsize
    n = int(sel.sum()) if sel is not None else W.size
    out = {"n": n, "bytes": 0, "sectors": 0, "requests": 0, "conflicts": 0}
    if n == 0 or acc.space == Space.REGISTER:
        return out
    if vector > 1 and acc.space == Space.GLOBAL and \
            lane_class(F, vector, acc.base // s if acc.base % s == 0 else 1) == "scattered":
        W = W * vector + iteration() % vector     # one instruction per element
    if sel is not None:
        W, F = W[sel], F[sel]
    A = F * s                     # byte addresses, computed in place (each temporary is domain-sized)
    A += acc.base
    if acc.space == Space.GLOBAL:
        A //= SECTOR
        out["sectors"], out["requests"] = distinct_pairs(W, A)
        del A
        if acc.dedup and not acc.identity:
            B = block()
            if sel is not None:
                B = B[sel]
            out["bytes"] = s * distinct_pairs(B, F)[0]
        else:
            out["bytes"] = s * n
    else:
        out["conflicts"] = bank_conflicts(W, A, s)
        out["requests"] = distinct_count(W)
        out["bytes"] = s * n
    return out


# ---------------------------------------------------------------------------
# one buffer read several ways in one stage: the union of (block, element) pairs
# ---------------------------------------------------------------------------

#: a read with more distinct (block, element) pairs than this is not listed pair by pair
PAIR_LIMIT = 1 << 22


def _block_full(geom) -> np.ndarray:
    if getattr(geom, "flat", False) and "block" not in geom.__dict__:
        m = geom.mapping
        e = np.arange(geom.size, dtype=np.int64) // m.vector
        return (e % (m.grid * m.block)) // m.block
    return geom.full(geom.block)


def pair_keys(geom, acc, K: int, limit: int = PAIR_LIMIT, unique: bool = True):
    """``block * K + element`` keys of a read, or None if there would be more than ``limit``.

    Distinct and sorted when ``unique``; otherwise possibly repeated, in no order (the caller
    deduplicates them all at once, see :mod:`.pairs`, and a sort per read would be wasted)."""
    finish = distinct if unique else (lambda a: np.asarray(a).reshape(-1))
    sp = _split(geom, acc)
    if sp is not None:
        F_X, F_Y, mx, my = sp
        selx = np.ones(F_X.size, bool) if mx is None else mx
        sely = np.ones(F_Y.size, bool) if my is None else my
        B_X, B_Y = geom.block_parts()
        bx, fx, by, fy = B_X[selx], F_X[selx], B_Y[sely], F_Y[sely]
        if fy.size == 0 or (fy == fy[0]).all():
            px = distinct(bx * K + fx + (fy[0] if fy.size else 0))
            ub = distinct(by)
            if px.size * ub.size <= limit:
                return finish((px[:, None] + ub[None, :] * K).ravel())
        elif fx.size == 0 or (fx == fx[0]).all():
            py = distinct(by * K + fy + (fx[0] if fx.size else 0))
            ub = distinct(bx)
            if py.size * ub.size <= limit:
                return finish((py[:, None] + ub[None, :] * K).ravel())
    n = geom.count(acc.mask)
    if n > limit:
        return None
    F, B = acc.flat(geom), _block_full(geom)
    if acc.mask is not None:
        sel = geom.full(acc.mask)
        F, B = F[sel], B[sel]
    return finish(B * K + F)


def union_bytes(reads: list, K: int) -> int:
    """Distinct (block, element) pairs over several reads ``[(geom, acc)]`` of one buffer (``K`` elements)."""
    whole_rows = union_flat_whole_rows(reads)
    if whole_rows is not None:
        return whole_rows
    keys, big = [], []
    for geom, acc in reads:
        k = pair_keys(geom, acc, K, unique=False)
        (big.append((geom, acc)) if k is None else keys.append(k))
    if not big:
        return count_distinct_keys(keys, K)
    if len(big) == 1:
        geom, acc = big[0]
        if acc.identity and acc.mask is None and geom.kind == "element" and not acc.extra.get("logical") is not None:
            # every element read once, by the block locate() gives it: a small pair is new unless it is that
            small = distinct(np.concatenate(keys)) if keys else np.zeros(0, np.int64)
            b, f = small // K, small % K
            owner = np.asarray(geom.mapping.locate(f)[0]) if f.size else f
            return geom.size + int(np.count_nonzero(owner != b))
    for geom, acc in big:
        keys.append(pair_keys(geom, acc, K, limit=1 << 62, unique=False))
    return count_distinct_keys(keys, K)


# ---------------------------------------------------------------------------
# the global address space
# ---------------------------------------------------------------------------

def layout_strides(node) -> list:
    """Element strides of a node's buffer from its layout (minor-to-major dims)."""
    strides, acc = [0] * node.rank, 1
    for d in node.layout:
        strides[d] = acc
        acc *= node.shape[d]
    return strides


def uninitialised(shape, dtype) -> np.ndarray:
    """A fresh buffer full of 0xFF bytes: NaN for floats, -1 for ints -- reading it before it is written shows."""
    a = np.empty(shape, dtype=dtype)
    a.reshape(-1).view(np.uint8)[...] = 0xFF
    return a


class GlobalMemory:
    """Global buffers by node name, each at a 256-byte aligned base address.

    A kernel's result buffer is *reserved* (:meth:`reserve`: its address taken, no host memory yet) and
    filled with 0xFF bytes (:func:`uninitialised`) the first time anything reads or writes part of it.  A
    stage that writes every element at once hands its freshly computed array over (:meth:`adopt`) instead of
    copying it into a poisoned buffer: at 8192x32000 that is a gigabyte not allocated and not copied per
    kernel, and a read before the write still shows poison (the buffer materialises poisoned first)."""

    def __init__(self):
        self.arrays: dict = {}
        self.base: dict = {}
        self.pending: dict = {}          # reserved, not yet touched: name -> (shape, numpy dtype)
        self.name_at: dict = {}          # base address -> buffer name (which tensor an access touches)
        self.nbytes: dict = {}           # buffer name -> its size in bytes
        self.top = 0
        # id of each array in ``arrays`` -> how many buffers hold it (every one is alive while held, so an id
        # found here is that array's): whether a value is some buffer's array, in one lookup, not a walk over
        # every live buffer (a training step's hundreds of parameters, at each of its thousand stores)
        self._held: dict = {}

    def _set(self, name: str, array: np.ndarray) -> None:
        self._pop(name)
        self.arrays[name] = array
        self._held[id(array)] = self._held.get(id(array), 0) + 1

    def _pop(self, name: str) -> None:
        old = self.arrays.pop(name, None)
        if old is not None:
            left = self._held.pop(id(old)) - 1
            if left:
                self._held[id(old)] = left

    def place(self, name: str, array: np.ndarray, nbytes: int) -> np.ndarray:
        self._address(name, nbytes)
        self.pending.pop(name, None)
        self._set(name, array)
        return array

    def reserve(self, name: str, shape, dtype, nbytes: int) -> None:
        """A result buffer: an address now, poisoned host memory only when first touched."""
        self._address(name, nbytes)
        self._pop(name)
        self.pending[name] = (tuple(shape), np.dtype(dtype))

    def adopt(self, name: str, value) -> bool:
        """Make ``value`` the whole of reserved buffer ``name`` without a copy, if it can be: the buffer is
        still untouched, ``value`` has its shape and dtype, owns its C-contiguous data and is no other
        buffer's array (an input handed through unchanged stays the input's).  False: copy it instead."""
        spec = self.pending.get(name)
        if (spec is None or not isinstance(value, np.ndarray) or (value.shape, value.dtype) != spec
                or value.base is not None or not value.flags.c_contiguous or not value.flags.writeable
                or id(value) in self._held):
            return False
        del self.pending[name]
        self._set(name, value)
        return True

    def _address(self, name, nbytes) -> None:
        if name not in self.base:
            self.base[name] = self.top
            self.name_at[self.top] = name
            self.nbytes[name] = nbytes
            self.top += -(-max(nbytes, 1) // ALIGN) * ALIGN

    def release(self, name: str) -> None:
        """Drop a dead buffer's values; its address range stays allocated (bases never move)."""
        self._pop(name)
        self.pending.pop(name, None)

    def __contains__(self, name) -> bool:
        return name in self.arrays or name in self.pending

    def __getitem__(self, name) -> np.ndarray:
        if name in self.pending:
            shape, dtype = self.pending.pop(name)
            self._set(name, uninitialised(shape, dtype))
        return self.arrays[name]
