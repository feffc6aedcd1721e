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

from pathlib import Path

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from benchmarks import sanitizer as _sanitizer_run
from anchor import TESTS_FILE

pytestmark = pytest.mark.gpu

ROOT = Path(TESTS_FILE).resolve().parent.parent
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
    # the plan AStitch ships: register caps checked by ptxas (benchmarks/gpu_correctness.py runs the same checks)
    plan = gpu_backend.apply_compiler(asim.compile(g, strategy, preset))
    outs = gpu_backend.run(plan, inputs)
    _close(g, outs, want, f"{name}/{strategy} on {preset}")


# -- compute-sanitizer ---------------------------------------------------------------------------

#: plans small enough for the sanitizer that still use every construct: benchmarks/sanitizer.py
#: (the child gets the checkout on PYTHONPATH -- the GPU image has no installed astitch_sim -- and a
#: timeout that fits one 10-minute device command)
SANITIZED = _sanitizer_run.SANITIZED


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_generated_kernels_pass_compute_sanitizer(tool, preset, tmp_path):
    if _sanitizer_run.find() is None:
        pytest.skip("compute-sanitizer not found (install the CUDA toolkit or set CUDA_HOME)")
    rec = _sanitizer_run.run_tool(tool, tmp_path, SANITIZED, preset)
    assert not rec["timed_out"], f"compute-sanitizer {tool}: {rec['verdict']}\n{rec['log']}"
    assert rec["ok"], f"compute-sanitizer {tool}: {rec['verdict']}\n{rec['log']}"
    assert rec["ran"] == len(SANITIZED), rec["log"]
