"""The GPU runbook's launch sweeps (``benchmarks/launch_sweep.py``): one case's astitch plan at several block-size
caps, each distinct plan validated and timed once, recorded for ``--skip-done`` and rendered in session.md."""
from __future__ import annotations

import json

import pytest

import astitch_sim as asim
from astitch_sim.hardware.measured import plan_signature


def test_the_sweep_times_each_distinct_plan_once_in_the_simulator():
    """Numba's CUDA simulator at the case's tiny shape (layernorm 8x64): caps 128 and 1024 draw one plan, 256
    another; every run matches the reference and sits beside the model's two predictions."""
    from benchmarks.launch_sweep import markdown, sweep
    rec = sweep("layernorm_16384x768", simulator=True, preset="H100", caps=(128, 256, 1024), log=lambda m: None,
                l2_bytes=60 << 20)
    assert rec["ok"] and rec["shape"] == {"rows": 8, "cols": 64}
    assert rec["l2_bytes"] == 60 << 20 and rec["flush_bytes"] == 4096      # the device's L2, as the session read it
    g = asim.workload("layernorm", rows=8, cols=64)
    drawn = {}
    for cap in (128, 256, 1024):
        p = asim.compile(g, "astitch", "H100", max_block_threads=cap)
        drawn.setdefault(plan_signature(p), []).append(cap)
    assert [r["max_block_threads"] for r in rec["rows"]] == list(drawn.values())
    assert len(rec["rows"]) < 3                                     # (the case this test is for)
    for r in rec["rows"]:
        plan = asim.compile(g, "astitch", "H100", max_block_threads=r["max_block_threads"][0])
        assert r["launches"] == [f"{k.grid}x{k.block}" for k in plan.kernels]
        assert r["plan_signature"] == plan_signature(plan) and r["validation"]["ok"]
        assert r["estimate_us"] > 0 and r["simulated_us"] > 0 and r["gpu_us"] > 0
        assert all(k <= max(r["max_block_threads"]) for k in (kk.block for kk in plan.kernels))
    text = "\n".join(markdown("launches:layernorm_16384x768", rec, simulator=True))
    assert "Numba's CUDA simulator: no GPU number" in text
    assert text.count("| yes |") == len(rec["rows"]) and "| 128, 1024 |" in text


def test_the_flush_is_sized_from_the_devices_l2_where_the_session_read_it(monkeypatch):
    """On a GPU the L2 flush between timed runs is 4x the L2 (at least 256 MiB): the device's own L2 where the
    session's provenance has it (the suite does the same, ``gpu_bench/run.py``), the preset's otherwise."""
    from benchmarks import gpu_session
    seen = {}
    monkeypatch.setattr("benchmarks.launch_sweep.sweep", lambda *a, **k: seen.update(k) or {})
    step = gpu_session.STEP_RUNNERS["launches"]         # as the session runs a launches:<case> step
    step(session=None, simulator=True, preset="H100", prov={"l2_bytes": 96 << 20}, out_dir=None, name="launches:x",
         arg="layernorm_16384x768")
    assert seen["l2_bytes"] == 96 << 20
    step(session=None, simulator=True, preset="H100", prov={}, out_dir=None, name="launches:x", arg="layernorm_16384x768")
    assert seen["l2_bytes"] is None


def test_an_unknown_sweep_is_refused():
    from benchmarks.launch_sweep import sweep
    with pytest.raises(asim.AStitchError, match="no launch sweep for 'paper_fig7'"):
        sweep("paper_fig7", simulator=True, preset="H100")


def _record(tmp_path, rows, ok=True, name="p1"):
    d = tmp_path / "w" / name
    d.mkdir(parents=True)
    rec = {"ok": ok, "case": "softmax_750000x32", "workload": "softmax", "shape": {"rows": 750000, "cols": 32},
           "rows": rows}
    (d / "session.json").write_text(json.dumps({"mode": "gpu", "gpu_preset": "H200",
                                                "provenance": {"device": "NVIDIA H200"},
                                                "steps": {"launches:softmax_750000x32": rec}}))
    return rec


def _row(caps, signature=None):
    g = asim.workload("softmax", rows=750000, cols=32)
    plan = asim.compile(g, "astitch", "H200", max_block_threads=caps[0])
    return {"max_block_threads": list(caps), "plan_signature": signature or plan_signature(plan),
            "launches": [f"{k.grid}x{k.block}" for k in plan.kernels], "gpu_us": 48.0, "estimate_us": 66.9,
            "simulated_us": 65.1, "ok": True, "validation": {"ok": True}}


def test_a_sweep_counts_as_done_only_with_todays_plans_all_valid(tmp_path):
    from benchmarks import gpu_session as gs
    _record(tmp_path, [_row([128]), _row([1024])])
    assert gs.done_steps([tmp_path / "w"])["steps"] == ["launches:softmax_750000x32"]
    _record(tmp_path, [_row([128]), _row([1024], signature="not-today's-plan")], name="p2")
    _record(tmp_path, [_row([128])], ok=False, name="p3")
    for p in ("p2", "p3"):
        assert gs.done_steps([tmp_path / "w" / p])["steps"] == [], p


def test_the_render_prints_each_sweep_as_a_table(tmp_path):
    from benchmarks import gpu_session as gs
    rec = _record(tmp_path, [_row([128]), _row([256, 512])])
    merged = {"mode": "gpu", "parts": ["1/2"], "provenance": [{"device": "NVIDIA H200"}], "warnings": [],
              "steps": {"launches:softmax_750000x32": rec}}
    text = "\n".join(gs.session_markdown(merged, None, None))
    assert "## Launch sweeps" in text and "softmax 750000x32 under astitch" in text and "GPU time, CUDA events" in text
    assert "| 128 | 46875x128 | 48.0 | 66.9 | 65.1 | yes |" in text
    assert "| 256, 512 | 23438x256 | 48.0 | 66.9 | 65.1 | yes |" in text
    assert "| launches:softmax_750000x32 | ok |" in text


def test_every_sweep_times_more_than_one_plan_on_the_h200():
    """Each sweep's caps draw at least two distinct plans at the suite's full shape on the H200 preset the window
    compiles for (a sweep of one plan measures no block size), each within its cap."""
    from benchmarks.launch_sweep import SWEEPS
    from benchmarks.suite import select
    for key, caps in SWEEPS.items():
        (case,) = select([key])
        g = asim.workload(case.workload, **case.shape_for("full"))
        plans = {cap: asim.compile(g, "astitch", "H200", max_block_threads=cap) for cap in caps}
        assert len({plan_signature(p) for p in plans.values()}) >= 2, key
        assert all(k.block <= cap for cap, p in plans.items() for k in p.kernels), key


@pytest.mark.slow
def test_every_sweep_runs_and_validates_in_the_simulator():
    """What the next window runs, dry: every sweep in Numba's CUDA simulator at its case's tiny shape, each
    distinct plan matching the reference (~25 s)."""
    from benchmarks.launch_sweep import SWEEPS, sweep
    for key in SWEEPS:
        rec = sweep(key, simulator=True, preset="H200", log=lambda m: None)
        assert rec["ok"] and rec["rows"] and all(r["validation"]["ok"] for r in rec["rows"]), key
