"""Bad input everywhere: every public entry point answers with an AStitchError naming the problem.

Each case passes something wrong (or odd but legal) to a public entry point and checks that the
answer is either an :class:`AStitchError` with a useful message, or -- for the must-work cases
(read-only and non-contiguous arrays, a graph whose output is a parameter or a constant) -- the
right result.  Never a stray KeyError/IndexError/TypeError/AttributeError.
"""
import contextlib
import copy
import io
import json

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim import AStitchError, Graph, Plan
from astitch_sim.cli import main

HLO = """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[4] exponential(p)
}
"""


@pytest.fixture(scope="module")
def ln():
    g = asim.workload("layernorm", rows=4, cols=32)
    return g, asim.random_inputs(g)


def _pred_graph():
    h = Graph("h")
    a, b, x = h.parameter("a", (3,), "pred"), h.parameter("b", (), "f32"), h.parameter("x", (3,), "f32")
    h.set_outputs(h.select(a, x, h.broadcast(b, (3,), ())))
    return h


def _s32_graph():
    g = Graph("i")
    n = g.parameter("n", (3,), "s32")
    g.set_outputs(g.add(n, n))
    return g


# -- HLO import ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, match", [
    (None, "expects HLO text"), (b"HloModule x", "expects HLO text"), ("", "empty"),
    ("hello world", "line 1"), (bytes(range(256)).decode("latin1"), "line"),
])
def test_from_hlo_bad_text(text, match):
    with pytest.raises(AStitchError, match=match):
        asim.from_hlo(text)


def test_from_hlo_bad_name():
    with pytest.raises(AStitchError, match="name must be a str"):
        asim.from_hlo(HLO, name=5)


def test_from_hlo_file_bad_paths(tmp_path):
    (tmp_path / "bin.hlo").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "dir").mkdir()
    cases = [(tmp_path / "missing.hlo", "No such file"), (tmp_path / "dir", "Is a directory"),
             (tmp_path / "bin.hlo", "not UTF-8 text"), (None, "needs a file path"), (3, "needs a file path"),
             ("", "needs a file path")]
    for path, match in cases:
        with pytest.raises(AStitchError, match=match):
            asim.from_hlo_file(path)


# -- workload catalog ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, match", [
    (dict(rows=8.0), "must be a positive integer"), (dict(rows=-1), "must be a positive integer"),
    (dict(rows=True), "must be a positive integer"), (dict(rows="abc"), "must be a positive integer"),
    (dict(rows=None), "must be a positive integer"), (dict(rows=0), "must be a positive integer"),
    (dict(bogus=3), "no shape keyword 'bogus'"), (dict(rows=10**12), "more than the 2147483647"),
])
def test_workload_bad_shapes(shape, match):
    with pytest.raises(AStitchError, match=match):
        asim.workload("layernorm", **shape)


@pytest.mark.parametrize("name", [None, 5, "nope", ["softmax"]])
def test_workload_bad_names(name):
    with pytest.raises(AStitchError, match="unknown workload"):
        asim.workload(name)


def test_workload_digit_string_is_accepted():
    assert asim.workload("layernorm", rows="8", cols=4).inputs[0].shape == (8, 4)


# -- reference / random_inputs ---------------------------------------------------------------------

@pytest.mark.parametrize("make, match", [
    (lambda i: None, "inputs must be a list"), (lambda i: "abc", "inputs must be a list"),
    (lambda i: 3, "inputs must be a list"), (lambda i: i[0], "inputs must be a list"),
    (lambda i: [None] * 3, "cannot convert NoneType"), (lambda i: ["x"] * 3, "cannot convert str"),
    (lambda i: [[[1, 2], [3]]] + i[1:], "cannot convert list"),
    (lambda i: [i[0].astype(object)] + i[1:], "dtype object"),
    (lambda i: [i[0].astype(np.float64)] + i[1:], r"dtype f64 .*astype\(np.float32\)"),
    (lambda i: {"x": i[0], "gamma": i[1], "beta": i[2], "zz": 1}, r"unknown \['zz'\]"),
    (lambda i: {"x": i[0]}, r"missing \['gamma', 'beta'\]"),
    (lambda i: [i[0][:2]] + i[1:], r"input 'x' has shape \[2, 32\]"),
    (lambda i: i + i, "takes 3 input"), (lambda i: {0: i[0]}, "unknown"),
    (lambda i: [np.ones((4, 32), np.complex64)] + i[1:], "complex64"),
])
def test_reference_bad_inputs(ln, make, match):
    g, ins = ln
    with pytest.raises(AStitchError, match=match):
        asim.reference(g, make(ins))


@pytest.mark.parametrize("values, match", [
    ([np.array([1, 0, 1]), 2.0, np.ones(3, np.float32)], r"dtype s64 .*pred"),
    ([[2, 0, 5], 2.0, np.ones(3, np.float32)], "other than 0/1"),
    ([[True, False, True], np.array([2.0], np.float32), np.ones(3, np.float32)], r"input 'b' has shape \[1\]"),
    ([[True, False, True], 2.0, ["a", "b", "c"]], "cannot convert list"),
    ([[True, False, True], 2.0, [1.0, None, 2.0]], "cannot convert list of object"),
    ([None, 2.0, np.ones(3, np.float32)], "cannot convert NoneType"),
])
def test_reference_bad_values_for_dtype(values, match):
    with pytest.raises(AStitchError, match=match):
        asim.reference(_pred_graph(), values)


@pytest.mark.parametrize("values, match", [
    ([[1.5, 2.5, 3.5]], "do not fit s32"), ([[2**40, 1, 2]], "do not fit s32"),
    ([["1", "2", "3"]], "cannot convert list"), ([np.arange(3)], r"dtype s64 .*astype\(np.int32\)"),
])
def test_reference_bad_ints(values, match):
    with pytest.raises(AStitchError, match=match):
        asim.reference(_s32_graph(), values)


def test_reference_lists_scalars_and_whole_floats_work():
    got = asim.reference(_pred_graph(), [[1, 0, 1], 2.0, np.ones(3, np.float32)])[0]
    np.testing.assert_array_equal(got, [1, 2, 1])
    got = asim.reference(_pred_graph(), [np.array([True, False, True]), np.float32(2), np.ones(3, np.float32)])[0]
    np.testing.assert_array_equal(got, [1, 2, 1])
    np.testing.assert_array_equal(asim.reference(_s32_graph(), [[1.0, 2.0, 3.0]])[0], [2, 4, 6])


def test_reference_odd_layouts_work(ln):
    g, ins = ln
    want = asim.reference(g, ins)[0]
    ro = ins[0].copy()
    ro.flags.writeable = False
    for x in (ro, np.asfortranarray(ins[0]), np.repeat(ins[0], 2, axis=1)[:, ::2], ins[0].tolist()):
        np.testing.assert_allclose(asim.reference(g, [x] + ins[1:])[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(asim.reference(g, (x for x in ins))[0], want)


@pytest.mark.parametrize("graph", [None, "layernorm", 3])
def test_reference_and_random_inputs_need_a_graph(ln, graph):
    with pytest.raises(AStitchError, match="expected a Graph"):
        asim.reference(graph, ln[1])
    with pytest.raises(AStitchError, match="expected a Graph"):
        asim.random_inputs(graph)


@pytest.mark.parametrize("seed", ["a", -1, 1.5, True])
def test_random_inputs_bad_seed(ln, seed):
    with pytest.raises(AStitchError, match="seed must be a non-negative integer"):
        asim.random_inputs(ln[0], seed=seed)


# -- Graph builder ---------------------------------------------------------------------------------

def _g():
    g = Graph("g")
    return g, g.parameter("x", (4, 8))


BUILDER_CASES = [
    ("operand from another graph", lambda g, x: g.add(x, Graph("o").parameter("y", (4, 8))), "not a node of graph 'g'"),
    ("operand None", lambda g, x: g.add(x, None), "expected a Node or a python number"),
    ("operand str", lambda g, x: g.add(x, "x"), "expected a Node or a python number"),
    ("no node operand", lambda g, x: g.exp("x"), "at least one operand must be a Node"),
    ("broadcast dims out of range", lambda g, x: g.broadcast(x, (4, 8, 2), (0, 5)), "out of range for rank 3"),
    ("broadcast to smaller rank", lambda g, x: g.broadcast(x, (8,)), "at least the operand's rank"),
    ("broadcast dims too few", lambda g, x: g.broadcast(x, (4, 8, 2), (0,)), "one output dim per operand dim"),
    ("broadcast size mismatch", lambda g, x: g.broadcast(x, (2, 4, 9), (1, 2)), "operand dim 1 has size 8"),
    ("broadcast negative shape", lambda g, x: g.broadcast(x, (-4, 8), (0, 1)), "negative dimension"),
    ("broadcast shape str", lambda g, x: g.broadcast(x, "48"), "must be a tuple of integers"),
    ("broadcast shape None", lambda g, x: g.broadcast(x, None), "must be a tuple of integers"),
    ("broadcast dims None", lambda g, x: g.broadcast(x, (4, 8), (None, 1)), "must all be integers"),
    ("reduce dim too big", lambda g, x: g.reduce(x, 5), r"reduce dims \(5,\) out of range"),
    ("reduce dim too negative", lambda g, x: g.reduce(x, -3), "out of range"),
    ("reduce dims str", lambda g, x: g.reduce(x, "1"), "must be a tuple of integers"),
    ("reduce dims float", lambda g, x: g.reduce(x, 1.0), "must be a tuple of integers"),
    ("reduce repeated dims", lambda g, x: g.reduce(x, (1, 1)), "repeat a dimension"),
    ("reduce unknown reducer", lambda g, x: g.reduce(x, 1, "mean"), "reducer 'mean' is not one of"),
    ("reduce reducer None", lambda g, x: g.reduce(x, 1, None), "reducer None is not one of"),
    ("reduce of a scalar", lambda g, x: g.reduce(g.constant(1.0), 0), "out of range"),
    ("and-reduce of floats", lambda g, x: g.reduce(x, 1, "and"), "needs pred values"),
    ("transpose repeat", lambda g, x: g.transpose(x, (0, 0)), "repeat a dimension"),
    ("transpose short", lambda g, x: g.transpose(x, (0,)), "must list all 2 dims"),
    ("transpose out of range", lambda g, x: g.transpose(x, (0, 2)), "out of range"),
    ("transpose None", lambda g, x: g.transpose(x, None), "must be a tuple of integers"),
    ("slice beyond", lambda g, x: g.slice(x, (0, 0), (5, 8)), "outside a dim of size 4"),
    ("slice wrong rank", lambda g, x: g.slice(x, (0,), (4,)), "needs 2 start:limit:stride"),
    ("slice stride 0", lambda g, x: g.slice(x, (0, 0), (4, 8), (1, 0)), "outside a dim"),
    ("slice start > limit", lambda g, x: g.slice(x, (3, 0), (1, 8)), "outside a dim"),
    ("slice floats", lambda g, x: g.slice(x, (0.5, 0), (4, 8)), "must all be integers"),
    ("slice None", lambda g, x: g.slice(x, None, (4, 8)), "must be a tuple of integers"),
    ("concatenate nothing", lambda g, x: g.concatenate([], 0), "concatenate needs operands"),
    ("concatenate mismatch", lambda g, x: g.concatenate([x, g.parameter("z", (3, 7))], 0), "differ outside"),
    ("concatenate dim 2", lambda g, x: g.concatenate([x, x], 2), "out of range for rank 2"),
    ("concatenate dim str", lambda g, x: g.concatenate([x, x], "0"), "dimension must be an int"),
    ("concatenate non-node", lambda g, x: g.concatenate([x, 3.0], 0), "not a node of graph"),
    ("compare bad direction", lambda g, x: g.compare(x, x, "XX"), "compare needs direction"),
    ("compare direction None", lambda g, x: g.compare(x, x, None), "direction must be one of"),
    ("select on f32", lambda g, x: g.select(x, x, x), "must be pred"),
    ("unknown op", lambda g, x: g.add_node("cholesky", (x,)), "unsupported op 'cholesky'"),
    ("op None", lambda g, x: g.add_node(None, (x,)), "unsupported op None"),
    ("duplicate name", lambda g, x: (g.exp(x, name="e"), g.exp(x, name="e")), "used twice"),
    ("duplicate parameter", lambda g, x: g.parameter("x", (3,)), "used twice"),
    ("duplicate parameter index", lambda g, x: g.parameter("q", (3,), index=0), "index 0 is already taken by 'x'"),
    ("negative parameter index", lambda g, x: g.parameter("q", (3,), index=-1), "not an int >= 0"),
    ("unknown dtype", lambda g, x: g.parameter("p", (3,), "float128"), "unsupported dtype 'float128'"),
    ("negative shape", lambda g, x: g.parameter("p", (-3,)), "negative dimension"),
    ("shape str", lambda g, x: g.parameter("p", "abc"), "must be a tuple of integers"),
    ("shape float", lambda g, x: g.parameter("p", (2.5,)), "must all be integers"),
    ("shape bool", lambda g, x: g.parameter("p", (True,)), "must all be integers"),
    ("shape int", lambda g, x: g.parameter("p", 3), "must be a tuple of integers"),
    ("shape None", lambda g, x: g.parameter("p", None), "needs an explicit shape"),
    ("huge shape", lambda g, x: g.parameter("p", (2**20, 2**20)), "more than the 2147483647"),
    ("name int", lambda g, x: g.parameter(5, (3,)), "node name must be a non-empty str"),
    ("iota bad dim", lambda g, x: g.iota((3, 4), 5), "out of range for rank 2"),
    ("reshape wrong size", lambda g, x: g.reshape(x, (5,)), "cannot reshape"),
    ("reshape -1", lambda g, x: g.reshape(x, (-1, 32)), "negative dimension"),
    ("convert bad dtype", lambda g, x: g.convert(x, "f128"), "unsupported dtype"),
    ("constant str", lambda g, x: g.constant("hi"), "no XLA counterpart"),
    ("constant None", lambda g, x: g.constant(None), "no XLA counterpart"),
    ("constant ragged", lambda g, x: g.constant([1, [2]]), "rectangular array"),
    ("dot dims disagree", lambda g, x: g.dot(x, x), "dot dims do not agree"),
    ("dot dims out of range", lambda g, x: g.dot(x, x, (5,), (0,)), "out of range for rank 2"),
    ("pad dims missing", lambda g, x: g.add_node("pad", (x, g.constant(0.0)), low=(0,), high=(0,)),
     "for each of the 2 dims"),
    ("set_outputs()", lambda g, x: g.set_outputs(), "needs at least one output"),
    ("set_outputs([])", lambda g, x: g.set_outputs([]), "needs at least one output"),
    ("set_outputs(None)", lambda g, x: g.set_outputs(None), "not a node of graph"),
    ("set_outputs other graph", lambda g, x: g.set_outputs(Graph("o").parameter("y", (1,))), "not a node of graph"),
    ("set_outputs str", lambda g, x: g.set_outputs("x"), "not a node of graph"),
    ("g[missing]", lambda g, x: g["nope"], "no node named 'nope'"),
    ("g[int]", lambda g, x: g[3], "no node named 3"),
    ("users of missing", lambda g, x: g.users(3), "no node named 3"),
    ("graph name None", lambda g, x: Graph(None), "graph name must be a str"),
]


@pytest.mark.parametrize("label, build, match", BUILDER_CASES, ids=[c[0] for c in BUILDER_CASES])
def test_graph_builder_misuse(label, build, match):
    g, x = _g()
    with pytest.raises(AStitchError, match=match):
        build(g, x)


def test_graph_builder_failed_parameter_leaves_graph_clean():
    g, x = _g()
    with pytest.raises(AStitchError):
        g.parameter("q", (3,), index=0)
    assert "q" not in g and [p.name for p in g.inputs] == ["x"]


def test_unknown_graph_method_is_an_attribute_error():
    """``g.foo`` stays an AttributeError so hasattr/copy/pickle keep working."""
    g, x = _g()
    assert not hasattr(g, "foo")


def test_reduce_max_of_pred_and_negative_dims_work():
    g, x = _g()
    m = g.reduce(g.compare(x, x, "LT"), -1, "max")
    s = g.reduce(x, -1)
    g.set_outputs(m, s)
    v = np.arange(32, dtype=np.float32).reshape(4, 8)
    got = asim.reference(g, [v])
    np.testing.assert_array_equal(got[0], [False] * 4)
    np.testing.assert_allclose(got[1], v.sum(1))
    assert g[s.name].attrs["dimensions"] == (1,)


# -- compile / gpu ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, match", [
    (dict(strategy="foo"), "unknown strategy 'foo'"), (dict(strategy=None), "unknown strategy None"),
    (dict(strategy=["xla"]), "unknown strategy"), (dict(gpu="RTX"), "unknown GPU 'RTX'"),
    (dict(gpu=None), "expected a GPU name"), (dict(gpu=100), "expected a GPU name"),
])
def test_compile_bad_arguments(ln, kw, match):
    with pytest.raises(AStitchError, match=match):
        asim.compile(ln[0], **kw)


def test_compile_needs_a_graph_with_outputs():
    with pytest.raises(AStitchError, match="compile needs a Graph"):
        asim.compile(None)
    e = Graph("e")
    e.parameter("x", (3,))
    with pytest.raises(AStitchError, match="has no outputs: call set_outputs"):
        asim.compile(e)


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_outputs_that_are_parameters_or_constants_simulate(strategy):
    v = np.arange(12, dtype=np.float32).reshape(3, 4)
    q = Graph("q")
    x = q.parameter("x", (3, 4))
    q.set_outputs(x, q.exp(x), x)
    out = asim.simulate(asim.compile(q, strategy=strategy), [v]).outputs
    np.testing.assert_array_equal(out[0], v)
    np.testing.assert_array_equal(out[2], v)
    np.testing.assert_allclose(out[1], np.exp(v), rtol=1e-6)

    c = Graph("c")
    c.parameter("x", (3,))
    c.set_outputs(c.constant(np.array([1., 2., 3.], np.float32)), c.constant(2.5))
    out = asim.simulate(asim.compile(c, strategy=strategy), [np.zeros(3, np.float32)]).outputs
    np.testing.assert_array_equal(out[0], [1, 2, 3])
    assert out[1] == np.float32(2.5)


@pytest.mark.parametrize("args, match", [
    ((0,), "threads_per_block=0 is out of range"), ((2048,), "1 to 1024 threads"),
    ((1.5,), "must be an integer"), (("256",), "must be an integer"), ((True,), "must be an integer"),
    ((None,), "must be an integer"), ((256, -1), "shared_bytes=-1 is negative"),
    ((256, 10**9), "exceeds the H100 per-block maximum"), ((256, 0, 0), "registers_per_thread=0"),
    ((256, 0, 300), "1 to 255 registers"), ((256, 0, 1.0), "must be an integer"),
    ((1024, 0, 255), "no block of 1024 threads x 255 registers"),
])
def test_blocks_per_wave_bad_numbers(args, match):
    with pytest.raises(AStitchError, match=match):
        asim.gpu("H100").blocks_per_wave(*args)


@pytest.mark.parametrize("name", [None, "", "RTX", 3])
def test_gpu_bad_names(name):
    with pytest.raises(AStitchError, match="GPU"):
        asim.gpu(name)


# -- Plan JSON -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_dict(ln):
    return asim.compile(ln[0]).to_dict()


@pytest.mark.parametrize("text, match", [
    (None, "needs the JSON text"), (3, "needs the JSON text"), ("{{{", "does not parse"),
    ("[]", "must be an object"), (b"{}", "not an astitch-sim plan"),
])
def test_plan_from_json_bad_text(text, match):
    with pytest.raises(AStitchError, match=match):
        Plan.from_json(text)


@pytest.mark.parametrize("d", [None, [], "x"])
def test_plan_from_dict_not_a_dict(d):
    with pytest.raises(AStitchError, match="must be a dict"):
        Plan.from_dict(d)


def _k(dd):
    return dd["kernels"][0]


def _s(dd):
    return dd["kernels"][0]["stages"][0]


def _first_constant(dd):
    return next(n for n in dd["graph"]["nodes"] if n["op"] == "constant")


TAMPER = [
    ("missing kernels", lambda dd: dd.pop("kernels"), "malformed"),
    ("missing graph", lambda dd: dd.pop("graph"), "malformed"),
    ("graph nodes str", lambda dd: dd["graph"].__setitem__("nodes", "x"), "malformed"),
    ("kernels None", lambda dd: dd.__setitem__("kernels", None), "malformed"),
    ("kernel is int", lambda dd: dd.__setitem__("kernels", [1]), "malformed"),
    ("grid negative", lambda dd: _k(dd).__setitem__("grid", -1), "grid of -1 blocks"),
    ("grid str", lambda dd: _k(dd).__setitem__("grid", "4"), "grid must be an integer"),
    ("grid None", lambda dd: _k(dd).__setitem__("grid", None), "grid must be an integer"),
    ("grid float", lambda dd: _k(dd).__setitem__("grid", 1.5), "grid must be an integer"),
    ("grid beyond CUDA", lambda dd: _k(dd).__setitem__("grid", 10**12), "CUDA launches at most"),
    ("block str", lambda dd: _k(dd).__setitem__("block", "128"), "block must be an integer"),
    ("shared str", lambda dd: _k(dd).__setitem__("shared_bytes", "0"), "shared_bytes must be an integer"),
    ("shared negative", lambda dd: _k(dd).__setitem__("shared_bytes", -5), "negative"),
    ("registers str", lambda dd: _k(dd).__setitem__("registers_per_thread", "32"), "must be an integer"),
    ("kind", lambda dd: _k(dd).__setitem__("kind", "magic"), "kind 'magic'"),
    ("gpu", lambda dd: dd.__setitem__("gpu", "RTX"), "unknown GPU"),
    ("stage op unknown", lambda dd: _s(dd)["ops"].append("ghost"), "unknown node 'ghost'"),
    ("stage dominant unknown", lambda dd: _s(dd).__setitem__("dominant", "ghost"), "unknown dominant node 'ghost'"),
    ("stage epilogue unknown", lambda dd: _s(dd)["epilogue"].append("ghost"), "unknown node 'ghost'"),
    ("stage ops ints", lambda dd: _s(dd).__setitem__("ops", [1, 2]), "unknown node 1"),
    ("stage ops None", lambda dd: _s(dd).__setitem__("ops", None), "malformed"),
    ("stage barrier", lambda dd: _s(dd).__setitem__("barrier_after", "maybe"), "barrier_after='maybe'"),
    ("stage recompute", lambda dd: _s(dd).__setitem__("recompute", {"ghost": 2}), "recompute entry 'ghost'"),
    ("stage mapping empty", lambda dd: _s(dd).__setitem__("mapping", {}), "malformed"),
    ("stages empty", lambda dd: _k(dd).__setitem__("stages", []), "at least one stage"),
    ("value of unknown node", lambda dd: _k(dd)["values"].__setitem__(
        "ghost", dict(next(iter(_k(dd)["values"].values())), node="ghost")), "value entry 'ghost'"),
    ("value extra field", lambda dd: [v.__setitem__("zzz", 1) for v in _k(dd)["values"].values()], "malformed"),
    ("value space", lambda dd: [v.__setitem__("space", "l2") for v in _k(dd)["values"].values()], "unknown space"),
    ("value scheme", lambda dd: [v.__setitem__("scheme", "magic") for v in _k(dd)["values"].values()],
     "unknown stitch scheme"),
    ("value stage", lambda dd: [v.__setitem__("stage", 99) for v in _k(dd)["values"].values()], "says stage 99"),
    ("values cleared", lambda dd: _k(dd).__setitem__("values", {}), "has no Value entry"),
    ("input unknown", lambda dd: _k(dd)["inputs"].append("ghost"), "not in graph"),
    ("output unknown", lambda dd: _k(dd)["outputs"].append("ghost"), "not in graph"),
    ("outputs cleared", lambda dd: _k(dd).__setitem__("outputs", []), "no kernel lists it in its outputs"),
    ("library op unknown", lambda dd: (_k(dd).__setitem__("kind", "library"), _k(dd).__setitem__("library_op", "ghost")),
     "library kernel computes 'ghost'"),
    ("graph output unknown", lambda dd: dd["graph"].__setitem__("outputs", ["ghost"]), "no node named 'ghost'"),
    ("graph op unknown", lambda dd: dd["graph"]["nodes"][-1].__setitem__("op", "cholesky"), "unsupported op 'cholesky'"),
    ("graph shape changed", lambda dd: dd["graph"]["nodes"][0].__setitem__("shape", [5, 5]), "gives"),
    ("graph shape str", lambda dd: dd["graph"]["nodes"][0].__setitem__("shape", "45"), "tuple of integers"),
    ("graph attrs None", lambda dd: dd["graph"]["nodes"][0].__setitem__("attrs", None), "malformed"),
    ("graph constant value", lambda dd: _first_constant(dd)["attrs"].__setitem__("value", "abc"), "malformed"),
    ("notes int", lambda dd: dd.__setitem__("notes", 3), "malformed"),
    ("format", lambda dd: dd.__setitem__("format", "x"), "not an astitch-sim plan"),
]


@pytest.mark.parametrize("label, mutate, match", TAMPER, ids=[t[0] for t in TAMPER])
def test_tampered_plan_json(ln, plan_dict, label, mutate, match):
    """A tampered plan fails at from_json or validate (and so at simulate), never later with a KeyError."""
    dd = copy.deepcopy(plan_dict)
    mutate(dd)
    with pytest.raises(AStitchError, match=match):
        plan = Plan.from_json(json.dumps(dd))
        plan.validate()
    with pytest.raises(AStitchError, match=match):
        asim.simulate(Plan.from_json(json.dumps(dd)), ln[1])


def test_grid_barrier_beyond_one_wave_is_a_deadlock():
    g = asim.workload("global_norm", rows=1024, cols=1024)
    plan = asim.compile(g, gpu="H100")
    assert plan.kernels[0].global_barriers >= 1
    d = plan.to_dict()
    for k in d["kernels"]:
        k["grid"] = 10**6
        for s in k["stages"]:
            s["mapping"]["grid"] = 10**6
    bad = Plan.from_json(json.dumps(d))
    with pytest.raises(AStitchError, match=r"grid barrier with 1000000 blocks.*deadlock.*at most \d+ blocks"):
        bad.validate()
    with pytest.raises(AStitchError, match="deadlock"):
        asim.simulate(bad, asim.random_inputs(g))


# -- simulate --------------------------------------------------------------------------------------

def test_simulate_bad_arguments(ln):
    g, ins = ln
    plan = asim.compile(g)
    for p, match in [(None, "simulate needs a Plan"), (g, "simulate needs a Plan")]:
        with pytest.raises(AStitchError, match=match):
            asim.simulate(p, ins)
    for inputs, match in [(None, "inputs must be a list"), ([i.astype(np.float64) for i in ins], "dtype f64"),
                          (ins[:1], "takes 3 input")]:
        with pytest.raises(AStitchError, match=match):
            asim.simulate(plan, inputs)


def test_simulate_odd_layouts_work(ln):
    g, ins = ln
    plan = asim.compile(g)
    want = asim.reference(g, ins)[0]
    ro = [i.copy() for i in ins]
    for r in ro:
        r.flags.writeable = False
    for inputs in (ro, [np.asfortranarray(ins[0])] + ins[1:], [np.repeat(ins[0], 2, axis=1)[:, ::2]] + ins[1:]):
        np.testing.assert_allclose(asim.simulate(plan, inputs).outputs[0], want, rtol=1e-5, atol=1e-5)


def test_trace_on_a_big_shape_is_refused():
    g = asim.workload("layernorm", rows=4096, cols=768)
    with pytest.raises(AStitchError, match="trace=True records every thread's accesses.*smaller shape"):
        asim.simulate(asim.compile(g), asim.random_inputs(g), trace=True)


# -- CLI -------------------------------------------------------------------------------------------

def _cli(*args):
    """Run the command line in this process: the very ``main`` that ``python -m astitch_sim`` calls (the real
    entry point in a child process is tests/cli/test_cli.py's; a child per case here cost 12 s of the fast tier).
    An exception that escapes ``main`` is a traceback the user would see: the test fails with it."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(list(args))
        except SystemExit as e:          # argparse's usage errors
            rc = e.code
    return rc, err.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "bin.hlo").write_bytes(bytes(range(256)) * 4)
    (d / "bin.npz").write_bytes(b"\x00\x81\xff\xfe")
    (d / "dir").mkdir()
    np.savez(d / "wrong.npz", x=np.zeros((2, 2)), zz=np.ones(3))
    return d


SMALL = ["--workload", "layernorm", "--shape", "rows=2", "cols=4"]
CLI_CASES = [
    (["bogus"], "invalid choice"), (["show"], "one of the arguments"),
    (["show", "--workload", "nope"], "unknown workload 'nope'"),
    (["show", "--workload", "layernorm", "--shape", "rows=abc"], "is not an integer"),
    (["show", "--workload", "layernorm", "--shape", "rows"], "write key=value"),
    (["show", "--workload", "layernorm", "--shape", "rows=-3"], "must be a positive integer"),
    (["show", "--workload", "layernorm", "--shape", "rows=2.5"], "is not an integer"),
    (["show", "--hlo", "{d}/missing.hlo"], "No such file"), (["show", "--hlo", "{d}/dir"], "Is a directory"),
    (["show", "--hlo", "{d}/bin.hlo"], "not a text file"),
    (["reference", *SMALL, "--inputs", "{d}/missing.npz"], "cannot read inputs"),
    (["reference", *SMALL, "--inputs", "{d}/bin.npz"], "cannot read inputs"),
    (["reference", *SMALL, "--inputs", "{d}/wrong.npz"], "needs its parameters by name"),
    (["reference", *SMALL, "--seed", "-1"], "--seed: -1 must be >= 0"),
    (["reference", *SMALL, "--seed", "abc"], "invalid int value"),
    (["reference", *SMALL, "--values", "-3"], "--values: -3 must be >= 0"),
    (["reference", *SMALL, "--save", "{d}/nodir/x.npz"], "cannot write"),
    (["plan", *SMALL, "--strategy", "foo"], "invalid choice: 'foo'"),
    (["plan", *SMALL, "--gpu", "RTX"], "unknown GPU 'RTX'"),
    (["simulate", *SMALL, "--sms", "0", "--timeline"], "--sms: 0 must be >= 1"),
    (["simulate", *SMALL, "--events", "-5", "--trace"], "--events: -5 must be >= 0"),
    (["simulate", *SMALL, "--seed", "-1"], "--seed: -1 must be >= 0"),
    (["simulate", "--workload", "layernorm", "--shape", "rows=4096", "cols=768", "--trace"], "use a tiny shape"),
    (["simulate", "--workload", "layernorm", "--shape", "rows=100000000000"], "more than the 2147483647"),
]


@pytest.mark.parametrize("args, match", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_cli_bad_arguments(files, args, match):
    rc, err = _cli(*[a.format(d=files) for a in args])
    assert rc == 2, err
    assert "Traceback" not in err
    assert "error: " in err and match in err, err
