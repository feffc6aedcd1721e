"""Our plans through gpu_backend: prepared once, launched per repetition between the clock's events."""
from __future__ import annotations

import functools
import gc
import time
from typing import Optional


class PlanRunner:
    """A plan's kernels on device-resident buffers: one callable per plan kernel, each only enqueues.

    ``gpu_backend.run(plan, inputs)`` allocates, uploads, launches, synchronises and copies back on
    every call -- right for using a plan, wrong for timing its kernels.  This runner uses the steps
    ``run`` is made of (``gpu_backend.prepare``): allocation and upload once (here), then
    ``launches[i]()`` enqueues plan kernel ``i`` -- preceded by the device-to-device refill of its
    split-reduction result buffers with the reduce's init value (the memset the cost model charges
    to that kernel) -- and ``fetch()`` runs them all and copies the outputs back.  What is timed is
    therefore exactly the plan's kernels (and those refills), on the buffers ``run`` would use.
    """

    def __init__(self, plan, inputs: list):
        import gpu_backend
        from numba import cuda

        self.plan, self.sim, self.cuda = plan, gpu_backend.simulator(), cuda
        self.prepared = gpu_backend.prepare(plan, inputs)
        self.names = [k.name for k in self.prepared.kernels]
        self.launches = [functools.partial(self.prepared.launch_kernel, i) for i in range(len(self.names))]

    def sync(self):
        self.cuda.synchronize()

    def fetch(self, times: Optional[list] = None) -> list:
        """Run every kernel once, then copy the outputs back (graph output order).

        ``times``: if a list, each launch is synchronised and its host wall time (us) appended
        (the simulator's only clock)."""
        if times is None:
            self.prepared.launch()
        else:
            t0 = [time.perf_counter()]

            def lap(i):
                self.sync()
                now = time.perf_counter()
                times.append((now - t0[0]) * 1e6)
                t0[0] = now
            self.prepared.launch(after_kernel=lap)
        return self.prepared.outputs()

    def close(self):
        """Drop the device buffers now (Numba frees lazily; a 110M-element plan holds gigabytes)."""
        self.prepared.release()
        self.launches = []
        gc.collect()
        if not self.sim:
            try:
                self.cuda.current_context().deallocations.clear()
            except Exception:
                pass


def make_plan_runner(plan, inputs: list) -> PlanRunner:
    """A :class:`PlanRunner` for ``plan`` on ``inputs`` (numpy, parameter order)."""
    return PlanRunner(plan, inputs)
