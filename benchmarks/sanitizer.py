"""compute-sanitizer (memcheck, racecheck) on a sample of generated kernels, in a child process.

The sanitizer runs a *program*: a child Python that compiles and runs a few plans
chosen to use every construct the code generator emits (shared-memory trees,
Regional values, a stitched cooperative kernel with grid barriers, split
reductions combined with atomics, Global values).  Two things decide whether the
verdict means anything:

* the child must import the project: on the GPU image ``astitch_sim`` is not
  installed, so :func:`child_env` puts the checkout on ``PYTHONPATH`` (without
  it the child dies on import and the sanitizer's non-zero exit reads as
  "found problems");
* it must end inside one device command (10 minutes): :data:`TIMEOUT_S` bounds
  each tool's run, and a run cut off says so (``timed_out``) instead of
  passing or failing.

Used by ``tests/gpu_backend/test_gpu_backend_device.py`` and by the runbook
(``python -m benchmarks.gpu_session``).  Without compute-sanitizer (or in the
CUDA simulator) :func:`run_plain` runs the same child without it: that proves
the child imports and its plans validate, nothing about races.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent

#: one tool's run, seconds: both tools and the rest of the runbook's part fit one 10-minute command
TIMEOUT_S = 200
TOOLS = ("memcheck", "racecheck")

#: (workload, shape, strategy): small enough for the sanitizer (10-100x slower), every construct used;
#: softmax 2x8192 astitch and paper_fig7 astitch are stitched cooperative kernels (grid barriers)
SANITIZED = [("paper_fig7", {}, "astitch"), ("softmax", dict(rows=2, cols=8192), "astitch"),
             ("layernorm", dict(rows=64, cols=768), "astitch"), ("batchnorm_train", dict(rows=4096, cols=64), "xla"),
             ("cross_entropy", dict(rows=64, cols=1000), "astitch"), ("row_reduce", dict(rows=4096, cols=32), "astitch"),
             ("layernorm_backward", dict(rows=64, cols=768), "astitch"),
             ("global_norm", dict(rows=256, cols=256), "astitch")]
#: the simulator's version of the sample: the same constructs at shapes Python threads run in seconds
SANITIZED_SIM = [("paper_fig7", dict(n=8, c=16), "astitch"), ("softmax", dict(rows=2, cols=256), "astitch"),
                 ("batchnorm_train", dict(rows=64, cols=8), "xla")]

CHILD = textwrap.dedent("""
    import sys, numpy as np, astitch_sim as asim, gpu_backend
    from astitch_sim.frontends.workloads import workload_inputs
    cases = {cases!r}
    print("astitch_sim from", asim.__file__, flush=True)
    for name, shape, strategy in cases:
        g = asim.workload(name, **shape)
        ins = workload_inputs(g, 0)
        plan = asim.compile(g, strategy, {preset!r})
        outs = gpu_backend.run(plan, ins)
        for o, r in zip(outs, asim.reference(g, ins), strict=True):
            assert np.allclose(o, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.nanmax(np.abs(r))))), name
        coop = sum(k.cooperative for k in plan.kernels)
        print("ran", name, strategy, f"kernels={{len(plan.kernels)}} cooperative={{coop}}", flush=True)
""")


def find() -> Optional[str]:
    """The compute-sanitizer binary (PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin), or None."""
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if home and Path(home, "bin", "compute-sanitizer").exists():
                return str(Path(home, "bin", "compute-sanitizer"))
    return exe


def child_env(cache_dir, simulator: bool = False, base: Optional[dict] = None) -> dict:
    """The child's environment: the checkout first on PYTHONPATH, its own kernel cache, the simulator off
    (unless ``simulator``)."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["ASTITCH_GPU_CACHE"] = str(cache_dir)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


def write_child(folder, cases=SANITIZED, preset: str = "H100") -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "run_plans.py"
    script.write_text(CHILD.format(cases=list(cases), preset=preset))
    return script


def _run(cmd, env, timeout, cases) -> dict:
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return {"ok": False, "timed_out": True, "seconds": time.monotonic() - t0, "ran": out.count("ran "),
                "cases": len(cases), "log": out[-4000:], "verdict": f"cut off after {timeout} s (no verdict)"}
    ran = r.stdout.count("ran ")
    ok = r.returncode == 0 and ran == len(cases)
    return {"ok": ok, "timed_out": False, "returncode": r.returncode, "seconds": time.monotonic() - t0, "ran": ran,
            "cases": len(cases), "log": (r.stdout[-4000:] + r.stderr[-4000:]),
            "ran_lines": [ln for ln in r.stdout.splitlines() if ln.startswith("ran ")],
            "imported_from": next((ln.split(" from ", 1)[1] for ln in r.stdout.splitlines()
                                   if ln.startswith("astitch_sim from ")), None)}


def run_tool(tool: str, workdir, cases=SANITIZED, preset: str = "H100", timeout: float = TIMEOUT_S) -> dict:
    """compute-sanitizer ``tool`` over the child; ``{"ok", "verdict", "ran", "log", ...}``."""
    if tool not in TOOLS:
        from astitch_sim.errors import AStitchError
        raise AStitchError(f"unknown compute-sanitizer tool {tool!r}: use one of {', '.join(TOOLS)}")
    exe = find()
    if exe is None:
        return {"ok": None, "skipped": "compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"}
    workdir = Path(workdir)
    script = write_child(workdir, cases, preset)
    cmd = [exe, "--tool", tool, "--error-exitcode", "97"]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "hazard"]
    rec = _run(cmd + [sys.executable, str(script)], child_env(workdir / "cache"), timeout, cases)
    if "verdict" not in rec:
        rec["verdict"] = ("clean" if rec["ok"] else
                          "problems found" if rec.get("returncode") == 97 else
                          f"child failed (exit {rec.get('returncode')}, {rec['ran']}/{len(cases)} plans ran)")
    rec["tool"] = tool
    return rec


def run_plain(workdir, cases=SANITIZED_SIM, preset: str = "H100", simulator: bool = True,
              timeout: float = TIMEOUT_S) -> dict:
    """The same child without the sanitizer (the dry run's stand-in; in the simulator by default)."""
    workdir = Path(workdir)
    script = write_child(workdir, cases, preset)
    rec = _run([sys.executable, str(script)], child_env(workdir / "cache", simulator), timeout, cases)
    rec["verdict"] = "child ran without compute-sanitizer" + (" (CUDA simulator)" if simulator else "")
    rec["tool"] = None
    return rec


__all__ = ["SANITIZED", "SANITIZED_SIM", "TOOLS", "TIMEOUT_S", "find", "child_env", "write_child", "run_tool",
           "run_plain"]
