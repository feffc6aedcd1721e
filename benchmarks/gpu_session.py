"""The GPU window's runbook: one command per device call, each under 9 minutes, then a render step here.

    python -m benchmarks.gpu_session --plan --parts 5                 # what each part runs (no GPU)
    python -m benchmarks.gpu_session --out $OUT/p1 --part 1/5 --commit <hash>     # on the GPU machine
    ...
    python -m benchmarks.gpu_session --render p1 p2 p3 p4 p5 --out benchmarks/results/<date>-<device>   # here
    python -m benchmarks.gpu_session --simulator --out /tmp/dry       # the whole runbook, no GPU (CI)

A lent GPU comes for about 30 minutes, at most 10 minutes per command, on a bare
image (nothing to install; the repository travels, ``../shared`` does not).  The
window's work is a list of *steps* (:func:`steps`), each with an estimated duration
on an H100/H200 (:data:`ESTIMATE_S`: estimates from the audit's dry runs and the
simulator, **not measured on a GPU**), cut into N contiguous parts of nearly equal
estimated length (:func:`partition`):

``probe``        driver, versions, where NVVM / libdevice / the device runtime come from,
                 a plain kernel, a grid-sync kernel, CUDA events (:mod:`benchmarks.gpu_probe`);
``copy``         memcpy, a 4-byte and a 128-bit Numba copy (:mod:`benchmarks.copy_bandwidth`);
``correctness``  every catalog plan under every strategy after apply_compiler against the
                 numpy reference (:mod:`benchmarks.gpu_correctness`);
``sanitizer``    compute-sanitizer memcheck and racecheck on a sample with a stitched
                 cooperative kernel (:mod:`benchmarks.sanitizer`);
``suite:<case>`` one suite case: every strategy's plan after apply_compiler against
                 ``jax.jit``, ``torch.compile``, eager torch (:mod:`benchmarks.gpu_bench`).

A part writes into ``--out``: ``session.json`` (provenance, every step's record,
rewritten after each step and each checked plan) and, when it has suite steps,
gpu_bench's ``results.json`` / ``results.md`` (rewritten after each case).  A part
cut off by the command's time limit leaves what it finished; steps it did not
reach are listed as such.  Before a step whose estimate would overrun
``--budget-s`` the part stops and says so (run that step in a later call).

``--render`` (on the CPU) merges parts: ``results.json`` / ``results.md`` (the copy
bandwidth of whichever part measured it; every case's share of it recomputed),
``session.md`` (probe, correctness, sanitizer, copy, the headline, the cross-check),
``crosscheck.json`` (:mod:`benchmarks.crosscheck`: the cost model fitted on two thirds
of the cases, judged on the held-out third).

``--simulator`` runs every part in Numba's CUDA simulator at tiny sizes, the
baselines on the CPU where installed, then the render step: the whole pipeline,
no GPU number (every time is labelled the simulator's).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from astitch_sim.errors import AStitchError

FORMAT = "astitch-sim gpu_session 1"
#: one device command is at most 10 minutes; a part is planned to end well inside it
PART_LIMIT_S = 540
DEFAULT_PARTS = 4
#: estimated seconds per step on an H100/H200 -- estimates (the audit's dry runs, host-side costs measured on a
#: 2-core VM, the simulator), NOT measured on a GPU; a suite case not listed takes DEFAULT_CASE_S
ESTIMATE_S = {"probe": 60, "copy": 25, "correctness": 300, "sanitizer": 300,
              "suite:adam_step_110M": 110, "suite:cross_entropy_8192x32000": 100,
              "suite:attention_softmax_196608x512": 80, "suite:layernorm_8192x4096": 70}
DEFAULT_CASE_S = 55
NON_SUITE = ("probe", "copy", "correctness", "sanitizer")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Step:
    name: str              # "probe", "copy", "correctness", "sanitizer" or "suite:<case key>"
    estimate_s: float


def steps(cases: Optional[list] = None) -> list:
    """Every step of the window, in order (``cases``: suite case keys or workload names; default all)."""
    from benchmarks.suite import select
    out = [Step(n, ESTIMATE_S[n]) for n in NON_SUITE]
    try:
        chosen = select(cases)
    except SystemExit as e:
        raise AStitchError(f"--cases: {e}") from None
    return out + [Step(f"suite:{c.key}", ESTIMATE_S.get(f"suite:{c.key}", DEFAULT_CASE_S)) for c in chosen]


def partition(all_steps: list, n: int) -> list:
    """``n`` contiguous slices of ``all_steps`` whose largest estimated total is as small as it can be."""
    if n < 1:
        raise AStitchError(f"--part: N must be at least 1, got {n}")
    n = min(n, len(all_steps))

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
        lo, hi = (mid, hi) if len(cut(mid)) > n else (lo, mid)
    parts = cut(hi)
    return parts + [[] for _ in range(n - len(parts))]


def parse_part(spec: str) -> tuple:
    try:
        k, n = (int(v) for v in spec.split("/"))
    except ValueError:
        raise AStitchError(f"--part wants K/N (e.g. 1/5), got {spec!r}") from None
    if not 1 <= k <= n:
        raise AStitchError(f"--part wants K/N with 1 <= K <= N, got {spec!r}")
    return k, n


def plan_text(all_steps: list, n: int) -> str:
    lines = [f"{n} parts (estimated seconds on an H100/H200: estimates, not measured on a GPU; "
             f"each part must stay under {PART_LIMIT_S} s):"]
    for k, part in enumerate(partition(all_steps, n), 1):
        total = sum(s.estimate_s for s in part)
        flag = "" if total <= PART_LIMIT_S else f"  OVER {PART_LIMIT_S} s: use more parts"
        lines.append(f"  part {k}/{n} ~{total:.0f} s{flag}: " + ", ".join(s.name for s in part))
    return "\n".join(lines)


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
             workloads: Optional[list] = None, baselines=None, budget_s: float = PART_LIMIT_S,
             argv: Optional[list] = None) -> dict:
    """Run ``part_steps`` into ``out_dir``; returns the session dict."""
    import astitch_sim as asim
    from benchmarks import gpu_bench as gb
    from benchmarks.gpu_correctness import SIM_SHAPES
    if workloads:
        unknown = sorted(set(workloads) - set(asim.WORKLOADS))
        if unknown:
            raise AStitchError(f"--workloads: unknown {unknown}; catalog: {', '.join(asim.WORKLOADS)}")
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
    session = Session(out_dir, {"format": FORMAT, "mode": "simulator" if simulator else "gpu", "part": label,
                                "planned": [s.name for s in part_steps],
                                "estimates_s": {s.name: s.estimate_s for s in part_steps},
                                "gpu_preset": preset, "provenance": prov, **mode})
    budget = float("inf") if simulator else budget_s
    suite_keys = [s.name.split(":", 1)[1] for s in part_steps if s.name.startswith("suite:")]
    for s in part_steps:
        if s.name.startswith("suite:"):
            continue
        spent = time.monotonic() - t_start
        if spent + s.estimate_s > budget:
            session.record(s.name, {"ok": None, "skipped": f"not started: {spent:.0f} s spent, estimate "
                                                           f"{s.estimate_s:.0f} s, budget {budget:.0f} s"})
            continue
        log(f"[{label}] {s.name} (estimate {s.estimate_s:.0f} s{', simulator' if simulator else ''})")
        t0 = time.monotonic()
        try:
            rec = STEP_RUNNERS[s.name](session=session, simulator=simulator, preset=preset, prov=prov,
                                       out_dir=out_dir, workloads=workloads or list(SIM_SHAPES))
        except Exception as e:      # noqa: BLE001 - one step failing must not cost the others
            import traceback
            rec = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=6)}
        rec["seconds"] = round(time.monotonic() - t0, 1)
        session.record(s.name, rec)
        log(f"[{label}] {s.name}: {'ok' if rec.get('ok') else 'FAILED' if rec.get('ok') is False else 'done'} "
            f"in {rec['seconds']} s")
    if suite_keys:
        log(f"[{label}] suite: {', '.join(suite_keys)}")
        t0 = time.monotonic()
        try:
            res = gb.run_suite(str(out_dir), simulator=simulator, gpu_preset=preset, only=suite_keys,
                               baselines=list(gb.BASELINES if baselines is None else baselines), commit=commit,
                               plot=False, argv=argv, apply_compiler=True, copy=False)
            done = {c["key"] for c in res["cases"]}
            rec = {"ok": all(not c.get("error") for c in res["cases"]), "cases": sorted(done),
                   "results": "results.json"}
        except Exception as e:      # noqa: BLE001
            rec = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        rec["seconds"] = round(time.monotonic() - t0, 1)
        for k in suite_keys:
            session.record(f"suite:{k}", {**rec, "case": k})
    session.data["wall_s"] = round(time.monotonic() - t_start, 1)
    session.data["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    session.write()
    return session.data


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


def _correctness(session, simulator, preset, workloads, **_):
    import astitch_sim as asim
    from benchmarks.gpu_correctness import check_all
    names = workloads if simulator else list(asim.WORKLOADS)

    def record(rows):
        session.data["steps"]["correctness"] = {"ok": None, "in_progress": True, "rows": rows}
        session.write()
    rows = check_all(names, list(asim.STRATEGIES), preset, simulator, record)
    return {"ok": all(r.get("ok") for r in rows), "rows": rows, "plans": len(rows),
            "failed": [f"{r['workload']}/{r['strategy']}" for r in rows if not r.get("ok")]}


def _sanitizer(simulator, preset, **_):
    import tempfile

    from benchmarks import sanitizer
    # the child's script and kernel cache go to a temporary folder: only a few files may come back from $OUT
    with tempfile.TemporaryDirectory(prefix="astitch_sanitizer_") as tmp:
        tmp = Path(tmp)
        if simulator:
            rec = sanitizer.run_plain(tmp / "child", sanitizer.SANITIZED_SIM, preset)
            return {"ok": rec["ok"], "plain": rec, "note": "CUDA simulator: the child ran without compute-sanitizer"}
        tools = {t: sanitizer.run_tool(t, tmp / t, sanitizer.SANITIZED, preset) for t in sanitizer.TOOLS}
    return {"ok": all(r.get("ok") for r in tools.values()), "tools": tools}


STEP_RUNNERS = {"probe": _probe, "copy": _copy, "correctness": _correctness, "sanitizer": _sanitizer}


# ---------------------------------------------------------------------------
# render, on the CPU
# ---------------------------------------------------------------------------

def render(part_dirs: list, out_dir, calibrate: bool = True, max_elements: int = 1 << 20) -> dict:
    """Merge the parts in ``part_dirs`` into ``out_dir``: results.json/md, session.md, crosscheck.json."""
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
    merged = {"format": FORMAT, "mode": mode, "parts": [s["part"] for s in sessions],
              "provenance": [s["provenance"] for s in sessions], "steps": steps_all,
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
    """One step's result in a word or a line: ok, FAILED (why), not started, or cut off mid-step."""
    if rec.get("skipped"):
        return "skipped: " + rec["skipped"]
    if rec.get("in_progress"):
        done = len(rec.get("rows") or [])
        return f"cut off by the command's time limit ({done} done, kept)"
    if rec.get("ok"):
        return "ok"
    return "FAILED" + (f": {rec['error'][:100]}" if rec.get("error") else "")


def _catalog_plan_count() -> int:
    import astitch_sim as asim
    return len(asim.WORKLOADS) * len(asim.STRATEGIES)


def session_markdown(merged: dict, results: Optional[dict], cc: Optional[dict]) -> list:
    from benchmarks.gpu_probe import summary_lines
    sim = merged["mode"] == "simulator"
    p0 = merged["provenance"][0] if merged["provenance"] else {}
    L = [f"# GPU window: {p0.get('device')}", ""]
    if sim:
        L += ["**CUDA simulator dry run: no number below is a GPU measurement.**", ""]
    L += [f"- parts {', '.join(merged['parts'])}; commit `{p0.get('git_commit')}`; sources `{p0.get('source_digest')}`",
          f"- first part {p0.get('date')}, driver {p0.get('driver')}, CUDA driver {p0.get('cuda_driver_version')}, "
          f"command `{p0.get('command')}`", ""]
    st = merged["steps"]
    L += ["## Steps", "", "| step | result | seconds |", "|---|---|---|"]
    for name, rec in st.items():
        L.append(f"| {name} | {step_verdict(rec)} | {rec.get('seconds', '-')} |")
    if st.get("probe"):
        L += ["", "## Probe", ""] + summary_lines(st["probe"])
    corr = st.get("correctness")
    if corr and corr.get("rows"):
        ok = sum(1 for r in corr["rows"] if r.get("ok"))
        failed = corr.get("failed") or [f"{r['workload']}/{r['strategy']}" for r in corr["rows"] if not r.get("ok")]
        L += ["", "## Correctness (every catalog plan, every strategy, after apply_compiler)", "",
              f"{ok}/{len(corr['rows'])} plans match the numpy reference"
              + (f"; failed: {', '.join(failed)}" if failed else "") + "."]
        if corr.get("in_progress"):
            L += ["", f"**Cut off**: the command's time limit ended this step after {len(corr['rows'])} of "
                      f"{_catalog_plan_count()} plans; the plans not listed in `session.json` were not run."]
    san = st.get("sanitizer")
    if san:
        L += ["", "## compute-sanitizer", ""]
        if san.get("skipped"):
            L.append(f"- not run: {san['skipped']}")
        for tool, r in (san.get("tools") or ({"dry run": san["plain"]} if san.get("plain") else {})).items():
            L.append(f"- {tool}: {r.get('verdict') or r.get('skipped')} ({r.get('ran', 0)}/{r.get('cases', '?')} "
                     "plans ran)")
    cp = st.get("copy")
    if cp and cp.get("memcpy_us") is not None:
        unit = " (simulator wall clock)" if sim else ""
        L += ["", "## Copy bandwidth (bytes read + written / GPU time)", "",
              "| copy | us | GB/s |", "|---|---|---|"]
        for k in ("memcpy", "scalar", "vec128"):
            bw = cp.get(f"{k}_bandwidth_gbs")
            L.append(f"| {k} | {cp[f'{k}_us']:.1f}{unit} | {'-' if sim or bw is None else f'{bw:.0f}'} |")
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
    """Every part in the simulator into ``out_dir/pK``, then the render step into ``out_dir``."""
    out_dir = Path(out_dir)
    all_steps = steps(cases)
    dirs = []
    for k, part_steps in enumerate(partition(all_steps, parts), 1):
        d = out_dir / f"p{k}"
        run_part(part_steps, d, True, commit, f"{k}/{parts}", workloads, baselines, argv=argv)
        dirs.append(d)
    return render(dirs, out_dir)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_session", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out", help="folder for this part's files (or the render's)")
    ap.add_argument("--part", metavar="K/N", help="run the K-th of N parts (one device command each)")
    ap.add_argument("--plan", action="store_true", help="print what each part runs and its estimate, run nothing")
    ap.add_argument("--parts", type=int, default=DEFAULT_PARTS, help="N for --plan and --simulator")
    ap.add_argument("--simulator", action="store_true", help="the whole runbook in Numba's CUDA simulator, then render")
    ap.add_argument("--render", nargs="+", metavar="PART_DIR", help="merge these parts' folders into --out (CPU)")
    ap.add_argument("--cases", nargs="+", help="suite cases (keys or workload names; default all)")
    ap.add_argument("--workloads", nargs="+", help="simulator only: catalog workloads for the correctness step")
    ap.add_argument("--baselines", nargs="*", help="default: jax.jit torch.eager torch.native torch.compile")
    ap.add_argument("--commit", help="git commit to record (the device machine has no .git)")
    ap.add_argument("--budget-s", type=float, default=PART_LIMIT_S,
                    help=f"a part starts no step its estimate would take past this (default {PART_LIMIT_S})")
    ap.add_argument("--no-calibrate", action="store_true", help="--render without the cross-check")
    a = ap.parse_args(argv)
    try:
        all_steps = steps(a.cases)              # bad --cases fail here, before anything expensive
        if a.plan:
            print(plan_text(all_steps, a.parts))
            return 0
        if not a.out:
            raise AStitchError("--out is required (the folder this part, the dry run or the render writes)")
        if a.render:
            r = render(a.render, a.out, calibrate=not a.no_calibrate)
            print((Path(a.out) / "session.md").read_text())
            return 0 if r else 1
        cmd = ["-m", "benchmarks.gpu_session"] + argv
        if a.simulator:
            dry_run(a.out, a.parts, a.cases, a.workloads, a.baselines, a.commit, cmd)
            print((Path(a.out) / "session.md").read_text())
            return 0
        if not a.part:
            raise AStitchError("give --part K/N (one device command per part; --plan shows them), --simulator "
                               "or --render")
        k, n = parse_part(a.part)
        part_steps = partition(all_steps, n)[k - 1]
        run_part(part_steps, a.out, False, a.commit, f"{k}/{n}", a.workloads, a.baselines, a.budget_s, cmd)
        return 0
    except AStitchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
