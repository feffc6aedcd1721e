"""Where each element of a stage runs: ``(block, thread, iteration)`` as numpy arrays.

The SIMT model never decides where an element goes: it asks the stage's
:class:`~astitch_sim.plan.mapping.ThreadMapping` (``locate``), exactly like the
compiler's block-locality check and the code generator do.  What this module
adds is a cheap *representation* of the answer, so that a BERT-size stage
(12.5M elements) can be simulated in a fraction of a second:

``dense``       ``block``, ``thread`` and ``iteration`` are full arrays over the
                stage's domain -- one ``locate`` call over every element.  Used for
                small domains, ``flat`` mappings and trace mode.
``separable``   for ``rows`` and ``columns`` mappings the three numbers are a sum
                ``f(task coordinates) + g(reduced coordinates)``: in ``locate``,
                ``block = slot // rows_per_block * splits + part`` where the slot
                depends only on the row and the part only on the column, and
                likewise for the thread and the iteration.  We ask ``locate`` about
                one line of each part, keep two small arrays shaped to broadcast
                (``[R, 1]`` and ``[1, C]``), and check the sum against ``locate`` on
                a sample of elements (falling back to dense if it ever disagreed).

Arrays are always *broadcastable over the domain* and of full rank, the same
convention as ``np.indices(shape, sparse=True)``; a value that depends only on
the row is held as ``[R, 1]`` and costs nothing to broadcast.

Warp instructions.  A warp is 32 consecutive threads of a block; one load or
store of a warp in one loop iteration is one *warp instruction*, identified by
``W = (block * iterations + iteration) * warps_per_block + thread // 32``; in a flat or rows
mapping with vectors (``vector > 1``) the ``vector`` consecutive elements of a thread's
vector are one access (``ld.global.v4``), so ``iteration // vector`` replaces ``iteration``
(a tensor read *scattered* costs one instruction per element again: ``memory.py``).
In a separable geometry with ``threads_per_row % 32 == 0`` a warp never spans
two tasks of a ``rows`` mapping (its 32 threads all serve one row slot) nor two
reduced positions of a ``columns`` mapping (its 32 threads are the column lanes
of one row lane): we call the coordinates a warp instruction never spans ``X``
and the others ``Y``.  Memory counters are then computed on one ``Y`` line per
address alignment class instead of over every element (see ``memory.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

import numpy as np

from ..errors import AStitchError
from ..ir.flatindex import divmod_by, is_sum, row_major_strides, unravel

WARP = 32
#: domains with at least this many elements use the separable representation when the mapping allows it
#: (below, every element is located and counted: for a few warps' worth that is as cheap; at 2^15 a GPT
#: training step's thousand kernels of 8192-element tensors spent a fifth of their time locating and counting
#: every element)
SEPARABLE_MIN = 1 << 10
#: elements of a separable geometry checked against ThreadMapping.locate
CHECK_SAMPLE = 2048
#: where in the domain the check's sample lies, as fractions of its size: drawn once (a generator made per
#: geometry cost a tenth of a small geometry's making), the same sample every run
_SAMPLE_AT = np.random.default_rng(12345).random(CHECK_SAMPLE)


def check_sample(size: int) -> np.ndarray:
    """Element numbers of a domain of ``size`` elements to check a fast geometry against ``locate`` on: element
    0 first (its block, thread and iteration are the origin the separable lines are taken from), the last and
    the middle one, and :data:`CHECK_SAMPLE` spread at random (repeats do no harm: the check only compares)."""
    return np.concatenate([np.array([0, size - 1, size // 2], dtype=np.int64),
                           (_SAMPLE_AT * size).astype(np.int64)])


def support(a, rank: int) -> tuple:
    """Dims over which a broadcastable array really varies."""
    shape = np.shape(a)
    if len(shape) == 0:
        return ()
    return tuple(k for k, s in enumerate(shape) if s != 1)


def additive_parts(a, dims_a, rank: int):
    """``a`` (broadcastable, full rank) as ``a_A + a_B``, ``a_A`` varying over ``dims_a`` only and ``a_B`` over
    the other dims, or None if it is not such a sum.  An index through a reshape is often one array over
    several dims (``(d0 * 512 + d1) * 3072`` for a ``[16384, 3072]`` tensor read as ``[32, 512, 3072]``) that is
    still a sum per dim; split, each part stays as small as its dims.  Checked on every element of ``a``."""
    a = np.asarray(a)
    shape = np.shape(a)
    other = [k for k in range(rank) if k not in dims_a and shape[k] != 1]
    mine = [k for k in range(rank) if k in dims_a and shape[k] != 1]
    if not other or not mine:
        return (a, np.zeros((1,) * rank, a.dtype)) if not other else (np.zeros((1,) * rank, a.dtype), a)
    def at0(dims):
        return a[tuple(slice(0, 1) if k in dims else slice(None) for k in range(rank))]
    part_a = at0(other)                     # varies over dims_a (the other dims at 0)
    part_b = at0(mine) - a.reshape(-1)[0]   # varies over the other dims, minus the corner counted in part_a
    if not is_sum(a, [part_a, part_b]):
        return None
    return part_a, part_b


@dataclass(frozen=True)
class PartLine:
    """One of a split row's reduced-line arrays (block, thread or iteration of each element of the row) as two
    short lines that add up: the line's element ``c = o * n + w`` (row-major over the reduced dims; ``o`` a part,
    ``w`` an element of it, ``n`` a part's length) holds ``lo[o] + hi[w]``.  Where each part is one block (a
    split row: block over the parts, thread and trip within one), readers that know it use the two lines
    (:func:`reduce.layout_form`, the shared-memory gather); the rest ask for :meth:`whole`."""
    shape: tuple                   # the line's shape: the domain's over the reduced dims, 1 elsewhere
    lo: np.ndarray                 # over the parts
    hi: np.ndarray                 # over one part's elements

    def less(self, origin: int) -> "PartLine":
        return self if not origin else PartLine(self.shape, self.lo - origin, self.hi)

    def whole(self) -> np.ndarray:
        """The line, row-long, shaped to broadcast over the domain."""
        return (self.lo[:, None] + self.hi[None, :]).reshape(self.shape)

    def at(self, multi: tuple) -> np.ndarray:
        """The line's values at the domain coordinates ``multi`` (one index array per dim)."""
        strides = row_major_strides(self.shape)
        c = sum((np.asarray(multi[k], np.int64) * strides[k] for k in range(len(self.shape)) if self.shape[k] != 1),
                np.zeros((), np.int64))
        return self.lo[c // self.hi.size] + self.hi[c % self.hi.size]

    def constant(self, which: str) -> bool:
        """Does the line not vary within a part (``"hi"``: ``hi`` all equal) or across parts (``"lo"``)?"""
        a = self.hi if which == "hi" else self.lo
        return bool((a == a[0]).all())


class Geometry:
    """``block``, ``thread``, ``iteration`` of every element of a domain, dense or separable."""

    kind = "element"

    def __init__(self, mapping, dense: bool = False, split=None):
        m = self.mapping = mapping
        # ``split``: ``(shape, X dims, Y dims)``, the domain reshaped and its warp-free and warp dims given (a
        # split row's parts, :meth:`refined`); the flat element numbers, and so ``locate``, are the domain's
        self.shape = tuple(int(d) for d in (m.domain if split is None else split[0]))
        self.rank = len(self.shape)
        self.size = int(np.prod(self.shape)) if self.shape else 1
        self.idx = tuple(np.indices(self.shape, sparse=True)) if self.shape else ()
        self.block_threads = m.block
        self.grid = m.grid
        self.iters = max(1, m.elements_per_thread)
        self.vector = m.vector            # a vector's elements: one warp instruction
        self.wpb = ceil(m.block / WARP)
        self.X = self.Y = None          # dims a warp instruction never spans / the others
        self.parts = None               # (task dims, reduced dims) for rows/columns mappings
        self._cache: dict = {}
        self.separable = False
        self.flat = False
        if split is not None:
            self.separable = self._try_separable(split[1:])
            return                          # not separable: the caller does without it (no dense arrays made)
        if not dense and m.kind in ("rows", "columns") and self.size >= SEPARABLE_MIN:
            self.separable = self._try_separable()
        elif not dense and m.kind == "flat" and m.block % WARP == 0 and self.size >= SEPARABLE_MIN:
            # a flat mapping is a grid-stride loop: element e runs in block (e % (grid*block)) // block, thread
            # e % block, iteration e // (grid*block) (with vectors and unrolling: ``ThreadMapping.locate``,
            # which tests/plan/test_mapping.py holds to the loop itself), so its accesses are counted on
            # contiguous runs (memory.count_flat) and locate() is asked for every element only if a value needs it
            self.flat = True
        if not self.separable and not self.flat:
            self._dense()

    # -- construction -------------------------------------------------------------
    def _dense(self):
        e = np.arange(self.size, dtype=np.int64)
        b, t, it = self.mapping.locate(e)
        self.block, self.thread, self.iteration = (np.asarray(a, dtype=np.int64).reshape(self.shape)
                                                   for a in (b, t, it))
        if self.mapping.kind in ("rows", "columns"):
            g = self.mapping.groups
            self.parts = ((tuple(g[0]) if self.mapping.kind == "rows" else tuple(g[0]) + tuple(g[2])), tuple(g[1]))

    def _line(self, dims) -> tuple:
        """locate() for the elements whose coordinates vary only over ``dims`` (others 0); a rows mapping's rows
        (its task dims, leading) from :meth:`ThreadMapping.row_starts` (a block's first row plus a row within
        the block: no division per row)."""
        m = self.mapping
        if dims and m.kind == "rows" and m.groups_in_order and tuple(dims) == tuple(m.groups[0]) \
                and self.shape == tuple(m.domain):
            shape = tuple(self.shape[d] if d in dims else 1 for d in range(self.rank))
            return tuple(a.reshape(shape) for a in m.row_starts())
        e = self._flat_numbers(dims)
        b, t, it = self.mapping.locate(e.ravel())
        return tuple(np.asarray(a, dtype=np.int64).reshape(e.shape) for a in (b, t, it))

    def split_row_line(self, dims):
        """A split row's reduced line (the reduced dims of a rows mapping whose rows ``splits`` blocks share) as
        three :class:`PartLine` (block, thread, iteration): its parts' starts and one part's elements located,
        not the row (a million-element row of 256 parts asks ``locate`` about 256 + 4096 elements; the sample
        check in :meth:`_try_separable` holds the sum to ``locate`` as it holds the rest).  None where the parts
        do not end at a cut (:meth:`part_cut`)."""
        cut = self.part_cut() if tuple(dims) == tuple(self.mapping.groups[1]) and self.mapping.kind == "rows" else None
        if cut is None:
            return None
        k, inner = cut
        stride = row_major_strides(self.shape)[k]
        outer = self._flat_numbers([d for d in dims if d < k]).ravel()[:, None] + \
            (np.arange(self.shape[k] // inner, dtype=np.int64) * inner * stride)[None, :]
        within = np.arange(inner, dtype=np.int64)[:, None] * stride + \
            self._flat_numbers([d for d in dims if d > k]).ravel()[None, :]
        lo, hi, at0 = (self.mapping.locate(e.ravel()) for e in (outer, within, np.zeros(1, np.int64)))
        shape = tuple(self.shape[d] if d in dims else 1 for d in range(self.rank))
        return tuple(PartLine(shape, np.asarray(a, np.int64), np.asarray(b, np.int64) - int(np.asarray(c)[0]))
                     for a, b, c in zip(lo, hi, at0))

    def _flat_numbers(self, dims) -> np.ndarray:
        """Flat element numbers of the elements whose coordinates vary only over ``dims`` (others 0), shaped to
        broadcast over the domain."""
        strides = row_major_strides(self.shape)
        e = np.zeros([1] * self.rank, dtype=np.int64)
        for k in dims:
            e = e + self.idx[k].astype(np.int64) * strides[k]
        return e

    def part_cut(self):
        """Where a split row's parts end: ``(k, n)``, a part is whole trailing reduced dims after dim ``k`` and
        ``n`` of dim ``k``'s indices (``n`` divides its extent), or None (rows not split over blocks, split
        unevenly, or parts that end inside a dim at no such cut, or reduced dims out of order)."""
        m = self.mapping
        if m.kind != "rows" or m.splits < 2 or m.cols != m.splits * m.chunk or self.shape != tuple(m.domain) \
                or not m.groups_in_order:
            return None
        inner = 1
        for k in reversed(m.groups[1]):          # the reduced dims, innermost first: where does a part end?
            extent = self.shape[k]
            if m.chunk % (inner * extent) == 0:
                inner *= extent
                continue
            if m.chunk % inner or extent % (m.chunk // inner):
                return None
            return k, m.chunk // inner
        return None

    def _try_separable(self, parts=None) -> bool:
        m = self.mapping
        g = m.groups
        p0 = tuple(g[0]) + (tuple(g[2]) if m.kind == "columns" else ())
        p1 = tuple(g[1])
        if parts is not None:
            p0, p1 = (tuple(p) for p in parts)
        l0 = self._line(p0)
        l1 = self.split_row_line(p1) if parts is None else None
        l1 = self._line(p1) if l1 is None else l1
        # the lines are checked against locate on a sample (ends included), whose first element is element 0
        sample = check_sample(self.size)
        want = m.locate(sample)
        o = [int(np.asarray(w)[0]) for w in want]
        # the reduced part less element 0's (element 0 at 0, 0, 0: no copy); a split row's stays in parts
        a1s = tuple(a1.less(origin) if isinstance(a1, PartLine) else a1 - origin if origin else a1
                    for a1, origin in zip(l1, o))
        multi = unravel(sample, self.shape)

        def at(a):
            if isinstance(a, PartLine):
                return a.at(multi)
            return a[tuple(multi[k] if a.shape[k] != 1 else 0 for k in range(self.rank))]
        for a0, a1, w in zip(l0, a1s, want):
            if not np.array_equal(at(a0) + at(a1), np.asarray(w)):
                return False
        self.parts = (p0, p1)
        self._line0, self._origin = l0, tuple(o)      # (the origin: element 0's block, thread, iteration)
        if isinstance(a1s[0], PartLine):
            self.part_line, self._line1, self._comps1 = a1s, None, None     # (made row-long only if asked)
        else:
            self._line1, self._comps1 = l1, a1s
        if m.threads_per_row % WARP == 0:
            self.X, self.Y = (p0, p1) if m.kind == "rows" else (p1, p0)
        return True

    #: a split row's reduced line, (block, thread, iteration) less element 0's, each a :class:`PartLine`; None
    #: where the reduced line is plain arrays
    part_line = None

    @property
    def _comps(self) -> list:
        """``[(task part, reduced part less element 0's)]`` for block, thread and iteration: they add up to the
        element's.  A split row's reduced part is made row-long here, once, when a reader asks for it."""
        if self._comps1 is None:
            self._comps1 = tuple(p.whole() for p in self.part_line)
        return list(zip(self._line0, self._comps1))

    @property
    def _lines(self) -> tuple:
        """``(task line, reduced line)``, each ``(block, thread, iteration)`` located (element 0's included)."""
        if self._line1 is None:
            self._line1 = tuple(a1 + o if o else a1 for (_, a1), o in zip(self._comps, self._origin))
        return self._line0, self._line1

    def cached(self, key: str, make):
        """``make()``, worked out once per geometry under ``key`` (what a reader derives from the geometry alone,
        kept with the geometry's own derived arrays)."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def refined(self):
        """A geometry for counting memory accesses where this one's ``Y`` line is long: a rows mapping whose rows
        are split over blocks (``splits`` parts of ``chunk`` elements).  A part is one block, so a warp never
        spans two parts: the dim where a part ends is cut in two (``[4096, 1024]`` summed whole over 256 blocks
        of 16 rows: ``[256, 16, 1024]``; global_norm's one row of 1M elements over 256 blocks: ``[1, 256,
        4096]``), its outer half joins ``X`` and the memory counters run on a part's line (16K elements) instead
        of the row (4M: adafactor's global sums).  The same elements in the same flat order, so ``locate`` and
        the counters are the same; None where the rows are not split, or the parts do not end at such a cut."""
        return self.cached("refined", self._refine)

    def _refine(self):
        cut = self.part_cut() if self.separable and self.X is not None else None
        if cut is None:
            return None
        k, n = cut
        shape = self.shape[:k] + (self.shape[k] // n, n) + self.shape[k + 1:]
        fine = Geometry(self.mapping, split=(shape, tuple(range(k + 1)), tuple(range(k + 1, self.rank + 1))))
        if not fine.separable or fine.X is None:
            return None                          # locate is not a sum over the parts: count on the row
        fine.cut = k                             # the domain's dim k is the fine shape's k and k + 1
        return fine

    def over_parts(self, a) -> np.ndarray:
        """A broadcastable array over the coarse domain seen over this refined geometry's shape (its dim
        :attr:`cut` cut in two: a reshape, a view)."""
        a = np.asarray(a)
        shape = (1,) * (self.rank - 1 - a.ndim) + a.shape
        k = self.cut
        return a.reshape(shape[:k] + ((1, 1) if shape[k] == 1 else self.shape[k:k + 2]) + shape[k + 1:])

    def _sum(self, i):
        a0, a1 = self._comps[i]
        if not a1.any():
            return a0
        if (a0 == a0.ravel()[0]).all():
            return a1 + a0.ravel()[0]
        return a0 + a1

    def _component(self, i, name):
        if name not in self.__dict__:
            if self.flat:
                self._dense()
            else:
                self.__dict__[name] = self._sum(i)
        return self.__dict__[name]

    @property
    def block(self):
        return self._component(0, "block")

    @block.setter
    def block(self, v):
        self.__dict__["block"] = v

    @property
    def thread(self):
        return self._component(1, "thread")

    @thread.setter
    def thread(self, v):
        self.__dict__["thread"] = v

    @property
    def iteration(self):
        return self._component(2, "iteration")

    @iteration.setter
    def iteration(self, v):
        self.__dict__["iteration"] = v

    # -- derived arrays -----------------------------------------------------------
    def floor_div(self, name: str, d: int) -> np.ndarray:
        """``getattr(self, name) // d`` (``name``: block, thread or iteration), as small as the geometry allows.

        A separable component is ``a0 + a1`` (task part, reduced part); when ``d`` divides every ``a0``,
        ``(a0 + a1) // d == a0 // d + a1 // d`` exactly, and the quotient of ``a1`` is often 0 (a row's lanes,
        ``thread // threads_per_row``): the result then varies over the task dims only, where the full
        component (``a0 + a1`` over the whole domain) would be domain-sized."""
        if self.separable:
            a0, a1 = self._comps[("block", "thread", "iteration").index(name)]
            if not (a0 % d).any():
                q1 = a1 // d
                return a0 // d if not q1.any() else a0 // d + q1
        return np.asarray(getattr(self, name), dtype=np.int64) // d

    def full(self, a) -> np.ndarray:
        """``a`` broadcast to the domain and flattened (domain order)."""
        if not self.shape:
            return np.asarray(a).reshape(1)
        return np.asarray(a).ravel() if np.shape(a) == self.shape else np.broadcast_to(a, self.shape).ravel()

    def warp_ids(self, b, t, it):
        """The warp instruction that block ``b``'s thread ``t`` issues in loop trip ``it``: its block's warps
        numbered trip by trip (a vector's elements are one trip's, one instruction)."""
        return (b * self.iters + it // self.vector) * self.wpb + t // WARP

    @property
    def W(self) -> np.ndarray:
        """Warp-instruction id of every element, flattened in domain order."""
        return self.cached("W", lambda: self.warp_ids(*(self.full(a) for a in (self.block, self.thread,
                                                                              self.iteration))))

    def part_shape(self, dims) -> tuple:
        return tuple(self.shape[k] if k in dims else 1 for k in range(self.rank))

    def flat_part(self, a, dims) -> np.ndarray:
        """A broadcastable array that varies only over ``dims``, flattened over those dims."""
        return np.broadcast_to(a, self.part_shape(dims)).ravel()

    def line(self, which: str) -> tuple:
        """(block, thread, iteration) over the X or Y part grid (other coordinates 0), flattened."""
        dims = self.X if which == "X" else self.Y
        k = 0 if dims == self.parts[0] else 1
        return tuple(a.ravel() for a in self._lines[k])

    @property
    def W_Y(self) -> np.ndarray:
        """Warp-instruction ids along one Y line (a fixed X coordinate): enough to tell Y's warps apart."""
        return self.cached("W_Y", lambda: self.warp_ids(*self.line("Y")))

    def split_lines(self) -> tuple:
        """A separable geometry's ``(block, thread, iteration)`` as two lines that add up: ``(over the task
        dims, over the reduced dims)``, each a triple of flattened arrays (the origin in the first)."""
        p0, p1 = self.parts
        return tuple(tuple(self.flat_part(c[k], dims) for c in self._comps) for k, dims in ((0, p0), (1, p1)))

    def block_split(self):
        """The block id of every element as ``(over the task dims, over the reduced dims)``: two broadcastable
        arrays that add up to :attr:`block`; None unless the geometry is separable."""
        return self._comps[0] if self.separable else None

    def block_parts(self) -> tuple:
        """Block id as ``B_X[x] + B_Y[y]`` (flattened over the X and Y grids)."""
        k = 0 if self.X == self.parts[0] else 1
        a_x = self._comps[0][k]
        a_y = self._comps[0][1 - k]
        if k == 1:     # part 1 carries minus the origin; move the origin to X
            origin = self._origin[0]
            return (a_x + origin).ravel(), (a_y - origin).ravel()
        return a_x.ravel(), a_y.ravel()

    def count(self, mask=None) -> int:
        """Elements of the domain ``mask`` (broadcastable over it) selects.  A mask over fewer dims (a
        concatenate's ``[1, 1, 1, 128]`` half over a ``[1, 1024, 32, 128]`` domain) is counted as it is, times
        how often the domain repeats it, instead of over its domain-sized broadcast."""
        if mask is None:
            return self.size
        if not self.shape:
            return int(bool(mask))
        m = np.asarray(mask)
        np.broadcast_to(m, self.shape)                  # (a view: refuses a mask of another shape, as before)
        if m.dtype != bool:
            return int(np.broadcast_to(m, self.shape).sum())
        return int(np.count_nonzero(m)) * (self.size // m.size) if m.size else 0

    # -- reductions -----------------------------------------------------------------
    def reduce_layout(self) -> tuple:
        """Where each element's value goes in the reduction: ``(task, part, inner, lane)``.

        ``task`` is the reduce output index (ThreadMapping.task_of), ``part`` the split
        block (``block % splits``), ``inner`` the thread's loop trip within the task
        (``iteration % inner_iterations``; a column lane with vectors: that over ``vector``, its trip down
        the column -- ``ThreadMapping.folds_per_task`` of them) and ``lane`` the thread's place among the
        task's threads (rows: ``thread % threads_per_row``; columns: the row lane
        ``thread // threads_per_row``).  Separable: ``task`` over the task-dims grid,
        the other three over the reduced-dims grid.
        """
        return self.cached("layout", self._reduce_layout)

    def _reduce_layout(self) -> tuple:
        task = self.layout_tasks()
        if self.separable:
            b, t, it = (a.ravel() for a in self._lines[1])
        else:
            b, t, it = (self.full(a) for a in (self.block, self.thread, self.iteration))
        part, inner, lane = self._part_inner_lane(b, t, it)
        # a remainder by 1 is a scalar 0: every element's, as an array (a row of one element, one thread per row)
        part, inner, lane = (x if np.ndim(x) else np.zeros(np.shape(b), np.int64) for x in (part, inner, lane))
        return task, part, inner, lane, self.layout_lanes

    def _part_inner_lane(self, b, t, it) -> tuple:
        """``(part, inner, lane)`` of elements run by blocks ``b``, threads ``t`` in iterations ``it``."""
        m = self.mapping
        # (divmod_by: a divisor of 1, a power of two, or one the values never reach costs no division)
        part = divmod_by(b, m.splits, bound=m.grid)[1]
        inner = divmod_by(it, m.inner_iterations, bound=m.elements_per_thread)[1]
        if m.tasks_per_lane > 1:
            inner = inner // m.tasks_per_lane           # a column lane's vector: its trip down column j
        lane = divmod_by(t, m.threads_per_row, bound=m.block)[1 if m.kind == "rows" else 0]
        return part, inner, lane

    def split_row_layout(self):
        """A split row's :meth:`reduce_layout` without the row: ``(part over the parts, inner and lane over one
        part's elements)`` -- each part one block, its threads and trips the same in every part (what
        :class:`PartLine` shows) -- or None (not a split row, or its parts differ so)."""
        if self.part_line is None or not self.mapping.groups_in_order:
            return None
        b, t, it = self.part_line
        if not (b.constant("hi") and t.constant("lo") and it.constant("lo")):
            return None
        o = self._origin
        part, inner, lane = self._part_inner_lane(b.lo + int(b.hi[0]) + o[0], t.hi + int(t.lo[0]) + o[1],
                                                  it.hi + int(it.lo[0]) + o[2])
        return tuple(np.broadcast_to(x, np.shape(y)) for x, y in ((part, b.lo), (inner, t.hi), (lane, t.hi)))

    def layout_positions(self) -> np.ndarray:
        """:meth:`reduce_layout`'s place of each element in its task's ``[part, inner, lane]`` block, flattened:
        ``(part * folds_per_task + inner) * lanes + lane`` (over the reduced line, or every element)."""
        _, part, inner, lane, lanes = self.reduce_layout()
        return (part * self.mapping.folds_per_task + inner) * lanes + lane

    def tasks_in_order(self) -> bool:
        """Is :meth:`layout_tasks` the tasks in order (the task line, or every element, one task each)?  (Where the
        task line is made as ``arange``, no comparing is needed.)"""
        if self._task_line_is_arange():
            return True
        return self.cached("tasks_in_order",
                           lambda: bool(np.array_equal(self.layout_tasks(), np.arange(self.mapping.rows))))

    def layout_tasks(self) -> np.ndarray:
        """:meth:`reduce_layout`'s ``task`` alone (no reduced line needed): the reduce output index over the
        task-dims grid (separable), or of every element."""
        return self.cached("layout_tasks", self._layout_tasks)

    def _task_line_is_arange(self) -> bool:
        """A separable rows mapping whose groups take the dims in order: the task dims lead, in order, so the task
        line is the tasks themselves, ``arange(rows)``."""
        m = self.mapping
        return self.separable and m.kind == "rows" and m.groups_in_order

    def _layout_tasks(self) -> np.ndarray:
        m = self.mapping
        if self._task_line_is_arange():
            return np.arange(m.rows, dtype=np.int64)
        if self.separable:
            return np.asarray(m.task_of(self._flat_numbers(self.parts[0]).ravel()), dtype=np.int64)
        return np.asarray(m.task_of(np.arange(self.size, dtype=np.int64)), dtype=np.int64)

    @property
    def layout_lanes(self) -> int:
        """A task's lanes in the reduce layout: a row's threads, or a column tile's row lanes."""
        m = self.mapping
        return m.threads_per_row if m.kind == "rows" else m.rows_per_block

    def task_heads(self) -> tuple:
        """For every task: ``(block, thread, iteration)`` of its first element (part 0)."""
        return self.cached("heads", self._task_heads)

    def _task_heads(self) -> tuple:
        m = self.mapping
        if self.separable and self.tasks_in_order():
            # the task line (reduced coordinates 0) is every task's first element, in task order: located already
            return tuple(a.ravel() for a in self._line0)
        first = m.first_element_of_task(np.arange(m.rows, dtype=np.int64))
        return tuple(np.asarray(a, dtype=np.int64) for a in m.locate(first))

    def slot_of_task(self) -> np.ndarray:
        """Shared-memory slot of every task's result in its block.

        The layout ``kernel_builder`` sizes (``Value.nbytes``): a block keeps
        ``rows_per_block * task_iterations`` results (rows) or ``tile_width *
        task_iterations`` (columns), slot ``outer * per_trip + place``, where
        ``outer`` is the task's vertical-packing trip and ``place`` its row slot in
        the block (rows) or its column in the tile (columns: the column lane's vector,
        then the column within it -- the head's iteration modulo ``vector``).
        """
        return self.cached("slots", self._slot_of_task)

    def _slot_of_task(self) -> np.ndarray:
        m = self.mapping
        _, t, it = self.task_heads()
        outer = divmod_by(it, m.inner_iterations, bound=m.elements_per_thread)[0]
        if m.kind == "rows":
            slots = outer * m.rows_per_block + divmod_by(t, m.threads_per_row, bound=m.block)[0]
        else:
            slots = outer * m.tile_width + (t % m.threads_per_row) * m.vector + it % m.vector
        # one slot per task even where every quotient above was a scalar 0 (one task per block)
        return np.broadcast_to(np.asarray(slots, dtype=np.int64), np.shape(t))


class EpilogueGeometry:
    """The epilogue of a reduce stage: one evaluation per task per split block.

    Domain ``(splits, *task_shape)``: element ``(p, t...)`` runs on the first
    thread of task ``t`` in the task's ``p``-th split block (split blocks are
    consecutive, see ``kernel_builder.producer_blocks``), in the iteration of the
    task's first element.  Index arrays are over the task dims with a leading
    axis of 1, so values that do not depend on the part broadcast over it.
    """

    kind = "epilogue"
    separable = False
    X = Y = None

    def __init__(self, geom: Geometry, task_shape: tuple):
        m = self.mapping = geom.mapping
        self.task_shape = tuple(task_shape)
        self.splits = m.splits
        self.shape = (m.splits,) + self.task_shape
        self.rank = len(self.shape)
        self.size = int(np.prod(self.shape))
        self.idx = tuple(a[None] for a in np.indices(self.task_shape, sparse=True)) if self.task_shape else ()
        self.block_threads, self.grid, self.iters, self.wpb = geom.block_threads, geom.grid, geom.iters, geom.wpb
        self.vector = 1                  # an epilogue runs once per task, never in vectors
        b, t, it = geom.task_heads()
        if b.size != int(np.prod(self.task_shape)):
            raise AStitchError(f"stage over {geom.shape}: {b.size} reduction tasks but the reduce result has "
                               f"shape {self.task_shape}")
        parts = np.arange(m.splits, dtype=np.int64).reshape((m.splits,) + (1,) * len(self.task_shape))
        self.block = b.reshape((1,) + self.task_shape) + parts
        self.thread = t.reshape((1,) + self.task_shape)
        self.iteration = it.reshape((1,) + self.task_shape)
        self.part = parts
        self.slot = geom.slot_of_task().reshape((1,) + self.task_shape)
        self._cache: dict = {}

    def first_part(self):
        """This epilogue's first split part alone (domain ``(1, *task_shape)``), when every part is it again in
        other blocks: the tasks' head blocks agree modulo ``splits``, so part ``p``'s blocks (``head + p``) are
        none of part ``q``'s.  An access that does not vary over the parts then counts ``splits`` times what it
        counts on the first part: no warp, block or sector is shared between parts.  None otherwise."""
        return self.cached("first_part", self._first_part) if self.splits > 1 else None

    def _first_part(self):
        heads = np.asarray(self.block[:1]) % self.splits
        if not (heads == heads.flat[0]).all():
            return None
        one = object.__new__(EpilogueGeometry)
        one.__dict__.update(self.__dict__)
        one.splits, one.shape, one.size, one._cache = 1, (1,) + self.task_shape, self.size // self.splits, {}
        one.block, one.part = self.block[:1], self.part[:1]
        return one

    cached = Geometry.cached
    warp_ids = Geometry.warp_ids
    full = Geometry.full
    floor_div = Geometry.floor_div
    W = Geometry.W
    count = Geometry.count
