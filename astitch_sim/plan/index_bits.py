"""How wide a kernel's index arithmetic is: 32 bits where every index it forms fits, 64 bits past 2**31.

A memory-bound kernel spends most of its instructions on addresses unless its index
math is cheap.  64-bit signed arithmetic with Python's floor semantics (what Numba
gives for ``e // 768`` on an ``int64``) costs a magic-multiply chain plus sign fix-ups
per ``//`` and ``%``, and every array access pays a negative-index wraparound; the same
decomposition on unsigned 32-bit values is a multiply-high and a shift, with no
wraparound.  (``benchmarks.sass_budget``: layernorm's elementwise kernel goes from 98 to
about 36 SASS instructions per element with nothing else changed.)

The width is a planning decision made here, the same rule for every strategy, and
recorded on the kernel (``Kernel.index_bits``; ``print(plan)`` shows ``index=32-bit``):
32 when every index the kernel's code can form is below :data:`LIMIT_32` -- every
element of every tensor it reads or writes, and every thread's position in its loops
(threads x elements per thread: a loop's last round may run past the tensor before its
guard) -- else 64.  (A graph's tensors hold fewer than 2**31 elements, ``shape_checks``;
64 bits come from loop positions past the tensor, near that limit.)
Unsigned 32-bit values reach 2**32; the limit leaves a factor of two for the
intermediate sums of an index before its guard.
"""
from __future__ import annotations

from math import prod

#: the largest index (exclusive) a 32-bit kernel may form
LIMIT_32 = 2 ** 31
WIDTHS = (32, 64)


def largest_index(graph, stages, touched, grid: int, block: int) -> int:
    """The largest index a kernel with these stages may form: element counts of the ``touched`` nodes
    and of every operand its stages read, and the threads' loop positions."""
    names = set(touched)
    for s in stages:
        for n in list(s.ops) + list(s.epilogue):
            names.add(n)
            names.update(o.name for o in graph[n].operands)
    elements = max((int(prod(graph[n].shape)) for n in names), default=0)
    positions = max((grid * block * s.mapping.elements_per_thread for s in stages), default=grid * block)
    return max(elements, positions)


def index_bits(graph, stages, touched, grid: int, block: int) -> int:
    """32 if every index the kernel forms is below :data:`LIMIT_32`, else 64."""
    return 32 if largest_index(graph, stages, touched, grid, block) < LIMIT_32 else 64
