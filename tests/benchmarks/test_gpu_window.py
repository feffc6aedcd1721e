"""What would break the GPU window (issue 29), checked without a GPU.

Each test here stands for one thing the lent GPU machine's image does differently
from this one (an older numba-cuda, CUDA 13 wheels, the toolkit in /usr/local/cuda,
no astitch_sim installed) or for a measurement mistake the runbook must not make.
They run in Numba's CUDA simulator and on the CPU; none needs a GPU.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from anchor import TESTS_FILE

ROOT = Path(TESTS_FILE).resolve().parent.parent


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

    from gpu_backend.launch import plans as launch
    from gpu_backend import numba_compat
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
    from gpu_backend.machine import toolchain
    nvidia = tmp_path / "site-packages" / "nvidia"
    _touch(nvidia, ["cu13/bin/ptxas", "cu13/lib/libcudadevrt.a", "cu13/nvvm/lib64/libnvvm.so",
                    "cu13/nvvm/libdevice/libdevice.10.bc", "cu13/bin/nvdisasm"])
    found = toolchain.where(roots=[nvidia], toolkits=[])
    assert found == {k: str(nvidia / "cu13" / rel) for k, rel in
                     (("ptxas", "bin/ptxas"), ("cudadevrt", "lib/libcudadevrt.a"), ("nvvm", "nvvm/lib64/libnvvm.so"),
                      ("libdevice", "nvvm/libdevice/libdevice.10.bc"), ("nvdisasm", "bin/nvdisasm"))}


def test_toolchain_found_in_a_cuda_toolkit_folder(tmp_path, monkeypatch):
    """The image's nvcc 13 toolkit (/usr/local/cuda) has ptxas, the device runtime, NVVM and libdevice."""
    from gpu_backend.machine import toolchain
    cuda = tmp_path / "cuda"
    _touch(cuda, ["bin/ptxas", "lib64/libcudadevrt.a", "nvvm/lib64/libnvvm.so", "nvvm/libdevice/libdevice.10.bc"])
    assert toolchain.locate("ptxas", roots=[], toolkits=[cuda]) == str(cuda / "bin/ptxas")
    assert toolchain.locate("cudadevrt", roots=[], toolkits=[cuda]) == str(cuda / "lib64/libcudadevrt.a")
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert toolchain.toolkit_dirs()[0] == cuda
    assert toolchain.locate("nvvm", roots=[]) == str(cuda / "nvvm/lib64/libnvvm.so")


def test_cuda_home_named_for_numba_only_where_no_wheel_has_nvvm(tmp_path, monkeypatch):
    from gpu_backend.machine import toolchain
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
    from astitch_sim.frontends.workloads import workload_inputs
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
    from astitch_sim.frontends.workloads import workload_inputs
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


# -- 6, 7. the benchmark measures plans after apply_compiler, and validates once per case -------------------

def test_benchmark_measures_plans_after_apply_compiler_and_prepares_the_reference_once(tmp_path, monkeypatch):
    from gpu_backend.machine import toolchain
    if not toolchain.available():
        pytest.skip(toolchain.missing_reason())
    from benchmarks import gpu_bench as gb
    from benchmarks import validation
    made = []
    real_init = validation.Validator.__init__

    def counting_init(self, *a, **k):
        made.append(self)
        real_init(self, *a, **k)
    monkeypatch.setattr(validation.Validator, "__init__", counting_init)
    res = gb.run_suite(str(tmp_path), simulator=True, only=["paper_fig7"], strategies=["xla", "astitch"],
                       baselines=[], plot=False, apply_compiler=True)
    runs = res["cases"][0]["runs"]
    assert [r["name"] for r in runs] == ["xla", "astitch"]
    for r in runs:
        assert r["validation"]["ok"], r
        assert r["compiler"]["applied"] is True, r.get("compiler")
        assert r["compiler"]["kernels"] and all(k["registers"] for k in r["compiler"]["kernels"])
    assert res["settings"]["apply_compiler"] is True
    assert len(made) == 1 and made[0].checks == len(runs)       # one reference preparation, one check per run


def test_chunked_validation_agrees_with_the_whole_array_computation(monkeypatch):
    import numpy as np

    from benchmarks import validation
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((37, 11)).astype(np.float32)
    ref[3, 4] = np.nan
    out = (ref + 1e-3 * rng.standard_normal(ref.shape)).astype(np.float32)
    out[3, 4] = np.nan
    monkeypatch.setattr(validation, "CHUNK", 50)            # many chunks, a ragged last one
    v = validation.Validator([ref], ["y"]).check([out])
    o64, r64 = out.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    both = ~(np.isnan(o64) | np.isnan(r64))
    want = np.linalg.norm(o64[both] - r64[both]) / np.linalg.norm(r64[both])
    e = v["outputs"][0]
    assert e["rel_l2"] == pytest.approx(want, rel=1e-9)
    assert e["nan"] == e["nan_reference"] == 1
    assert not v["ok"]                                        # 1e-3 noise is far above the 1e-4 tolerance
    assert validation.Validator([ref], ["y"]).check([ref.copy()])["ok"]
    bad = ref.copy()
    bad[0, 0] = np.nan                                        # a NaN the reference does not have
    assert not validation.Validator([ref], ["y"]).check([bad])["ok"]


# -- 8. the headline is astitch against jax.jit and torch.compile -----------------------------------------

def _fake_gpu_results():
    def run(name, us, spread=0.02):
        samples = [us * (1 + spread * k) for k in (-1, -0.5, 0, 0.5, 1)]
        return {"kind": "plan" if name in ("xla", "astitch") else "baseline", "name": name, "gpu_us": us,
                "gpu_us_samples": samples, "validation": {"ok": True, "max_rel_l2": 1e-7}}
    cases = [{"key": "a", "title": "", "shape": {}, "min_bytes": {"total": 1 << 20}, "runs": [
                 run("xla", 20.0), run("astitch", 10.0), run("jax.jit", 15.0), run("torch.compile", 10.1)]},
             {"key": "b", "title": "", "shape": {}, "min_bytes": {"total": 1 << 20}, "runs": [
                 run("xla", 30.0), run("astitch", 40.0), run("jax.jit", 20.0), run("torch.compile", 80.0)]}]
    return {"mode": "gpu", "gpu_preset": "H100", "settings": {"shapes": "full", "reps": 5, "warmup": 1,
                                                               "flush_bytes": 1 << 28},
            "provenance": {"device": "TEST FIXTURE (not measured)"}, "copy": {}, "cases": cases}


def test_headline_is_astitch_against_jax_jit_and_torch_compile(tmp_path):
    from benchmarks import gpu_bench as gb
    res = _fake_gpu_results()
    s = gb.summarize(res)
    h = s["headline"]
    assert h["against"][:2] == ["jax.jit", "torch.compile"]
    a = {r["case"]: r["against"] for r in h["per_case"]}
    assert a["a"]["jax.jit"]["verdict"] == "faster" and a["a"]["jax.jit"]["speedup"] == pytest.approx(1.5)
    assert a["a"]["torch.compile"]["verdict"] == "within spread"        # 10.0 vs 10.1 with 2% spread
    assert a["b"]["jax.jit"]["verdict"] == "slower" and a["b"]["torch.compile"]["verdict"] == "faster"
    assert h["geomean_speedup"]["jax.jit"] == pytest.approx((1.5 * 0.5) ** 0.5)
    res["summary"] = s
    gb.write_markdown(res, str(tmp_path / "r.md"))
    sections = [ln for ln in (tmp_path / "r.md").read_text().splitlines() if ln.startswith("## ")]
    assert "jax.jit and torch.compile" in sections[0], sections


# -- 9. JAX's pipelined timing: batches long enough, a spread reported ---------------------------------------

def test_pipelined_timing_sizes_batches_and_reports_the_spread():
    """A fake GPU queue: f costs 10 us, the flush 100 us, every batch pays 0.5 ms of host noise."""
    from benchmarks import jax_timing
    now = [0.0]
    rng = __import__("random").Random(1)

    def clock():
        return now[0]

    def queue_both(n):
        now[0] += n * 110e-6 + rng.uniform(0, 5e-4)

    def queue_alone(n):
        now[0] += n * 100e-6 + rng.uniform(0, 5e-4)

    out = jax_timing.pipelined(queue_both, queue_alone, lambda: None, clock=clock)
    assert out["calls_per_batch"] * 110e-6 >= jax_timing.MIN_BATCH_S * 0.9
    assert len(out["gpu_us_samples"]) == jax_timing.BATCHES
    assert out["gpu_us"] == pytest.approx(10.0, rel=0.3)       # 0.5 ms noise over >= 20 ms batches
    sp = out["spread"]
    assert sp["p25"] <= out["gpu_us"] <= sp["p75"] and sp["iqr_rel"] is not None


# -- 10. --only is checked before the copy measurement; the L2 is flushed by reading -----------------------

def test_only_typo_fails_before_the_copy_measurement(tmp_path, monkeypatch):
    from benchmarks import gpu_bench as gb

    def no_copy(*a, **k):
        raise AssertionError("the copy bandwidth was measured before --only was checked")
    monkeypatch.setattr(gb.Clock, "copy_bandwidth", no_copy)
    monkeypatch.setattr(gb, "choose_mode", lambda *a: pytest.fail("the GPU was probed before --only was checked"))
    with pytest.raises(SystemExit, match="unknown case"):
        gb.run_suite(str(tmp_path), simulator=True, only=["layernrom"], plot=False)


def test_l2_flush_reads_and_leaves_the_buffer_clean():
    import numpy as np

    from benchmarks import gpu_bench as gb
    clock = gb.Clock(True, 1 << 20, reps=1, warmup=0)
    before = clock.flush_buf.copy_to_host()
    clock.flush()
    clock.flush()
    assert np.array_equal(clock.flush_buf.copy_to_host(), before)        # nothing written: no dirty lines
    assert np.all(before == 1.0)


# -- what the first GPU window (2026-11-27, H200) found ------------------------------------------------------

def test_numpy_aliases_numba_cuda_looks_up_are_restored(monkeypatch):
    """numba-cuda 0.30.4 looks up ``np.row_stack`` when it compiles; NumPy 2.5 removed it, and on the
    window's image every kernel compilation failed with an AttributeError until the alias was put back."""
    import numpy as np

    from gpu_backend import numba_compat
    monkeypatch.delattr(np, "row_stack", raising=False)
    assert not hasattr(np, "row_stack")
    assert numba_compat.restore_numpy_aliases() == ["row_stack"]
    assert np.row_stack is np.vstack
    assert numba_compat.restore_numpy_aliases() == []          # present already: nothing to do


def test_the_alias_shim_runs_before_anything_the_runbook_compiles():
    """A child that imports only ``benchmarks`` (as ``python -m benchmarks.gpu_session`` does) or only
    ``gpu_backend`` sees the alias restored, on a NumPy that lacks it."""
    import subprocess
    code = ("import numpy as np\n"
            "if hasattr(np, 'row_stack'): del np.row_stack\n"
            "import {mod}\n"
            "assert np.row_stack is np.vstack, 'not restored'\n")
    for mod in ("benchmarks", "gpu_backend"):
        r = subprocess.run([sys.executable, "-c", code.format(mod=mod)], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
        assert r.returncode == 0, f"import {mod}: {r.stderr[-600:]}"


def test_l2_flush_of_the_torch_baselines_runs_on_this_torch():
    """``torch.sum(cache, out=sink)`` is a TypeError (torch 2.11 on the window, 2.13 here): every torch
    baseline failed at its first timed run.  The flush reads the buffer into a 0-d sink."""
    torch = _torch()
    from benchmarks.gpu_bench.baseline_runs import flush_l2
    cache = torch.arange(1000, dtype=torch.float32)
    sink = torch.empty((), dtype=torch.float32)
    before = cache.clone()
    flush_l2(torch, cache, sink)
    assert float(sink) == float(before.sum())
    assert torch.equal(cache, before)                          # read, not written


def test_an_error_spanning_lines_stays_in_its_table_cell():
    """torch's TypeError message spans lines: pasted raw, it broke results.md's tables."""
    from benchmarks.gpu_bench.report import table_cell
    msg = "TypeError: sum() received an invalid combination\n * (Tensor input | dim)\n" + "x" * 300
    cell = table_cell(msg)
    assert "\n" not in cell and "\\| dim" in cell
    assert not re.search(r"(?<!\\)\|", cell)        # every bar escaped: the row keeps its columns
    assert len(cell) <= 120 and cell.endswith("…")
    assert table_cell("short") == "short"


def test_calibration_leaves_out_a_measurement_of_a_plan_the_planner_no_longer_draws():
    """The window measured layernorm backward's astitch plan with its column stage on 24 blocks (3.6 ms); the
    planner now splits that stage.  Fitting the new plan's counters to the old plan's time would teach the
    cost model nonsense: a run records its plan's signature, and calibration compares it with today's."""
    import astitch_sim as asim
    from benchmarks.calibrate.counters import samples_from_results
    from astitch_sim.hardware.measured import plan_signature
    shape = {"rows": 64, "cols": 96}
    sig = plan_signature(asim.compile(asim.workload("layernorm", **shape), strategy="xla", gpu="H200"))
    assert sig == plan_signature(asim.compile(asim.workload("layernorm", **shape), strategy="xla", gpu="H200"))

    def results(signature):
        run = {"kind": "plan", "name": "xla", "strategy": "xla", "gpu_us": 10.0, "validation": {"ok": True},
               "kernels": [], "plan_signature": signature}
        return {"gpu_preset": "H200", "cases": [{"key": "ln", "workload": "layernorm", "shape": shape,
                                                 "runs": [run]}]}
    assert len(samples_from_results(results(sig))) == 1
    assert samples_from_results(results("0123456789abcdef")) == []
    assert len(samples_from_results(results(None))) == 1          # older results: no signature, kept


def test_calibration_predicts_the_plan_the_run_timed_after_apply_compiler():
    """A run that timed its plan after apply_compiler (its ``compiler`` record says ``applied``) is predicted from
    the applied plan: ptxas's registers and instruction counts are on its kernels, so the cost model's occupancy
    and issue terms price the code the GPU ran; a run without the record keeps the plan as compiled.  The layer norm
    4096x768 astitch kernel: ptxas takes 80 registers where the plan estimated 32, fewer blocks stay resident, and
    the prediction rises (9.2 -> 12.6 us on H200)."""
    from toolchain_gate import require_disassembler
    require_disassembler()
    import astitch_sim as asim
    from benchmarks.calibrate.counters import samples_from_results
    from benchmarks.calibrate.model import predict_sample
    shape = {"rows": 4096, "cols": 768}

    def results(compiler):
        run = {"kind": "plan", "name": "astitch", "strategy": "astitch", "gpu_us": 10.0, "validation": {"ok": True},
               "kernels": [{"gpu_us": 10.0}], "compiler": compiler}
        return {"gpu_preset": "H200", "cases": [{"key": "ln", "workload": "layernorm", "shape": shape,
                                                 "runs": [run]}]}
    (timed,) = samples_from_results(results({"applied": True}))
    (compiled,) = samples_from_results(results(None))
    assert all(k.machine is not None and k.machine.sass_instructions for k in timed.kernels)
    assert all(k.machine is None for k in compiled.kernels)
    (k,) = timed.kernels
    assert timed.stats[0].registers_per_thread == k.machine.registers > compiled.kernels[0].registers_per_thread
    plan = asim.compile(asim.workload("layernorm", **shape), "astitch", "H200")
    assert [k.name for k in timed.kernels] == [k.name for k in plan.kernels]
    assert predict_sample(timed)[0] > predict_sample(compiled)[0]     # fewer blocks resident: slower
