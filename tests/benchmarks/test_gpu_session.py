"""The GPU window's runbook (``python -m benchmarks.gpu_session``), dry-run without a GPU.

* the image-like run: the packages the GPU image lacks are hidden (``benchmarks.image_like``)
  and ``pytest -m gpu`` must still collect every gpu-marked test, with no collection error;
* the dry run: every part of the runbook in Numba's CUDA simulator at tiny sizes, then the
  render step, results with provenance (below).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
import pytest
from anchor import TESTS_FILE

ROOT = Path(TESTS_FILE).resolve().parent.parent


def _collected(out: str) -> set:
    return {line.strip() for line in out.splitlines() if "::" in line and not line.startswith(("ERROR", "FAILED"))}


@pytest.mark.slow          # collects the whole suite twice in child processes (11 s)
def test_pytest_m_gpu_collects_every_gpu_test_on_an_image_without_the_extras(tmp_path):
    from benchmarks import image_like
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider"]
    env = image_like.image_like_env(tmp_path / "hidden")
    env["ASTITCH_NO_GPU"] = "1"
    hidden = subprocess.run(cmd + ["tests"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert hidden.returncode == 0, hidden.stdout[-3000:] + hidden.stderr[-3000:]
    assert "error" not in hidden.stdout.splitlines()[-1].lower(), hidden.stdout[-2000:]
    # what a full environment collects from the files that hold gpu tests
    gpu_files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                       if re.search(r"pytest\.mark\.gpu\b", p.read_text()))
    assert gpu_files
    full = subprocess.run(cmd + gpu_files, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONPATH": str(ROOT)})
    assert full.returncode == 0, full.stdout[-3000:]
    want = _collected(full.stdout)
    assert want, full.stdout[-2000:]
    assert _collected(hidden.stdout) == want


@pytest.mark.slow
def test_the_runbook_dry_runs_every_part_in_the_simulator_and_renders(tmp_path):
    """``python -m benchmarks.gpu_session --simulator``: every part, baselines where installed, provenance, render."""
    import json
    import os

    import astitch_sim as asim
    from benchmarks.gpu_bench import SIM_NOTE
    out = tmp_path / "dry"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT)
    env["ASTITCH_GPU_CACHE"] = str(tmp_path / "gpu_cache")
    cmd = [sys.executable, "-m", "benchmarks.gpu_session", "--simulator", "--out", str(out), "--parts", "3",
           "--cases", "paper_fig7", "global_norm", "--workloads", "paper_fig7", "--baselines", "jax.jit", "torch.eager"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    parts = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert parts == ["p1", "p2", "p3"]
    for p in parts:             # what comes back from a device command: at most 8 files, 2 folders down
        assert sorted(f.name for f in (out / p).iterdir()) in (["session.json"], ["results.json", "results.md",
                                                                                  "session.json"]), p
    steps = {}
    for p in parts:
        s = json.loads((out / p / "session.json").read_text())
        prov = s["provenance"]
        assert s["mode"] == "simulator" and prov["device"].startswith("none")
        assert prov["git_commit"] and prov["date"] and prov["source_digest"] and prov["versions"]["numpy"]
        assert s["finished"]
        steps.update(s["steps"])
    assert set(steps) == {"probe", "copy", "correctness", "sanitizer", "suite:paper_fig7",
                          "suite:global_norm_1024x1024"}
    assert all(rec.get("ok") for rec in steps.values()), {k: v.get("error") for k, v in steps.items()}
    probe = steps["probe"]
    assert probe["grid_sync"]["ok"] and probe["plain"]["ok"] and probe["toolchain"]["where"]["ptxas"]
    assert all(steps["copy"][f"{k}_valid"] for k in ("memcpy", "scalar", "vec128"))
    rows = steps["correctness"]["rows"]
    assert [(r["workload"], r["strategy"]) for r in rows] == [("paper_fig7", s) for s in asim.STRATEGIES]
    assert all(r["ok"] and r["compiler"]["applied"] for r in rows)
    assert steps["sanitizer"]["plain"]["ran"] == steps["sanitizer"]["plain"]["cases"] > 0
    # the render step: merged results with provenance, every case, no GPU number
    res = json.loads((out / "results.json").read_text())
    assert res["mode"] == "simulator" and res["provenance"]["git_commit"]
    assert [c["key"] for c in res["cases"]] == ["global_norm_1024x1024", "paper_fig7"] or \
           sorted(c["key"] for c in res["cases"]) == ["global_norm_1024x1024", "paper_fig7"]
    for c in res["cases"]:
        names = [run["name"] for run in c["runs"]]
        assert names[:len(asim.STRATEGIES)] == list(asim.STRATEGIES)
        assert {"jax.jit", "torch.eager"} <= set(names)
        for run in c["runs"]:
            assert run["timing_note"] == SIM_NOTE and "bandwidth_gbs" not in run
            if run.get("kind") == "plan":
                assert run["validation"]["ok"] and run["compiler"]["applied"], run["name"]
            elif not run.get("skipped"):
                assert run["validation"]["ok"], run
    cc = json.loads((out / "crosscheck.json").read_text())
    assert len(cc["held_out_cases"]) == 1 and "SIMULATOR" in cc["banner"]
    md = (out / "session.md").read_text()
    assert "CUDA simulator dry run" in md and "held out" in md


def test_a_part_cut_off_keeps_the_steps_it_finished(tmp_path, monkeypatch):
    import json

    from benchmarks import gpu_session as gs

    def killed(**_):
        raise KeyboardInterrupt("the device command's time limit")
    monkeypatch.setitem(gs.STEP_RUNNERS, "sanitizer", killed)
    part = [gs.Step("copy", 1), gs.Step("sanitizer", 1)]
    try:
        gs.run_part(part, tmp_path / "p1", simulator=True, label="1/2")
    except KeyboardInterrupt:
        pass
    s = json.loads((tmp_path / "p1" / "session.json").read_text())
    assert s["planned"] == ["copy", "sanitizer"]
    assert s["steps"]["copy"]["ok"] and s["steps"]["copy"]["vec128_valid"] and "sanitizer" not in s["steps"]


def test_bad_runbook_arguments_fail_before_anything_runs(capsys):
    from benchmarks import gpu_session as gs
    assert gs.main(["--part", "1/4", "--out", "/nonexistent/never", "--cases", "layernrom"]) == 2
    assert "layernrom" in capsys.readouterr().err
    assert gs.main(["--part", "5/4", "--out", "/nonexistent/never"]) == 2
    assert "1 <= K <= N" in capsys.readouterr().err


def test_every_planned_part_fits_one_device_command():
    from benchmarks import gpu_session as gs
    all_steps = gs.steps()
    parts = gs.partition(all_steps, gs.DEFAULT_PARTS)
    assert [s for p in parts for s in p] == all_steps            # every step once, in order
    assert all(sum(s.estimate_s for s in p) <= gs.PART_LIMIT_S for p in parts)
    assert gs.PART_LIMIT_S <= 540                                  # 9 minutes: the 10-minute limit with room


def test_the_readme_states_each_parts_estimate_from_the_plan():
    from benchmarks import gpu_session as gs
    text = (ROOT / "benchmarks" / "README.md").read_text()
    parts = gs.partition(gs.steps(), gs.DEFAULT_PARTS)
    for k, part in enumerate(parts, 1):
        m = re.search(rf"^\| {k}/{gs.DEFAULT_PARTS} \|.*\| ~([\d.]+) min \|$", text, re.M)
        assert m, f"benchmarks/README.md has no row for part {k}/{gs.DEFAULT_PARTS}"
        minutes = sum(s.estimate_s for s in part) / 60
        assert abs(float(m.group(1)) - minutes) <= 0.5, (k, m.group(1), minutes)
        assert f"--part {k}/{gs.DEFAULT_PARTS} --out $OUT/p{k}" in text


def test_calibration_fits_constants_the_cost_model_adds_later(monkeypatch):
    """The cross-check reads which constants to fit from cost.py: a new term is fitted without editing it."""
    import astitch_sim as asim
    from astitch_sim.simt import cost
    from benchmarks import crosscheck
    gpu = asim.gpu("H100")
    params, extra = crosscheck.fittable(gpu)
    assert "measured_bandwidth_gbs" in params and "sms" not in params
    table = {**cost.COST_CONSTANTS}
    table[gpu.name] = {**cost.constants(gpu), "issue_rate_per_clock": 2.5}
    monkeypatch.setattr(cost, "COST_CONSTANTS", table)
    params, extra = crosscheck.fittable(gpu)
    assert "issue_rate_per_clock" in params and extra["issue_rate_per_clock"] == (0.025, 250.0)


def test_held_out_third_is_whole_cases_and_seeded():
    from types import SimpleNamespace

    from benchmarks import crosscheck
    samples = [SimpleNamespace(case=f"c{i}", strategy=s) for i in range(9) for s in ("xla", "astitch")]
    fit, held, cases = crosscheck.split_cases(samples)
    assert len(cases) == 3 and {s.case for s in held} == set(cases)
    assert not {s.case for s in fit} & set(cases) and len(fit) + len(held) == len(samples)
    assert crosscheck.split_cases(samples)[2] == cases


def test_a_step_cut_off_mid_way_is_reported_as_cut_off_with_what_it_kept(tmp_path):
    """The first GPU window's correctness step was ended by the command's time limit after 47 plans; the
    render said FAILED, and the sanitizer that never started read 'dry run: None'."""
    import json

    from benchmarks import gpu_session as gs
    rows = [{"workload": "layernorm", "strategy": s, "ok": True} for s in ("xla", "astitch")]
    part = tmp_path / "p1"
    part.mkdir()
    session = {"format": gs.FORMAT, "mode": "gpu", "part": "1/1", "planned": ["correctness", "sanitizer"],
               "provenance": {"device": "NVIDIA H200"},
               "steps": {"correctness": {"ok": None, "in_progress": True, "rows": rows},
                         "sanitizer": {"ok": None, "skipped": "not started: 1 s spent, estimate 300 s"}}}
    (part / "session.json").write_text(json.dumps(session))
    gs.render([part], tmp_path / "out", calibrate=False)
    md = (tmp_path / "out" / "session.md").read_text()
    assert "| correctness | cut off by the command's time limit (2 done, kept) |" in md
    assert "2/2 plans match" in md and "**Cut off**" in md
    assert "- not run: not started" in md and "dry run" not in md and "FAILED" not in md
