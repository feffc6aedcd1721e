"""The suite's workloads written as plain array code, for the real baselines.

One function per catalog workload, written once against a tiny array namespace
``xp`` (:class:`NumpyOps`, :class:`JaxOps`, :class:`TorchOps`), so the very same
formula is what ``jax.jit`` compiles, what PyTorch runs eagerly and what
``torch.compile`` compiles.  Each takes the workload's inputs by parameter name
and returns its outputs in the graph's output order, in float32, computing the
same function as the catalog graph (``asim.reference`` is the judge: the test
suite checks every function here against it with the numpy namespace).

``TORCH_NATIVE`` holds, where PyTorch has one, the fused library op a PyTorch
user would call instead (``F.layer_norm``, ``torch.softmax``, ``F.gelu`` ...):
the eager baseline a practitioner would really get.
"""
from __future__ import annotations

import math

from astitch_sim.frontends.workloads import ADAM, BATCHNORM_EPS, FIG7_EXPONENT, LAYERNORM_EPS, RMSNORM_EPS


# ---------------------------------------------------------------------------
# the array namespaces (only what the workloads need)
# ---------------------------------------------------------------------------

class NumpyOps:
    """numpy (float32 throughout), for checking the formulas against the reference."""
    name = "numpy"

    def __init__(self):
        import numpy as np
        self.np = np

    def sum(self, x, axis=None, keepdims=False):
        return self.np.sum(x, axis=axis, keepdims=keepdims, dtype=self.np.float32)

    def max(self, x, axis=None, keepdims=False):
        return self.np.max(x, axis=axis, keepdims=keepdims)

    def exp(self, x): return self.np.exp(x)
    def log(self, x): return self.np.log(x)
    def sqrt(self, x): return self.np.sqrt(x)
    def rsqrt(self, x): return self.np.float32(1.0) / self.np.sqrt(x)
    def maximum(self, x, y): return self.np.maximum(x, y)
    def sigmoid(self, x): return self.np.float32(1.0) / (self.np.float32(1.0) + self.np.exp(-x))
    def power(self, x, k): return self.np.power(x, self.np.float32(k))
    def broadcast_to(self, x, shape): return self.np.broadcast_to(x, shape)

    def erf(self, x):
        from scipy.special import erf
        return erf(x).astype(self.np.float32)


class JaxOps:
    """jax.numpy; the functions are wrapped in ``jax.jit`` by the benchmark."""
    name = "jax"

    def __init__(self):
        import jax
        import jax.numpy as jnp
        self.jnp, self.jax = jnp, jax

    def sum(self, x, axis=None, keepdims=False): return self.jnp.sum(x, axis=axis, keepdims=keepdims)
    def max(self, x, axis=None, keepdims=False): return self.jnp.max(x, axis=axis, keepdims=keepdims)
    def exp(self, x): return self.jnp.exp(x)
    def log(self, x): return self.jnp.log(x)
    def sqrt(self, x): return self.jnp.sqrt(x)
    def rsqrt(self, x): return self.jax.lax.rsqrt(x)
    def maximum(self, x, y): return self.jnp.maximum(x, y)
    def sigmoid(self, x): return self.jax.nn.sigmoid(x)
    def power(self, x, k): return self.jnp.power(x, k)
    def broadcast_to(self, x, shape): return self.jnp.broadcast_to(x, shape)
    def erf(self, x): return self.jax.scipy.special.erf(x)


class TorchOps:
    """torch; used eagerly and under ``torch.compile``."""
    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch

    def sum(self, x, axis=None, keepdims=False):
        return x.sum() if axis is None else x.sum(dim=axis, keepdim=keepdims)

    def max(self, x, axis=None, keepdims=False):
        return x.max() if axis is None else x.amax(dim=axis, keepdim=keepdims)

    def exp(self, x): return self.torch.exp(x)
    def log(self, x): return self.torch.log(x)
    def sqrt(self, x): return self.torch.sqrt(x)
    def rsqrt(self, x): return self.torch.rsqrt(x)
    def maximum(self, x, y):
        # torch.maximum takes two tensors; a Python number (global_norm's 1.0) is a clamp
        return self.torch.maximum(x, y) if isinstance(y, self.torch.Tensor) else self.torch.clamp(x, min=y)

    def sigmoid(self, x): return self.torch.sigmoid(x)
    def power(self, x, k): return self.torch.pow(x, k)
    def broadcast_to(self, x, shape): return x.broadcast_to(shape)
    def erf(self, x): return self.torch.erf(x)


# ---------------------------------------------------------------------------
# the workloads (the same formulas as astitch_sim/frontends/workloads.py)
# ---------------------------------------------------------------------------

def layernorm(xp, x, gamma, beta):
    cols = x.shape[-1]
    mean = xp.sum(x, -1, True) / cols
    xc = x - mean
    var = xp.sum(xc * xc, -1, True) / cols
    return (xc * xp.rsqrt(var + LAYERNORM_EPS) * gamma + beta,)


def rmsnorm(xp, x, weight):
    ms = xp.sum(x * x, -1, True) / x.shape[-1]
    return (x * xp.rsqrt(ms + RMSNORM_EPS) * weight,)


def softmax(xp, x):
    e = xp.exp(x - xp.max(x, -1, True))
    return (e / xp.sum(e, -1, True),)


def attention_softmax(xp, scores, mask):
    logits = scores * (1.0 / math.sqrt(64.0)) + mask[:, None, None, :]
    return softmax(xp, logits)


def log_softmax(xp, x):
    shifted = x - xp.max(x, -1, True)
    return (shifted - xp.log(xp.sum(xp.exp(shifted), -1, True)),)


def cross_entropy(xp, logits, onehot):
    row_max = xp.max(logits, -1, True)
    lse = xp.log(xp.sum(xp.exp(logits - row_max), -1)) + row_max[..., 0]
    loss = lse - xp.sum(onehot * logits, -1)
    return loss, xp.sum(loss) / logits.shape[0]


def bias_gelu(xp, x, bias):
    h = x + bias
    return ((h * 0.5) * (xp.erf(h * (1.0 / math.sqrt(2.0))) + 1.0),)


def swiglu(xp, a, b):
    return (a * xp.sigmoid(a) * b,)


def layernorm_backward(xp, x, dy, gamma, mean, rstd):
    cols = x.shape[-1]
    rstd_b = rstd[:, None]
    xhat = (x - mean[:, None]) * rstd_b
    dxhat = dy * gamma
    mean_dxhat = xp.sum(dxhat, -1, True) / cols
    mean_prod = xp.sum(dxhat * xhat, -1, True) / cols
    dx = rstd_b * ((dxhat - mean_dxhat) - xhat * mean_prod)
    return dx, xp.sum(dy * xhat, 0), xp.sum(dy, 0)


def batchnorm_train(xp, x, scale, offset):
    rows = x.shape[0]
    mean = xp.sum(x, 0) / rows
    xc = x - mean
    var = xp.sum(xc * xc, 0) / rows
    inv = xp.rsqrt(var + BATCHNORM_EPS) * scale
    return xc * inv + offset, mean, var


def global_norm(xp, x):
    norm = xp.sqrt(xp.sum(x * x))
    return (x * (1.0 / xp.maximum(norm, 1.0)),)


def adam_step(xp, p, g, m, v):
    a = ADAM
    new_m = m * a["b1"] + g * (1 - a["b1"])
    new_v = v * a["b2"] + (g * g) * (1 - a["b2"])
    m_hat = new_m / (1 - a["b1"] ** a["step"])
    v_hat = new_v / (1 - a["b2"] ** a["step"])
    new_p = p - (m_hat / (xp.sqrt(v_hat) + a["eps"])) * a["lr"]
    return new_p, new_m, new_v


def paper_fig7(xp, p1, p2, p3):
    r1 = xp.sum(p1 + p2[:, None], 1)
    pw1 = xp.power(r1 / p2, FIG7_EXPONENT)
    b2 = pw1[None, :]
    r2 = xp.sum(p3 / b2, 0)
    return (xp.broadcast_to(r2[None, :] * b2, p3.shape),)


def row_reduce(xp, x):
    return (xp.sum(x * x, 1),)


def column_reduce(xp, dy):
    return (xp.sum(dy, 0),)


#: catalog workload name -> f(xp, *inputs in parameter order) -> tuple of outputs in output order
FUNCTIONS = {f.__name__: f for f in (layernorm, rmsnorm, softmax, attention_softmax, log_softmax, cross_entropy,
                                     bias_gelu, swiglu, layernorm_backward, batchnorm_train, global_norm,
                                     adam_step, paper_fig7, row_reduce, column_reduce)}


# ---------------------------------------------------------------------------
# PyTorch's own fused ops, where one exists
# ---------------------------------------------------------------------------

def _torch_native():
    import torch
    import torch.nn.functional as F

    def ln(x, gamma, beta):
        return (F.layer_norm(x, (x.shape[-1],), gamma, beta, LAYERNORM_EPS),)

    def rms(x, weight):
        return (F.rms_norm(x, (x.shape[-1],), weight, RMSNORM_EPS),)

    def sm(x):
        return (torch.softmax(x, -1),)

    def lsm(x):
        return (torch.log_softmax(x, -1),)

    def gelu(x, bias):
        return (F.gelu(x + bias),)

    def xent(logits, onehot):
        loss = F.cross_entropy(logits, onehot, reduction="none")
        return loss, loss.mean()

    table = {"layernorm": ln, "softmax": sm, "log_softmax": lsm, "bias_gelu": gelu, "cross_entropy": xent}
    if hasattr(F, "rms_norm"):
        table["rmsnorm"] = rms
    return table


def torch_native(workload: str):
    """PyTorch's fused op for ``workload`` (a function of the inputs), or None."""
    return _torch_native().get(workload)


def bind(workload: str, ops):
    """``f(*inputs)`` for ``workload`` with the namespace ``ops`` bound (what jax.jit / torch.compile wrap)."""
    f = FUNCTIONS[workload]

    def run(*inputs):
        return f(ops, *inputs)
    run.__name__ = f"{workload}_{ops.name}"
    return run


def torch_compiled(fn, **options):
    """``torch.compile(fn)`` with dynamo's caches emptied first.

    Every workload's function is :func:`bind`'s ``run`` closure: one code object.  Dynamo keeps one
    cache per code object and recompiles it for each new closure, up to its recompile limit (8);
    past that it silently runs the function *eagerly*, so a suite's later cases would be labelled
    torch.compile but measure eager PyTorch.  Emptying the caches before each case gives every case
    its own compilation.  ``options`` go to ``torch.compile`` (``backend=...``)."""
    import torch
    torch._dynamo.reset()
    return torch.compile(fn, **options)


__all__ = ["FUNCTIONS", "NumpyOps", "JaxOps", "TorchOps", "torch_native", "bind", "torch_compiled"]
