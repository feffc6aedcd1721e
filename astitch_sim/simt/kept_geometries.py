"""Geometries kept from one kernel to the next.

A :class:`~astitch_sim.simt.geometry.Geometry` says where each element of a stage's domain runs (block, thread,
loop trip) under its thread mapping; making one locates a row's line and checks it against a sample, about a
millisecond for the paper's ``<64,30000>`` rows.  Kernels of one plan often share a mapping: xla's softmax
reduces two rows of the same shape in two kernels, an unfused graph runs each elementwise op of one shape in a
kernel of its own (a GPT training step: a thousand kernels over a few dozen mappings).  A geometry depends on its
mapping alone, so the simulation keeps the ones its kernels made and hands them to later kernels of the same
mapping.

What a geometry holds grows as it is used (a dense domain's element arrays, a count's warp numbers), so what is
kept is bounded by the bytes of the arrays it holds: geometries past :data:`KEEP_BYTES` together are let go,
the longest kept first, and so is one that alone holds more -- a big kernel's element arrays never outlive
their kernel.  Only a mapping a later kernel of the plan runs is kept at all (:func:`needed_after`): the plan
lists its kernels up front, so a one-kernel plan keeps nothing and weighs nothing (weighing a geometry walks
everything it holds, after every kernel).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .geometry import Geometry

#: the arrays all kept geometries may hold together (a few separable lines each; a dense 1M-element domain's
#: block, thread and trip numbers are 24 MB)
KEEP_BYTES = 64 << 20


def held_bytes(obj) -> int:
    """Bytes of the arrays ``obj`` keeps alive (a view: the array it views, counted once), through dicts, tuples,
    lists, dataclasses (a reduce's layout form) and geometries (a split row's refined one); an object with a
    ``held_bytes`` method (the counters kept on a geometry: ``count_memo.KeptCounts``) says so itself.  (A
    loop over a stack, numbers passed over at once: it runs on every kernel's geometries, a thousand times in
    a training step's unfused simulation.)"""
    seen: set = set()
    total, stack = 0, [obj]
    while stack:
        o = stack.pop()
        if o is None or isinstance(o, (int, float, str)):
            continue
        if isinstance(o, np.ndarray):
            while isinstance(o.base, np.ndarray):
                o = o.base
            if id(o) not in seen:
                seen.add(id(o))
                total += o.nbytes
        elif isinstance(o, (tuple, list)):
            stack.extend(o)
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif hasattr(o, "held_bytes"):
            total += o.held_bytes()
        elif isinstance(o, Geometry):
            stack.extend(v for k, v in vars(o).items() if k != "mapping")      # (its mapping holds no arrays)
        elif dataclasses.is_dataclass(o) and not isinstance(o, type):
            stack.extend(vars(o).values())
    return total


def mapping_key(mapping) -> tuple:
    """A thread mapping as a dict key: every field (``load_trips`` too), so two mappings share a geometry only
    where they are the same mapping (``ThreadMapping.key``: worked out once on a sealed plan's mapping)."""
    return mapping.key


def needed_after(kernels) -> list:
    """For each kernel of a plan, the mapping keys (:func:`mapping_key`) of the stages of the kernels after it:
    the geometries worth keeping once it ends (library kernels run no mapping)."""
    out, later = [], set()
    for k in reversed(kernels):
        out.append(frozenset(later))
        if k.kind != "library":
            later |= {mapping_key(s.mapping) for s in k.stages}
    return out[::-1]


class KeptGeometries:
    """The geometries of the kernels run so far, by mapping key (``KernelRun.geometry``'s), within a budget."""

    def __init__(self, budget: int = KEEP_BYTES):
        self.budget = budget
        self.kept: dict = {}              # key -> geometry, the longest kept first
        self.sizes: dict = {}             # key -> bytes its arrays held when last kept
        self.total = 0

    def get(self, key):
        return self.kept.get(key)

    def keep(self, geoms: dict, wanted=None) -> None:
        """Keep a finished kernel's geometries (measured again: a kept one this kernel used may have cached
        more), then let go of one that alone exceeds the budget, and of the oldest while all together do.
        ``wanted``: the keys a later kernel runs (:func:`needed_after`); any other is let go, or never kept
        (None: keep every one)."""
        if wanted is not None:
            for key in [k for k in self.kept if k not in wanted]:
                self._drop(key)
            geoms = {k: g for k, g in geoms.items() if k in wanted}
        for key, geom in geoms.items():
            self._drop(key)
            size = held_bytes(geom)
            if size <= self.budget:
                self.kept[key], self.sizes[key] = geom, size      # (re)inserted last: the kernel just used it
                self.total += size
        for key in list(self.kept):
            if self.total <= self.budget:
                break
            self._drop(key)

    def _drop(self, key) -> None:
        if key in self.kept:
            del self.kept[key]
            self.total -= self.sizes.pop(key)
