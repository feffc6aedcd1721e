"""Per-task values kept in registers after a shuffle reduction, in the generated kernels
(astitch_sim/plan/task_registers.py; gpu_backend/codegen/reductions.py, task_loops.py, values.py).

Under Numba's CUDA simulator (``tests/conftest.py``) the kernels of layernorm, softmax and rmsnorm
plans re-mapped onto the row layouts the rule must handle -- a warp per row, rows of several warps
(2 and 3: the second butterfly over a power of two and not), rows shorter than a warp (8 lanes x 4
rows per warp), several rows per thread (a task loop) -- match the numpy reference under both
reduction schemes, and the source says where the values went: every lane completes the row and keeps
``r_<value>[outer]``, only the first lane stores, no ``cuda.syncthreads()`` for the values.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import astitch_sim as asim
import gpu_backend
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.plan.plan import Plan, Stage
from astitch_sim.plan.task_registers import kept_per_task
from astitch_sim.planning.kernel_builder import assemble_kernel
from gpu_backend.launch.plans import execute
from toolchain_gate import require_disassembler

#: (workload, rows, cols, block, grid, lanes per row, what it exercises)
LAYOUTS = [
    ("layernorm", 8, 256, 64, 2, 32, "a warp per row, 2 rows per thread"),
    ("layernorm", 6, 256, 128, 2, 64, "rows of 2 warps, a task loop with a partial last trip"),
    ("rmsnorm", 5, 384, 96, 1, 96, "rows of 3 warps (the second butterfly over 4 lanes)"),
    ("layernorm", 16, 32, 32, 2, 8, "8 lanes x 4 rows per warp, 2 rows per thread"),
    ("softmax", 40, 64, 64, 2, 16, "16 lanes per row, 5 rows per thread"),
]


def remap(g, block, grid, tpr, scheme):
    """The astitch plan of ``g`` with every rows stage on ``block x grid``, ``tpr`` lanes per row, rebuilt by the
    compiler's own ``assemble_kernel`` preferring ``scheme``."""
    plan = asim.compile(g, "astitch", "H100", never_behind=False)
    kernels = []
    for k in plan.kernels:
        stages = [Stage(s.dominant, list(s.ops), ThreadMapping("rows", s.mapping.domain, s.mapping.groups, block=block,
                                                             grid=grid, threads_per_row=tpr)
                        if s.mapping.kind == "rows" else
                        ThreadMapping("flat", s.mapping.domain, s.mapping.groups, block=block, grid=grid),
                        list(s.epilogue)) for s in k.stages]
        kernels.append(assemble_kernel(g, k.name, stages, plan.gpu, set(k.outputs), stitch=len(stages) > 1,
                                       plan_vectors=False, reduce_scheme=scheme))
    return Plan(g, plan.strategy, plan.gpu, kernels, list(plan.notes)).validate()


@pytest.mark.parametrize("name, rows, cols, block, grid, tpr, what", LAYOUTS, ids=[c[-1] for c in LAYOUTS])
@pytest.mark.parametrize("scheme", ["shuffle", "tree"])
def test_generated_kernels_match_the_reference(name, rows, cols, block, grid, tpr, what, scheme):
    g = asim.workload(name, rows=rows, cols=cols)
    plan = remap(g, block, grid, tpr, scheme)
    k = plan.kernels[0]
    kept = [n for n in k.values if kept_per_task(k, g, n)]
    assert bool(kept) == (scheme == "shuffle"), (what, kept)
    inputs = workload_inputs(g, 0)
    want = asim.reference(g, inputs)
    got, _ = execute(plan, inputs)
    sim = asim.simulate(plan, inputs).outputs
    for a, b, w in zip(got, sim, want, strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max())))
        np.testing.assert_allclose(b, w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max())))
    src = gpu_backend.generate_source(plan)
    trips = k.stages[0].mapping.task_iterations
    for n in kept:
        var = f"r_{n.replace('.', '_')}"
        assert re.search(rf"{var} = cuda\.local\.array\({trips}, ", src), (n, trips)
        assert re.search(rf"{var}\[(outer|0)\] = ", src) and not re.search(rf"s_{n.replace('.', '_')}\b", src)


def test_stitched_layernorm_at_paper_size_has_no_block_barrier():
    """layernorm 16384x768 (a warp per row): the shuffle leaves mean and rstd in every lane; the generated
    kernel keeps them in registers, computes the epilogue in every lane and has no ``cuda.syncthreads()``;
    under the tree the first lane computes them and two block barriers publish them."""
    g = asim.workload("layernorm", rows=16384, cols=768)
    src = gpu_backend.generate_source(asim.compile(g, "astitch", "H100"))
    assert "cuda.syncthreads()" not in src and "if lane == 0" not in src
    assert "r_mean[0] = mean" in src and "r_rstd[0] = rstd" in src
    tree = gpu_backend.generate_source(asim.compile(g, "astitch", "H100", reduce_scheme="tree"))
    assert "s_mean[" in tree and "if lane == 0:" in tree
    stage_barriers = [ln for ln in tree.splitlines() if ln.strip().startswith("cuda.syncthreads()  # block barrier")]
    assert len(stage_barriers) == 2


def test_an_output_epilogue_value_is_stored_by_the_first_lane_only():
    """softmax's row sum kept in registers for the divide and also a graph output: every lane computes it,
    one lane stores it."""
    g = asim.Graph("softmax_and_sum")
    x = g.parameter("x", (12, 64))
    m = g.reduce(x, 1, "max", name="m")
    e = g.exp(g.subtract(x, g.broadcast(m, (12, 64), (0,))), name="e")
    s = g.reduce(e, 1, "sum", name="s")
    g.set_outputs(g.divide(e, g.broadcast(s, (12, 64), (0,)), name="y"), s)
    plan = remap(g, 64, 1, 16, "shuffle")
    k = plan.kernels[0]
    assert kept_per_task(k, g, "s") and k.values["s"].output
    src = gpu_backend.generate_source(plan)
    store = [i for i, ln in enumerate(src.splitlines()) if re.search(r"g_s\[.*\] = ", ln)]
    assert store and all("if lane == 0:" in src.splitlines()[i - 1] for i in store)
    inputs = workload_inputs(g, 1)
    got, _ = execute(plan, inputs)
    for a, w in zip(got, asim.reference(g, inputs), strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5)


SASS_BARS = """
import json, astitch_sim as asim
from gpu_backend.machine.machine_code import entry_name, kernel_ptx, sass_listing
from gpu_backend.machine.sass_profile import profile
g = asim.workload("layernorm", rows=16384, cols=768)
bars = {}
for scheme in ("shuffle", "tree"):
    plan = asim.compile(g, "astitch", "H100", reduce_scheme=scheme)
    ((spec, ptx),) = list(kernel_ptx(plan, "sm_90"))
    k = plan.kernels[spec.index]
    p = profile(sass_listing(ptx, "sm_90", k.registers_per_thread, spec.cooperative), entry_name(ptx))
    bars[scheme] = p.classes.get("barrier", 0)
print(json.dumps(bars))
"""


def test_no_main_body_barrier_in_the_machine_code():
    """ptxas + nvdisasm (the test extra), in a fresh process without the simulator: the stitched layernorm's
    SASS has no BAR under the shuffle, the stage barriers under the tree (``sass_profile`` counts the main
    body's barrier instructions)."""
    require_disassembler()
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", SASS_BARS], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    bars = json.loads(r.stdout.strip().splitlines()[-1])
    assert bars["shuffle"] == 0 and bars["tree"] >= 2, bars


def _row_max_graph(dtype):
    """A row max (row or, for pred) read back by every element of its row: a per-row value crossing stages."""
    g = asim.Graph(f"rowmax_{dtype}")
    x = g.parameter("x", (6, 256), dtype)
    red = g.reduce(x, 1, "or" if dtype == "pred" else "max", name="m")
    m = g.broadcast(red, (6, 256), (0,))
    g.set_outputs(g.add_node("xor" if dtype == "pred" else "subtract", (x, m), name="y"), red)
    return g


@pytest.mark.slow      # 7-10 s of Numba's real compiler: the full tier (random graphs type-check in both)
def test_register_values_type_check_with_numbas_real_compiler_for_every_dtype(tmp_path):
    """Numba's real compiler (not the simulator) accepts the every-lane epilogue and the per-row register arrays
    for each register type, in one warp and across warps; the simulator runs them exactly."""
    paths = []
    for dt in ("f32", "f64", "f16", "s8", "s32", "u64", "pred"):
        g = _row_max_graph(dt)
        for tpr in (32, 128):
            plan = remap(g, 256, 1, tpr, "shuffle")
            assert kept_per_task(plan.kernels[0], g, "m"), (dt, tpr)
            inputs = asim.random_inputs(g, 3)
            got, _ = execute(plan, inputs)
            for a, w in zip(got, asim.reference(g, inputs), strict=True):
                np.testing.assert_array_equal(a, w)
            path = tmp_path / f"{dt}_{tpr}.json"
            path.write_text(plan.to_json())
            paths.append(str(path))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-m", "gpu_backend.machine.typecheck", *paths], capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.count("ok ") == len(paths)
