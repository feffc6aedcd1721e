"""The op table: one row per op, the single place that says what an op *is*.

Every reader of a Graph (the numpy reference, the compiler's analysis, the SIMT
model, the Numba code generator) looks an op up here instead of keeping its
own if-chain, so adding an op means adding one row (torch.fx / tinygrad style).

Each row gives
  * ``kind``: how the op moves data -- ``source`` (parameter, constant, iota),
    ``elementwise``, ``broadcast``, ``reduce``, ``layout`` (reshape, transpose,
    slice, concatenate: every output element is one input element),
    ``indexed`` (gather, dynamic-slice, dynamic-update-slice: one input element
    too, but where it is depends on index values read at run time), ``library``
    (dot, sort, topk, scatter, reduce-window: ops the stitcher cannot fuse, each
    planned as its own library kernel; ``boundary.py`` says why for each).
  * ``dependency``: the element-level dependency class from the AStitch paper
    between an op's operands and its result: ``one-to-one``, ``one-to-many``
    (broadcast), ``many-to-one`` (reduce); ``compute`` for dot; ``many-to-many``
    for the other library ops (an output element depends on a whole row, or
    on whichever updates land on it).
  * ``cost``: ``free`` (no instruction: bitcast-like), ``light``, ``expensive``
    (XLA's IsExpensive: division, transcendental functions...), ``compute``.
    The paper's fusion rules turn on light vs expensive.
  * ``flops``: arithmetic per output element (per input element for a reduce),
    an estimate used by the cost model to charge recomputation.
  * ``numpy``: ``f(node, *operand_arrays) -> array`` -- the op's meaning.
  * ``xla_cheap``: an expensive (SFU-class) op that XLA's ``IsExpensive`` nevertheless calls
    cheap on real types, so the fusion rules treat it as light (sine, cosine, tan: "cheap
    instructions for reals, but expensive for complex", with abs and sign, in
    ``instruction_fusion.cc``).  The cost model still charges it as SFU work.
  * ``inline``: the op never needs a kernel of its own: its value is recomputed
    wherever it is read, because no data moves (broadcast, reshape, bitcast,
    copy) or it is a source cheaper to recompute than to load (iota, a
    constant).  The compiler's clustering reads it (``analysis.is_free``).
  * ``is_view`` (derived): a one-operand ``broadcast`` or ``layout`` op (broadcast,
    reshape, bitcast, transpose, reverse, slice): each output element *is* one
    operand element at an index known when the kernel is written, so readers
    evaluate it as an index remap with no instruction.  ``pad`` (a second
    operand, the pad value) and ``concatenate`` (several) are layout ops but not
    views: an element may come from either operand.
  * ``shape``: the op's shape rule, a function of ``shape_rules`` (``elementwise``,
    ``broadcast``, ``reduce``...): what the result's shape and dtype are and what the
    operands must satisfy.  ``shapes.infer`` is this lookup plus the checks all ops share.
  * ``index``: the op's index rule, a function of ``index_rules``: which operand element
    an output element reads (``indexing.operand_index`` is this lookup).  None for ops
    that have no element-level reading (sources, library ops).  Indexed ops add a
    ``runtime_index`` rule, which reads the index values (the SIMT model has them).
  * ``tuple_result``: the op may give several results (an HLO tuple: argmax's value and
    index, sort's sorted operands, topk's values and indices); each becomes a node that
    picks one with the attr ``result``.
  * ``scalar``: for elementwise ops, a Python expression template over scalar
    operands ``{0} {1} {2}`` (and ``{bits}``, the integer width, for shifts)
    that code generators (Numba) emit per element; helpers named ``_x`` are
    defined by the backend's runtime prelude (gpu_backend/prelude.py), which
    gives them XLA's meaning (IEEE floor of inf, shifts past the width...).

Op names are XLA's HLO opcodes (``exponential``, ``sine``...), so HLO imports
without a translation table; ``OP_ALIASES`` accepts friendlier names.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from . import index_rules as at, shape_rules as rule
from .comparisons import COMPARE_DIRECTIONS, compare_scalar, np_compare  # noqa: F401 (the first two re-exported)
from .indexed import np_dynamic_slice, np_dynamic_update_slice, np_gather
from .reducers import REDUCERS, fold_tree
from .scatter import np_scatter
from .sorting import np_sort, np_topk
from .windows import np_reduce_window

try:  # scipy's erf is vectorised and exact; fall back to math.erf per element without it
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - exercised only where scipy is absent
    _erf_scalar = np.frompyfunc(math.erf, 1, 1)

    def _erf(x):
        return _erf_scalar(np.asarray(x, dtype=np.float64)).astype(np.float64)


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    dependency: str
    cost: str
    flops: int
    arity: Optional[int]
    numpy: Callable
    shape: Callable
    index: Optional[Callable] = None
    runtime_index: Optional[Callable] = None
    scalar: Optional[str] = None
    inline: bool = False
    xla_cheap: bool = False
    tuple_result: bool = False
    #: result types the scalar template already produces, so generated code needs no cast to the node's
    #: type: "float" (f32/f64 in, the same out: ``a + b``), "pred" (a Python bool: ``a < b``)
    uncast: tuple = ()

    @property
    def is_view(self) -> bool:
        return self.kind in ("broadcast", "layout") and self.arity == 1

    @property
    def is_elementwise(self) -> bool:
        return self.kind == "elementwise"

    @property
    def is_expensive(self) -> bool:
        return self.cost == "expensive"


def _quiet(fn):
    """Run numpy math with IEEE semantics: inf and NaN propagate, no warnings (like XLA)."""
    def wrapped(node, *args):
        with np.errstate(all="ignore"):
            return fn(node, *args)
    return wrapped


def _unary(f):
    return _quiet(lambda node, x: f(x))


def _binary(f):
    return _quiet(lambda node, a, b: f(a, b))


def _int_divide(a, b):
    """C-style integer division (truncate toward zero), as XLA does; x/0 gives -1, INT_MIN/-1 gives INT_MIN."""
    safe_b = np.where(b == 0, 1, b).astype(a.dtype)
    q = a // safe_b                                     # floor; INT_MIN // -1 wraps to INT_MIN
    q = np.where((a - q * safe_b != 0) & ((a < 0) != (safe_b < 0)), q + 1, q)   # floor -> toward zero
    return np.where(b == 0, -1, q).astype(a.dtype)


def _divide(a, b):
    return _int_divide(a, b) if a.dtype.kind in "iu" else a / b


def _remainder(a, b):
    if a.dtype.kind in "iu":
        safe_b = np.where(b == 0, 1, b)
        return np.where(b == 0, a, np.fmod(a, safe_b)).astype(a.dtype)
    return np.fmod(a, b)


def _round_afz(x):
    """Round half away from zero (XLA round-nearest-afz); numpy's round is half-to-even.

    Split off the exact fraction instead of computing floor(|x| + 0.5): that sum rounds
    up for 0.49999997 and for odd integers above 2**23 in float32.
    """
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(x.dtype, copy=False)


def _logistic(x):
    e = np.exp(-np.abs(x))
    one = x.dtype.type(1)
    return np.where(x >= 0, one / (one + e), e / (one + e))


def _erf_typed(x):
    return _erf(x.astype(np.float64)).astype(x.dtype)


def _power(a, b):
    if a.dtype.kind in "iu":   # XLA: a negative exponent gives 0, except 1 for base 1
        return np.where(b < 0, (a == 1).astype(a.dtype), np.power(a, np.maximum(b, 0)))
    return np.power(a, b)


def _sign(x):
    return np.sign(x)


def _clamp(node, lo, x, hi):
    return np.minimum(np.maximum(x, lo), hi)


def _select(node, p, a, b):
    return np.where(p, a, b)


# -- data-movement ops -------------------------------------------------------

def _broadcast(node, x):
    """XLA broadcast: operand dim i becomes output dim ``dimensions[i]``."""
    dims = node.attrs["dimensions"]
    view_shape = [1] * len(node.shape)
    for i, d in enumerate(dims):
        view_shape[d] = x.shape[i]
    order = np.argsort(dims)                      # dimensions may be unsorted: transpose first
    x = np.transpose(x, order) if len(dims) > 1 else x
    return np.broadcast_to(x.reshape(view_shape), node.shape)


def _reshape(node, x):
    return x.reshape(node.shape)


def _transpose(node, x):
    return np.transpose(x, node.attrs["permutation"])


def _slice(node, x):
    index = tuple(slice(s, l, st) for s, l, st in zip(node.attrs["starts"], node.attrs["limits"], node.attrs["strides"]))
    return x[index]


def _concatenate(node, *xs):
    return np.concatenate(xs, axis=node.attrs["dimension"])


def _pad(node, x, value):
    out = np.full(node.shape, value, dtype=x.dtype)
    lows, highs, interiors = node.attrs["low"], node.attrs["high"], node.attrs["interior"]
    if any(interiors) or any(l < 0 for l in lows) or any(h < 0 for h in highs):
        from ..errors import AStitchError
        raise AStitchError(f"{node.name}: pad with interior or negative padding is not supported; "
                           "use slice and concatenate instead")
    index = tuple(slice(l, l + s) for l, s in zip(lows, x.shape))
    out[index] = x
    return out


def _reverse(node, x):
    return np.flip(x, axis=tuple(node.attrs["dimensions"]))


def _shift_left(a, b):
    """XLA shifts read the amount as unsigned: negative or >= bit width shifts everything out."""
    bits = a.dtype.itemsize * 8
    return np.where((b < 0) | (b >= bits), 0, np.left_shift(a, np.clip(b, 0, bits - 1))).astype(a.dtype)


def _shift_right_arithmetic(a, b):
    bits = a.dtype.itemsize * 8
    return np.right_shift(a, np.where((b < 0) | (b >= bits), bits - 1, b)).astype(a.dtype)


def _shift_right_logical(a, b):
    unsigned = a.view(np.dtype(a.dtype.str.replace("i", "u")))
    bits = a.dtype.itemsize * 8
    out = np.where((b < 0) | (b >= bits), 0, unsigned >> np.clip(b, 0, bits - 1).astype(unsigned.dtype))
    return out.astype(unsigned.dtype).view(a.dtype)


def _iota(node):
    d = node.attrs["iota_dimension"]
    shape = [1] * len(node.shape)
    shape[d] = node.shape[d]
    return np.broadcast_to(np.arange(node.shape[d]).reshape(shape), node.shape)


def _constant(node):
    return node.attrs["value"]


def _parameter(node):  # values come from the caller's inputs, never from the table
    raise RuntimeError("parameters are bound by the interpreter")


@_quiet
def _reduce(node, *args):
    """XLA reduce: fold ``inputs`` over ``dimensions`` with the reducer, then fold the init values in."""
    red = REDUCERS[node.attrs["reducer"]]
    n = len(args) // 2
    xs, inits = args[:n], args[n:]
    dims = tuple(node.attrs["dimensions"])
    result = node.attrs.get("result", 0)
    if any(xs[0].shape[d] == 0 for d in dims):
        # XLA: a reduce over nothing is its init value (max has no numpy identity, so say it directly)
        return np.full(node.shape, inits[result], dtype=xs[result].dtype)
    if red.values == 1 and xs[0].dtype != np.bool_:
        ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[red.name]
        part = ufunc.reduce(xs[0], axis=dims, dtype=xs[0].dtype) if dims else xs[0]
        return ufunc(part, inits[0])
    kept = [d for d in range(xs[0].ndim) if d not in dims]
    n = int(np.prod([xs[0].shape[d] for d in dims], dtype=np.int64))   # not -1: kept dims may be empty
    flat = tuple(np.transpose(x, kept + list(dims)).reshape([x.shape[d] for d in kept] + [n]) for x in xs)
    folded = fold_tree(flat, -1, red.combine, red.identity([x.dtype for x in xs]))
    folded = red.combine(folded, tuple(np.broadcast_to(i, folded[0].shape) for i in inits))
    return folded[result]


def _dot(node, a, b):
    """dot_general: output dims are batch dims, then lhs free dims, then rhs free dims."""
    lb, lc = node.attrs["lhs_batch_dims"], node.attrs["lhs_contracting_dims"]
    rb, rc = node.attrs["rhs_batch_dims"], node.attrs["rhs_contracting_dims"]
    lf = [d for d in range(a.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(b.ndim) if d not in rb and d not in rc]
    a2 = np.transpose(a, list(lb) + lf + list(lc))
    b2 = np.transpose(b, list(rb) + list(rc) + rf)
    batch = [a.shape[d] for d in lb]
    m, k, n = (int(np.prod([a.shape[d] for d in lf])), int(np.prod([a.shape[d] for d in lc])),
               int(np.prod([b.shape[d] for d in rf])))
    acc = np.float64 if a.dtype == np.float64 else np.float32
    out = np.matmul(a2.reshape(batch + [m, k]).astype(acc), b2.reshape(batch + [k, n]).astype(acc))
    return out.reshape(node.shape)


def _row(name, kind, dependency, cost, flops, arity, fn, scalar=None, inline=False, xla_cheap=False,
         shape=None, index=None, runtime_index=None, tuple_result=False, uncast=()):
    if kind == "elementwise":   # unless a row names its own: one shape and one dtype, read at the output's index
        shape, index = shape or rule.elementwise, index or at.same_index
    assert shape is not None, f"op row {name!r} names no shape rule"
    return OpDef(name, kind, dependency, cost, flops, arity, fn, shape, index, runtime_index, scalar, inline,
                 xla_cheap, tuple_result, tuple(uncast))


E, L, X = "elementwise", "light", "expensive"
_ROWS = [
    # sources
    _row("parameter", "source", "source", "free", 0, 0, _parameter, inline=True, shape=rule.declared_source),
    _row("constant", "source", "source", "free", 0, 0, _constant, inline=True, shape=rule.constant),
    _row("iota", "source", "source", "light", 1, 0, _iota, inline=True, shape=rule.iota),
    # unary elementwise
    _row("negate", E, "one-to-one", L, 1, 1, _unary(np.negative), "(-{0})", uncast=("float",)),
    _row("abs", E, "one-to-one", L, 1, 1, _unary(np.abs), "abs({0})", uncast=("float",)),
    _row("sign", E, "one-to-one", L, 1, 1, _unary(_sign), "_sign({0})"),
    _row("exponential", E, "one-to-one", X, 8, 1, _unary(np.exp), "math.exp({0})"),
    _row("exponential-minus-one", E, "one-to-one", X, 8, 1, _unary(np.expm1), "math.expm1({0})"),
    _row("log", E, "one-to-one", X, 8, 1, _unary(np.log), "_log({0})"),
    _row("log-plus-one", E, "one-to-one", X, 8, 1, _unary(np.log1p), "_log1p({0})"),
    _row("sqrt", E, "one-to-one", X, 4, 1, _unary(np.sqrt), "_sqrt({0})"),
    _row("rsqrt", E, "one-to-one", X, 4, 1, _unary(lambda x: x.dtype.type(1) / np.sqrt(x)), "_rsqrt({0})"),
    _row("cbrt", E, "one-to-one", X, 8, 1, _unary(np.cbrt), "_cbrt({0})"),
    _row("tanh", E, "one-to-one", X, 12, 1, _unary(np.tanh), "math.tanh({0})"),
    _row("logistic", E, "one-to-one", X, 10, 1, _unary(_logistic), "_logistic({0})"),
    _row("erf", E, "one-to-one", X, 16, 1, _unary(_erf_typed), "math.erf({0})"),
    _row("floor", E, "one-to-one", L, 1, 1, _unary(np.floor), "_floor({0})"),
    _row("ceil", E, "one-to-one", L, 1, 1, _unary(np.ceil), "_ceil({0})"),
    _row("round-nearest-afz", E, "one-to-one", L, 2, 1, _unary(_round_afz), "_round_afz({0})"),
    _row("round-nearest-even", E, "one-to-one", L, 2, 1, _unary(np.rint), "_round_even({0})"),
    _row("sine", E, "one-to-one", X, 12, 1, _unary(np.sin), "math.sin({0})", xla_cheap=True),
    _row("cosine", E, "one-to-one", X, 12, 1, _unary(np.cos), "math.cos({0})", xla_cheap=True),
    _row("tan", E, "one-to-one", X, 16, 1, _unary(np.tan), "math.tan({0})", xla_cheap=True),
    _row("not", E, "one-to-one", L, 1, 1, _unary(lambda x: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)),
         "_not({0})", uncast=("pred",)),
    _row("is-finite", E, "one-to-one", L, 1, 1, _unary(np.isfinite), "math.isfinite({0})", shape=rule.predicate, uncast=("pred",)),
    _row("convert", E, "one-to-one", L, 1, 1, lambda node, x: x, "{0}", shape=rule.convert),   # the cast to node.dtype does it
    _row("copy", E, "one-to-one", "free", 0, 1, lambda node, x: x, "{0}", inline=True, uncast=("float",)),
    # binary elementwise
    _row("add", E, "one-to-one", L, 1, 2, _binary(np.add), "({0} + {1})", uncast=("float",)),
    _row("subtract", E, "one-to-one", L, 1, 2, _binary(np.subtract), "({0} - {1})", uncast=("float",)),
    _row("multiply", E, "one-to-one", L, 1, 2, _binary(np.multiply), "({0} * {1})", uncast=("float",)),
    _row("divide", E, "one-to-one", X, 4, 2, _binary(_divide), "_divide({0}, {1})", uncast=("float",)),
    _row("power", E, "one-to-one", X, 16, 2, _binary(_power), "_power({0}, {1})"),
    _row("maximum", E, "one-to-one", L, 1, 2, _binary(np.maximum), "_max({0}, {1})", uncast=("float",)),
    _row("minimum", E, "one-to-one", L, 1, 2, _binary(np.minimum), "_min({0}, {1})", uncast=("float",)),
    _row("remainder", E, "one-to-one", X, 4, 2, _binary(_remainder), "_remainder({0}, {1})"),
    _row("atan2", E, "one-to-one", X, 16, 2, _binary(np.arctan2), "math.atan2({0}, {1})"),
    _row("and", E, "one-to-one", L, 1, 2, _binary(lambda a, b: a & b), "({0} & {1})", uncast=("pred",)),
    _row("or", E, "one-to-one", L, 1, 2, _binary(lambda a, b: a | b), "({0} | {1})", uncast=("pred",)),
    _row("xor", E, "one-to-one", L, 1, 2, _binary(lambda a, b: a ^ b), "({0} ^ {1})", uncast=("pred",)),
    _row("shift-left", E, "one-to-one", L, 1, 2, _binary(_shift_left), "_shl({0}, {1}, {bits})"),
    _row("shift-right-arithmetic", E, "one-to-one", L, 1, 2, _binary(_shift_right_arithmetic), "_sra({0}, {1}, {bits})"),
    _row("shift-right-logical", E, "one-to-one", L, 1, 2, _binary(_shift_right_logical), "_srl({0}, {1}, {bits})"),
    _row("compare", E, "one-to-one", L, 1, 2, _quiet(np_compare), None, shape=rule.compare, uncast=("pred",)),   # template depends on direction, type
    # ternary elementwise
    _row("select", E, "one-to-one", L, 1, 3, _select, "({1} if {0} else {2})", shape=rule.select, uncast=("float", "pred")),
    _row("clamp", E, "one-to-one", L, 2, 3, _quiet(_clamp), "_min(_max({1}, {0}), {2})", shape=rule.clamp, uncast=("float",)),
    # data movement
    _row("broadcast", "broadcast", "one-to-many", "free", 0, 1, _broadcast, inline=True,
         shape=rule.broadcast, index=at.broadcast),
    _row("reshape", "layout", "one-to-one", "free", 0, 1, _reshape, inline=True,
         shape=rule.same_elements, index=at.same_flat_position),
    _row("bitcast", "layout", "one-to-one", "free", 0, 1, _reshape, inline=True,
         shape=rule.same_elements, index=at.same_flat_position),
    _row("transpose", "layout", "one-to-one", "free", 0, 1, _transpose, shape=rule.transpose, index=at.transpose),
    _row("slice", "layout", "one-to-one", "free", 0, 1, _slice, shape=rule.slice_, index=at.slice_),
    _row("concatenate", "layout", "one-to-one", "free", 0, None, _concatenate,
         shape=rule.concatenate, index=at.concatenate),
    _row("reverse", "layout", "one-to-one", "free", 0, 1, _reverse, shape=rule.reverse, index=at.reverse),
    _row("pad", "layout", "one-to-one", "free", 0, 2, _pad, shape=rule.pad, index=at.pad),
    # indexed loads (runtime indices): stitched like layout ops
    _row("gather", "indexed", "one-to-one", L, 2, 2, np_gather, shape=rule.gather, index=at.at_runtime,
         runtime_index=at.gather_at_runtime),
    _row("dynamic-slice", "indexed", "one-to-one", L, 2, None, np_dynamic_slice,
         shape=rule.dynamic_slice, index=at.at_runtime,
         runtime_index=at.dynamic_slice_at_runtime),
    _row("dynamic-update-slice", "indexed", "one-to-one", L, 2, None, np_dynamic_update_slice,
         shape=rule.dynamic_update_slice, index=at.update_or_runtime,
         runtime_index=at.update_at_runtime),
    # reduction (several inputs and inits for argmax/argmin)
    _row("reduce", "reduce", "many-to-one", L, 1, None, _reduce, shape=rule.reduce, index=at.reduce_input,
         tuple_result=True),
    # library kernels: the stitcher plans around them (boundary.py says what each is)
    _row("dot", "library", "compute", "compute", 2, 2, _dot, shape=rule.dot),
    _row("sort", "library", "many-to-many", L, 8, None, np_sort, shape=rule.sort, tuple_result=True),
    _row("topk", "library", "many-to-many", L, 8, 1, np_topk, shape=rule.topk, tuple_result=True),
    _row("scatter", "library", "many-to-many", L, 1, 3, np_scatter, shape=rule.scatter),
    _row("reduce-window", "library", "many-to-many", L, 1, 2, np_reduce_window, shape=rule.reduce_window),
]

OPS: dict[str, OpDef] = {row.name: row for row in _ROWS}

#: friendlier names accepted by the builder API
OP_ALIASES = {"exp": "exponential", "expm1": "exponential-minus-one", "log1p": "log-plus-one",
              "sin": "sine", "cos": "cosine", "round": "round-nearest-afz", "neg": "negate",
              "sub": "subtract", "mul": "multiply", "div": "divide", "pow": "power", "max": "maximum",
              "min": "minimum", "sigmoid": "logistic", "rem": "remainder"}

def op_def(name: str) -> OpDef:
    """Look an op up by HLO opcode or alias; unknown ops raise AStitchError listing the table."""
    from ..errors import AStitchError
    name = OP_ALIASES.get(name, name)
    if name not in OPS:
        raise AStitchError(f"unsupported op {name!r}: astitch-sim knows {', '.join(sorted(OPS))}")
    return OPS[name]
