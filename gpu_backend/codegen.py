"""Plan -> Numba-CUDA Python source: one ``@cuda.jit`` kernel per kernel of the plan.

The generator decides nothing.  Every choice -- which ops a kernel holds, the
stages and their barriers, each stage's thread mapping, where each value lives
(``Value.space``), the shared-memory layout (``Value.offset``), how split
reductions combine -- is read from the Plan and written out as code, following
the recipe in :mod:`astitch_sim.plan` ("How a stage runs"):

* **Loops = the mapping.**  A ``flat`` stage is a grid-stride loop; a ``rows``
  stage loops over the rows of the thread's *slot* (vertical packing) and,
  inside, over the row's columns in steps of ``threads_per_row`` (several rows
  share a block: horizontal packing; a row split over ``splits`` blocks: task
  splitting); a ``columns`` stage is the same with column tiles and row lanes.
  The loops give every domain element exactly the (block, thread, iteration)
  that :meth:`ThreadMapping.locate` gives it (a test checks this).
* **Index propagation = index arithmetic.**  An op is evaluated at a domain
  element; each operand is read at the index :func:`astitch_sim.indexing.
  operand_index` implies (broadcast drops dims, transpose permutes, reshape
  re-ravels...).  The same arithmetic is generated here as code.
* **Spaces.**  Locals are registers; a value a later stage reads from the same
  thread lives in ``cuda.local.array(elements_per_thread)`` indexed by the
  thread's iteration; Regional values live in ``cuda.shared.array`` at the
  plan's byte offsets (one byte buffer, typed views) behind
  ``cuda.syncthreads()``; Global values in global scratch arrays behind a
  grid barrier ``cuda.cg.this_grid().sync()`` (cooperative launch).
* **Reductions.**  Each thread accumulates its elements in iteration order; the
  threads of a task combine in a shared-memory tree (the upper half folds into
  the lower half, the half rounded up, so ``threads_per_row`` may be any count,
  e.g. XLA's 768 -- the same order as the SIMT model's ``simt.reduce.tree``);
  the task's first thread combines the total with the reduce's init value and
  runs the stage's epilogue.  A task split over blocks combines by
  ``cuda.atomic`` into a result buffer the runtime pre-fills with the init
  value, or by partials in global scratch + grid barrier, as
  ``mapping.combine`` says.  The reduction scratch (``block * 8`` bytes per
  reduce, as the plan reserves) gives thread ``t`` bytes ``8t..8t+7``: stages
  that reuse it with another element type never race.
* **Op templates.**  Each elementwise op is its op-table ``scalar`` template;
  its ``_x`` helpers live in prelude.py with XLA's meaning (``_floor`` keeps
  inf and NaN, where ``math.floor`` returns an int; shifts by >= the bit width
  are defined), and integer dtypes pick the integer variant of a helper whose
  meaning differs (``HELPER_BY_DTYPE``: C-style division, integer power...).
* **Types.**  float32 math stays float32: literals are module-level numpy
  scalars, every op result is cast to its node's type.  f16 and bf16 are
  computed in float32 and rounded after every op (``_f16``/``_bf16``);
  bf16 is stored as its raw 16 bits.  No warp shuffles anywhere (the CUDA
  simulator has none), so the simulator runs exactly the code a GPU runs.

Where a plan asks for something this recipe cannot express, generation stops
with an :class:`~astitch_sim.AStitchError` that names the kernel, the stage
and the reason, instead of guessing.

Where each part lives (one idea per module; this module re-exports their names):

* :mod:`~gpu_backend.module` -- ``ModuleWriter``: the module header, typed literal
  constants, one function per kernel (library kernels: :mod:`~gpu_backend.library`).
* :mod:`~gpu_backend.kernel` -- ``KernelWriter``: one kernel's arguments, memory
  (global arrays, shared views, register arrays, reduction scratch), the checks on
  the shared layout, the function around the stages.
* :mod:`~gpu_backend.stage` -- ``StageWriter``: one stage's header, checks,
  per-element body and barrier, assembled from the mixins below.
* :mod:`~gpu_backend.loops` -- the loops of each mapping kind.
* :mod:`~gpu_backend.values` -- element expressions and index propagation (the CSE
  ``Scope``); the index arithmetic itself is :mod:`~gpu_backend.exprs`.
* :mod:`~gpu_backend.slots` -- Regional values' shared-memory slots.
* :mod:`~gpu_backend.reductions` -- accumulation, the tree, split combines, the epilogue.
* :mod:`~gpu_backend.dtypes` -- storage and register types, casts.
* :mod:`~gpu_backend.source` -- lines, identifiers, reserved names, ``HELPERS``.
* :mod:`~gpu_backend.specs` -- ``ParamSpec``/``KernelSpec``/``GeneratedModule``: what the runtime gets.
"""
from __future__ import annotations

from .dtypes import (BITS, BOOL_RESULT, FLOATS, STORAGE_NAME, TYPE_PRESERVING, COMPUTE, HELPER_BY_DTYPE,
                     STORAGE, CastEmitter)
from .kernel import STATIC_SHARED_LIMIT, KernelWriter, Scratch
from .loops import LoopEmitter
from .module import ModuleWriter
from .reductions import ATOMIC_DTYPES, ReductionEmitter
from .slots import SlotMixin
from .source import RESERVED_NAMES, HELPERS, Lines, Names, ident
from .specs import GeneratedModule, KernelSpec, ParamSpec
from .stage import StageWriter, scheme_words
from .values import Scope, ValueEmitter

__all__ = ["generate_source", "ModuleWriter", "KernelWriter", "StageWriter", "GeneratedModule", "KernelSpec",
           "ParamSpec", "HELPERS", "HELPER_BY_DTYPE", "STORAGE", "COMPUTE", "STATIC_SHARED_LIMIT", "Lines",
           "Names", "Scope", "Scratch", "ident", "CastEmitter", "LoopEmitter", "ReductionEmitter", "SlotMixin",
           "ValueEmitter", "BITS", "BOOL_RESULT", "FLOATS", "STORAGE_NAME", "TYPE_PRESERVING",
           "ATOMIC_DTYPES", "RESERVED_NAMES", "scheme_words"]


def generate_source(plan) -> str:
    """The Python source of the plan's Numba-CUDA kernels (one ``@cuda.jit`` function per kernel)."""
    return ModuleWriter(plan).write().source
