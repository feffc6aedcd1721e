"""Timing ``jax.jit`` functions on a GPU: enough repetitions for a stated spread.

JAX has no CUDA-event API, so its GPU time is a *pipelined difference*: queue N
calls of (flush + f) without waiting and time the batch, queue N flushes alone and
time that, and take the difference over N.  With the host queueing faster than the
GPU drains, both batches are GPU-bound and the difference is f's GPU time.  The
old version took N = 20 and 5 such differences: for a 10 us kernel the batch
lasted well under a millisecond, so host jitter decided the verdict.

:func:`pipelined` sizes N from a first estimate so that each batch lasts at least
``min_batch_s`` (the timer's and the host's noise then stay a small fraction of it),
measures ``batches`` differences alternating which batch goes first, and reports
the median, every sample and the spread (quartiles).  Two times whose quartile
ranges overlap are not told apart (:mod:`benchmarks.headline` says so).

The flush reads a buffer several times the L2 (a reduction): reading leaves no
dirty lines whose write-back would land in the timed work.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable

#: each timed batch lasts at least this long
MIN_BATCH_S = 0.02
#: differences measured (odd: the median is one of them)
BATCHES = 9
MAX_CALLS = 20_000


def spread(samples) -> dict:
    """Median, quartiles, min, max and the interquartile range relative to the median."""
    xs = sorted(float(x) for x in samples)
    if not xs:
        return {}
    if len(xs) == 1:
        q1 = q3 = xs[0]
    else:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    med = statistics.median(xs)
    return {"median": med, "p25": q1, "p75": q3, "min": xs[0], "max": xs[-1], "n": len(xs),
            "iqr_rel": (q3 - q1) / med if med > 0 else None}


def pipelined(queue_both: Callable[[int], None], queue_alone: Callable[[int], None], wait: Callable[[], None],
              min_batch_s: float = MIN_BATCH_S, batches: int = BATCHES, clock=time.perf_counter) -> dict:
    """Per-call time (us) of f by pipelined differences.

    ``queue_both(n)`` queues n x (flush + f), ``queue_alone(n)`` n flushes, ``wait()`` blocks until the
    queue is empty.  Returns ``{"gpu_us", "gpu_us_samples", "calls_per_batch", "spread"}``."""
    def batch(queue, n):
        wait()
        t0 = clock()
        queue(n)
        wait()
        return clock() - t0

    n = 1
    while True:                   # grow n until one batch lasts long enough to be timed well
        t = batch(queue_both, n)
        if t >= min_batch_s or n >= MAX_CALLS:
            break
        n = min(MAX_CALLS, max(2 * n, int(math.ceil(n * min_batch_s / max(t, 1e-9)))))
    samples = []
    for b in range(batches):
        if b % 2:
            both, alone = batch(queue_both, n), batch(queue_alone, n)
        else:
            alone, both = batch(queue_alone, n), batch(queue_both, n)
        samples.append(max(0.0, (both - alone) / n * 1e6))
    sp = spread(samples)
    return {"gpu_us": sp["median"], "gpu_us_samples": samples, "calls_per_batch": n, "spread": sp}


def time_jax(jax, fn, args, reps: int, warmup: int, flush_bytes: int) -> dict:
    """GPU time (pipelined, with spread) and end-to-end time of ``fn(*args)`` under ``jax``."""
    import jax.numpy as jnp
    flush = jax.jit(lambda b: jnp.sum(b))            # reads the buffer, writes one number
    buf = jnp.ones(flush_bytes // 4, dtype=jnp.float32)
    last = [None]
    for _ in range(max(1, warmup)):
        jax.block_until_ready(fn(*args))
        jax.block_until_ready(flush(buf))

    def queue_both(n):
        for _ in range(n):
            flush(buf)
            last[0] = fn(*args)

    def queue_alone(n):
        for _ in range(n):
            last[0] = flush(buf)

    def wait():
        if last[0] is not None:
            jax.block_until_ready(last[0])

    out = pipelined(queue_both, queue_alone, wait)
    e2e = []
    for _ in range(reps):
        jax.block_until_ready(flush(buf))
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        e2e.append((time.perf_counter() - t0) * 1e6)
    return dict(gpu_us=out["gpu_us"], gpu_us_samples=out["gpu_us_samples"], e2e_us=statistics.median(e2e),
                e2e_us_samples=e2e, reps=len(out["gpu_us_samples"]), calls_per_batch=out["calls_per_batch"],
                spread=out["spread"],
                method=f"pipelined: (T[N x (flush + f)] - T[N x flush]) / N, N={out['calls_per_batch']} calls "
                       f"per batch (each >= {MIN_BATCH_S * 1e3:.0f} ms), median of {BATCHES}; L2 flushed by "
                       "reading")


__all__ = ["pipelined", "spread", "time_jax", "MIN_BATCH_S", "BATCHES"]
