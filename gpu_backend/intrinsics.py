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

``shfl_xor(value, offset)``: lane ``laneid ^ offset``'s ``value``, every lane of the warp
taking part (``cuda.shfl_xor_sync`` with the full mask) -- the step of a shuffle reduction
(``astitch_sim/reduce_scheme.py``).  Numba shuffles 32- and 64-bit signed integers and
floats only; ``gpu_backend.dtypes.SHUFFLE_AS`` says which type the generated code shuffles
any other register type as (bit-preserving casts there and back).  Numba's CUDA simulator has no
warp shuffles: the twin exchanges the value through the warp's slots in
:mod:`gpu_backend.cudasim` (a warp barrier before and after the read), so a shuffle that
not every lane of the warp reaches is reported there as a stuck barrier.
"""
from __future__ import annotations

import threading

from numpy import uint32

from .numba_compat import cudasim_enabled

#: the generated kernels' index cast for ``index_bits=32`` (the module docstring says why)
u32 = int if cudasim_enabled() else uint32

#: every lane of a warp takes part in a shuffle
FULL_MASK = 0xFFFFFFFF


def _shfl_xor_sim(value, offset):
    """The simulator's shuffle: through the calling thread's warp slots (``cudasim._SimThread.shfl_xor``)."""
    return threading.current_thread().shfl_xor(value, offset)


if cudasim_enabled():
    shfl_xor = _shfl_xor_sim
else:
    from numba import cuda

    @cuda.jit(device=True)
    def shfl_xor(value, offset):
        return cuda.shfl_xor_sync(FULL_MASK, value, offset)
