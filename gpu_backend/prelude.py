"""Runtime helpers the generated kernels call: one small device function per helper name.

The op table (``astitch_sim.ir.ops``) gives every elementwise op a scalar template,
``"_log({0})"``, ``"_divide({0}, {1})"``...; the names that are not Python or
``math`` functions are defined here, as ``@cuda.jit(device=True)`` functions,
so the same kernel source compiles for a real GPU (Numba-CUDA) and runs in
Numba's CUDA simulator (where a device function is a plain Python call).

``math`` is exported too: the generated modules write ``math.exp(x)`` as the op
table says and import ``math`` from here, so that in the simulator it is an
IEEE version of Python's module (``exp(1000)`` is ``inf``, not an exception).

Rules every helper keeps:

* **IEEE results, never an exception.**  ``math.log(0.0)`` raises in Python
  (the simulator) but gives ``-inf`` on a GPU; the helpers test the special
  cases first so both give what numpy (the reference) gives.
* **The caller casts.**  A helper may return a wider type than its operands
  (a Python int, a float64); the generated code wraps every helper call in the
  node's own type (``float32(_log(x))``), so float32 math stays float32.
* **One meaning per helper.**  Where an op means different things for floats
  and integers (``divide`` truncates for ints, ``not`` is logical for pred and
  bitwise for ints) there are two helpers and the code generator picks one by
  dtype (``dtypes.HELPER_BY_DTYPE``): Numba compiles a device function per
  argument type but cannot branch on it at run time.
* **Storage formats.**  float16 values are computed in float32 and rounded with
  :func:`_f16` after every op; bfloat16 likewise with :func:`_bf16`, and is
  stored in memory as its 16 raw bits (``uint16``), read back with
  :func:`_bf16_value` and written with :func:`_bf16_bits`.
"""
from __future__ import annotations

import math as _math

import numpy as np
from numba import cuda
from numpy import float16, float32, float64, int64, uint16, uint32, uint64

from .numba_compat import numba_config

_config = numba_config()


class _IEEEMath:
    """Python's ``math`` module as a GPU computes it: IEEE results, never an exception.

    In the CUDA simulator the kernels' ``math.exp(x)`` is Python's, which raises
    ``OverflowError`` for ``exp(1000)`` and ``ValueError`` for ``sin(inf)``; a GPU
    returns ``inf`` and ``NaN``.  The generated modules import ``math`` from here:
    on a GPU it *is* the ``math`` module (Numba compiles its functions to libdevice
    calls); in the simulator it is this object, whose functions compute with
    numpy in float64 (the caller rounds to the node's type) and fall back to the
    ``math`` module for everything else.
    """

    def __getattr__(self, name):
        return getattr(_math, name)

    exp, expm1, log, log1p, sqrt = (staticmethod(lambda x, f=f: f(np.float64(x)))
                                    for f in (np.exp, np.expm1, np.log, np.log1p, np.sqrt))
    sin, cos, tan, tanh = (staticmethod(lambda x, f=f: f(np.float64(x))) for f in (np.sin, np.cos, np.tan, np.tanh))
    pow, atan2, fmod = (staticmethod(lambda a, b, f=f: f(np.float64(a), np.float64(b)))
                        for f in (np.power, np.arctan2, np.fmod))


#: what generated kernels call ``math``: the module on a GPU, its IEEE twin in the simulator
math = _IEEEMath() if _config.ENABLE_CUDASIM else _math


def jit(func=None, *, max_registers=None):
    """``cuda.jit`` for a generated kernel, capped at the plan's registers per thread.

    The plan's launch configuration ("assume-relax-apply") fixes the registers a
    kernel may use, so that the blocks it counted on fit on an SM -- a cooperative
    grid depends on it.  Numba's simulator has no register file and its ``jit``
    takes no ``max_registers``: there the cap is dropped.
    """
    if _config.ENABLE_CUDASIM or max_registers is None:
        return cuda.jit if func is None else cuda.jit(func)
    return cuda.jit(max_registers=max_registers) if func is None else cuda.jit(func, max_registers=max_registers)

_F32_ONE = np.float32(1.0)
_F32_NAN = np.float32(np.nan)
_F32_INF = np.float32(np.inf)
_TRUNC_EXACT = 4503599627370496.0         # 2**52: every float64 of this size or more is integral


# -- float helpers ---------------------------------------------------------------

@cuda.jit(device=True)
def _sign(x):
    """-1, 0 or 1 (NaN stays NaN, like np.sign)."""
    if x > 0:
        return 1
    if x < 0:
        return -1
    return x


@cuda.jit(device=True)
def _log(x):
    if x > 0:
        return math.log(x)
    if x == 0:
        return -_F32_INF
    if x != x:
        return x
    return _F32_NAN


@cuda.jit(device=True)
def _log1p(x):
    if x > -1:
        return math.log1p(x)
    if x == -1:
        return -_F32_INF
    if x != x:
        return x
    return _F32_NAN


@cuda.jit(device=True)
def _sqrt(x):
    if x >= 0:
        return math.sqrt(x)
    if x != x:
        return x
    return _F32_NAN


@cuda.jit(device=True)
def _rsqrt(x):
    """1 / sqrt(x), like numpy: 1/sqrt(0) = inf, 1/sqrt(-0.0) = -inf, negative -> NaN."""
    if x > 0:
        return _F32_ONE / math.sqrt(x)
    if x == 0:
        return _F32_ONE / x
    if x != x:
        return x
    return _F32_NAN


@cuda.jit(device=True)
def _cbrt(x):
    """Real cube root; computed in float64 so the float32 result is correctly rounded."""
    if x != x or x == 0:
        return x
    r = math.pow(abs(float64(x)), 1.0 / 3.0)
    if x < 0:
        return -r
    return r


@cuda.jit(device=True)
def _logistic(x):
    """1 / (1 + exp(-x)) without overflow for either sign."""
    if x >= 0:
        e = math.exp(-x)
        return _F32_ONE / (_F32_ONE + e)
    e = math.exp(x)
    return e / (_F32_ONE + e)


@cuda.jit(device=True)
def _trunc(x):
    """Round toward zero, as a float64 (``math.trunc`` returns an int, which inf/NaN cannot be)."""
    if abs(x) < _TRUNC_EXACT:
        return float64(int64(x))
    return float64(x)


@cuda.jit(device=True)
def _floor(x):
    t = _trunc(x)
    if t > x:
        return t - 1.0
    return t


@cuda.jit(device=True)
def _ceil(x):
    t = _trunc(x)
    if t < x:
        return t + 1.0
    return t


@cuda.jit(device=True)
def _round_afz(x):
    """Round half away from zero (XLA round-nearest-afz)."""
    t = _trunc(x)
    if abs(x - t) >= 0.5:
        if x > 0:
            return t + 1.0
        return t - 1.0
    return t


@cuda.jit(device=True)
def _round_even(x):
    """Round half to even (np.rint)."""
    t = _trunc(x)
    d = x - t
    if abs(d) > 0.5 or (abs(d) == 0.5 and t - 2.0 * _trunc(t * 0.5) != 0):
        if x > 0:
            return t + 1.0
        return t - 1.0
    return t


@cuda.jit(device=True)
def _divide(a, b):
    """Float division (x/0 gives inf or NaN, as IEEE says)."""
    return a / b


@cuda.jit(device=True)
def _remainder(a, b):
    """C fmod: the sign of the dividend; x % 0 and inf % y are NaN."""
    if b == 0 or a != a or b != b or a == _F32_INF or a == -_F32_INF:
        return _F32_NAN
    return math.fmod(a, b)


@cuda.jit(device=True)
def _power(a, b):
    return a ** b


@cuda.jit(device=True)
def _max(a, b):
    """np.maximum: NaN wins."""
    if a != a:
        return a
    if b != b:
        return b
    if a > b:
        return a
    return b


@cuda.jit(device=True)
def _min(a, b):
    """np.minimum: NaN wins."""
    if a != a:
        return a
    if b != b:
        return b
    if a < b:
        return a
    return b


# -- integer and predicate helpers ---------------------------------------------------

@cuda.jit(device=True)
def _not(x):
    """Logical not of a pred."""
    return not x


@cuda.jit(device=True)
def _invert(x):
    """Bitwise not of an integer (the ``not`` op on integer types)."""
    return ~x


@cuda.jit(device=True)
def _idivide(a, b):
    """XLA integer division: truncate toward zero; x/0 = -1; INT_MIN/-1 wraps to INT_MIN."""
    if b == 0:
        return -1
    if b == -1:
        return -a
    q = a // b
    if a - q * b != 0 and (a < 0) != (b < 0):
        q += 1
    return q


@cuda.jit(device=True)
def _iremainder(a, b):
    """XLA integer remainder: the sign of the dividend; x % 0 = x.  From the floored remainder (the sign of the
    divisor), moved by one divisor where the signs differ -- no ``abs``: ``abs(-128)`` overflows an int8 (the
    simulator's numpy scalars keep int8, and gave -128 % 65 = -2 instead of -63)."""
    if b == 0:
        return a
    if b == -1:
        return a - a
    r = a % b
    if r != 0 and (r < 0) != (a < 0):
        r -= b
    return r


@cuda.jit(device=True)
def _ipower(a, b):
    """Integer power by squaring (wraps like C); a negative exponent gives 0, except 1 for base 1."""
    if b < 0:
        if a == 1:
            return 1
        return 0
    result = a - a + 1
    base = a
    e = b
    while e > 0:
        if e & 1:
            result = result * base
        base = base * base
        e = e >> 1
    return result


@cuda.jit(device=True)
def _shl(a, b, bits):
    """Shift left; a shift of ``bits`` or more (or negative) gives 0 (XLA), not C's undefined value."""
    if b < 0 or b >= bits:
        return a - a
    return a << b


@cuda.jit(device=True)
def _sra(a, b, bits):
    """Arithmetic shift right; an out-of-range shift fills with the sign bit (XLA)."""
    if b < 0 or b >= bits:
        if a < 0:
            return a - a - 1
        return a - a
    return a >> b


@cuda.jit(device=True)
def _srl(a, b, bits):
    """Logical shift right of a ``bits``-wide integer (zero fill); out-of-range shifts give 0."""
    if b < 0 or b >= bits:
        return 0
    mask = (int64(1) << bits) - 1 if bits < 64 else int64(-1)
    u = uint64(int64(a) & mask)
    return int64(u >> uint64(b))


@cuda.jit(device=True)
def _float_to_int(x, lo, hi):
    """XLA convert float -> int: truncate toward zero, saturate at the type's range, NaN -> 0.

    Returns a float64 in ``[lo, hi]``; the caller casts it to the integer type.
    """
    if x != x:
        return 0.0
    t = _trunc(x)
    if t < lo:
        return lo
    if t > hi:
        return hi
    return t


@cuda.jit(device=True)
def _float_to_s64(x):
    """float -> s64 as XLA converts: like ``_float_to_int``, but 2**63 (what ``float(2**63 - 1)`` rounds to)
    is already out of range, so the saturated value is produced as an integer, never through a float."""
    if x != x:
        return int64(0)
    t = _trunc(x)
    if t >= 9.223372036854775808e18:
        return int64(9223372036854775807)
    if t < -9.223372036854775808e18:
        return int64(-9223372036854775807 - 1)
    return int64(t)


@cuda.jit(device=True)
def _float_to_u64(x):
    """float -> u64 as XLA converts: truncate, saturate at 0 and 2**64 - 1 (made as an integer), NaN -> 0."""
    if x != x:
        return uint64(0)
    t = _trunc(x)
    if t >= 1.8446744073709551616e19:
        return uint64(18446744073709551615)
    if t <= 0.0:
        return uint64(0)
    return uint64(t)


# -- narrow float formats --------------------------------------------------------------

@cuda.jit(device=True)
def _f16(x):
    """Round a float32 to float16 and back (a float16 op's result)."""
    return float32(float16(x))


@cuda.jit(device=True)
def _bf16(x):
    """Round a float32 to the nearest bfloat16 (ties to even), kept as float32."""
    if x != x:
        return float32(x)
    buf = cuda.local.array(1, float32)
    buf[0] = float32(x)
    bits = uint64(buf.view(uint32)[0])
    rounding = ((bits >> uint64(16)) & uint64(1)) + uint64(0x7FFF)
    buf.view(uint32)[0] = uint32(((bits + rounding) >> uint64(16)) << uint64(16))
    return buf[0]


@cuda.jit(device=True)
def _bf16_bits(x):
    """The 16 bits that store a (bf16-rounded) float32 value in memory."""
    buf = cuda.local.array(1, float32)
    buf[0] = float32(x)
    return uint16(buf.view(uint32)[0] >> uint32(16))


@cuda.jit(device=True)
def _bf16_value(bits):
    """A bfloat16 read from memory (its 16 raw bits), as float32."""
    buf = cuda.local.array(1, uint32)
    buf[0] = uint32(bits) << uint32(16)
    return buf.view(float32)[0]


# -- orders: argmax/argmin pairs, IEEE total order, sort keys ------------------------------

@cuda.jit(device=True)
def _argmax_take(av, ai, bv, bi):
    """Does pair (bv, bi) win over (av, ai) in an argmax?  NaN first, larger value, ties to the lower index."""
    an = av != av
    bn = bv != bv
    if an or bn:
        if an and bn:
            return bi < ai
        return bn
    if bv > av:
        return True
    return bv == av and bi < ai


@cuda.jit(device=True)
def _argmin_take(av, ai, bv, bi):
    """Does pair (bv, bi) win over (av, ai) in an argmin?  NaN first, smaller value, ties to the lower index."""
    an = av != av
    bn = bv != bv
    if an or bn:
        if an and bn:
            return bi < ai
        return bn
    if bv < av:
        return True
    return bv == av and bi < ai


@cuda.jit(device=True)
def _tot_less(a, b):
    """IEEE total order: -NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN (NaN payloads equal)."""
    an = a != a
    bn = b != b
    if an or bn:
        a_neg = math.copysign(1.0, a) < 0
        b_neg = math.copysign(1.0, b) < 0
        if an and bn:
            return a_neg and not b_neg
        if an:
            return a_neg
        return not b_neg
    if a == b:
        return a == 0 and math.copysign(1.0, a) < 0 and math.copysign(1.0, b) > 0
    return a < b


@cuda.jit(device=True)
def _tot_eq(a, b):
    """Equal in IEEE total order (NaNs of one sign are equal; -0.0 and +0.0 are not)."""
    return not _tot_less(a, b) and not _tot_less(b, a)


@cuda.jit(device=True)
def _sort_less(a, b):
    """JAX's sort comparator: ascending, -0.0 equal to 0.0, every NaN after every number."""
    if a != a:
        return False
    if b != b:
        return True
    return a < b


#: every helper a generated kernel may import (the code generator keeps the same list: source.HELPERS)
HELPERS = ("jit", "math", "_sign", "_log", "_log1p", "_sqrt", "_rsqrt", "_cbrt", "_logistic", "_trunc", "_floor", "_ceil",
           "_round_afz", "_round_even", "_divide", "_remainder", "_power", "_max", "_min", "_not", "_invert",
           "_idivide", "_iremainder", "_ipower", "_shl", "_sra", "_srl", "_float_to_int", "_float_to_s64",
           "_float_to_u64", "_f16", "_bf16", "_bf16_bits", "_bf16_value", "_argmax_take", "_argmin_take", "_tot_less",
           "_tot_eq", "_sort_less")
