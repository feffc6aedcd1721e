"""A reduce over no dimensions becomes its reducer's elementwise op before planning (astitch_sim.passes.trivial_reduce).

Found by the random-graph suite: planned as a reduction (rows of one element), astitch
computed ``sign`` in one stage and again in the reduce's epilogue, and the Numba backend
refused the plan ("read at a domain element before the stage has finished computing it").
"""
import numpy as np
import pytest

import astitch_sim as asim
import gpu_backend
from astitch_sim.ir.dtypes import numpy_dtype
from astitch_sim.passes.trivial_reduce import eliminate_trivial_reduces


def _graph(shape, dtype, reducer, init):
    g = asim.Graph("trivial")
    p = g.parameter("p", shape, dtype)
    s = g.sign(p, name="sign10")
    red = g.add_node("reduce", (s, g.constant(init, dtype)), name="red19", dimensions=(), reducer=reducer)
    g.set_outputs(s, g.add(s, red, name="nrm"))
    return g


CASES = [((), "s32", "sum", 0), ((), "s32", "max", 5), ((7, 3), "f32", "sum", 1.5), ((7, 3), "f32", "min", 0.25),
         ((4,), "s32", "prod", 3)]


@pytest.mark.parametrize("shape, dtype, red, init", CASES)
def test_every_strategy_simulates_and_runs_it_as_the_reference(shape, dtype, red, init):
    g = _graph(shape, dtype, red, init)
    x = (np.arange(int(np.prod(shape))) - 3).reshape(shape).astype(numpy_dtype(dtype))
    ref = asim.reference(g, [x])
    for s in asim.STRATEGIES:
        plan = asim.compile(g, s, "H100")
        assert not any(n.op == "reduce" for n in plan.graph), s
        assert any("reduce over no dimensions" in n for n in plan.notes), s
        got = asim.simulate(plan, [x]).outputs
        for r, o in zip(ref, got, strict=True):
            np.testing.assert_array_equal(o, r, err_msg=s)
        for r, o in zip(ref, gpu_backend.run(plan, [x]), strict=True):
            np.testing.assert_array_equal(o, r, err_msg=f"{s} (Numba)")


def test_the_rewrite_keeps_names_and_leaves_real_and_pair_reduces_alone():
    g = _graph((5,), "f32", "max", -1.0)
    new, notes = eliminate_trivial_reduces(g)
    ops = {n.name: n.op for n in new}
    assert ops["red19"] == "maximum" and [o.name for o in new.outputs] == ["sign10", "nrm"]
    assert notes == ["reduce over no dimensions (as XLA's algebraic simplifier): red19 -> maximum"]
    real = asim.workload("layernorm")
    assert eliminate_trivial_reduces(real) == (real, [])
