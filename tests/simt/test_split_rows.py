"""A row split over blocks kept in parts (``geometry.PartLine``): its reduced line is its parts' starts plus one
part's elements, the reduce layout is read from one part (``Geometry.split_row_layout``, ``reduce.dealt_split_row``,
``reduce.split_row_runs``), and a shared-memory read gathers a value per part (``executor.gather_shared``).  Each
shortcut changes no counter, no timeline entry and no output byte, and each is really taken."""
from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import astitch_sim as asim
from astitch_sim.frontends.seeded import fixture_inputs
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.simt import geometry as geometry_module, reduce
from astitch_sim.simt.geometry import Geometry, PartLine
from anchor import TESTS_FILE
from test_simt_blocked_paths import on_and_off

ADAFACTOR = Path(TESTS_FILE).parent / "fixtures" / "models" / "adafactor_step.hlo"

#: plans with rows split over blocks: global sums with vectors (dealt), rows split 8 and 4 ways whose parts leave
#: their lanes' last trip part empty, and adafactor's global sums without vectors (one run per part)
PLANS = [("global_norm", {}, "astitch", {}), ("global_norm", {}, "xla", {}),
         ("global_norm", dict(rows=256, cols=1024), "astitch", {}),
         ("softmax", dict(rows=12, cols=8000), "astitch", {"launch_search": False}),
         ("softmax", dict(rows=64, cols=30000), "astitch", {"launch_search": False}),
         ("adafactor", {}, "astitch", {}), ("adafactor", {}, "unfused", {})]


def _plan(name, shape, strategy, opts):
    if name == "adafactor":
        g, x = asim.from_hlo_file(ADAFACTOR), fixture_inputs(ADAFACTOR)
    else:
        g = asim.workload(name, **shape)
        x = workload_inputs(g, 0)
    return asim.compile(g, strategy, "H100", **opts), x


@pytest.mark.parametrize("name,shape,strategy,opts", PLANS)
def test_a_split_rows_line_in_parts_changes_no_counter_and_no_value(name, shape, strategy, opts):
    """The reduced line in parts against the row located whole (``Geometry.split_row_line`` answering None)."""
    plan, x = _plan(name, shape, strategy, opts)
    assert any(a is not None for a in on_and_off(plan, x, Geometry, "split_row_line"))


@pytest.mark.parametrize("name,shape,strategy,opts", PLANS)
def test_a_split_rows_layout_from_one_part_changes_no_counter_and_no_value(name, shape, strategy, opts):
    """The reduce layout from one part's positions against the row's (``Geometry.split_row_layout`` answering
    None); where the parts' blocks are the only thing read row-long, the row is never made (no
    ``PartLine.whole``): the shortcut is what keeps a 4M-element split row's simulation off row-long arrays."""
    plan, x = _plan(name, shape, strategy, opts)
    assert any(a is not None for a in on_and_off(plan, x, Geometry, "split_row_layout"))
    if name in ("global_norm", "adafactor") and shape == {}:
        made = []
        real = PartLine.whole
        with mock.patch.object(PartLine, "whole", lambda self: made.append(1) or real(self)):
            asim.simulate(plan, x)
        assert not made, "the split row was made row-long anyway"


@pytest.mark.parametrize("domain,groups,splits,vector", [
    ((8, 4096), ((0,), (1,)), 4, 4),                # rows split 4 ways, 128-bit vectors
    ((1, 1 << 20), ((0,), (1,)), 256, 4),           # a global sum of 1M elements over 256 blocks
    ((4096, 1024), ((), (0, 1)), 256, 1),           # two reduced dims cut at 16 rows, no vectors
    ((12, 8000), ((0,), (1,)), 8, 4)])              # parts of 1000: 250 vectors over 1024 lanes
def test_a_part_line_locates_every_element(domain, groups, splits, vector):
    """A split row's geometry, made from its parts, puts every element where ``ThreadMapping.locate`` does; its
    parts' lines sum to the row at any coordinates."""
    n = int(np.prod([domain[d] for d in groups[1]]))
    m = ThreadMapping("rows", domain, groups, block=1024, grid=splits * max(1, int(np.prod([domain[d] for d in groups[0]]))),
                      threads_per_row=1024, splits=splits, combine="atomic", vector=vector, per_thread=vector)
    m.check()
    geom = Geometry(m)
    assert geom.part_line is not None and geom.separable, "the split row was not kept in parts"
    assert all(p.lo.size + p.hi.size < n for p in geom.part_line)
    want = m.locate(np.arange(geom.size))
    for got, w in zip((geom.block, geom.thread, geom.iteration), want, strict=True):
        assert np.array_equal(geom.full(got), w)
    rng = np.random.default_rng(0)
    multi = tuple(rng.integers(0, d, 500) for d in domain)
    for p in geom.part_line:
        assert np.array_equal(p.at(multi), p.whole()[tuple(c if p.shape[k] != 1 else 0 for k, c in enumerate(multi))])
    table = geom.split_row_layout()
    assert table is not None
    part, inner, lane = table
    _, part_w, inner_w, lane_w, _ = geom.reduce_layout()
    assert np.array_equal(np.repeat(part, inner.size), part_w)
    assert np.array_equal(np.tile(inner, part.size), inner_w) and np.array_equal(np.tile(lane, part.size), lane_w)


def _runs(pos: np.ndarray) -> list:
    """The definition: maximal runs of consecutive positions, as ``(start in pos, first position, length)``."""
    out, start = [], 0
    for i in range(1, pos.size + 1):
        if i == pos.size or pos[i] != pos[i - 1] + 1:
            out.append((start, int(pos[start]), i - start))
            start = i
    return out


@settings(max_examples=200, deadline=None)
@given(parts=st.integers(1, 12), n=st.integers(1, 40), span_extra=st.integers(0, 5), shuffle=st.booleans(),
       gap=st.booleans(), seed=st.integers(0, 1000))
def test_split_row_runs_are_the_rows_runs(parts, n, span_extra, shuffle, gap, seed):
    """``split_row_runs`` lists the runs the whole row's positions make (parts in or out of order, a part's
    positions consecutive or not, parts abutting or with room between)."""
    rng = np.random.default_rng(seed)
    span = n + span_extra
    part = rng.permutation(parts) if shuffle else np.arange(parts)
    within = np.arange(n) + 2 if not gap else np.sort(rng.choice(n + 3, n, replace=False))
    pos = (part[:, None] * span + within[None, :]).reshape(-1)
    got = reduce.split_row_runs(part, within, span)
    if not np.array_equal(within, within[0] + np.arange(n)):
        assert got is None
    else:
        runs = _runs(pos)
        assert got == (runs if len(runs) < reduce.MAX_RUNS else None)


def _dealt_positions(trips, lanes, V, chunk):
    """The definition: a part's element ``(trip * lanes + lane) * V + j`` sits at ``(trip * V + j) * lanes + lane``."""
    trip, lane, j = np.ix_(*(np.arange(k) for k in (trips, lanes, V)))
    return ((trip * V + j) * lanes + lane).reshape(-1)[:chunk]


@settings(max_examples=200, deadline=None)
@given(S=st.integers(1, 9), trips=st.integers(1, 4), lanes=st.sampled_from([1, 2, 32, 64]), V=st.sampled_from([1, 2, 4]),
       short=st.integers(0, 7), mess=st.sampled_from([None, "part", "within"]), seed=st.integers(0, 1000))
def test_dealt_split_row_agrees_with_dealt_vectors(S, trips, lanes, V, short, mess, seed):
    """``dealt_split_row`` on a part's positions says what ``dealt_vectors`` says on the row's, or None (never a
    different answer): dealt parts, parts whose lanes' last trip is short, parts out of order, a part's
    positions moved."""
    I = trips * V
    chunk = max(1, trips * lanes * V - short)
    within = _dealt_positions(trips, lanes, V, chunk)
    part = np.arange(S)
    rng = np.random.default_rng(seed)
    if mess == "part" and S > 1:
        part = rng.permutation(S)
    elif mess == "within" and chunk > 1:
        within = within.copy()
        within[rng.integers(0, chunk)] += 1
    pos = (part[:, None] * (I * lanes) + within[None, :]).reshape(-1)
    got = reduce.dealt_split_row(part, within, S, I, lanes, V)
    assert got is None or got == reduce.dealt_vectors(pos, S, I, lanes, V)
    if mess is None and V > 1:
        assert got is not None


def test_a_split_row_below_the_separable_size_is_located_whole():
    """A domain under ``SEPARABLE_MIN`` is dense: no part line, as before."""
    m = ThreadMapping("rows", (1, 512), ((0,), (1,)), block=128, grid=4, threads_per_row=128, splits=4,
                      combine="atomic")
    assert geometry_module.SEPARABLE_MIN > 512
    assert Geometry(m).part_line is None

