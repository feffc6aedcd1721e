"""The workload catalog: memory-intensive subgraphs of real models, built the way XLA sees them.

Every entry is a small function that builds a :class:`~astitch_sim.ir.graph.Graph`
with the builder API, in f32, in the form XLA's HLO has after its simplifier:

* a reduce is ``reduce(x, init)`` over explicit dimensions -- a *row* reduction
  runs over the last dimension, a *column* reduction over dimension 0;
* a reduce result (or a parameter) used at a bigger shape goes through an
  explicit ``broadcast`` whose ``dimensions`` say which output dimensions the
  operand fills (``[rows] -> [rows, cols]`` is ``dimensions=(0,)``,
  ``[cols] -> [rows, cols]`` is ``dimensions=(1,)``);
* scalar constants are ``constant`` + ``broadcast(dimensions=())``.

The nodes the paper talks about carry readable names (``mean_sum``, ``var``,
``rstd``, ``out``) so a printed graph, a plan or a DOT picture reads like the
formula.  The default shapes come from the models the AStitch paper measured
(BERT, Transformer, DIEN) or from today's LLMs; each entry says where.

    >>> from astitch_sim.frontends.workloads import workload, list_workloads
    >>> g = workload("layernorm", rows=4, cols=8)
    >>> [p.name for p in g.inputs]
    ['x', 'gamma', 'beta']
    >>> [w.name for w in list_workloads()][:3]
    ['layernorm', 'rmsnorm', 'batchnorm_train']

Building is cheap at any shape (no arrays are allocated); only evaluating a
default-size graph with the numpy reference takes memory and time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..errors import AStitchError
from ..ir.graph import Graph, Node
from ..ir.reference import random_inputs


# ---------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """One catalog entry.

    ``build(**shape)`` makes the graph; ``defaults`` is the default shape (its
    keys are the only shape keywords); ``doc`` says what the graph computes and
    ``source`` where the default shape comes from.  ``prepare_inputs``, when
    set, turns random normal inputs (a ``{name: array}`` dict) into inputs in
    the workload's domain (a second moment that is non-negative, statistics that
    match their tensor); :func:`workload_inputs` applies it.
    """
    name: str
    build: Callable[..., Graph]
    defaults: dict
    doc: str
    source: str
    prepare_inputs: Optional[Callable[[dict], dict]] = field(default=None, compare=False)

    @property
    def shape_str(self) -> str:
        """``rows=16384 cols=768`` -- the default shape as CLI ``--shape`` arguments."""
        return " ".join(f"{k}={v}" for k, v in self.defaults.items())

    def __call__(self, **shape) -> Graph:
        return workload(self.name, **shape)


#: name -> :class:`Workload`, in catalog order
WORKLOADS: dict[str, Workload] = {}


def _register(name: str, doc: str, source: str, prepare_inputs=None, **defaults):
    """Decorator: put a builder in :data:`WORKLOADS`; the returned function validates its shape."""
    def wrap(fn):
        WORKLOADS[name] = Workload(name, fn, dict(defaults), doc, source, prepare_inputs)

        def checked(*args, **shape):
            keys = list(defaults)
            if len(args) > len(keys):
                raise AStitchError(f"workload {name!r} takes at most {len(keys)} shape arguments "
                                   f"({', '.join(keys)}), got {len(args)}")
            for k, v in zip(keys, args):
                if k in shape:
                    raise AStitchError(f"workload {name!r}: {k} given twice")
                shape[k] = v
            return workload(name, **shape)
        checked.__name__, checked.__qualname__ = fn.__name__, fn.__qualname__
        checked.__doc__ = fn.__doc__
        checked.builder = fn
        return checked
    return wrap


def list_workloads() -> list[Workload]:
    """All catalog entries, in catalog order."""
    return list(WORKLOADS.values())


def _valid_names() -> str:
    return ", ".join(WORKLOADS)


def check_shape(name: str, shape: dict) -> dict:
    """The full shape for workload ``name``: defaults overridden by ``shape``, every value a positive int."""
    if not isinstance(name, str) or name not in WORKLOADS:
        raise AStitchError(f"unknown workload {name!r}; the catalog has: {_valid_names()}")
    entry = WORKLOADS[name]
    unknown = [k for k in shape if k not in entry.defaults]
    if unknown:
        raise AStitchError(f"workload {name!r} has no shape keyword {', '.join(map(repr, unknown))}; "
                           f"valid keywords: {', '.join(f'{k} (default {v})' for k, v in entry.defaults.items())}")
    full = dict(entry.defaults)
    for k, v in shape.items():
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            if isinstance(v, str) and v.strip().isdigit():
                v = int(v)
            else:
                raise AStitchError(f"workload {name!r}: {k}={v!r} must be a positive integer")
        if int(v) <= 0:
            raise AStitchError(f"workload {name!r}: {k}={v} must be a positive integer "
                               f"(valid keywords: {', '.join(entry.defaults)})")
        full[k] = int(v)
    return full


def workload(name: str, **shape) -> Graph:
    """Build catalog workload ``name`` at its default shape, or with keywords overriding it.

    ``workload("softmax", rows=8, cols=16)``; an unknown name or keyword, or a
    size that is not a positive integer, raises :class:`AStitchError` listing
    what is valid.
    """
    full = check_shape(name, shape)
    g = WORKLOADS[name].build(**full)
    return g.validate()


def workload_inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    """Random inputs for ``graph`` that lie in its workload's domain.

    Starts from :func:`~astitch_sim.ir.reference.random_inputs` (standard normals)
    and, when ``graph`` is a catalog workload (matched by ``graph.name``) with a
    ``prepare_inputs`` hook, fixes the values that normals get wrong, e.g.
    Adam's second moment ``v`` must be >= 0 or ``sqrt`` gives NaN.  Any other
    graph gets plain random inputs.
    """
    values = random_inputs(graph, seed)
    entry = WORKLOADS.get(graph.name)
    if entry is None or entry.prepare_inputs is None:
        return values
    named = {p.name: v for p, v in zip(graph.inputs, values)}
    try:
        fixed = entry.prepare_inputs(dict(named))
    except KeyError:          # same name, different graph: leave it alone
        return values
    return [np.asarray(fixed[p.name], dtype=v.dtype).reshape(v.shape) for p, v in zip(graph.inputs, values)]


# ---------------------------------------------------------------------------
# small builders shared by the workloads
# ---------------------------------------------------------------------------

def _scalar(g: Graph, value: float, shape, name: str) -> Node:
    """A named f32 scalar constant broadcast to ``shape`` (XLA: constant + broadcast dimensions={})."""
    c = g.constant(float(value), "f32", name=name)
    return g.broadcast(c, tuple(shape), (), name=f"{name}.bcast") if len(shape) else c


def _row_sum(g, x, name, reducer="sum"):
    """Reduce the last dimension: ``[..., cols] -> [...]`` (a row reduction)."""
    return g.reduce(x, (x.rank - 1,), reducer, name=name)


def _to_rows(g, v, like, name):
    """Broadcast a row-reduction result ``[...]`` back to ``like.shape`` ``[..., cols]``."""
    return g.broadcast(v, like.shape, tuple(range(v.rank)), name=name)


def _to_cols(g, v, like, name):
    """Broadcast a per-column vector ``[cols]`` to ``like.shape`` ``[rows, cols]``."""
    return g.broadcast(v, like.shape, (like.rank - 1,), name=name)


# ---------------------------------------------------------------------------
# normalisations
# ---------------------------------------------------------------------------

LAYERNORM_EPS = 1e-12     # BERT's layer_norm_eps
RMSNORM_EPS = 1e-6        # LLaMA's rms_norm_eps
BATCHNORM_EPS = 1e-5      # torch.nn.BatchNorm2d / flax default


@_register("layernorm",
           doc="LayerNorm over the last dim: (x - mean) * rsqrt(var + eps) * gamma + beta, gamma/beta [cols].",
           source="BERT-base: batch 32 x seq 512 = 16384 tokens, hidden 768 (eps 1e-12).",
           rows=16384, cols=768)
def layernorm(rows, cols) -> Graph:
    """Two row reductions (mean, then variance of the centred x), each broadcast back: the
    reduce -> broadcast pattern XLA cannot fuse through."""
    g = Graph("layernorm")
    x = g.parameter("x", (rows, cols))
    gamma = g.parameter("gamma", (cols,))
    beta = g.parameter("beta", (cols,))
    n = _scalar(g, cols, (rows,), "n")
    mean = g.divide(_row_sum(g, x, "mean_sum"), n, name="mean")
    xc = g.subtract(x, _to_rows(g, mean, x, "mean.bcast"), name="xc")
    var = g.divide(_row_sum(g, g.multiply(xc, xc, name="xc_sq"), "var_sum"), n, name="var")
    rstd = g.rsqrt(g.add(var, _scalar(g, LAYERNORM_EPS, (rows,), "eps"), name="var_eps"), name="rstd")
    xhat = g.multiply(xc, _to_rows(g, rstd, x, "rstd.bcast"), name="xhat")
    scaled = g.multiply(xhat, _to_cols(g, gamma, x, "gamma.bcast"), name="scaled")
    out = g.add(scaled, _to_cols(g, beta, x, "beta.bcast"), name="out")
    g.set_outputs(out)
    return g


@_register("rmsnorm",
           doc="RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * weight, weight [cols].",
           source="LLaMA-7B: 4096 tokens (batch 1 x seq 4096 or 2 x 2048), hidden 4096 (eps 1e-6).",
           rows=4096, cols=4096)
def rmsnorm(rows, cols) -> Graph:
    """One row reduction broadcast back; LLaMA-style (no mean subtraction, no bias)."""
    g = Graph("rmsnorm")
    x = g.parameter("x", (rows, cols))
    weight = g.parameter("weight", (cols,))
    ms_sum = _row_sum(g, g.multiply(x, x, name="x_sq"), "ms_sum")
    ms = g.divide(ms_sum, _scalar(g, cols, (rows,), "n"), name="ms")
    rstd = g.rsqrt(g.add(ms, _scalar(g, RMSNORM_EPS, (rows,), "eps"), name="ms_eps"), name="rstd")
    xhat = g.multiply(x, _to_rows(g, rstd, x, "rstd.bcast"), name="xhat")
    out = g.multiply(xhat, _to_cols(g, weight, x, "weight.bcast"), name="out")
    g.set_outputs(out)
    return g


@_register("batchnorm_train",
           doc="BatchNorm forward in training: per-channel mean/var by column reductions over dim 0 "
               "of NHWC flattened to [N*H*W, C]; outputs y, mean, var.",
           source="a ResNet first stage: batch 64 x 32x32 pixels = 65536 rows, 64 channels (eps 1e-5).",
           rows=65536, cols=64)
def batchnorm_train(rows, cols) -> Graph:
    """Column reductions (over dim 0) broadcast back along dim 1: the layout XLA's reduction
    emitter calls a column reduction, and what BladeDISC leaves unstitched."""
    g = Graph("batchnorm_train")
    x = g.parameter("x", (rows, cols))
    scale = g.parameter("scale", (cols,))
    offset = g.parameter("offset", (cols,))
    n = _scalar(g, rows, (cols,), "n")
    mean = g.divide(g.reduce(x, (0,), name="mean_sum"), n, name="mean")
    xc = g.subtract(x, _to_cols(g, mean, x, "mean.bcast"), name="xc")
    var = g.divide(g.reduce(g.multiply(xc, xc, name="xc_sq"), (0,), name="var_sum"), n, name="var")
    rstd = g.rsqrt(g.add(var, _scalar(g, BATCHNORM_EPS, (cols,), "eps"), name="var_eps"), name="rstd")
    inv = g.multiply(rstd, scale, name="inv")           # per channel: rstd * scale
    y_scaled = g.multiply(xc, _to_cols(g, inv, x, "inv.bcast"), name="y_scaled")
    y = g.add(y_scaled, _to_cols(g, offset, x, "offset.bcast"), name="y")
    g.set_outputs(y, mean, var)
    return g


def _consistent_layernorm_stats(d: dict) -> dict:
    """mean/rstd that really are the statistics of x, so dx is LayerNorm's true gradient."""
    x = d["x"].astype(np.float64)
    mean = x.mean(axis=-1)
    var = ((x - mean[..., None]) ** 2).mean(axis=-1)
    d["mean"] = mean.astype(np.float32)
    d["rstd"] = (1.0 / np.sqrt(var + LAYERNORM_EPS)).astype(np.float32)
    return d


@_register("layernorm_backward",
           doc="LayerNorm backward from saved mean/rstd [rows]: dx needs two row reductions, "
               "dgamma/dbeta two column reductions -- row and column reductions in one graph.",
           source="BERT-base training: 16384 tokens x hidden 768 (the shape of layernorm's forward).",
           prepare_inputs=_consistent_layernorm_stats,
           rows=16384, cols=768)
def layernorm_backward(rows, cols) -> Graph:
    """Inputs as in PyTorch's native_layer_norm_backward: x, dy, gamma and the saved mean, rstd.

    With xhat = (x - mean) * rstd and g = dy * gamma::

        dx     = rstd * (g - mean_row(g) - xhat * mean_row(g * xhat))
        dgamma = sum_rows(dy * xhat)          dbeta = sum_rows(dy)
    """
    g = Graph("layernorm_backward")
    x = g.parameter("x", (rows, cols))
    dy = g.parameter("dy", (rows, cols))
    gamma = g.parameter("gamma", (cols,))
    mean = g.parameter("mean", (rows,))
    rstd = g.parameter("rstd", (rows,))
    xc = g.subtract(x, _to_rows(g, mean, x, "mean.bcast"), name="xc")
    rstd_b = _to_rows(g, rstd, x, "rstd.bcast")
    xhat = g.multiply(xc, rstd_b, name="xhat")
    dxhat = g.multiply(dy, _to_cols(g, gamma, x, "gamma.bcast"), name="dxhat")
    n = _scalar(g, cols, (rows,), "n")
    mean_dxhat = g.divide(_row_sum(g, dxhat, "sum_dxhat"), n, name="mean_dxhat")
    prod = g.multiply(dxhat, xhat, name="dxhat_xhat")
    mean_prod = g.divide(_row_sum(g, prod, "sum_dxhat_xhat"), n, name="mean_dxhat_xhat")
    centred = g.subtract(dxhat, _to_rows(g, mean_dxhat, x, "mean_dxhat.bcast"), name="dxhat_centred")
    proj = g.multiply(xhat, _to_rows(g, mean_prod, x, "mean_dxhat_xhat.bcast"), name="xhat_proj")
    dx = g.multiply(rstd_b, g.subtract(centred, proj, name="dx_unscaled"), name="dx")
    dgamma = g.reduce(g.multiply(dy, xhat, name="dy_xhat"), (0,), name="dgamma")
    dbeta = g.reduce(dy, (0,), name="dbeta")
    g.set_outputs(dx, dgamma, dbeta)
    return g


@_register("global_norm",
           doc="Clip by global norm: x * clip / max(clip, sqrt(sum of x^2 over ALL dims)) -- a reduce "
               "over every element feeding every element (needs a grid-wide barrier to stitch).",
           source="a 1M-element gradient viewed as [1024, 1024] (clip 1.0, as optax.clip_by_global_norm).",
           rows=1024, cols=1024)
def global_norm(rows, cols) -> Graph:
    """The reduce-to-scalar then broadcast-to-everything pattern: no block can finish its part
    of ``out`` until every block has added its part of ``sum_sq``."""
    g = Graph("global_norm")
    x = g.parameter("x", (rows, cols))
    sum_sq = g.reduce(g.multiply(x, x, name="x_sq"), (0, 1), name="sum_sq")
    norm = g.sqrt(sum_sq, name="norm")
    clip = g.constant(1.0, "f32", name="clip")
    factor = g.divide(clip, g.maximum(norm, clip, name="denom"), name="factor")
    out = g.multiply(x, g.broadcast(factor, (rows, cols), (), name="factor.bcast"), name="out")
    g.set_outputs(out)
    return g


# ---------------------------------------------------------------------------
# softmax family
# ---------------------------------------------------------------------------

def _softmax_core(g, x, prefix=""):
    """Numerically safe softmax over the last dim of ``x``; returns (shifted, exp, sum_exp)."""
    row_max = _row_sum(g, x, f"{prefix}row_max", "max")
    shifted = g.subtract(x, _to_rows(g, row_max, x, f"{prefix}row_max.bcast"), name=f"{prefix}shifted")
    e = g.exp(shifted, name=f"{prefix}exp")
    return row_max, shifted, e, _row_sum(g, e, f"{prefix}sum_exp")


@_register("softmax",
           doc="Softmax over the last dim: exp(x - max) / sum(exp(x - max)).",
           source="the paper's Transformer shape <64,30000> (64 rows over a 30000-word vocabulary).",
           rows=64, cols=30000)
def softmax(rows, cols) -> Graph:
    """Two row reductions (max, sum); few, long rows: XLA's one-block-per-row mapping leaves
    most of the GPU idle (64 blocks of 1024 threads where a V100 runs 160)."""
    g = Graph("softmax")
    x = g.parameter("x", (rows, cols))
    _, _, e, sum_exp = _softmax_core(g, x)
    out = g.divide(e, _to_rows(g, sum_exp, x, "sum_exp.bcast"), name="out")
    g.set_outputs(out)
    return g


@_register("attention_softmax",
           doc="Attention probabilities: softmax(scores * 1/sqrt(64) + mask) over the last dim of "
               "[batch, heads, seq, seq]; mask [batch, seq] broadcast with dimensions (0, 3).",
           source="BERT-base: 12 heads (head dim 64), seq 128, batch 16. Batch 32 x seq 512 gives "
                  "[32,12,512,512] = 196608 rows x 512.",
           batch=16, heads=12, seq=128)
def attention_softmax(batch, heads, seq) -> Graph:
    """The scale is 1/sqrt(head_dim) with BERT-base's head_dim 64; the additive mask (0 or a
    large negative number per key) is HuggingFace's extended attention mask [b,1,1,s]."""
    g = Graph("attention_softmax")
    shape = (batch, heads, seq, seq)
    scores = g.parameter("scores", shape)
    mask = g.parameter("mask", (batch, seq))
    scaled = g.multiply(scores, _scalar(g, 1.0 / math.sqrt(64.0), shape, "scale"), name="scaled")
    logits = g.add(scaled, g.broadcast(mask, shape, (0, 3), name="mask.bcast"), name="logits")
    _, _, e, sum_exp = _softmax_core(g, logits)
    probs = g.divide(e, _to_rows(g, sum_exp, logits, "sum_exp.bcast"), name="probs")
    g.set_outputs(probs)
    return g


@_register("log_softmax",
           doc="Log-softmax over the last dim: (x - max) - log(sum(exp(x - max))).",
           source="LLaMA-7B logits: 8192 tokens x vocabulary 32000.",
           rows=8192, cols=32000)
def log_softmax(rows, cols) -> Graph:
    """Like softmax, but the sum goes through an expensive log before its broadcast."""
    g = Graph("log_softmax")
    x = g.parameter("x", (rows, cols))
    _, shifted, _, sum_exp = _softmax_core(g, x)
    log_sum = g.log(sum_exp, name="log_sum_exp")
    out = g.subtract(shifted, _to_rows(g, log_sum, x, "log_sum_exp.bcast"), name="out")
    g.set_outputs(out)
    return g


def _one_hot_labels(d: dict) -> dict:
    """Turn the random ``onehot`` into real one-hot rows (a label per row derived from its random values)."""
    onehot = d["onehot"]
    rows, cols = onehot.shape
    step = max(1, (1 << 22) // max(cols, 1))          # a few MB of int64 at a time, not 2 GB at 8192x32000
    labels = np.concatenate([np.abs((onehot[a:a + step] * 1000).astype(np.int64).sum(axis=1)) % cols
                             for a in range(0, rows, step)]) if rows else np.zeros(0, np.int64)
    fixed = np.array(onehot, copy=True) if not onehot.flags.writeable else onehot   # freshly drawn: reuse it
    fixed[...] = 0
    fixed[np.arange(rows), labels] = 1.0
    d["onehot"] = fixed
    return d


@_register("cross_entropy",
           doc="Softmax cross-entropy with one-hot labels [rows, cols] (f32): loss = logsumexp(logits) "
               "- sum(onehot * logits) per row; outputs loss [rows] and its mean [].",
           source="LLaMA-7B LM head: 8192 tokens x vocabulary 32000.",
           prepare_inputs=_one_hot_labels,
           rows=8192, cols=32000)
def cross_entropy(rows, cols) -> Graph:
    """Three row reductions over the same rows (max, sum of exp, picked logit), then a reduce of
    the per-row loss to a scalar."""
    g = Graph("cross_entropy")
    logits = g.parameter("logits", (rows, cols))
    onehot = g.parameter("onehot", (rows, cols))
    row_max, _, _, sum_exp = _softmax_core(g, logits)
    lse = g.add(g.log(sum_exp, name="log_sum_exp"), row_max, name="logsumexp")
    picked = _row_sum(g, g.multiply(onehot, logits, name="onehot_logits"), "picked")
    loss = g.subtract(lse, picked, name="loss")
    total = g.reduce(loss, (0,), name="loss_sum")
    mean_loss = g.divide(total, g.constant(float(rows), "f32", name="n_rows"), name="mean_loss")
    g.set_outputs(loss, mean_loss)
    return g


# ---------------------------------------------------------------------------
# elementwise-only
# ---------------------------------------------------------------------------

@_register("bias_gelu",
           doc="Bias add then exact GELU: h = x + bias; 0.5 * h * (1 + erf(h / sqrt(2))), bias [cols].",
           source="BERT-base and GPT-2 small FFN (hidden 768): 16384 tokens x intermediate 3072.",
           rows=16384, cols=3072)
def bias_gelu(rows, cols) -> Graph:
    """Elementwise only (after the bias broadcast): XLA fuses it into one kernel already."""
    g = Graph("bias_gelu")
    x = g.parameter("x", (rows, cols))
    bias = g.parameter("bias", (cols,))
    h = g.add(x, _to_cols(g, bias, x, "bias.bcast"), name="h")
    shape = (rows, cols)
    z = g.multiply(h, _scalar(g, 1.0 / math.sqrt(2.0), shape, "inv_sqrt2"), name="h_over_sqrt2")
    one_plus = g.add(g.erf(z, name="erf"), _scalar(g, 1.0, shape, "one"), name="one_plus_erf")
    half_h = g.multiply(h, _scalar(g, 0.5, shape, "half"), name="half_h")
    out = g.multiply(half_h, one_plus, name="out")
    g.set_outputs(out)
    return g


@_register("swiglu",
           doc="SwiGLU gate: silu(a) * b with silu(a) = a * logistic(a); a, b [rows, cols].",
           source="LLaMA-7B FFN: 4096 tokens x intermediate 11008.",
           rows=4096, cols=11008)
def swiglu(rows, cols) -> Graph:
    """Elementwise only, two inputs: a baseline where every strategy should make one kernel."""
    g = Graph("swiglu")
    a = g.parameter("a", (rows, cols))
    b = g.parameter("b", (rows, cols))
    silu = g.multiply(a, g.logistic(a, name="sigmoid"), name="silu")
    out = g.multiply(silu, b, name="out")
    g.set_outputs(out)
    return g


ADAM = dict(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, step=1)


def _nonnegative_v(d: dict) -> dict:
    d["v"] = np.abs(d["v"])
    return d


@_register("adam_step",
           doc="One Adam update (lr 1e-3, b1 0.9, b2 0.999, eps 1e-8, step 1): outputs new_p, new_m, "
               "new_v; elementwise with sqrt/divide, several outputs. v must be >= 0.",
           source="a 1M-parameter slice (full BERT-base is 110M parameters, i.e. size=110000000).",
           prepare_inputs=_nonnegative_v,
           size=1048576)
def adam_step(size) -> Graph:
    """optax.adam's update with the bias corrections folded into constants (step 1)::

        m' = b1 m + (1 - b1) g        v' = b2 v + (1 - b2) g^2
        p' = p - lr * (m' / (1 - b1^t)) / (sqrt(v' / (1 - b2^t)) + eps)
    """
    g = Graph("adam_step")
    shape = (size,)
    p = g.parameter("p", shape)
    grad = g.parameter("g", shape)
    m = g.parameter("m", shape)
    v = g.parameter("v", shape)
    a = ADAM
    c = lambda value, name: _scalar(g, value, shape, name)  # noqa: E731
    new_m = g.add(g.multiply(m, c(a["b1"], "b1"), name="m_decay"),
                  g.multiply(grad, c(1 - a["b1"], "one_minus_b1"), name="g_scaled"), name="new_m")
    g_sq = g.multiply(grad, grad, name="g_sq")
    new_v = g.add(g.multiply(v, c(a["b2"], "b2"), name="v_decay"),
                  g.multiply(g_sq, c(1 - a["b2"], "one_minus_b2"), name="g_sq_scaled"), name="new_v")
    m_hat = g.divide(new_m, c(1 - a["b1"] ** a["step"], "bias_corr1"), name="m_hat")
    v_hat = g.divide(new_v, c(1 - a["b2"] ** a["step"], "bias_corr2"), name="v_hat")
    denom = g.add(g.sqrt(v_hat, name="sqrt_v_hat"), c(a["eps"], "eps"), name="denom")
    update = g.multiply(g.divide(m_hat, denom, name="ratio"), c(a["lr"], "lr"), name="update")
    new_p = g.subtract(p, update, name="new_p")
    g.set_outputs(new_p, new_m, new_v)
    return g


# ---------------------------------------------------------------------------
# the paper's own graphs and shapes
# ---------------------------------------------------------------------------

FIG7_EXPONENT = 2.0


def _positive_divisor(d: dict) -> dict:
    """param.2 divides: keep it in [0.5, ...) so the example's values stay moderate."""
    d["param.2"] = np.abs(d["param.2"]) + np.float32(0.5)
    return d


@_register("paper_fig7",
           doc="The AStitch paper's Figure 7 graph (13 nodes): a row reduce, an expensive power "
               "broadcast to two users, a column reduce; param.2 is a divisor (keep it away from 0).",
           source="illustrative sizes N=128, C=256 (the paper draws the structure, not a shape).",
           prepare_inputs=_positive_divisor,
           n=128, c=256)
def paper_fig7(n, c) -> Graph:
    """Figure 7, node for node, under the paper's names::

        broadcast.1 = broadcast(param.2) -> [N,C]   add.1 = param.1 + broadcast.1
        reduce.1 = row-sum(add.1) -> [N]            divide.1 = reduce.1 / param.2
        power.1 = power(divide.1, 2)                broadcast.2 = broadcast(power.1) -> [C,N]
        divide.2 = param.3 / broadcast.2            reduce.2 = column-sum(divide.2) -> [N]
        broadcast.3 = broadcast(reduce.2) -> [C,N]  multiply.1 = broadcast.3 * broadcast.2

    The exponent is a scalar constant (``k``, broadcast as ``k.bcast``) and each reduce has
    its init constant; the paper does not count those, so the 13 are the 3 parameters and
    the 10 ops above.  XLA makes 4 kernels of it, TVM 3, AStitch 1.
    """
    g = Graph("paper_fig7")
    pr1 = g.parameter("param.1", (n, c))
    pr2 = g.parameter("param.2", (n,))
    pr3 = g.parameter("param.3", (c, n))
    b1 = g.broadcast(pr2, (n, c), (0,), name="broadcast.1")
    a1 = g.add(pr1, b1, name="add.1")
    r1 = g.reduce(a1, (1,), "sum", name="reduce.1")
    d1 = g.divide(r1, pr2, name="divide.1")
    k = g.broadcast(g.constant(FIG7_EXPONENT, "f32", name="k"), (n,), (), name="k.bcast")
    pw1 = g.power(d1, k, name="power.1")
    b2 = g.broadcast(pw1, (c, n), (1,), name="broadcast.2")
    d2 = g.divide(pr3, b2, name="divide.2")
    r2 = g.reduce(d2, (0,), "sum", name="reduce.2")
    b3 = g.broadcast(r2, (c, n), (1,), name="broadcast.3")
    m1 = g.multiply(b3, b2, name="multiply.1")
    g.set_outputs(m1)
    return g


@_register("row_reduce",
           doc="Sum of squares along each row: reduce(x * x, dims=(1,)) -> [rows].",
           source="the paper's DIEN shape <750000,32>: very many short rows (XLA: 750000 blocks "
                  "of 32 threads).",
           rows=750000, cols=32)
def row_reduce(rows, cols) -> Graph:
    """The irregular row reduction that motivates horizontal packing."""
    g = Graph("row_reduce")
    x = g.parameter("x", (rows, cols))
    out = g.reduce(g.multiply(x, x, name="x_sq"), (1,), name="row_sum")
    g.set_outputs(out)
    return g


@_register("column_reduce",
           doc="Sum down each column: reduce(dy, dims=(0,)) -> [cols], a bias gradient.",
           source="BERT-base FFN bias gradient: 16384 tokens x 3072 columns.",
           rows=16384, cols=3072)
def column_reduce(rows, cols) -> Graph:
    """A column reduction on its own: consecutive threads read consecutive columns (coalesced)
    but each output needs every row."""
    g = Graph("column_reduce")
    dy = g.parameter("dy", (rows, cols))
    out = g.reduce(dy, (0,), name="col_sum")
    g.set_outputs(out)
    return g


__all__ = ["Workload", "WORKLOADS", "workload", "list_workloads", "workload_inputs", "check_shape"]
