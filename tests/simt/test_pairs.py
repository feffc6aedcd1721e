"""The table counts of distinct (block, element) pairs (``astitch_sim/simt/pairs.py``) against a sort.

Each way (presence table, owner table, sort) is forced by the key bounds and checked against
``np.unique`` on random keys with many repeats, on keys where every element has one block, and on
keys outside the bounds a table was sized for (it must fall back to the sort, not miscount)."""
import numpy as np
import pytest

from astitch_sim.simt import memory
from astitch_sim.simt.pairs import PairSet, count_distinct_keys, pairs_by_owner


def _keys(rng, blocks, K, n, owned):
    e = rng.integers(0, K, n)
    b = (e * 7) % blocks if owned else rng.integers(0, blocks, n)
    return b * K + e


@pytest.mark.parametrize("blocks,K,n", [(4, 1000, 50000),        # presence table (range < 16 x keys)
                                        (5000, 30000, 40000),    # owner table (K <= 2 x keys)
                                        (5000, 10 ** 6, 30000)])  # sort
@pytest.mark.parametrize("owned", [False, True])
def test_pair_set_counts_what_a_sort_counts(blocks, K, n, owned):
    rng = np.random.default_rng(blocks + n)
    parts = [_keys(rng, blocks, K, n // 3, owned) for _ in range(3)]
    want = np.unique(np.concatenate(parts)).size
    assert count_distinct_keys(parts, K) == want
    ps = PairSet(K, 0, blocks * K - 1, n)
    for p in parts:
        ps.add(p)
    assert ps.count() == want


@pytest.mark.parametrize("lo,hi,expected", [(0, 999, 10 ** 4), (0, 10 ** 7, 10 ** 4)])
def test_pair_set_keys_outside_its_bounds_fall_back_to_the_sort(lo, hi, expected):
    K = 1000
    ps = PairSet(K, lo, hi, expected)
    ps.add(np.array([5, 5, 7, 999]))
    ps.add(np.array([5, 10 ** 8, 10 ** 8 + 3, -4]))        # outside [lo, hi]
    assert ps.count() == 6                                  # 5, 7, 999, 1e8, 1e8 + 3, -4


def test_pairs_by_owner_matches_the_sort():
    rng = np.random.default_rng(1)
    for owned in (False, True):
        S = rng.integers(0, 20000, 30000)
        W = (S // 64) if owned else rng.integers(0, 300, 30000)
        got = pairs_by_owner(W, S)
        pairs = np.unique(W * 20000 + S).size
        assert got == (pairs, np.unique(W).size)
        assert memory.distinct_pairs(W, S) == got
    assert pairs_by_owner(np.arange(10), np.arange(10)) is None          # too few pairs: the caller sorts
    assert pairs_by_owner(np.zeros(5000, np.int64), np.arange(5000) * 10 ** 4) is None   # too wide


def test_all_distinct_by_table_and_by_sort():
    assert memory.all_distinct(np.array([3, 1, 2]))
    assert not memory.all_distinct(np.array([3, 1, 3]))
    assert memory.all_distinct(np.array([10 ** 12, 1, 5]))            # too wide for a table: the sort
    assert not memory.all_distinct(np.array([10 ** 12, 1, 10 ** 12]))


def test_tables_never_exceed_their_cap(monkeypatch):
    """However many keys are expected, a table is never bigger than TABLE_MAX entries: past it the sort runs."""
    from astitch_sim.simt import pairs
    monkeypatch.setattr(pairs, "TABLE_MAX", 1000)
    ps = PairSet(500, 0, 5000, 10 ** 6)           # the range fits 16 x keys, not the cap
    assert ps.seen is None and ps.owner is not None
    ps = PairSet(5000, 0, 10 ** 7, 10 ** 6)
    assert ps.seen is None and ps.owner is None    # K past the cap: sort
    for p in (np.arange(3000), np.arange(3000) * 7 + 5000 * 3):
        ps.add(p)
    assert ps.count() == np.unique(np.concatenate([np.arange(3000), np.arange(3000) * 7 + 15000])).size
    S = np.arange(20000) % 1500
    assert pairs_by_owner(S // 100, S) is None       # S spans more than the cap
    assert memory.distinct_pairs(S // 100, S) == (1500, 15)
