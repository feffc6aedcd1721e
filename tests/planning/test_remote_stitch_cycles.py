"""AStitch's remote stitching never merges two clusters that depend on each other through a third scope.

Found by HF attention imported from PyTorch (tests/frontends/test_torch_import.py): the softmax cluster and the
value weight's transpose are independent node by node, and so are that transpose's consumer (the value
bias add) and the query weight's transpose; merging both pairs made a cycle of kernels through the
projections and ``q @ k^T``, and planning failed with "kernels depend on each other in a cycle".
"""
from __future__ import annotations

import numpy as np

import astitch_sim as asim


def attention_with_weight_transposes():
    """HF's attention as torch.export orders it: the padding mask first (so the softmax's cluster comes
    first), then per projection a weight transpose, a matmul and a bias add."""
    g = asim.Graph("hf_attention")
    x = g.parameter("x", (6, 4))
    mask = g.parameter("mask", (6, 6))
    additive = g.multiply(g.subtract(1.0, mask), -1e9)
    proj = {}
    for name in "qkv":
        w, b = g.parameter(f"w{name}", (4, 4)), g.parameter(f"b{name}", (4,))
        wt = g.transpose(w, (1, 0))
        proj[name] = g.add(g.dot(x, wt), g.broadcast(b, (6, 4), (1,)))
    scores = g.add(g.dot(proj["q"], proj["k"], (1,), (1,)), additive)
    m = g.reduce(scores, (1,), "max")
    e = g.exponential(g.subtract(scores, g.broadcast(m, (6, 6), (0,))))
    p = g.divide(e, g.broadcast(g.reduce(e, (1,), "sum"), (6, 6), (0,)))
    g.set_outputs(g.dot(p, proj["v"]))
    return g


def test_attention_plans_without_a_cycle_and_matches_the_reference():
    g = attention_with_weight_transposes()
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(p.shape).astype(np.float32) for p in g.inputs]
    inputs[1] = (rng.random((6, 6)) < 0.8).astype(np.float32)
    want = asim.reference(g, inputs)
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        got = asim.simulate(plan, inputs).outputs
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    plan = asim.compile(g, "astitch", "H100")
    assert sum(k.kind == "library" for k in plan.kernels) == 5
