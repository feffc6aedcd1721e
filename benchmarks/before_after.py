"""Plans before and after a change: kernels, global bytes and predicted time at two commits.

The planner's output is the project's product, so a change to it is reported as a table of what moved.
This script checks the *before* commit out into a temporary git worktree, runs the same measurement
there in a subprocess (the old code, importing the old package), runs it again on the code as it is,
and writes the two side by side.  Both sides run on the same inputs: the catalog workloads at the
paper's shapes (``benchmarks.simt_predictions.CASES``) and every HLO fixture under ``tests/fixtures``
(taken from the current tree, so a fixture added after *before* is still compared; one the old importer
refuses is recorded as unsupported there), with the current tree's input maker (``astitch_sim/frontends/seeded.py``).
All numbers are SIMT-model predictions, not GPU measurements.

The old side imports only the old ``astitch_sim``: the case list reaches it as JSON, and this file and
today's ``seeded.py`` are loaded there from their paths, so any old commit works, whatever its
``benchmarks/`` looked like (before it was a package, or before ``seeded.py`` moved into the library).

    python -m benchmarks.before_after --before dfb35f1 [--gpu H100] [--stem plans_issue13]

dfb35f1 is the last commit before issue 13 (plan quality).  Writes ``STEM.json`` (provenance of both
sides and the raw rows) and ``STEM.md`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIXTURES = REPO / "tests" / "fixtures"
#: the strategies measured unless ``--strategies`` names others (the main table compares xla and astitch)
STRATEGIES = ("unfused", "xla", "astitch")


def case_list(only: str = "") -> list:
    """The cases whose label contains ``only``, as JSON-able dicts: ``{"case", "workload", "shape"}`` for the
    paper's catalog shapes, ``{"case", "hlo"}`` for every HLO fixture (its absolute path)."""
    from benchmarks.simt_predictions import CASES
    cases = [{"case": label, "workload": name, "shape": shape} for label, name, shape in CASES]
    for sub in ("hlo", "ops", "models"):
        cases += [{"case": f"{sub}/{path.stem}", "hlo": str(path)} for path in sorted((FIXTURES / sub).glob("*.hlo"))]
    return [c for c in cases if only in c["case"]]


def measure(gpu: str, only: str = "", strategies=STRATEGIES) -> list:
    """One row per case whose label contains ``only``: per strategy kernels, global bytes and predicted us
    (or the error's first line), with the code as it is."""
    from astitch_sim.frontends import seeded
    return measure_cases(gpu, case_list(only), seeded.fixture_inputs, strategies)


def measure_cases(gpu: str, cases: list, fixture_inputs, strategies=STRATEGIES) -> list:
    """``measure`` on a given case list (see :func:`case_list`), fixtures' inputs from ``fixture_inputs(path)``.
    It imports nothing but ``astitch_sim``, so an old commit's package can run it."""
    import importlib
    import astitch_sim as asim
    try:            # before the frontends/ layout (d359c2b and older) the catalog lived at the package's top
        workload_inputs = importlib.import_module("astitch_sim.workloads").workload_inputs
    except ImportError:
        from astitch_sim.frontends.workloads import workload_inputs
    rows = []
    for case in cases:
        label = case["case"]
        row = {"case": label}
        try:
            if "hlo" in case:
                g = asim.from_hlo_file(case["hlo"])
                inputs = fixture_inputs(case["hlo"])
            else:
                g = asim.workload(case["workload"], **case["shape"])
                inputs = workload_inputs(g, 0)
        except asim.AStitchError as e:
            row["unsupported"] = str(e).splitlines()[0]
            rows.append(row)
            continue
        for s in strategies:
            t0 = time.perf_counter()
            try:
                st = asim.simulate(asim.compile(g, s, gpu), inputs).stats
                row[s] = {"kernels": st.kernel_launches, "global_bytes": st.global_bytes,
                          "predicted_us": st.predicted_us}
            except Exception as e:      # noqa: BLE001 - an old version may fail where the new one does not
                row[s] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            print(f"  {label:40s} {s:8s} {time.perf_counter() - t0:6.1f} s", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def _load_from_path(name: str, path: Path):
    """The module in the file ``path``, loaded under ``name`` whatever the process's ``sys.path`` says."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _measure_old(gpu: str, cases_file: str, out_file: str) -> None:
    """The old commit's side, in its subprocess: ``measure_cases`` with the old ``astitch_sim`` (the one on
    ``PYTHONPATH``) on today's case list and today's inputs (this tree's ``astitch_sim/frontends/seeded.py``, by path:
    ``astitch_sim`` itself is the old one here)."""
    seeded = _load_from_path("_seeded_today", REPO / "astitch_sim" / "frontends" / "seeded.py")
    with open(cases_file) as fh:
        todo = json.load(fh)
    with open(out_file, "w") as fh:
        json.dump(measure_cases(gpu, todo["cases"], seeded.fixture_inputs, todo["strategies"]), fh)


def _git(*args, cwd=REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def measure_at(rev: str, gpu: str, only: str = "", strategies=STRATEGIES) -> dict:
    """Run ``measure`` with the package as it was at ``rev`` (a temporary worktree, removed afterwards)."""
    try:
        commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"before_after: {rev!r} is not a commit of this repository; pass --before with a "
                         f"commit id, tag or branch (e.g. dfb35f1)") from None
    with tempfile.TemporaryDirectory(prefix="astitch-before-") as tmp:
        tree = os.path.join(tmp, "tree")
        _git("worktree", "add", "--detach", tree, commit)
        try:
            env = dict(os.environ, PYTHONPATH=tree)
            cases, out = os.path.join(tmp, "cases.json"), os.path.join(tmp, "rows.json")
            with open(cases, "w") as fh:
                json.dump({"cases": case_list(only), "strategies": list(strategies)}, fh)
            # this file, loaded by its path (the old tree's benchmarks/ may be no package, or lack this script)
            here = str(Path(__file__).resolve())
            code = ("import importlib.util as u; "
                    f"s = u.spec_from_file_location('_before_after_today', {here!r}); b = u.module_from_spec(s); "
                    f"s.loader.exec_module(b); b._measure_old({gpu!r}, {cases!r}, {out!r})")
            subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, check=True)
            with open(out) as fh:
                return {"commit": commit, "rows": json.load(fh)}
        finally:
            _git("worktree", "remove", "--force", tree)


def _fmt_mib(n):
    return f"{n / 2**20:.2f}" if n >= 2**16 else f"{n / 2**20:.4f}"


def _cell(r, s, key):
    v = r.get(s, {})
    if key not in v:
        return "-"
    return _fmt_mib(v[key]) if key == "global_bytes" else (f"{v[key]:.1f}" if key == "predicted_us" else str(v[key]))


def _behind(r):
    """Why astitch is behind xla in this row ('' if it is not): more bytes, or time over xla's x 1.01."""
    x, a = r.get("xla", {}), r.get("astitch", {})
    if "global_bytes" not in x or "global_bytes" not in a:
        return ""
    why = []
    if a["global_bytes"] > x["global_bytes"]:
        why.append(f"bytes {a['global_bytes'] / x['global_bytes']:.3f}x")
    if a["predicted_us"] > 1.01 * x["predicted_us"]:
        why.append(f"time {a['predicted_us'] / x['predicted_us']:.3f}x")
    return ", ".join(why)


def markdown(before: dict, after: dict, prov: dict) -> str:
    b_rows = {r["case"]: r for r in before["rows"]}
    lines = [f"# Plans before ({before['commit'][:7]}) and after ({after['commit'][:7]})", "",
             f"{prov['what']}. {prov['date']}, `{prov['command']}`, GPU preset {prov['gpu']}.", "",
             "Per case: kernels, global MiB and predicted us of xla and astitch, before -> after; "
             "'behind' says where astitch moves more bytes or is predicted over 1% slower than xla.", "",
             "| case | xla kernels | astitch kernels | xla MiB | astitch MiB | xla us | astitch us | behind before | behind after |",
             "|---|---|---|---|---|---|---|---|---|"]
    changed, measured = 0, prov.get("strategies", STRATEGIES)   # a case counts once, whichever strategy moved
    for r in after["rows"]:
        b = b_rows.get(r["case"], {"unsupported": "not in the before run"})
        if "unsupported" in r:
            continue
        if "unsupported" in b:
            cells = [f"(unsupported) -> {_cell(r, s, k)}" for k in ("kernels", "global_bytes", "predicted_us")
                     for s in ("xla", "astitch")]
        else:
            cells = [f"{_cell(b, s, k)} -> {_cell(r, s, k)}" for k in ("kernels", "global_bytes", "predicted_us")
                     for s in ("xla", "astitch")]
        changed += any(b.get(s) != r.get(s) for s in measured if s in r)
        lines.append(f"| {r['case']} | " + " | ".join(cells) + f" | {_behind(b) or '-'} | {_behind(r) or '-'} |")
    n_before = sum(bool(_behind(r)) for r in before["rows"])
    n_after = sum(bool(_behind(r)) for r in after["rows"])
    lines += ["", f"{len(after['rows'])} cases; {changed} with a different plan outcome; astitch behind xla in "
              f"{n_before} before and {n_after} after.", ""]
    lines += _every_change(b_rows, after["rows"], measured)
    return "\n".join(lines) + "\n"


def _every_change(b_rows: dict, rows: list, strategies) -> list:
    """The second table: every (case, strategy) whose kernels, bytes or predicted time moved, any strategy
    measured (``--strategies``), with the ratio of predicted time after / before."""
    out = ["## Every plan outcome that moved", "",
           "| case | strategy | kernels | global MiB | predicted us | after / before |", "|---|---|---|---|---|---|"]
    n = 0
    for r in rows:
        b = b_rows.get(r["case"], {})
        for s in strategies:
            if s not in r or b.get(s) == r.get(s) or "unsupported" in b or "unsupported" in r:
                continue
            was, now = b.get(s, {}), r[s]
            ratio = f"{now['predicted_us'] / was['predicted_us']:.3f}" if "predicted_us" in was and \
                "predicted_us" in now and was["predicted_us"] else "-"
            out.append(f"| {r['case']} | {s} | " + " | ".join(f"{_cell(b, s, k)} -> {_cell(r, s, k)}" for k in
                                                            ("kernels", "global_bytes", "predicted_us")) + f" | {ratio} |")
            n += 1
    return out + ["", f"{n} plan outcome(s) moved (strategies: {', '.join(strategies)}).", ""]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.before_after", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the commit (or any git revision) to compare against")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--stem", default="plans_before_after")
    ap.add_argument("--only", default="", help="measure only the cases whose label contains this")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--strategies", default=",".join(STRATEGIES),
                    help="comma-separated strategies to measure ('all': every registered one); the main table "
                         "compares xla and astitch, a second lists every plan outcome that moved")
    args = ap.parse_args(argv)
    import astitch_sim as asim
    strategies = list(asim.STRATEGIES) if args.strategies == "all" else args.strategies.split(",")
    unknown = sorted(set(strategies) - set(asim.STRATEGIES))
    if unknown or not {"xla", "astitch"} <= set(strategies):
        raise SystemExit(f"before_after: --strategies {args.strategies!r}: " + (
            f"unknown {', '.join(unknown)} (registered: {', '.join(asim.STRATEGIES)})" if unknown else
            "must include xla and astitch (the main table compares them)"))
    from benchmarks.simt_predictions import provenance, write_results
    print(f"before: {args.before}", file=sys.stderr)
    before = measure_at(args.before, args.gpu, args.only, strategies)
    print("after: the working tree", file=sys.stderr)
    after = {"commit": _git("rev-parse", "HEAD"), "rows": measure(args.gpu, args.only, strategies)}
    prov = dict(provenance(["-m", "benchmarks.before_after"] + argv), gpu=args.gpu, before_commit=before["commit"],
                dirty_after=bool(_git("status", "--porcelain", "--untracked-files=no")), strategies=strategies)
    write_results(args.out, args.stem, prov, {"before": before, "after": after}, markdown(before, after, prov))


if __name__ == "__main__":
    main()
