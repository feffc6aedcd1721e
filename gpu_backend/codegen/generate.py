"""Plan -> Numba-CUDA Python source: one ``@cuda.jit`` kernel per kernel of the plan.

The generator decides nothing.  Every choice -- which ops a kernel holds, the
stages and their barriers, each stage's thread mapping, where each value lives
(``Value.space``), the shared-memory layout (``Value.offset``), how split
reductions combine -- is read from the Plan and written out as code, following
the recipe in :mod:`astitch_sim.plan.plan` ("How a stage runs"):

* **Loops = the mapping.**  A ``flat`` stage is a grid-stride loop; a ``rows``
  stage loops over the rows of the thread's *slot* (vertical packing) and,
  inside, over the row's columns in steps of ``threads_per_row`` (several rows
  share a block: horizontal packing; a row split over ``splits`` blocks: task
  splitting); a ``columns`` stage is the same with column tiles and row lanes.
  The loops give every domain element exactly the (block, thread, iteration)
  that :meth:`ThreadMapping.locate` gives it (a test checks this).
* **Index propagation = index arithmetic.**  An op is evaluated at a domain
  element; each operand is read at the index :func:`astitch_sim.ir.indexing.
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

* :mod:`~gpu_backend.codegen.module` -- ``ModuleWriter``: the module header, typed literal
  constants, one function per kernel (library kernels: :mod:`~gpu_backend.codegen.library.kernels`).
* :mod:`~gpu_backend.codegen.kernel` -- ``KernelWriter``: one kernel's arguments, memory
  (global arrays, shared views, register arrays, reduction scratch), the checks on
  the shared layout, the function around the stages.
* :mod:`~gpu_backend.codegen.stage` -- ``StageWriter``: one stage's header, checks and
  barrier; it builds the stage's context and the emitters below and hands each the
  context and the emitters it calls (composition: no emitter reaches into another's
  attributes, and nothing is shared that is not declared).
* :mod:`~gpu_backend.codegen.stage_context` -- ``StageContext``: what one stage's emitters share,
  each field documented with its writer (the stage, its mapping, the kernel's writer, the
  output lines; the iteration, domain index variables, accumulators, results, phase).
* :mod:`~gpu_backend.codegen.loops` -- ``LoopEmitter``: a ``flat`` stage's grid-stride loop and the
  domain index variables every loop opens.
* :mod:`~gpu_backend.codegen.task_loops` -- ``TaskLoopEmitter``: a ``rows``/``columns`` stage's lanes,
  task loops, element loops, and the passes after a task (tree, split combine, epilogue).
* :mod:`~gpu_backend.codegen.elements` -- ``ElementEmitter``: the body at one domain element
  (accumulate the reduces, store what is stored).
* :mod:`~gpu_backend.codegen.values` -- ``ValueEmitter``: element expressions and index propagation
  (the CSE ``Scope``); the index arithmetic itself is :mod:`~gpu_backend.codegen.exprs`.
* :mod:`~gpu_backend.codegen.slots` -- ``SlotEmitter``: Regional values' shared-memory slots.
* :mod:`~gpu_backend.codegen.reductions` -- ``ReductionEmitter``: accumulation, the tree, split
  combines, the task's completion and epilogue.
* :mod:`~gpu_backend.codegen.dtypes` -- storage and register types; ``CastEmitter``: casts.
* :mod:`~gpu_backend.codegen.source` -- lines, identifiers, reserved names, ``HELPERS``.
* :mod:`~gpu_backend.codegen.specs` -- ``ParamSpec``/``KernelSpec``/``GeneratedModule``: what the runtime gets.
"""
from __future__ import annotations

from .dtypes import (BITS, BOOL_RESULT, FLOATS, STORAGE_NAME, TYPE_PRESERVING, COMPUTE, HELPER_BY_DTYPE,
                     STORAGE, CastEmitter)
from .elements import ElementEmitter
from .kernel import STATIC_SHARED_LIMIT, KernelWriter, Scratch
from .loops import LoopEmitter
from .module import ModuleWriter
from .reductions import ATOMIC_DTYPES, ReductionEmitter
from .slots import SlotEmitter
from .source import RESERVED_NAMES, HELPERS, Lines, Names, ident
from .specs import GeneratedModule, KernelSpec, ParamSpec
from .stage import StageWriter, scheme_words
from .stage_context import StageContext
from .task_loops import TaskLanes, TaskLoopEmitter
from .values import Scope, ValueEmitter

__all__ = ["generate_source", "ModuleWriter", "KernelWriter", "StageWriter", "GeneratedModule", "KernelSpec",
           "ParamSpec", "HELPERS", "HELPER_BY_DTYPE", "STORAGE", "COMPUTE", "STATIC_SHARED_LIMIT", "Lines",
           "Names", "Scope", "Scratch", "ident", "StageContext", "CastEmitter", "SlotEmitter", "ValueEmitter",
           "ReductionEmitter", "ElementEmitter", "LoopEmitter", "TaskLoopEmitter", "TaskLanes", "BITS",
           "BOOL_RESULT", "FLOATS", "STORAGE_NAME", "TYPE_PRESERVING", "ATOMIC_DTYPES", "RESERVED_NAMES",
           "scheme_words"]


def generate_source(plan) -> str:
    """The Python source of the plan's Numba-CUDA kernels (one ``@cuda.jit`` function per kernel)."""
    return ModuleWriter(plan).write().source
