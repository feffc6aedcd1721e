"""The baselines, timed like our plans: jax.jit, PyTorch eager, PyTorch's fused op, torch.compile."""
from __future__ import annotations

import gc
import statistics
import time

import numpy as np
from benchmarks.jax_timing import time_jax
from benchmarks.validation import Validator

from .check import compare
from .common import SIM_NOTE, log


def _import_torch(need_cuda: bool):
    try:
        import torch
    except Exception:
        return None
    if not need_cuda:
        return torch
    try:
        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def _import_jax(need_gpu: bool):
    try:
        import jax
        if not need_gpu:
            return jax
        return jax if any(d.platform == "gpu" for d in jax.devices()) else None
    except Exception:
        return None


def time_host(call, reps, warmup) -> dict:
    """Wall clock of ``call()`` (which must wait for its result): the simulator-mode baselines on the CPU."""
    for _ in range(warmup):
        call()
    e2e = []
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        call()
        e2e.append((time.perf_counter() - t0) * 1e6)
    return dict(gpu_us=statistics.median(e2e), gpu_us_samples=e2e, e2e_us=statistics.median(e2e),
                e2e_us_samples=e2e, reps=len(e2e), method=f"host wall clock on the CPU ({SIM_NOTE})")


def flush_l2(torch, cache, sink) -> None:
    """Evict the L2 by *reading* ``cache`` (a buffer larger than the L2) into the 0-d ``sink``: a flush by
    writing would leave dirty lines whose write-back lands in the timed kernel.  ``torch.sum`` takes ``out=``
    only with the dim named (``torch.sum(cache, out=sink)`` is a TypeError in torch 2.11 and later: it made
    every torch baseline of the first GPU window fail at its first timed run)."""
    torch.sum(cache, 0, out=sink)


def time_torch(torch, fn, args, reps, warmup, flush_bytes, clock_ghz) -> dict:
    cache = torch.ones(flush_bytes // 4, dtype=torch.float32, device="cuda")
    sink = torch.empty((), dtype=torch.float32, device="cuda")      # flush by reading (no dirty L2 lines)
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    pre, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    sleep_cycles = int(200e-6 * clock_ghz * 1e9)
    totals, enqueue = [], []
    attempts = 0
    while len(totals) < reps and attempts < 3 * reps + 10:
        attempts += 1
        flush_l2(torch, cache, sink)
        pre.record()
        torch.cuda._sleep(sleep_cycles)
        t0 = time.perf_counter()
        start.record()
        fn(*args)
        end.record()
        t1 = time.perf_counter()
        end.synchronize()
        held = pre.elapsed_time(start) * 1e3
        host = (t1 - t0) * 1e6
        if host > 0.9 * held:
            sleep_cycles = int(min(sleep_cycles * 4, 2 * host * 1e-6 * clock_ghz * 1e9 + sleep_cycles))
            continue
        totals.append(start.elapsed_time(end) * 1e3)
        enqueue.append(host)
    e2e = []
    for _ in range(reps):
        flush_l2(torch, cache, sink)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        e2e.append((time.perf_counter() - t0) * 1e6)
    del cache
    return dict(gpu_us=statistics.median(totals) if totals else None, gpu_us_samples=totals,
                e2e_us=statistics.median(e2e), e2e_us_samples=e2e,
                host_enqueue_us=statistics.median(enqueue) if enqueue else None, reps=len(totals),
                method="torch.cuda events, L2 flushed by reading, queued behind torch.cuda._sleep")


def run_baselines(case, graph, inputs, reference, names, settings, which) -> list:
    """jax.jit, torch eager, torch native op, torch.compile: each validated and timed; skipped if not importable.

    On a GPU they run on the GPU.  In simulator mode they run on the CPU when installed (this checks their
    formulas against the reference; the times are labelled and mean nothing)."""
    from benchmarks import baselines as B
    runs = []
    if graph.name not in B.FUNCTIONS:
        return [{"kind": "baseline", "name": n, "skipped": f"no baseline formula for {graph.name}"} for n in which]
    sim = settings["mode"] == "simulator"
    reps, warmup = settings["reps"], settings["warmup"]
    where = "cpu" if sim else "gpu"

    if "jax.jit" in which:
        jax = _import_jax(need_gpu=not sim)
        if jax is None:
            runs.append({"kind": "baseline", "name": "jax.jit",
                         "skipped": "jax not importable" + ("" if sim else " with a GPU backend")})
        else:
            if sim:
                timer = lambda f, args: time_host(lambda: jax.block_until_ready(f(*args)), reps, warmup)  # noqa
            else:
                timer = lambda f, args: time_jax(jax, f, args, reps, warmup, settings["flush_bytes"])  # noqa
            runs.append(_one_baseline("jax.jit", lambda: _jax_run(jax, B, graph, inputs), reference, names, timer,
                                      where))
            gc.collect()
    wants_torch = [w for w in which if w.startswith("torch")]
    torch = _import_torch(need_cuda=not sim) if wants_torch else None
    variants = []
    if torch is not None:
        fn = B.bind(graph.name, B.TorchOps())
        if "torch.eager" in which:
            variants.append(("torch.eager", fn, False))
        native = B.torch_native(graph.name)
        if "torch.native" in which:
            if native is not None:
                variants.append(("torch.native", native, False))
            else:
                runs.append({"kind": "baseline", "name": "torch.native",
                             "skipped": f"PyTorch has no fused op for {graph.name}"})
        if "torch.compile" in which:
            variants.append(("torch.compile", fn, True))
    elif wants_torch:
        runs += [{"kind": "baseline", "name": n,
                  "skipped": "torch not importable" + ("" if sim else " with CUDA")} for n in wants_torch]
    for name, fn, compiled in variants:
        def build(fn=fn, compiled=compiled):
            f = B.torch_compiled(fn) if compiled else fn
            args = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
            if not sim:
                args = [a.cuda() for a in args]
            t0 = time.perf_counter()
            out = f(*args)
            if not sim:
                torch.cuda.synchronize()
            first = time.perf_counter() - t0
            return f, args, [o.detach().contiguous().cpu().numpy() for o in out], first

        if sim:
            timer = lambda f, args: time_host(lambda: f(*args), reps, warmup)  # noqa: E731
        else:
            timer = lambda f, args: time_torch(torch, f, args, reps, warmup,  # noqa: E731
                                               settings["flush_bytes"], settings["clock_ghz"])
        runs.append(_one_baseline(name, build, reference, names, timer, where))
        if not sim:
            torch.cuda.empty_cache()
    return runs


def _jax_run(jax, B, graph, inputs):
    f = jax.jit(B.bind(graph.name, B.JaxOps()))
    args = [jax.device_put(x) for x in inputs]
    t0 = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    first = time.perf_counter() - t0
    return f, args, [np.asarray(o) for o in out], first


def check_run(outs, reference, names) -> dict:
    """``reference``: the case's :class:`Validator` (prepared once), or the reference arrays themselves."""
    return reference.check(outs) if isinstance(reference, Validator) else compare(outs, reference, names)


def _one_baseline(name, build, reference, names, timer, where="gpu") -> dict:
    run = {"kind": "baseline", "name": name, "device": where}
    log(f"    {name}: compile + validate")
    try:
        f, args, outs, first = build()
        run["first_call_s"] = first
        run["validation"] = check_run(outs, reference, names)
        log(f"    {name}: {'ok' if run['validation']['ok'] else 'WRONG'} "
            f"(rel err {run['validation']['max_rel_l2']:.1e}); timing")
        run.update(timer(f, args))
        del f, args, outs
    except Exception as e:                       # a baseline failing must not stop the suite
        run["error"] = f"{type(e).__name__}: {e}"
        log(f"    {name}: FAILED {run['error']}")
    return run
