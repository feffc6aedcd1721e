"""Values a plan computes more than once, computed once by the simulation.

Fusion recomputes: XLA's softmax computes ``exp(x - max)`` in the kernel that sums it and again in the kernel
that divides by the sum; fusionstitching's stitched softmax does it in two stages of one kernel; a layer norm
backward recomputes the normalised input in three kernels.  The GPU pays for each copy -- loads, flops, time --
and the SIMT model counts each (the operands are read, the flops counted, in every stage that computes the
op).  But the *values* are the same every time: the graph gives each node one value (every reader of ``x``
reads the same tensor, however the plan moves it), so ``exp`` over the same elements is the same array of
numbers in every kernel.  Computing it again in numpy is a domain-sized pass that changes nothing (side by
side, the simulation of XLA's layer norm backward at 16384x768 is 1.34x faster without it, its softmax over
<64,30000> 1.10x: ``benchmarks/results/simt_speed_ab_3d5c127.md``).

:class:`Recomputed` keeps the value an elementwise op computed at its own elements -- the whole tensor, no
mask, in row-major order over the stage's domain (its own index, or a reshape's read in order) -- when the
plan computes that node in a later stage too, and hands it to that stage instead of the numpy pass.  The
operands are still evaluated (each read counted where the GPU makes it) and the flops counted; only the
arithmetic is not redone.

A kept array is made read-only: no later op may overwrite it in place (``Evaluator.donor`` and
``GlobalMemory.adopt`` both refuse an array that is not writeable), so the value handed on is the value
computed.  A stage over another domain of the same elements in the same order (Inductor's softmax sums
``exp`` over the row split into pieces, ``[64, 4, 7500]``, then divides it over ``[64, 30000]``) takes the
kept array reshaped.  Kept arrays together stay under :data:`KEEP_BYTES` (the biggest shapes, a gigabyte per
tensor at 8192x32000, recompute as before), and each is let go after the last stage that computes its node.
"""
from __future__ import annotations

import numpy as np

#: the bytes all kept values may hold together
KEEP_BYTES = 256 << 20


def recomputed_nodes(kernels) -> dict:
    """``{node: (kernel index, stage index) of the last element loop that computes it}`` for the nodes the
    element loops of ``kernels`` compute more than once (a stage's ``ops``; library kernels run none)."""
    count: dict = {}
    last: dict = {}
    for ki, k in enumerate(kernels):
        if k.kind == "library":
            continue
        for si, s in enumerate(k.stages):
            for n in s.ops:
                count[n] = count.get(n, 0) + 1
                last[n] = (ki, si)
    return {n: at for n, at in last.items() if count[n] > 1}


class Recomputed:
    """The kept values of one simulation: ``get`` one, ``keep`` one, and ``stage_done`` after every stage."""

    def __init__(self, kernels, budget=None):
        self.last = recomputed_nodes(kernels)
        self.budget = KEEP_BYTES if budget is None else budget
        self.held: dict = {}
        self.nbytes = 0

    def wanted(self, name: str) -> bool:
        """Does a later stage compute ``name`` again (so its value is worth keeping, or kept)?"""
        return name in self.last

    def get(self, name: str, shape: tuple):
        """The kept value of ``name`` in the shape of the asking stage's domain (a tensor kept from a stage over
        ``[64, 4, 7500]`` read back over ``[64, 30000]``: the same elements in row-major order, a view), or
        None."""
        held = self.held.get(name)
        if held is None or held.shape == tuple(shape):
            return held
        return held.reshape(shape) if held.size == int(np.prod(shape)) else None

    def keep(self, name: str, value) -> None:
        """Keep ``value`` -- the whole of ``name``, an array the caller made (no view, no buffer of the global
        memory: ``Evaluator.compute`` keeps only an op's fresh result) -- for the later stages that compute
        ``name``, if it fits in what the budget has left."""
        if (name not in self.last or name in self.held or not isinstance(value, np.ndarray)
                or value.base is not None or self.nbytes + value.nbytes > self.budget):
            return
        value.flags.writeable = False
        self.held[name] = value
        self.nbytes += value.nbytes

    def stage_done(self, kernel: int, stage: int) -> None:
        """Let go of the values no stage after ``(kernel, stage)`` computes."""
        if not self.held:
            return
        for name in [n for n in self.held if self.last[n] <= (kernel, stage)]:
            self.nbytes -= self.held.pop(name).nbytes
