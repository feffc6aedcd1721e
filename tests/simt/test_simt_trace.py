"""Tests for the SIMT model's trace mode: per-thread events, races, divergent barriers.

The trace is also an independent check of the counters: recounting global
bytes, sectors and requests from the per-thread events with plain Python sets
must give what the vectorised counters gave.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim import AStitchError
from astitch_sim.ir.dtypes import itemsize
from astitch_sim.simt import Race, TraceEvent
from astitch_sim.simt.trace import TRACE_LIMIT
from astitch_sim.frontends.workloads import workload_inputs


def sim(name, strategy="astitch", gpu="H100", plan_edit=None, reduce_scheme="shuffle", **shape):
    """Traced run of a workload; astitch plans with the paper's launch rules (``launch_search=False``), which the
    traced shapes were chosen to exercise."""
    g = asim.workload(name, **shape)
    opts = {"launch_search": False} if strategy == "astitch" else {}
    plan = asim.compile(g, strategy, gpu, reduce_scheme=reduce_scheme, **opts)
    if plan_edit:
        plan = plan_edit(plan)
    x = workload_inputs(g, 0)
    return asim.simulate(plan, x, trace=True), g, x


def test_trace_of_a_vector_add():
    g = asim.Graph("add")
    g.set_outputs(g.add(g.parameter("x", (40,)), g.parameter("y", (40,)), name="z"))
    res = asim.simulate(asim.compile(g, "unfused", "H100"), [np.ones(40, np.float32)] * 2, trace=True)
    tr = res.trace
    assert len(tr) == 3 * 40
    # 4-element vectors: thread 1 holds elements 4..7, element 5 is its iteration 1
    ev = [e for e in tr.by_thread(0, 1).events if e.element == (5,)]
    assert [(e.node, e.kind, e.space, e.element, e.iteration) for e in ev] == [
        ("x", "read", "global", (5,), 1), ("y", "read", "global", (5,), 1), ("z", "write", "global", (5,), 1)]
    assert len(tr.by_thread(0, 1)) == 3 * 4 and len(tr.by_thread(0, 10)) == 0
    base = {e.node: e.address - 4 * 5 for e in ev}
    assert all(b % 256 == 0 for b in base.values()) and len(set(base.values())) == 3
    assert isinstance(ev[0], TraceEvent)
    d = tr.to_dicts()[0]
    for key in ("kernel", "stage", "block", "thread", "iteration", "space", "kind", "node", "element", "flat",
                "address"):
        assert key in d
    assert len(tr.filter(kind="write")) == 40 and len(tr.filter(node="y", space="global")) == 40
    assert res.races == [] and res.divergent_barriers == []


def test_trace_follows_the_plan_through_every_space():
    res, g, _ = sim("layernorm", rows=4, cols=32, reduce_scheme="tree")     # the tree: mean is Regional
    tr = res.trace
    mean = tr.by_node("mean")
    assert len(mean.filter(kind="write")) == 4 and len(mean.filter(kind="read")) == 4 * 32
    assert {e.space for e in mean} == {"shared"}
    w = mean.filter(kind="write").events
    # a row is 8 lanes x 4-element vectors: row r's first thread is 8 r
    assert [(e.block, e.thread, e.phase) for e in w] == [(0, 8 * r, "epilogue") for r in range(4)]
    xc = tr.by_node("xc")
    assert {(e.space, e.kind, e.stage) for e in xc} == {("register", "write", 1), ("register", "read", 2)}
    # one thread's events are in program order
    ev = tr.by_thread(0, 9).events                     # row 1, lane 1: elements 4..7 of row 1
    keys = [(e.stage, ("elements", "combine", "epilogue").index(e.phase), e.iteration, e.access) for e in ev]
    assert keys == sorted(keys)
    assert ev[0].node == "x" and ev[-1].node == "out" and ev[-1].element == (1, 7)
    # the shuffle leaves every lane with the row's total: each thread reads mean from its own registers
    res, _, _ = sim("layernorm", rows=4, cols=32)
    mean = res.trace.by_node("mean")
    assert {(e.space, e.kind, e.stage) for e in mean} == {("register", "read", 1)} and len(mean) == 4 * 32
    assert {(e.block, e.thread) for e in mean} == {(0, t) for t in range(32)} and res.races == []


def test_missing_block_barrier_is_a_race():
    """The teaching exercise: drop the barrier between the mean and its readers."""
    def drop(plan):
        return plan.with_stage(0, 0, barrier_after="none")
    res, g, x = sim("layernorm", plan_edit=drop, rows=4, cols=32, reduce_scheme="tree")   # mean in shared memory
    assert len(res.races) == 4 * 7                    # each row: its 7 other lanes read what lane 0 wrote
    r = res.races[0]
    assert isinstance(r, Race) and (r.kernel, r.stage, r.node, r.space) == (0, 1, "mean", "shared")
    assert r.writer % 8 == 0 and r.reader != r.writer and "no barrier" in str(r)
    assert {(r.block, r.writer) for r in res.races} == {(0, 8 * i) for i in range(4)}
    # the model runs stage by stage, so the values still come out right: only the trace shows the bug
    np.testing.assert_allclose(res.outputs[0], asim.reference(g, x)[0], rtol=1e-5, atol=1e-5)


def test_missing_grid_barrier_is_a_global_race():
    def drop(plan):
        assert plan.kernels[0].stages[0].barrier_after == "grid"
        return plan.with_stage(0, 0, barrier_after="none")
    res, _, _ = sim("paper_fig7", plan_edit=drop, n=32, c=64)   # big enough for more than one block
    glob = [r for r in res.races if r.space == "global"]
    assert glob and {r.node for r in glob} == {"power.1"}
    assert any(r.block != r.writer_block for r in glob)


def test_valid_plans_have_no_races():
    for name, shape in (("layernorm", dict(rows=5, cols=12)), ("softmax", dict(rows=4, cols=3000)),
                        ("batchnorm_train", dict(rows=512, cols=64)), ("paper_fig7", dict(n=16, c=64)),
                        ("cross_entropy", dict(rows=6, cols=10))):
        for strategy in asim.STRATEGIES:
            res, _, _ = sim(name, strategy, **shape)
            assert res.races == [], (name, strategy, res.races[:3])


def test_divergent_barriers_are_reported():
    """layernorm 5x11 (11 is odd: scalar, not vectors): 16 threads per row but 11 columns, and the second
    block holds one row:
    threads without work must still reach every barrier: under the what-if tree the stage barriers
    and the reduction trees' barriers.  Under the shuffle, 16 lanes shuffle inside a warp and keep
    the rows' mean and rstd in registers: no barrier at all, nothing to diverge on."""
    res, _, _ = sim("layernorm", rows=5, cols=11, reduce_scheme="tree")
    div = res.divergent_barriers
    assert div and {d.barrier for d in div} == {"tree", "block"}
    d = next(d for d in div if d.block == 1 and d.barrier == "block")
    assert (d.waiting, d.finished) == (11, 53) and "must not return early" in str(d)
    res, _, _ = sim("layernorm", rows=5, cols=11)
    assert res.divergent_barriers == [] and all(s.barrier_after == "none" for s in res.plan.kernels[0].stages)


def test_trace_refuses_big_kernels():
    g = asim.workload("layernorm", rows=128, cols=1024)
    plan = asim.compile(g, "astitch", "H100")
    with pytest.raises(AStitchError, match=f"more than the {TRACE_LIMIT}.*smaller shape"):
        asim.simulate(plan, workload_inputs(g, 0), trace=True)


def test_trace_mode_counts_what_the_fast_paths_count():
    """Trace mode counts on dense arrays; at 64x768 the default run uses the separable path."""
    g = asim.workload("layernorm", rows=64, cols=768)
    plan = asim.compile(g, "astitch", "H100")
    x = workload_inputs(g, 0)
    a, b = asim.simulate(plan, x), asim.simulate(plan, x, trace=True)
    assert [vars(s) for k in a.stats.kernels for s in k.stages] == [vars(s) for k in b.stats.kernels for s in k.stages]


def _vector_loads(res, graph, vectors, tails):
    """Access ids whose events a thread issues as one vector access: in a stage whose mapping has
    ``vector`` V > 1, each thread's V consecutive iterations read V consecutive elements of a V-aligned
    run (one vector load) or one element (one scalar load for the vector); anything else is one load
    per element.  A flat domain's scalar tail (``tails``: its thread's partial vector) says nothing either way."""
    c = res.trace.columns
    groups = defaultdict(lambda: defaultdict(list))
    for i in range(len(res.trace)):
        V = vectors.get((int(c["kernel"][i]), int(c["stage"][i])), 1)
        if c["space"][i] != 0 or V == 1:
            continue
        size = itemsize(graph[res.trace.nodes[int(c["node"][i])]].dtype)
        it = int(c["iteration"][i])
        key = (int(c["kernel"][i]), int(c["stage"][i]))
        if tails.get(key) == (int(c["block"][i]), int(c["thread"][i]), it // V):
            continue
        groups[int(c["access"][i])][(int(c["block"][i]), int(c["thread"][i]), it // V)].append(
            (it % V, int(c["address"][i]) // size, V))
    vector = set()
    for access, per_vector in groups.items():
        ok = True
        for lanes in per_vector.values():
            lanes.sort()
            V = lanes[0][2]
            same = all(a == lanes[0][1] for _, a, _ in lanes)
            run = len(lanes) == V and lanes[0][1] % V == 0 and all(a == lanes[0][1] + v for v, a, _ in lanes)
            ok = ok and (same or run)
        if ok:
            vector.add(access)
    return vector


def _recount(res, graph, plan):
    """Global counters per (kernel, stage) from the events, with Python sets (the definitions of memory.py)."""
    c = res.trace.columns
    out = defaultdict(lambda: defaultdict(set))
    written = defaultdict(int)
    vectors = {(ki, si): st.mapping.vector for ki, k in enumerate(plan.kernels) if k.kind == "generated"
               for si, st in enumerate(k.stages)}
    tails = {}                  # a flat domain's scalar tail: the thread and vector that locate gives it
    for ki, k in enumerate(plan.kernels):
        for si, st in enumerate(k.stages if k.kind == "generated" else ()):
            m = st.mapping
            if m.kind == "flat" and m.size % m.vector:
                b, t, it = (int(np.asarray(a).ravel()[0]) for a in m.locate(np.array([m.size - m.size % m.vector])))
                tails[(ki, si)] = (b, t, it // m.vector)
    vector_access = _vector_loads(res, graph, vectors, tails)
    for i in range(len(res.trace)):
        if c["space"][i] != 0:
            continue
        node = res.trace.nodes[int(c["node"][i])]
        size = itemsize(graph[node].dtype)
        key = (int(c["kernel"][i]), int(c["stage"][i]))
        it = int(c["iteration"][i])
        addr = int(c["address"][i])
        if tails.get(key) == (int(c["block"][i]), int(c["thread"][i]), it // vectors[key]):
            warp = (int(c["access"][i]), "tail", addr)      # the tail's thread: one scalar load per address
        else:
            if int(c["access"][i]) in vector_access:
                it //= vectors[key]            # a vector's elements: one warp instruction
            warp = (int(c["access"][i]), int(c["block"][i]), it, int(c["thread"][i]) // 32)
        out[key]["requests"].add(warp)
        if c["kind"][i] == 0:
            out[key]["read"].add((int(c["block"][i]), addr, size))
            out[key]["sr"].add(warp + (addr // 32,))
        else:
            written[key] += size
            out[key]["sw"].add(warp + (addr // 32,))
    return {k: (sum(s for _, _, s in v["read"]), written[k], len(v["sr"]), len(v["sw"]), len(v["requests"]))
            for k, v in out.items()}


@pytest.mark.parametrize("name,shape", [("layernorm", dict(rows=5, cols=40)), ("paper_fig7", dict(n=8, c=40)),
                                        ("softmax", dict(rows=3, cols=2100)), ("batchnorm_train", dict(rows=300, cols=6)),
                                        ("attention_softmax", dict(batch=1, heads=2, seq=20)),
                                        ("layernorm_backward", dict(rows=6, cols=33)),
                                        ("adam_step", dict(size=1003))])     # a scalar tail of 3
@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_counters_match_a_recount_from_the_trace(name, shape, strategy):
    res, g, _ = sim(name, strategy, **shape)
    # the plan that ran (astitch: launch_search=False), not a fresh default compile: its mappings' vector
    # widths say which accesses a thread issues as one vector load (softmax 3x2100: 2-element vectors as
    # run, 4 under the launch search -- recounting with 4 counts every 64-bit load as two scalar ones)
    plan = res.plan
    got = _recount(res, plan.graph, plan)        # the plan's graph: inductor's split reductions rewrite it
    for ki, ks in enumerate(res.stats.kernels):
        for st in ks.stages:
            want = (st.global_bytes_read, st.global_bytes_written, st.global_sectors_read,
                    st.global_sectors_written, st.global_requests)
            assert got.get((ki, st.stage), (0, 0, 0, 0, 0)) == want, (ks.name, st.stage)


@pytest.mark.parametrize("shape", [(2, 7), (5, 30), (6, 1)])
def test_a_scalar_tail_is_counted_as_the_recount_from_the_trace_says(shape):
    """Vectors across rows, then a tail that reads a scalar parameter at each of its elements: the thread
    that takes the tail loads each address once (the scalar once), as the trace's recount counts it."""
    g = asim.Graph("tail")
    x, s = g.parameter("x", shape), g.parameter("s", ())
    g.set_outputs(g.multiply(x, g.broadcast(s, shape), name="z"))
    for strategy in ("unfused", "xla"):
        plan = asim.compile(g, strategy, "H100")
        ms = [st.mapping for k in plan.kernels for st in k.stages]
        assert ms and all(m.flat_vectors for m in ms) and ms[-1].size % ms[-1].vector >= 2
        res = asim.simulate(plan, workload_inputs(g, 0), trace=True)
        got = _recount(res, plan.graph, plan)
        for ki, ks in enumerate(res.stats.kernels):
            for st in ks.stages:
                assert got[(ki, st.stage)] == (st.global_bytes_read, st.global_bytes_written, st.global_sectors_read,
                                               st.global_sectors_written, st.global_requests), (strategy, ks.name)
