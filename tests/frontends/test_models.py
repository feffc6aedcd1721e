"""Real model code at real sizes: import, plan under every strategy, simulate, match JAX.

The fixtures in ``tests/fixtures/models`` were written by JAX
(``tests/fixtures/make_model_fixtures.py``): LLaMA RMSNorm and rotary embedding,
flax LayerNorm over 16k tokens, masked softmax, ``jax.nn.dot_product_attention``,
grouped-query attention, AdamW and Lion steps, cross-entropy with integer labels,
argmax accuracy, cumsum position ids, a KV-cache update, top-k sampling, an
embedding and its gradient, bf16/f16/int math -- and a small flax GPT, forward
and training step.  Inputs are stored as seeds (``astitch_sim/frontends/seeded.py``); JAX's
outputs in full when small, else as a sample of positions plus the sum and the
sum of magnitudes of every element.

Two checks per fixture: the numpy reference matches JAX (sample + totals), and
every strategy's plan, run on the SIMT model, matches the reference in *every*
element.  Tolerances, ``|got - want| <= atol + rtol * |want|`` with ``atol``
scaled by the output's largest magnitude: float32 rtol 2e-5 / atol 2e-6 (XLA
and numpy round transcendental functions and order sums differently: a few ulps
per op); f16 2e-3, bf16 1.6e-2 (1-2 ulps of the format); integers and pred exact.
A total over ``n`` elements may differ by ``1e-5`` of the sum of magnitudes.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.frontends import seeded
from anchor import TESTS_FILE

FIXTURES = Path(TESTS_FILE).parent / "fixtures"

MODELS = sorted(p.stem for p in (FIXTURES / "models").glob("*.hlo"))
#: the models every strategy simulates in the fast tier (the GPT training step, 10 s of it, in the full tier)
SMALL = ("gpt_forward",)
TOL = {"f32": (2e-5, 2e-6), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}
#: JAX vs the reference only: XLA's float32 sin/cos are polynomial approximations whose range reduction
#: loses about 1e-4 at the thousands of radians rotary positions reach (numpy's are correctly rounded)
JAX_TOL = {"llama_rotary": (5e-4, 5e-4)}


def load(name):
    g = asim.from_hlo_file(FIXTURES / "models" / f"{name}.hlo")
    z = np.load(FIXTURES / "models" / f"{name}.npz")
    spec = json.loads(str(z["spec"]))
    return g, [seeded.make(s) for s in spec["inputs"]], z


def tolerance(g):
    kinds = {n.dtype for n in g}
    return TOL["bf16"] if "bf16" in kinds else TOL["f16"] if "f16" in kinds else TOL["f32"]


def assert_close(got, want, dtype, tol, where):
    assert got.shape == want.shape, where
    if dtype in ("f32", "f64", "f16", "bf16"):
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        finite = np.isfinite(w64)
        scale = max(1.0, float(np.max(np.abs(w64[finite]))) if finite.any() else 1.0)
        np.testing.assert_allclose(g64, w64, rtol=tol[0], atol=tol[1] * scale, equal_nan=True, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=where)


def check_against_jax(g, outs, z, tol=None):
    tol = tol or tolerance(g)
    assert len(outs) == len([k for k in z.files if k.startswith("out") and (k[3:].isdigit() or
                                                                          k.endswith("_shape"))])
    for i, (node, got) in enumerate(zip(g.outputs, outs, strict=True)):
        where = f"{g.name} output {i} ({node.name})"
        if f"out{i}" in z.files:
            assert_close(got, z[f"out{i}"], node.dtype, tol, where)
            continue
        assert tuple(got.shape) == tuple(z[f"out{i}_shape"]), where
        flat = got.reshape(-1)
        idx = z[f"out{i}_idx"]
        assert_close(flat[idx], z[f"out{i}_val"], node.dtype, tol, where + " (sampled elements)")
        total = float(np.sum(flat.astype(np.float64)))
        mag = float(np.sum(np.abs(flat.astype(np.float64))))
        rel = max(1e-5, tol[0])
        assert abs(total - float(z[f"out{i}_sum"])) <= rel * float(z[f"out{i}_abssum"]) + 1e-6, where + " (sum)"
        assert abs(mag - float(z[f"out{i}_abssum"])) <= rel * float(z[f"out{i}_abssum"]) + 1e-6, where + " (|sum|)"


def _params(names):
    return [pytest.param(n, marks=() if n in SMALL else pytest.mark.slow) for n in names]


def test_fixtures_are_there():
    assert {"gpt_forward", "gpt_train_step", "flax_layernorm_16k", "xent_integer_labels"} <= set(MODELS)


@pytest.mark.parametrize("name", _params(MODELS))
def test_model_reference_and_every_strategy_match_jax(name):
    g, inputs, z = load(name)
    ref = asim.reference(g, inputs)
    check_against_jax(g, ref, z, JAX_TOL.get(name))
    tol = tolerance(g)
    plans, stats = {}, {}
    for strategy in asim.STRATEGIES:
        plan = plans[strategy] = asim.compile(g, strategy, "H100")
        res = asim.simulate(plan, inputs)
        for i, (node, got, want) in enumerate(zip(g.outputs, res.outputs, ref, strict=True)):
            assert_close(got, want, node.dtype, tol, f"{name} {strategy} output {i} ({node.name})")
        assert res.stats.kernel_launches == len(plan.kernels)
        stats[strategy] = res.stats
        del res
    # the never-behind invariants on these very runs (one SIMT run per plan; tests/planning/test_never_behind*.py)
    import test_never_behind
    import test_never_behind_fs
    test_never_behind.check_model_fixture(name, plans, stats)
    test_never_behind_fs.check_model_fixture(name, g, inputs, plans, stats)


def _library_ops(plan):
    return sorted(plan.graph[n].op for k in plan.library for n in k.outputs)


@pytest.mark.parametrize("name,dots,scatters", [("gpt_forward", 17, 0),
                                             pytest.param("gpt_train_step", 51, 3, marks=pytest.mark.slow)])
def test_gpt_plans_library_kernels_for_matmuls_and_stitches_the_rest(name, dots, scatters):
    """Every strategy: one library kernel per matrix product (and per scatter of the embedding and label
    gradients), generated kernels for everything between them; AStitch needs the fewest."""
    g, _, _ = load(name)
    assert sum(1 for n in g.live_nodes() if n.op == "dot") == dots
    launches = {}
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        ops = _library_ops(plan)
        assert ops.count("dot") == dots and ops.count("scatter") == scatters, strategy
        assert all(k.kind == "generated" for k in plan.kernels if k not in plan.library)
        stitched = [n for k in plan.generated for n in k.computed]
        assert not any(plan.graph[n].kind == "library" for n in stitched)     # plan.graph: after the passes
        launches[strategy] = len(plan.kernels)
        assert max(k.shared_bytes for k in plan.kernels) <= plan.gpu.shared_per_block_default
    assert launches["astitch"] < launches["xla"] < launches["unfused"]


@pytest.mark.slow
def test_gpt_kernels_compile_with_numba_cuda_for_a_real_gpu(tmp_path):
    """Every kernel the backend generates for the GPT (forward: xla and astitch; training step: astitch,
    31 stitched stages of AdamW among them) passes Numba-CUDA's type inference and lowering to NVVM IR.

    astitch's kernels of both fixtures also go through that lowering and then ptxas in the ptxas matrix
    (``tests/gpu_backend/test_machine_code.py``, every HLO fixture under astitch): where NVIDIA's toolchain
    is installed (the test extra installs it) this test lowers only xla's forward, 38 s less on 2 cores."""
    import os
    import subprocess
    from gpu_backend.machine import toolchain
    root = Path(TESTS_FILE).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["ASTITCH_GPU_CACHE"] = str(tmp_path / "cache")
    cases = (("xla", "gpt_forward"),) if toolchain.available() else \
        (("xla,astitch", "gpt_forward"), ("astitch", "gpt_train_step"))
    for strategies, name in cases:
        r = subprocess.run([sys.executable, "-m", "gpu_backend.machine.typecheck", "--strategies", strategies,
                            str(FIXTURES / "models" / f"{name}.hlo")], capture_output=True, text=True, env=env,
                           cwd=root, timeout=900)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
        assert r.stdout.count("ok ") == len(strategies.split(","))


@pytest.mark.parametrize("spec, match", [
    ({"shape": [4], "dtype": "f32", "kind": "gaussian", "seed": 0}, "kind must be one of normal"),
    ({"shape": [4], "dtype": "c64", "kind": "normal", "seed": 0}, "dtype one of f32"),
    ({"shape": [4], "dtype": "f32", "kind": "normal"}, "lacks seed"),
    ({"shape": [4], "dtype": "s32", "kind": "int", "seed": 0}, "needs its range, lo and hi"),
    ([4], "needs shape, dtype, kind and seed"),
])
def test_a_bad_seeded_spec_is_an_astitch_error(spec, match):
    with pytest.raises(asim.AStitchError, match=match):
        seeded.make(spec)
