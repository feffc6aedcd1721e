"""Per-row values over ``[rows]``, not ``[rows, 1]``, before planning (astitch_sim.passes.unit_dims, issue 28).

JAX's StableHLO text keeps a norm's reduced dimension (keepdims): mean and rsqrt are ops over ``[rows, 1]``,
which astitch's epilogue merge does not take, so they became flat stages storing Global values behind grid
barriers.  The pass does what XLA's algebraic simplifier and reshape mover do first.
"""
import numpy as np
import pytest

import astitch_sim as asim
import gpu_backend
from astitch_sim.passes.unit_dims import NOTE_PREFIX, canonicalize_unit_dims


def _keepdims_norm(out_rstd=False):
    """``(x - mean) * rsqrt(var + eps)`` the way JAX's StableHLO writes it: per-row values over ``[4, 1]``."""
    g = asim.Graph("keepdims")
    x = g.parameter("x", (4, 16))
    s = g.reduce(x, (1,), "sum", name="sum")
    s1 = g.broadcast(s, (4, 1), (0,), name="sum1")
    mean = g.divide(s1, g.broadcast(g.constant(16.0, name="n"), (4, 1), (), name="nb"), name="mean")
    d = g.subtract(x, g.broadcast(g.reshape(mean, (4,), name="mean_sq"), (4, 16), (0,), name="mean_b"), name="d")
    v = g.broadcast(g.reduce(g.multiply(d, d, name="dd"), (1,), "sum", name="ss"), (4, 1), (0,), name="ss1")
    eps = g.broadcast(g.constant(1e-6, name="eps"), (4, 1), (), name="epsb")
    rstd = g.rsqrt(g.add(g.divide(v, g.broadcast(g.constant(16.0, name="n2"), (4, 1), (), name="nb2"), name="var"),
                         eps, name="var_eps"), name="rstd")
    y = g.multiply(d, g.broadcast(g.reshape(rstd, (4,), name="rstd_sq"), (4, 16), (0,), name="rstd_b"), name="y")
    g.set_outputs(*((y, rstd) if out_rstd else (y,)))
    return g


def _x():
    return [np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)]


def _same_values(a, b):
    for r, o in zip(asim.reference(a, _x()), asim.reference(b, _x()), strict=True):
        assert r.shape == o.shape
        np.testing.assert_array_equal(o, r)


def test_per_row_ops_are_computed_over_the_reduce_shape_and_keep_their_names():
    g = _keepdims_norm()
    new, notes = canonicalize_unit_dims(g)
    shapes = {n.name: n.shape for n in new}
    for name in ("mean", "var", "var_eps", "rstd"):
        assert shapes[name] == (4,), name
    assert not any(n.shape == (4, 1) for n in new), str(new)
    assert new["mean_b"].operands[0].name == "mean" and new["rstd_b"].operands[0].name == "rstd"
    assert new["nb"].op == "broadcast" and new["nb"].shape == (4,)       # the scalar broadcast re-made, same name
    assert [p.name for p in new.inputs] == ["x"] and [o.name for o in new.outputs] == ["y"]
    assert new.name == g.name
    assert notes == [f"{NOTE_PREFIX}: broadcasts to reshapes: sum1, ss1; computed without unit dims: mean [4], "
                     "var [4], var_eps [4], rstd [4]; 4 reshape(s) folded"]
    _same_values(g, new)


def test_an_output_keeps_its_shape():
    g = _keepdims_norm(out_rstd=True)
    new, _ = canonicalize_unit_dims(g)
    assert new["rstd"].shape == (4, 1) and [o.shape for o in new.outputs] == [(4, 16), (4, 1)]
    assert new["var_eps"].shape == (4,)                 # the ops before it still sink
    _same_values(g, new)


def test_a_broadcast_that_replicates_or_transposes_stays_a_broadcast():
    g = asim.Graph("replicate")
    a = g.parameter("a", (4,))
    b = g.parameter("b", (2, 3))
    rep = g.broadcast(a, (4, 3), (0,), name="rep")                       # replicates each element 3 times
    tr = g.broadcast(b, (3, 2), (1, 0), name="tr")                       # same elements, dims not in order
    g.set_outputs(g.exponential(rep, name="e"), g.negate(tr, name="t"))
    assert canonicalize_unit_dims(g) == (g, [])


def test_operands_from_two_source_shapes_or_a_full_tensor_do_not_sink():
    g = asim.Graph("two_sources")
    a = g.parameter("a", (4,))
    b = g.parameter("b", (4, 1, 1))
    c = g.parameter("c", (4, 1))
    ra = g.reshape(a, (4, 1), name="ra")
    rb = g.reshape(b, (4, 1), name="rb")
    two = g.add(ra, rb, name="two")                                      # sources [4] and [4,1,1]
    full = g.multiply(ra, c, name="full")                                # c is a [4,1] tensor, not a reshape
    g.set_outputs(g.reshape(g.add(two, full, name="both"), (4,), name="out"))
    new, notes = canonicalize_unit_dims(g)
    assert {n: new[n].shape for n in ("two", "full", "both")} == {"two": (4, 1), "full": (4, 1), "both": (4, 1)}
    assert notes == []
    _same_values_inputs(g, new, [np.arange(4, dtype=np.float32), np.ones((4, 1, 1), np.float32),
                                 np.full((4, 1), 2.0, np.float32)])


def _same_values_inputs(a, b, xs):
    for r, o in zip(asim.reference(a, xs), asim.reference(b, xs), strict=True):
        np.testing.assert_array_equal(o, r)


def test_unit_dims_are_never_added_and_unused_nodes_of_the_input_stay():
    g = asim.Graph("squeeze_then_op")
    a = g.parameter("a", (4, 1))
    sq = g.reshape(a, (4,), name="sq")                                   # source [4,1]: more dims than the op
    g.exponential(a, name="unused")
    g.set_outputs(g.negate(g.exponential(sq, name="e"), name="out"))
    assert canonicalize_unit_dims(g) == (g, [])
    assert canonicalize_unit_dims(asim.workload("layernorm"))[1] == []


@pytest.mark.parametrize("out_rstd", [False, True])
def test_every_strategy_simulates_and_runs_it_as_the_reference(out_rstd):
    g = _keepdims_norm(out_rstd)
    ref = asim.reference(g, _x())
    for s in asim.STRATEGIES:
        plan = asim.compile(g, s, "H100")
        assert plan.graph["var_eps"].shape == (4,) and plan.graph["rstd"].shape == ((4, 1) if out_rstd else (4,)), s
        assert any(n.startswith(NOTE_PREFIX) for n in plan.notes), s
        for r, o in zip(ref, asim.simulate(plan, _x()).outputs, strict=True):
            np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6, err_msg=s)
        for r, o in zip(ref, gpu_backend.run(plan, _x()), strict=True):
            np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6, err_msg=f"{s} (Numba)")


def test_astitch_takes_the_per_row_ops_as_epilogues():
    plan = asim.compile(_keepdims_norm(), "astitch", "H100", never_behind=False)
    epilogues = {n for k in plan.kernels for s in k.stages for n in s.epilogue}
    assert {"mean", "var", "var_eps", "rstd"} <= epilogues, str(plan)
    assert not any(k.global_barriers for k in plan.kernels), str(plan)
