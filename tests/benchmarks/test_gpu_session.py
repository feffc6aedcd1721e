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
#: the first GPU window's parts (committed): what --skip-done reads in the README's commands
FIRST_WINDOW = ROOT / "benchmarks" / "results" / "2026-11-27-h200" / "parts"
SECOND_WINDOW = ROOT / "benchmarks" / "results" / "2026-11-29-h200" / "parts"
THIRD_WINDOW = ROOT / "benchmarks" / "results" / "2026-11-30-h200" / "parts"


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
    assert set(steps) == {"probe", "copy", "correctness:paper_fig7", "sanitizer:memcheck", "sanitizer:racecheck",
                          "suite:paper_fig7", "suite:global_norm_1024x1024"}
    assert all(rec.get("ok") for rec in steps.values()), {k: v.get("error") for k, v in steps.items()}
    probe = steps["probe"]
    assert probe["grid_sync"]["ok"] and probe["plain"]["ok"] and probe["toolchain"]["where"]["ptxas"]
    assert all(steps["copy"][f"{k}_valid"] for k in ("memcpy", "scalar", "vec128"))
    rows = steps["correctness:paper_fig7"]["rows"]
    assert [(r["workload"], r["strategy"]) for r in rows] == [("paper_fig7", s) for s in asim.STRATEGIES]
    assert all(r["ok"] and r["compiler"]["applied"] for r in rows)
    for tool in ("memcheck", "racecheck"):
        assert steps[f"sanitizer:{tool}"]["plain"]["ran"] == steps[f"sanitizer:{tool}"]["plain"]["cases"] > 0
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
    assert "6/6 plans match" in md and "- memcheck dry run:" in md and "- racecheck dry run:" in md


def test_a_part_cut_off_keeps_the_steps_it_finished(tmp_path, monkeypatch):
    import json

    from benchmarks import gpu_session as gs

    def killed(**_):
        raise KeyboardInterrupt("the device command's time limit")
    monkeypatch.setitem(gs.STEP_RUNNERS, "sanitizer", killed)
    part = [gs.Step("copy", 1), gs.Step("sanitizer:memcheck", 1)]
    try:
        gs.run_part(part, tmp_path / "p1", simulator=True, label="1/2")
    except KeyboardInterrupt:
        pass
    s = json.loads((tmp_path / "p1" / "session.json").read_text())
    assert s["planned"] == ["copy", "sanitizer:memcheck"]
    assert s["steps"]["copy"]["ok"] and s["steps"]["copy"]["vec128_valid"] and "sanitizer:memcheck" not in s["steps"]
    gs.render([tmp_path / "p1"], tmp_path / "out", calibrate=False)      # planned, never reached: said so
    assert "| sanitizer:memcheck | not reached: the command ended before it | - |" in \
        (tmp_path / "out" / "session.md").read_text()


def test_bad_runbook_arguments_fail_before_anything_runs(capsys):
    from benchmarks import gpu_session as gs
    assert gs.main(["--part", "1/4", "--out", "/nonexistent/never", "--cases", "layernrom"]) == 2
    assert "layernrom" in capsys.readouterr().err
    assert gs.main(["--part", "5/4", "--out", "/nonexistent/never"]) == 2
    assert "1 <= K <= N" in capsys.readouterr().err


def test_every_planned_part_fits_one_device_command():
    """The default window's plan, fresh and after the first window (--skip-done): each part under the limit,
    together inside the window with a machine start and each call's cost, steps in order, each once."""
    from benchmarks import gpu_session as gs
    fresh = gs.steps()
    later, _ = gs.drop_done(fresh, gs.done_steps([FIRST_WINDOW]))
    for all_steps in (fresh, later):
        plan = gs.window_plan(all_steps, gs.WINDOW_S)
        planned = [s for p in plan.parts for s in p]
        assert sorted(planned + plan.left, key=all_steps.index) == all_steps        # every step once
        assert planned == sorted(planned, key=all_steps.index)                      # in order
        assert all(gs.seconds(p) <= gs.PART_LIMIT_S for p in plan.parts)
        assert plan.n == gs.DEFAULT_PARTS
        assert gs.START_S + plan.n * gs.CALL_S + plan.planned_s <= gs.WINDOW_S
        for s in plan.left:                                       # what is left does not fit beside them
            trial = sorted(planned + [s], key=all_steps.index)
            assert gs.seconds(trial) > plan.capacity_s or \
                max(gs.seconds(p) for p in gs.partition(trial, plan.n)) > gs.PART_LIMIT_S, s.name
    assert gs.PART_LIMIT_S <= 540                                  # 9 minutes: the 10-minute limit with room


def _readme_plan(text):
    """The plan the README's window commands run: their --skip-done folders, the default window."""
    from benchmarks import gpu_session as gs
    m = re.search(r"--part 1/\d+ --out \$OUT/p1 --skip-done (\S+(?: \S+)*?) --commit", text)
    assert m, "benchmarks/README.md has no window command with --skip-done"
    dirs = [ROOT / d for d in m.group(1).split()]
    all_steps, _ = gs.drop_done(gs.steps(), gs.done_steps(dirs))
    return gs.window_plan(all_steps, gs.WINDOW_S), m.group(1)


def _step_cell(cell: str) -> list:
    """``probe, copy; suite: `a`, `b`; correctness: `w``` -> the step names, in order."""
    names = []
    for seg in cell.split(";"):
        kind, _, items = seg.rpartition(":") if ":" in seg else ("", "", seg)
        names += [f"{kind.strip()}:{x.strip(' `')}" if kind.strip() else x.strip(" `") for x in items.split(",")]
    return names


def test_the_readme_states_each_parts_estimate_from_the_plan():
    """The README's table: one row per part (what it runs, minutes as --plan has them) and what is left."""
    from benchmarks import gpu_session as gs
    text = (ROOT / "benchmarks" / "README.md").read_text()
    plan, skip = _readme_plan(text)
    n = plan.n
    rows = [(f"{k}/{n}", part) for k, part in enumerate(plan.parts, 1)] + ([("later", plan.left)] if plan.left else [])
    assert bool(plan.left) == bool(re.search(r"^\| later \|", text, re.M))
    for label, part in rows:
        m = re.search(rf"^\| {label} \| ([^|]*) \|.*\| ~([\d.]+) min[^|]*\|$", text, re.M)
        assert m, f"benchmarks/README.md has no row for {label}"
        assert _step_cell(m.group(1)) == [s.name for s in part], label
        assert abs(float(m.group(2)) - gs.seconds(part) / 60) <= 0.1, (label, m.group(2), gs.seconds(part) / 60)
    for k in range(1, n + 1):
        assert f"--part {k}/{n} --out $OUT/p{k} --skip-done {skip} --commit <hash>" in text
    assert not re.search(rf"^\| {n + 1}/", text, re.M)


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


# -- the 15-minute window: measured estimates, the plan, --skip-done, steps per workload and tool -----------------

def test_the_measured_seconds_are_the_h200_windows_numbers(monkeypatch):
    """MEASURED_S is what benchmarks/results/2026-11-27-h200, 2026-11-29-h200 and 2026-11-30-h200 recorded, the
    slowest window where several ran a step; every estimate covers its measurement."""
    import json

    from benchmarks import gpu_session as gs
    from benchmarks.sanitizer import TIMEOUT_S, TOOLS
    got: dict = {}

    def slower(name, seconds):
        got[name] = max(got.get(name, 0), seconds)

    for window in (FIRST_WINDOW, SECOND_WINDOW, THIRD_WINDOW):
        p1 = json.loads((window / "p1" / "session.json").read_text())
        for n in ("probe", "copy"):
            slower(n, p1["steps"][n]["seconds"])
        for part in sorted(window.glob("p[0-9]")):
            session = json.loads((part / "session.json").read_text())
            for name, step in session["steps"].items():
                if name.startswith(("launches:", "sanitizer:")) and step.get("ok"):
                    slower(name, step["seconds"])
            rows = [r for name, step in session["steps"].items() if name.startswith("correctness")
                    for r in step.get("rows", [])]
            for r in rows:
                if r.get("workload_seconds"):
                    slower(f"correctness:{r['workload']}", r["workload_seconds"])
            if (part / "results.json").exists():
                for c in json.loads((part / "results.json").read_text())["cases"]:
                    slower(f"suite:{c['key']}", c["wall_s"])
    # the first window's log_softmax was cut off (its partial seconds are a row's), the second ran it whole
    assert set(gs.MEASURED_S) == set(got)
    assert all(abs(gs.MEASURED_S[k] - v) <= 0.051 for k, v in got.items()), got
    names = {s.name for s in gs.steps()}
    assert set(gs.MEASURED_S) <= names and set(gs.ESTIMATE_S) <= names     # no stale key
    assert all(gs.ESTIMATE_S[k] >= v for k, v in gs.MEASURED_S.items())
    assert gs.make_step("copy").measured_s == 4.6 and gs.make_step("suite:paper_fig7").measured_s == 37.2
    assert gs.make_step("correctness:swiglu").measured_s == 19.9
    assert gs.make_step("sanitizer:racecheck").estimate_s == 10      # measured: 9.7 s, not its 200 s cap
    monkeypatch.delitem(gs.ESTIMATE_S, "sanitizer:memcheck")     # a tool never measured: its cap bounds it
    assert gs.estimate("sanitizer:memcheck") >= TIMEOUT_S and "memcheck" in TOOLS


def test_the_window_plan_fills_the_window_in_order_and_says_what_is_left():
    from astitch_sim.errors import AStitchError
    from benchmarks import gpu_session as gs
    S = gs.Step
    work = [S("a", 300), S("b", 300), S("c", 200), S("d", 100), S("e", 20), S("huge", gs.PART_LIMIT_S + 1)]
    plan = gs.window_plan(work, 900, 2)
    assert plan.capacity_s == 900 - gs.START_S - 2 * gs.CALL_S
    assert [[s.name for s in p] for p in plan.parts] == [["a"], ["b", "d", "e"]]   # c does not fit, d and e do
    assert [s.name for s in plan.left] == ["c", "huge"] and plan.planned_s == 720
    one = gs.window_plan(work, 900, 1)                          # one command: at most PART_LIMIT_S of steps
    assert [s.name for s in one.parts[0]] == ["a", "c", "e"]
    assert gs.window_plan(work, 900).n == 2                     # the count that plans the most work
    assert gs.parts_for_window(900) == gs.DEFAULT_PARTS == 2 and gs.parts_for_window(1800) == 3
    free = gs.window_plan(work, 0, 3)                           # no window: every step
    assert [s for p in free.parts for s in p] == work and not free.left and free.n == 3
    with pytest.raises(AStitchError, match="no machine starts"):
        gs.window_plan(work, gs.MIN_START_S - 1)


def test_steps_come_in_the_order_of_what_they_are_worth():
    import astitch_sim as asim
    from astitch_sim.errors import AStitchError
    from benchmarks import gpu_session as gs
    names = [s.name for s in gs.steps()]
    kinds = [n.split(":")[0] for n in names]
    assert names[:2] == ["probe", "copy"]
    assert kinds == sorted(kinds, key=["probe", "copy", "suite", "launches", "correctness", "sanitizer"].index)
    assert [n for n in names if n.startswith("correctness:")] == [f"correctness:{w}" for w in asim.WORKLOADS]
    assert [n for n in names if n.startswith("launches:")] == [             # the first two: the measured ones
        "launches:softmax_750000x32", "launches:layernorm_16384x768", "launches:rmsnorm_4096x4096",
        "launches:attention_softmax_196608x512", "launches:layernorm_backward_16384x768",
        "launches:batchnorm_train_65536x64", "launches:softmax_64x30000"]
    assert names[-2:] == ["sanitizer:memcheck", "sanitizer:racecheck"]
    picked = [s.name for s in gs.steps(["paper_fig7"], ["softmax", "layernorm"])]
    assert picked == ["probe", "copy", "suite:paper_fig7", "correctness:layernorm", "correctness:softmax",
                      "sanitizer:memcheck", "sanitizer:racecheck"]
    picked = [s.name for s in gs.steps(["softmax_750000x32"], ["softmax"])]     # a sweep comes with its case
    assert picked[2:4] == ["suite:softmax_750000x32", "launches:softmax_750000x32"]
    with pytest.raises(AStitchError, match="sofmax"):
        gs.steps(workloads=["sofmax"])


def test_skip_done_drops_what_the_first_window_finished():
    """The first window: five cases with every baseline, seven workloads all matching; its first call's 90
    failed plans (numpy's lost alias) and the five cases whose torch baselines failed count for nothing, and
    so does the attention softmax, whose xla and fusionstitching plans the planner no longer draws (today's XLA
    packs its rows of 512: ``plan_signature``), and the cases whose plans the cost model now prices
    differently: batchnorm's fusionstitching plan launches its two 64-element kernels with 256 threads since the
    model counts only warps with elements; the <64,30000> softmax's plans change since a lane's vector trips
    count as loads in flight (astitch no longer splits it); and every plan of batchnorm and layer-norm backward,
    whose column reductions read vectors of adjacent columns since (``plan/column_vectors.py``); and global-norm
    clipping, whose astitch plan on the H200 is XLA's two kernels since the static estimate took the L2."""
    from benchmarks import gpu_session as gs
    done = gs.done_steps([FIRST_WINDOW])
    assert done["devices"] == ["NVIDIA H200"]
    assert set(done["steps"]) == {"suite:layernorm_8192x4096"} | {
        f"correctness:{w}" for w in ("layernorm", "rmsnorm", "batchnorm_train", "layernorm_backward", "global_norm",
                                     "softmax", "attention_softmax")}
    kept, dropped = gs.drop_done(gs.steps(), done)
    kept = [s.name for s in kept]
    assert kept[:2] == ["probe", "copy"] and set(dropped) == set(done["steps"])
    assert "suite:layernorm_16384x768" in kept and "correctness:log_softmax" in kept     # 5 of its 6 plans
    assert "suite:attention_softmax_196608x512" in kept
    assert "suite:attention_softmax_196608x512 (xla, fusionstitching)" in done["stale"]
    every = "(unfused, xla, tvm, fusionstitching, inductor, astitch)"
    assert f"suite:layernorm_backward_16384x768 {every}" in done["stale"]
    assert f"suite:batchnorm_train_65536x64 {every}" in done["stale"]
    assert "suite:softmax_64x30000 (fusionstitching, astitch)" in done["stale"]
    assert "suite:global_norm_1024x1024 (astitch)" in done["stale"]
    text = gs.plan_text(gs.window_plan(gs.drop_done(gs.steps(), done)[0]), done)
    assert "plans the planner no longer draws, so planned again: " in text
    # the DIEN softmax: today's XLA packs its rows; fusionstitching's search takes 256-thread blocks on H200 since
    # the cost model charges block dispatch (its 128-thread plan was within 0.1 us of it)
    assert "suite:softmax_750000x32 (xla, fusionstitching)" in text


def test_a_case_timed_with_todays_plans_is_done_and_one_with_a_changed_plan_is_not(tmp_path):
    """``--skip-done`` weighs each timed plan's ``plan_signature`` against the plan compiled today: the same
    digest, the case is done; another, it is planned again and said so (issue 28: the window's xla plans of
    short rows)."""
    import json

    import astitch_sim as asim
    from astitch_sim.hardware.measured import plan_signature
    from benchmarks import gpu_session as gs
    g = asim.workload("softmax", rows=4096, cols=32)
    today = {s: plan_signature(asim.compile(g, s, "H100")) for s in ("xla", "astitch")}
    d = tmp_path / "w" / "p1"
    d.mkdir(parents=True)
    (d / "session.json").write_text(json.dumps({"mode": "gpu", "provenance": {"device": "NVIDIA H100"}, "steps": {}}))

    def results(xla_signature):
        runs = [{"name": "xla", "strategy": "xla", "validation": {"ok": True}, "plan_signature": xla_signature},
                {"name": "astitch", "strategy": "astitch", "validation": {"ok": True},
                 "plan_signature": today["astitch"]}]
        case = {"key": "softmax_4096x32", "workload": "softmax", "shape": {"rows": 4096, "cols": 32}, "runs": runs}
        (d / "results.json").write_text(json.dumps({"mode": "gpu", "gpu_preset": "H100", "cases": [case]}))

    results(today["xla"])
    done = gs.done_steps([tmp_path / "w"])
    assert done["steps"] == ["suite:softmax_4096x32"] and done["stale"] == []
    paper = plan_signature(asim.compile(g, "xla", "H100", fusion_rules="tf-2.6"))
    assert paper != today["xla"]
    results(paper)
    done = gs.done_steps([tmp_path / "w"])
    assert done["steps"] == [] and done["stale"] == ["suite:softmax_4096x32 (xla)"]


def test_skip_done_counts_only_what_finished_well(tmp_path):
    import json

    import astitch_sim as asim
    from astitch_sim.errors import AStitchError
    from benchmarks import gpu_session as gs

    def part(name, mode, steps, cases=None):
        d = tmp_path / "w" / name
        d.mkdir(parents=True)
        (d / "session.json").write_text(json.dumps({"mode": mode, "provenance": {"device": "NVIDIA H100"},
                                                    "steps": steps}))
        if cases is not None:
            (d / "results.json").write_text(json.dumps({"mode": mode, "cases": cases}))
    rows = [{"workload": w, "strategy": s, "ok": (w, s) != ("rmsnorm", "astitch")}
            for w in ("softmax", "rmsnorm") for s in asim.STRATEGIES]
    part("p1", "gpu", {"correctness:softmax": {"ok": True, "rows": rows[:6]},
                       "correctness:rmsnorm": {"ok": False, "rows": rows[6:]},
                       "sanitizer:memcheck": {"ok": True, "tools": {"memcheck": {"ok": True}}},
                       "sanitizer:racecheck": {"ok": False, "tools": {"racecheck": {"ok": False}}}},
         [{"key": "paper_fig7", "runs": [{"name": "astitch", "validation": {"ok": True}},
                                         {"name": "torch.native", "skipped": "no fused op"}]},
          {"key": "global_norm_1024x1024", "runs": [{"name": "astitch", "validation": {"ok": False}}]},
          {"key": "softmax_64x30000", "runs": [{"name": "torch.eager", "error": "TypeError"}]}])
    part("p2", "simulator", {"correctness:layernorm": {"ok": True, "rows": [
        {"workload": "layernorm", "strategy": s, "ok": True} for s in asim.STRATEGIES]}})
    done = gs.done_steps([tmp_path / "w"])
    assert done["steps"] == ["correctness:softmax", "sanitizer:memcheck", "suite:paper_fig7"]
    assert done["devices"] == ["NVIDIA H100"]
    assert gs.done_steps([tmp_path / "w"], "simulator")["steps"] == ["correctness:layernorm"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(AStitchError, match="no session.json"):
        gs.done_steps([tmp_path / "empty"])


def test_part_k_of_n_runs_the_kth_part_of_the_plan_printed_here(tmp_path, monkeypatch, capsys):
    from benchmarks import gpu_session as gs
    ran = {}
    monkeypatch.setattr(gs, "run_part", lambda part_steps, *a: ran.update(steps=[s.name for s in part_steps],
                                                                           skipped=a[-1]))
    skip = ["--skip-done", str(FIRST_WINDOW)]
    assert gs.main(["--plan"] + skip) == 0
    out = capsys.readouterr().out
    plan = gs.window_plan(gs.drop_done(gs.steps(), gs.done_steps([FIRST_WINDOW]))[0])
    for k, part in enumerate(plan.parts, 1):
        assert gs.main(["--part", f"{k}/{plan.n}", "--out", str(tmp_path / f"p{k}")] + skip) == 0
        assert ran["steps"] == [s.name for s in part] and ran["skipped"]["devices"] == ["NVIDIA H200"]
        assert f"part {k}/{plan.n} ~{gs.seconds(part):.0f} s" in out and ", ".join(ran["steps"]) in out
    assert plan.left and "left for a later window ~" in out and ", ".join(s.name for s in plan.left) in out
    assert "not planned: suite:layernorm_8192x4096" in out
    assert gs.main(["--plan", "--window-s", "0"]) == 0
    assert "left for a later window: nothing" in capsys.readouterr().out
    assert gs.main(["--plan", "--window-s", "200"]) == 2
    assert "no machine starts" in capsys.readouterr().err
    assert gs.main(["--simulator", "--out", str(tmp_path / "dry")] + skip) == 2


def test_a_part_runs_its_steps_in_order_and_records_each_suite_case(tmp_path, monkeypatch):
    from benchmarks import gpu_bench as gb
    from benchmarks import gpu_session as gs
    order = []
    monkeypatch.setitem(gs.STEP_RUNNERS, "probe", lambda **kw: order.append("probe") or {"ok": True})
    monkeypatch.setitem(gs.STEP_RUNNERS, "correctness", lambda name, **kw: order.append(name) or {"ok": True})

    def run_suite(out_dir, only, **kw):
        order.append(("suite", tuple(only)))
        return {"cases": [{"key": "paper_fig7", "wall_s": 12.34, "runs": [{"name": "astitch",
                                                                           "validation": {"ok": True}}]},
                          {"key": "global_norm_1024x1024", "wall_s": 5.0,
                           "runs": [{"name": "torch.eager", "error": "TypeError: sum()"}]}]}
    monkeypatch.setattr(gb, "run_suite", run_suite)
    part = [gs.make_step(n) for n in ("probe", "suite:paper_fig7", "suite:global_norm_1024x1024",
                                      "correctness:softmax")]
    s = gs.run_part(part, tmp_path / "p1", simulator=True)
    assert order == ["probe", ("suite", ("paper_fig7", "global_norm_1024x1024")), "correctness:softmax"]
    assert s["steps"]["suite:paper_fig7"] == {"ok": True, "case": "paper_fig7", "results": "results.json",
                                              "seconds": 12.3}
    failed = s["steps"]["suite:global_norm_1024x1024"]
    assert failed["ok"] is False and "torch.eager" in failed["error"] and failed["seconds"] == 5.0


def test_a_correctness_step_cut_off_keeps_the_plans_it_checked(tmp_path, monkeypatch):
    import json

    from benchmarks import gpu_correctness
    from benchmarks import gpu_session as gs
    why = [KeyboardInterrupt("the device command's time limit"), RuntimeError("boom")]

    def check_all(workloads, strategies, preset, simulator, record):
        record([{"workload": workloads[0], "strategy": strategies[0], "ok": True}])
        raise why.pop(0)
    monkeypatch.setattr(gpu_correctness, "check_all", check_all)
    part = [gs.make_step("correctness:softmax"), gs.make_step("correctness:rmsnorm")]
    with pytest.raises(KeyboardInterrupt):
        gs.run_part(part, tmp_path / "p1", simulator=True)
    s = json.loads((tmp_path / "p1" / "session.json").read_text())
    assert s["steps"] == {"correctness:softmax": {"ok": None, "in_progress": True, "rows": [
        {"workload": "softmax", "strategy": "unfused", "ok": True}]}}
    s = gs.run_part(part[1:], tmp_path / "p2", simulator=True)        # an error: FAILED, what it checked kept
    rec = s["steps"]["correctness:rmsnorm"]
    assert rec["ok"] is False and "boom" in rec["error"] and rec["rows"][0]["workload"] == "rmsnorm"


def _write_part(d, steps, device="NVIDIA H200", planned=None):
    import json

    from benchmarks import gpu_session as gs
    d.mkdir(parents=True)
    (d / "session.json").write_text(json.dumps({"format": gs.FORMAT, "mode": "gpu", "part": "1/1",
                                                "planned": planned or list(steps),
                                                "provenance": {"device": device}, "steps": steps}))
    return d


def test_render_merges_every_correctness_step_into_one_table(tmp_path):
    """The first window's one cut-off step and a later window's steps per workload: one table; a plan in
    both is taken from the first folder given."""
    import astitch_sim as asim
    from benchmarks import gpu_session as gs

    def rows(w, n=6, bad=()):
        return [{"workload": w, "strategy": s, "ok": s not in bad} for s in list(asim.STRATEGIES)[:n]]
    old = _write_part(tmp_path / "old", {"correctness": {"ok": None, "in_progress": True,
                                                         "rows": rows("layernorm") + rows("log_softmax", 5, ["xla"])}})
    new = _write_part(tmp_path / "new", {"correctness:log_softmax": {"ok": True, "rows": rows("log_softmax")},
                                         "correctness:cross_entropy": {"ok": False,
                                                                       "rows": rows("cross_entropy", bad=["astitch"])},
                                         "correctness:swiglu": {"ok": None, "in_progress": True,
                                                                "rows": rows("swiglu", 2)}})
    gs.render([new, old], tmp_path / "out", calibrate=False)
    md = (tmp_path / "out" / "session.md").read_text()
    assert md.count("## Correctness") == 1
    assert "19/20 plans match the numpy reference; failed: cross_entropy/astitch." in md
    assert "Not checked: 70 of 90 catalog plans (" in md and "swiglu (4)" in md and "log_softmax" not in \
        md.split("Not checked")[1].split("\n")[0]
    assert "**Cut off**: the command's time limit ended `correctness:swiglu` after 2 plans" in md
    assert "**Cut off**: the command's time limit ended `correctness` after 11 plans" in md
    gs.render([old, new], tmp_path / "out2", calibrate=False)       # the old folder first: its plan wins
    md = (tmp_path / "out2" / "session.md").read_text()
    assert "19/20 plans match the numpy reference; failed: log_softmax/xla, cross_entropy/astitch." not in md
    assert "18/20 plans match the numpy reference; failed: log_softmax/xla, cross_entropy/astitch." in md


def test_render_lists_each_sanitizer_tool(tmp_path):
    from benchmarks import gpu_session as gs
    d = _write_part(tmp_path / "p1", {
        "sanitizer:memcheck": {"ok": True, "tools": {"memcheck": {"ok": True, "verdict": "clean", "ran": 8,
                                                                  "cases": 8}}},
        "sanitizer:racecheck": {"ok": None, "skipped": "not started: 400 s spent, estimate 205 s, budget 540 s"}})
    gs.render([d], tmp_path / "out", calibrate=False)
    md = (tmp_path / "out" / "session.md").read_text()
    assert "- memcheck: clean (8/8 plans ran)" in md
    assert "- racecheck: not run: not started: 400 s spent" in md


def test_a_part_on_another_gpu_than_the_skipped_steps_warns(tmp_path, monkeypatch):
    from benchmarks import gpu_bench as gb
    from benchmarks import gpu_session as gs
    skipped = {"steps": ["suite:paper_fig7"], "devices": ["NVIDIA H200"], "dirs": [str(FIRST_WINDOW)]}
    s = gs.run_part([], tmp_path / "p1", simulator=True, skipped=skipped)       # the simulator: another device
    assert s["skip_done"] == skipped and "NVIDIA H200" in s["warnings"][0]
    gs.render([tmp_path / "p1"], tmp_path / "out", calibrate=False)
    assert "**Warning**: --skip-done dropped steps done on NVIDIA H200" in (tmp_path / "out" / "session.md").read_text()
    real = gb.provenance
    monkeypatch.setattr(gb, "provenance", lambda *a, **k: {**real(*a, **k), "device": "NVIDIA H200"})
    assert "warnings" not in gs.run_part([], tmp_path / "p2", simulator=True, skipped=skipped)


def test_a_case_timed_again_with_todays_plans_in_a_later_window_is_done(tmp_path):
    """Two windows: the first timed a case with a plan the planner no longer draws, the second with today's.
    The case is done, and not listed as stale."""
    import json

    import astitch_sim as asim
    from astitch_sim.hardware.measured import plan_signature
    from benchmarks import gpu_session as gs
    g = asim.workload("softmax", rows=4096, cols=32)
    for window, rules in (("w1", {"fusion_rules": "tf-2.6"}), ("w2", {})):
        d = tmp_path / window / "p1"
        d.mkdir(parents=True)
        (d / "session.json").write_text(json.dumps({"mode": "gpu", "provenance": {"device": "NVIDIA H100"},
                                                    "steps": {}}))
        run = {"name": "xla", "strategy": "xla", "validation": {"ok": True},
               "plan_signature": plan_signature(asim.compile(g, "xla", "H100", **rules))}
        case = {"key": "softmax_4096x32", "workload": "softmax", "shape": {"rows": 4096, "cols": 32}, "runs": [run]}
        (d / "results.json").write_text(json.dumps({"mode": "gpu", "gpu_preset": "H100", "cases": [case]}))
    assert gs.done_steps([tmp_path / "w1"])["stale"] == ["suite:softmax_4096x32 (xla)"]
    both = gs.done_steps([tmp_path / "w1", tmp_path / "w2"])
    assert both["steps"] == ["suite:softmax_4096x32"] and both["stale"] == []


def test_a_correctness_row_of_a_plan_the_planner_no_longer_draws_does_not_count(tmp_path):
    """gpu_correctness records each checked plan's ``plan_signature``; ``--skip-done`` counts a workload's
    correctness done only if every strategy's checked plan is still drawn (rows without one count as is)."""
    import json

    import astitch_sim as asim
    from astitch_sim.hardware.measured import plan_signature
    from benchmarks import gpu_session as gs
    shape = {"rows": 64, "cols": 32}
    g = asim.workload("softmax", **shape)

    def window(name, xla_rules):
        rows = []
        for s in asim.STRATEGIES:
            opts = xla_rules if s == "xla" else {}
            rows.append({"workload": "softmax", "shape": shape, "strategy": s, "preset": "H100", "ok": True,
                         "plan_signature": plan_signature(asim.compile(g, s, "H100", **opts))})
        d = tmp_path / name / "p1"
        d.mkdir(parents=True)
        (d / "session.json").write_text(json.dumps({"mode": "gpu", "provenance": {"device": "NVIDIA H100"},
                                                    "steps": {"correctness:softmax": {"ok": True, "rows": rows}}}))
        return tmp_path / name

    assert gs.done_steps([window("today", {})])["steps"] == ["correctness:softmax"]
    assert gs.done_steps([window("paper", {"fusion_rules": "tf-2.6"})])["steps"] == []
    unsigned = window("unsigned", {"fusion_rules": "tf-2.6"})
    f = unsigned / "p1" / "session.json"
    doc = json.loads(f.read_text())
    for r in doc["steps"]["correctness:softmax"]["rows"]:
        del r["plan_signature"]
    f.write_text(json.dumps(doc))
    assert gs.done_steps([unsigned])["steps"] == ["correctness:softmax"]


def test_a_signed_run_this_tree_cannot_compile_counts_as_unchanged():
    """A recorded run of a strategy or workload this tree no longer has is not 'stale' (there is nothing to
    time again) and does not stop --skip-done with an error."""
    from benchmarks import gpu_session as gs
    case = {"key": "k", "workload": "softmax", "shape": {"rows": 64, "cols": 32},
            "runs": [{"strategy": "no_such_strategy", "plan_signature": "0" * 16}]}
    assert gs._plans_changed(case, "H100") == []
    assert gs._plans_changed(dict(case, workload="no_such_workload"), "H100") == []
    assert gs._row_plan_changed({"workload": "softmax", "strategy": "no_such", "plan_signature": "0" * 16}) is False
