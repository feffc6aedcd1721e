"""One cheap producer shared by reductions over different dimensions: the graph of optax.adafactor's
factored second moments, which crashed the planners (issue 28).

``d = lr * 0.5; return d * jnp.sum(g, -1), d * jnp.sum(g, -2)`` for ``g: f32[512,256]``, as JAX prints it:

* xla and fusionstitching: ``AssertionError: kernels depend on each other in a cycle`` on the real
  optimizer (``tests/fixtures/models/adafactor_step``): a sibling merge made two kernels wait on each
  other through a third (``fusion._KernelGraph`` now checks every merge);
* astitch: ``AStitchError: mul.5 is computed in two stages of one kernel``: both reductions' epilogues
  scale by the scalar ``mul.5``; each stage now computes its own copy, and the plan's value says so.
"""
import numpy as np
import pytest

import astitch_sim as asim

HLO = """HloModule jit_f, entry_computation_layout={(f32[], f32[512,256]{1,0})->(f32[512]{0}, f32[256]{0})}

region_0.1 {
  reduce_sum.3 = f32[] parameter(0)
  reduce_sum.4 = f32[] parameter(1)
  ROOT reduce_sum.5 = f32[] add(reduce_sum.3, reduce_sum.4)
}

region_1.2 {
  reduce_sum.10 = f32[] parameter(0)
  reduce_sum.11 = f32[] parameter(1)
  ROOT reduce_sum.12 = f32[] add(reduce_sum.10, reduce_sum.11)
}

ENTRY main.3 {
  lr.1 = f32[] parameter(0)
  constant.3 = f32[] constant(0.5)
  mul.5 = f32[] multiply(lr.1, constant.3)
  mul.6 = f32[512]{0} broadcast(mul.5), dimensions={}
  g.1 = f32[512,256]{1,0} parameter(1)
  constant.2 = f32[] constant(0)
  reduce_sum.14 = f32[512]{0} reduce(g.1, constant.2), dimensions={1}, to_apply=region_0.1
  mul.7 = f32[512]{0} multiply(mul.6, reduce_sum.14)
  mul.8 = f32[256]{0} broadcast(mul.5), dimensions={}
  reduce_sum.15 = f32[256]{0} reduce(g.1, constant.2), dimensions={0}, to_apply=region_1.2
  mul.9 = f32[256]{0} multiply(mul.8, reduce_sum.15)
  ROOT tuple.1 = (f32[512]{0}, f32[256]{0}) tuple(mul.7, mul.9)
}
"""


def inputs(rows=512, cols=256):
    rng = np.random.default_rng(3)
    return [np.float32(0.37), rng.standard_normal((rows, cols)).astype(np.float32)]


def expected(ins):
    lr, g = ins
    g64 = g.astype(np.float64)
    d = float(np.float32(lr) * np.float32(0.5))
    return [d * g64.sum(1), d * g64.sum(0)]


@pytest.mark.parametrize("gpu", ["V100", "H100"])
@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_every_strategy_plans_and_computes_the_shared_producer(strategy, gpu):
    g = asim.from_hlo(HLO)
    ins = inputs()
    plan = asim.compile(g, strategy=strategy, gpu=gpu)
    res = asim.simulate(plan, ins)
    want = expected(ins)
    assert [n.name for n in g.outputs] == ["mul.7", "mul.9"] and len(res.outputs) == len(want) == 2
    for got, w in zip(res.outputs, want, strict=True):
        assert got.shape == w.shape
        # a sum of 256 or 512 float32 terms: well inside 1e-5 of the largest partial sum
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-5 * np.abs(ins[1]).sum(0).max())


def test_astitch_stitches_both_reductions_and_records_the_copies():
    plan = asim.compile(asim.from_hlo(HLO), strategy="astitch", gpu="H100")
    assert len(plan.kernels) == 1
    k = plan.kernels[0]
    holders = [i for i, s in enumerate(k.stages) if "mul.5" in s.ops or "mul.5" in s.epilogue]
    assert holders == [0, 1], holders                    # each reduction's epilogue computes its own copy
    assert "stages 0, 1 each compute their own copy" in k.values["mul.5"].why
    assert "a scalar of the kernel's inputs" in k.values["mul.5"].why


def test_numba_backend_runs_the_stitched_plan():
    gpu_backend = pytest.importorskip("gpu_backend")
    pytest.importorskip("numba")
    ins = inputs(48, 40)
    text = HLO.replace("512", "48").replace("256", "40")
    plan = asim.compile(asim.from_hlo(text), strategy="astitch", gpu="H100")
    outs = gpu_backend.run(plan, ins)
    want = expected(ins)
    assert len(outs) == len(want)
    for got, w in zip(outs, want, strict=True):
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-5 * np.abs(ins[1]).sum(0).max())
