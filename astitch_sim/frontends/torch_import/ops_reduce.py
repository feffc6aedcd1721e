"""ATen reductions -> Graph ``reduce`` (and argmax/argmin's two-value reduce).

PyTorch's reductions take ``dim`` (an int, a list, or None/[] for all dims) and ``keepdim``; a reduce here
drops its dims, so ``keepdim`` is a reshape after.  Accumulation types follow PyTorch: an integer or bool
``sum`` is int64, ``mean`` needs a float; f16/bf16 sums and means accumulate in float32 and round once
(PyTorch's CPU and CUDA kernels do; a bf16 running sum would lose the small terms).
"""
from __future__ import annotations

_LOW = ("f16", "bf16")


def _dims(b, x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(x.rank))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return tuple(sorted({b.dim(d, x.rank) for d in dims}))


def _finish(b, r, keepdim):
    """Put the kept size-1 dims back (``keepdim=True``) -- the recorded shape says where."""
    return b.reshape(r, b.out_shape) if keepdim or r.shape != b.out_shape else r


def _sum(b, x, dim=None, keepdim=False, dtype=None):
    out = b.out_dtype
    acc = "f32" if out in _LOW else out
    r = b.reduce(b.cast(x, acc), _dims(b, x, dim), "sum")
    return _finish(b, b.cast(r, out), keepdim)


def _mean(b, x, dim=None, keepdim=False, dtype=None):
    out = b.out_dtype
    acc = "f32" if out in _LOW else out
    dims = _dims(b, x, dim)
    count = 1
    for d in dims:
        count *= x.shape[d]
    s = b.reduce(b.cast(x, acc), dims, "sum")
    m = b.elementwise("divide", s, float(count), dtype=acc)
    return _finish(b, b.cast(m, out), keepdim)


def _var(b, x, dim=None, correction=None, keepdim=False, unbiased=None):
    """``var.correction``: the mean of squared deviations, divided by ``N - correction`` (default 1)."""
    correction = 1 if correction is None and unbiased in (None, True) else (correction or 0)
    acc = "f32" if x.dtype in _LOW else x.dtype
    dims = _dims(b, x, dim)
    count = 1
    for d in dims:
        count *= x.shape[d]
    xf = b.cast(x, acc)
    mean = b.elementwise("divide", b.reduce(xf, dims, "sum"), float(count), dtype=acc)
    kept = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    centred = b.elementwise("subtract", xf, b.reshape(mean, kept), dtype=acc)
    sq = b.reduce(b.elementwise("multiply", centred, centred), dims, "sum")
    v = b.elementwise("divide", sq, float(max(count - correction, 0)), dtype=acc)
    return _finish(b, b.cast(v, b.out_dtype), keepdim)


def _extreme(reducer):
    def build(b, x, dim=None, keepdim=False):
        return _finish(b, b.reduce(x, _dims(b, x, dim), reducer), keepdim)
    return build


def _logical(reducer):
    def build(b, x, dim=None, keepdim=False):
        return _finish(b, b.reduce(b.cast(x, "pred"), _dims(b, x, dim), reducer), keepdim)
    return build


def _prod(b, x, dim=None, keepdim=False, dtype=None):
    out = b.out_dtype
    return _finish(b, b.reduce(b.cast(x, out), _dims(b, x, dim), "prod"), keepdim)


def _arg(which):
    """``argmax``/``argmin`` (``dim=None`` flattens first): the first extreme, NaN counted largest."""
    def build(b, x, dim=None, keepdim=False):
        if dim is None:
            x, dim = b.reshape(x, (x.size,)), 0
        dim = b.dim(dim, x.rank)
        r = getattr(b.g, which)(x, dim, "s64", name=b.fresh(which))
        return _finish(b, r, keepdim)
    return build


def _value_and_index(reducer, which):
    """``max.dim``/``min.dim``: (values, indices) along one dim."""
    def build(b, x, dim, keepdim=False):
        dim = b.dim(dim, x.rank)
        kept = tuple(n for d, n in enumerate(x.shape) if d != dim) if not keepdim else \
            tuple(1 if d == dim else n for d, n in enumerate(x.shape))
        values = b.reshape(b.reduce(x, (dim,), reducer), kept)
        index = b.reshape(getattr(b.g, which)(x, dim, "s64", name=b.fresh(which)), kept)
        return values, index
    return build


def _vector_norm(b, x, ord=2, dim=None, keepdim=False, dtype=None):
    """``linalg.vector_norm`` (``F.normalize``, ``cosine_similarity``): the p-norm over ``dim``."""
    acc = "f32" if b.out_dtype in _LOW else b.out_dtype
    dims = _dims(b, x, dim)
    a = b.elementwise("abs", b.cast(x, acc), dtype=acc)
    if ord in (float("inf"), float("-inf")):
        r = b.reduce(a, dims, "max" if ord > 0 else "min")
    elif ord == 0:
        r = b.reduce(b.cast(b.compare(a, 0, "NE"), acc), dims, "sum")
    elif ord == 1:
        r = b.reduce(a, dims, "sum")
    elif ord == 2:
        r = b.elementwise("sqrt", b.reduce(b.elementwise("multiply", a, a), dims, "sum"))
    else:
        r = b.elementwise("power", b.reduce(b.elementwise("power", a, float(ord), dtype=acc), dims, "sum"),
                          1.0 / ord, dtype=acc)
    return _finish(b, b.cast(r, b.out_dtype), keepdim)


ROWS = {
    "sum.dim_IntList": _sum, "sum.default": lambda b, x, dtype=None: _sum(b, x),
    "mean.dim": _mean, "mean.default": lambda b, x, dtype=None: _mean(b, x),
    "var.correction": _var, "var.dim": lambda b, x, dim=None, unbiased=True, keepdim=False:
        _var(b, x, dim, None if unbiased else 0, keepdim),
    "amax.default": _extreme("max"), "amin.default": _extreme("min"),
    "max.default": lambda b, x: _extreme("max")(b, x), "min.default": lambda b, x: _extreme("min")(b, x),
    "any.dim": _logical("or"), "any.dims": _logical("or"), "any.default": lambda b, x: _logical("or")(b, x),
    "all.dim": _logical("and"), "all.dims": _logical("and"), "all.default": lambda b, x: _logical("and")(b, x),
    "prod.dim_int": _prod, "prod.default": lambda b, x, dtype=None: _prod(b, x),
    "argmax.default": _arg("argmax"), "argmin.default": _arg("argmin"),
    "linalg_vector_norm.default": _vector_norm,
    "max.dim": _value_and_index("max", "argmax"), "min.dim": _value_and_index("min", "argmin"),
}
