"""asim.from_torch op by op: each ATen op family the importer converts, against PyTorch's eager result.

tests/frontends/test_torch_import.py checks real module code; this file covers the rows of the op table those modules
do not reach (sort and top-k along any dim, splits, padding with a crop, index_put, scatter and
scatter_reduce, division rounding modes and Python's ``%`` on ints, clamps, variance, argmax/max.dim,
any/all, cumsum, baddbmm, advanced indexing with several index tensors, bitwise ops, int8/uint8, norms,
activations that stay whole in core ATen (leaky_relu, elu)...).  Each function is imported, run through the
numpy reference and the astitch plan on the SIMT model, and compared with PyTorch: floats within rtol/atol
1e-5 (2e-2 for the f16/bf16 cases), integers and bools exactly and with PyTorch's dtype.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import astitch_sim as asim  # noqa: E402 (after importorskip)

g0 = torch.Generator().manual_seed(0)
x = torch.randn(3, 4, generator=g0)
y = torch.randn(3, 4, generator=g0)
i = torch.randint(-5, 6, (3, 4), generator=g0)
idx = torch.tensor([2, 0, 1])
b3 = torch.randn(2, 3, 4, generator=g0)
c3 = torch.randn(2, 4, 5, generator=g0)
F = torch.nn.functional

OPS = {
 "acts2": (lambda t: (F.elu(t), F.softplus(t), F.mish(t), F.hardswish(t), F.hardsigmoid(t), F.relu6(t), F.selu(t)), (x,)),
 "norms": (lambda t: (torch.linalg.vector_norm(t, 1, dim=1), torch.linalg.vector_norm(t, float("inf")), torch.linalg.vector_norm(t, 3, dim=0, keepdim=True), t.norm(dim=-1)), (x,)),

 "arange_f": (lambda t: t + torch.arange(4, dtype=torch.float32) * 0.5, (x,)),
 "arange_step": (lambda t: t + torch.arange(1, 9, 2), (x,)),
 "sort": (lambda t: torch.sort(t, dim=-1, descending=True), (x,)),
 "sort_dim0": (lambda t: torch.sort(t, dim=0), (x,)),
 "topk_dim0": (lambda t: torch.topk(t, 2, dim=0), (x,)),
 "split_unbind": (lambda t: (*t.split(3, dim=1), *t.unbind(0)), (x,)),
 "chunk": (lambda t: t.chunk(2, dim=1), (x,)),
 "flip": (lambda t: t.flip(0, 1), (x,)),
 "pad": (lambda t: F.pad(t, (1, 2, -1, 0), value=3.0), (x,)),
 "index_put": (lambda t, j: t.index_put((j,), torch.ones(3, 4), accumulate=True), (x, idx)),
 "index_put_set": (lambda t: torch.zeros(5, 4).index_put((torch.tensor([4, 0]),), t[:2]), (x,)),
 "scatter": (lambda t, j: torch.zeros(3, 5).scatter(1, j, t), (x, torch.tensor([[0, 1, 2, 3], [4, 3, 2, 1], [1, 1, 1, 1]]))),
 "scatter_value": (lambda t, j: t.scatter(1, j, 7.0), (x, torch.tensor([[0], [3], [1]]))),
 "scatter_reduce": (lambda t, j: torch.ones(3, 5).scatter_reduce(1, j, t, "amax"), (x, torch.tensor([[0, 1, 2, 3], [4, 3, 2, 1], [1, 1, 1, 1]]))),
 "gather_small": (lambda t, j: t.gather(1, j), (x, torch.tensor([[0, 3], [1, 1]]))),
 "div_modes": (lambda a, b: (a.div(b, rounding_mode="floor"), a.div(b, rounding_mode="trunc")), (x * 5, y)),
 "int_div_modes": (lambda a: (a.div(3, rounding_mode="floor"), a.div(3, rounding_mode="trunc"), a // -2, a / 2), (i,)),
 "remainder": (lambda a, b: (a % b, torch.remainder(a, -3), torch.fmod(a, 3)), (i, torch.tensor([3, -2, 5, 7]))),
 "float_remainder": (lambda a, b: a % b, (x * 5, y)),
 "clamp": (lambda t: (t.clamp(-0.5, 0.5), t.clamp(min=0), F.hardtanh(t), F.relu6(t)), (x,)),
 "var_std": (lambda t: (t.var(1), t.var(0, unbiased=False), t.std(-1, keepdim=True)), (x,)),
 "arg": (lambda t: (t.argmax(), t.argmax(1), t.argmin(0, keepdim=True), t.max(1), t.min(0, keepdim=True)), (x,)),
 "any_all": (lambda t: ((t > 0).any(1), (t > -2).all(), (t > 0).any()), (x,)),
 "cumsum": (lambda t, j: (t.cumsum(1), j.cumsum(0)), (x, i)),
 "baddbmm": (lambda a, b, c: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0), (b3, c3, torch.randn(2, 3, 5, generator=g0))),
 "matmul_bcast": (lambda a, b: a @ b, (b3, torch.randn(4, 6, generator=g0))),
 "einsum": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), (b3, c3)),
 "select": (lambda t: (t[1], t[:, -1], t[-1, 2]), (x,)),
 "index_multi": (lambda t, a, b: (t[a, b], t[:, a[:2]], t[a]), (torch.randn(4, 5, 6, generator=g0), torch.tensor([0, -1, 2]), torch.tensor([1, 4, 0]))),
 "index_select_embedding": (lambda t, j: (t.index_select(0, j), F.embedding(j, t)), (x, idx)),
 "logical": (lambda a, b: (a.logical_and(b), a.logical_or(b), a.logical_xor(b), ~a, a & b, a | b, a ^ b), (x > 0, y > 0)),
 "bitwise_int": (lambda a: (a & 3, a | 8, a ^ 5, ~a), (i,)),
 "unary": (lambda t: (t.abs(), t.sign(), t.exp(), t.expm1(), t.abs().log(), t.abs().log1p(), t.abs().sqrt(), t.tanh(), t.sigmoid(), t.erf(), t.sin(), t.cos(), t.floor(), t.ceil(), (t * 3).round(), t.reciprocal(), t.isnan(), -t), (x,)),
 "int_to_float": (lambda j: (j.exp(), j.sqrt(), j / 2, j.sigmoid(), j.float().mean()), (i.abs(),)),
 "pow": (lambda t, j: (t ** 3, t.abs() ** 0.5, 2 ** t, t.abs() ** y, j ** 2), (x, i)),
 "where_scalar": (lambda t: torch.where(t > 0, t, 0.0), (x,)),
 "full_likes": (lambda t: (torch.zeros_like(t) + 1, torch.ones_like(t) * t, torch.full_like(t, 2.5) - t, t.new_zeros(2) + 1), (x,)),
 "sum_dtype": (lambda j, m: (j.sum(), m.sum(1), j.sum(0, dtype=torch.float32), j.prod(1), (m > 0).sum()), (i, x > 0)),
 "mean_all": (lambda t: (t.mean(), t.sum(), t.amax(), t.amin(dim=(0, 1))), (x,)),
 "expand_repeat": (lambda t: (t[:, None].expand(3, 2, 4), t.repeat(2, 1)), (x,)),
 "stack": (lambda a, b: torch.stack([a, b], dim=1), (x, y)),
 "transpose_t": (lambda t: (t.t(), t.transpose(0, 1) + 1), (x,)),
 "softmax_f16": (lambda t: torch.softmax(t, -1), (x.half(),)),
 "layernorm_bf16": (lambda t: F.layer_norm(t, (4,)), (x.bfloat16(),)),
 "log_softmax_dim0": (lambda t: torch.log_softmax(t, 0), (x,)),
 "cross_entropy_probs": (lambda t, p: F.cross_entropy(t, p.softmax(-1)), (x, y)),
 "mse_l1": (lambda a, b: (F.mse_loss(a, b), F.l1_loss(a, b), F.smooth_l1_loss(a, b)), (x, y)),
 "activations": (lambda t: (F.leaky_relu(t, 0.1), F.elu(t), F.softplus(t), F.mish(t), F.hardswish(t), F.gelu(t)), (x,)),
 "normalize": (lambda t: F.normalize(t, dim=-1), (x,)),
 "cosine": (lambda a, b: F.cosine_similarity(a, b), (x, y)),
 "masked_fill_tensor": (lambda t, m: t.masked_fill(m, torch.tensor(-1.0)), (x, y > 0)),
 "tril_triu": (lambda t: (t.tril(), t.triu(1)), (x,)),
 "int8_u8": (lambda a, b: (a + b, a * 2, b - 1), (i.to(torch.int8), i.abs().to(torch.uint8))),
}


def _numpy(t):
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_pytorch(name):
    f, args = OPS[name]
    g = asim.from_torch(f, *args)
    inputs = asim.torch_inputs(f, *args)
    with torch.no_grad():
        want = [_numpy(t) for t in torch.utils._pytree.tree_leaves(f(*args))]
    tol = 2e-2 if name.endswith(("f16", "bf16")) else 1e-5
    got = {"reference": asim.reference(g, inputs),
           "astitch": asim.simulate(asim.compile(g, "astitch", "H100"), inputs).outputs}
    for how, outs in got.items():
        assert len(outs) == len(want), how
        for k, (v, w) in enumerate(zip(outs, want, strict=True)):
            where = f"{name} {how} output {k}"
            assert v.shape == w.shape, where
            if w.dtype.kind == "f":
                np.testing.assert_allclose(v.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol,
                                           equal_nan=True, err_msg=where)
            else:
                assert v.dtype == w.dtype, where
                np.testing.assert_array_equal(v, w, err_msg=where)
