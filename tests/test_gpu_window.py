"""What would break the GPU window (issue 29), checked without a GPU.

Each test here stands for one thing the lent GPU machine's image does differently
from this one (an older numba-cuda, CUDA 13 wheels, the toolkit in /usr/local/cuda,
no astitch_sim installed) or for a measurement mistake the runbook must not make.
They run in Numba's CUDA simulator and on the CPU; none needs a GPU.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# -- 1. numba-cuda without numba.cuda.core.config ------------------------------------------------

def test_no_module_imports_the_recent_only_numba_config_path():
    """Only gpu_backend/numba_compat.py may name numba.cuda.core (older numba-cuda releases lack it)."""
    offenders = []
    for top in ("gpu_backend", "benchmarks", "astitch_sim", "app"):
        for p in sorted((ROOT / top).rglob("*.py")):
            if p.name == "numba_compat.py":
                continue
            for i, line in enumerate(p.read_text().splitlines(), 1):
                if "numba.cuda.core" in line and ("import" in line or "from" in line):
                    offenders.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, "use gpu_backend.numba_compat instead:\n" + "\n".join(offenders)


def test_simulator_flag_read_where_numba_cuda_core_config_is_missing(monkeypatch):
    """An older numba-cuda: ``numba.cuda.core.config`` cannot be imported; the flag comes from numba.core."""
    import numba.cuda.core as core

    from gpu_backend import launch, numba_compat
    monkeypatch.delattr(core, "config", raising=False)
    monkeypatch.setitem(sys.modules, "numba.cuda.core.config", None)     # import raises ImportError
    with pytest.raises(ImportError):
        from numba.cuda.core import config  # noqa: F401
    import numba.core.config
    assert numba_compat.numba_config() is numba.core.config
    assert launch.simulator() is True                 # tests run in the simulator (tests/conftest.py)


# -- 1. the toolchain on a CUDA 13 image: nvidia/cu13 wheels, /usr/local/cuda, CUDA_HOME ------------------

def _touch(base: Path, rels) -> None:
    for rel in rels:
        f = base / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("")


def test_toolchain_found_in_the_cuda13_wheel_layout(tmp_path):
    from gpu_backend import toolchain
    nvidia = tmp_path / "site-packages" / "nvidia"
    _touch(nvidia, ["cu13/bin/ptxas", "cu13/lib/libcudadevrt.a", "cu13/nvvm/lib64/libnvvm.so",
                    "cu13/nvvm/libdevice/libdevice.10.bc", "cu13/bin/nvdisasm"])
    found = toolchain.where(roots=[nvidia], toolkits=[])
    assert found == {k: str(nvidia / "cu13" / rel) for k, rel in
                     (("ptxas", "bin/ptxas"), ("cudadevrt", "lib/libcudadevrt.a"), ("nvvm", "nvvm/lib64/libnvvm.so"),
                      ("libdevice", "nvvm/libdevice/libdevice.10.bc"), ("nvdisasm", "bin/nvdisasm"))}


def test_toolchain_found_in_a_cuda_toolkit_folder(tmp_path, monkeypatch):
    """The image's nvcc 13 toolkit (/usr/local/cuda) has ptxas, the device runtime, NVVM and libdevice."""
    from gpu_backend import toolchain
    cuda = tmp_path / "cuda"
    _touch(cuda, ["bin/ptxas", "lib64/libcudadevrt.a", "nvvm/lib64/libnvvm.so", "nvvm/libdevice/libdevice.10.bc"])
    assert toolchain.locate("ptxas", roots=[], toolkits=[cuda]) == str(cuda / "bin/ptxas")
    assert toolchain.locate("cudadevrt", roots=[], toolkits=[cuda]) == str(cuda / "lib64/libcudadevrt.a")
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert toolchain.toolkit_dirs()[0] == cuda
    assert toolchain.locate("nvvm", roots=[]) == str(cuda / "nvvm/lib64/libnvvm.so")


def test_cuda_home_named_for_numba_only_where_no_wheel_has_nvvm(tmp_path, monkeypatch):
    from gpu_backend import toolchain
    monkeypatch.delenv("CUDA_HOME", raising=False)
    cuda = tmp_path / "cuda"
    _touch(cuda, ["nvvm/lib64/libnvvm.so", "nvvm/libdevice/libdevice.10.bc"])
    bare = tmp_path / "nvidia_without_nvvm"
    _touch(bare, ["cu13/lib/libnvrtc.so.13"])
    assert toolchain.cuda_home_for_numba(roots=[bare], toolkits=[tmp_path / "none", cuda]) == str(cuda)
    wheel = tmp_path / "nvidia_with_nvvm"
    _touch(wheel, ["cu13/nvvm/lib64/libnvvm.so"])
    assert toolchain.cuda_home_for_numba(roots=[wheel], toolkits=[cuda]) is None
    monkeypatch.setenv("CUDA_HOME", "/somewhere")
    assert toolchain.cuda_home_for_numba(roots=[bare], toolkits=[cuda]) is None


# -- 3. the compute-sanitizer child imports the checkout and ends inside one device command ----------------

def test_sanitizer_child_imports_this_checkout_without_an_installed_package(tmp_path):
    """The child runs from a temporary folder with no PYTHONPATH of its own (the image installs nothing)."""
    import os

    from benchmarks import sanitizer
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env = sanitizer.child_env(tmp_path / "cache", simulator=True, base=base)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    assert "NUMBA_ENABLE_CUDASIM" not in sanitizer.child_env(tmp_path / "c2", base={"NUMBA_ENABLE_CUDASIM": "1"})
    rec = sanitizer.run_plain(tmp_path / "child", cases=sanitizer.SANITIZED_SIM[:1], simulator=True)
    assert rec["ok"], rec["log"]
    assert rec["imported_from"] and Path(rec["imported_from"]).resolve().is_relative_to(ROOT), rec["imported_from"]


def test_sanitizer_runs_fit_one_device_command_and_sample_a_stitched_cooperative_kernel():
    import astitch_sim as asim
    from benchmarks import sanitizer
    assert 2 * sanitizer.TIMEOUT_S < 540           # memcheck + racecheck inside one 10-minute command, with room
    coop = [c for c in sanitizer.SANITIZED
            if c[2] == "astitch" and any(k.cooperative for k in asim.compile(asim.workload(c[0], **c[1]), c[2],
                                                                                "H100").kernels)]
    assert coop, "the sample needs a stitched kernel with a grid barrier"


# -- 4, 5. the PyTorch baselines: global_norm runs, every case really compiles ------------------------------

def _torch():
    return pytest.importorskip("torch", reason="the PyTorch baselines need torch")


def test_global_norm_torch_baseline_matches_the_reference():
    """torch.maximum(x, 1.0) with a Python float raised TypeError: global_norm's torch baselines always failed."""
    import numpy as np

    import astitch_sim as asim
    from astitch_sim.workloads import workload_inputs
    from benchmarks import baselines as B
    torch = _torch()
    for shape in ({"rows": 8, "cols": 16}, {"rows": 2, "cols": 4}):       # norm above 1 and (scaled) below
        g = asim.workload("global_norm", **shape)
        ins = workload_inputs(g, 0)
        if shape["rows"] == 2:
            ins = [x * np.float32(1e-3) for x in ins]
        got = B.bind("global_norm", B.TorchOps())(*(torch.from_numpy(x) for x in ins))
        for o, r in zip(got, asim.reference(g, ins), strict=True):
            np.testing.assert_allclose(o.numpy(), r, rtol=1e-5)


def test_torch_compile_compiles_every_case_past_dynamos_recompile_limit():
    """Ten workloads through one code object (bind's closure): each must reach the compiler backend."""
    import numpy as np

    import astitch_sim as asim
    from astitch_sim.workloads import workload_inputs
    from benchmarks import baselines as B
    torch = _torch()
    names = ["layernorm", "rmsnorm", "softmax", "log_softmax", "bias_gelu", "swiglu", "batchnorm_train",
             "global_norm", "row_reduce", "column_reduce"]
    assert len(names) > 8                 # dynamo's default recompile limit
    for name in names:
        graphs = []

        def backend(gm, example_inputs, graphs=graphs):
            graphs.append(gm)
            return gm.forward
        g = asim.workload(name, **({"rows": 4, "cols": 8} if name != "swiglu" else {}))
        ins = workload_inputs(g, 0)
        f = B.torch_compiled(B.bind(name, B.TorchOps()), backend=backend)
        out = f(*(torch.from_numpy(np.ascontiguousarray(x)) for x in ins))
        assert graphs, f"{name}: torch.compile ran eagerly (dynamo gave up recompiling)"
        for o, r in zip(out, asim.reference(g, ins), strict=True):
            np.testing.assert_allclose(o.detach().numpy(), r, rtol=1e-4, atol=1e-5)
