"""The project's decomposition table: torch.export's defaults plus the normalisations, written out.

``torch.export.default_decompositions()`` lowers a graph to *core ATen*, which still keeps a few
composite ops whole: ``_softmax``, ``_log_softmax``, ``native_layer_norm``, ``native_group_norm``,
``_native_batch_norm_legit_no_training`` and ``gelu``.  Each of them is exactly the kind of
memory-intensive chain AStitch stitches (a reduce, a broadcast back, elementwise math), so the importer
decomposes them further, into the elementwise, broadcast and reduce ops the planner sees.  The functions
below say how, in plain torch; torch.export traces them into the graph in place of the op.

Low-precision inputs (f16, bf16) are computed in float32 and the result cast back, as PyTorch's own
kernels do (their "opmath" type), so the numbers agree with eager PyTorch.

Only public torch APIs are used: ``torch.export.default_decompositions()`` is a ``CustomDecompTable``
to which entries are added, keyed by ATen overloads (``torch.ops.aten._softmax.default``).
"""
from __future__ import annotations

import math


def _opmath(torch, x):
    """The type PyTorch computes a low-precision op in: float32 for f16/bf16, else the input's own."""
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _dims(dim, rank):
    return [d % rank for d in (dim if isinstance(dim, (list, tuple)) else [dim])]


def decomposition_table():
    """torch.export's default table plus ours (one entry per op below)."""
    import torch
    aten = torch.ops.aten

    def softmax(x, dim, half_to_float):
        xf = x.to(_opmath(torch, x))
        e = torch.exp(xf - torch.amax(xf, dim, keepdim=True))
        out = e / torch.sum(e, dim, keepdim=True)
        return out if half_to_float else out.to(x.dtype)

    def log_softmax(x, dim, half_to_float):
        xf = x.to(_opmath(torch, x))
        shifted = xf - torch.amax(xf, dim, keepdim=True)
        out = shifted - torch.log(torch.sum(torch.exp(shifted), dim, keepdim=True))
        return out if half_to_float else out.to(x.dtype)

    def moments(xf, dims, eps):
        """Mean and 1/sqrt(variance + eps) over ``dims`` (two passes: the variance of x - mean)."""
        mean = torch.mean(xf, dims, keepdim=True)
        centred = xf - mean
        rstd = torch.rsqrt(torch.mean(centred * centred, dims, keepdim=True) + eps)
        return mean, centred, rstd

    def layer_norm(x, normalized_shape, weight, bias, eps):
        xf = x.to(_opmath(torch, x))
        dims = list(range(x.dim() - len(normalized_shape), x.dim()))
        mean, centred, rstd = moments(xf, dims, eps)
        out = centred * rstd
        if weight is not None:
            out = out * weight
        if bias is not None:
            out = out + bias
        return out.to(x.dtype), mean, rstd

    def group_norm(x, weight, bias, n, c, hxw, group, eps):
        xf = x.to(_opmath(torch, x))
        grouped = xf.reshape(n, group, -1)
        mean, centred, rstd = moments(grouped, [2], eps)
        out = (centred * rstd).reshape(x.shape)
        per_channel = [1, c] + [1] * (x.dim() - 2)
        if weight is not None:
            out = out * weight.reshape(per_channel)
        if bias is not None:
            out = out + bias.reshape(per_channel)
        return out.to(x.dtype), mean.reshape(n, group), rstd.reshape(n, group)

    def batch_norm_eval(x, weight, bias, running_mean, running_var, momentum, eps):
        per_channel = [1, x.shape[1]] + [1] * (x.dim() - 2)
        scale = torch.rsqrt(running_var + eps)
        if weight is not None:
            scale = scale * weight
        out = (x - running_mean.reshape(per_channel)) * scale.reshape(per_channel)
        if bias is not None:
            out = out + bias.reshape(per_channel)
        empty = x.new_zeros((0,))
        return out.to(x.dtype), empty, empty

    def gelu(x, approximate="none"):
        xf = x.to(_opmath(torch, x))
        if approximate == "tanh":
            inner = math.sqrt(2 / math.pi) * (xf + 0.044715 * xf * xf * xf)
            out = 0.5 * xf * (1 + torch.tanh(inner))
        else:
            out = 0.5 * xf * (1 + torch.erf(xf * (1 / math.sqrt(2))))
        return out.to(x.dtype)

    table = torch.export.default_decompositions()
    for op, fn in ((aten._softmax.default, softmax), (aten._log_softmax.default, log_softmax),
                   (aten.native_layer_norm.default, layer_norm), (aten.native_group_norm.default, group_norm),
                   (aten._native_batch_norm_legit_no_training.default, batch_norm_eval),
                   (aten.gelu.default, gelu)):
        table[op] = fn
    return table
