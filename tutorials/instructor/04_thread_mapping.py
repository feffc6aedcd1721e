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
# name: 04_thread_mapping
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
# # 4. Thread mapping for irregular shapes
#
# *astitch-sim tutorials, part 4 of 7 -- about 50 minutes.*
#
# **Learning goals.** After this notebook you can
# - compute how many blocks of a given shape a GPU keeps resident (**occupancy**, blocks per **wave**) and
#   which resource limits it;
# - explain why one-block-per-row fails on the paper's irregular shapes `<750000,32>` (DIEN) and
#   `<64,30000>` (Transformer), and how **horizontal packing** and **task splitting** fix each;
# - predict the **tail effect** of a grid slightly larger than a wave;
# - implement AStitch's task-splitting rule and check it against the compiler.
#
# **Prerequisites.** Notebooks 1-3; CUDA's block/warp/SM vocabulary.

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

import math  # noqa: F401 -- for your answers to exercises 3 and 4

import astitch_sim as asim
from astitch_sim import figures

v100 = asim.gpu("V100")

# %%
# The exercise checks. In the student version (tutorials/README.md, "Grading") a grader check cell follows
# each exercise and checks the answer's form; the autograder grades its value (instructor/README.md).
import otter
grader = otter.Notebook("04_thread_mapping.ipynb") if Path("tests").is_dir() else None

# %% [markdown]
# ## Occupancy and waves
#
# An SM keeps several blocks resident at once, as many as its limits allow: threads (2048 on a V100),
# blocks (32), registers (64 Ki) and shared memory (96 KiB). The smallest limit wins. `occupancy` applies
# CUDA's rules (the same as NVIDIA's occupancy calculator) and says which limit binds:

# %%
for threads in (32, 128, 256, 1024):
    print(f"{threads:5d} threads/block: {v100.occupancy(threads, shared_bytes=0, registers_per_thread=32)}")

# %% [markdown]
# `blocks_per_wave = blocks_per_sm x SMs` blocks run at once; a bigger grid runs in **waves**.
#
# ## Shape 1: `<750000, 32>` (DIEN)
#
# A softmax over 750000 rows of 32. The XLA the paper measured maps a row reduction to **one block per
# row** (`../docs/papers.md`, "Irregular shapes"): 750000 blocks of 32 threads. That XLA (TensorFlow 1.15
# to 2.6) is the `xla` strategy's `fusion_rules="tf-2.6"`; every XLA plan in this notebook uses it
# (`PAPER_XLA`). Today's XLA, the strategy's default, has since learned horizontal packing (the last cell
# of this section shows it).

# %%
PAPER_XLA = {"fusion_rules": "tf-2.6"}
dien = asim.workload("softmax", rows=750000, cols=32)
dien_plans = {"xla": asim.compile(dien, strategy="xla", gpu="V100", **PAPER_XLA),
              "astitch": asim.compile(dien, strategy="astitch", gpu="V100")}
k = dien_plans["xla"].kernels[0]
print(k.name, f"grid={k.grid} block={k.block} shared={k.shared_bytes} B regs={k.registers_per_thread}")

# %% [raw]
# # BEGIN QUESTION
# name: q1_tiny_blocks
# points: 1

# %% [markdown]
# **Exercise 1.** For XLA's first kernel above, on the V100: how many blocks run in one wave, and what
# fraction of the SM's warp slots do they fill (the `occupancy` field, between 0 and 1)? Use the kernel's
# own block size, shared memory and registers.

# %% [raw]
# # BEGIN SOLUTION

# %%
occ = v100.occupancy(k.block, k.shared_bytes, k.registers_per_thread)  # SOLUTION
tiny_per_wave = occ.blocks_per_wave  # SOLUTION
tiny_occupancy = occ.occupancy  # SOLUTION
tiny_per_wave, tiny_occupancy

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q1_tiny_blocks_form(tiny_per_wave, tiny_occupancy):
    from checks import public
    public.check("q1_tiny_blocks", tiny_per_wave=tiny_per_wave, tiny_occupancy=tiny_occupancy)

test_q1_tiny_blocks_form(tiny_per_wave, tiny_occupancy)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q1_tiny_blocks(tiny_per_wave, tiny_occupancy):
    from grading import nb04
    nb04.q1_tiny_blocks(tiny_per_wave, tiny_occupancy)

test_q1_tiny_blocks(tiny_per_wave, tiny_occupancy)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Half the warp slots sit empty: 32-thread blocks hit the 32-blocks-per-SM limit long before the thread
# limit. AStitch **packs rows horizontally**: 128 rows per 1024-thread block, each row 8 threads that read it
# as 4-element (128-bit) vectors -- every strategy's rows are read in vectors where the width divides the row
# (`astitch_sim/plan/row_vectors.py`); XLA's one row per block keeps its 32 threads, one element each, since
# 8 vectors would idle 24 of them. The pictures colour each element by the block that computes it (first 64 rows):

# %%
fig = figures.new_figure((12, 4))
axes = fig.subplots(1, 2)
for ax, s in zip(axes, ("xla", "astitch")):
    figures.draw_mapping(dien_plans[s].kernels[0].stages[0].mapping, ax=ax, max_rows=64)
    ax.set_title(f"{s}\n" + ax.get_title(), fontsize=8)
fig.tight_layout()
fig

# %%
print(dien_plans["astitch"])

# %% [markdown]
# XLA did not stand still. Today's XLA (the `xla` strategy's default rules, `"openxla-2024"`) gives a short
# row a warp and adds rows until the block has 256 threads (`kThreadsPerBlockTarget` in XLA's reduction
# emitter): horizontal packing, in the paper's words. On an H200 the paper-era launch of this softmax ran
# 17x slower than `jax.jit` (957 against 56 us, `../benchmarks/results/2026-11-27-h200`), so a speedup over
# the paper's XLA on this shape measures the old launch, not stitching. What today's XLA gives each
# reduction kernel:

# %%
today = asim.compile(dien, strategy="xla", gpu="V100")
for kern in today.kernels:
    m = kern.stages[0].mapping
    print(f"{kern.name:22s} grid={kern.grid:6d} block={kern.block:4d}  rows per block={m.rows_per_block}")

# %% [markdown]
# ## Shape 2: `<64, 30000>` (Transformer)
#
# The opposite problem: few, long rows. One block of 1024 threads per row gives 64 blocks, while the
# V100 keeps 160 such blocks resident -- most of the GPU idles. AStitch's rule **splits each row** over
# several blocks (task splitting) and combines the partial results (here with atomics; notebook 5 covers the
# grid barrier that makes the result visible to every block). `launch_search=False` asks for that rule
# alone: by default `asim.compile` also prices other launches of the same stitched kernel (the launch
# search), and it finds this softmax faster unsplit, on the V100 and the H100 alike, as the kernel's note
# says: each lane of a 1024-thread block reads its 30000/1024 share of the row as 8 vectors of 4 and issues all
# 8 loads before using any, so by the cost model's count 64 blocks already keep enough bytes in flight for
# DRAM, and the split's two
# grid barriers cost more than the idle SMs. With fewer, longer rows -- 8 rows of 65536 -- the search keeps a
# split.

# %%
tfm = asim.workload("softmax", rows=64, cols=30000)
tfm_plans = {s: asim.compile(tfm, strategy=s, gpu="V100", **({"launch_search": False} if s == "astitch" else PAPER_XLA))
             for s in ("xla", "astitch")}
fig = figures.new_figure((12, 4))
axes = fig.subplots(1, 2)
for ax, s in zip(axes, ("xla", "astitch")):
    figures.draw_mapping(tfm_plans[s].kernels[0].stages[0].mapping, ax=ax, max_rows=64)
    ax.set_title(f"{s}\n" + ax.get_title(), fontsize=8)
fig.tight_layout()
fig

# %% [raw]
# # BEGIN QUESTION
# name: q2_wave_fill
# points: 1

# %% [markdown]
# **Exercise 2.** What fraction of one V100 wave (its resident-block slots for these blocks) does each plan's
# **first** kernel fill on `<64,30000>`? Give two numbers between 0 and 1.

# %% [raw]
# # BEGIN SOLUTION

# %%
def wave_fill(kernel):
    return kernel.grid / v100.blocks_per_wave(kernel.block, kernel.shared_bytes, kernel.registers_per_thread)  # SOLUTION

xla_fill = wave_fill(tfm_plans["xla"].kernels[0])
astitch_fill = wave_fill(tfm_plans["astitch"].kernels[0])
xla_fill, astitch_fill

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q2_wave_fill_form(xla_fill, astitch_fill):
    from checks import public
    public.check("q2_wave_fill", xla_fill=xla_fill, astitch_fill=astitch_fill)

test_q2_wave_fill_form(xla_fill, astitch_fill)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q2_wave_fill(xla_fill, astitch_fill):
    from grading import nb04
    nb04.q2_wave_fill(xla_fill, astitch_fill)

test_q2_wave_fill(xla_fill, astitch_fill)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## The rule
#
# AStitch's adaptive mapping for a row reduction (`../docs/papers.md`, "Adaptive thread mapping"):
# **split** a row over several blocks when there are fewer rows than blocks per wave *and* a row is longer
# than a block's 1024 threads; otherwise **pack** short rows into blocks. The split count is a power of two
# (partial results combine in a tree), no more than the wave has room for per row, and no more than the row
# has 1024-element chunks.

# %% [raw]
# # BEGIN QUESTION
# name: q3_choose_splits
# points: 2

# %% [markdown]
# **Exercise 3.** Write `choose_splits(rows, cols, blocks_per_wave, block=1024)`, returning how many
# blocks each row is split over (1: no split), following the rule above. The check compares it with what
# the compiler's rule gives on several shapes and GPUs (`launch_search=False`: the rule alone; by default the
# compiler also prices the kernel without the split and keeps the faster, and a `launch search` note in
# `print(plan)` lists both).

# %% [raw]
# # BEGIN SOLUTION

# %%
def choose_splits(rows, cols, blocks_per_wave, block=1024):
    # BEGIN SOLUTION
    if rows >= blocks_per_wave or cols <= block:
        return 1
    room = min(blocks_per_wave // rows, math.ceil(cols / block))
    return 2 ** int(math.log2(max(1, room)))
    # END SOLUTION

choose_splits(64, 30000, 160)

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q3_choose_splits_form(choose_splits):
    from checks import public
    public.check("q3_choose_splits", choose_splits=choose_splits)

test_q3_choose_splits_form(choose_splits)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q3_choose_splits(choose_splits):
    from grading import nb04
    nb04.q3_choose_splits(choose_splits)

test_q3_choose_splits(choose_splits)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## Waves and the tail effect
#
# A grid of 161 blocks of 1024 threads on a V100 needs **two** waves, and the second runs one block while
# 159 slots idle. Predicted time therefore grows in **steps**, not linearly. A row reduction over
# `rows x 2048` under XLA's one-block-per-row mapping, for a range of row counts:

# %%
rows_range = list(range(40, 481, 10))
stair = []
for rows in rows_range:
    w = asim.workload("row_reduce", rows=rows, cols=2048)
    stair.append(asim.simulate(asim.compile(w, "xla", "V100", **PAPER_XLA), asim.random_inputs(w)).stats.predicted_us)
per_wave = v100.blocks_per_wave(1024, 8192, 28)
print(f"blocks per wave for these kernels: {per_wave}")

# %% [raw]
# # BEGIN QUESTION
# name: q4_waves
# points: 1

# %% [markdown]
# **Exercise 4.** How many waves does XLA's first kernel for `<750000,32>` (exercise 1) need?

# %% [raw]
# # BEGIN SOLUTION

# %%
dien_waves = math.ceil(k.grid / tiny_per_wave)  # SOLUTION
dien_waves

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q4_waves_form(dien_waves):
    from checks import public
    public.check("q4_waves", dien_waves=dien_waves)

test_q4_waves_form(dien_waves)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q4_waves(dien_waves):
    from grading import nb04
    nb04.q4_waves(dien_waves)

test_q4_waves(dien_waves)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## Our numbers
#
# Left: the tail effect, predicted time against the number of one-row blocks (dotted lines: wave
# boundaries). Right: both irregular softmaxes simulated under XLA's and AStitch's plans on the V100
# (about 8 seconds: the DIEN shape has 24 million elements). For scale, the paper reports whole-model
# inference speedups over XLA of 2.21x for DIEN and 2.73x for Transformer (`../docs/papers.md`, "Results");
# ours are for the softmax subgraph alone, predicted by the SIMT model, so they are not the same quantity.

# %%
speedup = {}
for name, (g, plans) in {"<750000,32> DIEN": (dien, dien_plans), "<64,30000> Transformer": (tfm, tfm_plans)}.items():
    inputs = asim.random_inputs(g)
    t = {s: asim.simulate(p, inputs).stats.predicted_us for s, p in plans.items()}
    speedup[name] = t["xla"] / t["astitch"]
    print(f"{name:24s} xla {t['xla']:7.1f} us   astitch {t['astitch']:7.1f} us   speedup {speedup[name]:.2f}x")

fig = figures.new_figure((12, 3.8))
ax1, ax2 = fig.subplots(1, 2)
ax1.step(rows_range, stair, where="mid", color="#4c72b0")
for wave in range(per_wave, max(rows_range) + 1, per_wave):
    ax1.axvline(wave, color="grey", linestyle=":")
ax1.set_xlabel("blocks (one per row)")
ax1.set_ylabel("predicted us")
ax1.set_title("tail effect: time grows by waves (V100, 160 blocks/wave)", fontsize=9)
ax2.bar(list(speedup), list(speedup.values()), color="#55a868")
for i, val in enumerate(speedup.values()):
    ax2.text(i, val, f"{val:.2f}x", ha="center", va="bottom")
ax2.set_ylabel("predicted speedup, astitch over xla")
ax2.set_title("softmax on the irregular shapes, simulated V100", fontsize=9)
fig.tight_layout()
fig
