"""A ``max``, ``min``, ``and`` or ``or`` reduce (``Reducer.any_order``) is folded by one ``ufunc.reduce`` over each
task's row (``reduce.reduce_rows_in_any_order``), not through the per-thread layout and the tree or butterflies
over its lanes: every counter, the timeline and every output the same as the lane-by-lane fold, the step counts
of the lanes' combine counted from the lane count alone (``reduce.reduce_steps``), and the shortcut refused where
a task is split over blocks (its parts' partials would need the layout).  And where each thread holds one
element of its row, the elements go to the tree as they lie and the tree folds the identity in
(``reduce.Unfolded``): every counter, the timeline and every output byte the same."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.plan.vocabulary import ReduceScheme
from astitch_sim.simt import reduce
from random_graphs import cases
from test_simt_blocked_paths import PROPERTY, record


def on_and_off(plan, ins) -> list:
    """``plan`` simulated with the shortcut on, and off: every counter and the timeline equal, every output the
    same values (a zero's sign and a NaN's payload aside: either is the fold's in some order, ``reducers.py``).
    Returns what the shortcut answered, call by call."""
    answers = []
    real = reduce.reduce_rows_in_any_order

    def spy(*a):
        answers.append(real(*a))
        return answers[-1]
    with mock.patch.object(reduce, "reduce_rows_in_any_order", spy):
        on = record(asim.simulate(plan, ins))
    with mock.patch.object(reduce, "reduce_rows_in_any_order", lambda *a: None):
        off = record(asim.simulate(plan, ins))
    outs_on, outs_off = on.pop("outputs"), off.pop("outputs")
    assert on == off
    assert len(outs_on) == len(outs_off) == len(plan.graph.outputs)
    for (dt, shape, a), (dt2, shape2, b) in zip(outs_on, outs_off, strict=True):
        assert (dt, shape) == (dt2, shape2)
        x, y = np.frombuffer(a, dtype=dt), np.frombuffer(b, dtype=dt)
        if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
            assert np.array_equal(x.astype(np.float64), y.astype(np.float64), equal_nan=True)
        else:
            assert a == b
    return answers


def _graph(shape, dims, reducer, dtype):
    g = asim.Graph(f"{reducer}_{dtype}")
    x = g.parameter("x", shape, dtype)
    g.set_outputs(g.reduce(x, dims, reducer, name="r"))
    return g


def _inputs(g, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for p in g.inputs:
        if p.dtype == "pred":
            out.append(rng.random(p.shape) < 0.97)
        elif p.dtype.startswith("s"):
            out.append(rng.integers(-1000, 1000, p.shape).astype(np.int32))
        else:
            a = rng.standard_normal(p.shape).astype(np.float32)
            a.reshape(-1)[rng.integers(0, a.size, 5)] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
            out.append(a)
    return out


CASES = [
    ((256, 768), [1], "max", "f32"),        # rows: a block per row, butterflies over 8 warps
    ((64, 3000), [1], "min", "f32"),
    ((2048, 64), [0], "max", "f32"),        # a column reduce
    ((300, 96), [1], "and", "pred"),
    ((96, 300), [0], "or", "pred"),
    ((512, 40), [1], "min", "s32"),         # short rows packed several to a warp
    ((6, 40, 50), [0, 2], "max", "f32"),    # reduced dims apart
]


@pytest.mark.parametrize("strategy", ["unfused", "xla", "inductor", "astitch"])
@pytest.mark.parametrize("shape,dims,reducer,dtype", CASES, ids=[f"{r}-{d}-{'x'.join(map(str, s))}" for s, _, r, d in CASES])
def test_one_reduce_per_row_changes_no_counter_and_no_value(shape, dims, reducer, dtype, strategy):
    g = _graph(shape, dims, reducer, dtype)
    plan = asim.compile(g, strategy, "H100")
    answers = on_and_off(plan, _inputs(g))
    split = any(s.mapping.splits > 1 for k in plan.generated for s in k.stages if s.reduces)
    assert answers and (split or any(a is not None for a in answers)), "the shortcut was never taken"


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("name,shape", [("softmax", dict(rows=64, cols=30000)), ("softmax", dict(rows=750, cols=32)),
                                        ("cross_entropy", dict(rows=600, cols=40)),
                                        ("attention_softmax", dict(batch=2, heads=3, seq=64))])
def test_the_catalogs_maxima_take_it(name, shape, strategy):
    g = asim.workload(name, **shape)
    plan = asim.compile(g, strategy, "H100")
    answers = on_and_off(plan, workload_inputs(g, 0))
    assert any(isinstance(a, reduce.Reduced) for a in answers)


def test_a_row_split_over_blocks_keeps_the_lane_by_lane_fold():
    """A task split over blocks (atomics): its parts' partials would need the layout; the shortcut says no."""
    g = asim.workload("softmax", rows=12, cols=8000)
    plan = asim.compile(g, "astitch", "H100", launch_search=False)
    split = [s for k in plan.generated for s in k.stages if s.reduces and s.mapping.splits > 1]
    assert split, "the plan no longer splits its rows: the test would not see the refusal"
    answers = on_and_off(plan, workload_inputs(g, 0))
    assert None in answers


def test_steps_from_the_lane_count_are_the_tree_s_and_the_butterflies():
    for lanes in [1, 2, 3, 5, 7, 31, 32, 33, 100, 255, 256, 1000, 1024]:
        acc = (np.zeros((2, 1, lanes), np.float32),)
        assert reduce.reduce_steps(lanes, ReduceScheme.TREE) == reduce.tree(acc, np.add)[1], lanes
        if lanes <= 32 or lanes % 32 == 0:
            got = reduce.shuffle(acc, lambda a, b: (np.add(a[0], b[0]),), (np.float32(0),))[1]
            assert reduce.reduce_steps(lanes, ReduceScheme.SHUFFLE) == got, lanes
    for warps in range(1, 33):
        acc = (np.zeros((1, 1, 32 * warps), np.float32),)
        got = reduce.shuffle(acc, lambda a, b: (np.add(a[0], b[0]),), (np.float32(0),))[1]
        assert reduce.reduce_steps(32 * warps, ReduceScheme.SHUFFLE) == got, warps


@settings(PROPERTY, max_examples=12)
@given(case=cases("mixed", max_ops=6))
def test_random_graphs(case):
    for strategy in asim.STRATEGIES:
        on_and_off(asim.compile(case.graph, strategy, "H100"), case.inputs)


# -- one element per thread: the identity folded in by the tree, block by block (reduce.Unfolded) ----------------

def _argmax_rows(rows, cols):
    g = asim.Graph("argmax_rows")
    x = g.parameter("x", (rows, cols))
    g.set_outputs(g.argmax(x, 1))
    return g


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_an_argmax_of_one_element_per_thread(strategy):
    """A pair reducer (value, index) through the same path: the identity pair folded in by the tree."""
    from test_simt_blocked_paths import on_and_off as exactly_on_and_off
    g = _argmax_rows(2000, 32)
    x = np.random.default_rng(2).standard_normal((2000, 32)).astype(np.float32)
    x[::7, 3] = x[::7, 5]                                   # ties: the lower index wins
    exactly_on_and_off(asim.compile(g, strategy, "H100"), [x], reduce, "unfolded")


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("name,shape", [("row_reduce", dict(rows=3000, cols=32)), ("softmax", dict(rows=750, cols=32)),
                                        ("layernorm", dict(rows=300, cols=32))])
def test_one_element_per_thread_folds_the_identity_in_the_tree(name, shape, strategy):
    """Every counter, the timeline and every output byte as with the identity folded into a domain-sized array
    first; the elements really handed to the tree as they lie for the scalar rows of 32 lanes."""
    from test_simt_blocked_paths import on_and_off as exactly_on_and_off
    g = asim.workload(name, **shape)
    plan = asim.compile(g, strategy, "H100")
    answers = exactly_on_and_off(plan, workload_inputs(g, 0), reduce, "unfolded")
    scalar = [s for k in plan.generated for s in k.stages if s.reduces and s.mapping.kind == "rows"
              and s.mapping.folds_per_task == 1]
    assert not scalar or any(isinstance(a, reduce.Unfolded) for a in answers)


def test_the_tree_folds_the_identity_first_for_every_reducer():
    """``tree``/``shuffle`` with ``first`` give what folding the identity in beforehand gives (``-0.0 + 0.0`` is
    ``+0.0``: an element that is not its own accumulator), for one-value and pair reducers, tree and butterflies."""
    from astitch_sim.ir.reducers import REDUCERS
    rng = np.random.default_rng(5)
    for red in REDUCERS.values():
        for lanes in (1, 7, 32, 256):
            if red.values == 2:
                acc = (rng.standard_normal((9, 2, lanes)).astype(np.float32),
                       rng.integers(0, 50, (9, 2, lanes)).astype(np.int32))
                ident = red.identity([np.dtype(np.float32), np.dtype(np.int32)])
            elif red.name in ("and", "or"):
                acc, ident = (rng.random((9, 2, lanes)) < 0.5,), red.identity([np.dtype(np.bool_)])
            else:
                v = rng.standard_normal((9, 2, lanes)).astype(np.float32)
                v[v < -1] = -0.0
                acc, ident = (v,), red.identity([np.dtype(np.float32)])
            start = tuple(np.asarray(i, a.dtype).reshape(()) for i, a in zip(ident, acc, strict=True))
            before = tuple(np.asarray(m, dtype=a.dtype) for m, a in zip(red.combine(start, acc), acc, strict=True))
            pairs = [(reduce.tree(acc, red.combine, ident), reduce.tree(before, red.combine))]
            if lanes <= 32 or lanes % 32 == 0:
                pairs.append((reduce.shuffle(acc, red.combine, ident, ident), reduce.shuffle(before, red.combine, ident)))
            for got, want in pairs:
                assert got[1] == want[1]
                for a, b in zip(got[0], want[0], strict=True):
                    assert a.tobytes() == b.tobytes(), (red.name, lanes)
