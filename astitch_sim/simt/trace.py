"""Per-thread traces, shared-memory races and divergent barriers (``simulate(..., trace=True)``).

A trace lists every memory access of every thread: which kernel, stage,
block, thread and loop iteration; which space (global, shared, register) and
kind (read, write, atomic); which node and element; the byte address (global:
one flat address space; shared: offset in the block's shared memory;
registers have none: -1).  It is stored column-wise (numpy arrays) so that
tens of thousands of events cost little; :attr:`Trace.events` gives the
:class:`TraceEvent` objects, :meth:`Trace.to_dicts` plain dicts for the
explorer.  Reduction-tree scratch traffic is counted (``StageStats``) but not
traced.

Ordering.  Events are sorted in program order: kernel, stage, phase, loop
iteration, access (the load/store instruction), then block and thread -- so
one thread's events read like its code, and all threads advance in lockstep.
Each stage has three *phases*: the element loop, the combine of its
reductions (after the tree's barriers) and the epilogue (after the grid
barrier of a split reduction, if any).  ``block_epoch`` counts the barriers a
block has passed, ``grid_epoch`` the grid barriers.

Races.  Two accesses of one shared-memory location by different threads of a
block in the same block epoch, one of them a write that comes first in program
order, are unordered on a GPU: the reader may see the old value.  The same for
a global location written in the kernel and read by another block in the same
grid epoch.  Each is reported once as a :class:`Race`; simulation goes on.

Divergent barriers.  In this model a thread never exits early: it runs every
stage's loop (possibly with no elements) and reaches every barrier.  A code
generator that lets a thread return once it has no work left would leave the
other threads of its block waiting at the next ``__syncthreads`` (or the grid
at ``grid.sync()``): :func:`find_divergence` lists those barriers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from ..ir.flatindex import unravel
from ..plan.vocabulary import Space

SPACES = ("global", "shared", "register")
KINDS = ("read", "write", "atomic")
COLUMNS = ("kernel", "stage", "phase", "block_epoch", "grid_epoch", "block", "thread", "iteration",
           "access", "space", "kind", "node", "element", "address")
#: trace mode refuses kernels that visit more domain elements than this
TRACE_LIMIT = 1 << 16


@dataclass(frozen=True)
class TraceEvent:
    kernel: int
    stage: int
    phase: str                  # elements | combine | epilogue
    block: int
    thread: int
    iteration: int
    space: str                  # global | shared | register
    kind: str                   # read | write | atomic
    node: str
    element: tuple              # index into the node's shape
    flat: int                   # row-major flat index of ``element``
    address: int                # byte address (-1 for registers)
    block_epoch: int = 0
    grid_epoch: int = 0
    access: int = 0             # the load/store instruction (its order within the kernel)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["element"] = list(self.element)
        return d


@dataclass(frozen=True)
class Race:
    """A read that may see another thread's write (or not): no barrier orders them."""
    kernel: int
    stage: int
    block: int
    address: int
    writer: int                 # writing thread (global: its block is ``writer_block``)
    reader: int
    node: str
    space: str = "shared"
    writer_block: int = -1

    def __str__(self) -> str:
        where = f"block {self.block}" if self.space == Space.SHARED else \
            f"block {self.block} reads what block {self.writer_block} wrote"
        return (f"race in kernel {self.kernel} stage {self.stage}: {where}, {self.space} address {self.address} "
                f"({self.node}): thread {self.reader} reads what thread {self.writer} wrote with no barrier between")


@dataclass(frozen=True)
class BarrierDivergence:
    """A barrier some threads of a block (or some blocks) would reach with no work left."""
    kernel: int
    stage: int
    block: int
    barrier: str                # tree (inside a reduction) | block | grid
    waiting: int                # threads of the block that still have work
    finished: int               # threads of the block with no work left

    def __str__(self) -> str:
        return (f"kernel {self.kernel} stage {self.stage} block {self.block}: {self.barrier} barrier reached by "
                f"{self.waiting} threads with work left; {self.finished} have none and must not return early")


PHASES = ("elements", "combine", "epilogue")


class Trace:
    """Column-wise trace of memory accesses; see the module docstring."""

    def __init__(self, columns: dict, nodes: list, shapes: dict):
        self.columns = columns
        self.nodes = nodes                  # node id -> name
        self.shapes = shapes                # name -> shape
        self._events = None

    def __len__(self) -> int:
        return int(self.columns["kernel"].size)

    def __iter__(self):
        return iter(self.events)

    def __repr__(self) -> str:
        return f"<Trace: {len(self)} accesses>"

    def _where(self, sel) -> "Trace":
        return Trace({k: v[sel] for k, v in self.columns.items()}, self.nodes, self.shapes)

    def filter(self, *, kernel=None, stage=None, block=None, thread=None, node=None, space=None,
               kind=None) -> "Trace":
        """Events matching every given field (``node`` by name)."""
        c = self.columns
        sel = np.ones(len(self), dtype=bool)
        for name, want in (("kernel", kernel), ("stage", stage), ("block", block), ("thread", thread)):
            if want is not None:
                sel &= c[name] == want
        if node is not None:
            ids = [i for i, n in enumerate(self.nodes) if n == node]
            sel &= np.isin(c["node"], ids)
        if space is not None:
            sel &= c["space"] == SPACES.index(space)
        if kind is not None:
            sel &= c["kind"] == KINDS.index(kind)
        return self._where(sel)

    def by_thread(self, block: int, thread: int, kernel: Optional[int] = None) -> "Trace":
        return self.filter(kernel=kernel, block=block, thread=thread)

    def by_node(self, node: str) -> "Trace":
        return self.filter(node=node)

    @property
    def events(self) -> list:
        if self._events is None:
            c = self.columns
            out = []
            for i in range(len(self)):
                name = self.nodes[int(c["node"][i])]
                shape = self.shapes[name]
                flat = int(c["element"][i])
                elem = tuple(int(x) for x in unravel(flat, shape)) if shape else ()
                out.append(TraceEvent(int(c["kernel"][i]), int(c["stage"][i]), PHASES[int(c["phase"][i])],
                                      int(c["block"][i]), int(c["thread"][i]), int(c["iteration"][i]),
                                      SPACES[int(c["space"][i])], KINDS[int(c["kind"][i])], name, elem, flat,
                                      int(c["address"][i]), int(c["block_epoch"][i]), int(c["grid_epoch"][i]),
                                      int(c["access"][i])))
            self._events = out
        return self._events

    def to_dicts(self) -> list:
        """Plain dicts, one per event (JSON-ready), for the explorer to animate."""
        return [e.as_dict() for e in self.events]


class TraceRecorder:
    """Collects accesses while the executor runs; ``finish()`` makes the Trace."""

    def __init__(self, graph):
        self.graph = graph
        self.parts: list = []
        self.node_ids: dict = {}
        self.seq = 0

    def add(self, kernel, stage, phase, epochs, geom, acc) -> None:
        b, t, it = (geom.full(a) for a in (geom.block, geom.thread, geom.iteration))
        flat = acc.flat(geom)
        if acc.mask is not None:
            sel = geom.full(acc.mask)
            b, t, it, flat = b[sel], t[sel], it[sel], flat[sel]
        n = b.size
        if n == 0:
            return
        node = self.node_ids.setdefault(acc.node, len(self.node_ids))
        addr = np.full(n, -1, np.int64) if acc.space == Space.REGISTER else acc.base + acc.itemsize * flat
        logical = acc.extra.get("logical")
        if logical is not None:            # element index in the node's row-major order (layout may differ)
            flat = geom.full(logical) if acc.mask is None else geom.full(logical)[geom.full(acc.mask)]
        const = {"kernel": kernel, "stage": stage, "phase": PHASES.index(phase), "block_epoch": epochs[0],
                 "grid_epoch": epochs[1], "space": SPACES.index(acc.space), "kind": KINDS.index(acc.kind),
                 "node": node}
        const["access"] = self.seq
        self.seq += 1
        part = {k: np.full(n, v, np.int64) for k, v in const.items()}
        part.update(block=b.astype(np.int64), thread=t.astype(np.int64), iteration=it.astype(np.int64),
                    element=np.asarray(flat, np.int64), address=np.asarray(addr, np.int64))
        self.parts.append(part)

    def finish(self) -> Trace:
        if self.parts:
            cols = {k: np.concatenate([p[k] for p in self.parts]) for k in COLUMNS}
            # program order: what every thread does at the same time, loop trip by loop trip
            order = np.lexsort((cols["thread"], cols["block"], cols["access"], cols["iteration"], cols["phase"],
                                cols["stage"], cols["kernel"]))
            cols = {k: v[order] for k, v in cols.items()}
        else:
            cols = {k: np.zeros(0, np.int64) for k in COLUMNS}
        nodes = sorted(self.node_ids, key=self.node_ids.get)
        shapes = {n: tuple(self.graph[n].shape) for n in nodes}
        return Trace(cols, nodes, shapes)


def find_races(trace: Trace) -> list:
    """Shared reads of another thread's write in the same block epoch; global reads of another
    block's write (this kernel) in the same grid epoch.  One Race per (kernel, block, address, writer, reader)."""
    c = trace.columns
    races, seen = [], set()
    if not len(trace):
        return races
    order_key = c["stage"] * 3 + c["phase"]
    for space, epoch_col in (("shared", "block_epoch"), ("global", "grid_epoch")):
        sp = c["space"] == SPACES.index(space)
        writes = sp & (c["kind"] != KINDS.index("read"))
        reads = sp & (c["kind"] == KINDS.index("read"))
        if not writes.any() or not reads.any():
            continue
        wtab: dict = {}
        for i in np.flatnonzero(writes):
            blk = int(c["block"][i]) if space == "shared" else -1
            key = (int(c["kernel"][i]), blk, int(c["address"][i]), int(c[epoch_col][i]))
            wtab.setdefault(key, []).append(i)
        for i in np.flatnonzero(reads):
            blk = int(c["block"][i]) if space == "shared" else -1
            key = (int(c["kernel"][i]), blk, int(c["address"][i]), int(c[epoch_col][i]))
            for w in wtab.get(key, ()):
                if order_key[w] > order_key[i]:
                    continue
                same_block = c["block"][w] == c["block"][i]
                if space == "shared" and c["thread"][w] == c["thread"][i]:
                    continue
                if space == "global" and same_block and (c["thread"][w] == c["thread"][i] or
                                                         c["block_epoch"][w] != c["block_epoch"][i]):
                    continue
                r = Race(int(c["kernel"][i]), int(c["stage"][i]), int(c["block"][i]), int(c["address"][i]),
                         int(c["thread"][w]), int(c["thread"][i]), trace.nodes[int(c["node"][i])], space,
                         int(c["block"][w]))
                k = (r.kernel, r.block, r.address, r.writer, r.reader, r.writer_block)
                if k not in seen:
                    seen.add(k)
                    races.append(r)
    return races


def find_divergence(kernel_index: int, grid: int, block: int, work: list, barriers: list) -> list:
    """``work[i]``: (block ids, thread ids) with work in stage i; ``barriers``: (stage, kind, after).

    A barrier in stage ``i`` (``after`` False: inside it, e.g. a reduction tree) waits
    for threads whose last work is in stage ``>= i``; ``after`` True (barrier_after)
    for threads with work in a stage ``> i``.
    """
    last = np.full((grid, block), -1, dtype=np.int64)
    for i, (b, t) in enumerate(work):
        last[b, t] = i
    out = []
    for stage, kind, after in barriers:
        alive = (last > stage) if after else (last >= stage)
        n_alive = alive.sum(axis=1)
        if kind == "grid":
            if not n_alive.any():
                continue
            bad = np.flatnonzero(n_alive < block)
        else:
            bad = np.flatnonzero((n_alive > 0) & (n_alive < block))
        for b in bad.tolist():
            out.append(BarrierDivergence(kernel_index, stage, b, kind, int(n_alive[b]), block - int(n_alive[b])))
    return out
