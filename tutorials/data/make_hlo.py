"""Regenerates the HLO modules of notebook 7 (tutorials/data/hlo/) with JAX.

JAX is not a dependency of astitch-sim: the notebook loads the committed files,
so it runs without JAX. To regenerate them (CPU is enough):

    pip install jax jaxlib            # in any venv that also has astitch-sim installed
    python tutorials/data/make_hlo.py

For each model function ``<name>`` it writes
    hlo/<name>.hlo   jax.jit(fn).lower(*args).as_text(dialect="hlo")
    hlo/<name>.npz   out0, out1, ...: JAX's outputs (ROOT-tuple order) for the inputs
                     astitch_sim.random_inputs(graph, seed=0) gives the imported graph,
                     so the notebook can compare the simulator with JAX itself.
The functions are the ones notebook 7 shows; keep the two in step.
"""
from __future__ import annotations

import os

import numpy as np
import jax
import jax.numpy as jnp

import astitch_sim as asim

jax.config.update("jax_platforms", "cpu")
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hlo")
TOKENS, HIDDEN, FFN, LLAMA_FFN = 128, 256, 1024, 688


def layernorm(x, gamma, beta, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta


def ffn_block(x, gamma, beta, w1, b1, w2, b2):
    """A BERT-style FFN sublayer: layernorm, dense + GELU, dense, residual."""
    h = layernorm(x, gamma, beta)
    h = jax.nn.gelu(h @ w1 + b1, approximate=True)
    return x + h @ w2 + b2


def attention(q, k, v, mask):
    """Scaled dot-product attention over [batch, heads, seq, dim] with an additive mask [batch, 1, 1, seq]."""
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(q.shape[-1])) + mask
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def llama_mlp(x, weight, w_gate, w_up, w_down):
    """A LLaMA-style MLP sublayer: RMSNorm, SwiGLU, down projection, residual."""
    h = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + 1e-6) * weight
    return x + (jax.nn.silu(h @ w_gate) * (h @ w_up)) @ w_down


def xent_grad(logits, labels):
    """Softmax cross-entropy (mean over the batch) and its gradient with respect to the logits."""
    def loss(lg):
        return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(lg, axis=-1), axis=-1))
    return jax.value_and_grad(loss)(logits)


def f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


MODULES = {
    "ffn_block": (ffn_block, [f32(TOKENS, HIDDEN), f32(HIDDEN), f32(HIDDEN), f32(HIDDEN, FFN), f32(FFN),
                              f32(FFN, HIDDEN), f32(HIDDEN)]),
    "attention": (attention, [f32(2, 4, 64, 64), f32(2, 4, 64, 64), f32(2, 4, 64, 64), f32(2, 1, 1, 64)]),
    "llama_mlp": (llama_mlp, [f32(TOKENS, HIDDEN), f32(HIDDEN), f32(HIDDEN, LLAMA_FFN), f32(HIDDEN, LLAMA_FFN),
                              f32(LLAMA_FFN, HIDDEN)]),
    "xent_grad": (xent_grad, [f32(64, 1000), f32(64, 1000)]),
}


def main():
    os.makedirs(HERE, exist_ok=True)
    for name, (fn, specs) in MODULES.items():
        text = jax.jit(fn).lower(*specs).as_text(dialect="hlo")
        with open(os.path.join(HERE, f"{name}.hlo"), "w") as f:
            f.write(text)
        graph = asim.from_hlo(text)
        inputs = asim.random_inputs(graph, seed=0)
        outs = jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))
        np.savez_compressed(os.path.join(HERE, f"{name}.npz"), **{f"out{i}": np.asarray(o) for i, o in enumerate(outs)})
        print(f"{name}: {len(graph)} nodes, {len(graph.inputs)} inputs, {len(outs)} output(s)")
    print(f"jax {jax.__version__}, written to {HERE}")


if __name__ == "__main__":
    main()
