"""Tests of the GPU-measurement tooling (benchmarks/): gpu_bench in Numba's CUDA simulator, calibrate's fit
and statistics on SYNTHETIC data.

No GPU is needed or used: every timing here is either the simulator's wall clock (labelled so in the
outputs, and checked to be) or made up by the cost model from known constants (labelled SYNTHETIC).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
import sys

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.frontends.workloads import WORKLOADS, workload_inputs
from astitch_sim.simt import cost
from benchmarks import baselines as B
from benchmarks import calibrate as C
from benchmarks import suite as S
from anchor import TESTS_FILE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(TESTS_FILE)))


def _simulator_mode_or_skip():
    """gpu_bench picks the simulator before numba.cuda is imported; if it already is, on a GPU, skip."""
    from benchmarks import gpu_bench
    if "numba.cuda" not in sys.modules and gpu_bench.gpu_present():
        pytest.skip("a CUDA GPU is present: these simulator tests would switch this process's numba.cuda to the "
                    "simulator (and the GPU tests after them); see test_gpu_bench_on_the_device")
    try:
        mode = gpu_bench.choose_mode(True)
    except SystemExit as e:
        pytest.skip(str(e))
    assert mode == "simulator"
    return gpu_bench


# ---------------------------------------------------------------------------
# suite and baselines (no GPU, no backend)
# ---------------------------------------------------------------------------

def test_suite_keys_unique_and_every_case_compiles_at_every_shape():
    assert len({c.key for c in S.SUITE}) == len(S.SUITE)
    wanted = {"layernorm", "rmsnorm", "softmax", "bias_gelu", "layernorm_backward", "batchnorm_train",
              "adam_step", "global_norm", "cross_entropy", "paper_fig7"}
    assert wanted <= {c.workload for c in S.SUITE}
    assert S.BY_KEY["adam_step_110M"].shape == {"size": 110_000_000}
    assert S.BY_KEY["softmax_750000x32"].irregular and S.BY_KEY["softmax_64x30000"].irregular
    for c in S.SUITE:
        for mode in ("full", "quick", "sim"):
            g = c.graph(mode)
            for strategy in asim.STRATEGIES:
                asim.compile(g, strategy=strategy, gpu="H100")
        assert S.graph_elements(c.graph("sim")) <= 4096, f"{c.key}: simulator shape too big"


def test_min_bytes_counts_inputs_and_outputs_once():
    g = asim.workload("layernorm", rows=4, cols=8)
    assert S.graph_bytes(g) == ((4 * 8 + 8 + 8) * 4, 4 * 8 * 4)
    big = asim.workload("adam_step", size=110_000_000)
    assert sum(S.graph_bytes(big)) == 7 * 110_000_000 * 4          # 4 inputs + 3 outputs, f32


@pytest.mark.parametrize("name", sorted(B.FUNCTIONS))
def test_baseline_formulas_match_the_reference(name):
    """The jax/torch baselines are these formulas; with numpy they must give asim.reference's outputs."""
    shape = {k: (5 if i == 0 else 7) for i, k in enumerate(WORKLOADS[name].defaults)}
    if name == "row_reduce":
        shape = {"rows": 5, "cols": 32}
    g = asim.workload(name, **shape)
    x = workload_inputs(g, seed=3)
    ref = asim.reference(g, x)
    out = B.bind(name, B.NumpyOps())(*x)
    assert len(out) == len(ref)
    for o, r in zip(out, ref, strict=True):
        o = np.asarray(o)
        assert o.shape == r.shape and o.dtype == np.float32
        assert np.linalg.norm(o.astype(np.float64) - r) <= 1e-5 * max(np.linalg.norm(r), 1e-30)


# ---------------------------------------------------------------------------
# gpu_bench in the CUDA simulator
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_gpu_bench_simulator_run_structure_provenance_and_validation(tmp_path):
    gb = _simulator_mode_or_skip()
    import gpu_backend  # noqa: F401  (imported after the simulator is chosen; a broken backend fails here)
    out = tmp_path / "sim"
    res = gb.run_suite(str(out), simulator=True, only=["layernorm_16384x768", "paper_fig7"], baselines=[],
                       commit="test-commit", argv=["-m", "benchmarks.gpu_bench", "--simulator"])
    saved = json.loads((out / "results.json").read_text())
    assert saved["format"] == gb.FORMAT and saved["mode"] == "simulator"
    assert saved["timing_note"] == gb.SIM_NOTE
    prov = saved["provenance"]
    for key in ("date", "command", "git_commit", "source_digest", "versions", "device", "python"):
        assert key in prov, key
    assert prov["git_commit"] == "test-commit"
    assert prov["versions"]["numba"] and prov["versions"]["numpy"]
    assert gb.SIM_NOTE in prov["device"]
    assert saved["gpu_preset"] == "H100" and saved["settings"]["shapes"] == "sim"
    assert saved["copy"]["note"] == gb.SIM_NOTE
    assert [c["key"] for c in saved["cases"]] == ["layernorm_16384x768", "paper_fig7"]
    for c in saved["cases"]:
        assert c["shape"] == S.BY_KEY[c["key"]].sim
        plans = [r for r in c["runs"] if r["kind"] == "plan"]
        assert [r["strategy"] for r in plans] == list(asim.STRATEGIES)
        for r in plans:
            assert "error" not in r, r.get("error")
            assert r["validation"]["ok"], (c["key"], r["strategy"], r["validation"])
            assert r["validation"]["max_rel_l2"] <= gb.REL_TOL
            assert r["timing_note"] == gb.SIM_NOTE
            assert r["gpu_us"] > 0 and len(r["kernels"]) >= 1
            assert all(k["gpu_us"] > 0 for k in r["kernels"])
            # no bandwidth or speedup is derived from simulator times
            assert "bandwidth_gbs" not in r and "speedup_vs_xla" not in r
        # the paper's kernel counts for Figure 7 (XLA 4, TVM 3, AStitch 1)
        if c["key"] == "paper_fig7":
            assert {r["strategy"]: len(r["kernels"]) for r in plans}["astitch"] == 1
    md = (out / "results.md").read_text()
    assert gb.SIM_NOTE in md and "layernorm_16384x768" in md
    assert "no targets" in saved["summary"]["note"]
    assert not (out / "plot.png").exists()
    assert res["cases"][0]["key"] == "layernorm_16384x768"


def test_plan_runner_is_rerunnable_and_agrees_with_gpu_backend_run():
    """Timing repeats a plan on the same buffers: split-reduction results must be refilled each time."""
    gb = _simulator_mode_or_skip()
    import gpu_backend
    g = S.BY_KEY["global_norm_1024x1024"].graph("sim")
    # the paper's raw plan: at this test size the launch search (and never-behind) keep one block per row
    plan = asim.compile(g, strategy="astitch", gpu="H100", never_behind=False, launch_search=False)
    assert plan.kernels[0].global_barriers >= 1          # the case this test is about: atomics + grid barrier
    assert any(s.mapping.combine == "atomic" for s in plan.kernels[0].stages)
    x = workload_inputs(g, seed=1)
    ref = asim.reference(g, x)
    runner = gb.make_plan_runner(plan, x)
    first = runner.fetch()
    second = runner.fetch()                              # atomics would double without the refill
    direct = gpu_backend.run(plan, x)
    for a, b, r, d in zip(first, second, ref, direct, strict=True):
        assert gb.compare([a], [r], ["o"])["ok"] and gb.compare([b], [r], ["o"])["ok"]
        np.testing.assert_array_equal(a, d)


def test_compare_catches_wrong_shape_nan_and_error():
    from benchmarks import gpu_bench as gb
    r = np.ones((3, 4), np.float32)
    assert gb.compare([r.copy()], [r], ["y"])["ok"]
    bad = r.copy()
    bad[0, 0] = np.nan
    assert not gb.compare([bad], [r], ["y"])["ok"]
    assert not gb.compare([r * 1.01], [r], ["y"])["ok"]
    assert not gb.compare([r[:2]], [r], ["y"])["ok"]
    assert not gb.compare([r], [r, r], ["y", "z"])["ok"]


def test_markdown_and_summary_from_a_synthetic_gpu_results_dict(tmp_path):
    """Rendering only: a hand-made GPU-mode results dict (SYNTHETIC device name), targets computed from it."""
    from benchmarks import gpu_bench as gb

    def run(name, us, kind="plan"):
        return {"kind": kind, "name": name, "strategy": name if kind == "plan" else None, "gpu_us": us,
                "e2e_us": us + 30, "validation": {"ok": True, "max_rel_l2": 1e-7}, "kernels": [{"gpu_us": us}]}
    case = {"key": "softmax_64x30000", "workload": "softmax", "shape": {"rows": 64, "cols": 30000},
            "irregular": True, "large": True, "min_bytes": {"inputs": 1000, "outputs": 1000, "total": 2000},
            "runs": [run("xla", 40.0), run("astitch", 10.0), run("jax.jit", 20.0, "baseline"),
                     run("torch.compile", 8.0, "baseline")]}
    gb.derive(case, copy_gbs=1.0)
    a = case["runs"][1]
    assert a["speedup_vs_xla"] == pytest.approx(4.0)
    assert a["bandwidth_gbs"] == pytest.approx(2000 / 10e3)
    assert a["pct_of_copy"] == pytest.approx(20.0)
    results = {"format": gb.FORMAT, "mode": "synthetic", "gpu_preset": "H100", "cases": [case],
               "provenance": {"device": "SYNTHETIC (not measured)", "date": "2026-01-01"},
               "settings": {"shapes": "full", "reps": 20, "warmup": 3, "flush_bytes": 2**28},
               "copy": {"bandwidth_gbs": 1.0, "bytes": 2**30}}
    s = gb.summarize(results)
    assert s["astitch_vs_xla_geomean"] == pytest.approx(4.0) and s["astitch_vs_xla_ok"]
    verdicts = {r["baseline"]: r["ok"] for r in s["irregular_vs_baselines"]}
    assert verdicts == {"jax.jit": True, "torch.compile": False}
    assert s["large_pct_of_copy"][0]["ok"] is False
    gb.write_outputs(results, str(tmp_path), plot=False)
    md = (tmp_path / "results.md").read_text()
    assert "| astitch | 1 | 10.0 |" in md and "4.00x" in md


# ---------------------------------------------------------------------------
# calibrate: statistics on hand examples
# ---------------------------------------------------------------------------

def test_ranks_and_spearman_hand_examples():
    np.testing.assert_array_equal(C.ranks([10, 30, 20, 20]), [1, 4, 2.5, 2.5])
    # no ties: rho = 1 - 6 sum d^2 / (n (n^2 - 1)) = 1 - 6*4/120 = 0.8
    assert C.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # ties: ranks x = [1, 2.5, 2.5, 4]; Pearson of ranks = 4.5 / sqrt(4.5 * 5)
    assert C.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert C.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert C.spearman([1, 10, 100], [2, 3, 1000]) == pytest.approx(1.0)      # ranks only
    assert math.isnan(C.spearman([1], [1]))
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x, y = rng.random(30), rng.integers(0, 5, 30)
    assert C.spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x, y)[0])


def test_median_error_and_same_fastest_hand_examples():
    # |110-100|/100, |90-100|/100, 0, |150-100|/100 -> median of (0.1, 0.1, 0, 0.5) = 0.1
    assert C.median_abs_rel_error([110, 90, 100, 150], [100, 100, 100, 100]) == pytest.approx(0.1)
    groups = {"a": {"xla": (10, 12), "astitch": (5, 6)},            # both pick astitch
              "b": {"xla": (10, 5), "astitch": (8, 9)},             # model astitch, GPU xla
              "c": {"astitch": (1, 1)}}                             # one strategy: not counted
    assert C.same_fastest(groups) == (1, 2)


# ---------------------------------------------------------------------------
# calibrate: the fit recovers known constants (SYNTHETIC data)
# ---------------------------------------------------------------------------

TRUE = dict(measured_bandwidth_gbs=2500.0, kernel_launch_us=2.4, grid_barrier_us=1.3, block_start_ns=250.0,
            dram_latency_ns=950.0, expensive_rate=0.4)


def _synthetic_samples(n=60, seed=0):
    """Hand-made kernel counters spanning what each constant acts on (SYNTHETIC: nothing was measured)."""
    from astitch_sim.simt.stats import KernelStats, StageStats
    rng = np.random.default_rng(seed)
    gpu = asim.gpu("H100")
    samples = []
    for i in range(n):
        block = int(rng.choice([128, 256, 1024]))
        per_wave = gpu.blocks_per_wave(block)
        grid = int(rng.choice([1, 8, 64, per_wave, 4 * per_wave, 1000 * per_wave]))
        elements = int(grid * block * rng.choice([1, 4, 16]))
        bytes_ = int(elements * 4 * rng.choice([1, 2, 3]))
        flops = int(elements * rng.integers(1, 20))
        st = StageStats(0, "d", elements=elements, global_bytes_read=bytes_ // 2,
                        global_bytes_written=bytes_ - bytes_ // 2, global_sectors_read=bytes_ // 64,
                        global_sectors_written=bytes_ // 64, flops=flops,
                        expensive_flops=int(flops * rng.choice([0.0, 0.5, 0.9])),
                        grid_barriers=int(rng.integers(0, 3)) if grid <= per_wave else 0)
        ks = KernelStats(f"k{i}", "generated", grid, block, 0, 32, stages=[st])
        samples.append(C.Sample(f"case{i % 7}", f"w{i % 7}", {}, ["xla", "astitch"][i % 2], gpu, [None], [ks],
                                [None], 0.0))
    with C.override_constants("H100", TRUE):
        for s in samples:
            s.measured_us = C.predict_sample(s)
            s.measured_total_us = sum(s.measured_us)
    return samples


def test_fit_recovers_known_constants_from_synthetic_counters():
    samples = _synthetic_samples()
    before = dict(C.current_constants(asim.gpu("H100")))
    fit = C.fit_constants(samples)
    assert fit.success, fit.message
    for k, v in TRUE.items():
        assert fit.params[k] == pytest.approx(v, rel=1e-3), (k, fit.params[k], v)
    assert fit.residual_rms < 1e-6
    assert C.current_constants(asim.gpu("H100")) == before      # the real table is left as it was
    cc = C.crosscheck(samples, fit.params)
    assert cc["spearman"] == pytest.approx(1.0, abs=1e-3) and cc["median_rel_error"] < 1e-6
    # kernel by kernel too: every sample's one kernel was timed
    assert cc["kernels"] == len(samples) and cc["kernel_rms_log"] < 1e-6 and cc["kernel_median_rel_error"] < 1e-6
    off = C.crosscheck(samples)                                     # the table's constants, not TRUE
    assert off["kernel_rms_log"] > 0.01 and off["kernel_median_rel_error"] > 0.01


def test_fit_flags_a_constant_the_data_cannot_see():
    samples = _synthetic_samples()
    for s in samples:                       # no grid barriers anywhere: grid_barrier_us is unidentifiable
        s.stats[0].stages[0].grid_barriers = 0
        with C.override_constants("H100", TRUE):
            s.measured_us = C.predict_sample(s)
    fit = C.fit_constants(samples)
    assert fit.sensitivity["grid_barrier_us"] < 1e-6 and "grid_barrier_us" in fit.frozen
    assert fit.params["grid_barrier_us"] == fit.initial["grid_barrier_us"]        # left as it was
    assert fit.params["measured_bandwidth_gbs"] == pytest.approx(TRUE["measured_bandwidth_gbs"], rel=1e-3)


def test_snippet_is_pasteable_python():
    text = C.snippet("H100", {"kernel_launch_us": 2.0, "measured_bandwidth_gbs": 2900.0}, "x/results.json")
    ns = {}
    exec("table = {\n" + text + "\n}", ns)
    entry = ns["table"]["H100"]
    assert entry["kernel_launch_us"] == 2.0 and entry["measured_bandwidth_gbs"] == 2900.0
    assert set(cost.COST_CONSTANTS["H100"]) <= set(entry)


def test_calibrate_end_to_end_on_a_synthetic_results_file(tmp_path):
    """SYNTHETIC results.json (times = cost model with TRUE constants) -> calibrate -> TRUE recovered."""
    cases = [("layernorm_16384x768", "layernorm", {"rows": 16384, "cols": 768}),
             ("softmax_750000x32", "softmax", {"rows": 750000, "cols": 32}),
             ("softmax_64x30000", "softmax", {"rows": 64, "cols": 30000}),
             ("global_norm_1024x1024", "global_norm", {"rows": 1024, "cols": 1024}),
             ("bias_gelu_16384x3072", "bias_gelu", {"rows": 16384, "cols": 3072})]
    cap = 1 << 15                            # simulate small, extrapolate the counters (the --max-elements path)
    results = C.make_synthetic_results(cases, "H100", TRUE, max_elements=cap)
    assert results["mode"] == "synthetic" and "SYNTHETIC" in results["timing_note"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    cal = C.calibrate(str(path), max_elements=cap, loo=False, plot=False)
    for k, v in TRUE.items():
        assert cal["constants"][k] == pytest.approx(v, rel=1e-2), k
    assert "SYNTHETIC" in cal["banner"]
    saved = json.loads((tmp_path / "calibration.json").read_text())
    assert saved["constants"] == cal["constants"] and "COST_CONSTANTS" not in saved["snippet"]
    assert '"H100": dict(' in saved["snippet"]
    md = (tmp_path / "crosscheck.md").read_text()
    assert "SYNTHETIC" in md and "Spearman" in md and "simulated at" in md
    # the recovered constants are TRUE to 1%: two plans predicted within a fraction of a percent of each other
    # may swap (since the L1 serves re-reads, the DIEN softmax's astitch and inductor plans: 87.0 and 87.3 us)
    assert cal["crosscheck"]["after"]["spearman"] >= 0.999


def test_calibrate_refuses_simulator_results(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"format": "astitch-sim gpu_bench 1", "mode": "simulator", "gpu_preset": "H100",
                                "cases": []}))
    with pytest.raises(SystemExit, match="simulator"):
        C.calibrate(str(path), plot=False)


def test_extrapolated_counters_match_a_full_simulation():
    """The --max-elements extrapolation against the real thing at a shape small enough to simulate fully.
    The last case re-reads x (8 MiB) in each of its kernels: x overflows V100's 6 MiB L2 at the full size but
    fits it at the eighth simulated, so the L2 hits must be decided again at the full size, not kept from the
    small run."""
    for workload, shape, strategy, gpu in [("layernorm", {"rows": 512, "cols": 256}, "xla", "H100"),
                                           ("layernorm", {"rows": 512, "cols": 256}, "astitch", "H100"),
                                           ("softmax", {"rows": 4096, "cols": 32}, "astitch", "H100"),
                                           ("softmax", {"rows": 2048, "cols": 1024}, "xla", "V100")]:
        gpu = asim.gpu(gpu)
        plan, full, note = C.counters_for(workload, shape, strategy, gpu, max_elements=0)
        cap = S.graph_elements(asim.workload(workload, **shape)) // 8
        plan2, extra, note2 = C.counters_for(workload, shape, strategy, gpu, max_elements=cap)
        assert note == "" and "simulated at" in note2
        for a, b in zip(full, extra, strict=True):
            assert b.grid == a.grid and b.block == a.block
            assert b.global_bytes == pytest.approx(a.global_bytes, rel=0.02)
            assert b.flops == pytest.approx(a.flops, rel=0.02)
            # the caches' share at the full size: what the L2 and the L1 serve, hence what DRAM moves
            assert b.l2_read_bytes == pytest.approx(a.l2_read_bytes, rel=0.02, abs=4096)
            assert b.dram_bytes == pytest.approx(a.dram_bytes, rel=0.02)


def test_gpu_clock_arithmetic_with_fake_events():
    """The GPU branch of Clock.time_launches (events, per-kernel differences, dropping host-bound reps),
    driven by a fake event API whose 'GPU' advances by known durations: nothing here is a measurement."""
    from benchmarks import gpu_bench as gb

    class FakeGPU:
        now = 0.0                                   # ms

    class FakeHost:
        now = 0.0                                   # s: queueing a kernel takes 2 us of host time, always

    class Event:
        def record(self):
            self.t = FakeGPU.now

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return other.t - self.t

    class FakeCuda:
        @staticmethod
        def event():
            return Event()

        @staticmethod
        def synchronize():
            pass

    clock = object.__new__(gb.Clock)
    clock.cuda, clock.simulator, clock.reps, clock.warmup, clock.dropped = FakeCuda, False, 5, 1, 0
    clock.sleep_ns = 0                              # first repetition: no sleep, so it looks host-bound
    clock.flush = lambda: None
    clock.host_clock = lambda: FakeHost.now         # the real host clock would make the drop count depend on load

    def hold():
        FakeGPU.now += clock.sleep_ns / 1e6
    clock.hold = hold

    def kernel(us):
        def go():
            FakeGPU.now += us / 1e3
            FakeHost.now += 2e-6
        return go
    r = clock.time_launches([kernel(10.0), kernel(30.0), kernel(5.0)])
    # the sleepless repetition (6 us of queueing against 0 us held) was thrown away; the next sleeps 2.5x
    # the queueing time (15 us), which is enough
    assert clock.dropped == 1 and clock.sleep_ns == pytest.approx(15_000)
    assert r["reps"] == 5
    assert r["gpu_us"] == pytest.approx(45.0)
    assert r["kernel_us"] == pytest.approx([10.0, 30.0, 5.0])
    assert r["e2e_us"] == pytest.approx(6.0) and r["host_enqueue_us"] == pytest.approx(6.0)
    assert "events" in r["method"]


@pytest.mark.gpu
def test_gpu_bench_on_the_device(tmp_path):
    """On a machine with a CUDA GPU only: one small case through the real GPU path (events, sleep, flush)."""
    from benchmarks import gpu_bench as gb
    if "numba.cuda" in sys.modules:
        from numba import config
        if getattr(config, "ENABLE_CUDASIM", 0):
            pytest.skip("numba.cuda is in simulator mode in this process")
    elif not gb.gpu_present():
        pytest.skip("no CUDA GPU")
    res = gb.run_suite(str(tmp_path), simulator=False, only=["paper_fig7"], baselines=[], reps=5, warmup=1,
                       copy_bytes=64 * 2**20, argv=["-m", "benchmarks.gpu_bench", "(pytest)"])
    assert res["mode"] == "gpu" and res["copy"]["bandwidth_gbs"] > 0
    runs = [r for r in res["cases"][0]["runs"] if r["kind"] == "plan"]
    assert all(r["validation"]["ok"] for r in runs), [r.get("validation") or r.get("error") for r in runs]
    assert all(r["gpu_us"] > 0 and all(k["gpu_us"] > 0 for k in r["kernels"]) for r in runs)


def test_before_after_compares_two_commits_on_the_same_graphs(tmp_path):
    """benchmarks/before_after.py: the old commit runs in a temporary git worktree on the current tree's
    graphs; a case measured at both commits gets both numbers, 'behind' flags bytes or time over xla's."""
    import subprocess

    from benchmarks import before_after as BA
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    before = BA.measure_at("HEAD", "H100", only="hlo/groupnorm")
    (row,) = before["rows"]
    assert row["case"] == "hlo/groupnorm" and set(BA.STRATEGIES) <= set(row)
    after = {"commit": before["commit"], "rows": BA.measure("H100", only="hlo/groupnorm")}
    assert after["rows"] == before["rows"]          # the same code at both ends: the same numbers
    worse = json.loads(json.dumps(after))
    worse["rows"][0]["astitch"]["global_bytes"] = 2 * worse["rows"][0]["xla"]["global_bytes"]
    prov = {"what": "test", "date": "today", "command": "cmd", "gpu": "H100"}
    text = BA.markdown(after, worse, prov)
    assert "| hlo/groupnorm |" in text and "bytes 2.000x" in text
    assert "astitch behind xla in 0 before and 1 after" in text
    assert "| hlo/groupnorm | astitch |" in text and "1 plan outcome(s) moved" in text   # the second table
    # --strategies: every strategy named is measured at both ends (the old side gets them with the cases)
    six = BA.measure_at("HEAD", "H100", only="hlo/groupnorm", strategies=("xla", "fusionstitching", "astitch"))
    assert set(six["rows"][0]) == {"case", "xla", "fusionstitching", "astitch"}
    slower = json.loads(json.dumps(six))
    slower["rows"][0]["fusionstitching"]["predicted_us"] *= 2
    text = BA.markdown(six, slower, {**prov, "strategies": ["xla", "fusionstitching", "astitch"]})
    assert "| hlo/groupnorm | fusionstitching |" in text and "| 2.000 |" in text
    assert "astitch behind xla in 0 before and 0 after" in text
    assert "1 cases; 1 with a different plan outcome" in text       # a strategy of --strategies moved: counted
    with pytest.raises(SystemExit, match="unknown fusionstiching"):
        BA.main(["--before", "HEAD", "--strategies", "xla,astitch,fusionstiching"])
    with pytest.raises(SystemExit, match="must include xla and astitch"):
        BA.main(["--before", "HEAD", "--strategies", "xla,tvm"])


# ---------------------------------------------------------------------------
# the package layout: python -m benchmarks.<name>, no sys.path edits
# ---------------------------------------------------------------------------

#: the scripts of benchmarks/ (modules with a command line); suite and baselines are shared modules
SCRIPTS = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "benchmarks"))
                 if name.endswith(".py") and "__main__" in open(os.path.join(ROOT, "benchmarks", name)).read())


def test_every_benchmark_script_is_a_module_of_the_package_and_listed_in_its_docstring():
    import importlib

    import benchmarks
    assert len(SCRIPTS) >= 10, SCRIPTS
    for name in SCRIPTS + ["suite", "baselines"]:
        module = importlib.import_module(f"benchmarks.{name}")
        assert module.__name__ == f"benchmarks.{name}"
        assert f"``{name}``" in benchmarks.__doc__, f"benchmarks/__init__.py does not list {name}"
        files = sorted(Path(module.__path__[0]).glob("*.py")) if hasattr(module, "__path__") else [module.__file__]
        source = "".join(Path(f).read_text() for f in files)     # a script split into a package: all its parts
        assert f"python benchmarks/{name}.py" not in source, f"{name}: documents the old command"
        if name in SCRIPTS:
            assert f'prog="python -m benchmarks.{name}"' in source, f"{name}: --help names another command"


def test_a_benchmark_runs_as_python_dash_m_from_the_repository_root():
    """What the docs say to type: ``python -m benchmarks.<name>`` from the root, with no PYTHONPATH."""
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-m", "benchmarks.never_behind", "--help"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("usage: python -m benchmarks.never_behind")


def test_no_script_or_test_edits_sys_path():
    """Imports go through packages (``benchmarks``, ``astitch_sim``, ``gpu_backend``) and pytest's rootdir, never
    through a ``sys.path`` edit that makes a module's meaning depend on who imported it first."""
    import re
    edit = re.compile(r"\bsys\.path\.(insert|append|extend)\(|\bsys\.path\s*(\+=|=[^=])")
    # the one exception: a tutorial's Colab set-up cell, which runs only inside Colab, installs the clone into a
    # kernel that started before the install, and so must put the clone on that kernel's path
    colab = re.compile(r'sys\.path\.insert\(0, "/content/astitch-sim"\)')
    found = []
    for top in ("benchmarks", "tests", "app", "tutorials"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    for i, line in enumerate(open(path, encoding="utf-8"), 1):
                        if edit.search(line) and not colab.search(line):
                            found.append(f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)


def test_simt_speed_times_a_model_fixture_and_reports_it_against_the_goal():
    """Part (c) of the SIMT speed benchmark on one real model (JAX's cumsum positions): a row per strategy with
    the simulation's outputs matching the reference, and the table and its summary counting the rows over
    the 3x goal and the earlier 5x target from the measured ratios."""
    from benchmarks import simt_speed
    path = Path(ROOT) / "tests" / "fixtures" / "models" / "cumsum_positions.hlo"
    rows = simt_speed.part_c(1, ["xla", "astitch"], log=lambda msg: None, paths=[path])
    assert [r["strategy"] for r in rows] == ["xla", "astitch"]
    for r in rows:
        assert r["model"] == "cumsum_positions" and r["kernels"] >= 1 and r["max_rel_error"] < 1e-5
        assert r["ratio"] == pytest.approx(np.median(r["simulate_s"]) / np.median(r["reference_s"]))
    rows[0]["ratio"], rows[1]["ratio"] = 4.0, 2.0          # one over the goal, none over the earlier target
    rows[0]["reference_s"], rows[1]["reference_s"] = [0.002], [0.0005]     # one reference of at least 1 ms
    md = simt_speed.markdown({"provenance": {"date": "d", "cpu": "c", "cores": 2, "python": "3", "numpy": "2",
                                             "numba": "0", "git_commit": "x", "command": "python -m b"},
                              "repeat": 1, "a": [], "c": rows})
    assert "## (c)" in md and "| cumsum_positions |" in md and "4.0x **over**" in md
    assert "1 of 2 over 3x, 0 over 5x" in md
    assert "Rows whose reference takes at least 1 ms: 1 of 1 over 3x." in md


def _sweep_session(preset, caps, gpu_us, mode="synthetic", wrong_signature_cap=None):
    """A runbook session.json with one launch sweep of softmax <32768,32> (SYNTHETIC times), as
    ``benchmarks.launch_sweep.sweep`` records it: a row per cap, its plan's signature, its kernels' times."""
    import astitch_sim as asim
    from astitch_sim.hardware.measured import plan_signature
    shape = {"rows": 32768, "cols": 32}
    g = asim.workload("softmax", **shape)
    rows = []
    for cap, us in zip(caps, gpu_us, strict=True):
        plan = asim.compile(g, "astitch", preset, max_block_threads=cap)
        sig = "0" * 16 if cap == wrong_signature_cap else plan_signature(plan)
        rows.append({"max_block_threads": [cap], "plan_signature": sig, "compiler": {"applied": False},
                     "launches": [f"{k.grid}x{k.block}" for k in plan.kernels], "kernel_us": [us] * len(plan.kernels),
                     "gpu_us": us * len(plan.kernels), "validation": {"ok": True}, "ok": True})
    rows.append({**rows[0], "ok": False, "gpu_us": None})             # a run that did not validate
    return {"mode": mode, "gpu_preset": preset, "steps": {
        "launches:softmax_32768x32": {"ok": True, "case": "softmax_32768x32", "workload": "softmax", "shape": shape,
                                     "rows": rows},
        "probe": {"ok": True}}}


def test_launch_sweeps_join_the_calibration_data(tmp_path):
    """``calibrate --sweeps``: each validated row of a session's launch sweep is a sample of its own case
    ('<case> launches', strategy 'astitch@<cap>'), counted from the plan drawn at that cap; a row the planner no
    longer draws, or that did not validate, is left out; another GPU model's or another kind's session is
    refused."""
    caps, times = (128, 1024), (5.0, 7.0)
    session = _sweep_session("H100", caps, times, wrong_signature_cap=None)
    samples = C.samples_from_sweeps([session], "H100", max_elements=0)
    assert [(s.case, s.strategy, s.measured_total_us) for s in samples] == [
        ("softmax_32768x32 launches", "astitch@128", 5.0), ("softmax_32768x32 launches", "astitch@1024", 7.0)]
    import astitch_sim as asim
    for s, cap in zip(samples, caps, strict=True):      # the counters are the plan's at that cap: its grid and block
        plan = asim.compile(asim.workload("softmax", rows=32768, cols=32), "astitch", "H100", max_block_threads=cap)
        assert [k.block for k in s.kernels] == [k.block for k in plan.kernels]
        assert [ks.grid for ks in s.stats] == [k.grid for k in plan.kernels] and s.measured_us == [times[caps.index(cap)]]
    assert samples[0].kernels[0].block != samples[1].kernels[0].block    # two block sizes: two plans
    stale = _sweep_session("H100", caps, times, wrong_signature_cap=1024)
    assert [s.strategy for s in C.samples_from_sweeps([stale], "H100", max_elements=0)] == ["astitch@128"]
    with pytest.raises(asim.AStitchError, match="one GPU model at a time"):
        C.samples_from_sweeps([_sweep_session("H200", caps, times)], "H100")
    # end to end: a SYNTHETIC results file and the sweep, one crosscheck over both
    cases = [("softmax_750000x32", "softmax", {"rows": 750000, "cols": 32})]
    results = C.make_synthetic_results(cases, "H100", TRUE, max_elements=1 << 15)
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "session.json").write_text(json.dumps(session))
    cal = C.calibrate(str(tmp_path / "results.json"), max_elements=1 << 15, params=["kernel_launch_us"], loo=False,
                      plot=False, sweeps=[str(tmp_path / "session.json")])
    md = (tmp_path / "crosscheck.md").read_text()
    assert "| softmax_32768x32 launches | astitch@1024 | 7.0 |" in md
    assert cal["fit_points"] >= len(results["cases"][0]["runs"]) + 2
    with pytest.raises(asim.AStitchError, match="cannot read it"):
        C.calibrate(str(tmp_path / "results.json"), plot=False, sweeps=[str(tmp_path / "missing.json")])
    step = session["steps"]["launches:softmax_32768x32"]
    broken = {**session, "steps": {"launches:softmax_32768x32": {**step, "rows": [
        {k: v for k, v in r.items() if k != "gpu_us"} for r in step["rows"]]}}}
    with pytest.raises(asim.AStitchError, match="lacks gpu_us"):
        C.samples_from_sweeps([broken], "H100")
    (tmp_path / "gpu_session.json").write_text(json.dumps({**session, "mode": "gpu"}))
    with pytest.raises(SystemExit, match="of its own kind"):
        C.calibrate(str(tmp_path / "results.json"), plot=False, sweeps=[str(tmp_path / "gpu_session.json")])
