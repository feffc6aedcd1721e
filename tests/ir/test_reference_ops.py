"""The numpy reference, op by op, against direct numpy (or plain Python) computations.

Every op of the op table gets at least one test here (``test_every_op_is_covered``
keeps it that way).  Where an op has XLA semantics that numpy does not share
(integer division truncates toward zero, round-half-away-from-zero, saturating
float->int convert, bf16 rounding...) the expected values are computed
independently, element by element, in Python or float64.
"""
from __future__ import annotations

import math
import struct
from itertools import product

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import astitch_sim as asim
from astitch_sim import AStitchError, Graph
from astitch_sim.ir.dtypes import xla_name
from astitch_sim.ir.ops import COMPARE_DIRECTIONS, OPS
from astitch_sim.ir.reference import bind_inputs

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COVERED: set[str] = set()


def covers(*ops):
    COVERED.update(ops)
    return lambda f: f


def run_op(op, *arrays, dtypes=None, **attrs):
    """Build ``op(p0, p1, ...)`` over parameters holding ``arrays`` and run the reference."""
    g = Graph(op)
    params = []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        dt = dtypes[i] if dtypes else xla_name(a.dtype)
        params.append(g.parameter(f"p{i}", a.shape, dt))
    out = g.add_node(op, params, **attrs)
    g.set_outputs(out)
    (res,) = asim.reference(g, list(arrays))
    assert res.shape == out.shape
    return res


def shapes(min_dims=0, max_dims=3, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=max_side)


def f32_arrays(shape, lo=-10.0, hi=10.0, allow_special=False):
    if allow_special:
        return hnp.arrays(np.float32, shape, elements=st.floats(width=32))
    lo, hi = float(np.float32(lo)), float(np.float32(hi))       # hypothesis wants float32-exact bounds
    return hnp.arrays(np.float32, shape, elements=st.floats(lo, hi, width=32, allow_nan=False, allow_infinity=False))


def i32_arrays(shape, lo=-2**31, hi=2**31 - 1):
    return hnp.arrays(np.int32, shape, elements=st.integers(lo, hi))


def f64_close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol,
                               equal_nan=True)


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-30, 1e30], np.float32)

# -- unary float ops ------------------------------------------------------------------

_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def _afz64(x):
    return np.array([math.copysign(math.floor(abs(v) + 0.5), v) if math.isfinite(v) else v
                     for v in x.astype(np.float64).ravel()]).reshape(x.shape)


#: op -> (float64 reference, (lo, hi) of the random finite inputs)
UNARY = {
    "negate": (np.negative, (-1e30, 1e30)),
    "abs": (np.abs, (-1e30, 1e30)),
    "sign": (np.sign, (-1e30, 1e30)),
    "exponential": (np.exp, (-80, 80)),
    "exponential-minus-one": (np.expm1, (-80, 80)),
    "log": (np.log, (1e-30, 1e30)),
    "log-plus-one": (np.log1p, (-0.999, 1e30)),
    "sqrt": (np.sqrt, (0, 1e30)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (1e-30, 1e30)),
    "cbrt": (np.cbrt, (-1e30, 1e30)),
    "tanh": (np.tanh, (-20, 20)),
    "logistic": (lambda x: 1 / (1 + np.exp(-x)), (-80, 80)),
    "erf": (_erf64, (-6, 6)),
    "floor": (np.floor, (-1e9, 1e9)),
    "ceil": (np.ceil, (-1e9, 1e9)),
    "round-nearest-afz": (_afz64, (-1e9, 1e9)),
    "round-nearest-even": (np.rint, (-1e9, 1e9)),
    "sine": (np.sin, (-50, 50)),
    "cosine": (np.cos, (-50, 50)),
    "tan": (np.tan, (-1.5, 1.5)),
}
COVERED.update(UNARY)


@FAST
@given(st.sampled_from(sorted(UNARY)), st.data())
def test_unary_float_ops_match_float64(op, data):
    ref, (lo, hi) = UNARY[op]
    x = data.draw(f32_arrays(data.draw(shapes()), lo, hi))
    got = run_op(op, x)
    assert got.dtype == np.float32
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    f64_close(got, want, rtol=2e-6 if op != "tan" else 1e-5, atol=1e-7)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_float_ops_propagate_nan_and_inf(op):
    ref = UNARY[op][0]
    got = run_op(op, SPECIALS)
    with np.errstate(all="ignore"):
        want = ref(SPECIALS.astype(np.float64)).astype(np.float32)
    assert np.isnan(got[0]), f"{op}(nan) must be nan"
    np.testing.assert_allclose(got, want, rtol=2e-6, equal_nan=True)


def test_round_half_away_from_zero_edge_cases():
    x = np.array([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 8388609, -8388609, 2**24 + 2], np.float32)
    np.testing.assert_array_equal(run_op("round-nearest-afz", x),
                                  np.array([1, -1, 2, -2, 3, -3, 0, 0, 8388609, -8388609, 2**24 + 2], np.float32))
    np.testing.assert_array_equal(run_op("round-nearest-even", x),
                                  np.array([0, 0, 2, -2, 2, -2, 0, 0, 8388609, -8388609, 2**24 + 2], np.float32))


@covers("is-finite")
def test_is_finite():
    got = run_op("is-finite", SPECIALS)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, np.isfinite(SPECIALS))


@covers("not")
def test_not_is_logical_on_pred_and_bitwise_on_ints():
    p = np.array([[True, False], [False, True]])
    np.testing.assert_array_equal(run_op("not", p), ~p)
    i = np.array([0, 1, -1, 2**31 - 1, -2**31], np.int32)
    np.testing.assert_array_equal(run_op("not", i), np.array([-1, -2, 0, -2**31, 2**31 - 1], np.int32))


@covers("copy")
@FAST
@given(st.data())
def test_copy_is_identity(data):
    x = data.draw(f32_arrays(data.draw(shapes()), allow_special=True))
    np.testing.assert_array_equal(run_op("copy", x), x)


@covers("abs", "negate", "sign")
def test_integer_unary_ops():
    i = np.array([0, 5, -5, 2**31 - 1, -2**31], np.int32)
    np.testing.assert_array_equal(run_op("abs", i), np.array([0, 5, 5, 2**31 - 1, -2**31], np.int32))   # wraps
    np.testing.assert_array_equal(run_op("negate", i), np.array([0, -5, 5, -2**31 + 1, -2**31], np.int32))
    np.testing.assert_array_equal(run_op("sign", i), np.array([0, 1, -1, 1, -1], np.int32))


# -- binary float ops ---------------------------------------------------------------

BINARY_F = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "power": np.power, "remainder": np.fmod, "atan2": np.arctan2,
    "maximum": lambda a, b: np.where(np.isnan(a) | np.isnan(b), np.nan, np.maximum(a, b)),
    "minimum": lambda a, b: np.where(np.isnan(a) | np.isnan(b), np.nan, np.minimum(a, b)),
}
COVERED.update(BINARY_F)


@FAST
@given(st.sampled_from(sorted(BINARY_F)), st.data())
def test_binary_float_ops_match_float64(op, data):
    shape = data.draw(shapes())
    a = data.draw(f32_arrays(shape, -10, 10))
    b = data.draw(f32_arrays(shape, -10, 10))
    if op == "power":
        a = np.abs(a)                    # negative ** fractional is nan in both; keep the check meaningful
    got = run_op(op, a, b)
    with np.errstate(all="ignore"):
        want = BINARY_F[op](a.astype(np.float64), b.astype(np.float64))
        want = want.astype(np.float32).astype(np.float64)     # what a correctly rounded f32 op gives
    if op == "remainder":
        np.testing.assert_array_equal(got, want.astype(np.float32))   # fmod is exact
    else:
        f64_close(got, want, rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("op", sorted(BINARY_F))
def test_binary_float_ops_propagate_nan(op):
    a = np.array([np.nan, 1.0, np.nan, np.inf], np.float32)
    b = np.array([1.0, np.nan, np.nan, np.nan], np.float32)
    got = run_op(op, a, b)
    if op == "power":
        assert got[1] == 1.0 and np.isnan(got[[0, 2, 3]]).all()    # IEEE pow(1, nan) = 1, as C and XLA
    else:
        assert np.isnan(got).all(), f"{op} must propagate NaN, got {got}"


def test_float_division_by_zero_gives_ieee_results():
    got = run_op("divide", np.array([1, -1, 0], np.float32), np.zeros(3, np.float32))
    np.testing.assert_array_equal(got[:2], [np.inf, -np.inf])
    assert np.isnan(got[2])


# -- integer binary ops: C / XLA semantics, computed in Python ints -----------------------

def _wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def _c_div(a: int, b: int) -> int:
    if b == 0:
        return -1                             # XLA: x / 0 == -1
    q = abs(a) // abs(b)
    return _wrap32(q if (a < 0) == (b < 0) else -q)    # INT_MIN / -1 wraps to INT_MIN


def _c_rem(a: int, b: int) -> int:
    if b == 0:
        return a                              # XLA: x % 0 == x
    return _wrap32(a - b * int(math.copysign(abs(a) // abs(b), 1 if (a < 0) == (b < 0) else -1)))


def _int_pow(a: int, b: int) -> int:
    if b < 0:
        return 1 if a == 1 else 0             # XLA's EmitIntegerPow
    return _wrap32(pow(a, b, 2**32))


def _shl(a, b):
    return _wrap32(a << b) if 0 <= b < 32 else 0


def _sra(a, b):
    return a >> b if 0 <= b < 32 else (-1 if a < 0 else 0)


def _srl(a, b):
    return _wrap32((a % 2**32) >> b) if 0 <= b < 32 else 0


BINARY_I = {
    "add": lambda a, b: _wrap32(a + b), "subtract": lambda a, b: _wrap32(a - b),
    "multiply": lambda a, b: _wrap32(a * b), "divide": _c_div, "remainder": _c_rem,
    "maximum": max, "minimum": min, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b, "power": _int_pow,
    "shift-left": _shl, "shift-right-arithmetic": _sra, "shift-right-logical": _srl,
}
COVERED.update(BINARY_I)

INT_EDGES = [0, 1, -1, 2, -2, 3, -3, 7, -7, 31, 32, 33, 2**31 - 1, -2**31]


def _int_operands(op):
    small = op in ("power",) or op.startswith("shift")
    lo, hi = ((-3, 40) if small else (-2**31, 2**31 - 1))
    return st.one_of(st.integers(lo, hi), st.sampled_from(INT_EDGES))


@FAST
@given(st.sampled_from(sorted(BINARY_I)), st.data())
def test_integer_binary_ops_follow_xla(op, data):
    n = data.draw(st.integers(1, 12))
    a = np.array(data.draw(st.lists(st.one_of(st.integers(-2**31, 2**31 - 1), st.sampled_from(INT_EDGES)),
                                    min_size=n, max_size=n)), np.int32)
    b = np.array(data.draw(st.lists(_int_operands(op), min_size=n, max_size=n)), np.int32)
    got = run_op(op, a, b)
    want = np.array([BINARY_I[op](int(x), int(y)) for x, y in zip(a, b, strict=True)], np.int64).astype(np.int32)
    np.testing.assert_array_equal(got, want, err_msg=f"{op}({a}, {b})")


def test_integer_division_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 1, -1, -2**31, -2**31, -2**31, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, 3, -1, 2, 3, 0], np.int32)
    np.testing.assert_array_equal(run_op("divide", a, b),
                                  np.array([3, -3, -3, 3, 0, 0, -2**31, -2**30, -715827882, -1], np.int32))
    np.testing.assert_array_equal(run_op("remainder", a, b),
                                  np.array([1, -1, 1, -1, 1, -1, 0, 0, -2, 5], np.int32))


@covers("and", "or", "xor")
def test_logical_ops_on_pred():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    np.testing.assert_array_equal(run_op("and", a, b), a & b)
    np.testing.assert_array_equal(run_op("or", a, b), a | b)
    np.testing.assert_array_equal(run_op("xor", a, b), a ^ b)


# -- compare, select, clamp ---------------------------------------------------------------

_DIRS = {"EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "LT": lambda a, b: a < b,
         "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b, "GE": lambda a, b: a >= b}


@covers("compare")
@pytest.mark.parametrize("direction", COMPARE_DIRECTIONS)
def test_compare_all_directions_with_nan(direction):
    vals = [np.nan, -np.inf, -1.0, 0.0, -0.0, 1.0, np.inf]
    a = np.array([x for x, _ in product(vals, vals)], np.float32)
    b = np.array([y for _, y in product(vals, vals)], np.float32)
    got = run_op("compare", a, b, direction=direction)
    assert got.dtype == np.bool_
    want = np.array([_DIRS[direction](float(x), float(y)) for x, y in zip(a, b, strict=True)])   # Python: NaN compares false
    np.testing.assert_array_equal(got, want)
    ia, ib = np.array([-2**31, -1, 0, 5, 5], np.int32), np.array([2**31 - 1, -1, 1, 5, 4], np.int32)
    np.testing.assert_array_equal(run_op("compare", ia, ib, direction=direction),
                                  [_DIRS[direction](int(x), int(y)) for x, y in zip(ia, ib, strict=True)])


def test_compare_needs_a_direction():
    with pytest.raises(AStitchError, match="direction"):
        run_op("compare", np.zeros(2, np.float32), np.zeros(2, np.float32), direction="XX")


@covers("select")
@FAST
@given(st.data())
def test_select(data):
    shape = data.draw(shapes())
    p = data.draw(hnp.arrays(np.bool_, shape))
    a = data.draw(f32_arrays(shape, allow_special=True))
    b = data.draw(f32_arrays(shape, allow_special=True))
    got = run_op("select", p, a, b)
    want = np.array([x if c else y for c, x, y in zip(p.ravel(), a.ravel(), b.ravel(), strict=True)], np.float32).reshape(shape)
    np.testing.assert_array_equal(got, want)


@covers("clamp")
@FAST
@given(st.data())
def test_clamp_with_array_and_scalar_bounds(data):
    shape = data.draw(shapes(min_dims=1))
    x = data.draw(f32_arrays(shape, allow_special=True))
    lo = data.draw(f32_arrays(shape, -5, 0))
    hi = data.draw(f32_arrays(shape, 0, 5))

    def clamp1(lo_, v, hi_):
        return v if math.isnan(v) else min(max(v, lo_), hi_)
    want = np.array([clamp1(l_, v, h_) for l_, v, h_ in zip(lo.ravel(), x.ravel(), hi.ravel(), strict=True)],
                    np.float32).reshape(shape)
    np.testing.assert_array_equal(run_op("clamp", lo, x, hi), want)
    slo, shi = np.float32(-1), np.float32(2)
    want = np.array([clamp1(-1, v, 2) for v in x.ravel()], np.float32).reshape(shape)
    np.testing.assert_array_equal(run_op("clamp", slo, x, shi), want)


# -- convert and bf16 -------------------------------------------------------------------

def _bf16_round(v: float) -> float:
    """Round a float32 value to bfloat16, ties to even, by hand on its bits."""
    if math.isnan(v):
        return v
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    upper, lower = bits >> 16, bits & 0xFFFF
    if lower > 0x8000 or (lower == 0x8000 and upper & 1):
        upper += 1
    return struct.unpack("<f", struct.pack("<I", (upper << 16) & 0xFFFFFFFF))[0]


def _f2i(v: float, lo: int, hi: int) -> int:
    if math.isnan(v):
        return 0
    if math.isinf(v):
        return hi if v > 0 else lo
    return min(max(math.trunc(v), lo), hi)


@covers("convert")
@FAST
@given(st.data())
def test_convert_float_to_int_truncates_and_saturates(data):
    x = data.draw(hnp.arrays(np.float32, data.draw(shapes(min_dims=1)),
                             elements=st.one_of(st.floats(-3e9, 3e9, width=32), st.sampled_from([np.nan, np.inf]))))
    g = Graph("cv")
    p = g.parameter("x", x.shape, "f32")
    g.set_outputs(g.convert(p, "s32"), g.convert(p, "u8"), g.convert(p, "pred"))
    s32, u8, pred = asim.reference(g, [x])
    assert s32.dtype == np.int32 and u8.dtype == np.uint8 and pred.dtype == np.bool_
    flat = [float(v) for v in x.ravel()]
    np.testing.assert_array_equal(s32, np.array([_f2i(v, -2**31, 2**31 - 1) for v in flat]).reshape(x.shape))
    np.testing.assert_array_equal(u8, np.array([_f2i(v, 0, 255) for v in flat]).reshape(x.shape))
    np.testing.assert_array_equal(pred, np.array([v != 0 for v in flat]).reshape(x.shape))   # nan -> true


def test_convert_int_and_pred_to_float_and_narrow_ints():
    i = np.array([0, 1, -1, 16777217, 2**31 - 1, 300, -129], np.int32)
    g = Graph("cv")
    p = g.parameter("i", i.shape, "s32")
    g.set_outputs(g.convert(p, "f32"), g.convert(p, "s8"), g.convert(p, "pred"), g.convert(p, "f16"))
    f, s8, pr, f16 = asim.reference(g, [i])
    np.testing.assert_array_equal(f, np.array([float(v) for v in i], np.float32))     # 16777217 -> 16777216
    np.testing.assert_array_equal(s8, np.array([((int(v) + 128) % 256) - 128 for v in i], np.int8))   # wraps
    np.testing.assert_array_equal(pr, i != 0)
    assert f16.dtype == np.float16 and f16[4] == np.inf
    b = np.array([True, False])
    g = Graph("cv2")
    q = g.parameter("b", (2,), "pred")
    g.set_outputs(g.convert(q, "f32"), g.convert(q, "s32"))
    bf, bi = asim.reference(g, [b])
    np.testing.assert_array_equal(bf, [1.0, 0.0])
    np.testing.assert_array_equal(bi, [1, 0])


@FAST
@given(hnp.arrays(np.float32, st.integers(1, 20), elements=st.floats(width=32)))
def test_convert_to_bf16_rounds_to_nearest_even(x):
    g = Graph("bf")
    p = g.parameter("x", x.shape, "f32")
    g.set_outputs(g.convert(p, "bf16"))
    (got,) = asim.reference(g, [x])
    want = np.array([_bf16_round(float(v)) for v in x], np.float32)
    np.testing.assert_array_equal(got, want)


def test_bf16_arithmetic_rounds_every_result():
    # bf16 has 8 significant bits: 1 + 2**-8 is a tie between 1 and 1 + 2**-7 and rounds to even (1)
    a = np.array([1.0, 1.0, 256.0, 3.0], np.float32)
    b = np.array([2**-8, 3 * 2**-8, 1.0, 2**-7], np.float32)
    got = run_op("add", a, b, dtypes=["bf16", "bf16"])
    np.testing.assert_array_equal(got, [1.0, 1.0 + 2**-6, 256.0, 3.0])
    want = np.array([_bf16_round(float(np.float32(x) + np.float32(y))) for x, y in zip(a, b, strict=True)], np.float32)
    np.testing.assert_array_equal(got, want)


def test_f16_arithmetic_stays_f16():
    a = np.array([60000, 1, 0.1], np.float16)
    got = run_op("add", a, a)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.array([np.inf, 2, np.float16(0.1) + np.float16(0.1)], np.float16))


# -- data movement ----------------------------------------------------------------------

@covers("broadcast")
@FAST
@given(st.data())
def test_broadcast_with_random_dimension_maps(data):
    out_shape = data.draw(shapes(min_dims=0, max_dims=4))
    k = data.draw(st.integers(0, len(out_shape)))
    dims = data.draw(st.permutations(range(len(out_shape))))[:k]     # any order: operand dim i -> out dim dims[i]
    x = data.draw(f32_arrays(tuple(out_shape[d] for d in dims)))
    got = run_op("broadcast", x, shape=out_shape, dimensions=tuple(dims))
    want = np.empty(out_shape, np.float32)
    for idx in np.ndindex(*out_shape):
        want[idx] = x[tuple(idx[d] for d in dims)]
    np.testing.assert_array_equal(got, want)


@covers("transpose")
@FAST
@given(st.data())
def test_transpose(data):
    x = data.draw(f32_arrays(data.draw(shapes(min_dims=1, max_dims=4))))
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    got = run_op("transpose", x, permutation=perm)
    for idx in np.ndindex(*got.shape):                      # out[i0, i1, ...] = x[i_{perm^-1}...]
        src = [0] * x.ndim
        for out_dim, in_dim in enumerate(perm):
            src[in_dim] = idx[out_dim]
        assert got[idx] == x[tuple(src)]


@covers("slice")
@FAST
@given(st.data())
def test_slice(data):
    x = data.draw(f32_arrays(data.draw(shapes(min_dims=1, max_dims=3, max_side=6))))
    starts, limits, strides = [], [], []
    for n in x.shape:
        s = data.draw(st.integers(0, n))
        starts.append(s)
        limits.append(data.draw(st.integers(s, n)))
        strides.append(data.draw(st.integers(1, 3)))
    got = run_op("slice", x, starts=starts, limits=limits, strides=strides)
    np.testing.assert_array_equal(got, x[tuple(slice(a, b, c) for a, b, c in zip(starts, limits, strides, strict=True))])


def test_slice_out_of_bounds_is_an_error():
    with pytest.raises(AStitchError, match="outside"):
        run_op("slice", np.zeros((4,), np.float32), starts=(2,), limits=(6,), strides=(1,))


@covers("concatenate")
@FAST
@given(st.data())
def test_concatenate(data):
    base = list(data.draw(shapes(min_dims=1, max_dims=3)))
    dim = data.draw(st.integers(0, len(base) - 1))
    parts = []
    for _ in range(data.draw(st.integers(1, 4))):
        shape = list(base)
        shape[dim] = data.draw(st.integers(0, 3))
        parts.append(data.draw(f32_arrays(tuple(shape))))
    got = run_op("concatenate", *parts, dimension=dim)
    np.testing.assert_array_equal(got, np.concatenate(parts, axis=dim))


@covers("reshape", "bitcast")
@FAST
@given(st.data())
def test_reshape_and_bitcast(data):
    x = data.draw(f32_arrays(data.draw(shapes(max_dims=4))))
    n, new_shape = x.size, []
    while n > 1:                                       # factor the size into a random new shape
        d = data.draw(st.sampled_from([f for f in range(2, n + 1) if n % f == 0]))
        new_shape.append(d)
        n //= d
    new_shape = tuple(new_shape + [1] * data.draw(st.integers(0, 1)))
    for op in ("reshape", "bitcast"):
        np.testing.assert_array_equal(run_op(op, x, shape=new_shape), x.reshape(new_shape))
    with pytest.raises(AStitchError, match="cannot reshape"):
        run_op("reshape", x, shape=(x.size + 1,))


@covers("reverse")
@FAST
@given(st.data())
def test_reverse(data):
    x = data.draw(f32_arrays(data.draw(shapes(min_dims=1, max_dims=3))))
    dims = sorted(data.draw(st.sets(st.integers(0, x.ndim - 1))))
    want = x.copy()
    for d in dims:
        want = want[(slice(None),) * d + (slice(None, None, -1),)]
    np.testing.assert_array_equal(run_op("reverse", x, dimensions=tuple(dims)), want)


@covers("pad")
def test_pad_low_high_and_unsupported_forms():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = run_op("pad", x, np.float32(-1), low=(1, 0), high=(2, 3), interior=(0, 0))
    want = np.full((5, 6), -1, np.float32)
    want[1:3, 0:3] = x
    np.testing.assert_array_equal(got, want)
    with pytest.raises(AStitchError, match="interior or negative"):
        run_op("pad", x, np.float32(0), low=(0, 0), high=(0, 0), interior=(1, 0))
    with pytest.raises(AStitchError, match="interior or negative"):
        run_op("pad", x, np.float32(0), low=(-1, 0), high=(0, 0), interior=(0, 0))


@covers("iota")
@pytest.mark.parametrize("dtype", ["s32", "f32"])
def test_iota_every_dimension(dtype):
    shape = (2, 3, 4)
    for d in range(3):
        g = Graph("iota")
        g.set_outputs(g.iota(shape, d, dtype))
        (got,) = asim.reference(g, [])
        assert got.dtype == np.dtype(np.int32 if dtype == "s32" else np.float32)
        for idx in np.ndindex(*shape):
            assert got[idx] == idx[d]


@covers("constant", "parameter")
def test_constant_and_parameter():
    g = Graph("c")
    x = g.parameter("x", (3,), "f32")
    c = g.constant(np.array([1.0, np.inf, np.nan], np.float32))
    g.set_outputs(g.add(x, c), c, x)
    s, cv, xv = asim.reference(g, [np.array([1, 2, 3], np.float32)])
    np.testing.assert_array_equal(s, [2, np.inf, np.nan])
    np.testing.assert_array_equal(cv, [1, np.inf, np.nan])
    np.testing.assert_array_equal(xv, [1, 2, 3])


# -- reduce -----------------------------------------------------------------------------

_REDUCE_REF = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


@covers("reduce")
@FAST
@given(st.sampled_from(sorted(_REDUCE_REF)), st.data())
def test_reduce_over_random_dim_subsets(reducer, data):
    lo, hi = (-2.0, 2.0) if reducer == "prod" else (-100.0, 100.0)
    x = data.draw(f32_arrays(data.draw(shapes(min_dims=1, max_dims=4)), lo, hi))
    dims = tuple(sorted(data.draw(st.sets(st.integers(0, x.ndim - 1)))))
    g = Graph("r")
    p = g.parameter("x", x.shape, "f32")
    g.set_outputs(g.reduce(p, dims, reducer))
    (got,) = asim.reference(g, [x])
    want = _REDUCE_REF[reducer](x.astype(np.float64), axis=dims) if dims else x
    assert got.shape == tuple(n for i, n in enumerate(x.shape) if i not in dims)
    if reducer in ("max", "min"):
        np.testing.assert_array_equal(got, want.astype(np.float32))
    else:
        f64_close(got, want, rtol=1e-5, atol=1e-4)


def test_reduce_max_with_non_identity_init_and_nan():
    x = np.array([[-3, -1, -2], [1, np.nan, 2]], np.float32)
    g = Graph("r")
    p = g.parameter("x", x.shape, "f32")
    zero = g.constant(0.0)
    g.set_outputs(g.add_node("reduce", (p, zero), dimensions=(1,), reducer="max"))
    (got,) = asim.reference(g, [x])
    assert got[0] == 0.0 and np.isnan(got[1])       # max(-1, init 0) = 0; NaN propagates


def test_reduce_pred_and_int():
    b = np.array([[True, True, False], [True, True, True]])
    g = Graph("r")
    p = g.parameter("b", b.shape, "pred")
    g.set_outputs(g.reduce(p, 1, "and"), g.reduce(p, 0, "or"))
    r_and, r_or = asim.reference(g, [b])
    np.testing.assert_array_equal(r_and, b.all(axis=1))
    np.testing.assert_array_equal(r_or, b.any(axis=0))
    i = np.array([[2**31 - 1, 1], [5, -7]], np.int32)
    g = Graph("ri")
    q = g.parameter("i", i.shape, "s32")
    g.set_outputs(g.reduce(q, 1, "sum"), g.reduce(q, (0, 1), "max"), g.reduce(q, 0, "min"))
    s, m, n = asim.reference(g, [i])
    np.testing.assert_array_equal(s, np.array([-2**31, -2], np.int32))      # int sums wrap
    assert m == 2**31 - 1 and m.dtype == np.int32
    np.testing.assert_array_equal(n, [5, -7])


# -- dot -------------------------------------------------------------------------------------

@covers("dot")
@FAST
@given(st.data())
def test_dot_general_with_batch_and_contracting_dims_in_any_position(data):
    sizes = st.integers(1, 3)
    nb, nc = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
    nlf, nrf = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
    batch = [data.draw(sizes) for _ in range(nb)]
    contract = [data.draw(sizes) for _ in range(nc)]
    letters = iter("abcdefghijkl")
    b_l, c_l = [next(letters) for _ in batch], [next(letters) for _ in contract]
    lf_l, rf_l = [next(letters) for _ in range(nlf)], [next(letters) for _ in range(nrf)]
    size = dict(zip(b_l + c_l, batch + contract, strict=True))
    size.update({c: data.draw(sizes) for c in lf_l + rf_l})
    lhs_axes = data.draw(st.permutations(b_l + c_l + lf_l))
    rhs_axes = data.draw(st.permutations(b_l + c_l + rf_l))
    a = data.draw(f32_arrays(tuple(size[c] for c in lhs_axes), -3, 3))
    b = data.draw(f32_arrays(tuple(size[c] for c in rhs_axes), -3, 3))
    attrs = dict(lhs_batch_dims=tuple(lhs_axes.index(c) for c in b_l),
                 rhs_batch_dims=tuple(rhs_axes.index(c) for c in b_l),
                 lhs_contracting_dims=tuple(lhs_axes.index(c) for c in c_l),
                 rhs_contracting_dims=tuple(rhs_axes.index(c) for c in c_l))
    got = run_op("dot", a, b, **attrs)
    out_axes = b_l + [c for c in lhs_axes if c in lf_l] + [c for c in rhs_axes if c in rf_l]
    want = np.einsum(f"{''.join(lhs_axes)},{''.join(rhs_axes)}->{''.join(out_axes)}",
                     a.astype(np.float64), b.astype(np.float64))
    f64_close(got, want, rtol=1e-5, atol=1e-5)


def test_dot_mismatched_dims_is_an_error():
    with pytest.raises(AStitchError, match="dot dims do not agree"):
        run_op("dot", np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32),
               lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))


# -- indexed loads and library ops (XLA semantics, against plain Python) ----------------------

def _graph(*arrays_and_dtypes):
    g = Graph("t")
    return g, [g.parameter(f"p{i}", np.shape(a), dt) for i, (a, dt) in enumerate(arrays_and_dtypes)]


def _total_key(v: float):
    """IEEE total order of a float32 value as a Python int (NaNs of one sign equal)."""
    if math.isnan(v):
        return (1 << 40) if math.copysign(1, v) > 0 else -(1 << 40)
    bits = struct.unpack("<i", struct.pack("<f", v))[0]
    return bits if bits >= 0 else -(bits & 0x7FFFFFFF) - 1


@covers("gather")
@FAST
@given(st.data())
def test_take_clamps_indices_like_xla(data):
    n, d = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 4))
    table = data.draw(f32_arrays((n, d)))
    ids = data.draw(hnp.arrays(np.int32, data.draw(shapes(1, 2, 3)), elements=st.integers(-3 * n, 3 * n)))
    g, (t, i) = _graph((table, "f32"), (ids, "s32"))
    g.set_outputs(g.take(t, i, 0), g.take(g.transpose(t, (1, 0)), i, 1))
    rows, cols = asim.reference(g, [table, ids])
    want = np.array([table[min(max(int(k), 0), n - 1)] for k in ids.reshape(-1)]).reshape(ids.shape + (d,))
    np.testing.assert_array_equal(rows, want)
    np.testing.assert_array_equal(cols, np.moveaxis(want, -1, 0))


@FAST
@given(st.data())
def test_gather_window_and_take_along_axis(data):
    r, c = data.draw(st.integers(1, 5)), data.draw(st.integers(2, 6))
    x = data.draw(f32_arrays((r, c)))
    lab = data.draw(hnp.arrays(np.int32, (r, 1), elements=st.integers(-2 * c, 2 * c)))
    starts = data.draw(hnp.arrays(np.int32, (3, 2), elements=st.integers(-4, 8)))
    g, (p, l, s) = _graph((x, "f32"), (lab, "s32"), (starts, "s32"))
    w = min(2, r), min(3, c)
    win = g.gather(p, s, offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0, 1), slice_sizes=w,
                   index_vector_dim=1)
    g.set_outputs(g.take_along_axis(p, l, 1), win)
    along, got = asim.reference(g, [x, lab, starts])
    np.testing.assert_array_equal(along[:, 0], [x[i, min(max(int(lab[i, 0]), 0), c - 1)] for i in range(r)])
    for k in range(3):
        a = min(max(int(starts[k, 0]), 0), r - w[0])
        b = min(max(int(starts[k, 1]), 0), c - w[1])
        np.testing.assert_array_equal(got[k], x[a:a + w[0], b:b + w[1]])


@covers("dynamic-slice", "dynamic-update-slice")
@FAST
@given(st.data())
def test_dynamic_slices_clamp_their_starts(data):
    shape = data.draw(shapes(1, 3, 5))
    x = data.draw(f32_arrays(shape))
    sizes = tuple(data.draw(st.integers(0, n)) for n in shape)
    starts = [data.draw(st.integers(-6, 8)) for _ in shape]
    upd = data.draw(f32_arrays(sizes))
    g, ps = _graph((x, "f32"), (upd, "f32"), *[(np.int32(v), "s32") for v in starts])
    g.set_outputs(g.dynamic_slice(ps[0], list(ps[2:]), sizes), g.dynamic_update_slice(ps[0], ps[1], list(ps[2:])))
    sl, up = asim.reference(g, [x, upd] + [np.int32(v) for v in starts])
    at = tuple(slice(min(max(v, 0), n - k), min(max(v, 0), n - k) + k) for v, n, k in zip(starts, shape, sizes, strict=True))
    np.testing.assert_array_equal(sl, x[at])
    want = x.copy()
    want[at] = upd
    np.testing.assert_array_equal(up, want)


@FAST
@given(st.data())
def test_argmax_argmin_first_nan_then_first_extreme(data):
    x = data.draw(hnp.arrays(np.float32, data.draw(shapes(1, 3, 5)), elements=st.sampled_from(
        [np.nan, -np.inf, -1.0, -0.0, 0.0, 2.0, np.inf])))
    axis = data.draw(st.integers(0, x.ndim - 1))
    g, (p,) = _graph((x, "f32"))
    g.set_outputs(g.argmax(p, axis), g.argmin(p, axis))
    amax, amin = asim.reference(g, [x])

    def pick(row, better):
        best = 0
        for i, v in enumerate(row):
            if np.isnan(row[best]):
                break
            if np.isnan(v) or better(v, row[best]):
                best = i
        return best
    rows = np.moveaxis(x, axis, -1)
    flat = rows.reshape(-1, x.shape[axis])
    np.testing.assert_array_equal(amax, np.array([pick(r, lambda a, b: a > b) for r in flat]).reshape(rows.shape[:-1]))
    np.testing.assert_array_equal(amin, np.array([pick(r, lambda a, b: a < b) for r in flat]).reshape(rows.shape[:-1]))


@covers("reduce-window")
@FAST
@given(st.data())
def test_cumsum_is_an_in_order_fold_and_windows_skip_padding(data):
    x = data.draw(f32_arrays(data.draw(shapes(1, 2, 6))))
    axis = data.draw(st.integers(0, x.ndim - 1))
    g, (p,) = _graph((x, "f32"))
    g.set_outputs(g.cumsum(p, axis), g.cumsum(p, axis, reverse=True), g.cumsum(p, axis, reducer="max"),
                  g.reduce_window(p, [2] * x.ndim, [2] * x.ndim, [(1, 0)] * x.ndim, "sum"))
    fwd, rev, cmax, win = asim.reference(g, [x])
    rows = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])
    want_f, want_r, want_m = [], [], []
    for row in rows:
        acc, accm = np.float32(0), np.float32(-np.inf)
        for v in row:
            acc, accm = np.float32(acc + v), max(accm, v)
            want_f.append(acc)
            want_m.append(accm)
        out = []
        for i in range(len(row)):                       # reverse: output i folds row[i:], in order
            acc = np.float32(0)
            for v in row[i:]:
                acc = np.float32(acc + v)
            out.append(acc)
        want_r.extend(out)
    back = lambda w: np.moveaxis(np.array(w, np.float32).reshape(np.moveaxis(x, axis, -1).shape), -1, axis)  # noqa
    np.testing.assert_array_equal(fwd, back(want_f))
    np.testing.assert_array_equal(rev, back(want_r))
    np.testing.assert_array_equal(cmax, back(want_m))
    for o in np.ndindex(win.shape):                     # window 2, stride 2, one padding element in front
        acc = np.float32(0)
        for w in np.ndindex(*([2] * x.ndim)):
            src = tuple(2 * a + b - 1 for a, b in zip(o, w, strict=True))
            if all(0 <= s_ < n for s_, n in zip(src, x.shape, strict=True)):
                acc = np.float32(acc + x[src])
        assert win[o] == acc


@covers("sort", "topk")
@FAST
@given(st.data())
def test_sort_and_top_k_orders(data):
    vals = st.sampled_from([np.nan, -np.nan, -np.inf, -1.5, -0.0, 0.0, 1.0, 2.5, np.inf])
    n = data.draw(st.integers(1, 7))
    x = data.draw(hnp.arrays(np.float32, (2, n), elements=vals))
    payload = np.arange(2 * n, dtype=np.int32).reshape(2, n)
    k = data.draw(st.integers(0, n))
    g, (p, q) = _graph((x, "f32"), (payload, "s32"))
    sx, sp = g.sort([p, q], 1)
    dx, dp = g.sort([p, q], 1, descending=True)
    tv, ti = g.top_k(p, k)
    g.set_outputs(sx, sp, dx, dp, tv, ti)
    got = asim.reference(g, [x, payload])
    for r in range(2):
        canon = [(1, 0.0) if np.isnan(v) else (0, float(v) + 0.0) for v in x[r]]     # JAX: NaN last, -0 == 0
        order = sorted(range(n), key=lambda i: canon[i])
        np.testing.assert_array_equal(got[1][r], payload[r][order])
        desc = sorted(range(n), key=lambda i: (-canon[i][0], -canon[i][1]))
        np.testing.assert_array_equal(got[3][r], payload[r][desc])
        top = sorted(range(n), key=lambda i: -_total_key(float(x[r, i])))[:k]          # stable: ties by index
        np.testing.assert_array_equal(got[5][r], top)
        np.testing.assert_array_equal(np.isnan(got[4][r]), np.isnan(x[r][top]))


@covers("scatter")
@FAST
@given(st.data())
def test_scatter_applies_updates_in_order_and_drops_out_of_range(data):
    n, d = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 3))
    x = data.draw(f32_arrays((n, d)))
    ids = data.draw(hnp.arrays(np.int32, (data.draw(st.integers(1, 6)),), elements=st.integers(-2, n + 1)))
    upd = data.draw(f32_arrays(ids.shape + (d,)))
    g, (p, i, u) = _graph((x, "f32"), (ids, "s32"), (upd, "f32"))
    g.set_outputs(*(g.index_add(p, i, u, 0, combiner=c) for c in ("sum", "assign", "max", "prod")))
    got = asim.reference(g, [x, ids, upd])
    ops = {"sum": lambda a, b: a + b, "assign": lambda a, b: b, "max": max, "prod": lambda a, b: a * b}
    for (name, f), res in zip(ops.items(), got, strict=True):
        want = x.copy()
        for j, k in enumerate(ids):
            if 0 <= k < n:                      # out-of-range updates are dropped, not clamped
                for c in range(d):
                    want[k, c] = np.float32(f(want[k, c], upd[j, c]))
        np.testing.assert_array_equal(res, want, err_msg=name)


# -- inputs --------------------------------------------------------------------------------

def _two_input_graph():
    g = Graph("two")
    x = g.parameter("x", (2, 3), "f32")
    w = g.parameter("w", (3,), "s32")
    g.set_outputs(g.add(x, g.broadcast(g.convert(w, "f32"), (2, 3), (1,))))
    return g


def test_inputs_as_list_dict_and_python_values():
    g = _two_input_graph()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.array([1, 2, 3], np.int32)
    want = x + w.astype(np.float32)
    np.testing.assert_array_equal(asim.reference(g, [x, w])[0], want)
    np.testing.assert_array_equal(asim.reference(g, (x, w))[0], want)
    np.testing.assert_array_equal(asim.reference(g, {"w": w, "x": x})[0], want)
    np.testing.assert_array_equal(asim.reference(g, [x.tolist(), [1, 2, 3]])[0], want)


@pytest.mark.parametrize("inputs,match", [
    ({"x": np.zeros((2, 3), np.float32)}, r"missing \['w'\]"),
    ({"x": np.zeros((2, 3), np.float32), "w": np.zeros(3, np.int32), "z": 1}, r"unknown \['z'\]"),
    ([np.zeros((2, 3), np.float32)], r"takes 2 input\(s\) \(x, w\), got 1"),
    ([np.zeros((2, 3), np.float32)] * 3, r"takes 2 input\(s\) \(x, w\), got 3"),
    ([np.zeros((2, 3), np.float64), np.zeros(3, np.int32)],
     r"input 'x' has dtype f64 but the parameter is f32\[2,3\]"),
    ([np.zeros((2, 3), np.float32), np.zeros(3, np.int64)], r"input 'w' has dtype s64 but the parameter is s32\[3\]"),
    ([np.zeros((3, 2), np.float32), np.zeros(3, np.int32)], r"input 'x' has shape \[3, 2\]"),
    ([np.zeros((2, 3), np.float32), np.zeros(4, np.int32)], r"input 'w' has shape \[4\]"),
    ([np.zeros((2, 3), np.float32), "abc"], r"input 'w': cannot convert str"),
])
def test_bind_inputs_errors_name_the_parameter(inputs, match):
    g = _two_input_graph()
    with pytest.raises(AStitchError, match=match):
        bind_inputs(g, inputs)
    with pytest.raises(AStitchError, match=match):
        asim.reference(g, inputs)


def test_bf16_parameters_accept_f32_and_raw_storage():
    g = Graph("bf")
    x = g.parameter("x", (3,), "bf16")
    g.set_outputs(g.add(x, x))
    f = np.array([1.0, 1.00390625, -2.5], np.float32)
    want = np.array([2.0, 2.0, -5.0], np.float32)                 # 1.00390625 rounds to 1 as a bf16 input
    np.testing.assert_array_equal(asim.reference(g, [f])[0], want)
    raw = (f.view(np.uint32) >> 16).astype(np.uint16)             # truncated bf16 bits
    np.testing.assert_array_equal(asim.reference(g, [raw])[0], want)
    np.testing.assert_array_equal(asim.reference(g, [raw.view("V2")])[0], want)
    with pytest.raises(AStitchError, match="input 'x' is float64"):
        asim.reference(g, [f.astype(np.float64)])


def test_nan_and_inf_inputs_propagate_without_errors():
    g = Graph("nan")
    x = g.parameter("x", (2, 3), "f32")
    s = g.reduce(g.exp(x), 1, "sum")
    g.set_outputs(s, g.divide(x, x), g.log(x))
    x0 = np.array([[np.nan, 0, 1], [np.inf, -1, 0]], np.float32)
    with np.errstate(all="raise"):                           # the reference must not trip numpy warnings either
        s_v, d_v, l_v = asim.reference(g, [x0])
    assert np.isnan(s_v[0]) and s_v[1] == np.inf
    assert np.isnan(d_v[0, 0]) and np.isnan(d_v[0, 1]) and np.isnan(d_v[1, 0]) and d_v[0, 2] == 1
    assert np.isnan(l_v[0, 0]) and l_v[0, 1] == -np.inf and np.isnan(l_v[1, 1])


# -- coverage --------------------------------------------------------------------------------

def test_every_op_is_covered():
    missing = sorted(set(OPS) - COVERED)
    assert not missing, f"ops of the op table without a reference test: {missing}"
