"""What a simulated result may differ from the exact one by: a float64 evaluation with rigorous error bounds.

A float32 graph computed on a GPU (or by the SIMT model) is not the exact
real-number result: every op rounds, and a sum rounds in the order its threads
add.  The numpy reference rounds too, in *another* order (pairwise along a
contiguous axis, one row at a time along any other), so "the simulator matches
numpy to 1e-5" is no test for a 16384-row column sum: both are ~1e-3 off
(issue 9).  This module gives, for every output element, the exact value
``X`` (the graph evaluated in float64 on the same inputs) and a bound ``B`` such
that **any** evaluation that follows the plan -- rounding each op's result to
its dtype and adding each reduction in the order the plan prescribes -- lands
within ``B`` of ``X``.  A simulated value outside ``[X - B, X + B]`` is a bug,
never rounding.

How ``B`` is built, node by node (forward error analysis, Higham, *Accuracy and
Stability of Numerical Algorithms*, ch. 2-4):

* inputs and constants are exact: ``B = 0``;
* an op rounds its result: ``+ c_op * u * |X| + tiny`` where ``u`` is the unit
  roundoff of the dtype the op computes in (float32: 2^-24; f16 and bf16 ops are
  computed in float32 and rounded to the 2^-11 / 2^-8 of their type, which adds
  that type's ``u``), ``c_op`` is 1 for correctly rounded IEEE ops (+ - * / sqrt,
  converts), 0 for exact ones (max, abs, select, data movement) and
  ``TRANSCENDENTAL_ULPS`` for library functions (exp, tanh...: a few ulps), and
  ``tiny`` half the smallest subnormal (underflow);
* errors already in the operands propagate through the op's derivative, taken
  at its worst over the interval the operand may lie in (mean value theorem):
  ``|f(x') - f(x)| <= max_{|t - x| <= B_x} |f'(t)| * B_x``.  ``a*b``:
  ``|b| B_a + (|a| + B_a) B_b``; ``1/b`` is unbounded if ``[b - B_b, b + B_b]``
  holds 0; ``exp`` takes ``exp(x + B_x)``... (``_PROPAGATE``);
* a **sum** of ``n`` terms added in a tree of depth ``d`` (the longest chain of
  additions from a term to the result) is within ``gamma_d * sum|terms|`` of the
  exact sum of its (already inexact) terms, ``gamma_d = d u / (1 - d u)``
  (Higham, eq. 4.4), so ``B = sum B_i + gamma_d * sum(|X_i| + B_i) + d * tiny``.
  ``d`` comes from the plan: a thread folds ``inner_iterations`` terms, the
  block's tree has ``ceil(log2 lanes)`` levels, split blocks add ``splits``
  partials and the init value is folded last (:func:`reduce_depth`);
  products alike; max/min are exact (``B = max B_i``);
* a discontinuous op (compare, floor, round, convert to int, sign, select on an
  uncertain predicate...) is exact when its operand interval does not reach a
  discontinuity, and gives ``B = inf`` ("no claim") when it does;
* a value whose interval reaches past its dtype's largest finite number (an
  overflow in one order but not another) gets ``B = inf`` too.

* infinities: an infinite result of exact operands is exact (IEEE); float16 ops
  that numpy runs in several float16 steps (rsqrt, logistic) round after each
  (``F16_ROUNDINGS``).

The bound is per element and uses only numbers the plan fixes, so a test can say
exactly what it allows.  Where neither a reduction order nor a math-library
routine is involved (``O`` is False: no float reduce and no exp, log, tanh...
upstream -- numpy's float32 library routines may differ in the last bit with the
memory layout of their operands) a simulated value must equal the float32 numpy
reference *exactly*: same ops, same roundings.  That is the sharper check, and it
also covers integer wrap-around, bf16/f16 rounding and NaN propagation.

The oracle does not share the code it checks: it propagates indices with its own
few lines (:func:`operand_index`, from the numpy meaning of each data-movement
op), not ``astitch_sim.ir.indexing``/``flatindex`` as the SIMT model does, and the
property suite checks the oracle itself against the numpy reference on every
example (:func:`check_oracle`).

Memory stays bounded at real sizes (8192 x 32000): outputs are evaluated in
chunks of about ``CHUNK`` elements by index propagation, reduce results are
materialised once, chunk by chunk over their reduced dims; the expected values
are kept as float32 intervals rounded outward (:class:`Expected`).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from functools import reduce
from math import ceil, log2, prod

import numpy as np

from astitch_sim.ir.dtypes import cast, is_float
from astitch_sim.ir.reference import bind_inputs

#: elements evaluated at once (index arrays and values of one chunk)
CHUNK = 1 << 18
#: library transcendental functions (numpy float32 exp, log, tanh...) are within a few ulps: we allow 4 (8 u)
TRANSCENDENTAL_ULPS = 4

U = {"f64": 2.0 ** -53, "f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}
TINY = {"f64": 2.0 ** -1075, "f32": 2.0 ** -150, "f16": 2.0 ** -25, "bf16": 2.0 ** -134}
BIGGEST = {"f64": np.inf, "f32": float(np.finfo(np.float32).max), "f16": 65504.0, "bf16": 3.3895313892515355e38}
HALF = ("f16", "bf16")

# c_op: multiples of u that one evaluation of the op may be off by, given exact operands
_EXACT_OPS = {"negate", "abs", "copy", "maximum", "minimum", "select", "clamp", "floor", "ceil", "round-nearest-afz",
              "round-nearest-even", "sign", "compare", "is-finite", "not", "and", "or", "xor", "broadcast",
              "reshape", "bitcast", "transpose", "slice", "concatenate", "reverse", "pad", "constant", "parameter",
              "remainder"}
_ROUNDED_OPS = {"add": 1, "subtract": 1, "multiply": 1, "divide": 1, "sqrt": 1, "convert": 1, "rsqrt": 3,
                "iota": 1}


#: ops numpy computes with its own math library: the float32 result may differ in the last bit between two
#: calls on differently laid-out arrays (numpy picks SIMD or scalar loops by stride), so their results are
#: held to the bound, never to bit equality with the reference
LIBRARY_FUNCTIONS = {"exponential", "exponential-minus-one", "log", "log-plus-one", "cbrt", "tanh", "logistic",
                     "erf", "sine", "cosine", "tan", "power", "atan2"}


#: op table rows computed in several numpy steps (rsqrt = 1 / sqrt, logistic = exp, add, divide): float16
#: rounds after each, and an error of the first step is passed on at most once more
F16_ROUNDINGS = {"rsqrt": 3, "logistic": 4}


def _c_op(op: str) -> float:
    if op in _EXACT_OPS:
        return 0.0
    return _ROUNDED_OPS.get(op, 2 * TRANSCENDENTAL_ULPS)


def gamma(d: int, u: float) -> float:
    """Higham's gamma_d = d u / (1 - d u): relative error bound of d successive roundings."""
    return d * u / (1 - d * u) if d * u < 1 else np.inf


def reduce_depth(plan, name: str):
    """Longest chain of additions from one term of reduce ``name`` to its result, in ``plan``'s order.

    A thread folds its terms of the task (``folds_per_task``: a column lane's vector spreads its
    ``inner_iterations`` over as many columns) into an accumulator, the task's
    lanes meet in a shared-memory tree of ``ceil(log2 lanes)`` levels, split blocks
    fold their ``splits`` partials and the init value is folded last
    (``astitch_sim/simt/reduce.py``).  None if no stage of the plan computes it.
    """
    for k in plan.kernels:
        for s in k.stages:
            if name in s.ops:
                m = s.mapping
                lanes = {"rows": m.threads_per_row, "columns": m.rows_per_block}.get(m.kind, 1)
                return m.folds_per_task + ceil(log2(max(lanes, 1))) + m.splits + 1
    return None


def plan_depths(graph, plans) -> dict:
    """``{reduce name: depth}``, the largest over ``plans`` (one bound then holds for all of them)."""
    out = {}
    for n in graph:
        if n.op == "reduce":
            ds = [reduce_depth(p, n.name) for p in plans]
            ds = [d for d in ds if d is not None]
            n_terms = prod(n.operands[0].shape[d] for d in n.attrs["dimensions"])
            out[n.name] = max(ds) if ds else n_terms + 1
    return out


@dataclass
class Val:
    """Exact value ``X``, bound ``B`` (float64, inf: no claim) and order-sensitivity ``O`` at some indices."""
    X: np.ndarray
    B: np.ndarray
    O: np.ndarray


# -- propagation of operand errors through an op, given X, B of operands and X of the result ---------------

def _lip1(node, X, B, Y):
    """|f(x') - f(y')| <= max |x' - x|: negate, abs, maximum, minimum are 1-Lipschitz in the max norm."""
    return reduce(np.maximum, B)


def _add(node, X, B, Y):
    return B[0] + B[1]


def _multiply(node, X, B, Y):
    return np.abs(X[1]) * B[0] + (np.abs(X[0]) + B[0]) * B[1]


def _divide(node, X, B, Y):
    a, b = X
    lo = np.abs(b) - B[1]                       # smallest |denominator| in its interval
    with np.errstate(all="ignore"):
        out = B[0] / lo + (np.abs(a) + B[0]) * B[1] / (lo * np.abs(b))
    return np.where(lo > 0, out, np.inf)


def _monotone_derivative(fprime_max):
    """Unary f whose worst |f'| over [x - B, x + B] ``fprime_max(lo, hi)`` gives (inf where unbounded)."""
    def rule(node, X, B, Y):
        with np.errstate(all="ignore"):
            d = fprime_max(X[0] - B[0], X[0] + B[0])
            return np.where(np.isnan(d), np.inf, d * B[0])
    return rule


def _recip_pos(p):
    def f(lo, hi):
        return np.where(lo > 0, p(lo), np.inf)
    return f


def _remainder(node, X, B, Y):
    a, b = X
    with np.errstate(all="ignore"):
        q = a / b
        lo = np.abs(b) - B[1]
        spread = (B[0] + np.abs(q) * B[1]) / np.where(lo > 0, lo, np.nan)
        frac = np.abs(q - np.round(q))
        safe = (lo > 0) & (np.abs(q - np.trunc(q)) > spread) & (frac > spread)
        return np.where(safe, B[0] + np.abs(np.trunc(q)) * B[1], np.inf)


def _atan2(node, X, B, Y):
    a, b = X
    with np.errstate(all="ignore"):
        r = np.hypot(a, b) - np.hypot(B[0], B[1])
        cut = (b - B[1] < 0) & (np.abs(a) <= B[0])            # the branch cut at -pi/pi
        return np.where((r > 0) & ~cut, (B[0] + B[1]) / r, np.inf)


def _power(node, X, B, Y):
    a, b = X
    with np.errstate(all="ignore"):
        worst_a, worst_b = 0.0, 0.0
        for sa in (-1, 1):
            for sb in (-1, 1):
                ta, tb = a + sa * B[0], b + sb * B[1]
                worst_a = np.maximum(worst_a, np.abs(tb * ta ** (tb - 1)))
                worst_b = np.maximum(worst_b, np.abs(ta ** tb * np.log(ta)))
        out = worst_a * B[0] + worst_b * B[1]
        return np.where((a - B[0] > 0) & np.isfinite(out), out, np.inf)


def _tan(lo, hi):
    ok = (lo > -np.pi / 2) & (hi < np.pi / 2)
    return np.where(ok, 1 / np.minimum(np.cos(lo), np.cos(hi)) ** 2, np.inf)


_PROPAGATE = {
    "add": _add, "subtract": _add, "multiply": _multiply, "divide": _divide,
    "negate": _lip1, "abs": _lip1, "copy": _lip1, "maximum": _lip1, "minimum": _lip1,
    "exponential": _monotone_derivative(lambda lo, hi: np.exp(hi)),
    "exponential-minus-one": _monotone_derivative(lambda lo, hi: np.exp(hi)),
    "log": _monotone_derivative(_recip_pos(lambda lo: 1 / lo)),
    "log-plus-one": _monotone_derivative(lambda lo, hi: np.where(lo > -1, 1 / (1 + lo), np.inf)),
    "sqrt": _monotone_derivative(_recip_pos(lambda lo: 0.5 / np.sqrt(lo))),
    "rsqrt": _monotone_derivative(_recip_pos(lambda lo: 0.5 * lo ** -1.5)),
    "cbrt": _monotone_derivative(lambda lo, hi: np.where((lo > 0) | (hi < 0),
                                                         np.cbrt(np.minimum(np.abs(lo), np.abs(hi))) ** -2 / 3,
                                                         np.inf)),
    "tanh": _monotone_derivative(lambda lo, hi: np.ones_like(lo)),
    "logistic": _monotone_derivative(lambda lo, hi: np.full_like(lo, 0.25)),
    "erf": _monotone_derivative(lambda lo, hi: np.full_like(lo, 2 / np.sqrt(np.pi))),
    "sine": _monotone_derivative(lambda lo, hi: np.ones_like(lo)),
    "cosine": _monotone_derivative(lambda lo, hi: np.ones_like(lo)),
    "tan": _monotone_derivative(_tan),
    "remainder": _remainder, "atan2": _atan2, "power": _power,
}

#: discontinuous ops: where the operand interval reaches a jump the result is uncertain (B = inf), else exact
_JUMPS = {
    "floor": lambda x: np.abs(x - np.round(x)),
    "ceil": lambda x: np.abs(x - np.round(x)),
    "round-nearest-afz": lambda x: np.abs(np.abs(x - np.floor(x)) - 0.5),
    "round-nearest-even": lambda x: np.abs(np.abs(x - np.floor(x)) - 0.5),
    "sign": lambda x: np.abs(x),
}


class ExactEvaluation:
    """The graph evaluated in float64, with the error bound of a plan-following float evaluation.

    ``depths``: ``{reduce name: longest addition chain}`` (:func:`plan_depths`).
    """

    def __init__(self, graph, inputs, depths: dict, chunk: int = CHUNK):
        self.g, self.depths, self.chunk = graph, depths, chunk
        self.env = bind_inputs(graph, inputs)
        self.cache: dict = {}            # reduce name -> Val over its whole output
        self.memo: dict = {}
        self.keep: list = []

    # -- the public entry points ---------------------------------------------------------------------------
    def chunks(self, node, budget=None):
        """``(start, stop, chunk shape, Val)`` covering the flat (row-major) elements of ``node`` in order;
        the Val's arrays broadcast to the chunk shape (a scalar B of 0 stays a scalar)."""
        shape = tuple(node.shape)
        budget = budget or self.chunk
        for start, stop, idx, full in _output_chunks(shape, budget):
            self.memo.clear()
            self.keep.clear()
            yield start, stop, full, self.at(node, idx)
        self.memo.clear()
        self.keep.clear()

    # -- evaluation at an index -------------------------------------------------------------------------------
    def at(self, node, idx) -> Val:
        key = (node.name, tuple(id(a) for a in idx))
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        self.keep.append(idx)
        v = self._at(node, idx)
        self.memo[key] = v
        return v

    def _at(self, node, idx) -> Val:
        op = node.op
        if node.size == 0:                          # read only by a reduce over nothing: no element
            shape = np.broadcast_shapes(*(np.shape(a) for a in idx)) if idx else ()
            dt = np.float64 if is_float(node.dtype) else cast(np.zeros(()), node.dtype).dtype
            return Val(np.zeros(shape, dt), np.zeros(shape), np.zeros(shape, bool))
        if op == "parameter":
            return self._leaf(self.env[node.name], node, idx)
        if op == "constant":
            return self._leaf(cast(np.asarray(node.attrs["value"]), node.dtype).reshape(node.shape), node, idx)
        if op == "iota":
            x = np.asarray(idx[node.attrs["iota_dimension"]])
            X = x.astype(np.float64) if is_float(node.dtype) else cast(x, node.dtype)
            B = self._round(node, np.abs(X)) if is_float(node.dtype) else np.zeros(())
            if is_float(node.dtype):              # f16 counts only to 65504
                B = np.where(np.abs(X) + B > BIGGEST[node.dtype], np.inf, B)
            return Val(X, B, np.zeros((), bool))
        if op in ("reduce", "dot") or op in new_ops.WHOLE_OPS:
            full = self.whole(node)
            if node.rank == 0:
                return full
            return Val(*(a[tuple(idx)] if np.ndim(a) else a for a in (full.X, full.B, full.O)))
        if op in new_ops.INDEXED_AT:
            return new_ops.INDEXED_AT[op](self, node, idx)
        if op in ("broadcast", "reshape", "bitcast", "transpose", "reverse", "slice"):
            oidx, _ = operand_index(node, 0, idx)
            return self.at(node.operands[0], tuple(oidx))
        if op == "concatenate":
            out = None
            for i, o in enumerate(node.operands):
                if o.size == 0:                      # adds nothing (and has no element to read)
                    continue
                oidx, m = operand_index(node, i, idx)
                v = self.at(o, tuple(oidx))
                out = v if out is None else Val(*(np.where(m, a, b) for a, b in zip((v.X, v.B, v.O),
                                                                                    (out.X, out.B, out.O), strict=True)))
            return out
        if op == "pad":
            if node.operands[0].size == 0:           # nothing but padding
                return self.at(node.operands[1], ())
            oidx, m = operand_index(node, 0, idx)
            v = self.at(node.operands[0], tuple(oidx))
            p = self.at(node.operands[1], ())
            return Val(np.where(m, v.X, p.X), np.where(m, v.B, p.B), np.where(m, v.O, p.O))
        if node.kind == "elementwise":
            args = [self.at(o, tuple(operand_index(node, i, idx)[0])) for i, o in enumerate(node.operands)]
            return self._elementwise(node, args)
        raise NotImplementedError(f"error_bounds: no rule for {op} ({node.name})")

    def _leaf(self, arr, node, idx) -> Val:
        a = np.asarray(arr)
        x = a[_as_slices(idx, a.ndim)] if node.rank else a
        X = x.astype(np.float64) if is_float(node.dtype) else x
        return Val(X, np.zeros(()), np.zeros((), bool))

    # -- one elementwise op ------------------------------------------------------------------------------------
    def _elementwise(self, node, args) -> Val:
        dt = node.dtype
        Xs = [a.X for a in args]
        Bs = [a.B for a in args]
        O = reduce(np.logical_or, [a.O for a in args])
        if node.op in LIBRARY_FUNCTIONS and is_float(dt):
            O = np.ones((), bool)           # numpy's float32 exp, power... vary in the last bit with the layout
        Y = node.opdef.numpy(node, *Xs)
        Y = np.asarray(Y, dtype=np.float64) if is_float(dt) else cast(Y, dt)
        with np.errstate(all="ignore"):
            if all(np.ndim(b) == 0 and b == 0 for b in Bs):
                prop = None                                   # exact operands: only the op's own rounding
            else:
                prop = self._propagate(node, Xs, Bs, Y)
                zero = [b == 0 for b in Bs if not (np.ndim(b) == 0 and b == 0)]
                if all(np.any(z) for z in zero):          # some element may have all operands exact
                    exact_in = reduce(np.logical_and, zero)
                    if np.any(exact_in):
                        prop = np.where(exact_in, 0.0, prop)
            if not is_float(dt):                              # an integer or boolean result is exact or unknown
                return Val(Y, np.zeros(()) if prop is None else np.where(prop == 0, 0.0, np.inf), O)
            ay = np.abs(Y)
            B = self._round(node, ay)
            top = np.max(ay, initial=0.0)
            if top == np.inf:                                 # an infinite result from exact operands is exact
                B = np.where(np.isinf(ay), 0.0, B)
            if prop is not None:
                B = B + prop
            if np.ndim(B) == 0 and B == 0:
                B = np.zeros(())
            if not (top + np.max(B, initial=0.0) <= BIGGEST[dt]):
                # a finite value that may overflow in one evaluation and not another: no claim
                B = np.where(np.isfinite(ay) & (ay + B > BIGGEST[dt]), np.inf, B)
        return Val(Y, B, O)

    def _propagate(self, node, Xs, Bs, Y):
        """Error carried over from the operands (the op's own rounding is added by the caller)."""
        op, dt = node.op, node.dtype
        if op == "select":
            p, a, b = Bs
            return np.where(p > 0, np.inf, np.where(Xs[0], a, b))
        if op == "clamp":
            return np.maximum(np.maximum(Bs[0], Bs[1]), Bs[2])
        if op == "convert":
            return self._convert(node, Xs[0], Bs[0], Y)
        if op == "compare":
            gap = np.abs(np.asarray(Xs[0], np.float64) - np.asarray(Xs[1], np.float64))
            return np.where(gap > Bs[0] + Bs[1], 0.0, np.inf)
        if op == "is-finite":
            return np.where(np.isfinite(Xs[0]) & np.isfinite(Bs[0]), 0.0, np.inf)
        if op in _JUMPS:
            return np.where(_JUMPS[op](Xs[0]) > Bs[0], 0.0, np.inf)
        if op in _PROPAGATE and is_float(dt) and all(is_float(o.dtype) for o in node.operands):
            return _PROPAGATE[op](node, Xs, [np.asarray(b, np.float64) for b in Bs], Y)
        return np.inf          # an uncertain integer or boolean operand: no claim

    def _convert(self, node, X, B, Y):
        src, dst = node.operands[0].dtype, node.dtype
        if is_float(src) and dst == "pred":
            return np.where(np.abs(X) > B, 0.0, np.inf)
        if is_float(src) and not is_float(dst):        # truncation jumps at every integer
            return np.where(np.abs(X - np.round(X)) > B, 0.0, np.inf)
        if is_float(src):
            return B
        return np.where(B > 0, np.inf, 0.0)

    def _round(self, node, ay):
        """Rounding of the op's own result: c_op u |Y| (half types: computed in f32, then rounded) + tiny."""
        dt = node.dtype
        c = _c_op(node.op)
        compute = "f32" if dt in HALF else dt
        rel = c * U[compute] + (U[dt] if dt in HALF and c > 0 else 0.0)
        if dt == "f16" and node.op in F16_ROUNDINGS:
            # numpy computes float16 arrays op by op in float16: a composite row of the op table rounds
            # to float16 after each of its steps
            rel = c * U["f32"] + F16_ROUNDINGS[node.op] * U["f16"]
        if node.op == "convert":
            src = node.operands[0].dtype
            widening = src == dt or (src in HALF and dt in ("f32", "f64")) or (src == "f32" and dt == "f64")
            rel = 0.0 if widening else U[dt]      # bf16 -> f16 rounds too (f16's range is narrower)
        if rel == 0:
            return np.zeros(())
        return rel * ay + TINY[dt]

    # -- whole reduces (materialised once) -----------------------------------------------------------------------
    def whole(self, node) -> Val:
        if node.name in self.cache:
            return self.cache[node.name]
        saved = (self.memo, self.keep)
        self.memo, self.keep = {}, []
        try:
            if new_ops.is_pair_reduce(node) or node.op in new_ops.WHOLE_OPS:
                v = new_ops.whole(self, node)
            else:
                v = self._reduce(node) if node.op == "reduce" else self._dot(node)
        finally:
            self.memo, self.keep = saved
        self.cache[node.name] = v
        return v

    def _reduce(self, node) -> Val:
        x, init = node.operands
        dims = tuple(node.attrs["dimensions"])
        kept = [d for d in range(x.rank) if d not in dims]
        red_shape = tuple(x.shape[d] for d in dims)
        n = prod(red_shape)
        reducer, dt = node.attrs["reducer"], node.dtype
        flt = is_float(dt)
        X = np.empty(node.shape, np.float64 if flt else np.dtype(cast(np.zeros(()), dt).dtype))
        B = np.zeros(node.shape, np.float64)
        O = np.zeros(node.shape, bool)
        iv = self.at(init, ())
        depth = self.depths.get(node.name, n + 1)
        acc = dt if dt != "bf16" else "f32"
        budget = max(1, self.chunk // max(n, 1))
        for start, stop, oidx, full in _output_chunks(tuple(node.shape), budget):
            self.memo.clear()
            self.keep.clear()
            tail = len(dims)
            lead = len(full)
            iidx = [None] * x.rank
            for j, d in enumerate(kept):
                iidx[d] = np.asarray(oidx[j]).reshape(np.shape(oidx[j]) + (1,) * tail)
            for i, d in enumerate(dims):
                iidx[d] = np.arange(x.shape[d]).reshape((1,) * lead + (1,) * i + (x.shape[d],) + (1,) * (tail - i - 1))
            v = self.at(x, tuple(iidx))
            shape = tuple(full) + red_shape
            axes = tuple(range(lead, lead + tail))
            Xi = np.broadcast_to(v.X, shape)
            Bi = np.broadcast_to(v.B, shape)
            Oi = np.broadcast_to(v.O, shape)
            ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
                     "and": np.logical_and, "or": np.logical_or}[reducer]
            with np.errstate(all="ignore"):
                if n == 0:                                           # a reduce over nothing is its init value
                    xr = np.full(full, iv.X)
                elif flt or reducer in ("and", "or"):
                    xr = ufunc(ufunc.reduce(Xi, axis=axes), iv.X)
                else:                                                # integers wrap as the reference does
                    xr = ufunc(ufunc.reduce(Xi, axis=axes, dtype=Xi.dtype), iv.X).astype(Xi.dtype)
                if flt and reducer in ("sum", "prod"):
                    mags = np.abs(Xi) + Bi
                    if reducer == "sum":
                        total = np.sum(mags, axis=axes) + np.abs(iv.X) + iv.B
                        b = np.sum(Bi, axis=axes) + iv.B + gamma(depth, U[acc]) * total + depth * TINY[acc]
                    else:
                        hi = np.prod(mags, axis=axes) * (np.abs(iv.X) + iv.B)
                        b = hi * (1 + gamma(depth, U[acc])) - np.abs(xr) + depth * TINY[acc]
                        total = hi
                    if dt in HALF:
                        b = b + U[dt] * np.abs(xr) + TINY[dt]
                    b = np.where(total * (1 + gamma(depth, U[acc])) > BIGGEST[acc], np.inf, b)
                    o = np.ones(full, bool)
                elif flt:                                           # max, min: exact, Lipschitz 1
                    b = np.maximum(np.max(Bi, axis=axes, initial=0.0), iv.B)
                    o = np.any(Oi, axis=axes) | np.asarray(iv.O) | (xr == 0)   # -0 vs +0 depends on order
                else:
                    b = np.where((np.max(Bi, axis=axes, initial=0.0) == 0) & (iv.B == 0), 0.0, np.inf)
                    o = np.any(Oi, axis=axes) | np.asarray(iv.O)
            for dst, src in ((X, xr), (B, b), (O, o)):
                dst.reshape(-1)[start:stop] = np.broadcast_to(src, full).reshape(-1)
        return Val(X, B, O)

    def _dot(self, node) -> Val:
        a, b = (self._whole_value(o) for o in node.operands)
        Xa, Xb = a.X.astype(np.float64), b.X.astype(np.float64)
        X = node.opdef.numpy(node, Xa, Xb).astype(np.float64)
        K = prod(node.operands[0].shape[d] for d in node.attrs["lhs_contracting_dims"])
        Ba, Bb = np.broadcast_to(a.B, Xa.shape), np.broadcast_to(b.B, Xb.shape)
        mag = node.opdef.numpy(node, np.abs(Xa) + Ba, np.abs(Xb) + Bb).astype(np.float64)
        prop = mag - node.opdef.numpy(node, np.abs(Xa), np.abs(Xb)).astype(np.float64)
        acc = "f32" if node.dtype in HALF else node.dtype
        B = prop + gamma(K + 1, U[acc]) * mag + (K + 1) * TINY[acc]
        if node.dtype in HALF:
            B = B + U[node.dtype] * np.abs(X) + TINY[node.dtype]
        return Val(X, B, np.ones(node.shape, bool))

    def _whole_value(self, node) -> Val:
        out = [None, None, None]
        parts = [[], [], []]
        for start, stop, full, v in self.chunks(node):
            for i, a in enumerate((v.X, v.B, v.O)):
                parts[i].append(np.broadcast_to(a, full).reshape(-1))
        for i in range(3):
            out[i] = np.concatenate(parts[i]).reshape(node.shape) if parts[i] else np.zeros(node.shape)
        return Val(*out)


def _as_slices(idx, rank):
    """Basic slices for index arrays that are consecutive ranges, each along its own axis (a chunk of rows
    and whole trailing dims): a view instead of a gather.  Otherwise the index arrays themselves."""
    if len(idx) != rank:
        return tuple(idx)
    out = []
    for axis, a in enumerate(idx):
        a = np.asarray(a)
        if a.ndim != rank or any(n != 1 for k, n in enumerate(a.shape) if k != axis):
            return tuple(idx)
        v = a.reshape(-1)
        if v.size == 0 or v[-1] - v[0] != v.size - 1 or (v.size > 1 and not (np.diff(v) == 1).all()):
            return tuple(idx)
        out.append(slice(int(v[0]), int(v[-1]) + 1))
    return tuple(out)


def order_sensitive(node) -> bool:
    """Can ``node``'s value differ between two correct evaluations: a float reduction upstream (the order it
    adds in; a max/min's zero may come out -0 or +0) or a math-library function (``LIBRARY_FUNCTIONS``)?
    If not, every element must equal the float32 reference bit for bit."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n.name in seen:
            continue
        seen.add(n.name)
        if n.op in ("reduce", "dot") and is_float(n.dtype):
            return True
        if n.op in LIBRARY_FUNCTIONS and is_float(n.dtype):
            return True
        if new_ops.order_sensitive_op(n):
            return True
        stack.extend(n.operands)
    return False


# -- index arithmetic, written here again on purpose ------------------------------------------------------------
# The oracle must not share the code it checks: the SIMT model propagates indices with astitch_sim.ir.indexing and
# astitch_sim.ir.flatindex, so a bug there (numpy's unravel_index past 8192 rows was one) would make both agree.
# These few lines re-derive each data-movement op's index map from its numpy meaning (row-major order).

def unravel(flat, shape) -> tuple:
    """Row-major multi-index of flat element numbers (divide and remainder per dim, innermost first)."""
    rest = np.asarray(flat, dtype=np.int64)
    out = []
    for n in reversed(tuple(shape)):
        out.append(rest % n if n else np.zeros_like(rest))
        rest = rest // n if n else rest
    return tuple(reversed(out))


def _ravel(idx, shape):
    flat = np.zeros((), np.int64)
    for i, n in zip(idx, shape, strict=True):
        flat = flat * int(n) + np.asarray(i, np.int64)
    return flat


def operand_index(node, i, idx):
    """The index of operand ``i`` that output index ``idx`` of ``node`` reads, and a mask (concatenate, pad)."""
    op, o = node.op, node.operands[i]
    if o.rank == 0:
        return (), None
    a = node.attrs
    if node.kind == "elementwise":
        return tuple(idx), None
    if op == "broadcast":                        # output dim dimensions[k] is operand dim k
        return tuple(idx[d] for d in a["dimensions"]), None
    if op in ("reshape", "bitcast"):              # same row-major element number
        return unravel(_ravel(idx, node.shape), o.shape), None
    if op == "transpose":                        # output dim k is operand dim permutation[k]
        out = [None] * o.rank
        for k, p in enumerate(a["permutation"]):
            out[p] = idx[k]
        return tuple(out), None
    if op == "reverse":
        return tuple(n - 1 - x if d in a["dimensions"] else x for d, (x, n) in enumerate(zip(idx, o.shape, strict=True))), None
    if op == "slice":
        return tuple(s + st * x for x, s, st in zip(idx, a["starts"], a["strides"], strict=True)), None
    if op == "concatenate":
        d = a["dimension"]
        lo = sum(p.shape[d] for p in node.operands[:i])
        pos = np.asarray(idx[d]) - lo
        inside = (pos >= 0) & (pos < o.shape[d])
        return tuple(np.clip(pos, 0, o.shape[d] - 1) if k == d else x for k, x in enumerate(idx)), inside
    if op == "pad" and i == 0:
        pos = [np.asarray(x) - low for x, low in zip(idx, a["low"], strict=True)]
        inside = np.ones((), bool)
        for p, n in zip(pos, o.shape, strict=True):
            inside = inside & (p >= 0) & (p < n)
        return tuple(np.clip(p, 0, n - 1) for p, n in zip(pos, o.shape, strict=True)), inside
    raise NotImplementedError(f"error_bounds: no index map for {op}")


def _output_chunks(shape, budget):
    """Split ``shape`` into chunks of at most ``budget`` elements (whole trailing dims, a range of leading ones).

    Yields ``(flat start, flat stop, index tuple, chunk shape)``; the index arrays broadcast to the chunk shape
    and list its elements in row-major order.
    """
    if not shape:
        yield 0, 1, (), ()
        return
    if prod(shape) == 0:
        return
    k = len(shape)
    while k > 0 and prod(shape[k - 1:]) <= budget:
        k -= 1
    lead, trail = shape[:k], shape[k:]
    per = prod(trail)
    n_lead = prod(lead)
    step = max(1, budget // max(per, 1))
    t = len(trail)
    tidx = tuple(np.arange(s).reshape((1,) + (1,) * j + (s,) + (1,) * (t - j - 1)) for j, s in enumerate(trail))
    if not lead:
        yield 0, per, tuple(a.reshape(a.shape[1:]) for a in tidx), tuple(trail)
        return
    for a in range(0, n_lead, step):
        b = min(n_lead, a + step)
        multi = unravel(np.arange(a, b, dtype=np.int64), lead)
        lidx = tuple(m.reshape((b - a,) + (1,) * t) for m in multi)
        yield a * per, b * per, lidx + tidx, (b - a,) + tuple(trail)


# -- checking simulated outputs ------------------------------------------------------------------------------

@dataclass
class Report:
    """What one output check found: how many elements were held to which rule, the worst ratio |got-X|/B."""
    name: str
    exact_checked: int = 0          # order-insensitive elements: equal to the float32 reference
    bound_checked: int = 0          # order-sensitive elements: |got - X| <= B
    unchecked: int = 0              # B = inf (a discontinuity or overflow within reach): no claim
    worst_ratio: float = 0.0        # max |got - X| / B over bound-checked elements
    wrong: int = 0                  # elements that broke their rule
    failures: list = field(default_factory=list)     # the first few of them, in words

    @property
    def total(self) -> int:
        return self.exact_checked + self.bound_checked + self.unchecked

    def __str__(self):
        return (f"{self.name}: {self.exact_checked} exact, {self.bound_checked} within bound "
                f"(worst |err|/B {self.worst_ratio:.3g}), {self.unchecked} unclaimed, {self.wrong} wrong")


def _same_value(got, want):
    """Equal values (NaN equals NaN; -0 equals +0)."""
    if got.dtype.kind == "f" or want.dtype.kind == "f":
        g, w = got.astype(np.float64), want.astype(np.float64)
        return (g == w) | (np.isnan(g) & np.isnan(w))
    return got == want


@dataclass
class Expected:
    """What every element of one output must be, computed once and shared by all the plans checked.

    ``order``: None (every element is order-sensitive), False (none is) or a flat bool array; ``ref``: the
    float32 reference, kept only if some element is order-insensitive (it must be matched exactly); ``lo``/``hi``
    (None if no element is order-sensitive): the interval
    ``[X - B, X + B]`` rounded *outward* to float32 (a float32 result inside the real interval is inside the
    rounded one, and the rounded one is at most one float32 step wider), NaN where there is no claim.
    Past :data:`SPILL` elements ``order``, ``lo`` and ``hi`` are :class:`OnDisk` arrays.
    """
    name: str
    shape: tuple
    order: object
    ref: object
    lo: np.ndarray
    hi: np.ndarray


#: outputs with more elements than this keep their expected intervals in a temporary file, not in memory: a
#: 262-million-element log-softmax would otherwise hold 2 GB of intervals beside the plan being simulated
SPILL = 1 << 25


class OnDisk:
    """A flat array in a temporary file, written and read a slice at a time (the page cache, not the process,
    holds it).  Supports what :func:`check` needs: ``a[i:j]``, ``a[i]``, ``len``; ``np.asarray(a)`` reads
    it all (the oracle check, small outputs only)."""

    def __init__(self, n: int, dtype):
        self.n, self.dtype = n, np.dtype(dtype)
        self.file = tempfile.TemporaryFile()
        self.file.truncate(n * self.dtype.itemsize)

    def write(self, start: int, values) -> None:
        self.file.seek(start * self.dtype.itemsize)
        self.file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        if isinstance(key, slice):
            a, b, step = key.indices(self.n)
            assert step == 1, "OnDisk reads contiguous slices"
            out = np.empty(max(b - a, 0), self.dtype)
            self.file.seek(a * self.dtype.itemsize)
            assert self.file.readinto(out) == out.nbytes
            return out
        i = int(key) + (self.n if int(key) < 0 else 0)
        return self[i:i + 1][0]

    def __array__(self, dtype=None, copy=None):
        out = self[0:self.n]
        return out if dtype is None else out.astype(dtype)


def _store(n: int, dtype):
    """Where an :class:`Expected` array lives: memory, or a temporary file past :data:`SPILL` elements."""
    if n > SPILL:
        return OnDisk(n, dtype)
    return np.empty(n, dtype)


def _put(arr, start, stop, full, values) -> None:
    if isinstance(arr, OnDisk):
        arr.write(start, np.broadcast_to(values, full))
    else:
        arr[start:stop].reshape(full)[...] = values


def _outward(x64, direction):
    """float32 values beyond ``x64`` in ``direction`` (-inf: at most x64, +inf: at least x64): round to
    nearest, then one step further out (at most one float32 step wider than needed)."""
    x32 = np.array(x64, dtype=np.float32, ndmin=1)
    np.nextafter(x32, np.float32(direction), out=x32, where=np.isfinite(x32))   # an exact infinity stays
    return x32.reshape(np.shape(x64))


def expect(ev: ExactEvaluation, node, ref, everywhere: bool = False) -> Expected:
    """Evaluate ``node`` exactly, chunk by chunk, into an :class:`Expected`.

    ``everywhere``: compute the interval of order-insensitive elements too (to check the oracle itself
    against the float32 reference, :func:`check` with ``mode="oracle"``)."""
    n = node.size
    if not everywhere and not order_sensitive(node):   # nothing to bound: every element must equal the reference
        return Expected(node.name, tuple(node.shape), False, np.asarray(ref).reshape(-1), None, None)
    order, lo, hi = _store(n, bool), _store(n, np.float32), _store(n, np.float32)
    every = True
    with np.errstate(all="ignore"):
        for start, stop, full, v in ev.chunks(node):
            X, B = np.broadcast_to(v.X, full).astype(np.float64), np.asarray(v.B, np.float64)
            _put(order, start, stop, full, v.O)
            every = every and bool(np.all(v.O))
            low, high = _outward(X - B, -np.inf), _outward(X + B, np.inf)
            if not np.all(np.isfinite(B)):          # B inf or NaN: no claim
                none = np.broadcast_to(~np.isfinite(B), full)
                low, high = np.where(none, np.nan, low), np.where(none, np.nan, high)
            _put(lo, start, stop, full, low)
            _put(hi, start, stop, full, high)
    return Expected(node.name, tuple(node.shape), None if every else order,
                    None if every else np.asarray(ref).reshape(-1), lo, hi)


def check_oracle(exp: Expected, ref, name=None) -> Report:
    """The oracle checked against numpy: where no reduction order is involved the float32 reference makes
    exactly the roundings the bound allows for, so it must lie in ``[X - B, X + B]`` (an
    :func:`expect` made with ``everywhere=True``)."""
    rep = Report(name or f"reference/{exp.name}")
    r = np.asarray(ref).reshape(-1)
    O = np.ones(r.size, bool) if exp.order is None else (np.zeros(r.size, bool) if exp.order is False
                                                         else np.asarray(exp.order))
    lo, hi = np.asarray(exp.lo), np.asarray(exp.hi)
    claim = ~O & ~np.isnan(lo)
    with np.errstate(invalid="ignore"):
        g = r.astype(np.float32) if r.dtype.kind == "f" else r
        bad = claim & ~((lo <= g) & (g <= hi)) if r.dtype.kind == "f" else np.zeros(r.size, bool)
    rep.bound_checked = int(np.count_nonzero(claim))
    rep.wrong = int(np.count_nonzero(bad))
    for i in np.flatnonzero(bad)[:5]:
        rep.failures.append(f"element {tuple(int(x) for x in unravel(i, exp.shape))}: reference {r[i]!r} "
                            f"outside [{lo[i]!r}, {hi[i]!r}]")
    return rep


def check(exp: Expected, got, name=None, max_failures=5) -> Report:
    """Hold every element of ``got`` to its rule: equal to the float32 reference where no reduction order is
    involved, inside ``[X - B, X + B]`` where one is, anything where no claim is made."""
    rep = Report(name or exp.name)
    got = np.asarray(got).reshape(-1)
    size = int(np.prod(exp.shape))
    assert got.size == size, f"{rep.name}: {got.size} elements, expected {size}"
    step = 1 << 16                # chunks whose temporaries stay in a core's L2: 2.3x faster than 1 << 22
    with np.errstate(all="ignore"):
        for a in range(0, got.size, step):
            b = min(got.size, a + step)
            # float32 comparisons: lo and hi are float32 already and every float result is exact in float32
            g = got[a:b].astype(np.float32, copy=False) if got.dtype.kind == "f" else got[a:b]
            if exp.order is None:
                O = np.ones(b - a, bool)
            elif exp.order is False:
                O = np.zeros(b - a, bool)
            else:
                O = exp.order[a:b]
            if exp.lo is None:
                claim = np.zeros(b - a, bool)
                bad = claim
            else:
                lo, hi = exp.lo[a:b], exp.hi[a:b]
                claim = O & ~np.isnan(lo)
                bad = claim & ~((lo <= g) & (g <= hi))
            if exp.order is not None:
                bad = bad | (~O & ~_same_value(got[a:b], exp.ref[a:b]))
            rep.exact_checked += int(np.count_nonzero(~O))
            n_claim = int(np.count_nonzero(claim))
            rep.bound_checked += n_claim
            rep.unchecked += int(np.count_nonzero(O)) - n_claim
            if n_claim:
                # |g - X| / B = 1 - 2 * (distance to the nearer end) / (width), over finite intervals
                # (float32 differences keep their sign: rounding is monotone)
                inside = np.minimum(g - lo, hi - g)
                width = np.where(np.isfinite(hi - lo) & (hi > lo), hi - lo, np.inf)
                depth = np.where(claim, inside / width, np.inf)
                rep.worst_ratio = max(rep.worst_ratio, float(1 - 2 * np.nanmin(depth, initial=np.inf)))
            rep.wrong += int(np.count_nonzero(bad))
            for i in np.flatnonzero(bad)[:max(0, max_failures - len(rep.failures))]:
                where = tuple(int(x) for x in unravel(a + i, exp.shape))
                rule = (f"must lie in [{exp.lo[a + i]!r}, {exp.hi[a + i]!r}] (exact +- bound)" if O[i] else
                        f"must equal the float32 reference {exp.ref[a + i]!r}")
                rep.failures.append(f"element {where}: got {got[a + i]!r}, {rule}")
    return rep


def check_output(ev: ExactEvaluation, node, got, ref, name=None) -> Report:
    """:func:`expect` then :func:`check`, for one plan."""
    return check(expect(ev, node, ref), got, name or node.name)


# the rules for gather, dynamic slices, argmax/argmin and the library ops (sort, topk, reduce-window, scatter)
import error_bounds_ops as new_ops  # noqa: E402  (it imports Val, U... from this module)
