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
# name: 07_bring_your_own_model
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
#   - data

# %% [markdown]
# # 7. Bring your own model
#
# *astitch-sim tutorials, part 7 of 7 -- about 60 minutes, plus the mini-project.*
#
# **Learning goals.** After this notebook you can
# - take a JAX function to its text (JAX's default StableHLO, or XLA's HLO) and import it (`asim.from_hlo`),
#   matrix products included (or a PyTorch module, with `asim.from_torch`);
# - compare the strategies on a real model's subgraphs and attribute the difference to **memory-intensive
#   clusters** (the subgraphs between matrix products);
# - say which clusters gain from stitching and why, and which do not;
# - plan the mini-project at the end.
#
# **Prerequisites.** Notebooks 1-5. JAX is *not* needed: the HLO files are committed
# (`tutorials/data/hlo/`); the JAX code that made them is shown, and `tutorials/data/make_hlo.py` regenerates
# them where JAX is installed.

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

HLO = Path("data") / "hlo"

# %%
# The exercise checks. In the student version (tutorials/README.md, "Grading") a grader check cell follows
# each exercise and checks the answer's form; the autograder grades its value (instructor/README.md).
import otter
grader = otter.Notebook("07_bring_your_own_model.ipynb") if Path("tests").is_dir() else None

# %% [markdown]
# ## From JAX to HLO
#
# Four sublayers of today's models, written in JAX (from `data/make_hlo.py`; this cell only *shows* the code):
#
# ```python
# def layernorm(x, gamma, beta, eps=1e-5):
#     mean = jnp.mean(x, axis=-1, keepdims=True)
#     var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
#     return (x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta
#
# def ffn_block(x, gamma, beta, w1, b1, w2, b2):          # BERT-style FFN sublayer, x: [128, 256]
#     h = layernorm(x, gamma, beta)
#     h = jax.nn.gelu(h @ w1 + b1, approximate=True)
#     return x + h @ w2 + b2
#
# def attention(q, k, v, mask):                          # [2, 4, 64, 64], mask [2, 1, 1, 64]
#     scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(q.shape[-1])) + mask
#     return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
#
# def llama_mlp(x, weight, w_gate, w_up, w_down):        # RMSNorm + SwiGLU, x: [128, 256]
#     h = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + 1e-6) * weight
#     return x + (jax.nn.silu(h @ w_gate) * (h @ w_up)) @ w_down
#
# def xent_grad(logits, labels):                         # loss and its gradient, [64, 1000]
#     loss = lambda lg: -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(lg, axis=-1), axis=-1))
#     return jax.value_and_grad(loss)(logits)
#
# text = jax.jit(ffn_block).lower(*example_args).as_text(dialect="hlo")   # XLA's HLO, before its fusion passes
# text = jax.jit(ffn_block).lower(*example_args).as_text()                # JAX's default: StableHLO (MLIR)
# ```
#
# The HLO is what XLA itself would optimise. astitch-sim imports it into its graph IR. JAX's *default* text,
# StableHLO, works too: `asim.from_hlo` recognises MLIR (`module @jit_f { func.func ...`) and imports it into
# the same graph (`g.source` says which text it read). The files here are HLO:

# %%
models = {name: asim.from_hlo((HLO / f"{name}.hlo").read_text())
          for name in ("ffn_block", "attention", "llama_mlp", "xent_grad")}
for name, g in models.items():
    ops = {}
    for n in g:
        ops[n.op] = ops.get(n.op, 0) + 1
    print(f"{name:10s} {len(g):3d} nodes; matrix products: {ops.get('dot', 0)}; reduces: {ops.get('reduce', 0)}")
print((HLO / "ffn_block.hlo").read_text()[:1200])

# %% [markdown]
# ## Same numbers as JAX
#
# `data/make_hlo.py` also saved JAX's outputs for the inputs `asim.random_inputs(graph, seed=0)`. The numpy
# reference and the SIMT model should agree with JAX to float32 rounding (matrix products sum in a different
# order, so the tolerance is relative to the output's scale):

# %%
inputs = {name: asim.random_inputs(g, seed=0) for name, g in models.items()}
for name, g in models.items():
    jax_out = np.load(HLO / f"{name}.npz")
    sim = asim.simulate(asim.compile(g, strategy="astitch", gpu="H100"), inputs[name])
    for i, out in enumerate(sim.outputs):
        want = jax_out[f"out{i}"]
        err = np.max(np.abs(np.asarray(out, np.float32) - want)) / max(1e-30, np.max(np.abs(want)))
        print(f"{name:10s} output {i}: max |astitch - JAX| / max |JAX| = {err:.1e}")

# %% [markdown]
# ## Or from PyTorch
#
# The same LLaMA MLP written as a PyTorch module imports without HLO: `asim.from_torch(module, *args)` runs
# `torch.export` (softmax, norms and GELU decomposed into elementwise and reduce ops) and converts the ATen
# graph; `asim.torch_inputs` gives the parameters' values (the module's weights, then `x`). This cell needs
# PyTorch (`pip install 'astitch-sim[torch]'`) and skips itself without it; the rest of the notebook uses
# the JAX graphs.

# %%
try:
    import torch
except ImportError:
    torch = None
    print("PyTorch is not installed: this section is skipped")
if torch is not None:
    class LlamaMLP(torch.nn.Module):                 # RMSNorm + SwiGLU + residual, as llama_mlp above
        def __init__(self, d, hidden):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(d))
            self.gate = torch.nn.Linear(d, hidden, bias=False)
            self.up = torch.nn.Linear(d, hidden, bias=False)
            self.down = torch.nn.Linear(hidden, d, bias=False)

        def forward(self, x):
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
            return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))

    torch.manual_seed(0)
    block, x = LlamaMLP(256, 688).eval(), torch.randn(128, 256)
    g_torch = asim.from_torch(block, x)
    sim = asim.simulate(asim.compile(g_torch, strategy="astitch", gpu="H100"), asim.torch_inputs(block, x))
    with torch.no_grad():
        want = block(x).numpy()
    print(g_torch.signature())
    print(f"max |astitch - PyTorch| / max |PyTorch| = {np.max(np.abs(sim.outputs[0] - want)) / np.max(np.abs(want)):.1e}")
    for name, g in (("from JAX", models["llama_mlp"]), ("from PyTorch", g_torch)):
        p = asim.compile(g, strategy="astitch", gpu="H100")
        print(f"{name:13s} {len(p.generated)} generated + {len(p.library)} library kernels")

# %% [markdown]
# ## Plans: matrix products split the graph into clusters
#
# Every strategy leaves matrix products to a library kernel (`[library]`: cuBLAS's role); what differs is the
# memory-intensive ops between them. The FFN block under AStitch: three stitched kernels (the layernorm
# before the first matmul, bias+GELU between the two, bias+residual after), two library kernels.

# %%
ffn = models["ffn_block"]
ffn_plans = {s: asim.compile(ffn, strategy=s, gpu="H100") for s in asim.STRATEGIES}
for s, p in ffn_plans.items():
    print(f"{s:8s} {len(p.generated)} generated + {len(p.library)} library kernels")
figures.draw_plan(ffn_plans["xla"], hide_moves=True)   # HLO has many reshapes and broadcasts: hide them

# %%
figures.draw_plan(ffn_plans["astitch"], hide_moves=True)

# %% [markdown]
# **Per cluster.** Each generated AStitch kernel is one cluster; every XLA kernel belongs to the cluster that
# computes its last node. Summing predicted time per cluster shows where the gain is:

# %%
def per_cluster(plans, inputs):
    """{cluster name: {strategy: predicted us}} over the generated kernels of each plan."""
    stitched = plans["astitch"]
    res = {s: asim.simulate(p, inputs) for s, p in plans.items() if s in ("xla", "astitch")}
    table = {}
    for s, r in res.items():
        for kernel, ks in zip(plans[s].kernels, r.stats.kernels):
            if kernel.kind != "generated":
                continue
            owner = stitched.kernel_of(kernel.computed[-1])[0].name
            table.setdefault(owner, {"xla": 0.0, "astitch": 0.0})[s] += ks.predicted_us
    return table

ffn_clusters = per_cluster(ffn_plans, inputs["ffn_block"])
for cluster, t in ffn_clusters.items():
    print(f"{cluster:22s} xla {t['xla']:6.1f} us   astitch {t['astitch']:6.1f} us   x{t['xla'] / t['astitch']:.2f}")

# %% [raw]
# # BEGIN QUESTION
# name: q1_best_cluster
# points: 1

# %% [markdown]
# **Exercise 1.** Which cluster of the FFN block gains most from stitching (largest predicted speedup of
# AStitch over XLA)? Give its AStitch kernel name, as printed above. Then explain, from the plans, why the
# bias+GELU cluster gains nothing.

# %% [raw]
# # BEGIN SOLUTION

# %%
best_cluster = max(ffn_clusters, key=lambda c: ffn_clusters[c]["xla"] / ffn_clusters[c]["astitch"])  # SOLUTION
best_cluster

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q1_best_cluster_form(best_cluster):
    from checks import public
    public.check("q1_best_cluster", best_cluster=best_cluster)

test_q1_best_cluster_form(best_cluster)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q1_best_cluster(best_cluster):
    from grading import nb07
    nb07.q1_best_cluster(best_cluster)

test_q1_best_cluster(best_cluster)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## All four models

# %%
results = {}
for name, g in models.items():
    results[name] = {s: asim.simulate(asim.compile(g, strategy=s, gpu="H100"), inputs[name]) for s in asim.STRATEGIES}
    r = results[name]
    print(f"{name:10s} kernels " + " / ".join(f"{s} {r[s].stats.kernel_launches}" for s in asim.STRATEGIES)
          + f"   predicted xla {r['xla'].stats.predicted_us:5.1f} us, astitch {r['astitch'].stats.predicted_us:5.1f} us")

# %% [raw]
# # BEGIN QUESTION
# name: q2_best_model
# points: 1

# %% [markdown]
# **Exercise 2.** Which of the four models gains most from AStitch over XLA in predicted time (H100 preset)?
# What in its graph makes it so (look at its plans)?

# %% [raw]
# # BEGIN SOLUTION

# %%
best_model = max(results, key=lambda n: results[n]["xla"].stats.predicted_us / results[n]["astitch"].stats.predicted_us)  # SOLUTION
best_model

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q2_best_model_form(best_model):
    from checks import public
    public.check("q2_best_model", best_model=best_model)

test_q2_best_model_form(best_model)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q2_best_model(best_model):
    from grading import nb07
    nb07.q2_best_model(best_model)

test_q2_best_model(best_model)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## Your own subgraph
#
# No JAX? The builder API writes the same graphs by hand (`help(asim.Graph)`); with JAX, lower your own
# function as above and `asim.from_hlo` it.

# %% [raw]
# # BEGIN QUESTION
# name: q3_my_subgraph
# points: 2

# %% [markdown]
# **Exercise 3.** Build `my_subgraph`: a memory-intensive subgraph of a model you know (a normalisation with
# a residual, a gated activation with a reduction, a loss...) with **at least one reduce**, on which AStitch
# needs fewer kernels than XLA. The check compiles it, simulates it under both strategies and compares with
# the numpy reference.

# %% [raw]
# # BEGIN SOLUTION

# %%
my_subgraph = asim.Graph("residual_rmsnorm")
x = my_subgraph.parameter("x", (512, 1024))
res = my_subgraph.parameter("residual", (512, 1024))
w = my_subgraph.parameter("weight", (1024,))
h = my_subgraph.add(x, res, name="h")  # SOLUTION
ms = my_subgraph.divide(my_subgraph.reduce(my_subgraph.multiply(h, h), dims=(1,), name="sum_sq"), 1024.0, name="ms")  # SOLUTION
scale = my_subgraph.rsqrt(my_subgraph.add(ms, 1e-6), name="scale")  # SOLUTION
out = my_subgraph.multiply(my_subgraph.multiply(h, my_subgraph.broadcast(scale, (512, 1024), dimensions=(0,))), my_subgraph.broadcast(w, (512, 1024), dimensions=(1,)), name="out")  # SOLUTION
my_subgraph.set_outputs(out, h)  # SOLUTION
print(asim.compile(my_subgraph, "astitch", "H100"))

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
""" # BEGIN TEST CONFIG
points: 0
""" # END TEST CONFIG
def test_q3_my_subgraph_form(my_subgraph):
    from checks import public
    public.check("q3_my_subgraph", my_subgraph=my_subgraph)

test_q3_my_subgraph_form(my_subgraph)

# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 1
""" # END TEST CONFIG
def test_q3_my_subgraph(my_subgraph):
    from grading import nb07
    nb07.q3_my_subgraph(my_subgraph)

test_q3_my_subgraph(my_subgraph)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# ## Mini-project: AStitch on a model of your choice
#
# **Goal.** Predict, explain and improve what stitching does for one real model -- with the simulator, and
# honestly about what a simulator can and cannot tell.
#
# 1. **Pick a model** (a transformer block, a recommendation model's feature layers, an optimizer step, a
#    loss with its gradient...). Write it in JAX, lower it to HLO (`data/make_hlo.py` is a template),
#    import it. If the importer refuses an op, its error names the op: leave that part out or rewrite it.
# 2. **Inventory.** List its memory-intensive clusters (AStitch's generated kernels) and, for each, the
#    kernels, global bytes and predicted time under `xla`, `tvm` and `astitch` on two GPU presets.
#    Check every plan's output against the numpy reference (and against JAX's outputs).
# 3. **Explain.** For the cluster that gains most and the one that gains least, explain the difference
#    with the paper's concepts: which one-to-many dependencies, which stitch schemes, which thread mapping,
#    barriers, waves. Use at least one picture (`draw_plan`, `draw_mapping`, `draw_timeline`).
# 4. **Sensitivity.** Vary one shape (batch, sequence, hidden size) over a decade and plot the predicted
#    speedup. Where does it change, and why (waves, packing, splitting)?
# 5. **Improve or refute.** Either propose a change to a plan that the model predicts to be faster (for
#    example, keeping a row in registers across stages, notebook 3; a different split, notebook 4) and show
#    its numbers, or find a case where the cost model is likely wrong and argue why (what it does not model:
#    L2, instruction overheads...).
#
# **Deliverable:** a notebook (runs top to bottom in a fresh kernel) and a two-page report.
# **Rubric (suggested):** correctness and checks 25%, inventory 20%, explanations 30%, sensitivity 10%,
# improvement or critique 15%.

# %% [markdown]
# ## Our numbers
#
# Predicted time of the four models under each strategy on the H100 preset (SIMT model; no GPU measurement
# exists for them -- notebook 6), and the FFN block's clusters.

# %%
fig = figures.new_figure((12, 4))
ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
names = list(results)
width = 0.2
for i, s in enumerate(asim.STRATEGIES):
    ax1.bar(np.arange(len(names)) + (i - 1.5) * width, [results[n][s].stats.predicted_us for n in names],
            width, label=s, color=figures.STRATEGY_COLOURS[s])
ax1.set_xticks(np.arange(len(names)))
ax1.set_xticklabels(names)
ax1.set_ylabel("predicted us (H100 preset)")
ax1.legend(fontsize=8)
ax1.set_title("four models, four strategies", fontsize=9)
clusters = list(ffn_clusters)
for i, s in enumerate(("xla", "astitch")):
    ax2.barh(np.arange(len(clusters)) + (i - 0.5) * 0.4, [ffn_clusters[c][s] for c in clusters], 0.4, label=s,
             color=figures.STRATEGY_COLOURS[s])
ax2.set_yticks(np.arange(len(clusters)))
ax2.set_yticklabels(clusters, fontsize=8)
ax2.invert_yaxis()
ax2.set_xlabel("predicted us")
ax2.legend(fontsize=8)
ax2.set_title("ffn_block: memory-intensive clusters", fontsize=9)
fig.tight_layout()
fig
