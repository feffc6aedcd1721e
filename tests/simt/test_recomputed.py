"""Values a plan computes more than once, computed once by the simulation (``simt/recomputed.py``): every counter,
the timeline and every output byte the same as with each stage computing its copy, the kept value really
handed on, never overwritten, and let go after the last stage that computes it."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.simt import executor, recomputed
from astitch_sim.simt.recomputed import Recomputed, recomputed_nodes
from random_graphs import cases
from test_simt_blocked_paths import on_and_off


def test_the_nodes_computed_more_than_once_and_their_last_stage():
    g = asim.workload("softmax", rows=64, cols=3000)
    # fusionstitching's softmax: one kernel, x - max and its exp in the sum's stage and again in the divide's
    fs = asim.compile(g, "fusionstitching", "H100")
    assert len(fs.kernels) == 1
    assert recomputed_nodes(fs.kernels) == {"row_max.bcast": (0, 2), "shifted": (0, 2), "exp": (0, 2)}
    # XLA's: the sum's kernel and the divide's kernel
    assert recomputed_nodes(asim.compile(g, "xla", "H100").kernels) == \
        {"row_max.bcast": (2, 0), "shifted": (2, 0), "exp": (2, 0)}
    # astitch keeps exp in registers from the sum's stage to the divide's: nothing is computed twice
    assert recomputed_nodes(asim.compile(g, "astitch", "H100").kernels) == {}


@pytest.mark.parametrize("name,shape,strategy", [
    ("softmax", dict(rows=64, cols=3000), "xla"),
    ("softmax", dict(rows=64, cols=3000), "fusionstitching"),
    ("softmax", dict(rows=64, cols=3000), "tvm"),
    ("layernorm_backward", dict(rows=33, cols=768), "xla"),
    ("layernorm_backward", dict(rows=256, cols=768), "fusionstitching"),
    ("layernorm_backward", dict(rows=256, cols=768), "astitch"),
    ("layernorm", dict(rows=256, cols=768), "tvm"),
    ("batchnorm_train", dict(rows=1000, cols=64), "xla"),
])
def test_a_kept_value_changes_no_counter_and_no_value(name, shape, strategy):
    """Every counter, the timeline and every output byte are the same with each stage computing its own copy;
    and a later stage really took a kept value (else the comparison would be vacuous)."""
    g = asim.workload(name, **shape)
    plan = asim.compile(g, strategy, "H100")
    answers = on_and_off(plan, workload_inputs(g, 0), Recomputed, "get")
    assert any(a is not None for a in answers), f"{name} {strategy}: no stage took a kept value"


def test_a_kept_value_is_read_only_handed_on_as_computed_and_let_go():
    g = asim.workload("softmax", rows=64, cols=3000)
    plan, x = asim.compile(g, "fusionstitching", "H100"), workload_inputs(g, 0)
    made, handed = [], []
    real_keep, real_get = Recomputed.keep, Recomputed.get

    def keep(self, name, value):
        real_keep(self, name, value)
        if name in self.held:
            made.append((self, name, value, value.copy()))

    def get(self, name, shape):
        v = real_get(self, name, shape)
        if v is not None:
            handed.append((name, v))
        return v
    with mock.patch.object(Recomputed, "keep", keep), mock.patch.object(Recomputed, "get", get):
        res = asim.simulate(plan, x)
    assert {n for _, n, _, _ in made} == {"shifted", "exp"}        # (the broadcast is a view: nothing computed)
    assert {n for n, _ in handed} == {"shifted", "exp"}
    for store, name, value, when_made in made:
        assert not value.flags.writeable
        assert np.array_equal(value, when_made)                      # nothing overwrote it in place
        assert any(v is value for n, v in handed if n == name)
    store = made[0][0]
    assert store.held == {} and store.nbytes == 0                   # let go after the divide's stage
    want = asim.reference(g, x)[0]
    assert np.allclose(res.outputs[0], want, rtol=1e-5, atol=1e-7)


def test_nothing_is_kept_past_the_budget():
    g = asim.workload("softmax", rows=64, cols=3000)
    plan, x = asim.compile(g, "fusionstitching", "H100"), workload_inputs(g, 0)
    stores = []

    class Small(Recomputed):
        def __init__(self, kernels):
            super().__init__(kernels, budget=64 * 3000 * 4 + 1)       # room for one of the two values
            stores.append(self)

        def keep(self, name, value):
            super().keep(name, value)
            assert self.nbytes <= self.budget
            self.most = max(getattr(self, "most", 0), len(self.held))
    with mock.patch.object(executor, "Recomputed", Small):
        kept = asim.simulate(plan, x)
    assert stores[0].most == 1
    with mock.patch.object(recomputed, "KEEP_BYTES", 0):
        assert Recomputed(plan.kernels).budget == 0
        none = asim.simulate(plan, x)
    assert np.array_equal(kept.outputs[0], none.outputs[0])


def test_what_is_kept_and_how_it_is_handed_back():
    """Only an array of its own is kept (made read-only), and only for a node a later stage computes; a stage over
    another domain of the same elements takes it reshaped (a view, read-only too)."""
    plan = asim.compile(asim.workload("softmax", rows=64, cols=3000), "fusionstitching", "H100")
    store = Recomputed(plan.kernels)
    base = np.zeros(8 * 64, np.float32)
    store.keep("exp", base.reshape(8, 64))                           # a view
    assert store.held == {} and base.flags.writeable
    store.keep("out", np.zeros((8, 64), np.float32))                # computed once: not worth keeping
    assert store.held == {}
    own = np.arange(8 * 64, dtype=np.float32).reshape(8, 64).copy()
    store.keep("exp", own)
    assert store.get("exp", (8, 64)) is own and not own.flags.writeable
    pieces = store.get("exp", (8, 4, 16))
    assert pieces.base is own and not pieces.flags.writeable and np.array_equal(pieces.ravel(), own.ravel())
    assert store.get("exp", (8, 63)) is None and store.get("shifted", (8, 64)) is None


def test_inductor_split_softmax_takes_exp_across_domains():
    """Inductor's softmax at the paper's <64,30000> sums ``exp`` over the row split into pieces ([64, 4, 7500])
    and divides over the rows ([64, 30000]): the divide's kernel takes the kept ``exp`` reshaped, and nothing
    changes."""
    g = asim.workload("softmax", rows=64, cols=30000)
    plan = asim.compile(g, "inductor", "H100")
    assert [tuple(k.stages[0].mapping.domain) for k in plan.kernels if "sum_exp.partial" in k.name] == [(64, 4, 7500)]
    answers = on_and_off(plan, workload_inputs(g, 0), Recomputed, "get")
    taken = [a for a in answers if a is not None]
    assert taken and all(a.base is not None and a.shape == (64, 30000) for a in taken)


@pytest.mark.parametrize("strategy", ["xla", "fusionstitching", "inductor"])
def test_the_callers_arrays_stay_writeable(strategy):
    """No input handed to ``simulate`` and no output it hands back is made read-only by a kept value (a kept
    array is always one the evaluator made, never a buffer)."""
    g = asim.workload("layernorm_backward", rows=33, cols=768)
    x = [np.array(a) for a in workload_inputs(g, 0)]
    res = asim.simulate(asim.compile(g, strategy, "H100"), x)
    assert all(a.flags.writeable for a in x)
    assert all(o.flags.writeable for o in res.outputs)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(["mixed", "shared", "views"]).flatmap(cases),
       strategy=st.sampled_from(["xla", "tvm", "fusionstitching", "inductor", "astitch"]))
def test_random_graphs_the_same_with_kept_values(case, strategy):
    """Random graphs (every dtype, views, gathers; cheap producers shared by reductions over different dims,
    which fusion recomputes): the same with and without kept values."""
    try:
        plan = asim.compile(case.graph, strategy, "H100")
    except asim.AStitchError:
        return
    on_and_off(plan, case.inputs, Recomputed, "get")
    assert all(not isinstance(a, np.ndarray) or a.flags.writeable for a in case.inputs)
