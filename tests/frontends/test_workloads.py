"""Tests for astitch_sim.frontends.workloads: the catalog of real-model subgraphs.

Each workload is checked against an *independent* numpy formula written here in
float64 (not built from the op table), at small shapes.  The default shapes are
big (BERT, LLaMA, DIEN sizes): they are only built, never evaluated.
"""
from __future__ import annotations

import doctest
import math
import tracemalloc
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import astitch_sim
from astitch_sim.frontends import workloads as wl
from astitch_sim.errors import AStitchError
from astitch_sim.ir.graph import Graph
from astitch_sim.ir.reference import random_inputs, reference
from astitch_sim.frontends.workloads import WORKLOADS, list_workloads, workload, workload_inputs


# ---------------------------------------------------------------------------
# independent numpy formulas (float64), one per workload
# ---------------------------------------------------------------------------

def _f64(d):
    return {k: np.asarray(v, dtype=np.float64) for k, v in d.items()}


def np_layernorm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return [(x - mean) / np.sqrt(var + eps) * gamma + beta]


def np_rmsnorm(x, weight, eps=1e-6):
    return [x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight]


def np_batchnorm_train(x, scale, offset, eps=1e-5):
    mean = x.mean(0)
    var = x.var(0)                       # biased, as batch statistics are
    return [(x - mean) / np.sqrt(var + eps) * scale + offset, mean, var]


def np_layernorm_backward(x, dy, gamma, mean, rstd):
    # the textbook closed form (e.g. PyTorch's layer_norm_backward); checked against
    # finite differences of the forward in test_layernorm_backward_is_the_gradient
    n = x.shape[-1]
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dy * gamma
    dx = rstd[:, None] / n * (n * g - g.sum(-1, keepdims=True) - xhat * (g * xhat).sum(-1, keepdims=True))
    return [dx, (dy * xhat).sum(0), dy.sum(0)]


def np_global_norm(x, clip=1.0):
    norm = np.sqrt((x * x).sum())
    return [x * clip / max(clip, norm)]


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_attention_softmax(scores, mask):
    logits = scores / 8.0 + mask[:, None, None, :]      # 1/sqrt(64); mask[b, key]
    return [np_softmax(logits)]


def np_log_softmax(x):
    m = x.max(-1, keepdims=True)
    return [x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))]


def np_cross_entropy(logits, onehot):
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    loss = lse - (onehot * logits).sum(-1)
    return [loss, loss.mean()]


_erf = np.vectorize(math.erf)


def np_bias_gelu(x, bias):
    h = x + bias
    return [0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))]


def np_swiglu(a, b):
    return [a / (1.0 + np.exp(-a)) * b]


def np_adam_step(p, g, m, v, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, t=1):
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g * g
    p2 = p - lr * (m2 / (1 - b1 ** t)) / (np.sqrt(v2 / (1 - b2 ** t)) + eps)
    return [p2, m2, v2]


def np_paper_fig7(pr1, pr2, pr3, k=2.0):
    r1 = (pr1 + pr2[:, None]).sum(1)           # B.1, A.1, R.1 (row sum)
    pw1 = (r1 / pr2) ** k                      # D.1, Pw.1
    b2 = np.broadcast_to(pw1[None, :], pr3.shape)   # B.2: [C, N]
    r2 = (pr3 / b2).sum(0)                     # D.2, R.2 (column sum)
    return [r2[None, :] * b2]                  # B.3 * B.2


ORACLES = {
    "layernorm": lambda d: np_layernorm(d["x"], d["gamma"], d["beta"]),
    "rmsnorm": lambda d: np_rmsnorm(d["x"], d["weight"]),
    "batchnorm_train": lambda d: np_batchnorm_train(d["x"], d["scale"], d["offset"]),
    "layernorm_backward": lambda d: np_layernorm_backward(d["x"], d["dy"], d["gamma"], d["mean"], d["rstd"]),
    "global_norm": lambda d: np_global_norm(d["x"]),
    "softmax": lambda d: [np_softmax(d["x"])],
    "attention_softmax": lambda d: np_attention_softmax(d["scores"], d["mask"]),
    "log_softmax": lambda d: np_log_softmax(d["x"]),
    "cross_entropy": lambda d: np_cross_entropy(d["logits"], d["onehot"]),
    "bias_gelu": lambda d: np_bias_gelu(d["x"], d["bias"]),
    "swiglu": lambda d: np_swiglu(d["a"], d["b"]),
    "adam_step": lambda d: np_adam_step(d["p"], d["g"], d["m"], d["v"]),
    "paper_fig7": lambda d: np_paper_fig7(d["param.1"], d["param.2"], d["param.3"]),
    "row_reduce": lambda d: [(d["x"] ** 2).sum(1)],
    "column_reduce": lambda d: [d["dy"].sum(0)],
}

SMALL = {
    "layernorm": dict(rows=5, cols=12),
    "rmsnorm": dict(rows=5, cols=12),
    "batchnorm_train": dict(rows=20, cols=6),
    "layernorm_backward": dict(rows=5, cols=12),
    "global_norm": dict(rows=6, cols=7),
    "softmax": dict(rows=4, cols=33),
    "attention_softmax": dict(batch=2, heads=3, seq=5),
    "log_softmax": dict(rows=4, cols=33),
    "cross_entropy": dict(rows=6, cols=10),
    "bias_gelu": dict(rows=4, cols=9),
    "swiglu": dict(rows=4, cols=9),
    "adam_step": dict(size=50),
    "paper_fig7": dict(n=4, c=6),
    "row_reduce": dict(rows=30, cols=32),
    "column_reduce": dict(rows=30, cols=7),
}


def assert_close(actual, expected, rtol=1e-4):
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=1e-5 * scale)


def check_against_oracle(name, shape, seed=0, inputs=None):
    g = workload(name, **shape)
    values = inputs if inputs is not None else workload_inputs(g, seed)
    outs = reference(g, values)
    want = ORACLES[name](_f64({p.name: v for p, v in zip(g.inputs, values, strict=True)}))
    assert len(outs) == len(want) == len(g.outputs)
    for node, got, exp in zip(g.outputs, outs, want, strict=True):
        assert got.dtype == np.float32, node.name
        assert_close(got, exp)


# ---------------------------------------------------------------------------
# the catalog
# ---------------------------------------------------------------------------

EXPECTED_DEFAULTS = {
    "layernorm": dict(rows=16384, cols=768),
    "rmsnorm": dict(rows=4096, cols=4096),
    "softmax": dict(rows=64, cols=30000),
    "attention_softmax": dict(batch=16, heads=12, seq=128),
    "log_softmax": dict(rows=8192, cols=32000),
    "bias_gelu": dict(rows=16384, cols=3072),
    "swiglu": dict(rows=4096, cols=11008),
    "cross_entropy": dict(rows=8192, cols=32000),
    "layernorm_backward": dict(rows=16384, cols=768),
    "batchnorm_train": dict(rows=65536, cols=64),
    "adam_step": dict(size=1048576),
    "global_norm": dict(rows=1024, cols=1024),
    "paper_fig7": dict(n=128, c=256),
    "row_reduce": dict(rows=750000, cols=32),
    "column_reduce": dict(rows=16384, cols=3072),
}


def test_catalog_has_every_workload_with_its_default_shape():
    assert {name: w.defaults for name, w in WORKLOADS.items()} == EXPECTED_DEFAULTS
    assert [w.name for w in list_workloads()] == list(WORKLOADS)
    assert set(ORACLES) == set(WORKLOADS) == set(SMALL)   # a new workload needs an oracle here


def test_package_exports_the_catalog():
    assert astitch_sim.workload is workload
    assert astitch_sim.WORKLOADS is WORKLOADS
    assert astitch_sim.list_workloads is list_workloads
    for name in ("workload", "WORKLOADS", "list_workloads"):
        assert name in astitch_sim.__all__


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_entry_is_documented(name):
    w = WORKLOADS[name]
    assert w.name == name
    assert len(w.doc) > 20 and len(w.source) > 10
    assert w.shape_str == " ".join(f"{k}={v}" for k, v in w.defaults.items())
    assert w.build.__doc__, f"{name}'s builder should say what it teaches"


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_default_shape_builds_cheaply(name):
    # no arrays are allocated: the paper-size graph is shapes only (python -m benchmarks.unit_speed times it)
    tracemalloc.start()
    try:
        g = workload(name)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"building {name} at its default shape allocated {peak} bytes"
    assert isinstance(g, Graph) and g.name == name and g.outputs
    big = max(max(p.size for p in g.inputs), max(o.size for o in g.outputs))
    assert big >= min(WORKLOADS[name].defaults.values())
    # the default shape shows up in the parameters
    dims = {d for p in g.inputs for d in p.shape}
    assert set(WORKLOADS[name].defaults.values()) <= dims


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_matches_independent_numpy_formula(name):
    check_against_oracle(name, SMALL[name])


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_matches_formula_on_plain_random_inputs(name):
    """random_inputs (standard normals, no domain fix-up) still match, NaN for NaN (Adam's sqrt(v<0))."""
    g = workload(name, **SMALL[name])
    values = random_inputs(g, seed=1)
    outs = reference(g, values)
    with np.errstate(all="ignore"):
        want = ORACLES[name](_f64({p.name: v for p, v in zip(g.inputs, values, strict=True)}))
    for got, exp in zip(outs, want, strict=True):
        exp = np.asarray(exp)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(exp))
        ok = ~np.isnan(exp)
        assert_close(got[ok], exp[ok], rtol=1e-3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_small_shape_matches_formula(data):
    name = data.draw(st.sampled_from(sorted(WORKLOADS)))
    shape = {k: data.draw(st.integers(1, 6), label=k) for k in WORKLOADS[name].defaults}
    check_against_oracle(name, shape, seed=data.draw(st.integers(0, 2**16)))


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_graphs_are_in_xla_form(name):
    """f32 throughout; reduces are row (last dim), column (dim 0) or whole-tensor; broadcasts explicit."""
    g = workload(name, **SMALL[name])
    for n in g:
        assert n.dtype == "f32", n
        if n.op == "reduce":
            x, init = n.operands
            assert init.op == "constant" and init.rank == 0
            dims = tuple(n.attrs["dimensions"])
            assert dims in {(x.rank - 1,), (0,), tuple(range(x.rank))}, n
        if n.kind == "elementwise":
            assert all(o.shape == n.shape for o in n.operands), n
        if n.op == "broadcast":
            assert "dimensions" in n.attrs


def test_readable_node_names():
    g = workload("layernorm", rows=2, cols=4)
    for name in ("mean_sum", "mean", "var", "rstd", "xhat", "out"):
        assert name in g
    assert [o.name for o in g.outputs] == ["out"]
    assert [p.name for p in g.inputs] == ["x", "gamma", "beta"]
    assert g["gamma.bcast"].attrs["dimensions"] == (1,)
    assert g["mean.bcast"].attrs["dimensions"] == (0,)


def test_outputs_of_multi_output_workloads():
    outs = {name: [o.name for o in workload(name, **SMALL[name]).outputs]
            for name in ("batchnorm_train", "layernorm_backward", "adam_step", "cross_entropy")}
    assert outs == {"batchnorm_train": ["y", "mean", "var"],
                    "layernorm_backward": ["dx", "dgamma", "dbeta"],
                    "adam_step": ["new_p", "new_m", "new_v"],
                    "cross_entropy": ["loss", "mean_loss"]}
    assert workload("cross_entropy", rows=3, cols=4).outputs[1].shape == ()


def test_attention_mask_broadcasts_over_heads_and_queries():
    g = workload("attention_softmax", batch=2, heads=3, seq=4)
    assert g["mask"].shape == (2, 4)
    assert g["mask.bcast"].attrs["dimensions"] == (0, 3)
    scores = np.zeros((2, 3, 4, 4), np.float32)
    mask = np.array([[0, 0, -1e9, -1e9], [0, 0, 0, -1e9]], np.float32)
    probs = reference(g, {"scores": scores, "mask": mask})[0]
    np.testing.assert_allclose(probs[0, :, :, :2], 0.5)
    np.testing.assert_allclose(probs[0, :, :, 2:], 0.0)
    np.testing.assert_allclose(probs[1, :, :, :3], 1 / 3, rtol=1e-6)


def test_layernorm_backward_is_the_gradient():
    """dx, dgamma, dbeta equal central finite differences of L = sum(dy * layernorm(x))."""
    rows, cols = 3, 5
    g = workload("layernorm_backward", rows=rows, cols=cols)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((rows, cols))
    dy = rng.standard_normal((rows, cols))
    gamma = rng.standard_normal(cols)
    beta = np.zeros(cols)

    def loss(x, gamma, beta):
        return float((dy * np_layernorm(x, gamma, beta)[0]).sum())

    def fd(f, a, h=1e-6):
        grad = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            up, down = a.copy(), a.copy()
            up[i] += h
            down[i] -= h
            grad[i] = (f(up) - f(down)) / (2 * h)
        return grad

    mean = x.mean(-1)
    rstd = 1 / np.sqrt(x.var(-1) + 1e-12)
    f32 = lambda a: a.astype(np.float32)  # noqa: E731
    dx, dgamma, dbeta = reference(g, [f32(x), f32(dy), f32(gamma), f32(mean), f32(rstd)])
    np.testing.assert_allclose(dx, fd(lambda a: loss(a, gamma, beta), x), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(dgamma, fd(lambda a: loss(x, a, beta), gamma), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(dbeta, fd(lambda a: loss(x, gamma, a), beta), rtol=1e-3, atol=1e-4)


def test_global_norm_reduces_over_every_dim_and_clips_only_large_tensors():
    g = workload("global_norm", rows=4, cols=5)
    assert g["sum_sq"].shape == () and g["sum_sq"].attrs["dimensions"] == (0, 1)
    assert g["factor.bcast"].attrs["dimensions"] == ()
    small = np.full((4, 5), 0.01, np.float32)          # norm 0.0447 < clip 1: unchanged
    np.testing.assert_allclose(reference(g, [small])[0], small)
    big = np.full((4, 5), 3.0, np.float32)             # norm sqrt(180): scaled to norm 1
    out = reference(g, [big])[0]
    assert np.sqrt((out.astype(np.float64) ** 2).sum()) == pytest.approx(1.0, rel=1e-6)


def test_softmax_rows_sum_to_one_at_the_papers_row_length():
    g = workload("softmax", rows=2, cols=30000)
    out = reference(g, workload_inputs(g))[0]
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)


# ---------------------------------------------------------------------------
# the paper's Figure 7 graph
# ---------------------------------------------------------------------------

def _paper_nodes(g):
    """The nodes the paper draws: everything but constants and broadcasts of constants."""
    return [n for n in g if n.op != "constant"
            and not (n.op == "broadcast" and n.operands[0].op == "constant")]


def test_paper_fig7_has_the_papers_13_nodes():
    g = workload("paper_fig7", n=4, c=6)
    nodes = _paper_nodes(g)
    assert len(nodes) == 13
    assert Counter(n.op for n in nodes) == Counter(
        {"parameter": 3, "broadcast": 3, "add": 1, "reduce": 2, "divide": 2, "power": 1, "multiply": 1})
    assert [n.name for n in nodes] == [
        "param.1", "param.2", "param.3", "broadcast.1", "add.1", "reduce.1", "divide.1", "power.1",
        "broadcast.2", "divide.2", "reduce.2", "broadcast.3", "multiply.1"]


def test_paper_fig7_edges_shapes_and_dimensions():
    n, c = 4, 6
    g = workload("paper_fig7", n=n, c=c)
    ops = lambda name: [o.name for o in g[name].operands if o.op != "constant"]  # noqa: E731
    assert [p.shape for p in g.inputs] == [(n, c), (n,), (c, n)]
    assert ops("broadcast.1") == ["param.2"] and g["broadcast.1"].attrs["dimensions"] == (0,)
    assert g["broadcast.1"].shape == (n, c)
    assert ops("add.1") == ["param.1", "broadcast.1"]
    assert ops("reduce.1") == ["add.1"] and g["reduce.1"].attrs["dimensions"] == (1,)
    assert g["reduce.1"].shape == (n,)
    assert ops("divide.1") == ["reduce.1", "param.2"]
    assert ops("power.1") == ["divide.1", "k.bcast"]
    assert g["k"].attrs["value"] == 2.0
    assert ops("broadcast.2") == ["power.1"] and g["broadcast.2"].attrs["dimensions"] == (1,)
    assert g["broadcast.2"].shape == (c, n)
    assert ops("divide.2") == ["param.3", "broadcast.2"]
    assert ops("reduce.2") == ["divide.2"] and g["reduce.2"].attrs["dimensions"] == (0,)
    assert g["reduce.2"].shape == (n,)
    assert ops("broadcast.3") == ["reduce.2"] and g["broadcast.3"].attrs["dimensions"] == (1,)
    assert ops("multiply.1") == ["broadcast.3", "broadcast.2"]
    assert [o.name for o in g.outputs] == ["multiply.1"]
    # B.2 has two users (the operator-level reuse the paper keeps in registers); param.2 too
    assert {u.name for u in g["broadcast.2"].users} == {"divide.2", "multiply.1"}
    assert {u.name for u in g["param.2"].users} == {"broadcast.1", "divide.1"}
    assert g["power.1"].opdef.is_expensive


def test_paper_fig7_by_hand():
    g = workload("paper_fig7", n=2, c=3)
    pr1 = np.arange(6, dtype=np.float32).reshape(2, 3)     # rows sum to 3 and 12
    pr2 = np.array([1.0, 2.0], np.float32)
    pr3 = np.ones((3, 2), np.float32)
    # R.1 = [3 + 3*1, 12 + 3*2] = [6, 18]; D.1 = [6, 9]; Pw.1 = [36, 81]
    # R.2 = [3/36, 3/81]; M.1 = R.2 * Pw.1 = [3, 3] in every row
    out = reference(g, [pr1, pr2, pr3])[0]
    np.testing.assert_allclose(out, np.full((3, 2), 3.0), rtol=1e-6)


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------

def test_unknown_workload_lists_the_catalog():
    with pytest.raises(AStitchError) as e:
        workload("layernrom")
    msg = str(e.value)
    assert "layernrom" in msg and all(name in msg for name in WORKLOADS)


@pytest.mark.parametrize("shape, words", [
    (dict(row=4), ["'row'", "rows", "cols"]),
    (dict(rows=0), ["rows=0", "positive"]),
    (dict(rows=-3), ["rows=-3", "positive"]),
    (dict(cols=2.5), ["cols=2.5", "positive integer"]),
    (dict(cols=True), ["cols=True", "positive integer"]),
    (dict(cols="many"), ["cols='many'", "positive integer"]),
])
def test_bad_shape_keywords_are_named(shape, words):
    with pytest.raises(AStitchError) as e:
        workload("layernorm", **shape)
    for w in words:
        assert w in str(e.value)


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        workload("nope")


def test_builders_are_callable_directly_and_validate():
    g = wl.softmax(3, cols=7)
    assert g["x"].shape == (3, 7)
    assert wl.paper_fig7(n=2)["param.3"].shape == (256, 2)
    assert WORKLOADS["swiglu"](rows=2, cols=3)["a"].shape == (2, 3)
    with pytest.raises(AStitchError):
        wl.softmax(3, 4, 5)
    with pytest.raises(AStitchError):
        wl.softmax(3, rows=4)
    with pytest.raises(AStitchError):
        wl.softmax(rows=0)
    assert workload("row_reduce", rows=np.int64(3), cols="4")["x"].shape == (3, 4)


# ---------------------------------------------------------------------------
# inputs in each workload's domain
# ---------------------------------------------------------------------------

def test_workload_inputs_fix_domains():
    g = workload("adam_step", size=1000)
    v = dict(zip([p.name for p in g.inputs], workload_inputs(g, 3), strict=True))["v"]
    assert (v >= 0).all()
    assert all(np.isfinite(o).all() for o in reference(g, workload_inputs(g, 3)))

    g = workload("cross_entropy", rows=8, cols=5)
    onehot = workload_inputs(g)[1]
    assert set(np.unique(onehot)) <= {0.0, 1.0} and (onehot.sum(1) == 1).all()

    g = workload("paper_fig7", n=8, c=3)
    assert (workload_inputs(g)[1] >= 0.5).all()

    g = workload("layernorm_backward", rows=4, cols=6)
    x, _, _, mean, rstd = workload_inputs(g)
    np.testing.assert_allclose(mean, x.mean(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(x.astype(np.float64).var(-1)), rtol=1e-5)


def test_workload_inputs_dtypes_shapes_and_seeds():
    for name in WORKLOADS:
        g = workload(name, **SMALL[name])
        values = workload_inputs(g, 5)
        assert [v.shape for v in values] == [p.shape for p in g.inputs]
        assert all(v.dtype == np.float32 for v in values)
        again = workload_inputs(g, 5)
        assert all(np.array_equal(a, b) for a, b in zip(values, again, strict=True))


def test_workload_inputs_of_other_graphs_are_plain_random():
    g = Graph("adam_step")                 # same name, different graph: no fix-up applies
    x = g.parameter("x", (3,))
    g.set_outputs(g.negate(x))
    np.testing.assert_array_equal(workload_inputs(g, 2)[0], random_inputs(g, 2)[0])
    g = Graph("mine")
    g.set_outputs(g.exp(g.parameter("v", (4,))))
    np.testing.assert_array_equal(workload_inputs(g, 2)[0], random_inputs(g, 2)[0])


def test_module_doctest():
    result = doctest.testmod(wl, verbose=False)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "s32", "u8", "pred"])
def test_random_inputs_are_drawn_in_chunks_with_the_stream_of_one_draw(monkeypatch, dtype):
    """Inputs are drawn a chunk at a time (a 1 GB float32 input must not hold 2 GB of doubles); the values are
    the ones a single draw of the whole tensor gives, so every seed keeps its inputs."""
    import importlib

    reference_module = importlib.import_module("astitch_sim.ir.reference")
    monkeypatch.setattr(reference_module, "DRAW_CHUNK", 1000)
    g = astitch_sim.Graph("chunks")
    g.parameter("p", (7, 1001), dtype)
    got = random_inputs(g, 3)[0]
    rng = np.random.default_rng(3)
    whole = {"pred": lambda: rng.random((7, 1001)) < 0.5,
             "s32": lambda: rng.integers(0, 8, size=(7, 1001)).astype(np.int32),
             "u8": lambda: rng.integers(0, 8, size=(7, 1001)).astype(np.uint8)}.get(
        dtype, lambda: astitch_sim.ir.dtypes.cast(rng.standard_normal((7, 1001)).astype(np.float32), dtype))()
    assert got.shape == (7, 1001) and got.dtype == whole.dtype
    assert np.array_equal(got, whole)
