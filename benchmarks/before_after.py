"""Plans before and after a change: kernels, global bytes and predicted time at two commits.

The planner's output is the project's product, so a change to it is reported as a table of what moved.
This script checks the *before* commit out into a temporary git worktree, runs the same measurement
there in a subprocess (the old code, importing the old package), runs it again on the code as it is,
and writes the two side by side.  Both sides run on the same inputs: the catalog workloads at the
paper's shapes (``simt_predictions.CASES``) and every HLO fixture under ``tests/fixtures`` (taken from
the current tree, so a fixture added after *before* is still compared; one the old importer refuses is
recorded as unsupported there).  All numbers are SIMT-model predictions, not GPU measurements.

    python benchmarks/before_after.py --before dfb35f1 [--gpu H100] [--stem plans_issue13]

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
STRATEGIES = ("unfused", "xla", "astitch")


def _cases():
    """(label, graph-maker, inputs-maker) for the paper's catalog shapes and every HLO fixture."""
    import astitch_sim as asim
    from astitch_sim.workloads import workload_inputs
    sys.path.insert(0, str(HERE))
    from simt_predictions import CASES
    for label, name, shape in CASES:
        yield label, (lambda name=name, shape=shape: asim.workload(name, **shape)), workload_inputs
    sys.path.insert(0, str(FIXTURES))
    import seeded
    for sub in ("hlo", "ops", "models"):
        for path in sorted((FIXTURES / sub).glob("*.hlo")):
            def inputs(g, seed, path=path):
                return seeded.fixture_inputs(path)
            yield f"{sub}/{path.stem}", (lambda path=path: asim.from_hlo_file(path)), inputs


def measure(gpu: str, only: str = "") -> list:
    """One row per case whose label contains ``only``: per strategy kernels, global bytes and predicted us
    (or the error's first line)."""
    import astitch_sim as asim
    rows = []
    for label, make_graph, make_inputs in _cases():
        if only not in label:
            continue
        row = {"case": label}
        try:
            g = make_graph()
            inputs = make_inputs(g, 0)
        except asim.AStitchError as e:
            row["unsupported"] = str(e).splitlines()[0]
            rows.append(row)
            continue
        for s in STRATEGIES:
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


def _git(*args, cwd=REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def measure_at(rev: str, gpu: str, only: str = "") -> dict:
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
            out = os.path.join(tmp, "rows.json")
            code = (f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import before_after as b; "
                    f"json.dump(b.measure({gpu!r}, {only!r}), open({out!r}, 'w'))")
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
    changed = 0
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
        changed += any(b.get(s) != r.get(s) for s in STRATEGIES)
        lines.append(f"| {r['case']} | " + " | ".join(cells) + f" | {_behind(b) or '-'} | {_behind(r) or '-'} |")
    n_before = sum(bool(_behind(r)) for r in before["rows"])
    n_after = sum(bool(_behind(r)) for r in after["rows"])
    lines += ["", f"{len(after['rows'])} cases; {changed} with a different plan outcome; astitch behind xla in "
              f"{n_before} before and {n_after} after.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the commit (or any git revision) to compare against")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--stem", default="plans_before_after")
    ap.add_argument("--only", default="", help="measure only the cases whose label contains this")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from simt_predictions import provenance, write_results
    print(f"before: {args.before}", file=sys.stderr)
    before = measure_at(args.before, args.gpu, args.only)
    print("after: the working tree", file=sys.stderr)
    after = {"commit": _git("rev-parse", "HEAD"), "rows": measure(args.gpu, args.only)}
    prov = dict(provenance([os.path.relpath(__file__)] + argv), gpu=args.gpu, before_commit=before["commit"],
                dirty_after=bool(_git("status", "--porcelain", "--untracked-files=no")))
    write_results(args.out, args.stem, prov, {"before": before, "after": after}, markdown(before, after, prov))


if __name__ == "__main__":
    main()
