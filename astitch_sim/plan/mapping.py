"""Thread mappings: which block and thread compute which element, in which loop iteration.

A stage of a kernel iterates over a *domain* (a shape: the dominant op's output,
or its input for a reduce; or a shape that output is a reshape of, the domain of
another stage whose mapping it takes: ``flatindex.reshapes``, an op's index the
domain's reshaped).  The mapping groups the domain's dimensions and
lays the groups out on blocks and threads; three kinds cover XLA's and AStitch's
schedules (the paper's "adaptive thread mapping"):

``flat``      the domain flattened and cut into *vectors* of ``vector`` consecutive
              elements; vector ``c = e // vector`` goes to global thread
              ``c % (grid*block)``, each thread takes ``per_thread // vector``
              vectors per loop round (issued together: loads in flight before use),
              and rounds repeat while elements remain (a grid-stride loop: vertical
              packing).  ``vector = per_thread = 1`` is XLA's one element per thread.
              A vector stays inside a row, unless ``flat_vectors``: then vectors run
              across the rows and the last ``size % vector`` elements are a scalar tail.
``rows``      the domain viewed as ``[rows, cols]`` (``groups = (row_dims, col_dims)``);
              ``threads_per_row`` threads share one row, so a block holds
              ``block // threads_per_row`` rows (horizontal packing); a row may be
              split over ``splits`` blocks (task splitting); blocks loop over rows
              when there are more rows than row slots (vertical packing).  With
              ``vector > 1`` a lane reads its row ``vector`` consecutive elements at a
              time (one 64/128-bit access per tensor read contiguously): vector ``q``
              of a row (its elements ``q*vector ..``) goes to lane ``q % threads_per_row``
              in the lane's trip ``q // threads_per_row`` (``per_thread == vector``).
``columns``   the domain viewed as ``[outer, reduced, cols]`` for a column
              reduction (``groups = (outer_dims, reduced_dims, col_dims)``); a block
              is ``block // col_threads`` row lanes x ``col_threads`` column lanes,
              each column tile may be split over ``splits`` blocks along the reduced
              dimension; blocks loop over column tiles when there are more tiles
              than fit.  With ``vector > 1`` a column lane takes ``vector`` adjacent
              columns (one 64/128-bit access per reduced row and tensor read
              contiguously; ``plan/column_vectors.py``): column vector ``q`` (columns
              ``q*vector ..``) goes to lane ``q % threads_per_row``, a tile is
              ``threads_per_row x vector`` columns, and the lane keeps one
              accumulator per column of its vector (``per_thread == vector``).

:meth:`ThreadMapping.locate` answers the question vectorised over many
elements -- the simulator, the code generator and the compiler's
block-locality check all use it, so they cannot disagree.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from math import ceil, prod

import numpy as np

from ..errors import AStitchError
from ..ir.flatindex import divmod_by, ravel, unravel
from .sealed import Sealable, once_sealed
from .vocabulary import Combine

KINDS = ("flat", "rows", "columns")
#: elements one vector access may cover (64/128-bit loads are 2-16 elements of 1-8 bytes)
VECTORS = (1, 2, 4, 8, 16)


def _like(flat_index, *arrays) -> tuple:
    """The arrays, each as an int64 array shaped like ``flat_index`` (a part ``divmod_by`` left as a scalar 0: a divisor of 1)."""
    shape = np.shape(flat_index)
    return tuple(a if np.shape(a) == shape else np.broadcast_to(np.asarray(a, dtype=np.int64), shape).copy()
                 for a in arrays)


def _times(a, k: int, n: int) -> np.ndarray:
    """``a * k`` as an int64 array of ``n`` elements (``a``: ``divmod_by``'s array or scalar): no pass for a
    factor of 1, a zeroed array (no pass either: fresh pages) for a zero."""
    if np.ndim(a) == 0:
        return np.zeros(n, dtype=np.int64) if a * k == 0 else np.full(n, a * k, dtype=np.int64)
    return a if k == 1 else a * k


def lane_dims(kind: str, groups) -> tuple:
    """The dims neighbouring lanes (and a lane's vector) step along: a row's dims (rows), the column dims
    (columns), every dim (flat)."""
    return tuple(groups[{"rows": 1, "columns": 2}.get(kind, 0)])


def lanes_contiguous(kind: str, domain, groups) -> bool:
    """Do neighbouring lanes of a ``kind`` mapping of ``domain`` (dims grouped as ``groups``) take neighbouring
    elements, row-major?  A flat mapping's do; a row's lanes when the row's dims are the domain's innermost, in
    order; a column tile's when its column dims are.  Otherwise a warp's loads and stores stride through memory
    (a column reduction over a group norm's ``(n, g)``: lanes 40 bytes apart, a sector each)."""
    if kind == "flat":
        return True
    dims = lane_dims(kind, groups)
    return bool(dims) and dims == tuple(range(len(domain) - len(dims), len(domain)))


@dataclass
class ThreadMapping(Sealable):
    WORDS = {"combine": Combine}

    kind: str
    domain: tuple                       # shape of the iteration space
    groups: tuple                       # dims of the domain in each view axis (see module doc)
    block: int                          # threads per block
    grid: int                           # blocks launched
    threads_per_row: int = 0            # rows: threads per row; columns: column lanes per block
    splits: int = 1                     # rows: blocks per row; columns: blocks along the reduced dim
    combine: Combine = Combine.NONE     # how split partial reductions meet: none | atomic | grid_barrier
    per_thread: int = 1                 # flat: elements per thread per loop round (a multiple of vector);
                                        #  rows, columns: elements per lane per trip (== vector)
    vector: int = 1                     # consecutive elements per vector load/store (1: scalar)
    vector_why: str = ""                # why the vector width is what it is (fallbacks say why)
    #: rows with vectors: the trips whose loads a lane issues together, before it computes any of them
    #: (0: every trip it writes out; ``plan/loads_in_flight.py``); columns with vectors: the reduced rows
    #: a lane loads per loop round (0: one; ``plan/column_vectors.py``).  How a lane schedules its loads, not
    #: which element goes where, so not part of the mapping's identity (stages that differ only here
    #: share their elements, and registers, as before)
    load_trips: int = field(default=0, compare=False)
    #: flat with vectors: the vectors run across the domain's rows in flat order (the innermost extent is not a
    #: multiple of ``vector``; every tensor is read at the domain's flat index), the last ``size % vector``
    #: elements a scalar tail (``plan/vector_width.py``)
    flat_vectors: bool = False

    def __post_init__(self):
        self.domain = tuple(int(d) for d in self.domain)
        self.groups = tuple(tuple(int(d) for d in g) for g in self.groups)
        if self.kind not in KINDS:
            raise AStitchError(f"unknown mapping kind {self.kind!r}: use one of {KINDS}")
        flat = sorted(d for g in self.groups for d in g)
        if flat != list(range(len(self.domain))):
            raise AStitchError(f"mapping groups {self.groups} must partition the dims of domain {self.domain}")
        want = {"flat": 1, "rows": 2, "columns": 3}[self.kind]
        if len(self.groups) != want:
            raise AStitchError(f"a {self.kind} mapping needs {want} dim group(s), got {self.groups}")

    # -- the view -------------------------------------------------------------
    def extent(self, i: int) -> int:
        return self.extents[i]

    @once_sealed
    def extents(self) -> tuple:
        """The view's extents: the product of each group's dims."""
        return tuple(int(prod(self.domain[d] for d in g)) for g in self.groups)

    @once_sealed
    def size(self) -> int:
        return int(prod(self.domain))

    @once_sealed
    def rows(self) -> int:
        """rows mapping: independent rows; columns mapping: independent columns (outer x cols)."""
        if self.kind == "rows":
            return self.extent(0)
        if self.kind == "columns":
            return self.extent(0) * self.extent(2)
        return 1

    @once_sealed
    def cols(self) -> int:
        """rows mapping: row length; columns mapping: the reduced length; flat: all elements."""
        if self.kind == "rows":
            return self.extent(1)
        if self.kind == "columns":
            return self.extent(1)
        return self.size

    @once_sealed
    def rows_per_block(self) -> int:
        """rows: rows that share a block (horizontal packing); columns: row lanes per block."""
        if self.kind == "flat":
            return 1
        return max(1, self.block // max(1, self.threads_per_row))

    @once_sealed
    def slots(self) -> int:
        """Tasks handled at once by the whole grid (rows, or column tiles)."""
        if self.kind == "rows":
            return max(1, self.grid // self.splits) * self.rows_per_block
        if self.kind == "columns":
            return max(1, self.grid // self.splits)
        return self.grid * self.block

    @once_sealed
    def chunk(self) -> int:
        """Elements of one task each split covers (row columns, or reduced rows)."""
        return ceil(self.cols / self.splits) if self.kind != "flat" else self.size

    @once_sealed
    def tiles(self) -> int:
        """columns mapping: column tiles of :attr:`tile_width` columns."""
        return ceil(self.rows / self.tile_width) if self.kind == "columns" else 0

    @once_sealed
    def tile_width(self) -> int:
        """columns mapping: columns of one tile, ``threads_per_row`` lanes x ``vector`` columns each (the
        block's task slots per trip: a Regional value's slots follow it)."""
        return self.threads_per_row * max(1, self.vector) if self.kind == "columns" else 0

    @once_sealed
    def busy_parts(self) -> int:
        """Splits of a task that get a chunk of it: ``ceil(cols / chunk)``, fewer than ``splits`` when the
        chunks run out first (5 rows over 4 splits of 2); 1 for a flat mapping."""
        return ceil(self.cols / self.chunk) if self.kind != "flat" else 1

    @once_sealed
    def busy_blocks(self) -> int:
        """Blocks of the grid that have work under this mapping; the others skip the stage.

        A stitched kernel's grid is sized for its largest stage, so a smaller stage leaves blocks idle:
        a column reduction of 768 columns in a 16384-block kernel has 24 tiles of 32 columns, and
        unless its reduced dim is split (``splits``), 24 blocks do all of it.  The cost model charges
        such a stage on these blocks alone (:func:`astitch_sim.simt.cost.imbalance_terms`)."""
        parts = self.busy_parts
        if self.kind == "rows":           # row r -> slot r % slots -> block (slot // rows_per_block) * splits + part
            need = ceil(min(self.rows, self.slots) / self.rows_per_block) * parts
        elif self.kind == "columns":      # tile t -> slot t % slots -> block slot * splits + part
            need = min(self.tiles, self.slots) * parts
        else:                             # vector c -> global thread c % (grid * block)
            need = ceil(ceil(self.size / max(1, self.vector)) / self.block)
        return max(1, min(self.grid, need))

    @once_sealed
    def busy_threads(self) -> int:
        """Threads of the whole launch that have an element of this stage in one task trip; the others
        idle through it (they cannot keep a load in flight).

        A small stage in a big block leaves most warps with nothing to load: a layer norm of 4 rows of
        32, 8 lanes per row, in a block of 1024 threads keeps 32 threads busy, one warp.  The cost model
        counts busy warps, not resident ones, in its Little's-law terms
        (:func:`astitch_sim.simt.cost.busy_warps_per_block`); counting idle warps made every larger block
        look faster on small shapes, and the launch search picked 1024 threads for 32 busy ones."""
        parts = self.busy_parts
        if self.kind == "rows":           # rows at once x lanes that get a vector of their chunk
            lanes = min(self.threads_per_row, ceil(self.chunk / max(1, self.vector)))
            need = min(self.rows, self.slots) * lanes * parts
        elif self.kind == "columns":      # column lanes with a column (tiles at once) x row lanes with a row
            need = (min(ceil(self.rows / self.tasks_per_lane), min(self.tiles, self.slots) * self.threads_per_row)
                    * parts * min(self.rows_per_block, self.chunk))
        else:                             # one thread per vector, at most the launch
            need = ceil(self.size / max(1, self.vector))
        return max(1, min(self.grid * self.block, need))

    @once_sealed
    def task_iterations(self) -> int:
        """Outer loop trips per block: vertical packing (1 means no packing)."""
        if self.kind == "rows":
            return ceil(self.rows / self.slots)
        if self.kind == "columns":
            return ceil(self.tiles / self.slots)
        return ceil(self.size / (self.grid * self.block * self.per_thread))

    @once_sealed
    def inner_iterations(self) -> int:
        """Elements per thread within one task trip (columns of a row, rows of a column chunk): :attr:`trips`
        x ``vector`` (a vector's elements are consecutive iterations; a column lane's vector spans the
        ``vector`` columns it holds)."""
        if self.kind in ("rows", "columns"):
            return self.trips * self.vector
        return self.per_thread

    @once_sealed
    def trips(self) -> int:
        """A lane's trips along its task, one vector (or element) per trip: rows, along the row; columns,
        down the reduced rows of its chunk; flat: :attr:`inner_iterations`."""
        if self.kind == "rows":
            return ceil(self.chunk / (self.threads_per_row * self.vector))
        if self.kind == "columns":
            return ceil(self.chunk / self.rows_per_block)
        return self.inner_iterations

    @once_sealed
    def vector_dims(self) -> tuple:
        """The dims a lane's vector runs along: a row's dims (rows), the column dims (columns), every dim (flat)."""
        return lane_dims(self.kind, self.groups)

    @once_sealed
    def along_innermost(self) -> bool:
        """Does a vector run along the domain's innermost, contiguous dim (its dims end in it)?  Only then may
        the mapping have ``vector > 1``."""
        return bool(self.vector_dims) and self.vector_dims[-1] == len(self.domain) - 1

    @property
    def tasks_per_lane(self) -> int:
        """Tasks one thread holds at once in a task trip: a column lane's ``vector`` adjacent columns (one
        accumulator, tree slot and completion each); 1 for a row lane (its vector is one row's elements)."""
        return max(1, self.vector) if self.kind == "columns" else 1

    @property
    def folds_per_task(self) -> int:
        """Elements one thread folds into one task per task trip: a row's :attr:`inner_iterations` (its vectors'
        elements all belong to the row); a column lane's :attr:`trips` (the ``vector`` elements of each of its
        vectors belong to ``vector`` columns, one each)."""
        return self.inner_iterations // self.tasks_per_lane

    @once_sealed
    def unroll(self) -> int:
        """flat: vectors per thread per round (their loads are issued before any is used)."""
        return max(1, self.per_thread // max(1, self.vector))

    @once_sealed
    def elements_per_thread(self) -> int:
        return self.task_iterations * self.inner_iterations

    @once_sealed
    def key(self) -> tuple:
        """Every field, in order (``load_trips`` too): two mappings are the same mapping where their keys are
        equal (the SIMT model shares one geometry between the kernels of one mapping by it)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    @once_sealed
    def groups_in_order(self) -> bool:
        """Do the groups take the domain's dims in order (``(0, 1), (2,)``)?  Then the view is the domain reshaped
        to the groups' extents, and a task's dims lead its reduced ones."""
        return [d for g in self.groups for d in g] == list(range(len(self.domain)))

    # -- where does an element go? -------------------------------------------------
    def view_index(self, flat_index: np.ndarray) -> tuple:
        """Flat domain index (row-major) -> the view coordinates (rows/cols, or outer/reduced/cols).

        Where the groups take the dims in order (``(0, 1), (2,)``: the usual view), the view is the domain
        reshaped to the groups' extents, and its coordinates one unravel of the flat index by them: a divide
        per group, not one per dim and a multiply-add back (4M-element rows domains: a tenth of a simulation)."""
        if self.groups_in_order:
            return unravel(np.asarray(flat_index, dtype=np.int64), [self.extent(i) for i in range(len(self.groups))],
                           in_range=True)
        multi = unravel(np.asarray(flat_index, dtype=np.int64), self.domain, in_range=True)
        coords = []
        for g in self.groups:
            c = np.zeros_like(np.asarray(flat_index, dtype=np.int64))
            for d in g:
                c = c * self.domain[d] + multi[d]
            coords.append(c)
        return tuple(coords)

    def locate(self, flat_index) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(block, thread, iteration)`` that computes each flat domain index.

        ``iteration`` counts every loop trip of that thread, outer (vertical
        packing) times inner (elements within a task): ``outer*inner_iterations+inner``.
        """
        flat_index = np.asarray(flat_index, dtype=np.int64)
        # the indices lie in the domain, so each coordinate below is bounded by its extent: a divisor at least
        # that large divides nothing (``divmod_by``'s bound)
        if self.kind == "flat":
            total, V = self.grid * self.block, self.vector
            c, v = flat_index // V, flat_index % V          # vector c, lane v within it
            g = c % total                                   # the global thread of vector c
            k, rnd = (c // total) % self.unroll, c // (total * self.unroll)
            return g // self.block, g % self.block, rnd * self.per_thread + k * V + v
        if self.kind == "rows":
            r, c = self.view_index(flat_index)
            rows, chunk = self.extent(0), min(self.chunk, self.extent(1))
            outer, slot = divmod_by(r, self.slots, bound=rows)
            part, within = divmod_by(c, self.chunk, bound=self.extent(1))
            q, j = divmod_by(within, self.vector, bound=chunk)             # the lane's vector q, element j of it
            row_slot, row_in_block = divmod_by(slot, self.rows_per_block, bound=min(rows, self.slots))
            trip, lane = divmod_by(q, self.threads_per_row, bound=ceil(chunk / self.vector))
            block = row_slot * self.splits + part
            thread = row_in_block * self.threads_per_row + lane
            inner = trip * self.vector + j
            return _like(flat_index, block, thread, outer * self.inner_iterations + inner)
        o, red, c = self.view_index(flat_index)
        col = o * self.extent(2) + c
        cols, reduced = self.extent(0) * self.extent(2), self.extent(1)
        q, j = divmod_by(col, self.vector, bound=cols)                  # the lane's column vector q, column j of it
        tile, lane_c = divmod_by(q, self.threads_per_row, bound=ceil(cols / self.vector))
        outer, tslot = divmod_by(tile, self.slots, bound=ceil(cols / (self.vector * self.threads_per_row)))
        part, within = divmod_by(red, self.chunk, bound=reduced)
        trip, row_lane = divmod_by(within, self.rows_per_block, bound=min(self.chunk, reduced))
        block = tslot * self.splits + part
        thread = row_lane * self.threads_per_row + lane_c
        return _like(flat_index, block, thread, outer * self.inner_iterations + trip * self.vector + j)

    def row_starts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`locate` of every row's first element, rows in order (a rows mapping whose groups take the dims
        in order), as a sum: row ``q * P + s`` of ``P = rows_per_block`` rows per block is where row ``q * P``
        is (its block, its grid trip) plus where row ``s`` is (its threads).  So it is, by ``locate``'s own
        steps: the grid's slots are whole blocks of rows (``slots`` is a multiple of ``P``), so the slot's block
        and the trip follow from ``q`` and the row's threads from ``s``.  ``rows / P + P`` rows are located, not
        every row: the 750000 rows of the paper's DIEN reduction, 128 to a block, cost no division per row."""
        if self.kind != "rows" or not self.groups_in_order:
            raise AStitchError(f"row_starts needs a rows mapping whose groups take the dims in order, not "
                               f"{self.kind} {self.groups}")
        rows, per, cols = self.extent(0), self.rows_per_block, self.extent(1)
        if per == 1 or rows <= per:
            # locate's rows steps at a row's first element (column 0: its part, vector, trip and lane are 0):
            # two divisions, by the grid's slots and the rows per block, often none, and a factor of 1
            # multiplies nothing (750000 rows of one block each, one slot per row: a full locate of their first
            # elements was a tenth of the simulation, half of it filling fresh memory)
            r = np.arange(rows, dtype=np.int64)
            outer, slot = divmod_by(r, self.slots, bound=rows)
            row_slot, row_in_block = divmod_by(slot, per, bound=min(rows, self.slots))
            return tuple(_times(a, k, rows) for a, k in ((row_slot, self.splits), (row_in_block, self.threads_per_row),
                                                         (outer, self.inner_iterations)))
        first = self.locate(np.arange(-(-rows // per), dtype=np.int64) * (per * cols))     # each block's first row
        within = self.locate(np.arange(per, dtype=np.int64) * cols)                        # a row of the block
        return tuple((a[:, None] + b[None, :]).reshape(-1)[:rows] for a, b in zip(first, within))

    def task_of(self, flat_index) -> np.ndarray:
        """The reduction task (row, or column) an element belongs to -- the reduce output index."""
        if self.kind == "rows":
            return self.view_index(flat_index)[0]
        if self.kind == "columns":
            o, _, c = self.view_index(flat_index)
            return o * self.extent(2) + c
        return np.asarray(flat_index)

    def first_element_of_task(self, tasks) -> np.ndarray:
        """Flat domain index of the first element of each reduction task (the inverse of :meth:`task_of`
        at view coordinate 0 of the reduced group)."""
        tasks = np.asarray(tasks, dtype=np.int64)
        if self.kind == "rows":
            view = (tasks, np.zeros_like(tasks))
        else:
            inner = max(self.extent(2), 1)
            view = (tasks // inner, np.zeros_like(tasks), tasks % inner)
        multi = [None] * len(self.domain)          # view coordinates -> domain multi-index
        for g, coord in zip(self.groups, view):
            sizes = [self.domain[d] for d in g]
            parts = unravel(coord, sizes) if sizes else ()
            for d, p in zip(g, parts):
                multi[d] = p
        return ravel(tuple(multi), self.domain) if self.domain else np.zeros_like(tasks)

    def check(self, gpu=None) -> None:
        """Raise AStitchError if the mapping cannot cover its domain with its launch shape."""
        if self.block < 1 or self.grid < 1:
            raise AStitchError(f"mapping launches {self.grid} blocks of {self.block} threads: both must be >= 1")
        if gpu is not None and self.block > gpu.max_threads_per_block:
            raise AStitchError(f"mapping uses {self.block} threads per block; {gpu.name} allows "
                               f"{gpu.max_threads_per_block}: pack fewer rows per block")
        if self.vector not in VECTORS or self.per_thread < 1 or self.per_thread % self.vector:
            raise AStitchError(f"mapping has per_thread={self.per_thread}, vector={self.vector}: vector must be one "
                               f"of {VECTORS} and per_thread a positive multiple of it")
        if self.kind in ("rows", "columns") and self.per_thread != self.vector:
            raise AStitchError(f"{self.kind} mapping: per_thread={self.per_thread} must equal vector={self.vector} "
                               "(a lane takes one vector per trip)")
        if self.kind in ("rows", "columns") and self.vector > 1 and not self.along_innermost:
            what = "row" if self.kind == "rows" else "columns"
            raise AStitchError(f"{self.kind} mapping: vector={self.vector} needs the {what} to end in the innermost "
                               f"dim of {self.domain}, but the {what.rstrip('s')} dims are {self.vector_dims}: use "
                               "vector=1")
        if self.kind == "rows" and self.vector > 1:
            if self.chunk % self.vector:
                raise AStitchError(f"rows mapping: vector={self.vector} does not divide a split's "
                                   f"{self.chunk} columns: use fewer splits or a narrower vector")
        if not isinstance(self.flat_vectors, bool):
            raise AStitchError(f"{self.kind} mapping: flat_vectors={self.flat_vectors!r} must be true or false")
        if self.flat_vectors and (self.kind != "flat" or self.vector < 2):
            raise AStitchError(f"{self.kind} mapping: flat_vectors runs vectors across rows, which only a flat "
                               f"mapping with vectors does (this one has vector={self.vector}): use "
                               "flat_vectors=False")
        if self.vector > 1 and self.domain and self.domain[-1] % self.vector and not self.flat_vectors:
            raise AStitchError(f"{self.kind} mapping: vector={self.vector} does not divide the innermost extent "
                               f"{self.domain[-1]} of {self.domain}: a vector would straddle two rows; use a "
                               "vector width that divides it, or 1 (or flat_vectors=True on a flat mapping whose "
                               "tensors are all read at the domain's flat index)")
        if not isinstance(self.load_trips, int) or self.load_trips < 0 or \
                (self.load_trips and (self.kind == "flat" or self.vector < 2)):
            raise AStitchError(f"{self.kind} mapping: load_trips={self.load_trips!r}: it must be a whole number of "
                               "trips >= 0, and above 0 only on a rows or columns mapping with vectors (the trips "
                               "whose loads a lane issues together); use 0 (the default)")
        if self.kind in ("rows", "columns"):
            if self.threads_per_row < 1 or self.block % self.threads_per_row:
                raise AStitchError(f"{self.kind} mapping: threads_per_row={self.threads_per_row} must divide "
                                   f"the block of {self.block} threads")
            if self.splits < 1 or self.grid % self.splits:
                raise AStitchError(f"{self.kind} mapping: the grid of {self.grid} blocks must be a multiple of "
                                   f"splits={self.splits}")
            if self.splits > 1 and self.combine is Combine.NONE:
                raise AStitchError(f"{self.kind} mapping splits each task over {self.splits} blocks but says "
                                   "nothing about combining the parts: set combine to atomic or grid_barrier")

    def describe(self) -> str:
        """One line, as the paper would say it."""
        if self.kind == "flat":
            pack = f", {self.task_iterations} rounds (vertical packing)" if self.task_iterations > 1 else ""
            per = ""
            if self.per_thread > 1:
                per = f", {self.per_thread} per thread per round ({self.unroll} x {self.vector}-element vectors)"
            if self.flat_vectors:
                tail = self.size % self.vector
                per += ", vectors across rows in flat order" + (f", a scalar tail of {tail}" if tail else "")
            why = f" [{self.vector_why}]" if self.vector_why else ""
            return f"flat {self.size} elems over {self.grid}x{self.block} threads{per}{pack}{why}"
        if self.kind == "rows":
            words = [f"rows <{self.rows},{self.cols}>: {self.threads_per_row} threads/row"]
            if self.rows_per_block > 1:
                words.append(f"{self.rows_per_block} rows/block (horizontal packing)")
            if self.splits > 1:
                words.append(f"each row split over {self.splits} blocks ({self.combine}) (task splitting)")
            if self.task_iterations > 1:
                words.append(f"{self.task_iterations} rows per slot (vertical packing)")
            if self.vector > 1:
                words.append(f"{self.trips} x {self.vector}-element vector(s) per lane per row")
            if 0 < self.load_trips < self.trips:
                words.append(f"loads {self.load_trips} trip(s) at a time")
            why = f" [{self.vector_why}]" if self.vector_why else ""
            return ", ".join(words) + f"; grid {self.grid} x block {self.block}{why}"
        words = [f"columns <{self.cols} reduced, {self.rows} cols>: {self.threads_per_row} col lanes x "
                 f"{self.rows_per_block} row lanes"]
        if self.splits > 1:
            words.append(f"reduced dim split over {self.splits} blocks ({self.combine})")
        if self.task_iterations > 1:
            words.append(f"{self.task_iterations} tiles per block (vertical packing)")
        if self.vector > 1:
            words.append(f"{self.vector}-element vectors of adjacent columns per lane (tiles of {self.tile_width})")
            if self.load_trips > 1 and self.trips > 1:
                words.append(f"loads {min(self.load_trips, self.trips)} reduced rows at a time")
        why = f" [{self.vector_why}]" if self.vector_why else ""
        return ", ".join(words) + f"; grid {self.grid} x block {self.block}{why}"

    def to_dict(self) -> dict:
        """The mapping as JSON; ``load_trips`` only where a lane loads fewer than every trip at once, and
        ``flat_vectors`` only where set (older readers, and the signatures of plans measured before they
        existed, never see them)."""
        d = asdict(self)
        d["domain"], d["groups"] = list(self.domain), [list(g) for g in self.groups]
        if not self.load_trips:
            del d["load_trips"]
        if not self.flat_vectors:
            del d["flat_vectors"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ThreadMapping":
        return cls(**{**d, "domain": tuple(d["domain"]), "groups": tuple(tuple(g) for g in d["groups"])})
