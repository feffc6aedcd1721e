"""Zero-size tensors (issue 9, point 4): XLA's semantics through every part of the pipeline.

A tensor with a 0-length dimension has no elements.  XLA's rules, which these
tests pin down: a reduce over nothing is its init value; an op with an empty
result is an empty array; padding an empty operand gives only padding; an empty
matrix product contraction gives 0.  ``asim.compile`` applies them the way
XLA's zero-sized-HLO elimination does (``astitch_sim/passes/zero_size.py``), so no
kernel -- in the SIMT model or the Numba backend -- ever iterates over an empty
domain, and a plan that says otherwise is refused.

The ``empty_*`` fixtures are real JAX lowerings of model code with an empty
batch (tests/fixtures/make_empty_fixtures.py); the hand-written modules below
keep the empty work JAX would have folded away, so the compiler sees it.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import astitch_sim as asim
import gpu_backend
from astitch_sim import AStitchError
from astitch_sim.passes.zero_size import eliminate_zero_size
from anchor import TESTS_FILE
from tiers import fast_share

FIXTURES = Path(TESTS_FILE).parent / "fixtures" / "hlo"
EMPTY_FIXTURES = sorted(p.stem for p in FIXTURES.glob("empty_*.hlo"))


def _fixture(name):
    g = asim.from_hlo_file(FIXTURES / f"{name}.hlo")
    with np.load(FIXTURES / f"{name}.npz") as z:
        ins = [z[f"in{i}"] for i in range(len(g.inputs))]
        outs = [z[f"out{i}"] for i in range(len(g.outputs))]
    return g, ins, outs


def _same(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    assert got.dtype == want.dtype or got.dtype.kind == want.dtype.kind, f"{what}: dtype {got.dtype} vs {want.dtype}"
    # exact: every value here is an init value, a padding value or computed from non-empty inputs by one op
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0, err_msg=what)


def test_there_are_empty_batch_fixtures():
    assert len(EMPTY_FIXTURES) >= 8, EMPTY_FIXTURES


@pytest.mark.parametrize("name", EMPTY_FIXTURES)
def test_jax_empty_batch_fixtures_under_every_strategy(name):
    """Import, reference, all four strategies in the SIMT model: JAX's own outputs, shapes included."""
    g, ins, want = _fixture(name)
    ref = asim.reference(g, ins)
    for i, (r, w) in enumerate(zip(ref, want, strict=True)):
        _same(r, w, f"{name} reference out{i}")
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        assert all(s.mapping.size > 0 for k in plan.generated for s in k.stages)
        res = asim.simulate(plan, ins)
        for i, (o, w) in enumerate(zip(res.outputs, want, strict=True)):
            _same(o, w, f"{name} {strategy} out{i}")


#: the fast tier's share (tests/tiers.py): every fixture under xla and astitch in the CUDA simulator (every strategy
#: plans and simulates them on the SIMT model above, in both tiers); the other strategies in the full tier
@pytest.mark.parametrize("name,strategy", fast_share(
    [(n, s) for n in ("empty_batch_sgd", "empty_batch_stats", "empty_batch_pad", "empty_rows_reductions",
                      "empty_batch_layernorm") for s in asim.STRATEGIES], lambda c: c[1] in ("xla", "astitch")))
def test_jax_empty_batch_fixtures_in_the_numba_backend(name, strategy):
    g, ins, want = _fixture(name)
    plan = asim.compile(g, strategy, "H100")
    for i, (o, w) in enumerate(zip(gpu_backend.run(plan, ins), want, strict=True)):
        _same(o, w, f"{name} {strategy} numba out{i}")


# -- the importer ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("typ, literal, shape", [
    ("f32[0,64]", "{  }", (0, 64)),
    ("f32[3,0]", "{ {}, {}, {} }", (3, 0)),
    ("s32[0]", "{}", (0,)),
    ("pred[2,0,5]", "{ {}, {} }", (2, 0, 5)),
])
def test_empty_literals_as_xla_prints_them(typ, literal, shape):
    g = asim.from_hlo(f"HloModule m\nENTRY e {{\n  ROOT c = {typ} constant({literal})\n}}\n")
    (out,) = asim.reference(g, [])
    assert out.shape == shape and out.size == 0


@pytest.mark.parametrize("typ, literal, words", [
    ("f32[2,64]", "{  }", r"line 3: constant 'c': literal has shape \[0\] but the type says f32\[2,64\]"),
    ("f32[3,0]", "{ {}, {} }", r"literal has shape \[2, 0\] but the type says f32\[3,0\]"),
    ("f32[0,4]", "{ {1, 2, 3, 4} }", r"literal has shape \[1, 4\] but the type says f32\[0,4\]"),
])
def test_wrong_empty_literals_are_refused(typ, literal, words):
    with pytest.raises(AStitchError, match=words):
        asim.from_hlo(f"HloModule m\nENTRY e {{\n  ROOT c = {typ} constant({literal})\n}}\n")


# -- XLA's semantics, op by op ------------------------------------------------------------------------------

#: a reduce over a 0-length dimension, kept as a real reduce (JAX would have folded it), with init values that
#: are not the reducer's identity: XLA's result is the init value, whatever the reducer
REDUCE_OVER_NOTHING = """HloModule reduce_over_nothing
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
max { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT m = f32[] maximum(a, b) }
mul { a = s32[] parameter(0)  b = s32[] parameter(1)  ROOT m = s32[] multiply(a, b) }
and { a = pred[] parameter(0)  b = pred[] parameter(1)  ROOT m = pred[] and(a, b) }
ENTRY e {
  x = f32[16,0]{1,0} parameter(0)
  i = s32[0,7]{1,0} parameter(1)
  p = pred[5,0]{1,0} parameter(2)
  five = f32[] constant(5)
  ninf = f32[] constant(-inf)
  three = s32[] constant(3)
  t = pred[] constant(true)
  sum = f32[16]{0} reduce(x, five), dimensions={1}, to_apply=add
  max = f32[16]{0} reduce(x, ninf), dimensions={1}, to_apply=max
  all = f32[] reduce(x, five), dimensions={0,1}, to_apply=add
  prod = s32[7]{0} reduce(i, three), dimensions={0}, to_apply=mul
  every = pred[5]{0} reduce(p, t), dimensions={1}, to_apply=and
  e = f32[16,0]{1,0} exponential(x)
  ROOT out = (f32[16], f32[16], f32[], s32[7], pred[5], f32[16,0]) tuple(sum, max, all, prod, every, e)
}
"""


def _inputs_of(g):
    return asim.random_inputs(g)


def test_reduce_over_nothing_is_its_init_value_everywhere():
    g = asim.from_hlo(REDUCE_OVER_NOTHING)
    want = [np.full(16, 5, np.float32), np.full(16, -np.inf, np.float32), np.float32(5),
            np.full(7, 3, np.int32), np.ones(5, bool), np.zeros((16, 0), np.float32)]
    ins = _inputs_of(g)
    for i, (r, w) in enumerate(zip(asim.reference(g, ins), want, strict=True)):
        _same(r, w, f"reference out{i}")
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        assert "reduce over nothing is its init value" in str(plan)
        for i, (o, w) in enumerate(zip(asim.simulate(plan, ins).outputs, want, strict=True)):
            _same(o, w, f"{strategy} out{i}")
        for i, (o, w) in enumerate(zip(gpu_backend.run(plan, ins), want, strict=True)):
            _same(o, w, f"{strategy} numba out{i}")


def _mixed_graph():
    """Empty tensors meeting non-empty ones: pad, concatenate, broadcast, a dot over an empty contraction,
    reshapes and slices of empties, a parameter that is an output, a dead empty branch."""
    g = asim.Graph("mixed_empty")
    x = g.parameter("x", (0, 6))
    y = g.parameter("y", (4, 6))
    w = g.parameter("w", (0, 3))
    padded = g.add_node("pad", (x, g.constant(1.5)), low=(2, 0), high=(1, 0), interior=(0, 0), name="padded")
    cat = g.concatenate([x, y, x], 0, name="cat")
    prod = g.dot(x, w, lhs_contracting=(0,), rhs_contracting=(0,), name="prod")   # [6, 3], sums of nothing
    sq = g.multiply(cat, cat, name="sq")
    rows = g.reduce(g.exp(x), (1,), "sum", name="rows")                          # [0]
    cols = g.reduce(g.exp(x), (0,), "max", name="cols")                          # [6] of -inf
    flat = g.reshape(g.slice(y, (1, 0), (1, 6)), (0, 2, 3), name="flat")         # empty slice of a full tensor
    g.reduce(g.sqrt(x), (0,), "sum", name="dead")                                # dead code
    total = g.add(g.reduce(sq, (0, 1), "sum"), g.reduce(padded, (0, 1), "sum"), name="total")
    g.set_outputs(padded, cat, prod, rows, cols, flat, total, x)
    return g


def test_mixed_empty_and_full_tensors_under_every_strategy_and_in_numba():
    g = _mixed_graph()
    ins = _inputs_of(g)
    y = ins[1]
    want = [np.full((3, 6), 1.5, np.float32), y, np.zeros((6, 3), np.float32), np.zeros(0, np.float32),
            np.full(6, -np.inf, np.float32), np.zeros((0, 2, 3), np.float32),
            np.float32((y.astype(np.float64) ** 2).sum() + 27.0), ins[0]]
    ref = asim.reference(g, ins)
    for i, (r, w) in enumerate(zip(ref, want, strict=True)):
        _same(r, w, f"reference out{i}")
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        back = asim.Plan.from_json(plan.to_json())
        assert back.to_json() == plan.to_json()
        for i, (o, w) in enumerate(zip(asim.simulate(back, ins).outputs, want, strict=True)):
            _same(o, w, f"{strategy} out{i}")
        for i, (o, w) in enumerate(zip(gpu_backend.run(back, ins), want, strict=True)):
            _same(o, w, f"{strategy} numba out{i}")


def test_elimination_keeps_parameters_and_output_names_and_rewrites_only_what_it_must():
    g = _mixed_graph()
    h, notes = eliminate_zero_size(g)
    assert [p.name for p in h.inputs] == [p.name for p in g.inputs]
    assert [p.shape for p in h.inputs] == [p.shape for p in g.inputs]
    assert [o.name for o in h.outputs] == [o.name for o in g.outputs]
    assert h["padded"].op == "broadcast" and h["prod"].op == "broadcast" and h["cols"].op == "broadcast"
    assert [o.name for o in h["cat"].operands] == ["y"]
    assert h["rows"].op == "constant" and h["flat"].op == "constant" and h["sq"].op == "multiply"
    assert any("concatenate -> concatenate (empty operands add nothing)" in n for n in notes)
    assert any("a sum of no products is 0" in n for n in notes)
    # a graph without empty tensors is returned as it is
    lay = asim.workload("layernorm", rows=4, cols=8)
    assert eliminate_zero_size(lay) == (lay, [])


def test_a_graph_of_only_empty_outputs_plans_no_kernel():
    g = asim.Graph("nothing")
    x = g.parameter("x", (0, 768))
    g.set_outputs(g.tanh(g.multiply(x, x)))
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        assert plan.kernels == []
        assert "no kernel computes them" in str(plan)
        res = asim.simulate(plan, [np.zeros((0, 768), np.float32)])
        assert res.outputs[0].shape == (0, 768) and res.outputs[0].dtype == np.float32
        assert res.stats.kernel_launches == 0 and res.stats.global_bytes == 0 and res.stats.predicted_us == 0
        out = gpu_backend.run(plan, [np.zeros((0, 768), np.float32)])
        assert out[0].shape == (0, 768)
        assert plan.to_dot().startswith("digraph")


def test_a_plan_stage_over_an_empty_domain_is_refused():
    """The rule for launch shapes: no kernel iterates over nothing.  A hand-edited plan that tries is refused
    by validate, simulate and the Numba backend alike, naming the stage and the fix."""
    g = asim.workload("softmax", rows=4, cols=8)
    d = json.loads(asim.compile(g, "astitch", "H100").to_json())
    d["kernels"][0]["stages"][0]["mapping"]["domain"] = [0, 8]
    words = r"stage 0 \(.*\) iterates over the empty domain \[0,8\].*recompile"
    with pytest.raises(AStitchError, match=words):
        asim.Plan.from_json(json.dumps(d)).validate()
    bad = asim.Plan.from_dict(d)
    with pytest.raises(AStitchError, match=words):
        asim.simulate(bad, asim.random_inputs(g))
    with pytest.raises(AStitchError, match=words):
        gpu_backend.run(bad, asim.random_inputs(g))


def test_an_op_without_a_zero_size_rule_is_named(monkeypatch):
    from astitch_sim.passes import zero_size
    monkeypatch.delitem(zero_size.RULES, "pad")
    g = asim.Graph("p")
    x = g.parameter("x", (0, 3))
    g.set_outputs(g.add_node("pad", (x, g.constant(0.0)), low=(1, 0), high=(0, 0), interior=(0, 0), name="pd"))
    with pytest.raises(AStitchError, match=r"pd: pad of an empty operand gives 3 elements.*zero_size.RULES"):
        asim.compile(g, "astitch")


def test_constant_value_must_match_its_declared_shape():
    g = asim.Graph("c")
    with pytest.raises(AStitchError, match=r"k: constant value has shape \[0\] but the node is declared f32\[0,4\]"):
        g.add_node("constant", (), shape=(0, 4), dtype="f32", name="k", value=np.zeros(0, np.float32))
