"""ATen elementwise ops -> Graph elementwise ops (one row each; PyTorch's promotion kinds as arguments).

PyTorch's type promotion kinds (``ELEMENTWISE_TYPE_PROMOTION_KIND``): DEFAULT computes in the promoted type
of the operands (``add``, ``mul``, ``maximum``); INT_TO_FLOAT lifts integers to float32 (``div``, ``exp``,
``sqrt``, ``sigmoid``); ALWAYS_BOOL gives pred (comparisons, ``logical_*``, ``isnan``).
"""
from __future__ import annotations

from ...errors import AStitchError
from ...ir.graph import Node
from .promotion import to_float


def _unary(op, int_to_float=False):
    def build(b, x):
        dtype = to_float(x.dtype) if int_to_float else x.dtype
        return b.elementwise(op, x, dtype=dtype)
    return build


def _binary(op, int_to_float=False, swap=False):
    def build(b, x, y):
        x, y = (y, x) if swap else (x, y)
        dtype = b.promoted(x, y)
        return b.elementwise(op, x, y, dtype=to_float(dtype) if int_to_float else dtype)
    return build


def _add(op):
    def build(b, x, y, alpha=1):
        if alpha != 1:
            y = _scaled(b, y, alpha, b.promoted(x, y))
        return b.elementwise(op, x, y)
    return build


def _scaled(b, y, alpha, dtype):
    if not isinstance(y, Node):
        return y * alpha
    return b.add("multiply", [b.cast(y, dtype), b.operand(alpha, dtype, y.shape)])


def _compare(direction):
    def build(b, x, y):
        return b.compare(x, y, direction)
    return build


def _div_mode(b, x, y, rounding_mode=None):
    """``div.Tensor_mode``: true division, or rounded toward zero (``trunc``) or down (``floor``)."""
    dtype = b.promoted(x, y)
    if rounding_mode is None:
        return b.elementwise("divide", x, y, dtype=to_float(dtype))
    if dtype in ("f32", "f64", "f16", "bf16"):
        q = b.elementwise("divide", x, y, dtype=dtype)
        if rounding_mode == "floor":
            return b.add("floor", [q])
        return b.select(b.compare(q, 0, "LT"), b.add("ceil", [q]), b.add("floor", [q]))
    q = b.elementwise("divide", x, y, dtype=dtype)          # integer divide truncates, as C does
    if rounding_mode == "trunc":
        return q
    # floor: one less where the division was inexact and the signs differ
    shape = q.shape
    xs, ys = b.operand(x, dtype, shape), b.operand(y, dtype, shape)
    inexact = b.compare(b.elementwise("multiply", q, ys), xs, "NE")
    signs = b.compare(b.compare(xs, 0, "LT"), b.compare(ys, 0, "LT"), "NE")
    return b.select(b.elementwise("and", inexact, signs), b.elementwise("subtract", q, 1), q)


def _remainder(b, x, y):
    """Python's ``%`` (the result takes the divisor's sign): ``fmod``, then add the divisor when the signs differ."""
    dtype = b.promoted(x, y)
    r = b.elementwise("remainder", x, y, dtype=dtype)
    shape = r.shape
    ys = b.operand(y, dtype, shape)
    fix = b.elementwise("and", b.compare(r, 0, "NE"), b.compare(b.compare(r, 0, "LT"), b.compare(ys, 0, "LT"), "NE"))
    return b.select(fix, b.elementwise("add", r, ys), r)


def _pow(b, x, y):
    """``x ** y``: exponent 2 is ``x * x`` (exactly what PyTorch computes), 0.5 ``sqrt``, else ``power``."""
    dtype = b.promoted(x, y)
    if isinstance(x, Node) and isinstance(y, (int, float)) and not isinstance(y, bool):
        xc = b.cast(x, dtype)
        if y == 2:
            return b.elementwise("multiply", xc, xc)
        if y == 0.5 and dtype in ("f32", "f64", "f16", "bf16"):
            return b.elementwise("sqrt", xc)
        if y == 1:
            return xc if xc is not x else b.elementwise("copy", xc)
    return b.elementwise("power", x, y, dtype=dtype)


def _reciprocal(b, x):
    return b.elementwise("divide", 1, x, dtype=to_float(x.dtype))


def _relu(b, x):
    return b.elementwise("maximum", x, 0, dtype=x.dtype)


def _clamp(b, x, min=None, max=None):
    """``clamp(x, min, max)``, either bound optional (``clamp_min``, ``hardtanh``...)."""
    if min is None and max is None:
        raise AStitchError(f"{b.here}: clamp needs a min or a max")
    dtype = b.promoted(*[v for v in (x, min, max) if v is not None])
    out = b.cast(x, dtype)
    for bound, op in ((min, "maximum"), (max, "minimum")):
        if bound is not None:
            out = b.elementwise(op, out, bound, dtype=dtype)
    return out


def _where(b, cond, x, y):
    return b.select(b.cast(cond, "pred"), x, y)


def _isnan(b, x):
    return b.compare(x, x, "NE")


def _logical(op):
    def build(b, x, y=None):
        xs = [b.cast(v, "pred") if isinstance(v, Node) else bool(v) for v in ((x,) if y is None else (x, y))]
        return b.elementwise(op, *xs, dtype="pred")
    return build


def _bitwise_not(b, x):
    return b.elementwise("not", x, dtype=x.dtype)


def _sign(b, x):
    return b.elementwise("sign", x, dtype=x.dtype)


def _hardtanh(b, x, min_val=-1.0, max_val=1.0):
    return _clamp(b, x, min_val, max_val)


def _leaky_relu(b, x, negative_slope=0.01):
    return b.select(b.compare(x, 0, "GT"), x, b.elementwise("multiply", x, negative_slope, dtype=x.dtype))


def _elu(b, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """``elu``/``selu``: ``scale * x`` above 0, ``scale * alpha * expm1(input_scale * x)`` below."""
    neg = b.elementwise("exponential-minus-one", b.elementwise("multiply", x, input_scale, dtype=x.dtype))
    neg = b.elementwise("multiply", neg, scale * alpha, dtype=x.dtype)
    pos = b.elementwise("multiply", x, scale, dtype=x.dtype) if scale != 1 else x
    return b.select(b.compare(x, 0, "GT"), pos, neg)


ROWS = {
    "add.Tensor": _add("add"), "add.Scalar": _add("add"),
    "sub.Tensor": _add("subtract"), "sub.Scalar": _add("subtract"),
    "rsub.Scalar": lambda b, x, y, alpha=1: _add("subtract")(b, y, x, alpha),
    "mul.Tensor": _binary("multiply"), "mul.Scalar": _binary("multiply"),
    "div.Tensor": _binary("divide", int_to_float=True), "div.Scalar": _binary("divide", int_to_float=True),
    "div.Tensor_mode": _div_mode, "div.Scalar_mode": _div_mode,
    "pow.Tensor_Scalar": _pow, "pow.Tensor_Tensor": _pow, "pow.Scalar": _pow,
    "maximum.default": _binary("maximum"), "minimum.default": _binary("minimum"),
    "remainder.Tensor": _remainder, "remainder.Scalar": _remainder,
    "fmod.Tensor": _binary("remainder"), "fmod.Scalar": _binary("remainder"),
    "atan2.default": _binary("atan2", int_to_float=True),
    "eq.Tensor": _compare("EQ"), "eq.Scalar": _compare("EQ"), "ne.Tensor": _compare("NE"), "ne.Scalar": _compare("NE"),
    "lt.Tensor": _compare("LT"), "lt.Scalar": _compare("LT"), "le.Tensor": _compare("LE"), "le.Scalar": _compare("LE"),
    "gt.Tensor": _compare("GT"), "gt.Scalar": _compare("GT"), "ge.Tensor": _compare("GE"), "ge.Scalar": _compare("GE"),
    "logical_and.default": _logical("and"), "logical_or.default": _logical("or"),
    "logical_xor.default": _logical("xor"), "logical_not.default": _logical("not"),
    "bitwise_and.Tensor": _binary("and"), "bitwise_or.Tensor": _binary("or"), "bitwise_xor.Tensor": _binary("xor"),
    "bitwise_and.Scalar": _binary("and"), "bitwise_or.Scalar": _binary("or"), "bitwise_xor.Scalar": _binary("xor"),
    "bitwise_not.default": _bitwise_not, "leaky_relu.default": _leaky_relu, "elu.default": _elu,
    "neg.default": _unary("negate"), "abs.default": _unary("abs"), "sign.default": _sign,
    "exp.default": _unary("exponential", True), "expm1.default": _unary("exponential-minus-one", True),
    "log.default": _unary("log", True), "log1p.default": _unary("log-plus-one", True),
    "sqrt.default": _unary("sqrt", True), "rsqrt.default": _unary("rsqrt", True),
    "tanh.default": _unary("tanh", True), "sigmoid.default": _unary("logistic", True),
    "erf.default": _unary("erf", True), "sin.default": _unary("sine", True), "cos.default": _unary("cosine", True),
    "tan.default": _unary("tan", True),
    "floor.default": _unary("floor"), "ceil.default": _unary("ceil"), "round.default": _unary("round-nearest-even"),
    "reciprocal.default": _reciprocal, "relu.default": _relu,
    "clamp.default": _clamp, "clamp.Tensor": _clamp, "clamp_min.default": lambda b, x, m: _clamp(b, x, m, None),
    "clamp_max.default": lambda b, x, m: _clamp(b, x, None, m), "hardtanh.default": _hardtanh,
    "where.self": _where, "isnan.default": _isnan,
}
