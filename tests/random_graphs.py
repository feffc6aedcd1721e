"""Random graphs for the property suite (issue 9, point 5): a table of op builders, each with its constraints.

A graph is grown from a few parameters by applying builders drawn from
:data:`OPS`.  Each row of the table is one op (or one idiom, like "reduce then
broadcast back", the normalisation pattern AStitch stitches) and says

* which operand dtypes it takes (``dtypes``: a family of ``FLOAT``, ``INT``,
  ``PRED``) -- operands of another dtype are converted first;
* the *domain* each operand needs (``domains``): ``positive`` (log, sqrt,
  rsqrt, the base of power), ``nonzero`` (a float divisor), ``unit``
  (``|x| < 1``: tan), ``bounded`` (``|x| <= 8``: exp, so results stay finite) --
  a domain adapter (``abs(x) + 0.5``, ``tanh(x)``...) is put in front of the
  operand, as a numerically careful model would;
* ``build(gen, operands) -> node``: how the node is made (attributes drawn
  from the hypothesis ``draw``);
* ``weight``: how often it is drawn.

New ops (gather, argmax-style variadic reduce, reduce-window, dynamic slices,
sort, scatter...) plug in as new rows: an arity, the dtypes they take, their
operands' domains and a build function; nothing else here changes.  (The
oracle in ``error_bounds.py`` needs a rule for a new op too: its numpy meaning
is in the op table already; an index map, or a derivative bound, is one more
entry there.)

Shapes come from dimension classes: 0, 1, primes (that divide no block size),
powers of two, and long rows past 2^13 and 2^16 elements; every tensor stays
under ``MAX_ELEMENTS`` so an example runs in a fraction of a second (the
``tiny`` family under ``TINY_ELEMENTS``, for Numba's CUDA simulator).
Parameters may be outputs, outputs may feed other outputs, some nodes are dead
code, and inputs are shared between branches.  Inputs are drawn per parameter
from one of several distributions (normal, wide, small or full-range
integers, with zeros, infinities and NaNs sprinkled in).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Callable, Optional

import numpy as np
from hypothesis import strategies as st

import astitch_sim as asim
from astitch_sim.ir.dtypes import cast

FLOAT = ("f32", "bf16", "f16")
INT = ("s32", "s8", "u8", "s64", "u32", "s16")
PRED = ("pred",)
ALL = FLOAT + INT + PRED
#: parameter dtypes, f32 most often
PARAM_DTYPES = ("f32",) * 6 + ("bf16", "f16", "s32", "s8", "u8", "pred")

MAX_ELEMENTS = 1 << 17
#: dimension classes: empty, unit, primes, powers of two, and rows past 2^13 and 2^16 elements
#: (hypothesis favours the first entries of a list: typical sizes come first, 0 and 1 are never far)
SMALL_DIMS = (13, 32, 1, 7, 64, 0, 2, 3, 5, 31, 37, 1, 4, 8, 33, 127, 128, 256)
LONG_DIMS = (8193, 65537, 12289, 8191, 70001)
TINY_DIMS = (3, 8, 1, 5, 0, 2, 7, 13, 32, 33)
TINY_ELEMENTS = 256


# -- shapes -----------------------------------------------------------------------------------------------

def shapes(draw, long_rows: bool = False, tiny: bool = False) -> tuple:
    """A shape: rank 0-4 of small dims, or (for long rows) one long dim with at most a few short ones,
    or (tiny) at most ``TINY_ELEMENTS`` elements, for Numba's CUDA simulator (0.1 ms per thread)."""
    if tiny:
        dims = []
        for _ in range(draw(st.sampled_from((2, 1, 3, 0)))):
            d = draw(st.sampled_from(TINY_DIMS))
            dims.append(d if prod(dims + [d]) <= TINY_ELEMENTS else 1)
        return tuple(dims)
    if long_rows:
        n = draw(st.sampled_from(LONG_DIMS))
        lead = draw(st.lists(st.sampled_from((1, 2, 3)), min_size=0, max_size=1))
        shape = tuple(lead) + (n,)
        if draw(st.booleans()):
            shape = (n,) + tuple(lead)          # a long column instead of a long row
        return shape
    rank = draw(st.sampled_from((2, 3, 1, 2, 0, 3, 1, 4, 2)))
    dims = []
    for _ in range(rank):
        d = draw(st.sampled_from(SMALL_DIMS))
        if prod(dims + [d]) > MAX_ELEMENTS:
            d = 1
        dims.append(d)
    return tuple(dims)


def _fits(shape, limit=MAX_ELEMENTS) -> bool:
    return prod(shape) <= limit


# -- the generator state ------------------------------------------------------------------------------------

@dataclass
class Gen:
    """A graph being grown: the pool of values ops may read, and how to draw."""
    draw: Callable
    g: asim.Graph
    pool: list = field(default_factory=list)
    input_kinds: dict = field(default_factory=dict)
    long_rows: bool = False
    limit: int = MAX_ELEMENTS            # largest tensor an op may make
    counter: int = 0

    def name(self, base: str) -> str:
        self.counter += 1
        return f"{base}{self.counter}"

    def param(self, shape, dtype) -> asim.Node:
        p = self.g.parameter(self.name("p"), shape, dtype)
        self.input_kinds[p.name] = self.draw(st.sampled_from(INPUT_KINDS[_family(dtype)]))
        self.pool.append(p)
        return p

    def pick(self, dtypes=ALL, shape=None, min_rank=0) -> Optional[asim.Node]:
        """A pool value of one of ``dtypes`` (and ``shape`` if given), recent ones more likely."""
        cands = [n for n in self.pool if n.dtype in dtypes and (shape is None or n.shape == tuple(shape))
                 and n.rank >= min_rank]
        if not cands:
            return None
        i = self.draw(st.integers(0, len(cands) - 1))
        if self.draw(st.booleans()):
            i = max(i, len(cands) - 1 - self.draw(st.integers(0, 2)))
        return cands[min(i, len(cands) - 1)]

    def indices(self, shape, n: int) -> asim.Node:
        """Integer indices into a dim of ``n``: a new parameter whose values are in range, a few past either
        end (gather and dynamic slices clamp them, scatter drops them) or crowded into a few values
        (colliding scatter updates); sometimes an existing integer value of that shape (any values)."""
        old = self.pick(INDEX_DTYPES, shape)
        if old is not None and self.draw(st.integers(0, 4)) == 0:
            return old
        dtype = self.draw(st.sampled_from(INDEX_DTYPES))
        lo, hi = self.draw(st.sampled_from(((0, n - 1), (-3, n + 3), (0, min(n - 1, 2)), (-1, n))))
        if dtype.startswith("u"):
            lo = max(lo, 0)
        top = int(np.iinfo(np.dtype(cast(np.zeros(()), dtype).dtype)).max)
        p = self.g.parameter(self.name("ix"), shape, dtype)
        self.input_kinds[p.name] = ("index", lo, min(max(hi, lo), top))
        return p

    def scalar(self, dtype, value=None) -> asim.Node:
        if value is None:
            value = self.draw(st.sampled_from(SCALARS[_family(dtype)]))
        return self.g.constant(cast(np.asarray(value), dtype), dtype=dtype, name=self.name("c"))

    def filled(self, shape, dtype, value=None) -> asim.Node:
        c = self.scalar(dtype, value)
        if not shape:
            return c
        return self.g.add_node("broadcast", (c,), shape=shape, name=self.name("b"), dimensions=())

    def like(self, x: asim.Node, dtype=None) -> asim.Node:
        """A second operand for ``x`` (its shape, ``dtype``): from the pool, a new or shared parameter,
        a broadcast constant, an iota, or a smaller value broadcast up."""
        dtype = dtype or x.dtype
        y = self.pick((dtype,), x.shape)
        how = self.draw(st.sampled_from(("pool", "pool", "param", "const", "bcast", "iota")))
        if how == "pool" and y is not None:
            return y
        if how == "bcast" and x.rank:
            keep = sorted(set(self.draw(st.lists(st.integers(0, x.rank - 1), max_size=x.rank))))
            small = tuple(x.shape[d] for d in keep)
            src = self.pick((dtype,), small) or self.param(small, dtype)
            return self.g.add_node("broadcast", (src,), shape=x.shape, name=self.name("b"), dimensions=tuple(keep))
        if how == "iota" and x.rank and dtype != "pred":
            return self.g.add_node("iota", (), shape=x.shape, dtype=dtype, name=self.name("i"),
                                   iota_dimension=self.draw(st.integers(0, x.rank - 1)))
        if how == "const" or x.size == 0:
            return self.filled(x.shape, dtype)
        return self.param(x.shape, dtype)

    def to_dtype(self, x: asim.Node, dtypes) -> asim.Node:
        if x.dtype in dtypes:
            return x
        to = self.draw(st.sampled_from(dtypes))
        return self.g.add_node("convert", (x,), dtype=to, name=self.name("cv"))

    def in_domain(self, x: asim.Node, domain: str) -> asim.Node:
        """Put a domain adapter in front of a float operand."""
        if domain == "any" or x.dtype not in FLOAT:
            return x
        g, n = self.g, self.name
        if domain in ("positive", "nonzero"):
            a = g.add_node("abs", (x,), name=n("abs"))
            return g.add_node("add", (a, self.filled(x.shape, x.dtype, 0.5)), name=n("pos"))
        if domain == "unit":
            return g.add_node("tanh", (x,), name=n("unit"))
        if domain == "bounded":
            t = g.add_node("tanh", (x,), name=n("tanh"))
            return g.add_node("multiply", (t, self.filled(x.shape, x.dtype, 8.0)), name=n("bnd"))
        raise ValueError(domain)


def _family(dtype) -> str:
    return "float" if dtype in FLOAT else ("pred" if dtype == "pred" else "int")


SCALARS = {"float": (0.5, -1.5, 2.0, 3.0, 1e-3, 100.0, -0.25, 1.0, 7.0),
           "int": (0, 1, 2, 3, -1, 7, 100, -128, 127),
           "pred": (True, False)}
#: dtypes of index operands (JAX uses s32; any integer type is allowed)
INDEX_DTYPES = ("s32", "s32", "s32", "s64", "u32", "u8", "s8")
INPUT_KINDS = {"float": ("normal", "normal", "normal", "wide", "specials"),
               "int": ("small", "small", "full"),
               "pred": ("bits",)}


# -- the op table -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OpRow:
    name: str
    arity: int                      # operands drawn from the pool, all of the first one's shape and dtype
    dtypes: tuple                   # operand dtypes it accepts
    build: Callable                 # (gen, operands) -> node; the builder may add more nodes
    domains: tuple = ()             # per operand: positive | nonzero | unit | bounded | any (default)
    weight: int = 1


def _unary(op):
    return lambda gen, xs: gen.g.add_node(op, xs, name=gen.name(op[:4]))


def _binary(op):
    return lambda gen, xs: gen.g.add_node(op, xs, name=gen.name(op[:4]))


def _compare(gen, xs):
    d = gen.draw(st.sampled_from(("EQ", "NE", "LT", "LE", "GT", "GE")))
    return gen.g.add_node("compare", xs, name=gen.name("cmp"), direction=d)


def _select(gen, xs):
    (x,) = xs
    p = gen.pick(PRED, x.shape)
    if p is None:
        y = gen.like(x)
        p = gen.g.add_node("compare", (x, y), name=gen.name("cmp"),
                           direction=gen.draw(st.sampled_from(("LT", "GE", "NE"))))
    return gen.g.add_node("select", (p, x, gen.like(x)), name=gen.name("sel"))


def _clamp(gen, xs):
    (x,) = xs
    lo, hi = sorted([gen.draw(st.sampled_from(SCALARS[_family(x.dtype)][:6])) for _ in range(2)])
    scalar = gen.draw(st.booleans()) or not x.rank
    if scalar:
        a, b = gen.scalar(x.dtype, lo), gen.scalar(x.dtype, hi)
    else:
        a, b = gen.filled(x.shape, x.dtype, lo), gen.filled(x.shape, x.dtype, hi)
    return gen.g.add_node("clamp", (a, x, b), name=gen.name("clamp"))


def _convert(gen, xs):
    (x,) = xs
    to = gen.draw(st.sampled_from(tuple(d for d in ALL if d != x.dtype)))
    return gen.g.add_node("convert", xs, dtype=to, name=gen.name("cv"))


def _reduce_dims(gen, x):
    how = gen.draw(st.sampled_from(("one", "one", "last", "several", "all", "none")))
    if how == "none" or x.rank == 0:             # XLA allows a reduce over no dims: init op x, elementwise
        return ()
    if how == "all" or x.rank == 1:
        return tuple(range(x.rank))
    if how == "last":
        return (x.rank - 1,)
    if how == "one":
        return (gen.draw(st.integers(0, x.rank - 1)),)
    return tuple(sorted(set(gen.draw(st.lists(st.integers(0, x.rank - 1), min_size=1, max_size=x.rank)))))


def _reducer_for(gen, x):
    if x.dtype == "pred":
        return gen.draw(st.sampled_from(("and", "or")))
    return gen.draw(st.sampled_from(("sum", "sum", "max", "min", "prod") if x.dtype in FLOAT
                                    else ("sum", "max", "min", "prod")))


def _init(gen, x, reducer):
    """The reducer's identity most of the time; sometimes another value (XLA allows any init)."""
    if gen.draw(st.integers(0, 3)) == 0:
        return gen.scalar(x.dtype)
    ident = {"sum": 0, "prod": 1, "and": True, "or": False}.get(reducer)
    if ident is None:
        if x.dtype in FLOAT:
            ident = -np.inf if reducer == "max" else np.inf
        else:
            info = np.iinfo(np.dtype(cast(np.zeros(()), x.dtype).dtype))
            ident = info.min if reducer == "max" else info.max
    return gen.scalar(x.dtype, ident)


def _reduce(gen, xs):
    (x,) = xs
    reducer = _reducer_for(gen, x)
    if reducer == "prod" and x.dtype in FLOAT:
        x = gen.in_domain(x, "unit")                      # a product of many terms stays finite
    dims = _reduce_dims(gen, x)
    return gen.g.add_node("reduce", (x, _init(gen, x, reducer)), name=gen.name("red"), dimensions=dims,
                          reducer=reducer)


def _reduce_back(gen, xs):
    """The normalisation idiom: reduce over some dims, broadcast back, combine with the source."""
    (x,) = xs
    reducer = "sum" if x.dtype != "pred" else "or"
    if x.dtype in FLOAT:
        reducer = gen.draw(st.sampled_from(("sum", "max")))
    dims = _reduce_dims(gen, x)
    r = gen.g.add_node("reduce", (x, _init(gen, x, reducer)), name=gen.name("red"), dimensions=dims,
                       reducer=reducer)
    if x.dtype in FLOAT and gen.draw(st.booleans()):       # a mean, or an expensive op on the result
        r = gen.g.add_node(gen.draw(st.sampled_from(("multiply", "divide"))),
                           (r, gen.filled(r.shape, r.dtype, 3.0)), name=gen.name("scl"))
        if gen.draw(st.booleans()):
            r = gen.g.add_node("exponential", (gen.in_domain(r, "bounded"),), name=gen.name("exp"))
    kept = tuple(d for d in range(x.rank) if d not in dims)
    b = gen.g.add_node("broadcast", (r,), shape=x.shape, name=gen.name("bb"), dimensions=kept)
    op = {"pred": "xor"}.get(x.dtype, gen.draw(st.sampled_from(("subtract", "add", "multiply", "maximum"))))
    return gen.g.add_node(op, (x, b), name=gen.name("nrm"))


def _shared_across_reductions(gen, xs):
    """One cheap producer shared by two reductions over different dims (optax.adafactor's row and column
    statistics, whose scalar ``lr * 0.5`` scales both): either a scalar of the inputs scaling both results
    (both outputs), or an elementwise value both reduce and an elementwise consumer combines with them."""
    (x,) = xs
    if x.rank < 2:
        return None
    a = gen.draw(st.integers(0, x.rank - 1))
    b = (a + 1 + gen.draw(st.integers(0, x.rank - 2))) % x.rank
    g, n = gen.g, gen.name
    if gen.draw(st.booleans()):                                    # a scalar of the inputs in both epilogues
        d = g.add_node("multiply", (gen.param((), x.dtype), gen.scalar(x.dtype)), name=n("shs"))
        outs = []
        for dim in (a, b):
            r = g.add_node("reduce", (x, _init(gen, x, "sum")), name=n("shr"), dimensions=(dim,), reducer="sum")
            bd = g.add_node("broadcast", (d,), shape=r.shape, name=n("shb"), dimensions=())
            outs.append(g.add_node("multiply", (bd, r), name=n("sho")))
        if gen.draw(st.booleans()):      # the scalar an output too (an optimizer's new step count), stored
            gen.pool.append(d)           # from the epilogues that compute it
        gen.pool.append(outs[1])
        return outs[0]
    p = g.add_node("multiply", (x, gen.like(x)), name=n("shp"))     # an element value both reductions read
    out = p
    for dim in (a, b):
        r = g.add_node("reduce", (p, _init(gen, p, "sum")), name=n("shr"), dimensions=(dim,), reducer="sum")
        kept = tuple(d for d in range(x.rank) if d != dim)
        bb = g.add_node("broadcast", (r,), shape=x.shape, name=n("shb"), dimensions=kept)
        out = g.add_node("subtract", (out, bb), name=n("sho"))
    return out


def _statistics_over_a_view(gen, xs):
    """A PyTorch group norm's idiom: ``x`` reshaped to a view whose rows are its trailing elements (``[N, G,
    rest]``), a row statistic taken and combined with the view, the result reshaped back and combined with
    ``x``'s own shape (``x`` itself, or a value broadcast along one of its dims): stages over two shapes of one
    tensor, which may share a mapping (``flatindex.reshapes``)."""
    (x,) = xs
    if x.rank == 0 or x.size < 2 or x.dtype == "pred":
        return None
    lead = [d for d in (1, 2, 3, 4, 6, 8, 16) if x.size % d == 0 and x.size // d > 1]
    k = gen.draw(st.sampled_from(lead))
    view = gen.draw(st.sampled_from([(k, x.size // k)] + [(a, k // a, x.size // k) for a in (2, 3) if k % a == 0]))
    g, n = gen.g, gen.name
    v = g.add_node("reshape", (x,), shape=view, name=n("vw"))
    reducer = gen.draw(st.sampled_from(("sum", "max"))) if x.dtype in FLOAT else "sum"
    r = g.add_node("reduce", (v, _init(gen, v, reducer)), name=n("vr"), dimensions=(len(view) - 1,), reducer=reducer)
    b = g.add_node("broadcast", (r,), shape=view, name=n("vb"), dimensions=tuple(range(len(view) - 1)))
    c = g.add_node("subtract", (v, b), name=n("vc"))
    back = g.add_node("reshape", (c,), shape=x.shape, name=n("vx"))
    other = x if gen.draw(st.booleans()) else gen.like(x)
    return g.add_node(gen.draw(st.sampled_from(("add", "multiply", "maximum"))), (back, other), name=n("vo"))


def _broadcast(gen, xs):
    (x,) = xs
    extra = gen.draw(st.lists(st.sampled_from((1, 2, 3, 5, 8, 32)), min_size=1, max_size=2))
    rank = x.rank + len(extra)
    where = sorted(gen.draw(st.permutations(range(rank)))[:x.rank])
    if gen.draw(st.integers(0, 5)) == 0 and x.rank > 1:
        where = list(gen.draw(st.permutations(where)))       # unsorted dimensions (a transposing broadcast)
    shape = [0] * rank
    it = iter(extra)
    for d in range(rank):
        shape[d] = x.shape[where.index(d)] if d in where else next(it)
    if not _fits(shape, gen.limit):
        return None
    return gen.g.add_node("broadcast", (x,), shape=tuple(shape), name=gen.name("bc"), dimensions=tuple(where))


def _factor(gen, n, rank):
    """A shape of ``rank`` dims with product ``n``."""
    if rank == 0:
        return () if n == 1 else None
    if n == 0:
        dims = [gen.draw(st.sampled_from((1, 2, 3))) for _ in range(rank)]
        dims[gen.draw(st.integers(0, rank - 1))] = 0
        return tuple(dims)
    dims = []
    rest = n
    for _ in range(rank - 1):
        divs = [d for d in (1, 2, 3, 4, 5, 7, 8, 13, 16, 32, 37) if rest % d == 0]
        d = gen.draw(st.sampled_from(divs))
        dims.append(d)
        rest //= d
    dims.append(rest)
    order = gen.draw(st.permutations(range(rank)))
    return tuple(dims[i] for i in order)


def _reshape(gen, xs):
    (x,) = xs
    shape = _factor(gen, x.size, gen.draw(st.integers(0 if x.size == 1 else 1, 4)))
    if shape is None:
        return None
    return gen.g.add_node("reshape", (x,), shape=shape, name=gen.name("rs"))


def _transpose(gen, xs):
    (x,) = xs
    perm = tuple(gen.draw(st.permutations(range(x.rank))))
    return gen.g.add_node("transpose", (x,), name=gen.name("tr"), permutation=perm)


def _reverse(gen, xs):
    (x,) = xs
    dims = tuple(sorted(set(gen.draw(st.lists(st.integers(0, x.rank - 1), min_size=1, max_size=x.rank)))))
    return gen.g.add_node("reverse", (x,), name=gen.name("rev"), dimensions=dims)


def _slice(gen, xs):
    (x,) = xs
    starts, limits, strides = [], [], []
    for n in x.shape:
        a = gen.draw(st.integers(0, n))
        b = gen.draw(st.integers(a, n))
        starts.append(a)
        limits.append(b)
        strides.append(gen.draw(st.sampled_from((1, 1, 2, 3))))
    return gen.g.add_node("slice", (x,), name=gen.name("sl"), starts=tuple(starts), limits=tuple(limits),
                          strides=tuple(strides))


def _concatenate(gen, xs):
    (x,) = xs
    dim = gen.draw(st.integers(0, x.rank - 1))
    parts = [x]
    for _ in range(gen.draw(st.integers(1, 2))):
        how = gen.draw(st.sampled_from(("self", "param", "slice")))
        if how == "self":
            parts.append(x)
        else:
            n = gen.draw(st.sampled_from((0, 1, 2, 5, 32)))
            shape = tuple(n if d == dim else s for d, s in enumerate(x.shape))
            if how == "slice" and x.shape[dim] >= n:
                lim = tuple(n if d == dim else s for d, s in enumerate(x.shape))
                parts.append(gen.g.add_node("slice", (x,), name=gen.name("sl"), starts=(0,) * x.rank,
                                            limits=lim, strides=(1,) * x.rank))
            else:
                parts.append(gen.param(shape, x.dtype))
    order = gen.draw(st.permutations(range(len(parts))))
    total = tuple(sum(p.shape[dim] for p in parts) if d == dim else s for d, s in enumerate(x.shape))
    if not _fits(total, gen.limit):
        return None
    return gen.g.add_node("concatenate", tuple(parts[i] for i in order), name=gen.name("cat"), dimension=dim)


def _pad(gen, xs):
    (x,) = xs
    low = tuple(gen.draw(st.integers(0, 3)) for _ in x.shape)
    high = tuple(gen.draw(st.integers(0, 3)) for _ in x.shape)
    shape = tuple(n + a + b for n, a, b in zip(x.shape, low, high, strict=True))
    if not _fits(shape, gen.limit):
        return None
    return gen.g.add_node("pad", (x, gen.scalar(x.dtype)), name=gen.name("pad"), low=low, high=high,
                          interior=(0,) * x.rank)


def _iota(gen, xs):
    (x,) = xs
    if not x.rank:
        return None
    dtype = gen.draw(st.sampled_from(("s32", "f32", "u8", "bf16")))
    return gen.g.add_node("iota", (), shape=x.shape, dtype=dtype, name=gen.name("iota"),
                          iota_dimension=gen.draw(st.integers(0, x.rank - 1)))


def _array_constant(gen, xs):
    n = gen.draw(st.integers(1, 16))
    dtype = gen.draw(st.sampled_from(("f32", "s32", "pred", "bf16")))
    rng = np.random.default_rng(gen.draw(st.integers(0, 2 ** 16)))
    value = cast(rng.standard_normal(n) * 3, dtype)
    c = gen.g.constant(value, dtype=dtype, name=gen.name("k"))
    gen.pool.append(c)
    return c


FLOAT_UNARY = [("negate", "any"), ("abs", "any"), ("sign", "any"), ("exponential", "bounded"),
               ("exponential-minus-one", "bounded"), ("log", "positive"), ("log-plus-one", "positive"),
               ("sqrt", "positive"), ("rsqrt", "positive"), ("cbrt", "any"), ("tanh", "any"),
               ("logistic", "any"), ("erf", "any"), ("floor", "any"), ("ceil", "any"),
               ("round-nearest-afz", "any"), ("round-nearest-even", "any"), ("sine", "any"), ("cosine", "any"),
               ("tan", "unit"), ("is-finite", "any")]
FLOAT_BINARY = [("add", 3), ("subtract", 3), ("multiply", 3), ("divide", 2), ("maximum", 2), ("minimum", 2),
                ("remainder", 1), ("atan2", 1), ("power", 1)]
#: operand domains of the binary float ops (a divisor away from 0, a positive base)
FLOAT_BINARY_DOMAINS = {"divide": ("any", "nonzero"), "remainder": ("any", "nonzero"), "power": ("positive", "any")}
INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or", "xor",
              "shift-left", "shift-right-arithmetic", "shift-right-logical", "power"]

#: the table: one row per op or idiom (the first rows are the ones hypothesis reaches for most)
OPS: list[OpRow] = (
    [OpRow("reduce+broadcast", 1, ALL, _reduce_back, weight=6),
     OpRow("reduce", 1, ALL, _reduce, weight=6),
     OpRow("broadcast", 1, ALL, _broadcast, weight=3),
     OpRow("shared producer, two reductions", 1, FLOAT + INT, _shared_across_reductions, weight=2),
     OpRow("statistics over a view", 1, FLOAT + INT, _statistics_over_a_view, weight=2)]
    + [OpRow(op, 2, FLOAT, _binary(op), FLOAT_BINARY_DOMAINS.get(op, ()), weight=w) for op, w in FLOAT_BINARY]
    + [OpRow(op, 1, FLOAT, _unary(op), (domain,), weight=2 if op in ("exponential", "log", "tanh") else 1)
       for op, domain in FLOAT_UNARY]
    + [OpRow("compare", 2, ALL, _compare, weight=2),
       OpRow("select", 1, ALL, _select, weight=2),
       OpRow("clamp", 1, FLOAT + INT, _clamp),
       OpRow("convert", 1, ALL, _convert, weight=3),
       OpRow("reshape", 1, ALL, _reshape, weight=2),
       OpRow("transpose", 1, ALL, _transpose, weight=2),
       OpRow("reverse", 1, ALL, _reverse),
       OpRow("slice", 1, ALL, _slice, weight=2),
       OpRow("concatenate", 1, ALL, _concatenate, weight=2),
       OpRow("pad", 1, ALL, _pad),
       OpRow("iota", 1, ALL, _iota),
       OpRow("array constant", 0, ALL, _array_constant)]
    + [OpRow(f"{op}/int", 2, INT, _binary(op)) for op in INT_BINARY]
    + [OpRow(f"{op}/int", 1, INT, _unary(op)) for op in ("negate", "abs", "sign", "not")]
    + [OpRow(f"{op}/pred", 2, PRED, _binary(op)) for op in ("and", "or", "xor")]
    + [OpRow("not/pred", 1, PRED, _unary("not"))]
)
ROWS_NEEDING_RANK = {"transpose", "reverse", "slice", "concatenate", "pad", "iota", "shared producer, two reductions"}


# -- the ops real models add (issue 9, point 3): indexed loads, argmax, and the library ops ----------------
#: the Numba backend's library kernels are plain (a rank sort, an O(window) fold per output, a scatter applied
#: in order by one thread per element): in the CUDA simulator their rows stay at most this long
TINY_LIBRARY_ROW = 64
#: rows of the O(n^2) library ops (reverse cumsum, general windows) the oracle folds one window step at a time
WINDOW_ROW = 256


def _tiny(gen) -> bool:
    return gen.limit <= TINY_ELEMENTS


def _take(gen, xs):
    """``x[ids]`` along an axis (embedding lookups), or a gather of a window of ``w`` starting at ``ids``."""
    (x,) = xs
    axis = gen.draw(st.integers(0, x.rank - 1))
    n = x.shape[axis]
    if n == 0:                                   # XLA clamps into [0, n - 1]: no element to read
        return None
    ishape = tuple(gen.draw(st.lists(st.sampled_from((3, 1, 7, 0, 13, 2)), min_size=1, max_size=2)))
    ids = gen.indices(ishape, n)
    if gen.draw(st.integers(0, 3)) == 0:         # a window of w elements per index: start clamped to [0, n - w]
        w = gen.draw(st.integers(1, n))
        out = x.shape[:axis] + ishape + (w,) + x.shape[axis + 1:]
        if not _fits(out, gen.limit):
            return None
        ir = len(ishape)
        offset = tuple(range(axis)) + tuple(range(axis + ir, x.rank + ir))
        sizes = tuple(w if d == axis else m for d, m in enumerate(x.shape))
        return gen.g.gather(x, ids, offset_dims=offset, collapsed_slice_dims=(), start_index_map=(axis,),
                            slice_sizes=sizes, index_vector_dim=ir, name=gen.name("gw"))
    if not _fits(x.shape[:axis] + ishape + x.shape[axis + 1:], gen.limit):
        return None
    return gen.g.take(x, ids, axis, name=gen.name("take"))


def _take_along_axis(gen, xs):
    """``take_along_axis(x, ids, axis)`` (integer-label cross-entropy); sometimes the ids are an argmax."""
    (x,) = xs
    axis = gen.draw(st.integers(0, x.rank - 1))
    n = x.shape[axis]
    if x.size == 0:              # the batching dims' slice size is 1: XLA allows no empty dim here
        return None
    if gen.draw(st.integers(0, 3)) == 0 and x.dtype != "pred":        # pick the best: argmax, then gather it
        best = gen.g.argmax(x, axis, name=gen.name("am"))
        keep = tuple(d for d in range(x.rank) if d != axis)
        ids = gen.g.broadcast(best, tuple(1 if d == axis else m for d, m in enumerate(x.shape)), keep,
                              name=gen.name("amb"))
    else:
        m = gen.draw(st.sampled_from((1, 2, 5, 0)))
        ids = gen.indices(tuple(m if d == axis else k for d, k in enumerate(x.shape)), n)
    return gen.g.take_along_axis(x, ids, axis, name=gen.name("tal"))


def _start(gen, n, size):
    """A start index for a dim of ``n`` and a slice of ``size``: a constant or a run-time scalar, sometimes
    out of range (XLA clamps it to [0, n - size])."""
    if gen.draw(st.booleans()):
        return gen.draw(st.sampled_from((0, 1, n - size, n, -2, n + 5)))
    return gen.indices((), max(n - size + 1, 1))


def _dynamic_slice(gen, xs):
    (x,) = xs
    sizes = tuple(gen.draw(st.integers(0, n)) for n in x.shape)
    starts = [_start(gen, n, s) for n, s in zip(x.shape, sizes, strict=True)]
    return gen.g.dynamic_slice(x, starts, sizes, name=gen.name("ds"))


def _dynamic_update_slice(gen, xs):
    """A KV-cache update: ``x`` with a block written at a run-time position."""
    (x,) = xs
    shape = tuple(gen.draw(st.integers(0, n)) for n in x.shape)
    src = gen.pick((x.dtype,), shape)
    if src is None or gen.draw(st.booleans()):
        src = gen.param(shape, x.dtype) if gen.draw(st.booleans()) else gen.g.slice(
            x, (0,) * x.rank, shape, (1,) * x.rank, name=gen.name("sl"))
    starts = [_start(gen, n, s) for n, s in zip(x.shape, shape, strict=True)]
    return gen.g.dynamic_update_slice(x, src, starts, name=gen.name("dus"))


def _argmax(gen, xs):
    """argmax / argmin along an axis, as JAX lowers them: a reduce of (x, iota) pairs; the index and, as
    often, the value are used."""
    (x,) = xs
    axis = gen.draw(st.integers(0, x.rank - 1))
    which = gen.draw(st.sampled_from(("argmax", "argmin")))
    index_dtype = gen.draw(st.sampled_from(("s32", "s32", "s64")))
    g = gen.g
    iota = g.iota(x.shape, axis, index_dtype)
    ident = {"argmax": "max", "argmin": "min"}[which]
    init = g.constant(g._identity(ident, x.dtype), x.dtype)
    zero = g.constant(0, index_dtype)
    base = gen.name(which[3:])
    index = g.add_node("reduce", (x, iota, init, zero), name=f"{base}i", dimensions=(axis,), reducer=which,
                       result=1)
    if gen.draw(st.booleans()):
        value = g.add_node("reduce", (x, iota, init, zero), name=f"{base}v", dimensions=(axis,), reducer=which,
                           result=0)
        gen.pool.append(value)
    return index


def _cumsum(gen, xs):
    """``jnp.cumsum`` (forward or reverse), or cumulative max/min/prod: a reduce-window over a whole axis."""
    (x,) = xs
    axis = gen.draw(st.integers(0, x.rank - 1))
    n = x.shape[axis]
    reverse = gen.draw(st.integers(0, 3)) == 0
    if (_tiny(gen) and n > TINY_LIBRARY_ROW) or (reverse and n > WINDOW_ROW):
        return None
    reducer = gen.draw(st.sampled_from(("sum", "sum", "sum", "max", "min", "prod")))
    if reducer == "prod" and x.dtype in FLOAT:
        x = gen.in_domain(x, "unit")
    return gen.g.cumsum(x, axis, reverse=reverse, reducer=reducer, name=gen.name("cum"))


def _reduce_window(gen, xs):
    """A small sliding window (pooling-like): sizes, strides and padding per dim."""
    (x,) = xs
    window = tuple(gen.draw(st.sampled_from((1, 2, 3))) for _ in x.shape)
    strides = tuple(gen.draw(st.sampled_from((1, 1, 2))) for _ in x.shape)
    pads = [(gen.draw(st.integers(0, 2)), gen.draw(st.integers(0, 2))) for _ in x.shape]
    if any(n > WINDOW_ROW for n in x.shape) or (_tiny(gen) and x.size > TINY_LIBRARY_ROW):
        return None
    reducer = "or" if x.dtype == "pred" else gen.draw(st.sampled_from(("sum", "max", "min")))
    return gen.g.reduce_window(x, window, strides, pads, reducer=reducer, name=gen.name("rw"))


def _sort_row_ok(gen, x, axis) -> bool:
    return not (_tiny(gen) and x.shape[axis] > TINY_LIBRARY_ROW)


def _sort(gen, xs):
    """``jnp.sort`` ascending or descending along an axis (NaNs last, -0 == 0, stable)."""
    (x,) = xs
    axis = gen.draw(st.integers(0, x.rank - 1))
    if not _sort_row_ok(gen, x, axis):
        return None
    return gen.g.sort(x, axis, descending=gen.draw(st.booleans()), name=gen.name("sort"))[0]


def _argsort(gen, xs):
    """``jnp.argsort``: a sort of (x, iota) by x; or a two-key sort carrying a third operand along."""
    (x,) = xs
    axis = gen.draw(st.integers(0, x.rank - 1))
    if not _sort_row_ok(gen, x, axis):
        return None
    iota = gen.g.iota(x.shape, axis, "s32")
    if gen.draw(st.booleans()):
        ops, keys = [x, iota], 1
    else:
        ops, keys = [x, gen.like(x), iota], 2
    res = gen.g.sort(ops, axis, descending=gen.draw(st.booleans()), num_keys=keys, name=gen.name("asort"))
    if gen.draw(st.booleans()):
        gen.pool.append(res[0])
    return res[-1]


def _topk(gen, xs):
    """``lax.top_k``: the k largest (or smallest) of each last-dim row, values and s32 indices."""
    (x,) = xs
    n = x.shape[-1]
    if not _sort_row_ok(gen, x, x.rank - 1):
        return None
    k = gen.draw(st.sampled_from(tuple(sorted({0, 1, min(n, 3), n})))) if n else 0
    values, indices = gen.g.top_k(x, k, largest=gen.draw(st.integers(0, 3)) > 0, name=gen.name("topk"))
    gen.pool.append(values)
    return indices


def _scatter(gen, xs):
    """``x.at[ids].add(u)`` (the gradient of a gather: updates collide), ``.set`` (the last wins), ``.max``/
    ``.min``; indices past either end drop their update."""
    (x,) = xs
    axis = gen.draw(st.integers(0, x.rank - 1))
    n = x.shape[axis]
    ishape = tuple(gen.draw(st.lists(st.sampled_from((3, 1, 7, 0, 13, 2)), min_size=1, max_size=2)))
    ushape = x.shape[:axis] + ishape + x.shape[axis + 1:]
    limit = TINY_LIBRARY_ROW if _tiny(gen) else 4096
    if prod(ushape) > limit or (_tiny(gen) and x.size > TINY_ELEMENTS):
        return None
    ids = gen.indices(ishape, max(n, 1))
    if x.dtype == "pred":
        combiner = gen.draw(st.sampled_from(("or", "and", "assign")))
    else:
        combiner = gen.draw(st.sampled_from(("sum", "sum", "assign", "max", "min")))
    if gen.draw(st.booleans()) and n:             # the updates are a gather of x at the same ids (a gradient)
        updates = gen.g.take(x, ids, axis, name=gen.name("take"))
    else:
        updates = gen.pick((x.dtype,), ushape) or gen.param(ushape, x.dtype)
    return gen.g.index_add(x, ids, updates, axis, combiner=combiner, name=gen.name("sc"))


#: the rows for them (index operands are drawn by :meth:`Gen.indices`)
MODEL_OPS = [OpRow("take", 1, ALL, _take, weight=2),
             OpRow("take_along_axis", 1, ALL, _take_along_axis, weight=2),
             OpRow("dynamic-slice", 1, ALL, _dynamic_slice),
             OpRow("dynamic-update-slice", 1, ALL, _dynamic_update_slice),
             OpRow("argmax", 1, FLOAT + INT, _argmax, weight=2),
             OpRow("cumsum", 1, FLOAT + INT, _cumsum, weight=2),
             OpRow("reduce-window", 1, ALL, _reduce_window),
             OpRow("sort", 1, ALL, _sort),
             OpRow("argsort", 1, FLOAT + INT, _argsort),
             OpRow("topk", 1, FLOAT + INT, _topk),
             OpRow("scatter", 1, ALL, _scatter, weight=2)]
OPS += MODEL_OPS
ROWS_NEEDING_RANK |= {r.name for r in MODEL_OPS}


def apply(gen: Gen, row: OpRow) -> Optional[asim.Node]:
    """Apply one table row: pick operands, convert and adapt them, build; None if it does not fit."""
    if row.arity == 0:
        return row.build(gen, ())
    x = gen.pick(min_rank=1 if row.name in ROWS_NEEDING_RANK else 0)
    if x is None:
        return None
    x = gen.to_dtype(x, row.dtypes)
    operands = [x] + [gen.like(x) for _ in range(row.arity - 1)]
    domains = tuple(row.domains) + ("any",) * (row.arity - len(row.domains))
    operands = [gen.in_domain(o, d) for o, d in zip(operands, domains, strict=True)]
    out = row.build(gen, tuple(operands))
    if out is None:
        return None
    gen.pool.append(out)
    return out


# -- whole graphs with their inputs --------------------------------------------------------------------------

@dataclass
class Case:
    graph: asim.Graph
    inputs: list
    note: str

    def __repr__(self):
        ins = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in self.graph.inputs)
        return f"Case({self.note}; inputs {ins})\n{self.graph}"

    def _repr_pretty_(self, p, cycle):
        """What hypothesis prints for a failing example (its printer shows a dataclass field by field, which
        gives the inputs' values but not the graph): the graph, whole, so a CI log alone reproduces it."""
        p.text(repr(self))


def make_inputs(gen: Gen, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for p in gen.g.inputs:
        kind = gen.input_kinds[p.name]
        shape, dt = p.shape, p.dtype
        if isinstance(kind, tuple):                   # ("index", lo, hi)
            v = rng.integers(kind[1], kind[2], size=shape, endpoint=True)
        elif kind == "normal":
            v = rng.standard_normal(shape)
        elif kind == "wide":
            v = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, size=shape)
        elif kind == "specials":
            v = rng.standard_normal(shape)
            hit = rng.random(shape) < 0.05
            v = np.where(hit, rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], size=shape), v)
        elif kind == "small":
            v = rng.integers(-8, 9, size=shape)
            if dt.startswith("u"):
                v = np.abs(v)
        elif kind == "full":
            info = np.iinfo(np.dtype(cast(np.zeros(()), dt).dtype))
            v = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np.int64) \
                if info.bits < 64 else rng.integers(info.min, info.max, size=shape, dtype=np.int64)
        else:
            v = rng.random(shape) < 0.5
        out.append(np.asarray(cast(np.asarray(v), dt)))
    return out


#: per family, rows drawn more often: long rows are where index arithmetic breaks (reshapes of long rows:
#: numpy's unravel_index past 8192), and where reductions get split over blocks
FAMILY_BOOST = {"long_rows": {"reshape": 4, "transpose": 2, "slice": 2, "reduce+broadcast": 2,
                              "statistics over a view": 2},
                "shared": {"shared producer, two reductions": 25},
                "views": {"statistics over a view": 25}}


@st.composite
def cases(draw, family: str = "mixed", max_ops: int = 8) -> Case:
    """A random graph and inputs.  ``family``: ``mixed`` (everything), ``float`` (float dtypes only),
    ``long_rows`` (rows and columns past 2^13 and 2^16 elements), ``int`` (integer and boolean graphs),
    ``tiny`` (everything, at most ``TINY_ELEMENTS`` per tensor: for Numba's CUDA simulator), ``shared``
    (float graphs where one cheap producer feeds reductions over different dims, drawn often), ``views``
    (statistics over a reshaped view combined with the tensor's own shape, drawn often: a PyTorch group norm)."""
    g = asim.Graph("random")
    gen = Gen(draw, g, long_rows=family == "long_rows", limit=TINY_ELEMENTS if family == "tiny" else MAX_ELEMENTS)
    dtypes = {"float": ("f32", "f32", "bf16", "f16"), "shared": ("f32", "f32", "bf16", "f16"),
              "views": ("f32", "f32", "f16", "s32"), "int": ("s32", "s8", "u8", "s64", "pred", "u32", "s16"),
              "long_rows": ("f32", "f32", "bf16", "s32")}.get(family, PARAM_DTYPES)
    for _ in range(draw(st.integers(1, 3))):
        gen.param(shapes(draw, gen.long_rows, family == "tiny"), draw(st.sampled_from(dtypes)))
    rows = [r for r in OPS if family != "int" or set(r.dtypes) & set(INT + PRED)]
    if family in ("float", "shared"):
        rows = [r for r in OPS if set(r.dtypes) & set(FLOAT) and r.name not in ("convert",)]
    boost = FAMILY_BOOST.get(family, {})
    weights = [r.weight * boost.get(r.name, 1) for r in rows]
    pick = st.sampled_from([r for r, w in zip(rows, weights, strict=True) for _ in range(w)])
    n_ops = draw(st.integers(3, max_ops))
    for _ in range(n_ops):
        apply(gen, draw(pick))
    computed = [n for n in gen.pool if n.op not in ("parameter",)]
    outs = []
    for _ in range(draw(st.integers(1, 3))):
        src = computed if computed and draw(st.integers(0, 5)) else gen.pool
        outs.append(src[draw(st.integers(max(0, len(src) - 4), len(src) - 1))])
    g.set_outputs(outs)
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return Case(g, make_inputs(gen, seed), f"{family}, {n_ops} op draws, seed {seed}")
