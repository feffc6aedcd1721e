"""Checks for 07_bring_your_own_model."""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

import astitch_sim as asim

from checks.core import Derived, Wrong, answered, exercise, word

MODELS = ("ffn_block", "attention", "llama_mlp", "xent_grad")


def _hlo(name: str) -> str:
    for root in (os.path.join("data", "hlo"), os.path.join("tutorials", "data", "hlo")):
        path = os.path.join(root, f"{name}.hlo")
        if os.path.exists(path):
            with open(path) as f:
                return f.read()
    raise Wrong("cannot find data/hlo/ from here: run the notebook from the tutorials/ folder")


@lru_cache(maxsize=None)
def _speedups(name: str) -> dict:
    """Predicted xla/astitch time per AStitch cluster (generated kernel) and for the whole model."""
    g = asim.from_hlo(_hlo(name))
    x = asim.random_inputs(g, seed=0)
    plans = {s: asim.compile(g, s, "H100") for s in ("xla", "astitch")}
    res = {s: asim.simulate(p, x) for s, p in plans.items()}
    clusters: dict = {}
    for s in plans:
        for kernel, ks in zip(plans[s].kernels, res[s].stats.kernels):
            if kernel.kind == "generated":
                owner = plans["astitch"].kernel_of(kernel.computed[-1])[0].name
                clusters.setdefault(owner, {"xla": 0.0, "astitch": 0.0})[s] += ks.predicted_us
    return {"clusters": {c: t["xla"] / t["astitch"] for c, t in clusters.items()},
            "model": res["xla"].stats.predicted_us / res["astitch"].stats.predicted_us}


def _by_gain(env) -> list:
    t = env["ffn_clusters"]
    return sorted(t, key=lambda c: t[c]["xla"] / t[c]["astitch"])


@exercise(wrong=[Derived(lambda env: _by_gain(env)[0], "smallest gain"),
                 Derived(lambda env: _by_gain(env)[-2], "second largest gain"),
                 "library.1:dot_general.2", "layernorm"])
def q1_best_cluster(best_cluster):
    answered(best_cluster, "best_cluster")
    sp = _speedups("ffn_block")["clusters"]
    if not isinstance(best_cluster, str) or best_cluster not in sp:
        if isinstance(best_cluster, str) and best_cluster.startswith("library"):
            raise Wrong("that is a matrix product (a library kernel); every strategy leaves those alone")
        raise Wrong(f"best_cluster should be one of the AStitch kernel names printed above "
                    f"({len(sp)} clusters), as a string")
    best = max(sp, key=sp.get)
    if best_cluster == best:
        return
    if sp[best_cluster] <= 1.001:
        raise Wrong("that cluster gains nothing: XLA already fuses it into one kernel")
    raise Wrong("that cluster gains, but another gains more: compare xla/astitch time per cluster")


@exercise(wrong=["xent", "ffn_block", "llama_mlp", 3])
def q2_best_model(best_model):
    answered(best_model, "best_model")
    name = word(best_model, "best_model", set(MODELS), "the four model names (the keys of models)")
    sp = {m: _speedups(m)["model"] for m in MODELS}
    best = max(sp, key=sp.get)
    if name == best:
        return
    raise Wrong(f"{name} gains {'little' if sp[name] < 1.2 else 'well'}, but another model gains more: compare "
                "predicted xla time over astitch time for all four")


def _elementwise_only():
    g = asim.Graph("bias_relu")
    x, b = g.parameter("x", (64, 128)), g.parameter("b", (128,))
    g.set_outputs(g.maximum(g.add(x, g.broadcast(b, (64, 128), dimensions=(1,))), 0.0))
    return g


def _single_reduce():
    g = asim.Graph("row_sums")
    g.set_outputs(g.reduce(g.parameter("x", (64, 128)), dims=(1,), reducer="sum"))
    return g


@exercise(wrong=[Derived(lambda env: _elementwise_only(), "no reduce"),
                 Derived(lambda env: _single_reduce(), "nothing to stitch"),
                 Derived(lambda env: asim.compile(env["my_subgraph"], "astitch", "H100"), "a plan"),
                 "rmsnorm"])
def q3_my_subgraph(my_subgraph):
    answered(my_subgraph, "my_subgraph")
    if isinstance(my_subgraph, asim.Plan):
        raise Wrong("my_subgraph should be the Graph, not a compiled plan")
    if not isinstance(my_subgraph, asim.Graph):
        raise Wrong(f"my_subgraph should be an asim.Graph (builder API or asim.from_hlo), got "
                    f"{type(my_subgraph).__name__}")
    if not my_subgraph.outputs:
        raise Wrong("my_subgraph has no outputs yet: call set_outputs(...)")
    if not any(n.op == "reduce" for n in my_subgraph):
        raise Wrong("my_subgraph needs at least one reduce: that is where XLA's fusion stops")
    try:
        plans = {s: asim.compile(my_subgraph, s, "H100") for s in ("xla", "astitch")}
    except asim.AStitchError as e:
        raise Wrong(f"my_subgraph does not compile: {e}") from None
    if len(plans["astitch"].kernels) >= len(plans["xla"].kernels):
        raise Wrong("AStitch needs as many kernels as XLA here: give the reduce's result a consumer at the "
                    "input's shape (a broadcast), so XLA has to stop and AStitch can stitch")
    if sum(p.size for p in my_subgraph.inputs) > 1 << 22:
        raise Wrong("keep my_subgraph to at most 4M input elements so the check runs in seconds")
    x = asim.workloads.workload_inputs(my_subgraph)
    ref = asim.reference(my_subgraph, x)
    for s, p in plans.items():
        outs = asim.simulate(p, x).outputs
        for o, r in zip(outs, ref):
            r = np.asarray(r)
            if r.dtype.kind == "f" and not np.all(np.isfinite(r)):
                raise Wrong("the reference output has inf or NaN for random normal inputs: keep the math in its "
                            "domain (add an epsilon before rsqrt/log/divide)")
            scale = max(1.0, float(np.max(np.abs(r)))) if r.size else 1.0
            if not np.allclose(np.asarray(o, r.dtype), r, rtol=1e-4, atol=1e-5 * scale):
                raise Wrong(f"the {s} plan's output differs from the numpy reference -- a bug worth reporting "
                            "if your graph is valid")
