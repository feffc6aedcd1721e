"""ATen matrix products, sorts and scans -> the Graph's library ops (each its own kernel, as XLA plans them).

``mm``, ``bmm``, ``addmm``, ``baddbmm`` and ``linear`` are ``dot`` (dot_general) with the batch and
contracting dimensions PyTorch's shapes imply; the bias of ``addmm``/``linear`` is an elementwise add after
the product, which the planner may stitch into the next kernel (cuBLAS's epilogue does the same on a GPU).
f16/bf16 products accumulate in float32 and round once, as the numpy reference of ``dot`` does.
``sort`` and ``topk`` return int64 indices, ``cumsum`` is a reduce-window over the axis (JAX's lowering).
"""
from __future__ import annotations


def _untransposed(x, contracting: int):
    """``(operand, contracting dim)`` with a transpose of the last two dims folded into the dot's dimension
    numbers: ``nn.Linear`` exports as ``addmm(bias, x, permute(weight))``, and XLA (and cuBLAS) read the
    weight as it is stored, contracting its dim 1, rather than writing a transposed copy first."""
    r = x.rank
    if x.op == "transpose" and tuple(x.attrs["permutation"]) == tuple(range(r - 2)) + (r - 1, r - 2):
        return x.operands[0], (r - 1 if contracting == r - 2 else r - 2)
    return x, contracting


def _dot(b, x, y, batch):
    x, y = b.cast(x, b.out_dtype), b.cast(y, b.out_dtype)
    x, lc = _untransposed(x, x.rank - 1)
    y, rc = _untransposed(y, y.rank - 2)
    dims = tuple(range(batch))
    return b.g.dot(x, y, (lc,), (rc,), dims, dims, name=b.fresh("dot"))


def _mm(b, x, y):
    return _dot(b, x, y, 0)


def _bmm(b, x, y):
    return _dot(b, x, y, 1)


def _scaled_sum(b, product, bias, beta, alpha):
    if alpha != 1:
        product = b.elementwise("multiply", product, alpha, dtype=product.dtype)
    if bias is None or beta == 0:
        return product
    if beta != 1:
        bias = b.elementwise("multiply", bias, beta, dtype=bias.dtype)
    return b.elementwise("add", product, bias, dtype=b.out_dtype)


def _addmm(b, bias, x, y, beta=1, alpha=1):
    return _scaled_sum(b, _mm(b, x, y), bias, beta, alpha)


def _baddbmm(b, bias, x, y, beta=1, alpha=1):
    return _scaled_sum(b, _bmm(b, x, y), bias, beta, alpha)


def _linear(b, x, weight, bias=None):
    product = b.g.dot(x, weight, (x.rank - 1,), (1,), name=b.fresh("dot"))
    return _scaled_sum(b, product, bias, 1, 1)


def _sort(b, x, *args, dim=-1, descending=False, stable=None):
    """``sort(x, dim, descending)`` and ``sort.stable(x, stable=, dim=, descending=)``: values, int64 indices."""
    ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
    bools = [a for a in args if isinstance(a, bool)]
    dim = ints[0] if ints else dim
    descending = bools[-1] if bools else descending
    dim = b.dim(dim, x.rank)
    iota = b.g.iota(x.shape, dim, "s64", name=b.fresh("iota"))
    values, index = b.g.sort([x, iota], dim, descending, 1, name=b.fresh("sort"))
    return values, index


def _topk(b, x, k, dim=-1, largest=True, sorted=True):
    dim = b.dim(dim, x.rank)
    last = x.rank - 1
    perm = list(range(x.rank))
    perm[dim], perm[last] = perm[last], perm[dim]
    xt = x if dim == last else b.g.transpose(x, perm, name=b.fresh("transpose"))
    values, index = b.g.top_k(xt, k, largest, name=b.fresh("topk"))
    index = b.cast(index, "s64")
    if dim != last:
        values = b.g.transpose(values, perm, name=b.fresh("transpose"))
        index = b.g.transpose(index, perm, name=b.fresh("transpose"))
    return values, index


def _cumsum(b, x, dim, dtype=None):
    return b.g.cumsum(b.cast(x, b.out_dtype), b.dim(dim, x.rank), name=b.fresh("cumsum"))


ROWS = {
    "mm.default": _mm, "bmm.default": _bmm, "addmm.default": _addmm, "baddbmm.default": _baddbmm,
    "linear.default": _linear, "sort.default": _sort, "sort.stable": _sort, "topk.default": _topk,
    "cumsum.default": _cumsum,
}
