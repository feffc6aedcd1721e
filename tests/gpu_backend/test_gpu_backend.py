"""gpu_backend: Plan -> Numba-CUDA kernels, run in Numba's CUDA simulator (or on a GPU, if the machine has one).

``tests/conftest.py`` sets ``NUMBA_ENABLE_CUDASIM=1`` when no GPU is found, so on CI
every test here runs the generated kernels in the simulator.  Shapes are tiny
(the simulator runs each CUDA thread as a Python thread).

Tolerances, ``|got - want| <= rtol * |want| + atol * max(1, max|want|)`` against
the numpy reference:

* float32 outputs: rtol 1e-5, atol 1e-5.  The kernels sum in thread order and
  then in a shared-memory tree, numpy sums pairwise; a few ulps (6e-8 each) of
  difference per reduction, far below 1e-5 at these sizes.
* graphs with an f16 node: 2e-3 (f16 has 11 significant bits); with a bf16
  node: 1.6e-2 (8 bits) -- as in tests/frontends/test_hlo.py.
* integer and pred outputs: exact.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import astitch_sim as asim
import gpu_backend
from numba import cuda      # after tests/conftest.py chose the simulator or the GPU
from astitch_sim import AStitchError
from astitch_sim.planning.kernel_builder import assemble_kernel
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.plan.plan import Plan, Stage
from astitch_sim.frontends.workloads import workload_inputs
from gpu_backend.launch.plans import compile_plan, execute
from anchor import TESTS_FILE
from tiers import fast_share

ROOT = Path(TESTS_FILE).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "hlo"

#: a tiny shape for every catalog workload (the astitch compiler uses small blocks for tiny problems)
TINY = {
    "layernorm": dict(rows=4, cols=32), "rmsnorm": dict(rows=4, cols=32), "batchnorm_train": dict(rows=16, cols=8),
    "layernorm_backward": dict(rows=4, cols=32), "global_norm": dict(rows=8, cols=16),
    "softmax": dict(rows=4, cols=64), "attention_softmax": dict(batch=2, heads=2, seq=8),
    "log_softmax": dict(rows=4, cols=32), "cross_entropy": dict(rows=4, cols=32), "bias_gelu": dict(rows=4, cols=32),
    "swiglu": dict(rows=4, cols=32), "adam_step": dict(size=100), "paper_fig7": dict(n=8, c=16),
    "row_reduce": dict(rows=16, cols=32), "column_reduce": dict(rows=16, cols=32),
}

#: HLO fixtures run under all four strategies: int/bool ops, matrix products, f16/bf16, layout ops, constants
HLO_FIXTURES = ["bool_ops", "int32_ops", "attention_batched_dot", "transformer_ffn", "convert_bf16_layernorm",
                "convert_f16_bf16_s32", "concat_slice", "pad_reverse", "iota_add", "constants_arrays",
                "constants_nonfinite", "one_hot", "softmax_axis0", "power_scalar_exponents", "clamp",
                "loss_softmax_xent_int_labels", "chain_7"]

F32_TOL, F16_TOL, BF16_TOL = 1e-5, 2e-3, 1.6e-2


def _tolerance(graph) -> float:
    dtypes = {n.dtype for n in graph}
    return BF16_TOL if "bf16" in dtypes else F16_TOL if "f16" in dtypes else F32_TOL


def assert_matches_reference(graph, outs, inputs, where=""):
    want = asim.reference(graph, inputs)
    tol = _tolerance(graph)
    assert len(outs) == len(want) == len(graph.outputs)
    for got, ref, node in zip(outs, want, graph.outputs, strict=True):
        msg = f"{where} output {node.name}"
        assert got.shape == ref.shape, msg
        assert got.dtype == ref.dtype, msg
        if node.dtype in ("f32", "f64", "f16", "bf16"):
            r64 = ref.astype(np.float64)
            finite = np.isfinite(r64)
            scale = max(1.0, float(np.max(np.abs(r64[finite]))) if finite.any() else 1.0)
            np.testing.assert_allclose(got.astype(np.float64), r64, rtol=tol, atol=tol * scale, equal_nan=True,
                                       err_msg=msg)
        else:
            np.testing.assert_array_equal(got, ref, err_msg=msg)


def _fixture(name):
    g = asim.from_hlo_file(FIXTURES / f"{name}.hlo")
    with np.load(FIXTURES / f"{name}.npz") as z:
        keys = sorted((k for k in z.files if re.fullmatch(r"in\d+", k)), key=lambda k: int(k[2:]))
        inputs = [z[k] for k in keys]
    return g, inputs


def remap(plan: Plan, make) -> Plan:
    """A hand-made plan: every generated kernel rebuilt with the stage mappings ``make(stage)`` returns.

    ``assemble_kernel`` (the compiler's own bookkeeping) redoes the values, schemes, barriers and the
    shared layout for the new mappings, so the plan is one a strategy could have written.
    """
    kernels = []
    for k in plan.kernels:
        if k.kind != "generated":
            kernels.append(k)
            continue
        stages = [Stage(s.dominant, list(s.ops), make(s), list(s.epilogue)) for s in k.stages]
        kernels.append(assemble_kernel(plan.graph, k.name, stages, plan.gpu, set(k.outputs),
                                       stitch=len(stages) > 1, plan_vectors=False))
    return Plan(plan.graph, plan.strategy, plan.gpu, kernels, list(plan.notes)).validate()


def rows(block, grid, tpr, splits=1, combine="none"):
    def make(s):
        m = s.mapping
        return ThreadMapping("rows", m.domain, m.groups, block=block, grid=grid, threads_per_row=tpr,
                             splits=splits, combine=combine if splits > 1 else "none")
    return make


def columns(block, grid, lanes, splits=1, combine="none"):
    def make(s):
        m = s.mapping
        return ThreadMapping("columns", m.domain, m.groups, block=block, grid=grid, threads_per_row=lanes,
                             splits=splits, combine=combine if splits > 1 else "none")
    return make


def flat(block, grid, per_thread=1, vector=1, flat_vectors=False):
    def make(s):
        m = s.mapping
        return ThreadMapping("flat", m.domain, m.groups, block=block, grid=grid, per_thread=per_thread,
                             vector=vector, flat_vectors=flat_vectors)
    return make


def fig7_small_blocks(s):
    """paper_fig7 at n=16, c=8 on 2 blocks of 32 threads: power.1 crosses blocks -> Global + grid barrier."""
    m = s.mapping
    return ThreadMapping(m.kind, m.domain, m.groups, block=32, grid=2, threads_per_row=8)


#: hand-made plans for what tiny catalog shapes never produce: task splitting (atomic and grid-barrier
#: combines, rows and columns), vertical packing, a non-power-of-two threads_per_row, Global stitching
HAND_MADE = {
    "rows_split_atomic_vertical": ("softmax", dict(rows=6, cols=48), rows(32, 4, 16, 2, "atomic")),
    "rows_split_grid_barrier": ("softmax", dict(rows=6, cols=48), rows(32, 4, 16, 2, "grid_barrier")),
    "rows_24_threads_per_row": ("softmax", dict(rows=6, cols=48), rows(48, 2, 24)),
    "rows_split_scalar_reduce": ("global_norm", dict(rows=4, cols=12), rows(16, 3, 16, 3, "atomic")),
    "columns_split_atomic": ("batchnorm_train", dict(rows=24, cols=8), columns(16, 4, 4, 2, "atomic")),
    "columns_split_grid_barrier": ("batchnorm_train", dict(rows=24, cols=8), columns(16, 4, 4, 2, "grid_barrier")),
    "columns_vertical": ("batchnorm_train", dict(rows=24, cols=8), columns(8, 1, 4)),
    "flat_grid_stride": ("adam_step", dict(size=100), flat(16, 3)),
    # 2 vectors of 4 per thread per round, 4 rounds, the last one guarded (1000 = 3 x 256 + 232)
    "flat_vectors_rounds": ("adam_step", dict(size=1000), flat(32, 1, 8, 4)),
    # ... 1001 elements: 250 whole vectors, then element 1000 alone, in thread 26's second vector of round 3
    "flat_vectors_tail": ("adam_step", dict(size=1001), flat(32, 1, 8, 4, flat_vectors=True)),
    "global_stitching": ("paper_fig7", dict(n=16, c=8), fig7_small_blocks),
}


def hand_made(name):
    w, shape, make = HAND_MADE[name]
    g = asim.workload(w, **shape)
    return g, remap(asim.compile(g, "astitch", "H100"), make)


# -- every workload, every strategy -----------------------------------------------------------------

def test_every_catalog_workload_has_a_tiny_shape():
    assert set(TINY) == set(asim.WORKLOADS)


#: the fast tier's share of the workload matrix below (tests/tiers.py): every workload under astitch and under
#: inductor (small programs, cheap here), and every strategy on a rows, a columns, a flat and a grid-barrier
#: workload; the full tier runs all of it
FAST_WORKLOADS = ("layernorm", "column_reduce", "adam_step", "paper_fig7")
FAST_EVERYWHERE = ("astitch", "inductor")
WORKLOAD_MATRIX = fast_share([(n, s) for n in TINY for s in asim.STRATEGIES],
                             lambda c: c[1] in FAST_EVERYWHERE or c[0] in FAST_WORKLOADS)


@pytest.mark.parametrize("name,strategy", WORKLOAD_MATRIX)
def test_workload_matches_reference(name, strategy):
    g = asim.workload(name, **TINY[name])
    plan = asim.compile(g, strategy, "H100")
    inputs = workload_inputs(g, seed=1)
    outs = gpu_backend.run(plan, inputs)
    assert_matches_reference(g, outs, inputs, f"{name}/{strategy}")


#: strategies whose plans of every HLO fixture run in the CUDA simulator in the fast tier: astitch, the most code
#: paths (stages, shared and global values, barriers) through every fixture's dtypes and ops; the other strategies
#: run them in the full tier (every strategy runs catalog workloads in both tiers, above)
FAST_FIXTURE_STRATEGIES = ("astitch",)


@pytest.mark.parametrize("fixture,strategy", fast_share([(f, s) for f in HLO_FIXTURES for s in asim.STRATEGIES],
                                                        lambda c: c[1] in FAST_FIXTURE_STRATEGIES))
def test_hlo_fixture_matches_reference(fixture, strategy):
    g, inputs = _fixture(fixture)
    plan = asim.compile(g, strategy, "H100")
    outs = gpu_backend.run(plan, inputs)
    assert_matches_reference(g, outs, inputs, f"{fixture}/{strategy}")


def test_fixture_set_covers_ints_bools_dots_and_narrow_floats():
    graphs = [_fixture(f)[0] for f in HLO_FIXTURES]
    dtypes = {n.dtype for g in graphs for n in g}
    ops = {n.op for g in graphs for n in g}
    assert {"s32", "pred", "f16", "bf16"} <= dtypes
    assert {"dot", "concatenate", "pad", "reverse", "iota", "slice", "transpose", "select"} <= ops


# -- every elementwise op, at the values where semantics differ ---------------------------------------

F_UNARY = ["negate", "abs", "sign", "exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt", "rsqrt",
           "cbrt", "tanh", "logistic", "erf", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "sine",
           "cosine", "tan", "copy"]
F_BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "remainder", "atan2"]
I_UNARY = ["negate", "abs", "sign", "not", "copy"]
I_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "power", "maximum", "minimum", "and", "or", "xor",
            "shift-left", "shift-right-arithmetic", "shift-right-logical"]


def op_zoo():
    """One graph with every elementwise op of the table on f32, s32 and pred, plus converts and f16/bf16 math."""
    g = asim.Graph("op_zoo")
    x, y = g.parameter("x", (32,), "f32"), g.parameter("y", (32,), "f32")
    i, j = g.parameter("i", (32,), "s32"), g.parameter("j", (32,), "s32")
    p, q = g.parameter("p", (32,), "pred"), g.parameter("q", (32,), "pred")
    outs = [g.add_node(op, (x,), name="f_" + op) for op in F_UNARY]
    outs += [g.add_node(op, (x, y), name="f_" + op) for op in F_BINARY]
    outs += [g.add_node(op, (i,), name="i_" + op) for op in I_UNARY]
    outs += [g.add_node(op, (i, j), name="i_" + op) for op in I_BINARY]
    for d in ("LT", "EQ", "NE", "GE"):
        outs.append(g.add_node("compare", (x, y), name="f_cmp_" + d, direction=d))
        outs.append(g.add_node("compare", (i, j), name="i_cmp_" + d, direction=d))
    outs += [g.add_node(op, (p, q), name="p_" + op) for op in ("and", "or", "xor")]
    outs += [g.add_node("not", (p,), name="p_not"), g.add_node("is-finite", (x,), name="f_isfinite"),
             g.add_node("select", (p, x, y), name="select"),
             g.add_node("clamp", (y, x, g.add_node("abs", (y,))), name="clamp")]
    outs += [g.convert(x, dt, name="cvt_f_" + dt) for dt in ("s32", "s8", "u8", "f16", "bf16", "pred", "f64")]
    outs += [g.convert(i, dt, name="cvt_i_" + dt) for dt in ("f32", "s8", "u32", "pred", "f16")]
    outs.append(g.convert(p, "f32", name="cvt_p_f32"))
    h, b = g.convert(x, "f16"), g.convert(x, "bf16")
    outs += [g.add_node("multiply", (h, h), name="f16_sq"), g.add_node("exponential", (b,), name="bf16_exp")]
    g.set_outputs(*outs)
    fx = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.7, -3.7, 1e-30, 1e30, 88.0, -88.0, 100.0,
                   np.inf, -np.inf, np.nan, 2.0 ** 23 + 1, -(2.0 ** 24), 0.49999997, -0.75, 7.0, 1e-3, -1e-3,
                   123.456, -1e5, 3.0, 0.25, -8.0, 27.0], dtype=np.float32)
    ix = np.array([0, 1, -1, 2, -2, 7, -7, 31, 32, 40, -2 ** 31, 2 ** 31 - 1, 3, -3, 100000, -100000,
                   5, -5, 16, 1, 0, -1, 13, 64, 2, 3, 4, 30, 33, -33, 8, 9], dtype=np.int32)
    iy = np.array([1, 0, 3, -3, 31, 32, 33, -1, 2, 0, -1, 2, 4, -2, 7, -7, 3, 2, 1, 63, 5, 40, -5, 2, 30, 31, 0, 1,
                   6, 7, 8, -40], dtype=np.int32)
    return g, [fx, np.roll(fx, 5), ix, iy, ix % 2 == 0, ix % 3 == 0]


@pytest.mark.parametrize("strategy", ["astitch", "unfused"])
def test_every_elementwise_op_matches_numpy_at_special_values(strategy):
    """inf, NaN, -0.0, halfway cases, INT_MIN, x/0, out-of-range shifts, saturating converts: as numpy does."""
    g, inputs = op_zoo()
    assert {n.op for n in g if n.kind == "elementwise"} >= set(F_UNARY + F_BINARY) - {"copy"}
    outs = gpu_backend.run(asim.compile(g, strategy, "H100"), inputs)
    want = asim.reference(g, inputs)
    for got, ref, node in zip(outs, want, g.outputs, strict=True):
        assert got.dtype == ref.dtype, node.name
        if node.dtype in ("f32", "f64", "f16", "bf16"):
            # float32: the simulator rounds a double result, numpy has its own float32 routines (1 ulp)
            rtol = {"f16": F16_TOL, "bf16": BF16_TOL}.get(node.dtype, 1e-6)
            np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=0,
                                       equal_nan=True, err_msg=node.name)
        else:
            np.testing.assert_array_equal(got, ref, err_msg=node.name)


# -- hand-made plans: splitting, packing, Global stitching ------------------------------------------

@pytest.mark.parametrize("name", list(HAND_MADE))
def test_hand_made_plan_matches_reference(name):
    g, plan = hand_made(name)
    inputs = workload_inputs(g, seed=2)
    outs = gpu_backend.run(plan, inputs)
    assert_matches_reference(g, outs, inputs, name)


def test_hand_made_plans_exercise_what_they_claim():
    def m(name):
        return hand_made(name)[1].kernels[0]
    k = m("rows_split_atomic_vertical")
    assert k.stages[0].mapping.splits == 2 and k.stages[0].mapping.task_iterations == 2
    assert k.stages[0].sync_after_combine and k.cooperative
    assert m("rows_split_grid_barrier").stages[0].mapping.combine == "grid_barrier"
    assert m("rows_24_threads_per_row").stages[0].mapping.threads_per_row == 24
    assert m("columns_split_grid_barrier").stages[0].mapping.splits == 2
    assert m("columns_vertical").stages[0].mapping.task_iterations > 1
    assert m("flat_grid_stride").stages[0].mapping.task_iterations == 3
    v = m("flat_vectors_rounds").stages[0].mapping
    assert (v.task_iterations, v.unroll, v.vector) == (4, 2, 4)
    v = m("flat_vectors_tail").stages[0].mapping
    assert (v.task_iterations, v.unroll, v.vector, v.size % v.vector, v.flat_vectors) == (4, 2, 4, 1, True)
    k = m("global_stitching")
    assert k.values["power.1"].space == "global" and k.grid == 2 and k.cooperative


@pytest.mark.parametrize("name", ["rows_split_atomic_vertical", "rows_24_threads_per_row", "columns_split_atomic",
                                  "columns_vertical", "flat_grid_stride", "flat_vectors_rounds",
                                  "flat_vectors_tail"])
def test_generated_loops_assign_elements_as_locate_does(name):
    """The probe build records (block, thread, iteration) of every output store; it must equal locate()."""
    g, plan = hand_made(name)
    _, probes = execute(plan, workload_inputs(g, seed=0), probe=True)
    assert probes
    for (ki, node), arr in probes.items():
        stage = next(s for s in plan.kernels[ki].stages if node in s.ops)
        m = stage.mapping
        block, thread, it = m.locate(np.arange(m.size))
        want = (block * m.block + thread) * m.elements_per_thread + it
        np.testing.assert_array_equal(arr[:m.size], want, err_msg=f"{name}: {node}")


def test_prepared_plan_launched_twice_gives_what_run_gives():
    """prepare once, launch many: each launch first refills the atomic result buffers with the init value
    (else the second launch would combine onto the first's totals), so every launch equals run()."""
    g, plan = hand_made("rows_split_atomic_vertical")    # 2 splits: atomics in either order give the same bits
    assert any(p.fill_from for k in compile_plan(plan).generated.kernels for p in k.params)
    inputs = workload_inputs(g, seed=3)
    want = gpu_backend.run(plan, inputs)
    prepared = gpu_backend.prepare(plan, inputs)
    assert [k.name for k in prepared.kernels] == [k.name for k in plan.kernels]
    seen = []
    for _ in range(2):
        prepared.launch(after_kernel=seen.append)
        for got, ref in zip(prepared.outputs(), want, strict=True):
            np.testing.assert_array_equal(got, ref)
    assert seen == list(range(len(plan.kernels))) * 2
    for i in range(len(prepared.kernels)):                  # one kernel at a time, as a benchmark clock does
        prepared.launch_kernel(i)
    for got, ref in zip(prepared.outputs(), want, strict=True):
        np.testing.assert_array_equal(got, ref)
    prepared.release()


def test_plan_from_json_runs_the_same():
    g = asim.workload("layernorm", **TINY["layernorm"])
    plan = asim.compile(g, "astitch", "H100")
    again = asim.Plan.from_json(plan.to_json())
    inputs = workload_inputs(g, 0)
    for a, b in zip(gpu_backend.run(plan, inputs), gpu_backend.run(again, inputs), strict=True):
        np.testing.assert_array_equal(a, b)
    assert compile_plan(plan) is compile_plan(again)       # cached by the plan's JSON


def test_dict_inputs():
    g = asim.workload("rmsnorm", **TINY["rmsnorm"])
    plan = asim.compile(g, "xla", "H100")
    inputs = workload_inputs(g, 0)
    by_name = {p.name: v for p, v in zip(g.inputs, inputs, strict=True)}
    for a, b in zip(gpu_backend.run(plan, inputs), gpu_backend.run(plan, by_name), strict=True):
        np.testing.assert_array_equal(a, b)


# -- generate_source ------------------------------------------------------------------------------

def _source(name, strategy, **shape):
    return gpu_backend.generate_source(asim.compile(asim.workload(name, **shape), strategy, "H100"))


def test_fig7_astitch_source_has_shared_memory_and_both_barriers():
    plan = asim.compile(asim.workload("paper_fig7"), "astitch", "H100")     # default shape: Global stitching
    assert plan.kernels[0].cooperative
    src = gpu_backend.generate_source(plan)
    compile(src, "<fig7>", "exec")
    assert src.count("\n@jit(max_registers=") == 1
    assert "cuda.shared.array(" in src and "cuda.syncthreads()" in src
    assert "cuda.cg.this_grid()" in src and "grid.sync()" in src
    assert "# ---- stage 0: dominant reduce.1" in src
    assert "Global" in src and "Regional" in src


def test_xla_source_has_no_grid_barrier():
    src = _source("paper_fig7", "xla", n=128, c=256)
    compile(src, "<xla>", "exec")
    assert src.count("\n@jit(max_registers=") == 4
    assert "this_grid" not in src and "grid.sync" not in src
    assert "cuda.syncthreads()" in src                      # the reduction trees


def test_source_is_valid_python_for_every_workload_and_strategy():
    for name, shape in TINY.items():
        for strategy in asim.STRATEGIES:
            plan = asim.compile(asim.workload(name, **shape), strategy, "H100")
            src = gpu_backend.generate_source(plan)
            tree = ast.parse(src)
            kernels = [f for f in tree.body if isinstance(f, ast.FunctionDef)]
            assert len(kernels) == len(plan.kernels), (name, strategy)
            assert ("grid.sync()" in src) == any(k.cooperative for k in plan.kernels), (name, strategy)
            assert "__shfl" not in src and "shfl_sync" not in src


def test_source_follows_the_plan_spaces():
    g = asim.workload("layernorm", **TINY["layernorm"])
    plan = asim.compile(g, "astitch", "H100", reduce_scheme="tree")       # the tree: mean and rstd in shared memory
    src = gpu_backend.generate_source(plan)
    k = plan.kernels[0]
    assert any(v.space == "shared" for v in k.values.values())
    for n, v in k.values.items():
        if v.space == "shared":
            assert re.search(rf"s_{re.escape(n.replace('.', '_'))} = smem\[{v.offset}:{v.offset + v.nbytes}\]", src), n
    assert f"cuda.shared.array({k.shared_bytes // 8}, float64).view(uint8)" in src
    assert "cuda.local.array(" in src                      # xc stays in registers across stages
    # the shuffle: every lane keeps mean and rstd in registers, one slot per task trip; nothing in shared memory
    plan = asim.compile(g, "astitch", "H100")
    src = gpu_backend.generate_source(plan)
    k = plan.kernels[0]
    for n in ("mean", "rstd"):
        assert k.values[n].space == "register" and "s_" + n not in src
        assert f"r_{n} = cuda.local.array({k.stages[k.values[n].stage].mapping.task_iterations}, float32)" in src


def test_float32_literals_are_typed():
    src = _source("layernorm", "astitch", **TINY["layernorm"])
    consts = re.findall(r"^([A-Z_0-9]+) = (.*)$", src, flags=re.M)
    assert consts and all(v.startswith("np.float32(") for _, v in consts)


def test_library_kernel_for_dot():
    g, inputs = _fixture("attention_batched_dot")
    plan = asim.compile(g, "astitch", "H100")
    assert plan.library
    src = gpu_backend.generate_source(plan)
    assert "naive batched matmul" in src


# -- the real Numba compiler, without a GPU ----------------------------------------------------------

@pytest.mark.slow          # every tiny workload and 8 fixtures x 6 strategies through Numba (~70 s); the fast tier
#                            type-checks library kernels and shuffles (test_indexed_and_library_ops, test_reduce_scheme)
def test_kernels_compile_with_numba_cuda_for_a_real_gpu(tmp_path):
    """Type inference + lowering to NVVM IR (cc 9.0) of every kernel: what the simulator cannot check.

    Runs in a subprocess: this process has numba.cuda in simulator mode.
    """
    args = [f"{n}:" + ",".join(f"{k}={v}" for k, v in s.items()) for n, s in TINY.items()]
    args += [str(FIXTURES / f"{f}.hlo") for f in ("bool_ops", "int32_ops", "attention_batched_dot",
                                                  "convert_bf16_layernorm", "convert_f16_bf16_s32",
                                                  "concat_slice", "pad_reverse", "iota_add")]
    plans = {name: hand_made(name)[1] for name in ("rows_split_grid_barrier", "columns_split_atomic",
                                                   "global_stitching", "rows_24_threads_per_row")}
    plans["op_zoo"] = asim.compile(op_zoo()[0], "astitch", "H100")
    for name, plan in plans.items():
        path = tmp_path / f"{name}.json"
        path.write_text(plan.to_json())
        args.append(str(path))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["ASTITCH_GPU_CACHE"] = str(tmp_path / "cache")
    r = subprocess.run([sys.executable, "-m", "gpu_backend.machine.typecheck", *args], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.count("ok ") == len(asim.STRATEGIES) * (len(args) - len(plans)) + len(plans)


# -- launch checks and errors --------------------------------------------------------------------------

def test_cooperative_grid_larger_than_a_wave_is_refused():
    """A grid barrier kernel with more blocks than can be resident: AStitchError naming kernel, grid, limit."""
    g, plan = hand_made("global_stitching")
    d = json.loads(plan.to_json())
    limit = plan.gpu.blocks_per_wave(32, plan.kernels[0].shared_bytes, plan.kernels[0].registers_per_thread)
    big = limit * 2
    k = d["kernels"][0]
    k["grid"] = big
    for s in k["stages"]:
        s["mapping"]["grid"] = big
    bad = asim.Plan.from_json(json.dumps(d))
    assert bad.kernels[0].cooperative
    with pytest.raises(AStitchError, match=rf"stitch\.0:multiply\.1.*{big} blocks.*only \d+ (blocks of \d+ threads .*fit|can be resident)"):
        gpu_backend.run(bad, workload_inputs(g, 0))


@pytest.mark.cudasim
def test_simulator_limit_is_the_presets_wave(monkeypatch):
    """In the simulator the co-residency limit is the plan's GPU preset (checked by plan validation before
    any launch) and a cap on Python threads (checked by the simulator's launcher)."""
    import gpu_backend.launch.cudasim as sim
    g, plan = hand_made("global_stitching")
    wave = plan.gpu.blocks_per_wave(32, plan.kernels[0].shared_bytes, plan.kernels[0].registers_per_thread)

    def with_grid(grid):
        d = json.loads(plan.to_json())
        for k in d["kernels"]:
            k["grid"] = grid
            for s in k["stages"]:
                s["mapping"]["grid"] = grid
        return asim.Plan.from_json(json.dumps(d))

    cap = sim.MAX_CONCURRENT_THREADS // 32
    assert cap + 1 <= wave                     # fits the preset's wave, not the simulator's threads
    with pytest.raises(AStitchError, match=rf"only {cap} can be resident .*simulator starts at most"):
        gpu_backend.run(with_grid(cap + 1), workload_inputs(g, 0))
    monkeypatch.setattr(sim, "MAX_CONCURRENT_THREADS", 10 ** 9)
    with pytest.raises(AStitchError, match=rf"{wave + 1} blocks, but only {wave} blocks of 32 threads .* fit on H100"):
        gpu_backend.run(with_grid(wave + 1), workload_inputs(g, 0))


def test_bad_inputs_raise():
    g = asim.workload("layernorm", **TINY["layernorm"])
    plan = asim.compile(g, "astitch", "H100")
    good = workload_inputs(g, 0)
    with pytest.raises(AStitchError, match="takes 3 input"):
        gpu_backend.run(plan, good[:2])
    with pytest.raises(AStitchError, match="shape"):
        gpu_backend.run(plan, [good[0][:2]] + good[1:])
    with pytest.raises(AStitchError, match="dtype"):
        gpu_backend.run(plan, [good[0].astype(np.float64)] + good[1:])
    with pytest.raises(AStitchError, match="missing"):
        gpu_backend.run(plan, {"x": good[0]})
    with pytest.raises(AStitchError, match="needs a Plan"):
        gpu_backend.run(g, good)
    with pytest.raises(AStitchError, match="needs a Plan"):
        gpu_backend.generate_source("not a plan")


def test_a_plan_the_backend_cannot_follow_is_reported():
    """A reduce in a flat stage has no task to combine over: generation stops and says where."""
    g = asim.workload("rmsnorm", **TINY["rmsnorm"])
    plan = asim.compile(g, "xla", "H100")
    d = json.loads(plan.to_json())
    k = d["kernels"][0]
    m = k["stages"][0]["mapping"]
    k["stages"][0]["mapping"] = dict(m, kind="flat", groups=[list(range(len(m["domain"])))], threads_per_row=0)
    with pytest.raises(AStitchError, match=r"cannot follow plan 'xla'.*kernel .*stage 0.*rows or columns mapping"):
        gpu_backend.generate_source(asim.Plan.from_json(json.dumps(d)))


# -- the simulator's grid barrier --------------------------------------------------------------------

@cuda.jit
def _neighbours(a, out):
    """Each thread writes its element, a grid barrier, then it reads the next block's element."""
    grid = cuda.cg.this_grid()
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    a[i] = i + 1
    grid.sync()
    out[i] = a[(i + cuda.blockDim.x) % a.shape[0]]


@cuda.jit
def _diverges(a):
    """Thread 0 returns while the others wait at a block barrier."""
    if cuda.threadIdx.x == 0:
        return
    cuda.syncthreads()
    a[cuda.threadIdx.x] = 1.0


def _sim_kernels():
    return _neighbours, _diverges


@pytest.mark.cudasim
def test_simulated_grid_barrier_spans_blocks():
    from gpu_backend.launch.cudasim import launch
    neighbours, _ = _sim_kernels()
    a = cuda.to_device(np.zeros(4 * 8, np.float32))
    out = cuda.to_device(np.zeros(4 * 8, np.float32))
    launch(neighbours, 4, 8, [a, out], cooperative=True)
    want = (np.arange(32) + 8) % 32 + 1
    np.testing.assert_array_equal(out.copy_to_host(), want)


@pytest.mark.cudasim
def test_simulator_reports_barrier_divergence_instead_of_hanging():
    from gpu_backend.launch.cudasim import BarrierError, launch
    _, diverges = _sim_kernels()
    a = cuda.to_device(np.zeros(8, np.float32))
    with pytest.raises(BarrierError, match="divergence"):
        launch(diverges, 1, 8, [a], cooperative=False)


@pytest.mark.cudasim
def test_grid_sync_without_cooperative_launch_is_an_error():
    from gpu_backend.launch.cudasim import BarrierError, launch
    neighbours, _ = _sim_kernels()
    a = cuda.to_device(np.zeros(16, np.float32))
    out = cuda.to_device(np.zeros(16, np.float32))
    with pytest.raises(BarrierError, match="cooperative"):
        launch(neighbours, 2, 8, [a, out], cooperative=False)


@cuda.jit(device=True)
def _wait_for_the_block(x):
    cuda.syncthreads()
    return x


@cuda.jit
def _calls_a_barrier(a):
    """The barrier is in a device function it calls, not in the kernel's own code."""
    a[cuda.threadIdx.x] = _wait_for_the_block(1.0)


@cuda.jit
def _fails_in_one_thread(a):
    if cuda.blockIdx.x == 1 and cuda.threadIdx.x == 5:
        a[10 ** 6] = 1.0
    a[cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x] = 2.0


@pytest.mark.cudasim
def test_kernels_without_a_barrier_run_without_a_python_thread_per_cuda_thread(monkeypatch):
    """A kernel that names no barrier, shuffle or grid group -- itself or in a function it calls -- runs its
    threads one after another (no thread can wait for another); the others keep a Python thread per CUDA
    thread.  Same outputs either way; an error still names the simulated thread it happened in."""
    import gpu_backend.launch.cudasim as sim
    from gpu_backend.launch.plans import compile_plan
    neighbours, diverges = _sim_kernels()
    assert all(sim.meets_barrier(k.fn) for k in (neighbours, diverges, _calls_a_barrier))
    assert not sim.meets_barrier(_fails_in_one_thread.fn)
    started = []
    init = sim._SimThread.__init__

    def counted(self, *args, **kwargs):         # every simulated thread the threaded path makes
        started.append(1)
        init(self, *args, **kwargs)
    monkeypatch.setattr(sim._SimThread, "__init__", counted)
    for name, strategy, barrier in (("bias_gelu", "xla", False), ("layernorm", "astitch", True)):
        g = asim.workload(name, **TINY[name])
        plan = asim.compile(g, strategy, "H100")
        fns = compile_plan(plan).functions
        assert [sim.meets_barrier(f.fn) for f in fns] == [barrier] * len(fns), (name, strategy)
        started.clear()
        inputs = workload_inputs(g, 3)
        assert_matches_reference(g, gpu_backend.run(plan, inputs), inputs, f"{name}/{strategy}")
        assert len(started) == (sum(k.grid * k.block for k in plan.kernels) if barrier else 0), (name, len(started))
    a = cuda.to_device(np.zeros(64, np.float32))
    with pytest.raises(IndexError) as e:
        sim.launch(_fails_in_one_thread, 2, 32, [a], cooperative=False)
    assert "in simulated thread tid=5 ctaid=1" in "".join(getattr(e.value, "__notes__", []))


@cuda.jit
def _records_the_switch_interval(a):
    cuda.syncthreads()
    a[cuda.threadIdx.x] = sys.getswitchinterval()


@pytest.mark.cudasim
def test_threaded_launches_switch_threads_less_often_and_restore_the_interval():
    """Simulated threads hand the interpreter over at barriers; while they run, the switch interval is
    ``SWITCH_INTERVAL_S`` (fewer forced switches), and afterwards it is what it was -- after a failed launch too."""
    import gpu_backend.launch.cudasim as sim
    before = sys.getswitchinterval()
    assert sim.SWITCH_INTERVAL_S != before
    a = cuda.to_device(np.zeros(8, np.float64))
    sim.launch(_records_the_switch_interval, 1, 8, [a], cooperative=False)
    np.testing.assert_allclose(a.copy_to_host(), sim.SWITCH_INTERVAL_S, rtol=1e-6)   # (read back as 0.0499999...)
    assert sys.getswitchinterval() == before
    with pytest.raises(sim.BarrierError):
        sim.launch(_sim_kernels()[1], 1, 8, [cuda.to_device(np.zeros(8, np.float32))], cooperative=False)
    assert sys.getswitchinterval() == before


def test_prelude_defines_every_helper_the_generator_imports():
    import gpu_backend.codegen.generate as codegen
    import gpu_backend.prelude as prelude
    assert codegen.HELPERS == prelude.HELPERS
    for name in codegen.HELPERS:
        assert hasattr(prelude, name), name


def test_intrinsics_module_defines_every_name_the_generator_imports():
    import gpu_backend.intrinsics as intrinsics
    from gpu_backend.codegen.source import INTRINSICS
    for name in INTRINSICS:
        assert hasattr(intrinsics, name), name
    assert intrinsics.u32(7) == 7      # the simulator twin keeps exact integers


def test_package_docstring_example_runs():
    g = asim.workload("layernorm", rows=4, cols=32)
    plan = asim.compile(g, "astitch", "H100")
    assert "@jit(max_registers=" in gpu_backend.generate_source(plan)
    inputs = asim.workloads.workload_inputs(g)
    assert_matches_reference(g, gpu_backend.run(plan, inputs), inputs, "docstring example")


def test_shared_bytes_reused_without_a_barrier_is_reported():
    """If a plan put jit__take_.1/reduce_and.15 (written in stage 3, one thread per row: no reduction tree
    synchronises the block first) in the shared bytes of select_n.9 (last read in stage 1, with no barrier
    after stages 1 and 2), a fast thread could overwrite what a slow one still reads.  The compiler never
    plans that (it reuses a slot only across a barrier); here we write such a plan by hand, and generation
    refuses it.  (grad_layernorm served here before its sibling reductions came to share stages; the paper's trees keep
    select_n.9 in shared memory -- after a shuffle it stays in registers.  The paper's rules alone,
    ``launch_search=False``: the launch search cuts this kernel at its grid barrier, which sends
    jit__take_.1/reduce_and.15 to global memory.)"""
    g = asim.from_hlo_file(FIXTURES.parent / "models" / "xent_integer_labels.hlo")
    plan = asim.compile(g, "astitch", "H100", never_behind=False, launch_search=False,   # raw, trees: select_n.9
                        reduce_scheme="tree")                                            # Regional
    gpu_backend.generate_source(plan)                     # as planned: fine
    d = json.loads(plan.to_json())
    k = d["kernels"][0]
    vals = k["values"]
    a, b = "select_n.9", "jit__take_.1/reduce_and.15"
    assert max(vals[a]["read_by"]) == 1 and vals[b]["stage"] == 3
    assert [s["barrier_after"] for s in k["stages"][1:3]] == ["none", "none"]
    assert k["stages"][3]["mapping"]["threads_per_row"] == 1
    vals[b]["offset"] = vals[a]["offset"]
    with pytest.raises(AStitchError, match="write-after-read race"):
        gpu_backend.generate_source(asim.Plan.from_json(json.dumps(d)))


# -- index width: the plan's index_bits, followed ---------------------------------------------------------

#: softmax rows of 32769 columns: at 65534 rows the row loops' positions pass 2**31 (64-bit index math)
INDEX_64 = {"rows": 65534, "cols": 32769}


def test_index_math_follows_the_plans_width_in_the_source():
    small = asim.compile(asim.workload("softmax", rows=4, cols=64), "xla", "H100")
    big = asim.compile(asim.workload("softmax", **INDEX_64), "xla", "H100")
    assert {k.index_bits for k in small.kernels} == {32}
    assert 64 in {k.index_bits for k in big.kernels}
    src_small, src_big = gpu_backend.generate_source(small), gpu_backend.generate_source(big)
    assert "tid = u32(cuda.threadIdx.x)" in src_small and re.search(r"\bd1(_\d+)? = u32\(", src_small)
    wide = [k for k in big.kernels if k.index_bits == 64]
    assert src_big.count("tid = cuda.threadIdx.x  # index math: 64-bit signed") == len(wide)


def test_64_bit_index_math_compiles_with_numba_and_ptxas_and_32_bit_is_cheaper(tmp_path):
    """No memory for 2**31 elements here: Numba's real compiler and ptxas (sm_90) check the 64-bit kernels,
    and the same kernel with 32-bit index math has fewer SASS instructions (what the width is for)."""
    from gpu_backend.machine import toolchain
    if not toolchain.available():
        if os.environ.get("CI"):
            pytest.fail(f"NVIDIA's toolchain is missing in CI: {toolchain.missing_reason()}")
        pytest.skip(f"NVIDIA's toolchain is not installed: {toolchain.missing_reason()}")
    script = (
        "import json, astitch_sim as asim\n"
        "from gpu_backend.machine.machine_code import compile_kernels\n"
        "out = {}\n"
        f"for tag, shape in (('32', dict(rows=64, cols=32769)), ('64', {INDEX_64!r})):\n"
        "    plan = asim.compile(asim.workload('softmax', **shape), 'xla', 'H100')\n"
        "    out[tag] = [(plan.kernels[m.index].name, plan.kernels[m.index].index_bits, m.mix['total'],\n"
        "                m.resources.spills) for m in compile_kernels(plan, 'sm_90')]\n"
        "print(json.dumps(out))\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    narrow = {name: (bits, total) for name, bits, total, _ in res["32"]}
    wide = {name: (bits, total) for name, bits, total, _ in res["64"]}
    assert narrow.keys() == wide.keys()
    pairs = [(narrow[n][1], wide[n][1]) for n in wide if wide[n][0] == 64 and narrow[n][0] == 32]
    assert pairs, (narrow, wide)
    assert all(a < b for a, b in pairs), pairs
    assert all(spills == 0 for tag in res for *_, spills in res[tag])


@pytest.mark.parametrize("shape", [dict(n=2, c=8, h=3, w=4, groups=2), dict(n=2, c=8, h=4, w=3, groups=2)])
def test_a_stage_over_a_view_computes_and_stores_the_tensor_at_its_own_index(shape):
    """A PyTorch group norm (``test_data_reuse.group_norm_nchw``): every stage maps ``x`` viewed as ``[N, G, rest]``,
    the affine's ops are ``[N, C, H, W]`` (the domain reshaped), so the generated code indexes them by the
    domain's index reshaped (``codegen.elements.own_index``), read ``x`` from the registers the first stage
    loaded it into, and store ``out`` where ``locate`` says (the probe build).  With ``w = 4`` a row's
    4-element vectors are 4 neighbours of ``out``'s rows too; with ``w = 3`` they cross them (one vector store
    still: the same 16 contiguous bytes)."""
    from test_data_reuse import group_norm_nchw
    g = group_norm_nchw(**shape)
    plan = asim.compile(g, "astitch", "H100")
    (k,) = plan.generated
    assert k.stages[-1].mapping.domain != g["out"].shape and k.values["x"].loaded_in == 0, str(plan)
    inputs = workload_inputs(g, seed=3)
    assert_matches_reference(g, gpu_backend.run(plan, inputs), inputs, str(shape))
    src = gpu_backend.generate_source(plan)
    first, later = src.split("# ---- stage 1:")
    assert "(g_x, " in first and "(g_x, " not in later and "r_x[" in later   # x loaded once, then from registers
    _, probes = execute(plan, inputs, probe=True)
    m = k.stages[-1].mapping
    block, thread, it = m.locate(np.arange(m.size))
    np.testing.assert_array_equal(probes[(0, "out")][:m.size], (block * m.block + thread) * m.elements_per_thread + it)


@pytest.mark.parametrize("dtype", ["s8", "s16", "s32", "s64"])
def test_integer_remainder_and_divide_of_the_most_negative_value(dtype):
    """XLA's integer remainder (the dividend's sign) of INT_MIN: its absolute value does not fit the type, so the
    kernels' helper must not take it (the CUDA simulator's int8 scalars gave -128 % 65 = -2, not -63; a random
    graph's f16 -> s8 convert saturating to -128 found it)."""
    info = np.iinfo(np.dtype({"s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64"}[dtype]))
    g = asim.Graph("int_min")
    a, b = g.parameter("a", (12,), dtype), g.parameter("b", (12,), dtype)
    g.set_outputs(g.remainder(a, b, name="rem"), g.divide(a, b, name="div"))
    lo, hi = int(info.min), int(info.max)
    x = np.array([lo, lo, lo, lo, lo, lo, lo + 1, hi, -7, 7, -128 if lo < -128 else lo, lo], dtype=info.dtype)
    y = np.array([65, -65, 2, -2, 1, 3, lo, lo, 3, -3, 127, 7], dtype=info.dtype)
    inputs = [x, y]
    assert_matches_reference(g, gpu_backend.run(asim.compile(g, "xla", "H100"), inputs), inputs, dtype)
