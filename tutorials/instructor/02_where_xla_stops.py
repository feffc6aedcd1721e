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
# name: 02_where_xla_stops
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
# # 2. XLA's fusion, and where it stops
#
# *astitch-sim tutorials, part 2 of 7 -- about 45 minutes.*
#
# **Learning goals.** After this notebook you can
# - state the two patterns at which XLA ends a fused kernel (a reduce whose result is broadcast; an
#   expensive op whose result is broadcast) and say *why* each one stops a register-only fusion;
# - build a graph with the builder API and predict, then check, how XLA partitions it;
# - read the AStitch paper's **Figure 7** plan by plan (XLA 4 kernels, TVM 3, AStitch 1) and weigh TVM's
#   alternative, recomputation, in flops and predicted time.
#
# **Prerequisites.** Notebook 1 (roofline, launches, bytes; `print(plan)`, `res.stats`).

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
grader = otter.Notebook("02_where_xla_stops.ipynb") if Path("tests").is_dir() else None

# %% [markdown]
# ## How XLA fuses
#
# XLA's loop fusion glues ops together **through registers, element by element**: the consumer's thread
# computes its element's producers itself, at the index the consumer needs (*index propagation*). That is
# free for elementwise chains -- one thread, one element, no communication. It stops working in two
# places, both about a **one-to-many** dependency, where one produced value is needed by many elements
# (`../docs/papers.md`, "The problem"):
#
# 1. **a reduce followed by a broadcast**: a row's sum is needed by every element of the row, but it is
#    produced by the cooperation of many threads. A consumer thread cannot compute it alone, and XLA has
#    no way to hand it over inside a kernel, so the reduce's result leaves through global memory and a
#    new kernel starts;
# 2. **an expensive elementwise op followed by a broadcast**: the consumer thread *could* recompute it,
#    but every element of the broadcast would redo the `tanh`/`power`/`log` -- XLA refuses and ends
#    the kernel instead. Which ops are expensive depends on the XLA version: on the GPU, f32 `divide` and
#    `rsqrt` have long been called cheap (single instructions), `exp` since 2021 and `sqrt` since 2022, so
#    today's XLA recomputes those per element. The `xla` strategy follows today's rules; the paper's era
#    is one option away (`fusion_rules="tf-2.6"`, `astitch_sim/planning/strategies/xla_rules.py`).
#
# Pattern 1 with the builder API: divide each row by its sum.

# %%
g1 = asim.Graph("normalize_rows")
x = g1.parameter("x", (256, 1024))
row_sum = g1.reduce(x, dims=(1,), reducer="sum", name="row_sum")
g1.set_outputs(g1.divide(x, g1.broadcast(row_sum, (256, 1024), dimensions=(0,), name="row_sum.bcast"), name="y"))
print(asim.compile(g1, strategy="xla", gpu="V100"))

# %% [markdown]
# Two kernels; the plan's `note:` says why the first one ends. Pattern 2: scale each row by `exp` of a
# per-row value, under the paper's XLA, where `exp` was expensive:

# %%
g2 = asim.Graph("scale_by_exp")
x, v = g2.parameter("x", (256, 1024)), g2.parameter("v", (256,))
e = g2.exponential(v, name="e")
g2.set_outputs(g2.multiply(x, g2.broadcast(e, (256, 1024), dimensions=(0,), name="e.bcast"), name="y"))
print(asim.compile(g2, strategy="xla", gpu="V100", fusion_rules="tf-2.6"))
today = asim.compile(g2, strategy="xla", gpu="V100")
print(f"today's rules: {len(today.kernels)} kernel, exp recomputed {today.kernels[0].stages[0].recompute['e']}x per value")

# %% [raw]
# # BEGIN QUESTION
# name: q1_my_graph
# points: 1

# %% [markdown]
# **Exercise 1.** Build your own graph `my_graph` (any shapes, any names) in which XLA ends a kernel
# **because of pattern 2 only**: no reduce anywhere, yet XLA needs more than one kernel. Then check what TVM
# does with it. (Hint: which ops does the op table call expensive? `[n for n, o in asim.OPS.items() if
# o.cost == "expensive"]`; of those, today's XLA calls f32 `divide`, `rsqrt`, `exponential` and `sqrt`
# cheap on the GPU.)

# %% [raw]
# # BEGIN SOLUTION

# %%
my_graph = asim.Graph("gate_by_tanh")
a = my_graph.parameter("a", (64, 512))
gate = my_graph.tanh(my_graph.parameter("w", (512,)), name="gate")  # SOLUTION
my_graph.set_outputs(my_graph.multiply(a, my_graph.broadcast(gate, (64, 512), dimensions=(1,)), name="out"))  # SOLUTION
print(asim.compile(my_graph, "xla", "V100"))

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q1_my_graph_form(my_graph):
    from checks import public
    public.check("q1_my_graph", my_graph=my_graph)

test_q1_my_graph_form(my_graph)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q1_my_graph(my_graph):
    from grading import nb02
    nb02.q1_my_graph(my_graph)

test_q1_my_graph(my_graph)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## The paper's Figure 7
#
# The AStitch paper explains its idea on one 13-node graph (its **Figure 7**): two reductions, an
# expensive `power` whose result is broadcast, and inputs used twice. `../docs/papers.md` gives
# the reconstruction the catalog builds:

# %%
fig7 = asim.workload("paper_fig7")          # N=128, C=256
print(fig7)

# %% [markdown]
# The paper splits it under XLA's rules into several kernels, each ending where a result has to leave
# through global memory, with `Pr.2` and `B.2` loaded again in later kernels. Our `xla` strategy, drawn:
# one lane per kernel; grey dashed boxes are reads from global memory, red dashed arrows the round trips
# through it.

# %%
plans = {s: asim.compile(fig7, strategy=s, gpu="V100") for s in asim.STRATEGIES}
figures.draw_plan(plans["xla"])

# %% [raw]
# # BEGIN QUESTION
# name: q2_xla_ends
# points: 1

# %% [markdown]
# **Exercise 2.** List, in launch order, the node each of XLA's kernels for Figure 7 *ends at*: the node
# whose result the kernel writes to global memory for a later kernel or as the graph's output. Find it in
# `print(plans["xla"])` (each kernel's `writes` line and its notes say why it ends there) or in the picture.
# Then compare with the paper's account in `../docs/papers.md` (Figure 7).

# %% [raw]
# # BEGIN SOLUTION

# %%
xla_ends = [kernel.outputs[-1] for kernel in plans["xla"].kernels]  # SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q2_xla_ends_form(xla_ends):
    from checks import public
    public.check("q2_xla_ends", xla_ends=xla_ends)

test_q2_xla_ends_form(xla_ends)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q2_xla_ends(xla_ends):
    from grading import nb02
    nb02.q2_xla_ends(xla_ends)

test_q2_xla_ends(xla_ends)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## TVM's alternative: recompute
#
# TVM also stops at reduces, but it fuses pattern 2: the consumer recomputes the expensive op for every
# element it needs. In Figure 7, `power.1` (shape `[128]`) is broadcast to `[256, 128]`, so each value is
# computed 256 times -- and in two kernels. The plan printout marks it `(computed 256x per value)` and the
# picture `x256`:

# %%
figures.draw_plan(plans["tvm"])

# %% [raw]
# # BEGIN QUESTION
# name: q3_power_evaluations
# points: 1

# %% [markdown]
# **Exercise 3.** In the whole TVM plan, how many times is **one** value of `power.1` evaluated? (Look at
# every kernel that computes it; `stage.recompute` holds the per-kernel factor.)

# %% [raw]
# # BEGIN SOLUTION

# %%
power_evaluations = sum(st.recompute.get("power.1", 1) for k in plans["tvm"].kernels for st in k.stages if "power.1" in st.ops)  # SOLUTION
power_evaluations

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q3_power_evaluations_form(power_evaluations):
    from checks import public
    public.check("q3_power_evaluations", power_evaluations=power_evaluations)

test_q3_power_evaluations_form(power_evaluations)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q3_power_evaluations(power_evaluations):
    from grading import nb02
    nb02.q3_power_evaluations(power_evaluations)

test_q3_power_evaluations(power_evaluations)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# What does recomputation cost, and what does it save? Simulate every strategy (the paper's graph is
# small: milliseconds each) and compare flops, traffic and predicted time.

# %%
inputs = asim.workloads.workload_inputs(fig7)
truth = asim.reference(fig7, inputs)
results = {}
for s, p in plans.items():
    results[s] = asim.simulate(p, inputs)
    err = np.max(np.abs(results[s].outputs[0] - truth[0]) / (np.abs(truth[0]) + 1e-6))
    st = results[s].stats
    print(f"{s:8s} kernels={st.kernel_launches}  flops={st.flops:>9,}  global={st.global_bytes / 1024:7.1f} KiB  "
          f"predicted={st.predicted_us:5.1f} us  max rel. error={err:.1e}")

# %% [raw]
# # BEGIN QUESTION
# name: q4_flop_ratio
# points: 1

# %% [markdown]
# **Exercise 4.** How many times XLA's flops does TVM's plan perform on Figure 7? (A ratio from the
# simulated counters.) Then look at the predicted times: is the recomputation worth it on this graph?

# %% [raw]
# # BEGIN SOLUTION

# %%
flop_ratio = results["tvm"].stats.flops / results["xla"].stats.flops  # SOLUTION
flop_ratio

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q4_flop_ratio_form(flop_ratio):
    from checks import public
    public.check("q4_flop_ratio", flop_ratio=flop_ratio)

test_q4_flop_ratio_form(flop_ratio)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q4_flop_ratio(flop_ratio):
    from grading import nb02
    nb02.q4_flop_ratio(flop_ratio)

test_q4_flop_ratio(flop_ratio)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# On this small graph TVM still wins a little: one launch fewer outweighs the recomputed `power`. The
# paper's point is that neither answer is good -- XLA pays launches and round trips, TVM pays flops that
# grow with the broadcast. AStitch computes `power.1` **once** and hands it to every consumer through
# global memory behind a grid barrier (notebooks 3 and 5):

# %%
figures.draw_plan(plans["astitch"])

# %% [markdown]
# ## Search instead of rules: FusionStitching
#
# AStitch's predecessor from the same group, FusionStitching, does not decide by rules. It *searches*:
# it grows fusion patterns over XLA's kernels in topological order, prices each candidate with a cost
# model (global traffic and launches saved, minus recomputation, lost parallelism and resource pressure),
# keeps the best few partial plans (a beam), and tunes each fused kernel's schedule (block size, rows per
# block). It stitches through registers and shared memory only: **no Global scheme, no grid barrier**.
# `strategy="fusionstitching"` is in `asim.STRATEGIES` (so it was simulated above); its plan records the
# search (`plan.search`), and `print(plan)` shows it first:

# %%
# print(plan) starts with the search record: the beam's alternatives, then each kernel's priced schedules
print("\n".join(str(plans["fusionstitching"]).splitlines()[:24]))
for s in ("xla", "fusionstitching", "astitch"):
    print(f"{s:16s} kernels={len(plans[s].kernels)}  predicted={results[s].stats.predicted_us:5.1f} us")

# %% [markdown]
# Search can merge XLA's kernels only where no value has to cross thread blocks. On Figure 7 the
# column reduction `reduce.2` needs every row, so the value feeding it cannot reach all its consumers
# inside one block: search stops at a kernel boundary there, and only AStitch's Global scheme (a grid
# barrier inside one wave, notebook 5) makes the graph one kernel. Where search wins is the other side:
# it prices schedules instead of applying a rule, and on some graphs (the README's table: layernorm
# backward) its tuned kernels beat AStitch's rule-made ones.

# %% [markdown]
# ## What torch.compile does with it: `strategy="inductor"`
#
# PyTorch's Inductor took several of these ideas mainstream: it inlines pointwise ops into the reduction
# that reads them, and a short row stays in registers so its broadcast consumers (softmax, layer norm)
# run in the same kernel. But a Triton program cannot wait for another one: two reductions over
# *different* dimensions never share a kernel. On Figure 7 the row sum `reduce.1` and the column sum
# `reduce.2` are exactly that, so Inductor's plan ends a kernel between them; its notes say why in the
# scheduler's words (`strategies/inductor.py` cites each rule to PyTorch's source).

# %%
for k in plans["inductor"].kernels:
    print(k.name, "->", ", ".join(k.outputs))
    for note in k.notes:
        if note.startswith("inductor:"):
            print("   ", note)
for s in ("xla", "inductor", "astitch"):
    print(f"{s:16s} kernels={len(plans[s].kernels)}  predicted={results[s].stats.predicted_us:5.1f} us")

# %% [markdown]
# ## Our numbers
#
# Figure 7 under every strategy on the simulated V100, next to the paper's kernel counts (its
# Figure 7 discussion: XLA 4, TVM 3, AStitch 1). Today's compilers have moved (`../docs/papers.md`, "Where
# others stand today": XLA now sends some normalisation "diamonds" to a Triton fusion), but a reduce
# followed by a broadcast is still a kernel boundary in its native emitters.

# %%
paper_kernels = {"xla": 4, "tvm": 3, "astitch": 1}
for s in paper_kernels:
    print(f"{s:8s} paper Figure 7: {paper_kernels[s]} kernel(s)   ours: {len(plans[s].kernels)}")
figures.compare_bars(results, metrics=("kernel_launches", "global_bytes", "flops", "predicted_us"),
                     title="Figure 7 graph (N=128, C=256), simulated V100")
