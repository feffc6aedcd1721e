# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [raw]
# # ASSIGNMENT CONFIG
# name: 06_plan_to_cuda
# init_cell: false
# check_all_cell: false
# export_cell: false
# run_tests: false
# tests:
#   files: true
#   ok_format: false
# requirements: requirements.txt
# autograder_files:
#   - wheels
#   - grading
# files:
#   - checks
#   - benchmarks

# %% [markdown]
# # 6. From plan to CUDA
#
# *astitch-sim tutorials, part 6 of 7 -- about 40 minutes.*
#
# **Learning goals.** After this notebook you can
# - read the Numba-CUDA kernel that `gpu_backend` generates from a plan, and point at the line that
#   carries each plan decision (stage loops, Local registers, Regional shared memory, block and grid
#   barriers, the register cap);
# - run the kernels in Numba's CUDA simulator (no GPU needed) and check them against numpy and the SIMT
#   model;
# - say what has and has not been **measured**: a prediction is not a measurement; find out which GPU
#   measurements a checkout holds, and set each beside the prediction for the same plan.
#
# **Prerequisites.** Notebooks 3 and 5; reading knowledge of CUDA (`threadIdx`, `__syncthreads`,
# shared memory).

# %%
# Setup on Colab only (anywhere else this cell does nothing): fetch astitch-sim, install it, work in its
# tutorials/ folder.  Instructors: put your repository's address here (tutorials/README.md, "Colab").
import sys

ASTITCH_SIM_REPO = "https://github.com/YOUR-ORG/astitch-sim.git"
if "google.colab" in sys.modules:
    import os
    import subprocess
    if "YOUR-ORG" in ASTITCH_SIM_REPO:
        raise RuntimeError("set ASTITCH_SIM_REPO in this cell to the astitch-sim repository you were given")
    if not os.path.isdir("/content/astitch-sim"):
        subprocess.run(["git", "clone", "--depth", "1", ASTITCH_SIM_REPO, "/content/astitch-sim"], check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "/content/astitch-sim[tutorials]"],
                       check=True)
    sys.path.insert(0, "/content/astitch-sim")    # this kernel started before the install: import from the clone
    os.chdir("/content/astitch-sim/tutorials")

# %%
import ctypes.util
import json
import os
import time
from pathlib import Path

# Numba decides at import whether numba.cuda is a real GPU or its CUDA simulator: choose before importing.
if not (ctypes.util.find_library("cuda") or os.path.exists("/dev/nvidiactl")):
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")     # no GPU driver here: simulate

import numpy as np
import astitch_sim as asim
import gpu_backend
from astitch_sim import figures

print("running kernels in", "Numba's CUDA simulator (CPU)" if gpu_backend.simulator() else "a real GPU")

# %%
# The exercise checks. In the student version (tutorials/README.md, "Grading") a grader check cell follows
# each exercise and checks the answer's form; the autograder grades its value (instructor/README.md).
import otter
grader = otter.Notebook("06_plan_to_cuda.ipynb") if Path("tests").is_dir() else None

# %% [markdown]
# ## The same plan, as code
#
# The stitched layernorm of notebook 3 (2 rows of 16, one block of 32 threads). `generate_source` writes one
# `@cuda.jit` kernel per plan kernel; every loop, barrier and memory space in it is the plan's decision,
# written out, with the plan's words as comments.

# %%
g = asim.workload("layernorm", rows=2, cols=16)
plan = asim.compile(g, strategy="astitch", gpu="V100", reduce_scheme="tree")   # the paper's reduction trees
source = gpu_backend.generate_source(plan)
print(source)

# %% [markdown]
# Things to find in it:
# - `@jit(max_registers=...)`: the **apply** of assume-relax-apply (notebook 5);
# - `s_mean = smem[...]`: the Regional value `mean`, a slot in the block's shared memory, written by the
#   row's first thread (`if lane == 0`) and read by every thread of the row after `cuda.syncthreads()`;
# - `r_xc`: the Local value `xc`, kept in the thread's registers from stage 1 to stage 2;
# - the reduction trees: `red0` scratch in shared memory, halving with a barrier per step. They are the paper's
#   scheme, asked for here with `reduce_scheme="tree"`; by default every strategy now reduces with warp
#   shuffles (`shfl_xor`), which need no barrier inside a warp and leave every lane with the row's total, so
#   every lane computes `mean` and keeps it in `r_mean` (registers): no `s_mean`, no `if lane == 0` around
#   it, no block barrier between the stages. Compile without it and compare the sources.

# %% [raw]
# # BEGIN QUESTION
# name: q1_syncthreads
# points: 1

# %% [markdown]
# **Exercise 1.** How many lines of the generated source call `cuda.syncthreads()`? The plan has only two
# block barriers between stages (`plan.kernels[0].block_barriers`): where do the others come from?

# %% [raw]
# # BEGIN SOLUTION

# %%
syncthreads = sum(1 for line in source.splitlines() if "cuda.syncthreads()" in line)  # SOLUTION
syncthreads

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q1_syncthreads_form(syncthreads):
    from checks import public
    public.check("q1_syncthreads", syncthreads=syncthreads)

test_q1_syncthreads_form(syncthreads)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q1_syncthreads(syncthreads):
    from grading import nb06
    nb06.q1_syncthreads(syncthreads)

test_q1_syncthreads(syncthreads)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## Running it
#
# `gpu_backend.run(plan, inputs)` allocates device buffers, launches the kernels in plan order and copies the
# outputs back. In the simulator every CUDA thread runs as Python (a Python thread of its own where the kernel has
# barriers, for them to wait at): slow, but the same kernel code.

# %%
inputs = asim.random_inputs(g)
t0 = time.perf_counter()
cuda_out = gpu_backend.run(plan, inputs)
t_cuda = time.perf_counter() - t0
t0 = time.perf_counter()
simt_out = asim.simulate(plan, inputs).outputs
t_simt = time.perf_counter() - t0
ref = asim.reference(g, inputs)
print(f"CUDA kernels vs numpy: max |diff| {np.max(np.abs(cuda_out[0] - ref[0])):.1e}   "
      f"SIMT model vs numpy: {np.max(np.abs(simt_out[0] - ref[0])):.1e}")
print(f"wall clock on this CPU: Numba CUDA simulator {t_cuda * 1e3:.0f} ms, SIMT model {t_simt * 1e3:.1f} ms")

# %% [markdown]
# An XLA plan becomes several kernels, launched one after the other; each reads what the previous wrote
# from global memory.

# %%
xla_plan = asim.compile(g, strategy="xla", gpu="V100")
xla_source = gpu_backend.generate_source(xla_plan)
print(xla_source[:xla_source.index("@jit")])            # the module's header lists its kernels

# %% [raw]
# # BEGIN QUESTION
# name: q2_xla_kernels
# points: 1

# %% [markdown]
# **Exercise 2.** How many kernel functions does the generated module for `xla_plan` define? Count them in
# the source (each is decorated with `@jit(...)`), and compare with `len(xla_plan.kernels)`.

# %% [raw]
# # BEGIN SOLUTION

# %%
xla_kernels = xla_source.count("\n@jit(")  # SOLUTION
xla_kernels

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q2_xla_kernels_form(xla_kernels):
    from checks import public
    public.check("q2_xla_kernels", xla_kernels=xla_kernels)

test_q2_xla_kernels_form(xla_kernels)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q2_xla_kernels(xla_kernels):
    from grading import nb06
    nb06.q2_xla_kernels(xla_kernels)

test_q2_xla_kernels(xla_kernels)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## A grid barrier in code
#
# The Figure 7 graph at `N=32, C=64` stitches `power.1` Global across 2 blocks. A grid barrier needs a
# **cooperative launch**; in the simulator, `gpu_backend` runs every thread of every block at once so that
# `grid.sync()` is a real barrier over all of them (about 4 seconds here: 2048 Python threads).

# %%
g7 = asim.workload("paper_fig7", n=32, c=64)
plan7 = asim.compile(g7, strategy="astitch", gpu="V100")
source7 = gpu_backend.generate_source(plan7)
for number, line in enumerate(source7.splitlines(), 1):
    if "grid" in line and ("sync" in line or "this_grid" in line):
        print(f"{number:4d}: {line.strip()}")
inputs7 = asim.workloads.workload_inputs(g7)
out7 = gpu_backend.run(plan7, inputs7)
print("max |diff| vs numpy:", np.max(np.abs(out7[0] - asim.reference(g7, inputs7)[0])))

# %% [markdown]
# ## Measured against predicted
#
# The test that matters for a cost model is a GPU: run every plan, time it, compare with the prediction.
# `python -m benchmarks.gpu_bench` does exactly that and writes `results.json` files under `benchmarks/results/`
# (`python -m benchmarks.gpu_session` runs it in a GPU window, a few device commands, one file per command);
# `asim.gpu_measurements` reads them back, and refuses anything that did not come from a real GPU. Three windows,
# each on one NVIDIA H200, are committed: `benchmarks/results/2026-11-27-h200/`, `.../2026-11-29-h200/` and
# `.../2026-11-30-h200/`.

# %%
# the repository's benchmarks/results, found from wherever inside the checkout this notebook runs
results_dir = next(p / "benchmarks" / "results" for p in (Path.cwd(), *Path.cwd().parents)
                   if (p / "benchmarks" / "results").is_dir())
measured = asim.gpu_measurements(str(results_dir))
print(sorted(p.relative_to(results_dir).as_posix() for p in results_dir.rglob("*.json"))[:8], "...")

# %% [markdown]
# `measured` is what `asim.gpu_measurements` accepted from those files: its `rows` (one per GPU-timed plan,
# each with its device and provenance) and, printed, a sentence about what it found. The folder also holds
# the SIMT model's predictions for the benchmark suite, with their provenance -- predictions, not timings:

# %%
with open(results_dir / "simt_predictions.json") as f:
    predictions = json.load(f)
print(predictions["provenance"]["what"])
print("made", predictions["provenance"]["date"], "at commit", predictions["provenance"]["git_commit"][:10])
rows = predictions["rows"]
cases = list(dict.fromkeys(r["case"] for r in rows if r["gpu"] == "H100"))
pred = {(r["case"], r["strategy"]): r["predicted_us"] for r in rows if r["gpu"] == "H100"}

# %% [raw]
# # BEGIN QUESTION
# name: q3_measurements
# points: 1

# %% [markdown]
# **Exercise 3.** How many GPU-measured plan timings does this checkout hold? Ask `measured`, and make sure
# you count timings taken on a GPU, not the predictions above.

# %% [raw]
# # BEGIN SOLUTION

# %%
n_measurements = len(measured.rows)  # SOLUTION
n_measurements

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q3_measurements_form(n_measurements):
    from checks import public
    public.check("q3_measurements", n_measurements=n_measurements)

test_q3_measurements_form(n_measurements)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q3_measurements(n_measurements):
    from grading import nb06
    nb06.q3_measurements(n_measurements)

test_q3_measurements(n_measurements)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Every other time in these notebooks is a *prediction* of the SIMT model's cost model, with constants that
# are estimates (`astitch_sim/simt/cost.py`; only the H200's kernel launch and grid barrier are fitted to GPU
# timings so far, and `benchmarks/README.md` says how a GPU window calibrates them); `print(measured)` says
# what GPU runs this checkout holds.
#
# A measurement and a prediction compare only when they are of **the same plan**: the same workload, shape and
# strategy, compiled for the GPU preset the run names (`m.preset`), and still the plan the planner draws today.
# The GPU suite times real sizes (a BERT layernorm of 16384 x 768), where simulating every plan would take
# minutes; `asim.estimate(plan)` prices a plan with the same cost formula from counters estimated from its
# structure, in milliseconds. And a run records which plan it timed: `m.same_plan(plan)` is False where the
# planner has changed since.

# %%
compared, changed = [], []          # (measurement, predicted us of the same plan today)
for m in measured.rows:
    plan_now = asim.compile(asim.workload(m.workload, **m.shape), m.strategy, gpu=m.preset)
    (changed if m.same_plan(plan_now) is False else compared).append((m, asim.estimate(plan_now)))
print(f"{len(compared)} measured plans beside their predictions, {len(changed)} measured with a plan the "
      "planner no longer draws")
print("predicted / measured, per case and strategy (above 1: the model predicts slower than the GPU ran):")
for case in dict.fromkeys((m.workload, tuple(m.shape.items()), m.preset) for m, _ in compared):
    name = f"{case[0]} {'x'.join(str(v) for _, v in case[1])} ({case[2]})"
    print(f"  {name:<37}" + "  ".join(f"{m.strategy} {us / m.gpu_us:.2f}" for m, us in compared
                                     if (m.workload, tuple(m.shape.items()), m.preset) == case))
for m, us in changed:
    print(f"  plan changed since measured: {m.workload} {m.shape} {m.strategy} -- measured {m.gpu_us:.0f} us "
          f"with the plan of then; today's plan is predicted {us:.0f} us (not a comparison)")

# %% [markdown]
# Predictions go stale when the compiler changes, too. The left panel below reads the SIMT model's
# predictions from the committed file; recompute one case live and compare:

# %%
fig7 = asim.workload("paper_fig7")
live = asim.simulate(asim.compile(fig7, "astitch", "H100"), asim.workloads.workload_inputs(fig7)).stats.predicted_us
print(f"Figure 7, astitch, H100: file {pred[('paper Figure 7', 'astitch')]:.2f} us, live {live:.2f} us"
      + ("" if abs(live - pred[("paper Figure 7", "astitch")]) < 0.05 else
         "  -> the file is older than the code: python -m benchmarks.simt_predictions regenerates it"))

# %% [markdown]
# ## Our numbers
#
# Left: the SIMT model's predicted time of the benchmark suite on the H100 preset (committed file), XLA
# against AStitch. Middle: each GPU measurement against the cost model's prediction for the same plan, size and
# GPU preset (`compared` above; the dotted diagonal is where they would agree; a plan changed since it was
# measured is left out; in a checkout without GPU runs the panel says so). Right: the one thing measured in
# this notebook, the wall clock of the two simulators on this CPU for the same kernel (what each is good for:
# the SIMT model for sizes, the CUDA simulator for the real kernel code).

# %%
fig = figures.new_figure((13, 4.2))
ax1, ax2, ax3 = fig.subplots(1, 3, gridspec_kw={"width_ratios": [3, 2, 1.3]})
y = np.arange(len(cases))
for dy, s, colour in ((-0.2, "xla", "#4c72b0"), (0.2, "astitch", "#55a868")):
    ax1.barh(y + dy, [pred[(c, s)] for c in cases], height=0.38, label=s, color=colour)
ax1.set_yticks(y)
ax1.set_yticklabels(cases, fontsize=7)
ax1.invert_yaxis()
ax1.set_xscale("log")
ax1.set_xlabel("predicted us (SIMT model, H100 preset)")
ax1.legend(fontsize=8)
ax1.set_title("predictions (committed file)", fontsize=9)
if compared:
    for strategy in asim.STRATEGIES:
        points = [(us, m.gpu_us) for m, us in compared if m.strategy == strategy]
        if points:
            ax2.loglog(*zip(*points), "o", markersize=4, label=strategy)
    ends = [v for m, us in compared for v in (us, m.gpu_us)]
    ax2.plot([min(ends) / 1.5, max(ends) * 1.5], [min(ends) / 1.5, max(ends) * 1.5], color="grey", linestyle=":")
    presets = ", ".join(sorted({m.preset for m, _ in compared}))
    ax2.set_xlabel(f"predicted us (cost model, static estimate, {presets} preset)")
    ax2.set_ylabel(f"measured us ({', '.join(sorted({m.device for m, _ in compared}))})")
    ax2.legend(fontsize=6)
    ax2.set_title(f"measured vs predicted: the same plan, size and preset\n({len(compared)} plans"
                  + (f"; {len(changed)} changed since measured, left out" if changed else "") + ")", fontsize=8)
else:
    ax2.text(0.5, 0.5, "no GPU measurements\nin this checkout\n(python -m benchmarks.gpu_session\nmeasures them)",
             ha="center", va="center", fontsize=9, transform=ax2.transAxes)
    ax2.set_xticks([])
    ax2.set_yticks([])
    ax2.set_title("measured vs predicted", fontsize=9)
walls = [t_cuda * 1e3, t_simt * 1e3]
ax3.bar(["CUDA\nsimulator", "SIMT\nmodel"], walls, color=["#dd8452", "#55a868"])
for i, ms in enumerate(walls):
    ax3.text(i, ms, f"{ms:.1f} ms", ha="center", va="bottom", fontsize=8)
ax3.set_ylabel("ms on this CPU (measured)")
ax3.set_title("layernorm 2x16, wall clock", fontsize=9)
fig.tight_layout()
fig
