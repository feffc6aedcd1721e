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
# name: 01_why_memory_bound
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

# %% [markdown]
# # 1. Why memory-intensive ops dominate
#
# *astitch-sim tutorials, part 1 of 7 -- about 40 minutes.*
#
# **Learning goals.** After this notebook you can
# - place an operator on the **roofline** of a GPU from its flops and its bytes, and say whether it is
#   memory- or compute-bound;
# - explain the two costs of memory-intensive ops that fusion attacks: **off-chip traffic** and
#   **kernel launches**;
# - read a compiler **plan** (`print(plan)`) and a simulation's counters (`res.stats`), and compare the
#   `unfused` and `xla` strategies on a BERT layernorm.
#
# **Prerequisites.** Python and numpy; what a GPU kernel, a thread block and global memory are (one
# lecture of any CUDA course). No GPU needed: everything runs in astitch-sim's SIMT model.
#
# **How the exercises work.** Each exercise has a cell to fill in and a `grader.check("...")` cell that
# says whether your answer is there and of the right form; the grader then checks its value and sends back
# a hint that says what is wrong without giving the answer away.

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
from pathlib import Path

import numpy as np
import astitch_sim as asim
from astitch_sim import figures

# %%
# The exercise checks. In the student version (tutorials/README.md, "Grading") a grader check cell follows
# each exercise and checks the answer's form; the autograder grades its value (instructor/README.md).
import otter
grader = otter.Notebook("01_why_memory_bound.ipynb") if Path("tests").is_dir() else None

# %% [markdown]
# ## The workload: a BERT layernorm
#
# Between the matrix products of every transformer sit groups of small ops. The layernorm after each
# attention and FFN block of BERT is the textbook case: `16384 x 768` activations (batch 32, sequence
# 512, hidden 768), two row reductions (mean, variance), a handful of elementwise ops.
# astitch-sim's catalog has it, built the way XLA's HLO has it after its simplifier:

# %%
g = asim.workload("layernorm")          # rows=16384, cols=768 by default
print(g)

# %% [markdown]
# Every node is *memory-intensive*: an elementwise op does a few flops per element it loads, a reduce one
# add per element. None of them is a matrix product.
#
# ## The roofline
#
# A kernel that does `F` flops while moving `B` bytes to and from DRAM cannot run faster than either
# limit: `time >= max(F / peak_flops, B / bandwidth)`. Its **arithmetic intensity** `F / B` (flop per
# byte) says which limit binds. The **ridge point** `peak_flops / bandwidth` is where the two meet:
# below it a kernel is memory-bound, above it compute-bound. The GPU presets carry the datasheet numbers:

# %%
v100 = asim.gpu("V100")
print(v100.describe())

# %% [raw]
# # BEGIN QUESTION
# name: q1_ridge
# points: 1

# %% [markdown]
# **Exercise 1.** Compute the V100's ridge point in flop per byte from its fp32 peak
# (`v100.fp32_gflops`, in GFLOP/s) and its DRAM bandwidth (`v100.dram_bandwidth_gbs`, in GB/s).

# %% [raw]
# # BEGIN SOLUTION

# %%
ridge = v100.fp32_gflops / v100.dram_bandwidth_gbs  # SOLUTION
ridge

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q1_ridge_form(ridge):
    from checks import public
    public.check("q1_ridge", ridge=ridge)

test_q1_ridge_form(ridge)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q1_ridge(ridge):
    from grading import nb01
    nb01.q1_ridge(ridge)

test_q1_ridge(ridge)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Now the layernorm's side of the ratio. Its **minimum traffic** is what any implementation must move:
# read every input once and write every output once. Its flops we take from the simulator: `simulate`
# runs a plan on the SIMT model and counts every flop and every byte.
#
# We plan it twice: `unfused` (one kernel per op, what a framework without a compiler launches) and `xla`
# (XLA's fusion rules, notebook 2). Simulating a 16384 x 768 layernorm takes about a second per plan.

# %%
inputs = asim.random_inputs(g)
plans = {s: asim.compile(g, strategy=s, gpu="V100") for s in ("unfused", "xla")}
results = {s: asim.simulate(p, inputs) for s, p in plans.items()}
reference = asim.reference(g, inputs)
for s, r in results.items():
    err = np.max(np.abs(r.outputs[0] - reference[0]))
    print(f"{s:8s} kernels={r.stats.kernel_launches:2d}  flops={r.stats.flops / 1e6:6.1f} M  "
          f"global traffic={r.stats.global_bytes / 2**20:6.1f} MiB  max |error| vs numpy={err:.1e}")

min_bytes = sum(p.nbytes for p in g.inputs) + sum(o.nbytes for o in g.outputs)
print(f"minimum traffic: {min_bytes / 2**20:.1f} MiB")

# %% [raw]
# # BEGIN QUESTION
# name: q2_intensity
# points: 1

# %% [markdown]
# **Exercise 2.** What is the layernorm's arithmetic intensity in flop per byte? Use the flops of the
# `xla` plan (`results["xla"].stats.flops`) and the minimum traffic `min_bytes`. Is that left or right of
# the ridge point?

# %% [raw]
# # BEGIN SOLUTION

# %%
intensity = results["xla"].stats.flops / min_bytes  # SOLUTION
intensity

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q2_intensity_form(intensity):
    from checks import public
    public.check("q2_intensity", intensity=intensity)

test_q2_intensity_form(intensity)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q2_intensity(intensity):
    from grading import nb01
    nb01.q2_intensity(intensity)

test_q2_intensity(intensity)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# For contrast, the matrix product of BERT's FFN that follows a layernorm,
# `[16384, 768] x [768, 3072]`: `2*M*N*K` flops over its operands and result.
# The roofline picture puts a few catalog workloads next to it (flops counted by the simulator at a
# smaller size, which does not change a ratio that grows with the tensor):

# %%
M, K, N = 16384, 768, 3072
gemm_intensity = 2 * M * N * K / (4 * (M * K + K * N + M * N))

points = {"FFN matmul": gemm_intensity, "layernorm": intensity}
for name, shape in [("softmax", dict(rows=256, cols=4096)), ("bias_gelu", dict(rows=512, cols=3072)),
                    ("rmsnorm", dict(rows=256, cols=4096)), ("adam_step", dict(size=1 << 18))]:
    w = asim.workload(name, **shape)
    r = asim.simulate(asim.compile(w, "xla", "V100"), asim.workloads.workload_inputs(w))
    points[name] = r.stats.flops / (sum(p.nbytes for p in w.inputs) + sum(o.nbytes for o in w.outputs))

# %%
fig = figures.new_figure((7, 4.2))
ax = fig.subplots()
ai = np.logspace(-1, 3, 200)
peak, bw = v100.fp32_gflops, v100.dram_bandwidth_gbs
ax.loglog(ai, np.minimum(peak, ai * bw), color="black")
ax.axvline(peak / bw, color="grey", linestyle=":")
ax.text(peak / bw * 1.1, 150, f"ridge {peak / bw:.1f} flop/B", fontsize=8, color="grey")
for name, x in points.items():
    y = min(peak, x * bw)
    ax.plot(x, y, "o", color="#c62828" if name != "FFN matmul" else "#1f5fbf")
    ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, -12 if name == "layernorm" else 4),
                fontsize=8)
ax.set_xlabel("arithmetic intensity (flop / byte)")
ax.set_ylabel("attainable GFLOP/s (V100 fp32)")
ax.set_title("Roofline: memory-intensive ops sit far left of the ridge")
print("how far left of the ridge:", {n: f"{peak / bw / x:.1f}x" for n, x in points.items() if x < peak / bw})
fig

# %% [markdown]
# Every memory-intensive op sits several to tens of times left of the ridge (printed above): its time is
# its bytes over the bandwidth. **So the only ways to make it faster are to move fewer bytes and to launch
# fewer kernels.** That is what fusion, and AStitch's stitching, are for.
#
# ## Kernel launches
#
# A kernel launch costs a few microseconds before the first thread runs. The AStitch paper measured
# about 10 us per kernel on its V100 setup (TensorFlow's launch path included; see
# `../docs/papers.md`, "The problem"); the simulator's V100 preset charges the raw CUDA launch:

# %%
print(f"simulator's V100 launch cost: {v100.kernel_launch_us} us per kernel (paper: about 10 us per kernel in TF)")
print(plans["unfused"])

# %% [raw]
# # BEGIN QUESTION
# name: q3_launch_us
# points: 1

# %% [markdown]
# **Exercise 3.** How many microseconds of launch overhead does the `unfused` plan pay on the simulator's
# V100 preset? Use the plan's kernels and the preset's launch cost.

# %% [raw]
# # BEGIN SOLUTION

# %%
launch_us = len(plans["unfused"].kernels) * v100.kernel_launch_us  # SOLUTION
launch_us

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q3_launch_us_form(launch_us):
    from checks import public
    public.check("q3_launch_us", launch_us=launch_us)

test_q3_launch_us_form(launch_us)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q3_launch_us(launch_us):
    from grading import nb01
    nb01.q3_launch_us(launch_us)

test_q3_launch_us(launch_us)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# The cost model splits each kernel's predicted time into terms (launch, memory, compute, barriers, the
# wave tail...; `asim.simt.cost` documents them). For the unfused plan, the small per-row kernels (`mean`,
# `var`, `rstd`...) are nearly all launch, and the big elementwise kernels nearly all memory:

# %%
figures.draw_breakdown(results["unfused"])

# %% [markdown]
# ## Bytes
#
# XLA fuses the elementwise ops into their neighbours (registers pass values between them), so the
# 11 kernels become 3 and most intermediates never touch DRAM: `mean = sum / n` and `rsqrt(var + eps)`
# are cheap on the GPU (one instruction each), so XLA recomputes them in the kernels that read them
# instead of giving them kernels of their own. But XLA still ends a kernel at every reduce whose result
# is broadcast (notebook 2 explains why), so `x` is read several times and the statistics make round
# trips through global memory:

# %%
print(plans["xla"])

# %% [raw]
# # BEGIN QUESTION
# name: q4_traffic_ratio
# points: 1

# %% [markdown]
# **Exercise 4.** How many times the minimum traffic does the `xla` plan move? (A ratio: the plan's global
# bytes, reads and writes, over `min_bytes`.)

# %% [raw]
# # BEGIN SOLUTION

# %%
traffic_ratio = results["xla"].stats.global_bytes / min_bytes  # SOLUTION
traffic_ratio

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q4_traffic_ratio_form(traffic_ratio):
    from checks import public
    public.check("q4_traffic_ratio", traffic_ratio=traffic_ratio)

test_q4_traffic_ratio_form(traffic_ratio)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q4_traffic_ratio(traffic_ratio):
    from grading import nb01
    nb01.q4_traffic_ratio(traffic_ratio)

test_q4_traffic_ratio(traffic_ratio)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## Our numbers
#
# Launches, traffic and predicted time of the two plans on the simulated V100, with the minimum traffic
# as a red line. The same run on the `H100` preset is one argument away (`gpu="H100"`).
# Every number is the SIMT model's: a prediction from counted bytes and a documented cost model, not a
# GPU measurement (notebook 6 says what has and has not been measured).

# %%
figures.compare_bars(results, metrics=("kernel_launches", "global_bytes", "predicted_us"),
                     reference={"global_bytes": (min_bytes, "minimum")},
                     title="BERT layernorm 16384x768 on the simulated V100")

# %% [markdown]
# **Takeaway.** XLA's fusion removed 8 of 11 launches and most of the traffic, yet its plan still moves
# about three times the minimum and launches 3 kernels. Notebook 2 shows where XLA's fusion stops and why;
# notebook 3 shows how AStitch gets to one kernel.
