"""gpu_backend on a real CUDA GPU: every workload at its real size, and compute-sanitizer on the kernels.

Every test here is marked ``gpu``: ``tests/conftest.py`` skips them unless
``numba.cuda.is_available()`` (checked in a subprocess, before the simulator
could be chosen).  On a GPU machine::

    pytest -m gpu                                  # this file
    pytest -m gpu -k sanitizer                     # only the compute-sanitizer runs

Plans are compiled for the preset matching the device (H100, H200, A100,
V100; H100 when the name matches none), so a cooperative kernel's grid is
sized for the GPU it runs on; if Numba's compiled kernel still cannot keep
that many blocks resident, ``run`` refuses with an AStitchError and the test
fails saying so (the plan's register assumption did not hold).

Tolerances (real sizes: reductions over up to 32000 elements, summed in a
different order than numpy's pairwise sum, and the GPU's float32 ``expf``/
``logf`` within 2 ulp of numpy's): float32 rtol 1e-4, atol 1e-5 * max(1, max|want|).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.workloads import workload_inputs

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
RTOL, ATOL = 1e-4, 1e-5


def _preset() -> str:
    from numba import cuda
    name = cuda.get_current_device().name
    name = name.decode() if isinstance(name, bytes) else str(name)
    for preset in ("H200", "H100", "A100", "V100"):
        if preset in name:
            return preset
    return "H100"


@pytest.fixture(scope="module")
def preset():
    return _preset()


def _close(graph, outs, want, where):
    for got, ref, node in zip(outs, want, graph.outputs, strict=True):
        if node.dtype in ("f32", "f64", "f16", "bf16"):
            r64 = ref.astype(np.float64)
            finite = np.isfinite(r64)
            scale = max(1.0, float(np.max(np.abs(r64[finite]))) if finite.any() else 1.0)
            np.testing.assert_allclose(got.astype(np.float64), r64, rtol=RTOL, atol=ATOL * scale, equal_nan=True,
                                       err_msg=f"{where} {node.name}")
        else:
            np.testing.assert_array_equal(got, ref, err_msg=f"{where} {node.name}")


_REFERENCE: dict = {}


def _reference(name):
    if name not in _REFERENCE:
        _REFERENCE.clear()                  # keep one default-size reference in memory at a time
        g = asim.workload(name)
        inputs = workload_inputs(g, seed=0)
        _REFERENCE[name] = (g, inputs, asim.reference(g, inputs))
    return _REFERENCE[name]


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("name", list(asim.WORKLOADS))
def test_workload_at_real_size_on_device(name, strategy, preset):
    import gpu_backend
    g, inputs, want = _reference(name)
    plan = asim.compile(g, strategy, preset)
    outs = gpu_backend.run(plan, inputs)
    _close(g, outs, want, f"{name}/{strategy} on {preset}")


# -- compute-sanitizer ---------------------------------------------------------------------------

#: plans small enough for the sanitizer (10-100x slower) that still use every construct:
#: shared-memory trees, Regional values, grid barriers, split reductions (atomic), Global values
SANITIZED = [("paper_fig7", {}, "astitch"), ("softmax", dict(rows=2, cols=8192), "astitch"),
             ("layernorm", dict(rows=64, cols=768), "astitch"), ("batchnorm_train", dict(rows=4096, cols=64), "xla"),
             ("cross_entropy", dict(rows=64, cols=1000), "astitch"), ("row_reduce", dict(rows=4096, cols=32), "astitch"),
             ("layernorm_backward", dict(rows=64, cols=768), "astitch"), ("global_norm", dict(rows=256, cols=256),
                                                                           "astitch")]

_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, astitch_sim as asim, gpu_backend
    from astitch_sim.workloads import workload_inputs
    cases = {cases!r}
    for name, shape, strategy in cases:
        g = asim.workload(name, **shape)
        ins = workload_inputs(g, 0)
        outs = gpu_backend.run(asim.compile(g, strategy, {preset!r}), ins)
        for o, r in zip(outs, asim.reference(g, ins), strict=True):
            assert np.allclose(o, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.nanmax(np.abs(r))))), name
        print("ran", name, strategy, flush=True)
""")


def _sanitizer():
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if home and Path(home, "bin", "compute-sanitizer").exists():
                return str(Path(home, "bin", "compute-sanitizer"))
    return exe


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_generated_kernels_pass_compute_sanitizer(tool, preset, tmp_path):
    exe = _sanitizer()
    if exe is None:
        pytest.skip("compute-sanitizer not found (install the CUDA toolkit or set CUDA_HOME)")
    script = tmp_path / "run_plans.py"
    script.write_text(_SCRIPT.format(cases=SANITIZED, preset=preset))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["ASTITCH_GPU_CACHE"] = str(tmp_path / "cache")
    cmd = [exe, "--tool", tool, "--error-exitcode", "97"]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "hazard"]
    r = subprocess.run(cmd + [sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=3600)
    log = r.stdout[-6000:] + r.stderr[-6000:]
    assert r.returncode == 0, f"compute-sanitizer {tool} found problems:\n{log}"
    assert r.stdout.count("ran ") == len(SANITIZED), log
