"""Every low-level Numba-CUDA construct the generated kernels use, in one module.

numba-cuda is in maintenance mode: what the code generator needs beyond plain Python
(casts whose width matters to the machine code, ``@intrinsic`` functions that emit
LLVM IR directly, warp-level calls) lives here and only here, so that a change in
numba-cuda touches one file.  Each name has a simulator twin with the same meaning
(Numba's CUDA simulator runs the kernels as Python), chosen when this module is
imported, as :mod:`gpu_backend.prelude` does for ``math``.

``u32(x)``: an index variable of a kernel whose plan says ``index_bits=32``.  On a GPU
it is the truncating cast to ``uint32``: the variable is then visibly a zero-extended
32-bit value wherever Numba widens it to ``int64``, so LLVM proves it non-negative and
turns Python's floor ``//`` and ``%`` into unsigned 32-bit division by a constant (a
multiply-high and a shift) and drops Numba's negative-index wraparound on every array
access -- literals stay plain ``int`` and mixed arithmetic stays signed 64-bit, so an
expression that may go negative (a pad's ``d0 - 2``) keeps its meaning.  The planner
chooses 32 bits only where every index fits (``astitch_sim/index_bits.py``).  In the
simulator ``u32`` is ``int``: exact integers, which is what the GPU computes for values
that fit.
"""
from __future__ import annotations

from numpy import uint32

from .numba_compat import cudasim_enabled

#: the generated kernels' index cast for ``index_bits=32`` (the module docstring says why)
u32 = int if cudasim_enabled() else uint32
