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
# name: 08_write_the_pass
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
# # 8. Lab: write the AStitch pass
#
# *astitch-sim tutorials, the lab after part 7 -- about 120 minutes (two sessions of 60).*
#
# In notebooks 1-7 you read AStitch's decisions off its plans. Here you **make** them: you write the
# decisions of the AStitch pass on astitch-sim's IR -- which ops are dominant, how dominants merge into op
# groups, which stitch scheme each value crossing a stage boundary gets, and the block-locality check behind
# that choice -- and then two kernel puzzles: the thread mapping of horizontal packing and a warp-shuffle
# row reduction. The autograder runs your functions on graphs, mappings and shapes this notebook never shows
# and compares every decision with what astitch-sim's own planner decides, and your reduction's float32
# result with the SIMT model's, bit for bit.
#
# **Learning goals.** After this lab you can
# - walk astitch-sim's graph IR (nodes, operands, users, shapes) and write a pass over it;
# - implement **dominant identification** and **dominant merging** (the paper's section 4.3) and explain
#   why each merge saves a global round trip;
# - implement the **block-locality check** and choose **local / regional / global** per value, and say
#   which barrier each choice costs;
# - write the thread mapping of **horizontal packing** and a **warp-shuffle** (xor butterfly) row
#   reduction, and explain why the order of a float32 sum is part of a kernel's contract.
#
# **Prerequisites.** Notebooks 2-4 (XLA's stopping points, the stitch schemes, thread mapping); Python
# with numpy; CUDA's `__shfl_xor_sync`.

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
grader = otter.Notebook("08_write_the_pass.ipynb") if Path("tests").is_dir() else None

# %% [markdown]
# ## The IR in five minutes
#
# A `Graph` holds `Node`s in topological order (iterate over it; `graph["name"]` finds one). A node has an
# `op` ("reduce", "exponential", "broadcast", ...), a `shape`, `operands` (nodes) and `users` (nodes), and a
# `kind` ("elementwise", "reduce", "broadcast", ...). A reduce's `attrs["dimensions"]` are the dims it folds.
# Two questions about an op come from `asim.passes.analysis`, the module the planners share:
# `asim.passes.analysis.is_expensive(node)` (XLA's list: exp, log, rsqrt, divide...) and
# `asim.passes.analysis.broadcast_users(node)` (the broadcasts that reuse its result, through free views).
#
# Our running example is a layernorm:

# %%
ln = asim.workload("layernorm", rows=64, cols=256)
for n in ln:
    print(f"{n.name:10s} {n.op:12s} {str(list(n.shape)):10s} <- {[o.name for o in n.operands]}")

# %% [markdown]
# ## Where your functions sit in the pass
#
# `astitch_sim/planning/strategies/astitch.py` plans in eight steps (its docstring lists them). Per **stitch scope**
# (the memory-intensive ops between matrix products, one kernel when nothing forbids it):
#
# 1. *dominant identification* -- **you write it** (exercise 1);
# 2. *dominant merging* into op groups, one stage of the kernel each -- **you write it** (exercise 1);
# 3. thread mapping per group (horizontal packing, task splitting: notebook 4) -- **exercise 3**, a puzzle;
# 4. the scheme of each value a later stage reads, by the *block-locality check* -- **you write it**
#    (exercise 2); the reductions inside a stage combine by warp shuffles -- **exercise 4**, a puzzle;
# 5. launch sizing, registers, never-behind-XLA: the project's (notebook 5).
#
# A plan records every decision, so your functions can be compared with the planner's. We look at the raw
# stitch plans (`never_behind=False`: no XLA kernels swapped in where they would be cheaper, notebook 5),
# with the paper's shared-memory reduction trees (`reduce_scheme="tree"`), for which the paper's scheme
# rules below were written:

# %%
ln_plan = asim.compile(ln, "astitch", "V100", never_behind=False, reduce_scheme="tree")
print(ln_plan)


# %%
def stitch_kernels(plan):
    """The kernels the stitch pass built, each with its scope (every op it computes) and its outputs."""
    for k in plan.kernels:
        if k.name.startswith("stitch."):
            scope = {n for s in k.stages for n in list(s.ops) + list(s.epilogue)}
            yield k, scope, set(k.outputs)


def depends_on(node, names) -> bool:
    """Does ``node`` read (directly or through other ops) any node named in ``names``?"""
    seen, stack = set(), [node]
    while stack:
        for o in stack.pop().operands:
            if o.name in names:
                return True
            if o.name not in seen:
                seen.add(o.name)
                stack.append(o)
    return False


for k, scope, outputs in stitch_kernels(ln_plan):
    print(k.name, "outputs:", sorted(outputs))
    for i, s in enumerate(k.stages):
        print(f"  stage {i}: dominant {s.dominant}; ops {s.ops}; epilogue {s.epilogue}")

# %% [raw]
# # BEGIN QUESTION
# name: q1_dominants
# points: 2

# %% [markdown]
# **Exercise 1: dominant identification and merging.**
#
# (a) Write `find_dominants(graph, scope, outputs)`: the names of the scope's **candidate dominants**, in
# graph order. A node of `scope` is a candidate if it is
# - a **reduce** (its result needs every element of a row: a synchronisation point);
# - a value that **leaves the kernel** (`outputs`: it must be written to global memory anyway);
# - an **expensive** elementwise op whose result is **broadcast** (`broadcast_users`) to a user in the
#   scope: the paper's one-to-many pattern, where fusing through registers would recompute it once per
#   broadcast element (XLA stops there; AStitch computes it once and passes it on).
#
# Every other op is *Local*: it is fused through registers into the group of a candidate that reads it.
#
# (b) Write `merge_dominants(graph, dominants)`: go through the candidates in order and put each in an op
# group; return `{candidate: the first candidate of its group}` (a group's first candidate is its dominant,
# and names its stage). A candidate
# 1. that is a **reduce** joins the group of an earlier reduce over the same input shape and the same
#    `dimensions` -- its *sibling* (a mean and a mean of squares read the input once, in one stage) -- if it
#    does not depend on that group's candidates; otherwise it starts a group;
# 2. that is not a reduce, has the **reduced shape** of a group's reduces, and depends on that group's
#    candidates joins it as a **sub-dominant** (it runs in the group's epilogue, once per row); the latest
#    such group;
# 3. otherwise joins the **latest group over its own shape** if that group has no reduce: elementwise
#    values over one domain share one loop, and one that reads another reads it at its own element, from
#    the same thread's registers (Adam's three outputs: one stage). Otherwise it starts a group (a new stage,
#    after a barrier).
#
# `depends_on` above answers "depends". The layernorm plan printed above is one check you can run yourself;
# the autograder runs yours on about sixty graphs you have not seen (row and column reductions, both joined,
# broadcasts, elementwise-only graphs), builds the kernels your groups make, and runs them on the SIMT model:
# a plan the validator refuses, one that computes a wrong value, or one predicted slower than the planner's
# loses the points, and its hint names the first decision of yours that differs from the planner's.

# %% [raw]
# # BEGIN SOLUTION

# %%
def find_dominants(graph, scope, outputs):
    # BEGIN SOLUTION
    out = []
    for n in graph:
        if n.name not in scope:
            continue
        fans_out = bool(asim.passes.analysis.broadcast_users(n)) and any(u.name in scope for u in n.users)
        if n.op == "reduce" or n.name in outputs or (asim.passes.analysis.is_expensive(n) and fans_out):
            out.append(n.name)
    return out
    # END SOLUTION


def merge_dominants(graph, dominants):
    # BEGIN SOLUTION
    groups, leader = [], {}     # each group: its dominant, its domain, its reduces, its candidates
    for name in dominants:
        d = graph[name]
        if d.op == "reduce":
            home = next((g for g in groups if g["reduces"]
                         and g["reduces"][0].operands[0].shape == d.operands[0].shape
                         and g["reduces"][0].attrs["dimensions"] == d.attrs["dimensions"]
                         and not depends_on(d, g["members"])), None)
            if home is None:
                home = {"dominant": name, "domain": tuple(d.operands[0].shape), "reduces": [], "members": set()}
                groups.append(home)
            home["reduces"].append(d)
        else:
            home = next((g for g in reversed(groups) if g["reduces"]
                         and tuple(d.shape) == tuple(g["reduces"][0].shape) and depends_on(d, g["members"])), None)
            if home is None:
                same = [g for g in groups if g["domain"] == tuple(d.shape)]
                if same and not same[-1]["reduces"]:
                    home = same[-1]
                else:
                    home = {"dominant": name, "domain": tuple(d.shape), "reduces": [], "members": set()}
                    groups.append(home)
        home["members"].add(name)
        leader[name] = home["dominant"]
    return leader
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q1_dominants_form(find_dominants, merge_dominants):
    from checks import public
    public.check("q1_dominants", find_dominants=find_dominants, merge_dominants=merge_dominants)

test_q1_dominants_form(find_dominants, merge_dominants)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 2
""" # END TEST CONFIG
def test_q1_dominants(find_dominants, merge_dominants):
    from grading import nb08
    nb08.q1_dominants(find_dominants, merge_dominants)

test_q1_dominants(find_dominants, merge_dominants)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Try yours on the layernorm and a softmax: each stage's dominant should lead the candidates it computes.


# %%
def compare_groups(plan):
    """Per stitch kernel: does your pass group the candidates as the planner did? (It prints what differs.)"""
    agree = total = 0
    for k, scope, outputs in stitch_kernels(plan):
        first = {}
        for s in k.stages:
            for n in list(s.ops) + list(s.epilogue):
                first.setdefault(n, s.dominant)
        total += 1
        try:
            leaders = merge_dominants(plan.graph, find_dominants(plan.graph, scope, outputs) or [])
            planner = {c: first.get(c) for c in (leaders or {})}
        except Exception as e:            # an unfinished pass: say so and go on
            print(f"  {k.name}: your pass raised {type(e).__name__}: {e}")
            continue
        if leaders and leaders == planner and set(leaders) >= {s.dominant for s in k.stages}:
            agree += 1
        else:
            print(f"  {k.name}: yours {leaders}, the planner's stages lead {[s.dominant for s in k.stages]}")
    return agree, total


sm = asim.workload("softmax", rows=32, cols=512)
for g in (ln, sm):
    agree, total = compare_groups(asim.compile(g, "astitch", "V100", never_behind=False))
    print(f"{g.name}: {agree} of {total} stitch kernel(s) grouped as the planner groups them")

# %% [markdown]
# ## Which memory a value crosses stages in
#
# A value a **later stage** reads gets one of three schemes (notebook 3): **local** -- registers, when every
# reader maps its elements to the same threads as the producer (and a thread holds at most 16 of them:
# the register budget for values carried across stages -- 48 in a kernel whose row stages read their rows in
# 64/128-bit vectors, ``m.kind == "rows" and m.vector > 1``, which keeps a lane's share of a row in
# registers); **regional** -- shared memory and a block barrier,
# for a **per-row value** (a reduce's result, or an epilogue value) when every reader block reads only rows
# its own block reduced; **global** -- global memory and a grid barrier, otherwise. A per-element value is
# never regional here (shared memory holds a block's per-row values, not its elements), and a reduce split
# over several blocks (task splitting) always meets in global memory. (These are the rules for the paper's
# reduction trees, which leave a row's total on its first thread. After the default warp shuffles every
# lane holds it, and the planner keeps a per-row value in registers -- local -- when every reader gives each
# row to the same threads: notebook 3, `astitch_sim/plan/task_registers.py`. Your `choose_scheme` is
# checked against the tree plans.)
#
# The **block-locality check** decides between regional and global. A `ThreadMapping` says where every element
# of its domain goes: `m.locate(flat_indices)` returns `(block, thread, iteration)` arrays;
# `m.first_element_of_task(rows)` is the flat index of each row's first element; `m.splits` is how many
# consecutive blocks one row is split over (each holds the row's result and runs its epilogue). A per-row
# value of `tasks` rows read by a consumer over `[tasks, cols]` (or over `[tasks]`) is read at the row of each
# consumer element: element `e` of the consumer's flat domain reads row `e // (consumer.size // tasks)`.
# Two mappings of the layernorm kernel above:

# %%
ln_kernel = next(stitch_kernels(ln_plan))[0]
fig = figures.new_figure((12, 3.5))
axes = fig.subplots(1, 2)
for ax, i in zip(axes, (0, len(ln_kernel.stages) - 1)):
    figures.draw_mapping(ln_kernel.stages[i].mapping, ax=ax, max_rows=16)
    ax.set_title(f"stage {i} ({ln_kernel.stages[i].dominant})\n" + ax.get_title(), fontsize=8)
fig.tight_layout()
fig

# %% [raw]
# # BEGIN QUESTION
# name: q2_schemes
# points: 2

# %% [markdown]
# **Exercise 2: the block-locality check and the scheme of each edge.**
#
# (a) Write `is_block_local(producer, consumer, tasks)` (two `ThreadMapping`s, the producer's a `rows`
# mapping whose rows are the `tasks` rows of the value): `True` if every block of the consumer reads only rows
# that its own block holds under the producer's mapping.
#
# (b) Write `choose_scheme(graph, name, producer, readers)`: the scheme (`"local"`, `"regional"` or
# `"global"`) of value `name`, computed by stage `producer` (an `asim.Stage`: `.ops`, `.epilogue`,
# `.mapping`) and read by the later stages `readers` (a list of stages), following the rules above.
#
# The autograder compares (a) with the kernel builder's check on sixty random pairs of mappings (packed,
# split, capped at a wave, flat), and (b) with the scheme the planner recorded for every value that crosses
# a stage boundary in the kernels of exercise 1's hidden graphs; it also has the kernel builder place every
# value where your schemes say and runs the result on the SIMT model: a value in shared memory that a block
# needs from another block, or in registers another thread filled, computes wrong values; one sent through
# global memory that a block barrier would have served costs a grid barrier and is predicted slower.

# %% [raw]
# # BEGIN SOLUTION

# %%
def is_block_local(producer, consumer, tasks):
    # BEGIN SOLUTION
    elements = np.arange(consumer.size)
    rows = elements // max(1, consumer.size // tasks)
    mine = consumer.locate(elements)[0]
    first = producer.locate(producer.first_element_of_task(rows))[0]
    return bool(np.all((mine >= first) & (mine < first + producer.splits)))
    # END SOLUTION


def choose_scheme(graph, name, producer, readers):
    # BEGIN SOLUTION
    node = graph[name]
    m = producer.mapping
    if node.op != "reduce" and name not in producer.epilogue:       # a value at every element
        same = all(r.mapping == m for r in readers) and tuple(node.shape) == tuple(m.domain)
        budget = 48 if m.kind == "rows" and m.vector > 1 else 16
        return "local" if same and m.elements_per_thread <= budget else "global"
    if node.op == "reduce" and m.splits > 1:
        return "global"
    local = all(is_block_local(m, r.mapping, max(1, node.size)) for r in readers)
    return "regional" if local else "global"
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q2_schemes_form(is_block_local, choose_scheme):
    from checks import public
    public.check("q2_schemes", is_block_local=is_block_local, choose_scheme=choose_scheme)

test_q2_schemes_form(is_block_local, choose_scheme)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 2
""" # END TEST CONFIG
def test_q2_schemes(is_block_local, choose_scheme):
    from grading import nb08
    nb08.q2_schemes(is_block_local, choose_scheme)

test_q2_schemes(is_block_local, choose_scheme)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Your schemes beside the planner's for the layernorm (a value read only in its own stage is not listed):


# %%
def compare_schemes(plan):
    rows = []
    for k, _, _ in stitch_kernels(plan):
        for name, v in k.values.items():
            later = [j for j in v.read_by if j > v.stage]
            if v.stage < 0 or not later:
                continue
            try:
                yours = choose_scheme(plan.graph, name, k.stages[v.stage], [k.stages[j] for j in later])
            except Exception as e:        # an unfinished function: say so and go on
                yours = f"raised {type(e).__name__}"
            rows.append((name, yours, v.scheme.value))
    return rows


for name, yours, planner in compare_schemes(ln_plan):
    print(f"{name:8s} yours: {yours!s:10s} planner: {planner}")

# %% [markdown]
# ## Kernel puzzle 1: horizontal packing
#
# A row reduction over many short rows (notebook 4) gives each row a power of two of threads -- the largest
# that is no wider than the row, or, for a row shorter than a warp, the smallest that covers it; never more
# than the block -- and packs `block // threads_per_row` rows side by side in each block. Inside its row a
# thread takes the columns in turn: lane `l` computes columns `l`, `l + threads_per_row`, ... (a strided
# loop: neighbouring threads read neighbouring addresses, so a warp's loads coalesce). Blocks take rows in
# order. The picture colours each element of `row_reduce` at `<300, 100>` by the thread (within its block)
# that computes it, first 48 rows:

# %%
puzzle = asim.compile(asim.workload("row_reduce", rows=300, cols=100), "astitch", "V100", never_behind=False)
fig = figures.new_figure((6, 3.5))
figures.draw_mapping(puzzle.kernels[0].stages[0].mapping, ax=fig.subplots(), max_rows=48, color_by="thread")
fig

# %% [raw]
# # BEGIN QUESTION
# name: q3_packing
# points: 1

# %% [markdown]
# **Exercise 3.** Write `packed_owner(rows, cols, block=1024)`, returning two integer arrays of shape
# `(rows, cols)`: the block and the thread (within its block) that compute each element under horizontal
# packing. The autograder compares them with the SIMT model's mapping (`ThreadMapping.locate`) of the
# astitch plan of `row_reduce` on shapes you have not seen (none split over blocks); where your placement is
# a row mapping with another number of threads per row, it also runs that kernel on the SIMT model and
# tells you what it costs.

# %% [raw]
# # BEGIN SOLUTION

# %%
def packed_owner(rows, cols, block=1024):
    # BEGIN SOLUTION
    lanes = 1 << (cols.bit_length() - 1) if cols >= 32 else 1 << (cols - 1).bit_length()
    lanes = min(block, lanes)
    per_block = block // lanes
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
    return np.broadcast_to(r // per_block, (rows, cols)), (r % per_block) * lanes + c % lanes
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q3_packing_form(packed_owner):
    from checks import public
    public.check("q3_packing", packed_owner=packed_owner)

test_q3_packing_form(packed_owner)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q3_packing(packed_owner):
    from grading import nb08
    nb08.q3_packing(packed_owner)

test_q3_packing(packed_owner)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## Kernel puzzle 2: a warp-shuffle row reduction
#
# After its loop every thread of a row holds a partial sum. The threads of a warp then exchange registers
# with `__shfl_xor_sync(mask, v, h)`: lane `j` receives lane `j ^ h`'s value. Adding it, for `h` halving from
# half the warp's lanes down to 1, leaves **every** lane with the warp's total -- no shared memory, no barrier
# (an *xor butterfly*). A row of `W` warps then passes its `W` warp totals through shared memory (one block
# barrier): in every warp each aligned group of `P` lanes (`W` rounded up to a power of two) reads them into
# its lanes `0..W-1` (zero in the others) and runs a second butterfly over `P` lanes -- so again every lane of
# the row ends with its total, and each lane can use it from its own registers in the stages that follow
# (notebook 3). `astitch_sim/plan/reduce_scheme.py` records this choice per
# stage, and the SIMT model (`astitch_sim/simt/reduce.py`) adds the float32 values in exactly this order.
#
# In numpy a warp is an array whose last axis holds its lanes; this `shfl_xor` is the exchange:


# %%
def shfl_xor(values, offset):
    """The warp shuffle: lane j gets lane (j ^ offset)'s value (last axis: the lanes of one warp, <= 32)."""
    values = np.asarray(values)
    return values[..., np.arange(values.shape[-1]) ^ offset]


lanes = np.arange(8, dtype=np.float32)
print("lanes          ", lanes)
print("after offset 4 ", lanes + shfl_xor(lanes, 4))

# %% [raw]
# # BEGIN QUESTION
# name: q4_shuffle
# points: 1

# %% [markdown]
# **Exercise 4.** Write `warp_row_sum(x, threads_per_row, shfl_xor)`: the float32 sum of each row of
# `x` (`rows x cols`, float32) as the SIMT model computes it with `threads_per_row` threads per row (a power
# of two up to 32, or a whole number of warps): each lane folds its columns `lane, lane + threads_per_row,
# ...` in that order into a float32 zero, then the butterfly (or two) above, exchanging values only through
# the `shfl_xor` you are given. Return one total per row (lane 0's). The autograder hands you its own
# `shfl_xor`, which checks every exchange stays inside a warp and records the offsets, and compares your
# totals with the SIMT model's result for `row_reduce`, bit for bit.

# %% [raw]
# # BEGIN SOLUTION

# %%
def warp_row_sum(x, threads_per_row, shfl_xor):
    # BEGIN SOLUTION
    rows, cols = x.shape
    acc = np.zeros((rows, threads_per_row), np.float32)
    for start in range(0, cols, threads_per_row):
        part = x[:, start:start + threads_per_row]
        acc[:, :part.shape[1]] += part
    warp = min(threads_per_row, 32)
    v = acc.reshape(rows, threads_per_row // warp, warp)
    h = warp // 2
    while h:
        v = v + shfl_xor(v, h)
        h //= 2
    if threads_per_row <= 32:
        return v[:, 0, 0]
    w = threads_per_row // 32
    t = np.zeros((rows, 1 << (w - 1).bit_length()), np.float32)
    t[:, :w] = v[:, :, 0]
    h = t.shape[1] // 2
    while h:
        t = t + shfl_xor(t, h)
        h //= 2
    return t[:, 0]
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q4_shuffle_form(warp_row_sum):
    from checks import public
    public.check("q4_shuffle", warp_row_sum=warp_row_sum)

test_q4_shuffle_form(warp_row_sum)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q4_shuffle(warp_row_sum):
    from grading import nb08
    nb08.q4_shuffle(warp_row_sum)

test_q4_shuffle(warp_row_sum)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Check yours against the SIMT model on `<300, 21>` (a warp per row, 11 of its lanes idle) and on `<200, 2001>`
# (two butterflies: 32 lanes in each of 32 warps). numpy's own float32 sum adds in another order. (Odd widths:
# a row of even width is read in 64/128-bit vectors, ``astitch_sim/plan/row_vectors.py``, a lane folding
# ``vector`` neighbouring columns at a time; the puzzles keep to one column per lane.)

# %%
for rows, cols in ((300, 21), (200, 2001)):
    w = asim.workload("row_reduce", rows=rows, cols=cols)
    p = asim.compile(w, "astitch", "V100", never_behind=False)
    x = asim.random_inputs(w, seed=1)[0]
    model = np.asarray(asim.simulate(p, {"x": x}).outputs[0], dtype=np.float32)
    try:
        yours = np.asarray(warp_row_sum(x * x, p.kernels[0].stages[0].mapping.threads_per_row, shfl_xor))
        same = yours.shape == model.shape and np.array_equal(yours, model)
    except Exception as e:                 # an unfinished function: say so and go on
        same = f"raised {type(e).__name__}"
    print(f"<{rows},{cols}>: {p.kernels[0].stages[0].mapping.threads_per_row} lanes per row; yours equal the "
          f"SIMT model's bit for bit: {same}; numpy's sum does: "
          f"{np.array_equal((x * x).sum(axis=1, dtype=np.float32), model)}")

# %% [markdown]
# ## Our numbers
#
# What the decisions you wrote are worth, predicted by the SIMT model on a V100 (a cost model, not a GPU):
# the astitch plan of three graphs against XLA's, and against the same pass with Regional stitching switched
# off (every per-row value through global memory and a grid barrier, as if the block-locality check always
# failed) and with Global stitching off (a kernel ends wherever your scheme said global), all with the
# paper's reduction trees as above (with the default shuffles layernorm's and softmax's per-row values stay
# in registers, and switching Regional off changes nothing for them). The title counts the stitch kernels
# your exercise 1 groups as the planner does.

# %%
graphs = {"layernorm 64x256": ln, "softmax 32x512": sm,
          "paper Figure 7": asim.workload("paper_fig7", n=32, c=64)}
variants = {"xla": ("xla", {}), "astitch": ("astitch", {"never_behind": False}),
            "no Regional": ("astitch", {"regional_stitching": False}),
            "no Global": ("astitch", {"global_stitching": False})}
times, agree, total = {}, 0, 0
for label, g in graphs.items():
    inputs = asim.random_inputs(g)
    plans = {v: asim.compile(g, s, "V100", reduce_scheme="tree", **opts) for v, (s, opts) in variants.items()}
    times[label] = {v: asim.simulate(p, inputs).stats.predicted_us for v, p in plans.items()}
    a, t = compare_groups(plans["astitch"])
    agree, total = agree + a, total + t
    print(label, {v: f"{us:.2f} us" for v, us in times[label].items()})

fig = figures.new_figure((11, 3.8))
ax = fig.subplots()
width = 0.2
for i, v in enumerate(variants):
    ax.bar([j + i * width for j in range(len(graphs))], [times[label][v] for label in graphs], width, label=v)
ax.set_xticks([j + 1.5 * width for j in range(len(graphs))], list(graphs))
ax.set_ylabel("predicted us (SIMT model, V100)")
ax.set_title(f"what stitching decisions are worth; your pass groups {agree} of {total} stitch kernels as the "
             "planner does", fontsize=9)
ax.legend(fontsize=8)
fig.tight_layout()
fig
