"""asim.gpu_measurements: GPU timings from benchmarks/results, never simulator wall clock."""
from __future__ import annotations

import json
import os

import pytest

import astitch_sim as asim
from astitch_sim.hardware.gpus import GPUS
from anchor import TESTS_FILE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(TESTS_FILE)))


def results_file(path, mode="gpu", device="NVIDIA H100 80GB HBM3", runs=None, fmt="astitch-sim gpu_bench 1"):
    os.makedirs(path, exist_ok=True)
    runs = runs if runs is not None else [
        {"kind": "plan", "name": "xla", "strategy": "xla", "gpu_us": 40.0, "validation": {"ok": True}},
        {"kind": "plan", "name": "astitch", "strategy": "astitch", "gpu_us": 20.0, "validation": {"ok": True}},
        {"kind": "plan", "name": "tvm", "strategy": "tvm", "gpu_us": 30.0, "validation": {"ok": False}},
        {"kind": "baseline", "name": "jax.jit", "gpu_us": 25.0, "validation": {"ok": True}},
    ]
    doc = {"format": fmt, "mode": mode, "gpu_preset": "H100",
           "provenance": {"device": device, "date": "2026-11-30T00:00:00+00:00", "git_commit": "abc123"},
           "cases": [{"key": "softmax-64x30000", "workload": "softmax", "shape": {"rows": 64, "cols": 30000},
                      "runs": runs}]}
    with open(os.path.join(path, "results.json"), "w") as f:
        json.dump(doc, f)


def test_every_gpu_measurement_in_the_repository_has_its_provenance():
    """Whatever benchmarks/results holds (none yet, or a GPU run committed later) is read without error,
    and every row it yields names a real device, a preset, a commit and a positive time."""
    found = asim.gpu_measurements(os.path.join(REPO, "benchmarks", "results"))
    assert bool(found) == bool(found.rows)
    for m in found.rows:
        assert m.gpu_us > 0 and m.device and "simulator" not in m.device.lower(), m
        assert m.preset in GPUS and m.commit and m.workload and m.strategy in asim.STRATEGIES, m
        assert m.source in found.files
    if found.rows:
        assert f"{len(found.rows)} GPU measurement(s)" in str(found)
    else:
        assert "no GPU measurements" in str(found)


def test_gpu_runs_are_read_and_everything_else_is_skipped_with_a_reason(tmp_path):
    results_file(tmp_path / "2026-11-30-h100")
    results_file(tmp_path / "sim", mode="simulator", device="none (Numba's CUDA simulator)")
    results_file(tmp_path / "odd", fmt="something else")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text("{not json")
    found = asim.gpu_measurements(str(tmp_path))
    assert [(m.strategy, m.gpu_us) for m in found.rows] == [("xla", 40.0), ("astitch", 20.0)]
    m = found.rows[0]
    assert (m.workload, m.shape, m.device, m.preset, m.commit) == \
        ("softmax", {"rows": 64, "cols": 30000}, "NVIDIA H100 80GB HBM3", "H100", "abc123")
    reasons = "\n".join(f"{p}: {why}" for p, why in found.skipped)
    assert "simulator" in reasons and "format" in reasons and "unreadable" in reasons
    assert "did not validate" in reasons                        # the tvm run failed validation
    assert "2 GPU measurement(s)" in str(found) and "H100" in str(found)


def test_a_gpu_file_without_valid_plan_timings_is_not_a_measurement(tmp_path):
    results_file(tmp_path / "empty", runs=[{"kind": "plan", "strategy": "xla", "gpu_us": None}])
    found = asim.gpu_measurements(str(tmp_path))
    assert not found.rows and "no validated plan timing" in str(found)


def test_a_wrong_path_is_an_error_not_an_empty_answer(tmp_path):
    with pytest.raises(asim.AStitchError, match="not a directory"):
        asim.gpu_measurements(str(tmp_path / "nope"))


def test_a_rendered_window_counts_each_time_once(tmp_path, monkeypatch):
    """A window of several device commands leaves parts/p*/results.json and the render's merged results.json
    (whose merged_from names the parts, relative to the checkout the render ran in): each plan time once,
    from the part that measured it, with that part's provenance."""
    win = tmp_path / "benchmarks" / "results" / "2026-11-27-h200"
    results_file(win / "parts" / "p2")
    results_file(win / "parts" / "p3", runs=[{"kind": "plan", "name": "astitch", "strategy": "astitch",
                                              "gpu_us": 99.0, "validation": {"ok": True}}])
    merged = json.loads((win / "parts" / "p2" / "results.json").read_text())
    merged["merged_from"] = ["benchmarks/results/2026-11-27-h200/parts/p2/results.json",
                             "benchmarks/results/2026-11-27-h200/parts/p3/results.json"]
    (win / "results.json").write_text(json.dumps(merged))
    monkeypatch.chdir(tmp_path / "benchmarks")          # not the checkout root: the parts are found from the file
    found = asim.gpu_measurements(str(tmp_path / "benchmarks" / "results"))
    assert sorted(m.gpu_us for m in found.rows) == [20.0, 40.0, 99.0]
    assert any("merges 2 results files" in why for _, why in found.skipped)
    # a merged file whose parts are not committed is read itself
    for part in ("p2", "p3"):
        (win / "parts" / part / "results.json").unlink()
    found = asim.gpu_measurements(str(tmp_path / "benchmarks" / "results"))
    assert sorted(m.gpu_us for m in found.rows) == [20.0, 40.0]


def test_each_run_names_the_plan_it_timed_and_same_plan_tells_todays_plan_from_it(tmp_path):
    """A measurement is of one plan: the run's plan_signature is carried into the row, and ``same_plan`` says
    whether the plan compiled today is that one (None where the run recorded no signature)."""
    from astitch_sim.hardware.measured import plan_signature
    g = asim.workload("softmax", rows=64, cols=30000)
    today = {s: asim.compile(g, s, "H100") for s in ("xla", "astitch")}
    results_file(tmp_path / "w", runs=[
        {"kind": "plan", "strategy": "xla", "gpu_us": 40.0, "validation": {"ok": True},
         "plan_signature": plan_signature(today["xla"])},
        {"kind": "plan", "strategy": "astitch", "gpu_us": 20.0, "validation": {"ok": True},
         "plan_signature": plan_signature(today["xla"])},           # not astitch's plan
        {"kind": "plan", "strategy": "tvm", "gpu_us": 30.0, "validation": {"ok": True}}])
    xla, astitch, tvm = asim.gpu_measurements(str(tmp_path)).rows
    assert xla.same_plan(today["xla"]) is True
    assert astitch.same_plan(today["astitch"]) is False
    assert tvm.plan_signature == "" and tvm.same_plan(today["xla"]) is None


def test_the_signature_is_the_one_gpu_bench_records_and_the_stale_h200_point_is_found():
    """The signatures the H200 window's results carry are this digest of the plans compiled today (gpu_bench
    records ``plan_signature``); with it the points measured with plans the planner no longer draws are told
    apart: the layernorm-backward astitch point (benchmarks/results/2026-11-27-h200/NOTES.md), and the xla
    points whose row reductions today's XLA packs several rows to a block (``common.xla_packed_rows``; the
    window ran the paper-era launch, one block per row), and the <64,30000> softmax's astitch point: the window
    ran each row split over 4 blocks, which the launch search no longer picks since a row's vector trips count
    as loads in flight (``cost.elements_in_flight``); and every xla or astitch plan whose column reductions now
    read vectors of adjacent columns (``plan/column_vectors.py``: the window ran them scalar); and global-norm
    clipping under astitch, whose one kernel with a grid barrier never-behind gives up on the H200 since the
    static estimate takes the L2 and the grid barrier measured in the second window (XLA's two kernels)."""
    from astitch_sim.planning.strategies.common import xla_packed_rows
    found = asim.gpu_measurements(os.path.join(REPO, "benchmarks", "results"))
    h200 = [m for m in found.rows if m.preset == "H200" and m.date.startswith("2026-11-27")]
    assert h200 and all(m.plan_signature for m in h200)
    stale = set()
    for m in h200:
        if m.strategy in ("xla", "astitch"):
            plan = asim.compile(asim.workload(m.workload, **m.shape), m.strategy, m.preset)
            packed = [s.mapping for k in plan.kernels for s in k.stages
                      if s.reduces and s.mapping.kind == "rows" and s.mapping.splits == 1
                      and xla_packed_rows(s.mapping.rows, s.mapping.cols, plan.gpu)[1] > 1]
            column_vectors = any(s.mapping.kind == "columns" and s.mapping.vector > 1
                                 for k in plan.kernels for s in k.stages)
            stale_point = ((m.workload, m.strategy) in (("layernorm_backward", "astitch"), ("global_norm", "astitch"))
                           or (m.workload, m.strategy, m.shape) == ("softmax", "astitch", {"rows": 64, "cols": 30000})
                           or (m.strategy == "xla" and bool(packed)) or column_vectors)
            assert m.same_plan(plan) is (not stale_point), (m.workload, m.shape, m.strategy)
            if stale_point:
                stale.add((m.workload, m.strategy))
    assert stale == {("layernorm_backward", "astitch"), ("layernorm", "xla"), ("softmax", "xla"),
                     ("layernorm_backward", "xla"), ("softmax", "astitch"), ("batchnorm_train", "xla"),
                     ("batchnorm_train", "astitch"), ("global_norm", "astitch")}
    (stale,) = [m for m in h200 if (m.workload, m.strategy, m.shape) ==
                ("layernorm_backward", "astitch", {"rows": 16384, "cols": 768})]
    assert stale.same_plan(asim.compile(asim.workload("layernorm_backward", rows=16384, cols=768), "astitch",
                                        "H200")) is False


def test_a_malformed_merged_from_is_read_as_a_results_file_not_a_crash(tmp_path):
    results_file(tmp_path / "odd")
    doc = json.loads((tmp_path / "odd" / "results.json").read_text())
    for bad in ("parts/p2/results.json", [1, 2], {"a": 1}):
        doc["merged_from"] = bad
        (tmp_path / "odd" / "results.json").write_text(json.dumps(doc))
        found = asim.gpu_measurements(str(tmp_path))
        assert sorted(m.gpu_us for m in found.rows) == [20.0, 40.0]
