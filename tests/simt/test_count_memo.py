"""Counters kept per geometry (``simt/count_memo.py``): an access counted again on the same geometry gives what
counting it gives, the key tells apart accesses that differ, and the global base it leaves out really does not
matter (every counting path, on the accesses of real plans, at bases 256 bytes apart)."""
from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.simt import count_memo, memory
from astitch_sim.simt.geometry import Geometry
from astitch_sim.simt.kept_geometries import held_bytes
from astitch_sim.simt.memory import Access
from random_graphs import cases
from test_simt_blocked_paths import record

#: plans whose kernels repeat accesses on one geometry (a stitched softmax reads x in two stages, xla's
#: softmax in two kernels, unfused graphs store through shared mappings), over rows, columns, flat and
#: periodic (short rows) mappings, split rows, and a column reduction
PLANS = [("softmax", dict(rows=64, cols=3000), "astitch"), ("softmax", dict(rows=64, cols=3000), "xla"),
         ("layernorm", dict(rows=256, cols=768), "unfused"), ("adam_step", dict(size=65536), "unfused"),
         ("softmax", dict(rows=4096, cols=24), "astitch"), ("global_norm", dict(rows=256, cols=1024), "astitch"),
         ("batchnorm_train", dict(rows=4096, cols=64), "xla"), ("layernorm_backward", dict(rows=128, cols=768),
                                                                  "fusionstitching")]


def _accesses(plan, inputs) -> list:
    """Every ``(geometry, access)`` the simulation counts, nothing kept (so each reaches ``memory.count``)."""
    seen = []
    real = count_memo.count

    def spy(geom, acc):
        seen.append((geom, acc))
        return real(geom, acc)
    with mock.patch.object(count_memo, "count", spy), mock.patch.object(count_memo, "MEMO_ELEMENTS", -1):
        asim.simulate(plan, inputs)
    return seen


@pytest.mark.parametrize("name,shape,strategy", PLANS)
def test_kept_counters_change_no_counter_and_no_value(name, shape, strategy):
    """The whole simulation (counters, timeline, outputs) is the same with every access counted afresh, and
    the kept counters really are taken (fewer counts than accesses)."""
    g = asim.workload(name, **shape)
    plan, x = asim.compile(g, strategy, "H100"), workload_inputs(g, 0)
    calls = []
    real = count_memo.count
    with mock.patch.object(count_memo, "count", lambda geom, acc: calls.append(1) or real(geom, acc)):
        kept = record(asim.simulate(plan, x))
    with mock.patch.object(count_memo, "MEMO_ELEMENTS", -1):
        fresh = record(asim.simulate(plan, x))
    assert kept == fresh
    if (name, strategy) != ("global_norm", "astitch"):     # (its one kernel repeats no access)
        assert len(calls) < len(_accesses(plan, x)), "no access was answered from the kept counters"


@pytest.mark.parametrize("name,shape,strategy", PLANS)
def test_a_global_access_counts_the_same_at_any_256_byte_aligned_base(name, shape, strategy):
    """The key leaves a global buffer's base out: shifting an access by whole 256-byte blocks (the allocator's
    alignment) changes none of its counters, on every counting path the plan's accesses take."""
    g = asim.workload(name, **shape)
    checked = 0
    for geom, acc in _accesses(asim.compile(g, strategy, "H100"), workload_inputs(g, 0)):
        if acc.space != "global":
            continue
        want = memory.count(geom, acc)
        for shift in (memory.ALIGN, 3 * memory.ALIGN, 4097 * memory.ALIGN):
            moved = replace(acc, base=acc.base + shift)
            assert memory.count(geom, moved) == want, f"{acc.node} {acc.kind} moved by {shift} bytes"
        checked += 1
    assert checked


def _same_without_kind_and_identity_dedup(geom, acc, note: str = "") -> bool:
    """The key's two omissions hold for this access: its counters are the same as a read, a write or an atomic,
    and -- where its index is the domain's own -- with dedup switched; whether it was an identity access."""
    want = memory.count(geom, acc)
    for kind in ("read", "write", "atomic"):
        assert memory.count(geom, replace(acc, kind=kind)) == want, f"{note}{acc.node} {acc.kind} as a {kind}"
    if acc.identity:
        assert memory.count(geom, replace(acc, dedup=not acc.dedup)) == want, f"{note}{acc.node} dedup switched"
    return acc.identity


@pytest.mark.parametrize("name,shape,strategy", PLANS)
def test_no_counter_depends_on_the_kind_nor_on_an_identity_access_dedup(name, shape, strategy):
    """What the key leaves out besides the base: the kind (a stitched kernel's identity store of ``out`` is
    answered from its identity load of ``x``), and an identity access's dedup flag (every element is touched by
    one thread: its distinct (block, element) pairs are its elements), on every access of the plan."""
    g = asim.workload(name, **shape)
    accesses = _accesses(asim.compile(g, strategy, "H100"), workload_inputs(g, 0))
    identities = [_same_without_kind_and_identity_dedup(geom, acc) for geom, acc in accesses if acc.space == "global"]
    assert any(identities)


@pytest.mark.parametrize("name,shape,strategy", PLANS + [("softmax", dict(rows=64, cols=3000), "inductor"),
                                                      ("layernorm", dict(rows=256, cols=768), "xla")])
def test_a_value_per_line_counts_what_walking_the_line_counts(name, shape, strategy):
    """A global read of one element per X line (a row's max, a row's mean read by every element of the row) is
    counted from the line's warp instructions alone (``memory.one_value_per_line``): the same counters as
    walking the line once per start, on every access of the plan that takes it."""
    g = asim.workload(name, **shape)
    taken = 0
    for geom, acc in _accesses(asim.compile(g, strategy, "H100"), workload_inputs(g, 0)):
        with mock.patch.object(memory, "one_value_per_line", side_effect=memory.one_value_per_line) as asked:
            fast = memory.count(geom, acc)
        took = any(c.args and memory.one_value_per_line(*c.args) for c in asked.call_args_list)
        with mock.patch.object(memory, "one_value_per_line", return_value=False):
            walked = memory.count(geom, acc)
        assert fast == walked, f"{acc.node} {acc.kind}"
        taken += took
    if (name, strategy) in (("softmax", "xla"), ("layernorm", "xla")):
        assert taken, "no access read a value per line: the comparison would be vacuous"


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=st.one_of(cases("mixed"), cases("long_rows")), strategy=st.sampled_from(["astitch", "xla", "unfused"]))
def test_random_graphs_count_the_same_at_shifted_bases(case, strategy):
    """The same on random graphs (gathers, pads, transposes, long rows, every dtype), and the same as any kind
    (with dedup switched, for an identity access)."""
    try:
        plan = asim.compile(case.graph, strategy, "H100")
    except asim.AStitchError:
        return
    for geom, acc in _accesses(plan, case.inputs):
        if acc.space == "global":
            moved = replace(acc, base=acc.base + 5 * memory.ALIGN)
            assert memory.count(geom, moved) == memory.count(geom, acc), f"{case.note}: {acc.node} {acc.kind}"
            _same_without_kind_and_identity_dedup(geom, acc, f"{case.note}: ")


def test_accesses_that_differ_are_counted_each():
    """Two accesses of the same shapes whose index values, mask, dedup flag, element size or shared offset differ
    are each counted (and a repeat of either is answered from what was kept, as a copy); a write at a read's
    addresses is answered from the read's count (the kind is no input of the counters)."""
    geom = Geometry(ThreadMapping("rows", (64, 512), ((0,), (1,)), block=128, grid=64, threads_per_row=128))
    row, col = geom.idx
    mask = np.broadcast_to(col < 300, (1, 512))
    variants = [Access("global", "read", "x", 4, 0, [row * 512, col]),
                Access("global", "read", "x", 4, 0, [row * 512, col * 2]),          # strided: more sectors
                Access("global", "read", "x", 4, 0, [row * 512, col], mask),
                Access("global", "read", "x", 4, 0, [row * 512, col], dedup=True),
                Access("global", "write", "x", 4, 0, [row * 512, col]),
                Access("global", "read", "x", 2, 0, [row * 512, col]),
                Access("shared", "read", "s", 4, 0, [col * 33]),
                Access("shared", "read", "s", 4, 4, [col * 33]),
                Access("shared", "read", "s", 4, 0, [col * 32])]                     # bank conflicts
    want = [memory.count(geom, a) for a in variants]
    assert len({tuple(sorted(w.items())) for w in want}) >= 5, "the variants should not all count alike"
    for _ in range(2):
        for a, w in zip(variants, want, strict=True):
            got = count_memo.count_once(geom, a)
            assert got == w
            got["bytes"] = -1                    # a caller may change its copy; the kept counters stay
    kept = geom.cached("counts", count_memo.KeptCounts)
    # what the budget reads is at least what the kept arrays hold (an array two entries share counts twice)
    assert kept.nbytes >= held_bytes([a for acc in variants for a in acc.terms + [acc.mask] if a is not None]) > 0
    kept = kept.by_key
    assert sum(len(v) for v in kept.values()) == len(variants) - 1  # each kept once (the write: the read's), the
    assert len(kept) == len(variants) - 3                            # strided read and the conflicting one beside
    assert want[4] == want[0]                                        # an equal key's
    with mock.patch.object(count_memo, "count", side_effect=AssertionError("counted again")):
        assert [count_memo.count_once(geom, a) for a in variants] == want


def test_an_access_over_the_size_limit_is_not_kept():
    """An access whose arrays hold more than ``MEMO_ELEMENTS`` together (a domain-sized index) is counted every
    time, and nothing of it is held by the geometry."""
    geom = Geometry(ThreadMapping("rows", (512, 512), ((0,), (1,)), block=128, grid=512, threads_per_row=128))
    row, col = geom.idx
    flat = np.ascontiguousarray(row * 512 + col)                      # 262144 elements, one array
    assert flat.size > count_memo.MEMO_ELEMENTS
    acc = Access("global", "read", "x", 4, 0, [flat])
    calls = []
    real = count_memo.count
    with mock.patch.object(count_memo, "count", lambda g, a: calls.append(1) or real(g, a)):
        assert count_memo.count_once(geom, acc) == count_memo.count_once(geom, acc) == real(geom, acc)
    assert len(calls) == 2
    assert not geom.cached("counts", count_memo.KeptCounts).by_key
