"""Property suite (issue 9, point 5): random graphs through every strategy, the SIMT model and the code generator.

For every random graph (``tests/random_graphs.py``: elementwise ops cheap and
expensive over f32, bf16, f16, integers and booleans, broadcasts, reduces over
one, several or all dims, reshapes, transposes, slices, concatenates, pads,
several outputs, shared inputs, dead code, shapes with 0, 1, primes and rows
past 2^13 and 2^16 elements):

* all four strategies compile; each plan validates and survives a JSON round
  trip unchanged (the round-tripped plan is the one simulated);
* each plan simulates to the right values: equal to the float32 reference where
  no reduction order is involved, within the rigorous error bound of the exact
  float64 result where one is (``tests/error_bounds.py``);
* astitch is never behind xla (``tests/planning/test_never_behind.py``): no more global
  bytes, predicted time within 1%, launches astitch <= xla <= unfused;
* the generated Numba source type-checks (Numba-CUDA's real type inference and
  lowering, cc 9.0) -- for a sample of the plans: every plan that brings an
  (op, dtype, where-it-lives) combination or a thread-mapping feature not
  type-checked before in this run, and one example in ``TYPECHECK_EVERY``
  besides (a type check costs about 0.1 s per kernel).

How many examples: the ``ci`` hypothesis profile (the default) runs
``max_examples`` = 100 per test below (40 for the long rows, which cost about
1 s each), a few hundred in all, in about two minutes (the fast tier, ``-m "not slow"``, loads the ``fast``
profile: 30 per test); ``HYPOTHESIS_PROFILE=thorough pytest tests/test_random_graphs.py``
runs 2000 per test and type-checks one example in 3 (see tests/conftest.py and
the README's testing section).  A failure prints the shrunk graph, its inputs'
seed and the first wrong elements.

Regression tests for the bugs this suite found sit at the end of this file.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import astitch_sim as asim
from error_bounds import ExactEvaluation, check, check_oracle, expect, plan_depths
from astitch_sim.planning.strategies.never_behind import plan_combine_bytes
from random_graphs import Case, cases
from test_never_behind import assert_never_behind

ROOT = Path(__file__).resolve().parents[1]
THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"
#: type-check one example in this many, besides every plan with a feature not type-checked yet
TYPECHECK_EVERY = 3 if THOROUGH else 12
PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                          HealthCheck.filter_too_much])


# -- the typecheck worker: one subprocess with the real numba.cuda, fed plans one by one ---------------------

WORKER = r"""
import sys, traceback
import astitch_sim as asim
from gpu_backend.machine.typecheck import check_plan
print("ready", flush=True)
for line in sys.stdin:
    try:
        res = check_plan(asim.Plan.from_json(open(line.strip()).read()))
        print("ok", len(res), flush=True)
    except Exception as e:
        print("FAIL", type(e).__name__, str(e).replace("\n", " | ")[:3000], flush=True)
"""


class TypecheckWorker:
    """``check(plan)`` -> None or the error, from a long-lived process where numba.cuda is the real target."""

    def __init__(self, tmp):
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        env["ASTITCH_GPU_CACHE"] = str(tmp / "cache")
        self.tmp, self.n = tmp, 0
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=ROOT, env=env)
        assert self.proc.stdout.readline().strip() == "ready"
        self.seen: set = set()
        self.checked = 0

    def check(self, plan):
        self.n += 1
        path = self.tmp / f"plan{self.n}.json"
        path.write_text(plan.to_json())
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        path.unlink()
        self.checked += 1
        return None if line.startswith("ok") else line

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def typechecker(tmp_path_factory):
    w = TypecheckWorker(tmp_path_factory.mktemp("typecheck"))
    yield w
    w.close()


def plan_features(plan) -> set:
    """What the code generator has to write for this plan, coarsely: each (op, dtype) it computes, each
    reduction (reducer, dtype, mapping, split, combine), each mapping shape and barrier, each dtype kept in
    shared or global memory."""
    g, out = plan.graph, set()
    for k in plan.kernels:
        if k.kind == "library":
            out.add(("library", g[k.library_op].dtype))
            continue
        for s in k.stages:
            m = s.mapping
            out.add(("mapping", m.kind, m.splits > 1, m.combine, s.barrier_after, s.sync_after_combine))
            for n in list(s.ops) + list(s.epilogue):
                node = g[n]
                if node.op == "reduce":
                    out.add(("reduce", node.attrs["reducer"], node.dtype, m.kind, m.splits > 1, m.combine))
                else:
                    out.add((node.op, node.dtype, n in s.epilogue))
        for v in k.values.values():
            if v.space != "register":
                out.add(("space", v.space, g[v.node].dtype))
    return out


# -- one example ---------------------------------------------------------------------------------------------

def run_case(case, typechecker=None, typecheck_sample=False):
    g, inputs = case.graph, case.inputs
    ref = asim.reference(g, inputs)
    plans = {}
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        text = plan.to_json()
        back = asim.Plan.from_json(text)
        assert back.to_json() == text, f"{strategy}: the plan changed in a JSON round trip"
        plans[strategy] = back.validate()
    ev = ExactEvaluation(g, inputs, plan_depths(g, plans.values()))
    expected = [expect(ev, o, r, everywhere=True) for o, r in zip(g.outputs, ref, strict=True)]
    for exp, r in zip(expected, ref, strict=True):           # the oracle itself, against numpy, where no order is involved
        rep = check_oracle(exp, r)
        assert rep.wrong == 0, f"the exact oracle disagrees with the numpy reference: {rep}: {rep.failures}"
    stats = {}
    for strategy, plan in plans.items():
        res = asim.simulate(plan, inputs)
        stats[strategy] = res.stats
        for i, (exp, got, r) in enumerate(zip(expected, res.outputs, ref, strict=True)):
            assert got.shape == r.shape and got.dtype == r.dtype, \
                f"{strategy} output {i}: {got.dtype}{list(got.shape)}, reference {r.dtype}{list(r.shape)}"
            rep = check(exp, got, f"{strategy} output {i} ({g.outputs[i].name})")
            assert rep.wrong == 0, f"{rep}\n  " + "\n  ".join(rep.failures) + f"\n{plan}"
    # never behind XLA (issue 13): bytes (plus the split combines' allowance) and predicted time no worse than
    # xla's, launches astitch <= xla <= unfused
    stats["combine_bytes"] = plan_combine_bytes(plans["astitch"])
    assert_never_behind(stats, f"random graph {case.note}")
    if typechecker is not None:
        for strategy, plan in plans.items():
            feats = plan_features(plan)
            if (typecheck_sample and strategy in ("xla", "astitch")) or not feats <= typechecker.seen:
                err = typechecker.check(plan)
                assert err is None, f"{strategy}: the generated Numba source does not type-check: {err}\n{plan}"
                typechecker.seen |= feats


@PROPERTY
@given(case=cases("mixed"), sample=st.integers(0, TYPECHECK_EVERY - 1))
def test_random_graphs_of_every_dtype(case, sample, typechecker):
    run_case(case, typechecker, sample == 0)


@PROPERTY
@given(case=cases("float", max_ops=10), sample=st.integers(0, TYPECHECK_EVERY - 1))
def test_random_float_graphs(case, sample, typechecker):
    run_case(case, typechecker, sample == 0)


@PROPERTY
@given(case=cases("int"), sample=st.integers(0, TYPECHECK_EVERY - 1))
def test_random_integer_and_boolean_graphs(case, sample, typechecker):
    run_case(case, typechecker, sample == 0)


@settings(PROPERTY, max_examples=40)
@given(case=cases("shared", max_ops=5), sample=st.integers(0, TYPECHECK_EVERY - 1))
def test_random_graphs_with_producers_shared_across_reductions(case, sample, typechecker):
    """optax.adafactor's update crashed the planners: one cheap producer read by reductions over different
    dims (a scalar scaling both, or the element values both reduce)."""
    run_case(case, typechecker, sample == 0)


@settings(PROPERTY, max_examples=40)
@given(case=cases("views", max_ops=5), sample=st.integers(0, TYPECHECK_EVERY - 1))
def test_random_graphs_with_statistics_over_a_view(case, sample, typechecker):
    """Stages over two shapes of one tensor (``[N, G, rest]`` statistics, ``[N, C, H, W]`` affine): astitch
    gives the later stage the view's mapping where its rows run along memory, and computes the tensor's ops at
    the view's elements reshaped (issue 28)."""
    run_case(case, typechecker, sample == 0)


#: a long-row example simulates past 2^16 elements (about 1 s each on 2 cores): 2 in 5 of the profile's count
def _simulated(plan, inputs, separable_min: int) -> tuple:
    """Every kernel's counters and the outputs' bytes, with the geometries' separable threshold set."""
    import dataclasses
    from unittest import mock
    from astitch_sim.simt import geometry
    with mock.patch.object(geometry, "SEPARABLE_MIN", separable_min):
        res = asim.simulate(plan, inputs)
    return [dataclasses.asdict(k) for k in res.stats.kernels], [np.asarray(o).tobytes() for o in res.outputs]


@settings(PROPERTY, max_examples=40)
@given(case=cases("mixed", max_ops=6))
def test_the_fast_counting_paths_count_what_every_element_counted_would(case):
    """The SIMT model's fast paths (separable lines, flat runs and their shortcuts, strided views of gathers:
    whichever the graph's plans take) switched on for every domain, however small, against every geometry
    dense (every element located and counted): the same counters in every stage of every kernel, the same
    output bytes, under four strategies.  (A split row's parts and whole rows per block trip, which random
    graphs seldom reach, have their own tests in ``tests/simt/test_simt_counting_paths.py``.)"""
    for strategy in ("unfused", "xla", "inductor", "astitch"):
        try:
            plan = asim.compile(case.graph, strategy, "H100")
        except asim.AStitchError:
            continue
        assert _simulated(plan, case.inputs, 1) == _simulated(plan, case.inputs, 1 << 60), (strategy, case.graph)


LONG_ROW_EXAMPLES = max(20, settings().max_examples * 2 // 5)


@settings(PROPERTY, max_examples=LONG_ROW_EXAMPLES)
@given(case=cases("long_rows", max_ops=5), sample=st.integers(0, TYPECHECK_EVERY - 1))
def test_random_graphs_with_long_rows(case, sample, typechecker):
    run_case(case, typechecker, sample == 0)


#: tiny random graphs run by the Numba backend in the CUDA simulator (0.1 ms per simulated thread)
NUMBA_EXAMPLES = 300 if THOROUGH else 20


@settings(PROPERTY, max_examples=NUMBA_EXAMPLES)
@given(case=cases("tiny"), other=st.sampled_from(("unfused", "xla", "tvm")))
def test_random_tiny_graphs_in_the_numba_backend(case, other):
    """The generated kernels themselves, run in Numba's CUDA simulator: the astitch plan and one other per
    example, every output held to the same rule as the SIMT model's."""
    import gpu_backend
    g, inputs = case.graph, case.inputs
    ref = asim.reference(g, inputs)
    plans = {s: asim.compile(g, s, "H100") for s in ("astitch", other)}
    ev = ExactEvaluation(g, inputs, plan_depths(g, plans.values()))
    expected = [expect(ev, o, r) for o, r in zip(g.outputs, ref, strict=True)]
    for strategy, plan in plans.items():
        for i, (exp, got, r) in enumerate(zip(expected, gpu_backend.run(plan, inputs), ref, strict=True)):
            assert got.shape == r.shape and got.dtype == r.dtype, (strategy, i, got.dtype, got.shape)
            rep = check(exp, got, f"numba {strategy} output {i} ({g.outputs[i].name})")
            assert rep.wrong == 0, f"{rep}\n  " + "\n  ".join(rep.failures) + f"\n{plan}"


@pytest.fixture(scope="module", autouse=True)
def _report_typechecks(typechecker):
    yield
    print(f"\n[typecheck] {typechecker.checked} plans type-checked, {len(typechecker.seen)} features covered")


# -- regression tests: the bugs this suite found, one focused test each ------------------------------------------

@pytest.mark.parametrize("dtype", ["f16", "bf16", "s8", "u16", "s16"])
def test_split_reductions_of_types_without_atomics_combine_another_way(dtype):
    """Found by the long-rows property test: a sum of 70001 f16 values (or a long f16 column) was planned
    with task splitting combined by *atomics* (xla's whole-tensor reduce, astitch's split rows/columns,
    tvm), but CUDA has no atomicMax/Min on 16-bit floats and Numba no 16-bit atomics at all, so the code
    generator refused the plan.  Only 32- and 64-bit ints and floats combine with atomics now
    (strategies/common.py: has_atomic); other split reductions use a grid barrier (astitch) or no split."""
    import gpu_backend
    g = asim.Graph(f"long_{dtype}")
    x = g.parameter("x", (70001,), dtype)
    col = g.parameter("col", (65537, 2), dtype)
    g.set_outputs(g.reduce(x, (0,), "sum"), g.reduce(x, (0,), "max"), g.reduce(col, (0,), "sum"))
    inputs = asim.random_inputs(g, 0)
    split_seen = False
    for strategy in asim.STRATEGIES:
        # astitch's raw stitch plan: its grid-barrier split is predicted slower than XLA's unsplit kernels,
        # so the never-behind step would put those back (and this test checks the split's code)
        raw = {"never_behind": False} if strategy == "astitch" else {}
        plan = asim.compile(g, strategy, "H100", **raw)
        for k in plan.generated:
            for s in k.stages:
                if s.mapping.splits > 1:
                    split_seen = True
                    assert s.mapping.combine != "atomic", f"{strategy}: {s.dominant} split with atomics on {dtype}"
        gpu_backend.generate_source(plan)           # refused before the fix
        ref = asim.reference(g, inputs)
        ev = ExactEvaluation(g, inputs, plan_depths(g, [plan]))
        for o, r, got in zip(g.outputs, ref, asim.simulate(plan, inputs).outputs, strict=True):
            rep = check(expect(ev, o, r), got)
            assert rep.wrong == 0, (strategy, str(rep), rep.failures)
    assert split_seen, "the shapes no longer make any strategy split a reduction: the test checks nothing"


def test_split_reductions_of_32_and_64_bit_types_still_use_atomics():
    g = asim.Graph("long_f32")
    x = g.parameter("x", (70001,), "f32")
    g.set_outputs(g.reduce(x, (0,), "sum"))
    plan = asim.compile(g, "xla", "H100")
    assert plan.kernels[0].stages[0].mapping.combine == "atomic"


def test_float_to_64_bit_integer_conversion_saturates():
    """Found by the property suite (wide float inputs converted to s64/u64): XLA's convert saturates, but the
    reference clipped at float(2**63 - 1), which *is* 2**63, and numpy turned it into INT64_MIN (u64: 0 for
    1e30); the Numba backend did the same through its float-valued clamp.  Both now saturate exactly."""
    import gpu_backend
    g = asim.Graph("saturate")
    x = g.parameter("x", (10,), "f32")
    g.set_outputs(g.convert(x, "s64"), g.convert(x, "u64"), g.convert(x, "s32"), g.convert(x, "u8"))
    v = np.array([1e30, -1e30, np.nan, 2.5, -2.5, np.inf, 3e18, 1e19, 9.3e18, -9.3e18], np.float32)
    i64, u64 = np.iinfo(np.int64), np.iinfo(np.uint64)
    want = [np.array([i64.max, i64.min, 0, 2, -2, i64.max, np.int64(v[6]), i64.max, i64.max, i64.min], np.int64),
            np.array([u64.max, 0, 0, 2, 0, u64.max, np.uint64(v[6]), np.uint64(v[7]), np.uint64(v[8]), 0],
                     np.uint64),
            np.array([2 ** 31 - 1, -2 ** 31, 0, 2, -2, 2 ** 31 - 1, 2 ** 31 - 1, 2 ** 31 - 1, 2 ** 31 - 1, -2 ** 31],
                     np.int32),
            np.array([255, 0, 0, 2, 0, 255, 255, 255, 255, 0], np.uint8)]
    for r, w in zip(asim.reference(g, [v]), want, strict=True):
        assert r.dtype == w.dtype and np.array_equal(r, w), (r, w)
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        for got, w in zip(asim.simulate(plan, [v]).outputs, want, strict=True):
            assert np.array_equal(got, w), (strategy, got, w)
        for got, w in zip(gpu_backend.run(plan, [v]), want, strict=True):
            assert np.array_equal(got, w), (strategy, "numba", got, w)


def test_concatenate_of_one_operand_twice_in_the_numba_backend():
    """Found by the Numba property test: ``concatenate(a, b, a)`` generated code that read ``a`` everywhere,
    because the code generator took the first ``a`` for the last operand (``o is operands[-1]``) and made it
    the unconditional branch.  Operands are told apart by position now (gpu_backend/codegen/values.py)."""
    import gpu_backend
    g = asim.Graph("cat_twice")
    a = g.parameter("a", (2, 3), "f32")
    b = g.parameter("b", (2, 1), "f32")
    g.set_outputs(g.negate(g.concatenate([a, b, a], 1)), g.concatenate([b, b], 0))
    ins = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([[100.0], [200.0]], np.float32)]
    want = asim.reference(g, ins)
    assert want[0][0].tolist() == [-0.0, -1.0, -2.0, -100.0, -0.0, -1.0, -2.0]
    for strategy in asim.STRATEGIES:
        for got, w in zip(gpu_backend.run(asim.compile(g, strategy, "H100"), ins), want, strict=True):
            assert np.array_equal(got, w), (strategy, got, w)


def test_a_scalar_epilogue_value_read_by_a_later_scalar_stage_in_the_numba_backend():
    """Found by the integer property test (thorough profile): ``shs10 = p8 * 0`` is computed per task in the
    epilogue of a row reduction's stage and kept in shared memory, a slot per task, and a later flat stage of
    one element reads it as a scalar -- the code generator refused the plan ("shs10: index () does not match
    the 1 kept dims of stage 0").  Every task's slot holds the same scalar; a scalar read takes the first
    task's, as the SIMT model does (gpu_backend/codegen/slots.py)."""
    import gpu_backend
    g = asim.Graph("scalar_epilogue")
    p1, p8, p19 = g.parameter("p1", (13, 13), "s32"), g.parameter("p8", (), "s32"), g.parameter("p19", (), "s32")
    shs10 = g.multiply(p8, g.constant(0, "s32"), name="shs10")
    sho18 = g.multiply(g.broadcast(shs10, (13,), name="shb17"), g.reduce(p1, (1,), "sum", name="shr16"),
                       name="sho18")
    sel21 = g.select(g.compare(shs10, p19, "LT", name="cmp20"), shs10, p8, name="sel21")
    g.set_outputs([sho18, sel21])
    ins = [np.arange(169, dtype=np.int32).reshape(13, 13), np.int32(3), np.int32(5)]
    want = asim.reference(g, ins)
    plan = asim.compile(g, "astitch", "H100")
    k = plan.kernels[0]
    assert "shs10" in k.stages[0].epilogue and k.values["shs10"].space == "shared" and "sel21" in k.stages[1].ops
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        for got, w in zip(gpu_backend.run(plan, ins), want, strict=True):      # raised AStitchError (astitch)
            assert np.array_equal(got, w), (strategy, got, w)


def test_sibling_reduce_does_not_pull_a_later_groups_value_into_its_epilogue():
    """Found by the integer property test: ``red10`` joins ``red4``'s stage as a sibling (same input, same
    dims), and the stage's epilogue then absorbed ``nrm8 = max(red4, broadcast(red6))`` -- but ``red6`` (a sum
    over ``red4``) is computed by a *later* stage, so the plan read it before it existed and validate refused
    it ("stage 0 reads red6 which stage 1 computes later").  An op joins an epilogue only if it reads nothing
    a later group computes (strategies/astitch.py: _absorb_epilogue)."""
    g = asim.Graph("sibling_epilogue")
    p = g.parameter("p", (64, 3))
    red4 = g.reduce(p, (0,), "max", name="red4")
    red6 = g.reduce(red4, (0,), "sum", name="red6")
    nrm8 = g.maximum(red4, g.broadcast(red6, (3,), ()), name="nrm8")
    red10 = g.reduce(p, (0,), "sum", name="red10")
    nrm12 = g.multiply(p, g.broadcast(red10, (64, 3), (1,)), name="nrm12")
    g.set_outputs(nrm12, g.reduce(nrm8, (0,), "sum", name="red20"))
    inputs = asim.random_inputs(g, 0)
    plan = asim.compile(g, "astitch", "H100")           # raised AStitchError before the fix
    where = {n: i for i, s in enumerate(plan.kernels[0].stages) for n in list(s.ops) + list(s.epilogue)}
    assert where["nrm8"] > where["red6"]
    run_case(Case(g, inputs, "regression"))


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_inductor_keeps_a_split_half_precision_sum_in_f32(dtype):
    """Found by the every-dtype property test (thorough profile): Inductor splits the column sum of
    bf16[256,13] in two kernels, and its partials were rounded to bf16 between them -- one rounding more than
    the unsplit sum, which accumulates in f32 and rounds once (257 of 3328 outputs of ``p1 - sum(p1)`` were
    outside the oracle's bound).  Inductor keeps the partials of an f16/bf16 reduction in f32
    (``create_multilayer_helper``: ``intermediate_dtype``), and so does the split now."""
    g = asim.Graph("half_split_sum")
    p1 = g.parameter("p1", (256, 13), dtype)
    red5 = g.reduce(p1, (0,), "sum", name="red5")
    g.set_outputs(g.subtract(p1, g.broadcast(red5, (256, 13), (1,)), name="nrm7"), red5)
    plan = asim.compile(g, "inductor", "H100")
    partial = plan.graph["red5.partial"]
    assert partial.dtype == "f32" and plan.graph["red5"].op == "convert" and plan.graph["red5"].dtype == dtype
    assert "2 f32 partials per output" in "\n".join(plan.notes)
    rng = np.random.default_rng(5)
    for scale in (1.0, 300.0):                      # large sums: a 16-bit partial loses several bits
        x = (rng.standard_normal((256, 13)) * scale).astype(np.float16 if dtype == "f16" else np.float32)
        run_case(Case(g, [x], f"p1 - sum(p1) over {dtype}[256,13], scale {scale}"))


@pytest.mark.parametrize("shape, dims, red", [((4, 65536), (1,), "sum"), ((4, 65536), (1,), "max"),
                                              ((2048, 8), (0,), "prod")], ids=["row-sum", "row-max", "column-prod"])
def test_inductor_splits_half_precision_reductions_of_every_kind_through_f32(shape, dims, red):
    """Rows split in 8 and a column product split in 16, bf16: the partials are f32 whatever the reducer (as
    Inductor's are), and every strategy's result lies within the oracle's bound (with bf16 partials the column
    product put 4 of its 8 outputs outside it, worst 3x the bound)."""
    g = asim.Graph("half_split")
    p = g.parameter("p", shape, "bf16")
    g.set_outputs(g.reduce(p, dims, red, name="r"))
    plan = asim.compile(g, "inductor", "H100")
    assert plan.graph["r.partial"].dtype == "f32" and plan.graph["r"].op == "convert"
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    if red == "prod":
        x = (1.0 + x / 64).astype(np.float32)             # a product of 2048 terms near 1: finite
    run_case(Case(g, [x], f"{red} over bf16{list(shape)} dims {dims}"))


def test_zero_size_operands_of_the_model_ops():
    """Found by the model-op rows of this suite: an argmax over an empty axis crashed the zero-size pass with a
    bare ValueError (it unpacked a reduce as (x, init)); a dynamic-update-slice of an empty update, a scatter of
    no updates and a reduce-window of an empty operand were refused ("no zero-size rule"); the reference
    crashed on a reduce over no dims of an empty pred tensor (reshape with -1); and ``g.cumsum`` over an empty
    axis made a window of size 0, which reduce-window refuses."""
    g = asim.Graph("empty_model_ops")
    e = g.parameter("e", (3, 0), "f32")
    x = g.parameter("x", (4, 5), "f32")
    u = g.parameter("u", (0, 2), "f32")
    ids = g.parameter("ids", (0,), "s32")
    b = g.parameter("b", (2, 0), "pred")
    pos = g.parameter("pos", (), "s32")
    am = g.argmax(e, 1)
    red = g.add_node("reduce", (b, g.constant(True, "pred")), dimensions=(), reducer="and")
    g.set_outputs(am, g.dynamic_update_slice(x, u, [pos, pos]), g.index_add(x, ids, g.take(x, ids, 0), 0),
                  g.cumsum(e, 1), red)
    ins = [np.zeros((3, 0), np.float32), np.arange(20, dtype=np.float32).reshape(4, 5), np.zeros((0, 2), np.float32),
           np.zeros((0,), np.int32), np.zeros((2, 0), bool), np.int32(1)]
    ref = asim.reference(g, ins)
    assert ref[0].tolist() == [0, 0, 0] and np.array_equal(ref[1], ins[1]) and np.array_equal(ref[2], ins[1])
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        for got, want in zip(asim.simulate(plan, ins).outputs, ref, strict=True):
            assert got.shape == want.shape and np.array_equal(got, want), (strategy, got, want)


def test_top1_after_a_sum_with_nans_accepts_either_nan_sign(typechecker):
    """The undiagnosed long-rows case (astitch's top-1 index 122 where the oracle said 0): the top-1 of
    ``x - sum(x)`` over f32[65537] with infinities and NaNs among the inputs.  The sum is a NaN whose sign
    depends on the order its NaN operands meet (IEEE 754 leaves it unspecified), so every ``x - sum`` is
    -NaN or +NaN, and under the total order top-1 is index 0 (all tie) or the first +NaN input.  Here the
    reference's sum is +NaN (index 0) and astitch's split sum with the paper's reduction trees -NaN (index
    311): both right, and the oracle no longer claims either (it did, and this failed).  (Warp shuffles, the
    default reduction scheme, fold in another order and happen to meet the reference's sign here.)"""
    g = asim.Graph("top1_nan_sum")
    x = g.parameter("x", (65537,))
    y = g.subtract(x, g.broadcast(g.reduce(x, (0,)), (65537,), ()))
    g.set_outputs(*g.top_k(y, 1))
    rng = np.random.default_rng(26)
    v = rng.standard_normal(65537)
    hit = rng.random(65537) < 0.05
    v = np.where(hit, rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], size=65537), v).astype(np.float32)
    plan = asim.compile(g, "astitch", "H100", reduce_scheme="tree")
    assert int(asim.simulate(plan, [v]).outputs[1][0]) != int(asim.reference(g, [v])[1][0])  # the two signs
    run_case(Case(g, [v], "top-1 of x - sum(x) with NaNs"), typechecker, False)
