"""The clock: L2 flush, a sleeping kernel that holds the stream while the host queues, CUDA events."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np

from .common import SIM_NOTE


_KERNELS: dict = {}


def _helper_kernels(simulator: bool) -> dict:
    """The clock's kernels (fill, read, sleep).  Defined with ``cuda`` a module global, because the
    simulator swaps the kernel's global ``cuda`` for its fake module (a closure variable it would miss)."""
    if _KERNELS:
        return _KERNELS
    global cuda
    from numba import cuda

    @cuda.jit
    def fill(buf, value):
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        while i < buf.size:
            buf[i] = value
            i += stride

    @cuda.jit
    def read(buf, sink):
        # reads every element and writes nothing (the buffer holds 1.0: the store never happens, but the
        # compiler cannot know, so the loads stay): evicts the L2 without leaving dirty lines behind
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        acc = 0.0
        while i < buf.size:
            acc += buf[i]
            i += stride
        if acc < 0.0:
            sink[0] = acc

    _KERNELS.update(fill=fill, read=read)
    if not simulator:
        @cuda.jit
        def sleep(chunks, out):
            for _ in range(chunks):
                cuda.nanosleep(1000)           # ~1 us each (the hardware allows 0..2x)
            out[0] = chunks
        _KERNELS["sleep"] = sleep
    return _KERNELS


class Clock:
    """Times queued GPU work with CUDA events (see the module doc), or the host clock in the simulator."""

    # the host's clock, in seconds: a test replaces it to drive the host-bound check with known times
    host_clock: Callable[[], float] = staticmethod(time.perf_counter)

    def __init__(self, simulator: bool, l2_bytes: int, reps: int, warmup: int, clock_ghz: float = 1.5):
        from numba import cuda
        self.cuda, self.simulator, self.reps, self.warmup = cuda, simulator, reps, warmup
        self.flush_bytes = 4096 if simulator else max(4 * l2_bytes, 256 * 2**20)
        self.flush_buf = cuda.device_array(self.flush_bytes // 4, dtype=np.float32)
        self._flush_count = 0
        self._sink = cuda.device_array(1, dtype=np.float32)
        self.sleep_ns = 200_000                    # hold the stream this long before each timed repetition
        self.clock_ghz = clock_ghz
        self.dropped = 0

        k = _helper_kernels(simulator)
        self._fill, self._read = k["fill"], k["read"]
        n = self.flush_buf.size
        self._fill[1 if simulator else min(4096, -(-n // 256)), 1 if simulator else 256](self.flush_buf,
                                                                                        np.float32(1.0))
        if not simulator:
            self._sleep = k["sleep"]
            self._sleep_out = cuda.device_array(1, dtype=np.int32)
            self._calibrate_sleep()

    # -- pieces ----------------------------------------------------------------
    def flush(self):
        """Read the flush buffer (several times the L2): evicts the L2 so inputs come from DRAM.

        Reading, not writing: a written buffer leaves dirty lines in the L2 whose write-back to DRAM
        would land inside the timed kernels."""
        self._flush_count += 1
        n = self.flush_buf.size
        blocks = 1 if self.simulator else min(4096, -(-n // 256))
        self._read[blocks, 1 if self.simulator else 256](self.flush_buf, self._sink)

    def hold(self):
        self._sleep[1, 1](max(1, int(self.sleep_ns // 1000 / self._ns_factor)), self._sleep_out)

    def _calibrate_sleep(self):
        """How long a nanosleep(1000) really sleeps here (the spec allows 0..2x)."""
        cuda = self.cuda
        self._ns_factor = 1.0
        self._sleep[1, 1](10, self._sleep_out)
        cuda.synchronize()
        e0, e1 = cuda.event(), cuda.event()
        e0.record()
        self._sleep[1, 1](200, self._sleep_out)
        e1.record()
        e1.synchronize()
        us = e0.elapsed_time(e1) * 1e3
        self._ns_factor = max(0.05, us / 200.0)     # us per 1000 ns requested

    def events(self, n):
        return [self.cuda.event() for _ in range(n)]

    # -- the measurement -------------------------------------------------------
    def time_launches(self, launches: list, sync: Callable = None) -> dict:
        """Time a list of kernel launches (callables that enqueue one kernel each).

        Returns gpu_us (median), gpu_us_samples, kernel_us (median per launch), e2e_us (median),
        e2e_us_samples, host_enqueue_us (median).
        """
        cuda = self.cuda
        sync = sync or cuda.synchronize
        for _ in range(self.warmup):
            for f in launches:
                f()
        sync()
        if self.simulator:
            return self._time_host(launches, sync)
        n = len(launches)
        pre, start = cuda.event(), cuda.event()
        after = self.events(n)
        totals, per_kernel, enqueue = [], [], []
        attempts = 0
        while len(totals) < self.reps and attempts < 3 * self.reps + 10:
            attempts += 1
            self.flush()
            pre.record()
            self.hold()
            t0 = self.host_clock()
            start.record()
            for f, ev in zip(launches, after):
                f()
                ev.record()
            t1 = self.host_clock()
            after[-1].synchronize()
            held_us = pre.elapsed_time(start) * 1e3
            host_us = (t1 - t0) * 1e6
            if host_us > 0.9 * held_us:               # the GPU may have waited for the host: drop, sleep longer
                self.dropped += 1
                self.sleep_ns = min(50_000_000, max(self.sleep_ns * 2, host_us * 2500))
                continue
            times = [start.elapsed_time(after[0]) * 1e3] + \
                    [after[i - 1].elapsed_time(after[i]) * 1e3 for i in range(1, n)]
            per_kernel.append(times)
            totals.append(start.elapsed_time(after[-1]) * 1e3)
            enqueue.append(host_us)
        if not totals:
            raise RuntimeError("every repetition was host-bound even with a long sleep; cannot time")
        e2e = []
        for _ in range(self.reps):
            self.flush()
            cuda.synchronize()
            t0 = self.host_clock()
            for f in launches:
                f()
            sync()
            e2e.append((self.host_clock() - t0) * 1e6)
        pk = np.median(np.array(per_kernel), axis=0)
        return dict(gpu_us=statistics.median(totals), gpu_us_samples=totals, kernel_us=[float(v) for v in pk],
                    e2e_us=statistics.median(e2e), e2e_us_samples=e2e, host_enqueue_us=statistics.median(enqueue),
                    reps=len(totals), method="cuda events, L2 flushed by reading, kernels queued behind a "
                    "sleeping kernel")

    def _time_host(self, launches, sync):
        per_kernel, totals = [], []
        for _ in range(self.reps):
            self.flush()
            times = []
            for f in launches:
                t0 = self.host_clock()
                f()
                sync()
                times.append((self.host_clock() - t0) * 1e6)
            per_kernel.append(times)
            totals.append(sum(times))
        pk = np.median(np.array(per_kernel), axis=0)
        return dict(gpu_us=statistics.median(totals), gpu_us_samples=totals, kernel_us=[float(v) for v in pk],
                    e2e_us=statistics.median(totals), e2e_us_samples=totals, host_enqueue_us=None,
                    reps=len(totals), method=f"host wall clock ({SIM_NOTE})")

    def copy_bandwidth(self, nbytes: int, sms: int = 132) -> dict:
        """Device-to-device copies of ``nbytes`` (memcpy, a 4-byte and a 128-bit Numba copy kernel): bytes
        read + written / time (:mod:`benchmarks.copy_bandwidth`)."""
        from benchmarks.copy_bandwidth import measure
        out = measure(self, nbytes, sms)
        out["us"] = out["memcpy_us"]
        out["numba_copy_kernel_us"] = out["scalar_us"]
        if self.simulator:
            out["note"] = SIM_NOTE
        return out
