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
# name: 03_stitch_schemes
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
# # 3. The four stitch schemes and hierarchical data reuse
#
# *astitch-sim tutorials, part 3 of 7 -- about 50 minutes.*
#
# **Learning goals.** After this notebook you can
# - name AStitch's four stitch schemes (independent, local, regional, global), say which memory each one
#   passes data through and what synchronisation it needs;
# - assign the right scheme to each op of a stitched kernel from who produces and who consumes its value;
# - step through a stitched layernorm in the SIMT model's **trace mode** and follow which thread reads
#   what from where;
# - explain **hierarchical data reuse**: compute a one-to-many value once and keep it at the cheapest
#   level (registers, shared memory, global memory) that its consumers can reach.
#
# **Prerequisites.** Notebooks 1-2 (why XLA stops at reduces and expensive broadcasts).

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
grader = otter.Notebook("03_stitch_schemes.ipynb") if Path("tests").is_dir() else None

# %% [markdown]
# ## Four ways to pass a value between two ops of one kernel
#
# AStitch keeps every op of a memory-intensive subgraph in **one kernel** and chooses, per value, how it
# reaches its consumers (`../docs/papers.md`, "Four stitch schemes"):
#
# | scheme | dependency | the value lives in | synchronisation | cost |
# |---|---|---|---|---|
# | **independent** | no consumer in the kernel | (an output) | - | - |
# | **local** | one-to-one: the consumer element is the producer's own | registers | none | free |
# | **regional** | one-to-many, all consumers in the producer's block | shared memory | block barrier (`__syncthreads`) | cheap |
# | **global** | any, consumers in other blocks | global memory | grid barrier (all blocks resident) | a barrier, a round trip |
#
# Regional favours **locality** (the consumers must sit in the producer's block, which constrains the
# thread mapping); Global favours **parallelism** (any mapping, but the grid must fit one wave, notebook 5).
#
# ## A stitched layernorm, small enough to trace
#
# Two rows of 16: one block of 32 threads, 16 per row (horizontal packing, notebook 4).

# %%
g = asim.workload("layernorm", rows=2, cols=16)
plan = asim.compile(g, strategy="astitch", gpu="V100", reduce_scheme="tree")   # the paper's reduction trees
print(plan)

# %%
figures.draw_plan(plan)

# %% [markdown]
# The same plan as Graphviz DOT (`plan.to_dot()`: one cluster per kernel, nodes filled by scheme), drawn
# where the graphviz `dot` program is installed (`apt-get install graphviz`); elsewhere the DOT text prints.

# %%
import shutil
from IPython.display import SVG

dot = plan.to_dot()
SVG(asim.ir.viz.render_dot(dot)) if shutil.which("dot") else print(dot[:500] + "\n...")

# %% [markdown]
# Three stages, one per op group (a dominant -- here each reduce, then the output -- and the ops joined to
# it through registers), separated by block barriers. `mean` and `rstd` are per-row values needed by every
# element of their row: Regional, in shared memory. `xc = x - mean` is computed in stage 1 and used again in
# stage 2 by the same thread at the same element: Local, it stays in that thread's registers.
#
# ## Trace mode: every access of every thread
#
# `simulate(..., trace=True)` records each load and store: kernel, stage, phase, block, thread, loop trip,
# memory space, node, element and address, in program order.

# %%
inputs = asim.random_inputs(g)
res = asim.simulate(plan, inputs, trace=True)
print(res.trace, "| races:", res.races)
print("matches numpy:", np.allclose(res.outputs[0], asim.reference(g, inputs)[0], rtol=1e-5, atol=1e-6))

# %% [markdown]
# Stage 0: each thread loads its element of `x`, the row's 16 threads reduce it (the tree's scratch traffic
# is counted but not traced), and the row's first thread runs the epilogue: `mean = mean_sum / n`, stored
# in shared memory.

# %%
figures.draw_accesses(res.trace, stage=0)

# %% [markdown]
# After the block barrier, stage 1: every thread reads its row's `mean` from shared memory -- one value,
# sixteen readers, the one-to-many dependency that stopped XLA -- and its element of `x` again from global
# memory. `xc` and `xc_sq` stay in registers; the epilogue writes `rstd`.

# %%
figures.draw_accesses(res.trace, stage=1)

# %%
figures.draw_accesses(res.trace, stage=2)

# %% [markdown]
# One thread's whole life, in program order (`res.trace.by_thread(block, thread)`):

# %%
for e in res.trace.by_thread(0, 17).events:
    print(f"stage {e.stage} {e.phase:9s} {e.kind:5s} {e.space:8s} {e.node:8s} {str(e.element):8s} "
          f"barriers passed: {e.block_epoch}")

# %% [raw]
# # BEGIN QUESTION
# name: q1_mean_writer
# points: 1

# %% [markdown]
# **Exercise 1.** Which thread of block 0 writes `mean` of **row 1** into shared memory? Find it in the
# trace (`res.trace.filter(node="mean", kind="write")`).

# %% [raw]
# # BEGIN SOLUTION

# %%
mean_writer = [e.thread for e in res.trace.filter(node="mean", kind="write").events if e.element == (1,)][0]  # SOLUTION
mean_writer

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q1_mean_writer_form(mean_writer):
    from checks import public
    public.check("q1_mean_writer", mean_writer=mean_writer)

test_q1_mean_writer_form(mean_writer)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q1_mean_writer(mean_writer):
    from grading import nb03
    nb03.q1_mean_writer(mean_writer)

test_q1_mean_writer(mean_writer)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q2_x_loads
# points: 1

# %% [markdown]
# **Exercise 2.** How many elements of `x` does the stitched kernel load from **global memory** in total
# (all stages, all threads)? The tensor has 32 elements. Is each one loaded once?

# %% [raw]
# # BEGIN SOLUTION

# %%
x_loads = len(res.trace.filter(node="x", space="global", kind="read"))  # SOLUTION
x_loads

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q2_x_loads_form(x_loads):
    from checks import public
    public.check("q2_x_loads", x_loads=x_loads)

test_q2_x_loads_form(x_loads)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q2_x_loads(x_loads):
    from grading import nb03
    nb03.q2_x_loads(x_loads)

test_q2_x_loads(x_loads)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# `x` is loaded once, by stage 0. Stage 1 reads it again at the same elements under the same mapping, so
# each thread keeps what it loaded in its registers (`print(plan)` lists `x` under stage 0 as "input loaded
# once, kept in registers", and a note says how many registers that costs); stage 2 needs only `xc`, also
# kept in registers. The registers are a budget: with rows so long that each thread would hold too many
# elements, the plan loads `x` again in stage 1 and its notes say why -- the same trade TorchInductor's
# "persistent reductions" make, keeping a row in registers only up to 1024 elements (`../docs/papers.md`,
# "Where others stand today").
#
# ## Hierarchical data reuse
#
# A one-to-many value is **computed once** and kept where all of its consumers can reach it:
# - element level: `mean` of a row is computed by one thread and read by the row's sixteen -- through
#   shared memory (Regional), because they share a block (after a shuffle: by every lane, in registers);
# - operator level: `xc` has two consumers (`xc_sq` in stage 1, `xhat` in stage 2); it is computed once and
#   kept in the thread's registers for both (Local), instead of being recomputed or reloaded;
# - loads: `x` is read by stages 0 and 1; it is loaded once and kept in registers for the second reader.
#
# **Registers instead of shared memory.** The plan above asks for the paper's reduction trees
# (`reduce_scheme="tree"`): the tree leaves a row's total on the row's first thread only, so that thread
# computes `mean` and must hand it to the others through shared memory. By default every strategy reduces
# with warp shuffles instead (notebook 8's puzzle 2): the xor butterfly leaves **every** lane of the row
# holding the total. Then each lane computes `mean` itself and keeps it in its own registers for the next
# stage -- Local, no shared memory, no block barrier -- as long as the next stage gives each row to the same
# threads (`astitch_sim/plan/task_registers.py`). `print` the default plan and compare:

# %%
shuffle_plan = asim.compile(g, strategy="astitch", gpu="V100")
print({n: shuffle_plan.kernels[0].values[n].scheme.value for n in ("mean", "rstd")},
      "| block barriers:", shuffle_plan.kernels[0].block_barriers, "(tree:", plan.kernels[0].block_barriers, ")")
print(shuffle_plan.kernels[0].values["mean"].why)

# %% [markdown]
# The exercises below read the tree plan's trace (the paper's schemes).
#
# When the consumers are in **other blocks**, only global memory reaches them: the Global scheme. Figure 7's
# `power.1` is produced per row by the stage-0 mapping but consumed per column by the column reduction of
# stage 1 -- every block needs values other blocks produced. Traced at a small size (two blocks):

# %%
g7 = asim.workload("paper_fig7", n=32, c=64)
plan7 = asim.compile(g7, strategy="astitch", gpu="V100")
res7 = asim.simulate(plan7, asim.workloads.workload_inputs(g7), trace=True)
writes = {e.element: e.block for e in res7.trace.filter(node="power.1", kind="write").events}
reads = res7.trace.filter(node="power.1", kind="read").events
foreign = sum(1 for e in reads if writes[e.element] != e.block)
print(f"power.1: {len(writes)} values written by blocks {sorted(set(writes.values()))}; {len(reads)} reads, "
      f"{foreign} of them by a block that did not write the value (legal only after the grid barrier)")
print("races:", res7.races)

# %% [raw]
# # BEGIN QUESTION
# name: q3_schemes
# points: 1

# %% [markdown]
# **Exercise 3.** Give the stitch scheme of four values of the small layernorm plan, reasoning from the
# trace (who writes the value, who reads it, in which memory), not by reading `plan.kernels[0].schemes`.

# %% [raw]
# # BEGIN SOLUTION

# %%
schemes = {"mean": "regional", "xc": "local", "rstd": "regional", "out": "independent"}  # SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q3_schemes_form(schemes):
    from checks import public
    public.check("q3_schemes", schemes=schemes)

test_q3_schemes_form(schemes)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q3_schemes(schemes):
    from grading import nb03
    nb03.q3_schemes(schemes)

test_q3_schemes(schemes)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q4_global_values
# points: 1

# %% [markdown]
# **Exercise 4.** In the AStitch plan of the full-size Figure 7 graph (`asim.workload("paper_fig7")` on the
# V100) as the paper's rules launch it (`launch_search=False`: the default also prices other launches of the
# same kernel and keeps the fastest; a `launch search` note in `print(plan)` lists them), which values are
# stitched **Global**? Give their node names.

# %% [raw]
# # BEGIN SOLUTION

# %%
full7 = asim.compile(asim.workload("paper_fig7"), strategy="astitch", gpu="V100", launch_search=False)
global_values = sorted(n for n, s in full7.kernels[0].schemes.items() if s == "global")  # SOLUTION
global_values

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q4_global_values_form(global_values):
    from checks import public
    public.check("q4_global_values", global_values=global_values)

test_q4_global_values_form(global_values)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q4_global_values(global_values):
    from grading import nb03
    nb03.q4_global_values(global_values)

test_q4_global_values(global_values)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## Our numbers
#
# Back at BERT size (16384 x 768, V100): where the bytes go under XLA's plan and under AStitch's. Stitching
# removes the global round trips of the per-row statistics and the reloads of `x` between kernels; the values
# handed from op to op stay on chip, in registers and shared memory.

# %%
big = asim.workload("layernorm")
big_inputs = asim.random_inputs(big)
results = {s: asim.simulate(asim.compile(big, strategy=s, gpu="V100"), big_inputs) for s in ("xla", "astitch")}
for s, r in results.items():
    print(f"{s:8s} {r.stats.kernel_launches} kernel(s), global {r.stats.global_bytes / 2**20:6.1f} MiB, "
          f"shared {r.stats.shared_bytes / 2**20:6.1f} MiB, predicted {r.stats.predicted_us:6.1f} us")
figures.compare_bars(results, metrics=("kernel_launches", "global_bytes_read", "global_bytes_written",
                                       "shared_bytes", "predicted_us"),
                     title="BERT layernorm 16384x768, simulated V100: xla vs astitch")
