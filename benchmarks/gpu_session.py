"""The GPU window's runbook: a window of device time cut into device commands (parts), then a render step here.

    python -m benchmarks.gpu_session --plan                          # the window's parts and what is left (no GPU)
    python -m benchmarks.gpu_session --plan --skip-done benchmarks/results/2026-11-*-h200/parts
    python -m benchmarks.gpu_session --part 1/2 --out $OUT/p1 --commit <hash> [--skip-done ...]   # on the GPU
    python -m benchmarks.gpu_session --render p1 p2 --out benchmarks/results/<date>-<device>      # here
    python -m benchmarks.gpu_session --simulator --out /tmp/dry      # every step, no GPU (CI)

A lent GPU comes with about 15 minutes of device time, machine start included (a start
costs 35-60 s, and none starts with under 4 minutes left), at most 10 minutes per
command, on a bare image (nothing to install; the repository travels, ``../shared``
does not).  The window's work is a list of *steps* (:func:`steps`), in the order of
what they are worth, each with a duration (:data:`ESTIMATE_S`: measured on the H200 on
2026-11-27, 2026-11-29 or 2026-11-30 where :data:`MEASURED_S` has the step, an estimate elsewhere):

``probe``, ``copy``         first (seconds): driver, versions, where NVVM / libdevice / the device
                            runtime come from, a plain, a grid-sync kernel, CUDA events
                            (:mod:`benchmarks.gpu_probe`) -- if they fail nothing else can run, fix
                            here; then memcpy, a 4-byte and a 128-bit Numba copy
                            (:mod:`benchmarks.copy_bandwidth`), the ceiling every "% of copy" of the
                            window's suite uses, so it is measured on the same machine;
``suite:<case>``            the window's purpose, numbers only a GPU gives: every strategy's plan
                            after apply_compiler against ``jax.jit``, ``torch.compile``, eager torch
                            (:mod:`benchmarks.gpu_bench`); every run is validated against the
                            reference, so a case also checks its plans at the suite's size;
``launches:<case>``         one suite case under astitch at several block-size caps (``max_block_threads``),
                            each plan validated and timed, beside the cost model's static and simulated
                            predictions (:mod:`benchmarks.launch_sweep`): whether block size matters where
                            the model prices every size alike (the DIEN softmax); 7-8 s each;
``correctness:<workload>``  every strategy's plan of one catalog workload at catalog size, after
                            apply_compiler, against the numpy reference (:mod:`benchmarks.gpu_correctness`):
                            workloads and shapes the suite lacks; 6-92 s each, so they fill a part;
``sanitizer:<tool>``        last: compute-sanitizer memcheck or racecheck on a sample with stitched
                            cooperative kernels (:mod:`benchmarks.sanitizer`): ~10 s each on the H200
                            (its cap is 200 s), a yes/no about races that no device changes,
                            and a tool cut off gives no verdict.  A window it does not fit leaves it
                            for the next, where ``--skip-done`` moves it up as the rest is done.

:func:`window_plan` keeps, in that order, the steps that fit ``--window-s`` (900 s) less
one machine start (:data:`START_S`) and :data:`CALL_S` per device command -- a step that
does not fit is passed over for a later one that does -- and cuts them into N
contiguous parts of at most :data:`PART_LIMIT_S` each (:func:`partition`), N the count
that plans the most work (:data:`DEFAULT_PARTS` for a 900 s window).  What does not fit
is printed as left for a later window.  ``--skip-done DIR...`` drops the steps an
earlier window's parts (any ``session.json`` / ``results.json`` under DIR) finished: a
suite case whose every run was timed (or skipped by design) and validated, a workload
whose every strategy matched, a sanitizer tool found clean; failed steps run again, and
probe and copy always run.  It is for the same GPU model only (the run tool's ``kind``
picks it): a part on another GPU records a warning that the render prints.  ``--plan``
here and ``--part K/N`` there must be given the same ``--window-s``, ``--skip-done``,
``--cases`` and ``--workloads``: the plan is computed again on each side.

A part writes into ``--out``: ``session.json`` (provenance, every step's record,
rewritten after each step and each checked plan) and, when it has suite steps,
gpu_bench's ``results.json`` / ``results.md`` (rewritten after each case).  A part
cut off by the command's time limit leaves what it finished (a correctness step
keeps the plans it checked); steps it did not reach are listed as such.  Before a
step whose estimate would overrun ``--budget-s`` the part stops and says so.

``--render`` (on the CPU) merges parts, of one window or of several (a step or case
recorded twice: the first folder given wins, so list the newest first):
``results.json`` / ``results.md`` (the copy bandwidth of whichever part measured it;
every case's share of it recomputed), ``session.md`` (probe, one correctness table over
every correctness step, sanitizer, copy, the headline, the cross-check),
``crosscheck.json`` (:mod:`benchmarks.crosscheck`: the cost model fitted on two thirds
of the cases, judged on the held-out third).

``--simulator`` runs every step (no window) in Numba's CUDA simulator at tiny sizes,
the baselines on the CPU where installed, then the render step: the whole pipeline,
no GPU number (every time is labelled the simulator's).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from astitch_sim.errors import AStitchError

FORMAT = "astitch-sim gpu_session 2"        # 2: correctness and sanitizer are one step per workload / tool
#: one device command is at most 10 minutes; a part is planned to end well inside it
PART_LIMIT_S = 540
#: the device time a window has, machine start included (the first window's, 2026-11-27)
WINDOW_S = 900
#: one machine start (35-60 s seen); no machine starts with under MIN_START_S of device time left
START_S = 60
MIN_START_S = 240
#: each device command's cost besides its steps: Python's start and imports (7 s measured: call 3's 214 s
#: against its part's 207 s), the transfers, the gap until the next call (an estimate: the first window's
#: 900 s less 682 s of command wall and a start leave ~50 s for each of its three calls)
CALL_S = 45

MEASURED_ON = "H200 on 2026-11-27, 2026-11-29 and 2026-11-30"
#: seconds each step took in the H200 windows (benchmarks/results/2026-11-27-h200, 2026-11-29-h200 and
#: 2026-11-30-h200, NOTES.md in each), the slowest where several ran it: probe and copy from each window's
#: parts/p1/session.json; a correctness workload from its start to its last plan checked (planning,
#: apply_compiler's ptxas runs, the reference, six runs: ``workload_seconds`` of its last row in a part's
#: session.json); a suite case its ``wall_s`` in a part's results.json (inputs, reference, apply_compiler, six
#: plans, the baselines); a launch sweep or a sanitizer tool its step's ``seconds``.  Every measurement is of a
#: whole step: the first window's partial ones (log_softmax cut off, five cases without their torch baselines)
#: were run whole in the second.  The sanitizer tools ran their eight small plans in under 10 s each on the
#: third window, against the 205 s planned from their cap.
MEASURED_S = {
    "probe": 1.1, "copy": 4.6,
    "correctness:layernorm": 31.8, "correctness:rmsnorm": 23.2, "correctness:batchnorm_train": 35.9,
    "correctness:layernorm_backward": 48.4, "correctness:global_norm": 14.4, "correctness:softmax": 37.7,
    "correctness:attention_softmax": 18.2, "correctness:log_softmax": 91.8, "correctness:cross_entropy": 14.8,
    "correctness:bias_gelu": 22.6, "correctness:swiglu": 19.9, "correctness:adam_step": 15.2,
    "correctness:paper_fig7": 19.6, "correctness:row_reduce": 5.7, "correctness:column_reduce": 13.1,
    "suite:layernorm_16384x768": 48.4, "suite:rmsnorm_4096x4096": 31.4, "suite:softmax_750000x32": 27.8,
    "suite:bias_gelu_16384x3072": 30.8, "suite:layernorm_backward_16384x768": 72.1,
    "suite:layernorm_8192x4096": 58.1, "suite:softmax_64x30000": 47.9, "suite:attention_softmax_196608x512": 40.4,
    "suite:batchnorm_train_65536x64": 60.5, "suite:global_norm_1024x1024": 35.2,
    "suite:adam_step_110M": 83.7, "suite:cross_entropy_8192x32000": 81.0, "suite:paper_fig7": 37.2,
    "launches:softmax_750000x32": 8.2, "launches:layernorm_16384x768": 6.9,
    "sanitizer:memcheck": 9.4, "sanitizer:racecheck": 9.7,
}
#: estimates of steps never measured: the launch sweeps added after the third window, whose two sweeps of two to
#: four plans took 7-8 s (a plan through ptxas, Numba's compile, validation, 20 timed runs and a simulation)
UNMEASURED_S = {
    "launches:rmsnorm_4096x4096": 10, "launches:attention_softmax_196608x512": 15,
    "launches:layernorm_backward_16384x768": 20, "launches:batchnorm_train_65536x64": 20,
    "launches:softmax_64x30000": 15,
}
#: the seconds a plan counts per step: a measurement rounded up; an estimate elsewhere
ESTIMATE_S = {**{k: math.ceil(v) for k, v in MEASURED_S.items()}, **UNMEASURED_S}
DEFAULT_CASE_S = 55             # a suite case not listed above
DEFAULT_WORKLOAD_S = 40         # a catalog workload not listed above (six plans at ~6 s)
#: steps --skip-done never drops: seconds, and the window's suite needs this machine's copy bandwidth
ALWAYS = ("probe", "copy")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Step:
    name: str              # "probe", "copy", "suite:<case key>", "correctness:<workload>", "sanitizer:<tool>"
    estimate_s: float
    measured_s: float = 0.0     # the part of the estimate measured on a GPU (MEASURED_S), 0 if none

    @property
    def kind(self) -> str:
        return self.name.split(":", 1)[0]

    @property
    def arg(self) -> str:
        return self.name.split(":", 1)[1] if ":" in self.name else ""


def estimate(name: str) -> float:
    if name in ESTIMATE_S:
        return ESTIMATE_S[name]
    kind = name.split(":", 1)[0]
    if kind == "sanitizer":
        from benchmarks.sanitizer import TIMEOUT_S
        return TIMEOUT_S + 5
    return DEFAULT_WORKLOAD_S if kind == "correctness" else DEFAULT_CASE_S


def make_step(name: str) -> Step:
    e = estimate(name)
    return Step(name, e, min(MEASURED_S.get(name, 0.0), e))


def steps(cases: Optional[list] = None, workloads: Optional[list] = None) -> list:
    """Every step of a window, in the order of what they are worth (the module's docstring says why).

    ``cases``: suite case keys or workload names (default all); ``workloads``: catalog workloads for the
    correctness steps (default all)."""
    import astitch_sim as asim
    from benchmarks.sanitizer import TOOLS
    from benchmarks.suite import select
    try:
        chosen = select(cases)
    except SystemExit as e:
        raise AStitchError(f"--cases: {e}") from None
    unknown = sorted(set(workloads or ()) - set(asim.WORKLOADS))
    if unknown:
        raise AStitchError(f"--workloads: unknown {unknown}; catalog: {', '.join(asim.WORKLOADS)}")
    from benchmarks.launch_sweep import SWEEPS
    names = (list(ALWAYS) + [f"suite:{c.key}" for c in chosen] + [f"launches:{k}" for k in SWEEPS if k in {c.key for c in chosen}]
             + [f"correctness:{w}" for w in asim.WORKLOADS if not workloads or w in workloads]
             + [f"sanitizer:{t}" for t in TOOLS])
    return [make_step(n) for n in names]


def partition(all_steps: list, n: int) -> list:
    """``n`` contiguous slices of ``all_steps`` whose largest estimated total is as small as it can be."""
    if n < 1:
        raise AStitchError(f"--part: N must be at least 1, got {n}")
    if not all_steps:
        return [[] for _ in range(n)]
    m = min(n, len(all_steps))

    def cut(cap):
        parts, cur, load = [], [], 0.0
        for s in all_steps:
            if cur and load + s.estimate_s > cap:
                parts.append(cur)
                cur, load = [], 0.0
            cur.append(s)
            load += s.estimate_s
        return parts + [cur]

    lo, hi = max(s.estimate_s for s in all_steps), sum(s.estimate_s for s in all_steps)
    while hi - lo > 1:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if len(cut(mid)) > m else (lo, mid)
    parts = cut(hi)
    return parts + [[] for _ in range(n - len(parts))]


def seconds(part: list) -> float:
    return sum(s.estimate_s for s in part)


def capacity(window_s: float, n: int) -> float:
    """Seconds of steps a window of ``window_s`` holds in ``n`` device commands (one machine start)."""
    return window_s - START_S - n * CALL_S


def parts_for_window(window_s: float) -> int:
    """The fewest device commands of at most PART_LIMIT_S each that can use all of a window's time."""
    if window_s < MIN_START_S:
        raise AStitchError(f"--window-s {window_s:.0f}: no machine starts with under {MIN_START_S} s of device "
                           "time left")
    return max(1, math.ceil((window_s - START_S) / (PART_LIMIT_S + CALL_S)))


@dataclass(frozen=True)
class WindowPlan:
    window_s: float         # 0: no window (every step, in n parts)
    parts: list             # N lists of Steps, one per device command
    left: list              # the steps that do not fit: for a later window
    capacity_s: float       # the seconds of steps the window holds with N commands

    @property
    def n(self) -> int:
        return len(self.parts)

    @property
    def planned_s(self) -> float:
        return sum(seconds(p) for p in self.parts)


def window_plan(all_steps: list, window_s: float = WINDOW_S, n: Optional[int] = None) -> WindowPlan:
    """The steps of ``all_steps`` (in order) that fit a window of ``window_s`` seconds, in ``n`` parts.

    A step that does not fit is passed over for a later one that does.  ``n`` None: the count of parts that
    plans the most work (the fewest of equals).  ``window_s`` 0: no window, every step in ``n`` parts."""
    if not window_s:
        n = n or DEFAULT_PARTS
        return WindowPlan(0, partition(all_steps, n), [], math.inf)
    if n is None:
        plans = [window_plan(all_steps, window_s, k) for k in range(1, parts_for_window(window_s) + 1)]
        return max(plans, key=lambda p: (p.planned_s, -p.n))
    if n < 1:
        raise AStitchError(f"--part: N must be at least 1, got {n}")
    cap = capacity(window_s, n)
    chosen, left = [], []
    for s in all_steps:
        trial = chosen + [s]
        if seconds(trial) <= cap and max(seconds(p) for p in partition(trial, n)) <= PART_LIMIT_S:
            chosen = trial
        else:
            left.append(s)
    return WindowPlan(window_s, partition(chosen, n), left, cap)


#: the parts a default window is planned in: follows from WINDOW_S, START_S, CALL_S and PART_LIMIT_S
DEFAULT_PARTS = parts_for_window(WINDOW_S)


def parse_part(spec: str) -> tuple:
    try:
        k, n = (int(v) for v in spec.split("/"))
    except ValueError:
        raise AStitchError(f"--part wants K/N (e.g. 1/2), got {spec!r}") from None
    if not 1 <= k <= n:
        raise AStitchError(f"--part wants K/N with 1 <= K <= N, got {spec!r}")
    return k, n


def _split(part: list) -> str:
    m = sum(s.measured_s for s in part)
    return f"{m:.0f} m + {seconds(part) - m:.0f} e"


def plan_text(plan: WindowPlan, skipped: Optional[dict] = None) -> str:
    n = plan.n
    if plan.window_s:
        lines = [f"A {plan.window_s:.0f} s window: one machine start (~{START_S} s) and {n} device command(s) "
                 f"(~{CALL_S} s each besides the steps) leave {plan.capacity_s:.0f} s; "
                 f"{plan.planned_s:.0f} s planned in {n} part(s):"]
    else:
        lines = [f"No window limit: every step in {n} part(s):"]
    lines.append(f"  (seconds: m = measured on the {MEASURED_ON}, e = estimated; each part must stay under "
                 f"{PART_LIMIT_S} s)")
    for k, part in enumerate(plan.parts, 1):
        total = seconds(part)
        flag = "" if total <= PART_LIMIT_S else f"  OVER {PART_LIMIT_S} s: use more parts"
        lines.append(f"  part {k}/{n} ~{total:.0f} s ({_split(part)}){flag}: " + ", ".join(s.name for s in part))
    if plan.left:
        lines.append(f"  left for a later window ~{seconds(plan.left):.0f} s ({_split(plan.left)}): "
                     + ", ".join(s.name for s in plan.left))
    else:
        lines.append("  left for a later window: nothing")
    if skipped:
        lines.append(f"  done in an earlier window on {', '.join(skipped['devices']) or 'an unnamed device'} "
                     f"(--skip-done {' '.join(skipped['dirs'])}), not planned: "
                     + (", ".join(skipped["steps"]) or "nothing"))
        if skipped.get("stale"):
            lines.append("  timed there with plans the planner no longer draws, so planned again: "
                         + ", ".join(skipped["stale"]))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# --skip-done: what an earlier window finished
# ---------------------------------------------------------------------------

def _case_done(case: dict) -> bool:
    """A suite case every run of which was timed (or skipped by design) and, where checked, valid."""
    return not case.get("error") and all(not r.get("error") and (r.get("validation") or {}).get("ok", True)
                                         for r in case.get("runs", []))


def _correctness_records(steps_rec: dict) -> list:
    return [rec for name, rec in steps_rec.items() if name.split(":", 1)[0] == "correctness"]


def _sanitizer_records(steps_rec: dict) -> list:
    return [(name, rec) for name, rec in steps_rec.items() if name.split(":", 1)[0] == "sanitizer"]


def _launches_done(rec: dict, preset: str) -> bool:
    """A launch sweep every plan of which ran valid and is still the plan the planner draws at its caps."""
    if not rec.get("ok") or not rec.get("rows"):
        return False
    return not any(_plan_changed(rec.get("workload", ""), rec.get("shape"), "astitch", preset, r["plan_signature"],
                                 max_block_threads=cap)
                   for r in rec["rows"] for cap in r.get("max_block_threads", []))


def done_steps(dirs: list, mode: str = "gpu") -> dict:
    """The steps the parts under ``dirs`` (any ``session.json`` / ``results.json`` below them) finished.

    Returns ``{"steps": [names], "devices": [...], "dirs": [...], "stale": [...]}``; only records of ``mode``
    count.  A suite case is done when one results file timed every run of it, each with the plan the planner
    draws today; ``stale`` lists the cases timed only with plans it no longer draws (:func:`_plans_changed`),
    which run again."""
    import astitch_sim as asim
    done, devices, matched, stale = set(), set(), set(), set()
    for d in dirs:
        d = Path(d)
        sessions = sorted(d.rglob("session.json")) if d.is_dir() else []
        if not sessions:
            raise AStitchError(f"--skip-done {d}: no session.json under it (give the folder of a window's parts)")
        for f in sessions:
            s = json.loads(f.read_text())
            if s.get("mode") != mode:
                continue
            prov = s.get("provenance")
            devices |= {p.get("device") for p in (prov if isinstance(prov, list) else [prov]) if p and p.get("device")}
            for rec in _correctness_records(s.get("steps", {})):
                matched |= {(r["workload"], r["strategy"]) for r in rec.get("rows") or []
                            if r.get("ok") and not _row_plan_changed(r)}
            for _, rec in _sanitizer_records(s.get("steps", {})):
                done |= {f"sanitizer:{tool}" for tool, r in (rec.get("tools") or {}).items() if r.get("ok")}
            done |= {name for name, rec in s.get("steps", {}).items() if name.split(":", 1)[0] == "launches"
                     and _launches_done(rec, s.get("gpu_preset", "H100"))}
        for f in sorted(d.rglob("results.json")):
            r = json.loads(f.read_text())
            if r.get("mode") == mode:
                for c in r.get("cases", []):
                    changed = _plans_changed(c, r.get("gpu_preset", "H100"))
                    if changed:
                        stale.add(f"suite:{c['key']} ({', '.join(changed)})")
                    elif _case_done(c):
                        done.add(f"suite:{c['key']}")
    done |= {f"correctness:{w}" for w in asim.WORKLOADS if all((w, s) in matched for s in asim.STRATEGIES)}
    stale = {s for s in stale if s.split(" (")[0] not in done}     # timed again with today's plans elsewhere
    return {"steps": sorted(done), "devices": sorted(devices), "dirs": [str(d) for d in dirs],
            "stale": sorted(stale)}


def _plan_changed(workload: str, shape, strategy: str, preset: str, signature: str, **options) -> bool:
    """Is the plan timed with ``signature`` (``astitch_sim.hardware.measured.plan_signature``) no longer the
    plan the planner draws for ``workload`` at ``shape`` (a dict; anything else: the catalog default) under
    ``strategy`` on ``preset`` (with ``options``: a launch sweep's cap)?  A workload, shape or strategy this
    tree cannot compile counts as unchanged: there is nothing to time again."""
    import astitch_sim as asim
    from astitch_sim.hardware.measured import plan_signature
    try:
        plan = asim.compile(asim.workload(workload, **(shape if isinstance(shape, dict) else {})), strategy, preset,
                            **options)
    except (TypeError, asim.AStitchError):
        return False
    return plan_signature(plan) != signature


def _row_plan_changed(row: dict) -> bool:
    """A correctness row whose plan the planner no longer draws; a row without a signature (the first
    window's) counts as is."""
    return bool(row.get("plan_signature")) and _plan_changed(
        row.get("workload", ""), row.get("shape"), row.get("strategy", ""), row.get("preset", "H100"),
        row["plan_signature"])


def _plans_changed(case: dict, preset: str) -> list:
    """The strategies whose plan for ``case`` the planner no longer draws.  Such a case is not done: the next
    window times today's plans (a results file without signatures cannot be told, and counts as is)."""
    return [r["strategy"] for r in case.get("runs", []) if r.get("plan_signature") and r.get("strategy")
            and _plan_changed(case.get("workload", ""), case.get("shape"), r["strategy"], preset,
                              r["plan_signature"])]


def drop_done(all_steps: list, done: dict) -> tuple:
    """(the steps still to run, the names dropped): ``done`` from :func:`done_steps`; ALWAYS steps stay."""
    names = set(done["steps"])
    keep = [s for s in all_steps if s.name in ALWAYS or s.name not in names]
    return keep, [s.name for s in all_steps if s not in keep]


# ---------------------------------------------------------------------------
# one part, on the device machine (or in the simulator)
# ---------------------------------------------------------------------------

def _choose_mode(simulator: bool) -> dict:
    """Before numba.cuda is imported: the simulator, or CUDA_HOME for numba-cuda where no wheel has NVVM."""
    named = None
    if simulator:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        from gpu_backend.machine.toolchain import cuda_home_for_numba
        named = cuda_home_for_numba()
        if named:
            os.environ["CUDA_HOME"] = named
            log(f"CUDA_HOME={named} (numba-cuda finds NVVM and libdevice there; no wheel brings them)")
    return {"cuda_home_named": named}


class Session:
    """A part's ``session.json``, rewritten after every step (and every checked plan)."""

    def __init__(self, out_dir: Path, header: dict):
        self.path = out_dir / "session.json"
        self.data = dict(header, steps={})
        self.write()

    def record(self, name: str, rec: dict) -> None:
        self.data["steps"][name] = rec
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


def run_part(part_steps: list, out_dir, simulator: bool, commit: Optional[str] = None, label: str = "1/1",
             baselines=None, budget_s: float = PART_LIMIT_S, argv: Optional[list] = None,
             skipped: Optional[dict] = None) -> dict:
    """Run ``part_steps`` in their order into ``out_dir``; returns the session dict.

    The part's suite cases run together (one gpu_bench run, one results.json) where the first of them stands.
    ``skipped``: what ``--skip-done`` dropped (:func:`done_steps`), recorded; a device other than the one
    those steps ran on is a warning."""
    from benchmarks import gpu_bench as gb
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mode = _choose_mode(simulator)
    t_start = time.monotonic()
    try:
        prov = gb.provenance("simulator" if simulator else "gpu", argv or sys.argv, commit)
    except Exception as e:          # noqa: BLE001 - numba-cuda cannot reach the GPU: the probe step says more
        prov = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "device": None,
                "command": " ".join(argv or sys.argv), "git_commit": commit or "unknown",
                "error": f"{type(e).__name__}: {e}"}
        log(f"provenance failed: {prov['error']}")
    preset = "H100" if simulator else (gb.detect_preset(prov.get("device") or "") or "H100")
    header = {"format": FORMAT, "mode": "simulator" if simulator else "gpu", "part": label,
              "planned": [s.name for s in part_steps], "estimates_s": {s.name: s.estimate_s for s in part_steps},
              "gpu_preset": preset, "provenance": prov, **mode}
    if skipped:
        header["skip_done"] = skipped
        if skipped.get("devices") and prov.get("device") not in skipped["devices"]:
            header["warnings"] = [f"--skip-done dropped steps done on {', '.join(skipped['devices'])}, but this "
                                  f"part ran on {prov.get('device')}: those steps have no result on this device"]
            log("WARNING: " + header["warnings"][0])
    session = Session(out_dir, header)
    budget = float("inf") if simulator else budget_s
    suite_steps = [s for s in part_steps if s.kind == "suite"]
    for s in part_steps:
        if s.kind == "suite":
            if s is suite_steps[0]:
                _run_suite_steps(suite_steps, session, out_dir, simulator, preset, baselines, commit, argv, label)
            continue
        spent = time.monotonic() - t_start
        if spent + s.estimate_s > budget:
            session.record(s.name, {"ok": None, "skipped": f"not started: {spent:.0f} s spent, estimate "
                                                           f"{s.estimate_s:.0f} s, budget {budget:.0f} s"})
            continue
        log(f"[{label}] {s.name} (estimate {s.estimate_s:.0f} s{', simulator' if simulator else ''})")
        t0 = time.monotonic()
        try:
            rec = STEP_RUNNERS[s.kind](session=session, simulator=simulator, preset=preset, prov=prov,
                                       out_dir=out_dir, name=s.name, arg=s.arg)
        except Exception as e:      # noqa: BLE001 - one step failing must not cost the others
            import traceback
            rec = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=6)}
            kept = session.data["steps"].get(s.name) or {}
            if kept.get("rows"):    # a correctness step keeps the plans it checked
                rec["rows"] = kept["rows"]
        rec["seconds"] = round(time.monotonic() - t0, 1)
        session.record(s.name, rec)
        log(f"[{label}] {s.name}: {'ok' if rec.get('ok') else 'FAILED' if rec.get('ok') is False else 'done'} "
            f"in {rec['seconds']} s")
    session.data["wall_s"] = round(time.monotonic() - t_start, 1)
    session.data["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    session.write()
    return session.data


def _run_suite_steps(suite_steps, session, out_dir, simulator, preset, baselines, commit, argv, label) -> None:
    """The part's suite cases in one gpu_bench run; each case's record: ok, its failed runs, its seconds."""
    from benchmarks import gpu_bench as gb
    keys = [s.arg for s in suite_steps]
    log(f"[{label}] suite: {', '.join(keys)}")
    t0 = time.monotonic()
    try:
        res = gb.run_suite(str(out_dir), simulator=simulator, gpu_preset=preset, only=keys,
                           baselines=list(gb.BASELINES if baselines is None else baselines), commit=commit,
                           plot=False, argv=argv, apply_compiler=True, copy=False)
    except Exception as e:          # noqa: BLE001
        for k in keys:
            session.record(f"suite:{k}", {"ok": False, "case": k, "error": f"{type(e).__name__}: {e}",
                                          "seconds": round(time.monotonic() - t0, 1)})
        return
    by_key = {c["key"]: c for c in res["cases"]}
    for k in keys:
        c = by_key.get(k)
        if c is None:
            session.record(f"suite:{k}", {"ok": False, "case": k, "error": "not in gpu_bench's results"})
            continue
        failed = [r["name"] for r in c["runs"] if r.get("error") or not (r.get("validation") or {}).get("ok", True)]
        rec = {"ok": _case_done(c), "case": k, "results": "results.json", "seconds": round(c.get("wall_s", 0), 1)}
        if c.get("error") or failed:
            rec["error"] = c.get("error") or f"runs failed or wrong: {', '.join(failed)}"
        session.record(f"suite:{k}", rec)


def _probe(session, simulator, prov, **_):
    from benchmarks.gpu_probe import probe
    p = probe(simulator, session.data.get("cuda_home_named"), prov.get("nvidia_smi"))
    p["ok"] = all((p.get(k) or {}).get("ok") for k in ("toolchain", "plain", "grid_sync", "events"))
    return p


def _copy(simulator, prov, **_):
    from benchmarks import copy_bandwidth
    from benchmarks.gpu_bench import Clock
    l2 = prov.get("l2_bytes") or 50 * 2**20
    clock = Clock(simulator, l2, reps=1 if simulator else 20, warmup=0 if simulator else 3)
    rec = copy_bandwidth.measure(clock, 2**14 if simulator else 2**30, prov.get("sms") or 132)
    rec["ok"] = all(rec[f"{k}_valid"] for k in ("memcpy", "scalar", "vec128"))
    if simulator:
        from benchmarks.gpu_bench import SIM_NOTE
        rec["note"] = SIM_NOTE
    return rec


def _correctness(session, simulator, preset, name, arg, **_):
    """One catalog workload, every strategy; the plans checked so far are in session.json after each."""
    import astitch_sim as asim
    from benchmarks.gpu_correctness import check_all

    def record(rows):
        session.record(name, {"ok": None, "in_progress": True, "rows": rows})
    rows = check_all([arg], list(asim.STRATEGIES), preset, simulator, record)
    return {"ok": all(r.get("ok") for r in rows), "rows": rows, "plans": len(rows),
            "failed": [f"{r['workload']}/{r['strategy']}" for r in rows if not r.get("ok")]}


def _launches(simulator, preset, arg, prov=None, **_):
    from benchmarks.launch_sweep import sweep
    return sweep(arg, simulator, preset, log=log, l2_bytes=(prov or {}).get("l2_bytes"))


def _sanitizer(simulator, preset, arg, **_):
    import tempfile

    from benchmarks import sanitizer
    # the child's script and kernel cache go to a temporary folder: only a few files may come back from $OUT
    with tempfile.TemporaryDirectory(prefix="astitch_sanitizer_") as tmp:
        tmp = Path(tmp)
        if simulator:
            rec = sanitizer.run_plain(tmp / "child", sanitizer.SANITIZED_SIM, preset)
            return {"ok": rec["ok"], "plain": rec, "note": "CUDA simulator: the child ran without compute-sanitizer"}
        rec = sanitizer.run_tool(arg, tmp / arg, sanitizer.SANITIZED, preset)
    return {"ok": bool(rec.get("ok")), "tools": {arg: rec}}


#: a step's runner by its kind (the name before ':')
STEP_RUNNERS = {"probe": _probe, "copy": _copy, "launches": _launches, "correctness": _correctness,
                "sanitizer": _sanitizer}


# ---------------------------------------------------------------------------
# render, on the CPU
# ---------------------------------------------------------------------------

def render(part_dirs: list, out_dir, calibrate: bool = True, max_elements: int = 1 << 20) -> dict:
    """Merge the parts in ``part_dirs`` into ``out_dir``: results.json/md, session.md, crosscheck.json.

    A step or suite case recorded in two parts: the first folder given wins (list the newest window first)."""
    from benchmarks import gpu_bench as gb
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sessions, result_files = [], []
    for d in part_dirs:
        d = Path(d)
        if not (d / "session.json").exists():
            raise AStitchError(f"{d}: no session.json (give the folders a part wrote)")
        sessions.append(json.loads((d / "session.json").read_text()))
        if (d / "results.json").exists():
            result_files.append(str(d / "results.json"))
    modes = {s["mode"] for s in sessions}
    if len(modes) != 1:
        raise AStitchError(f"parts from different modes {sorted(modes)}: render GPU and simulator parts apart")
    mode = modes.pop()
    steps_all = {}
    for s in sessions:
        for name, rec in s["steps"].items():
            if name not in steps_all or (rec.get("ok") is not None and steps_all[name].get("ok") is None):
                steps_all[name] = rec
    for s in sessions:              # planned in a part, but the command ended before the part reached it
        for name in s.get("planned", []):
            steps_all.setdefault(name, {"ok": None, "not_reached": True})
    merged = {"format": FORMAT, "mode": mode, "parts": [s["part"] for s in sessions],
              "provenance": [s["provenance"] for s in sessions], "steps": steps_all,
              "warnings": [w for s in sessions for w in s.get("warnings", [])],
              "rendered": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    results = None
    if result_files:
        results = gb.merge_results(result_files)
        copy = steps_all.get("copy")
        if copy and copy.get("bandwidth_gbs"):
            results["copy"] = {k: v for k, v in copy.items() if k not in ("seconds",)}
            results["settings"]["copy_bandwidth_gbs"] = copy["bandwidth_gbs"]
        for c in results["cases"]:
            gb.derive(c, results["settings"].get("copy_bandwidth_gbs"), mode == "simulator")
        gb.write_outputs(results, str(out_dir), plot=mode != "simulator")
    cc = None
    if calibrate and results is not None:
        cc = _crosscheck(results, mode, max_elements)
        (out_dir / "crosscheck.json").write_text(json.dumps(cc, indent=1, default=str))
    (out_dir / "session.json").write_text(json.dumps(merged, indent=1, default=str))
    (out_dir / "session.md").write_text("\n".join(session_markdown(merged, results, cc)) + "\n")
    return {"session": merged, "results": results, "crosscheck": cc}


def _crosscheck(results: dict, mode: str, max_elements: int) -> dict:
    from benchmarks import calibrate, crosscheck
    samples = calibrate.samples_from_results(results, max_elements)
    cc = crosscheck.run(samples)
    cc["banner"] = ("CUDA SIMULATOR TIMES, NOT GPU TIMING: a dry run of the pipeline, not a cross-check"
                    if mode == "simulator" else "")
    return cc


def step_verdict(rec: dict) -> str:
    """One step's result in a word or a line: ok, FAILED (why), not started, not reached, or cut off mid-step."""
    if rec.get("skipped"):
        return "skipped: " + rec["skipped"]
    if rec.get("not_reached"):
        return "not reached: the command ended before it"
    if rec.get("in_progress"):
        done = len(rec.get("rows") or [])
        return f"cut off by the command's time limit ({done} done, kept)"
    if rec.get("ok"):
        return "ok"
    return "FAILED" + (f": {rec['error'][:100]}" if rec.get("error") else "")


def merged_correctness(steps_all: dict) -> dict:
    """Every correctness step's plans in one table (the old single step and one step per workload alike).

    A plan checked in two records: the first wins.  Returns rows, the catalog's plans not checked (by
    workload) and the steps a time limit cut off (with how many plans each kept)."""
    import astitch_sim as asim
    seen, cut = {}, []
    for name, rec in steps_all.items():
        if name.split(":", 1)[0] != "correctness":
            continue
        for r in rec.get("rows") or []:
            seen.setdefault((r["workload"], r["strategy"]), r)
        if rec.get("in_progress"):
            cut.append((name, len(rec.get("rows") or [])))
    missing = {}
    for w in asim.WORKLOADS:
        n = sum((w, s) not in seen for s in asim.STRATEGIES)
        if n:
            missing[w] = n
    return {"rows": list(seen.values()), "missing": missing, "cut": cut}


def _catalog_plan_count() -> int:
    import astitch_sim as asim
    return len(asim.WORKLOADS) * len(asim.STRATEGIES)


def _sanitizer_lines(st: dict) -> list:
    L = []
    for name, rec in _sanitizer_records(st):
        tool = name.split(":", 1)[1] if ":" in name else ""
        who = f"{tool}: " if tool else ""
        if rec.get("skipped") or rec.get("not_reached"):
            L.append(f"- {who}not run: {rec.get('skipped') or 'the command ended before it'}")
            continue
        runs = rec.get("tools") or ({f"{tool} dry run".strip(): rec["plain"]} if rec.get("plain") else {})
        if not runs and rec.get("error"):
            L.append(f"- {who}FAILED: {rec['error'][:100]}")
        for t, r in runs.items():
            L.append(f"- {t}: {r.get('verdict') or r.get('skipped')} ({r.get('ran', 0)}/{r.get('cases', '?')} "
                     "plans ran)")
    return L


def session_markdown(merged: dict, results: Optional[dict], cc: Optional[dict]) -> list:
    from benchmarks.gpu_probe import summary_lines
    sim = merged["mode"] == "simulator"
    p0 = merged["provenance"][0] if merged["provenance"] else {}
    L = [f"# GPU window: {p0.get('device')}", ""]
    if sim:
        L += ["**CUDA simulator dry run: no number below is a GPU measurement.**", ""]
    L += [f"**Warning**: {w}" for w in merged.get("warnings", [])] + ([""] if merged.get("warnings") else [])
    L += [f"- parts {', '.join(merged['parts'])}; commit `{p0.get('git_commit')}`; sources `{p0.get('source_digest')}`",
          f"- first part {p0.get('date')}, driver {p0.get('driver')}, CUDA driver {p0.get('cuda_driver_version')}, "
          f"command `{p0.get('command')}`", ""]
    st = merged["steps"]
    L += ["## Steps", "", "| step | result | seconds |", "|---|---|---|"]
    for name, rec in st.items():
        L.append(f"| {name} | {step_verdict(rec)} | {rec.get('seconds', '-')} |")
    if st.get("probe") and not st["probe"].get("not_reached"):
        L += ["", "## Probe", ""] + summary_lines(st["probe"])
    corr = merged_correctness(st)
    if corr["rows"]:
        rows = corr["rows"]
        ok = sum(1 for r in rows if r.get("ok"))
        failed = [f"{r['workload']}/{r['strategy']}" for r in rows if not r.get("ok")]
        L += ["", "## Correctness (catalog plans, every strategy, after apply_compiler)", "",
              f"{ok}/{len(rows)} plans match the numpy reference"
              + (f"; failed: {', '.join(failed)}" if failed else "") + "."]
        if corr["missing"]:
            L += ["", f"Not checked: {sum(corr['missing'].values())} of {_catalog_plan_count()} catalog plans ("
                      + ", ".join(f"{w} ({n})" for w, n in corr["missing"].items()) + ")."]
        for name, n in corr["cut"]:
            L += ["", f"**Cut off**: the command's time limit ended `{name}` after {n} plans (kept above)."]
    san = _sanitizer_lines(st)
    if san:
        L += ["", "## compute-sanitizer", ""] + san
    cp = st.get("copy")
    if cp and cp.get("memcpy_us") is not None:
        unit = " (simulator wall clock)" if sim else ""
        L += ["", "## Copy bandwidth (bytes read + written / GPU time)", "",
              "| copy | us | GB/s |", "|---|---|---|"]
        for k in ("memcpy", "scalar", "vec128"):
            bw = cp.get(f"{k}_bandwidth_gbs")
            L.append(f"| {k} | {cp[f'{k}_us']:.1f}{unit} | {'-' if sim or bw is None else f'{bw:.0f}'} |")
    sweeps = [(name, rec) for name, rec in st.items() if name.split(":", 1)[0] == "launches" and rec.get("rows")]
    if sweeps:
        from benchmarks.launch_sweep import markdown as sweep_markdown
        L += ["", "## Launch sweeps (one plan's work at several block-size caps)", ""]
        for name, rec in sweeps:
            L += sweep_markdown(name, rec, sim)
    if results is not None:
        L += ["", "## The suite", "", "Per case tables, the headline (astitch against jax.jit and torch.compile) and "
              "the targets: `results.md`."]
    if cc is not None:
        from benchmarks.crosscheck import markdown
        L += [""] + markdown(cc, cc.get("banner", ""))
    return L


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------

def dry_run(out_dir, parts: int = DEFAULT_PARTS, cases=None, workloads=None, baselines=None, commit=None,
            argv=None) -> dict:
    """Every step (no window) in the simulator, in ``parts`` parts into ``out_dir/pK``, then the render step."""
    out_dir = Path(out_dir)
    dirs = []
    for k, part_steps in enumerate(window_plan(steps(cases, workloads), 0, parts).parts, 1):
        d = out_dir / f"p{k}"
        run_part(part_steps, d, True, commit, f"{k}/{parts}", baselines, argv=argv)
        dirs.append(d)
    return render(dirs, out_dir)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_session", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out", help="folder for this part's files (or the render's)")
    ap.add_argument("--part", metavar="K/N", help="run the K-th of the window plan's N parts (one device command)")
    ap.add_argument("--plan", action="store_true", help="print the window's parts, their estimates and what is "
                                                        "left for a later window; run nothing")
    ap.add_argument("--parts", type=int, help="N for --plan (default: the count that plans the most work) and "
                                              f"--simulator (default {DEFAULT_PARTS})")
    ap.add_argument("--window-s", type=float, default=WINDOW_S,
                    help=f"device time of the window, machine start included (default {WINDOW_S}; 0: no limit, "
                         "every step)")
    ap.add_argument("--skip-done", nargs="+", metavar="DIR",
                    help="drop the steps an earlier window's parts under DIR finished (same GPU model only)")
    ap.add_argument("--simulator", action="store_true", help="every step in Numba's CUDA simulator, then render")
    ap.add_argument("--render", nargs="+", metavar="PART_DIR", help="merge these parts' folders into --out (CPU)")
    ap.add_argument("--cases", nargs="+", help="suite cases (keys or workload names; default all)")
    ap.add_argument("--workloads", nargs="+", help="catalog workloads for the correctness steps (default all)")
    ap.add_argument("--baselines", nargs="*", help="default: jax.jit torch.eager torch.native torch.compile")
    ap.add_argument("--commit", help="git commit to record (the device machine has no .git)")
    ap.add_argument("--budget-s", type=float, default=PART_LIMIT_S,
                    help=f"a part starts no step its estimate would take past this (default {PART_LIMIT_S})")
    ap.add_argument("--no-calibrate", action="store_true", help="--render without the cross-check")
    a = ap.parse_args(argv)
    try:
        all_steps = steps(a.cases, a.workloads)     # bad --cases / --workloads fail here, before anything expensive
        skipped = None
        if a.skip_done and not a.render:
            skipped = done_steps(a.skip_done, "simulator" if a.simulator else "gpu")
            all_steps, skipped["steps"] = drop_done(all_steps, skipped)
        if a.plan:
            print(plan_text(window_plan(all_steps, a.window_s, a.parts), skipped))
            return 0
        if not a.out:
            raise AStitchError("--out is required (the folder this part, the dry run or the render writes)")
        if a.render:
            r = render(a.render, a.out, calibrate=not a.no_calibrate)
            print((Path(a.out) / "session.md").read_text())
            return 0 if r else 1
        cmd = ["-m", "benchmarks.gpu_session"] + argv
        if a.simulator:
            if a.skip_done:
                raise AStitchError("--skip-done is for --plan and --part (the dry run runs every step)")
            dry_run(a.out, a.parts or DEFAULT_PARTS, a.cases, a.workloads, a.baselines, a.commit, cmd)
            print((Path(a.out) / "session.md").read_text())
            return 0
        if not a.part:
            raise AStitchError("give --part K/N (one device command per part; --plan shows them), --simulator "
                               "or --render")
        k, n = parse_part(a.part)
        plan = window_plan(all_steps, a.window_s, n)
        if plan.left:
            log(f"[{k}/{n}] left for a later window: {', '.join(s.name for s in plan.left)}")
        run_part(plan.parts[k - 1], a.out, False, a.commit, f"{k}/{n}", a.baselines, a.budget_s, cmd, skipped)
        return 0
    except AStitchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
