#!/usr/bin/env python3
"""Run the benchmark suite on a GPU: every strategy's plan through ``gpu_backend``, plus real baselines.

    python3 -m benchmarks.gpu_bench --out benchmarks/results/<dir> [--quick] [--gpu-preset H100]
    python3 -m benchmarks.gpu_bench --simulator --out /tmp/sim      # no GPU: Numba's CUDA simulator, tiny shapes

(from the repository root: ``astitch_sim``, ``gpu_backend`` and ``benchmarks`` are imported from the checkout).
For every case of :mod:`benchmarks.suite` (workload + shape):

1. inputs from ``workload_inputs`` (fixed seed) and the numpy reference ``asim.reference``;
2. each strategy's plan (``asim.compile(graph, strategy, gpu=<preset>)``) compiled by
   ``gpu_backend`` (kernels cached per plan), run once and **validated** against the
   reference (relative L2 error per output, NaN check), then timed;
3. the baselines, when importable: ``jax.jit`` of the same formula in ``jax.numpy``,
   PyTorch eager, PyTorch's own fused op where it has one, and ``torch.compile``
   (:mod:`benchmarks.baselines`), validated the same way, timed on the same input values.

How time is measured (read this before quoting a number)
--------------------------------------------------------
*GPU time* (``gpu_us``): CUDA events on the stream, recorded before the first kernel and
after each kernel; median of ``--reps`` (>= 20) repetitions after warm-up.  Before every
repetition the L2 is flushed (a kernel writes a buffer several times the L2 size) and a
*sleeping kernel* (``nanosleep`` loop, sized from the measured host enqueue time) holds the
stream while the host queues the plan's kernels behind it, so the kernels run back to back
and the events measure the GPU, not Python's dispatch.  A repetition in which the host
took longer to queue than the sleep lasted is dropped and the sleep lengthened.
Per-kernel times are the differences of consecutive events.  PyTorch: the same, with
``torch.cuda.Event`` and ``torch.cuda._sleep``.  JAX has no event API: its GPU time is
``(T[flush + f] - T[flush]) / N`` over N calls queued without waiting ("pipelined").

*End-to-end time* (``e2e_us``): host wall clock from the first launch call to
``synchronize()`` returning, L2 flushed before; launch overhead (Numba's dispatch,
PyTorch's, JAX's) included.  Median of the same number of repetitions.

*Bandwidth* = minimum bytes (every input read once + every output written once) / GPU
time, and its share of the device-to-device copy bandwidth measured in the same run
(``cudaMemcpyDtoD`` of 1 GiB, bytes read + written).

``--simulator`` (automatic when no GPU is found): Numba's CUDA simulator at the suite's
tiny shapes; times are host wall clock of the simulator and every output says
"CUDA simulator, not GPU timing".  It checks the pipeline and the validation, nothing else.

Outputs in ``--out``: ``results.json`` (everything, with provenance), ``results.md``
(a table per case), ``plot.png`` (matplotlib, if installed), written after every case so
an interrupted run keeps what it measured.  Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import gc
import hashlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import traceback
from typing import Callable, Optional

#: the checkout: its git commit and a digest of its sources go into the provenance
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# JAX must not grab 75% of the GPU before numba and torch have their share
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# small grids (Figure 7, few long rows) are the point here, not a mistake to warn about on every launch
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import numpy as np  # noqa: E402  (after the environment settings above)

from benchmarks.jax_timing import time_jax  # noqa: E402  (pipelined, with its spread)
from benchmarks.validation import Validator  # noqa: E402

SIM_NOTE = "CUDA simulator, not GPU timing"
FORMAT = "astitch-sim gpu_bench 1"
REL_TOL = 1e-4            # relative L2 error per output (float32: far below this when right)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# mode: GPU or simulator (decided before numba.cuda is imported)
# ---------------------------------------------------------------------------

def gpu_present() -> bool:
    """Is a CUDA GPU usable by numba?  Probed in a subprocess so this process can still pick the simulator."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    code = "from numba import cuda; import sys; sys.exit(0 if cuda.is_available() else 3)"
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose_mode(simulator: Optional[bool]) -> str:
    """'simulator' or 'gpu'; sets NUMBA_ENABLE_CUDASIM accordingly if numba.cuda is not imported yet."""
    if "numba.cuda" in sys.modules:          # too late to choose: use what this process has
        from numba import config
        sim = bool(getattr(config, "ENABLE_CUDASIM", 0))
        if simulator is False and sim:
            raise SystemExit("numba.cuda was imported in simulator mode; cannot switch to the GPU")
        if simulator and not sim:
            raise SystemExit("numba.cuda was imported without the simulator in this process; set "
                             "NUMBA_ENABLE_CUDASIM=1 before anything imports numba.cuda to use the simulator")
        return "simulator" if sim else "gpu"
    if simulator is None:
        simulator = not gpu_present()
        if simulator:
            log("no CUDA GPU found: running in Numba's CUDA simulator at tiny shapes (" + SIM_NOTE + ")")
    if simulator:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    return "simulator" if simulator else "gpu"


# ---------------------------------------------------------------------------
# provenance
# ---------------------------------------------------------------------------

def _version(dist: str) -> Optional[str]:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


def _git_commit() -> Optional[str]:
    if os.environ.get("ASTITCH_GIT_COMMIT"):
        return os.environ["ASTITCH_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", _ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "-C", _ROOT, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return None


def source_digest() -> str:
    """sha256 over the sources that decide what ran (works where there is no .git, e.g. a device machine)."""
    h = hashlib.sha256()
    for top in ("astitch_sim", "gpu_backend", "benchmarks"):
        base = os.path.join(_ROOT, top)
        for dirpath, dirnames, files in sorted(os.walk(base)):
            dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "results"))
            for f in sorted(files):
                if f.endswith(".py"):
                    p = os.path.join(dirpath, f)
                    h.update(os.path.relpath(p, _ROOT).encode())
                    with open(p, "rb") as fh:
                        h.update(fh.read())
    return h.hexdigest()[:16]


def _nvidia_smi() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                              "clocks.max.mem,power.limit", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            keys = ["name", "driver_version", "memory_total", "max_sm_clock", "max_mem_clock", "power_limit"]
            return dict(zip(keys, (v.strip() for v in out.stdout.strip().splitlines()[0].split(","))))
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {}


def provenance(mode: str, argv: list, commit: Optional[str]) -> dict:
    from numba import cuda
    p = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
         "command": " ".join([os.path.basename(sys.executable)] + list(argv)),
         "git_commit": commit or _git_commit() or "unknown (no git here; pass --commit)",
         "source_digest": source_digest(),
         "host": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
         "versions": {d: _version(d) for d in ("numpy", "scipy", "numba", "numba-cuda", "cuda-python",
                                               "cuda-bindings", "jax", "jaxlib", "torch", "triton",
                                               "matplotlib", "astitch-sim")}}
    if mode == "simulator":
        p.update(device=f"none ({SIM_NOTE})", driver=None, cuda_driver_version=None, cuda_runtime_version=None)
        return p
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    p["device"] = name
    p["compute_capability"] = list(dev.compute_capability)
    for attr, key in (("MULTIPROCESSOR_COUNT", "sms"), ("L2_CACHE_SIZE", "l2_bytes"),
                      ("CLOCK_RATE", "sm_clock_khz"), ("MEMORY_CLOCK_RATE", "mem_clock_khz"),
                      ("GLOBAL_MEMORY_BUS_WIDTH", "bus_width_bits")):
        try:
            p[key] = int(getattr(dev, attr))
        except Exception:
            p[key] = None
    try:
        from numba.cuda.cudadrv.driver import driver
        p["cuda_driver_version"] = ".".join(map(str, driver.get_version()))
    except Exception:
        p["cuda_driver_version"] = None
    try:
        p["cuda_runtime_version"] = ".".join(map(str, cuda.runtime.get_version()))
    except Exception:
        p["cuda_runtime_version"] = None
    smi = _nvidia_smi()
    p["driver"] = smi.get("driver_version")
    p["nvidia_smi"] = smi
    return p


def detect_preset(device_name: str) -> Optional[str]:
    name = device_name.upper()
    for preset in ("H200", "H100", "A100", "V100"):
        if preset in name:
            return preset
    return None


# ---------------------------------------------------------------------------
# the clock: flush, sleep, events
# ---------------------------------------------------------------------------

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
            t0 = time.perf_counter()
            start.record()
            for f, ev in zip(launches, after):
                f()
                ev.record()
            t1 = time.perf_counter()
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
            t0 = time.perf_counter()
            for f in launches:
                f()
            sync()
            e2e.append((time.perf_counter() - t0) * 1e6)
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
                t0 = time.perf_counter()
                f()
                sync()
                times.append((time.perf_counter() - t0) * 1e6)
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


# ---------------------------------------------------------------------------
# our plans through gpu_backend
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------

def compare(outputs: list, reference: list, names: list) -> dict:
    """Relative L2 error per output (float64 arithmetic), NaN/shape checks; ok if all <= REL_TOL.

    One-off form of :class:`benchmarks.validation.Validator` (a case prepares one and checks every run)."""
    return Validator(reference, names, REL_TOL).check(outputs)


# ---------------------------------------------------------------------------
# baselines
# ---------------------------------------------------------------------------

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
        torch.sum(cache, out=sink)
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
        torch.sum(cache, out=sink)
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


def _check(outs, reference, names) -> dict:
    """``reference``: the case's :class:`Validator` (prepared once), or the reference arrays themselves."""
    return reference.check(outs) if isinstance(reference, Validator) else compare(outs, reference, names)


def _one_baseline(name, build, reference, names, timer, where="gpu") -> dict:
    run = {"kind": "baseline", "name": name, "device": where}
    log(f"    {name}: compile + validate")
    try:
        f, args, outs, first = build()
        run["first_call_s"] = first
        run["validation"] = _check(outs, reference, names)
        log(f"    {name}: {'ok' if run['validation']['ok'] else 'WRONG'} "
            f"(rel err {run['validation']['max_rel_l2']:.1e}); timing")
        run.update(timer(f, args))
        del f, args, outs
    except Exception as e:                       # a baseline failing must not stop the suite
        run["error"] = f"{type(e).__name__}: {e}"
        log(f"    {name}: FAILED {run['error']}")
    return run


# ---------------------------------------------------------------------------
# one case
# ---------------------------------------------------------------------------

def run_plan(plan, inputs, reference, names, clock: Clock) -> dict:
    run = {"kind": "plan", "name": plan.strategy, "strategy": plan.strategy,
           "kernels": [{"name": k.name, "kind": k.kind, "grid": k.grid, "block": k.block,
                        "shared_bytes": k.shared_bytes, "registers_per_thread": k.registers_per_thread,
                        "global_barriers": k.global_barriers} for k in plan.kernels]}
    t0 = time.perf_counter()
    runner = make_plan_runner(plan, inputs)
    sim_times = [] if clock.simulator else None
    outs = runner.fetch(sim_times)              # first run: compiles (cached per plan) and computes
    run["first_run_s"] = time.perf_counter() - t0
    run["timing_scope"] = "plan kernels only (+ refills of split-reduction result buffers), device-resident buffers"
    run["validation"] = _check(outs, reference, names)
    del outs
    try:
        if clock.simulator:     # nothing to warm up in the simulator: the validation run is the timing
            t = dict(gpu_us=sum(sim_times), gpu_us_samples=[sum(sim_times)], kernel_us=sim_times,
                     e2e_us=sum(sim_times), e2e_us_samples=[sum(sim_times)], host_enqueue_us=None, reps=1,
                     method=f"host wall clock of the validation run ({SIM_NOTE})")
        else:
            t = clock.time_launches(runner.launches, runner.sync)
    finally:
        runner.close()
    kus = t.pop("kernel_us")
    if len(kus) == len(run["kernels"]):
        for k, us in zip(run["kernels"], kus):
            k["gpu_us"] = us
    run.update(t)
    return run


def run_case(case, mode_shape: str, settings: dict, clock: Clock, strategies, baselines_wanted) -> dict:
    import astitch_sim as asim
    from astitch_sim.frontends.workloads import workload_inputs
    from benchmarks.suite import LARGE_BYTES, graph_bytes

    shape = case.shape_for(mode_shape)
    graph = asim.workload(case.workload, **shape)
    in_bytes, out_bytes = graph_bytes(graph)
    rec = {"key": case.key, "workload": case.workload, "shape": shape, "title": case.title,
           "irregular": case.irregular, "notes": case.notes,
           "min_bytes": {"inputs": in_bytes, "outputs": out_bytes, "total": in_bytes + out_bytes},
           "large": in_bytes + out_bytes >= LARGE_BYTES, "runs": []}
    t0 = time.perf_counter()
    inputs = workload_inputs(graph, seed=settings["seed"])
    reference = asim.reference(graph, inputs)
    names = [o.name for o in graph.outputs]
    validator = Validator(reference, names, REL_TOL, on_gpu=settings["mode"] == "gpu")   # once per case
    rec["reference_s"] = time.perf_counter() - t0
    rec["validation_method"] = validator.method
    log(f"  inputs + reference {rec['reference_s']:.1f}s ({(in_bytes + out_bytes) / 1e6:.1f} MB minimum traffic)")
    plans = {}
    for strategy in strategies:
        try:
            plans[strategy] = asim.compile(graph, strategy=strategy, gpu=settings["gpu_preset"])
        except Exception as e:
            rec["runs"].append({"kind": "plan", "name": strategy, "strategy": strategy,
                                "error": f"compile: {type(e).__name__}: {e}"})
            log(f"  {case.key} / {strategy}: compile FAILED: {e}")
    compiler = {s: {"applied": False} for s in plans}
    if settings.get("apply_compiler") and plans:        # what AStitch ships: ptxas-checked register caps
        from benchmarks.applied_plans import apply_for_case
        plans, compiler, rec["apply_compiler_s"] = apply_for_case(plans, lambda m: log(f"  {case.key} / {m}"))
    for strategy, plan in plans.items():
        log(f"  {case.key} / {strategy}")
        try:
            run = run_plan(plan, inputs, validator, names, clock)
            run["compiler"] = compiler[strategy]
            v = run["validation"]
            log(f"    {len(plan.kernels)} kernel(s), first run {run['first_run_s']:.1f}s, "
                f"{'valid' if v['ok'] else 'WRONG'} (rel err {v['max_rel_l2']:.1e}), "
                f"GPU {run['gpu_us']:.1f} us, e2e {run['e2e_us']:.1f} us")
        except Exception as e:
            run = {"kind": "plan", "name": strategy, "strategy": strategy,
                   "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=6)}
            log(f"    FAILED {run['error']}")
        rec["runs"].append(run)
        gc.collect()
    rec["runs"] += run_baselines(case, graph, inputs, validator, names, settings, baselines_wanted)
    validator.close()
    derive(rec, settings.get("copy_bandwidth_gbs"), settings["mode"] == "simulator")
    del inputs, reference
    gc.collect()
    return rec


def derive(rec: dict, copy_gbs: Optional[float], simulator: bool = False) -> None:
    """Bandwidth, % of copy, speedup vs our xla plan, for every timed run of a case.

    Not in simulator mode: there every time is the simulator's wall clock, and a bandwidth or a
    speedup computed from it would only invite misuse (each run is marked with the note instead)."""
    if simulator:
        for r in rec["runs"]:
            r["timing_note"] = SIM_NOTE
        return
    from benchmarks.headline import run_spread
    for r in rec["runs"]:
        if r.get("gpu_us"):
            r["spread"] = run_spread(r)
    total = rec["min_bytes"]["total"]
    xla = next((r for r in rec["runs"] if r.get("strategy") == "xla" and r.get("gpu_us")), None)
    for r in rec["runs"]:
        if not r.get("gpu_us"):
            continue
        r["bandwidth_gbs"] = total / (r["gpu_us"] * 1e3)
        r["pct_of_copy"] = 100 * r["bandwidth_gbs"] / copy_gbs if copy_gbs else None
        r["speedup_vs_xla"] = xla["gpu_us"] / r["gpu_us"] if xla else None
        if xla and r.get("e2e_us") and xla.get("e2e_us"):
            r["e2e_speedup_vs_xla"] = xla["e2e_us"] / r["e2e_us"]


# ---------------------------------------------------------------------------
# reports
# ---------------------------------------------------------------------------

def summarize(results: dict) -> dict:
    """The issue's targets, computed from the results (None where there is nothing to compute)."""
    if results.get("mode") == "simulator":
        return {"note": f"{SIM_NOTE}: no targets are evaluated"}
    sp = []
    irregular = []
    large = []
    for c in results["cases"]:
        runs = {r["name"]: r for r in c["runs"] if r.get("gpu_us") and (r.get("validation") or {}).get("ok")}
        a, x = runs.get("astitch"), runs.get("xla")
        if a and x:
            sp.append(x["gpu_us"] / a["gpu_us"])
        if c.get("irregular") and a:
            for b in ("jax.jit", "torch.compile"):
                if b in runs:
                    irregular.append({"case": c["key"], "baseline": b, "astitch_us": a["gpu_us"],
                                      "baseline_us": runs[b]["gpu_us"], "ok": a["gpu_us"] <= runs[b]["gpu_us"]})
        if c.get("large") and a and a.get("pct_of_copy") is not None:
            large.append({"case": c["key"], "pct_of_copy": a["pct_of_copy"], "ok": a["pct_of_copy"] >= 80})
    geo = float(np.exp(np.mean(np.log(sp)))) if sp else None
    from benchmarks.headline import headline
    return {"headline": headline(results), "astitch_vs_xla_geomean": geo, "astitch_vs_xla_cases": len(sp),
            "astitch_vs_xla_ok": (geo >= 1.5) if geo else None,
            "irregular_vs_baselines": irregular, "large_pct_of_copy": large}


def _f(v, fmt="{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def write_markdown(results: dict, path: str) -> None:
    prov = results["provenance"]
    sim = results["mode"] == "simulator"
    L = [f"# gpu_bench results: {prov.get('device')}", ""]
    if sim:
        L += [f"**{SIM_NOTE}.** Every time below is the host wall clock of Numba's CUDA simulator at tiny "
              "shapes: it says the pipeline runs and the plans validate, nothing about speed.", ""]
    copy = results.get("copy") or {}
    L += [f"- date {prov.get('date')}, commit `{prov.get('git_commit')}`, sources `{prov.get('source_digest')}`",
          f"- device {prov.get('device')} (cc {prov.get('compute_capability')}), driver {prov.get('driver')}, "
          f"CUDA driver API {prov.get('cuda_driver_version')}, runtime {prov.get('cuda_runtime_version')}",
          "- " + ", ".join(f"{k} {v}" for k, v in prov.get("versions", {}).items() if v),
          f"- command `{prov.get('command')}`",
          f"- plans compiled for the **{results['gpu_preset']}** preset; shapes: {results['settings']['shapes']}; "
          f"{results['settings']['reps']} timed repetitions (median), {results['settings']['warmup']} warm-up, "
          f"L2 flushed with {results['settings']['flush_bytes'] / 2**20:.0f} MiB before each",
          f"- device-to-device copy: {_f(copy.get('bandwidth_gbs'))} GB/s (memcpy, "
          f"{_f(copy.get('bytes', 0) / 2**20, '{:.0f}')} MiB read+written); Numba copy kernel "
          f"{_f(copy.get('numba_copy_kernel_bandwidth_gbs'))} GB/s" + (f" ({SIM_NOTE})" if sim else ""), ""]
    s = results.get("summary") or {}
    if not sim:
        from benchmarks.headline import markdown as headline_markdown
        L += headline_markdown(s.get("headline") or {})
        L += ["## Targets", "",
              f"- astitch over our xla plans, geomean GPU time: {_f(s.get('astitch_vs_xla_geomean'), '{:.2f}')}x "
              f"over {s.get('astitch_vs_xla_cases')} cases (target >= 1.5x: "
              f"{'met' if s.get('astitch_vs_xla_ok') else 'not met' if s.get('astitch_vs_xla_ok') is False else '-'})"]
        for r in s.get("irregular_vs_baselines", []):
            L.append(f"- {r['case']}: astitch {r['astitch_us']:.1f} us vs {r['baseline']} {r['baseline_us']:.1f} us "
                     f"({'met' if r['ok'] else 'not met'}: target astitch <= baseline)")
        for r in s.get("large_pct_of_copy", []):
            L.append(f"- {r['case']}: astitch at {r['pct_of_copy']:.0f}% of copy bandwidth "
                     f"({'met' if r['ok'] else 'not met'}: target >= 80%)")
        L.append("")
    unit = f" ({SIM_NOTE})" if sim else ""
    for c in results["cases"]:
        L += [f"## {c['key']}: {c.get('title', '')}", "",
              f"shape {c['shape']}; minimum traffic {c['min_bytes']['total'] / 1e6:.2f} MB"
              + ("; irregular shape" if c.get("irregular") else "") + ("; large" if c.get("large") else "")
              + (f"; {c['notes']}" if c.get("notes") else ""), "",
              f"| run | kernels | GPU time us{unit} | end-to-end us | GB/s | % of copy | speedup vs xla | valid "
              "(rel err) |", "|---|---|---|---|---|---|---|---|"]
        for r in c["runs"]:
            if r.get("skipped"):
                L.append(f"| {r['name']} | - | skipped: {r['skipped']} | | | | | |")
                continue
            if r.get("error"):
                L.append(f"| {r['name']} | - | error: {r['error'][:120]} | | | | | |")
                continue
            v = r.get("validation") or {}
            nk = len(r["kernels"]) if r.get("kernels") else "-"
            label = r["name"] + (f" ({r['device']})" if r.get("device") == "cpu" else "")
            L.append(f"| {label} | {nk} | {_f(r.get('gpu_us'))} | {_f(r.get('e2e_us'))} "
                     f"| {_f(r.get('bandwidth_gbs'))} | {_f(r.get('pct_of_copy'), '{:.0f}%')} "
                     f"| {_f(r.get('speedup_vs_xla'), '{:.2f}x')} "
                     f"| {'yes' if v.get('ok') else 'NO'} ({_f(v.get('max_rel_l2'), '{:.1e}')}) |")
        L.append("")
    L += ["GPU time: CUDA events, kernels queued back to back (host launch cost excluded); end-to-end: host wall "
          "clock from the first launch to synchronize (launch overhead included). JAX GPU time is pipelined "
          "(no event API). See benchmarks/README.md."]
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def write_plot(results: dict, path: str) -> Optional[str]:
    """Speedup over our xla plan and % of copy bandwidth, per case and run. Returns why not, if skipped."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: plot.png skipped"
    if results.get("mode") == "simulator":
        return f"plot.png skipped: {SIM_NOTE} (no speedups or bandwidths to draw)"
    cases = [c for c in results["cases"] if any(r.get("gpu_us") for r in c["runs"])]
    if not cases:
        return "no timed runs: plot.png skipped"
    names = []
    for c in cases:
        for r in c["runs"]:
            if r.get("gpu_us") and r["name"] not in names:
                names.append(r["name"])
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.1 * len(cases) + 3), 9), sharex=True)
    width = 0.8 / max(1, len(names))
    for j, n in enumerate(names):
        xs, sp, bw = [], [], []
        for i, c in enumerate(cases):
            r = next((r for r in c["runs"] if r["name"] == n and r.get("gpu_us")), None)
            if r is None:
                continue
            xs.append(i + (j - (len(names) - 1) / 2) * width)
            sp.append(r.get("speedup_vs_xla") or 0)
            bw.append(r.get("pct_of_copy") or 0)
        axes[0].bar(xs, sp, width, label=n)
        axes[1].bar(xs, bw, width, label=n)
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("speedup vs our xla plan (GPU time)")
    axes[1].axhline(80, color="r", lw=0.8, ls="--")
    axes[1].set_ylabel("% of device copy bandwidth")
    axes[1].set_xticks(range(len(cases)))
    axes[1].set_xticklabels([c["key"] for c in cases], rotation=35, ha="right", fontsize=8)
    axes[0].legend(fontsize=8, ncol=4)
    prov = results["provenance"]
    title = f"gpu_bench on {prov.get('device')} ({str(prov.get('date'))[:10]}, {results['gpu_preset']} plans)"
    if results.get("mode") == "synthetic":
        title = "SYNTHETIC (not measured) -- " + title
    fig.suptitle(title, color="red" if results.get("mode") != "gpu" else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_outputs(results: dict, out_dir: str, plot: bool = True) -> None:
    os.makedirs(out_dir, exist_ok=True)
    results["summary"] = summarize(results)
    tmp = os.path.join(out_dir, "results.json.tmp")
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1, default=_json_default)
    os.replace(tmp, os.path.join(out_dir, "results.json"))
    write_markdown(results, os.path.join(out_dir, "results.md"))
    if plot:
        why = write_plot(results, os.path.join(out_dir, "plot.png"))
        results["plot"] = why or "plot.png"
        with open(os.path.join(out_dir, "results.json"), "w") as f:   # record whether there is a plot
            json.dump(results, f, indent=1, default=_json_default)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


# ---------------------------------------------------------------------------
# the suite
# ---------------------------------------------------------------------------

BASELINES = ("jax.jit", "torch.eager", "torch.native", "torch.compile")


def run_suite(out_dir: str, quick: bool = False, simulator: Optional[bool] = None, gpu_preset: Optional[str] = None,
              only=None, strategies=None, baselines=BASELINES, reps: Optional[int] = None,
              warmup: Optional[int] = None, seed: int = 0, commit: Optional[str] = None, plot: bool = True,
              argv: Optional[list] = None, copy_bytes: Optional[int] = None, apply_compiler: bool = False,
              copy: bool = True) -> dict:
    """The Python API of the command: runs the suite and writes results.json/md/png into ``out_dir``.

    ``apply_compiler``: measure each plan after ``gpu_backend.apply_compiler`` (ptxas-checked register caps:
    what AStitch ships; :mod:`benchmarks.applied_plans`).  ``copy=False`` skips the copy-bandwidth
    measurement (the runbook measures it in its own step)."""
    from benchmarks.suite import select
    cases = select(only)            # a typo in --only fails here, before the GPU is touched
    mode = choose_mode(simulator)
    import astitch_sim as asim
    sim = mode == "simulator"
    shapes = "sim" if sim else ("quick" if quick else "full")
    reps = reps or (1 if sim else (10 if quick else 20))
    warmup = warmup if warmup is not None else (0 if sim else 3)
    if not sim and reps < 20 and not quick:
        log(f"note: --reps {reps} is below the 20 the method asks for")
    prov = provenance(mode, argv if argv is not None else sys.argv, commit)
    if gpu_preset is None:
        gpu_preset = "H100" if sim else detect_preset(prov["device"])
        if gpu_preset is None:
            raise SystemExit(f"cannot tell the preset of {prov['device']!r}: pass --gpu-preset "
                             f"({', '.join(asim.hardware.gpus.GPUS)})")
    hw = asim.gpu(gpu_preset)
    if not sim and prov.get("sms") and prov["sms"] != hw.sms:
        log(f"warning: the device has {prov['sms']} SMs, the {hw.name} preset {hw.sms}: plans are sized for the "
            "preset (grid barriers need every block resident: a smaller GPU may refuse a cooperative launch)")
    l2 = prov.get("l2_bytes") or hw.l2_bytes
    clock = Clock(sim, l2, reps, warmup, clock_ghz=hw.clock_ghz)
    settings = {"mode": mode, "shapes": shapes, "reps": reps, "warmup": warmup, "seed": seed,
                "gpu_preset": hw.name, "flush_bytes": clock.flush_bytes, "clock_ghz": hw.clock_ghz,
                "rel_tol": REL_TOL, "apply_compiler": bool(apply_compiler)}
    results = {"format": FORMAT, "mode": mode, "timing_note": SIM_NOTE if sim else "GPU timing",
               "gpu_preset": hw.name, "provenance": prov, "settings": settings, "cases": []}
    log(f"gpu_bench: {mode} mode, device {prov.get('device')}, preset {hw.name}, shapes {shapes}, reps {reps}")
    copy_bytes = copy_bytes or (2**14 if sim else (256 * 2**20 if quick else 2**30))
    if copy:
        log(f"device-to-device copy bandwidth ({copy_bytes / 2**20:.0f} MiB)")
        results["copy"] = clock.copy_bandwidth(copy_bytes)
        settings["copy_bandwidth_gbs"] = results["copy"]["bandwidth_gbs"]
        log(f"  copy {results['copy']['bandwidth_gbs']:.1f} GB/s" + (f" ({SIM_NOTE})" if sim else ""))
    strategies = list(strategies or asim.STRATEGIES)
    t_start = time.time()
    for i, case in enumerate(cases, 1):
        log(f"[{i}/{len(cases)}] {case.key} {case.shape_for(shapes)}")
        t0 = time.time()
        try:
            rec = run_case(case, shapes, settings, clock, strategies, list(baselines))
        except Exception as e:             # one broken case must not cost the others
            rec = {"key": case.key, "workload": case.workload, "shape": case.shape_for(shapes), "runs": [],
                   "min_bytes": {"inputs": 0, "outputs": 0, "total": 0},
                   "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}
            log(f"  case FAILED: {rec['error']}")
        rec["wall_s"] = time.time() - t0
        results["cases"].append(rec)
        settings["dropped_host_bound_reps"] = clock.dropped
        write_outputs(results, out_dir, plot=False)
    results["wall_s"] = time.time() - t_start
    write_outputs(results, out_dir, plot=plot)
    if plot and results.get("plot") != "plot.png":
        log(results["plot"])
    log(f"done in {results['wall_s']:.0f}s: {out_dir}/results.json, results.md"
        + (", plot.png" if results.get("plot") == "plot.png" else ""))
    return results


def print_table(results: dict) -> None:
    sim = results["mode"] == "simulator"
    print(f"{'case':<30} {'run':<14} {'GPU us':>10} {'e2e us':>10} {'GB/s':>8} {'%copy':>6} {'vs xla':>7} valid")
    for c in results["cases"]:
        for r in c["runs"]:
            if not r.get("gpu_us"):
                why = r.get("skipped") or r.get("error") or "-"
                print(f"{c['key']:<30} {r['name']:<14} {why[:60]}")
                continue
            v = (r.get("validation") or {}).get("ok")
            print(f"{c['key']:<30} {r['name']:<14} {r['gpu_us']:>10.1f} {_f(r.get('e2e_us')):>10} "
                  f"{_f(r.get('bandwidth_gbs')):>8} {_f(r.get('pct_of_copy'), '{:.0f}'):>6} "
                  f"{_f(r.get('speedup_vs_xla'), '{:.2f}x'):>7} {'yes' if v else 'NO'}")
    s = results.get("summary") or {}
    if sim:
        print(f"*** {SIM_NOTE}: these numbers say nothing about speed ***")
    else:
        geo = (s.get("headline") or {}).get("geomean_speedup") or {}
        for b, v in geo.items():
            print(f"astitch vs {b}: geomean speed-up {v:.2f}x over {s['headline']['cases'][b]} cases")
    if not sim and s.get("astitch_vs_xla_geomean"):
        print(f"astitch vs xla geomean {s['astitch_vs_xla_geomean']:.2f}x (target >= 1.5x)")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out", required=True, help="output folder (results.json, results.md, plot.png)")
    ap.add_argument("--quick", action="store_true", help="smaller shapes and 10 repetitions: a fast check")
    ap.add_argument("--simulator", action="store_true", default=None,
                    help="Numba's CUDA simulator at tiny shapes (automatic when no GPU is found)")
    ap.add_argument("--gpu-preset", help="preset the plans are compiled for (default: from the device name)")
    ap.add_argument("--only", nargs="+", help="case keys or workload names (default: the whole suite)")
    ap.add_argument("--part", metavar="K/N",
                    help="run only the K-th of N equal slices of the suite (e.g. 1/2 and 2/2 in two device calls "
                         "that each must end within 10 minutes; merge them with --render a.json b.json)")
    ap.add_argument("--strategies", nargs="+", help="default: unfused xla tvm astitch")
    ap.add_argument("--baselines", nargs="*", default=list(BASELINES),
                    help=f"default: {' '.join(BASELINES)}; give none to skip them")
    ap.add_argument("--reps", type=int, help="timed repetitions (default 20; 10 with --quick)")
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--commit", help="git commit to record (where the machine has no .git)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--apply-compiler", action=argparse.BooleanOptionalAction, default=False,
                    help="measure each plan after gpu_backend.apply_compiler (ptxas-checked register caps, what "
                         "AStitch ships); the runbook (benchmarks.gpu_session) turns it on")
    ap.add_argument("--render", metavar="RESULTS_JSON", nargs="+",
                    help="only re-render results.md / plot.png from results.json file(s) into --out "
                         "(several files: their cases are merged, first file's provenance kept)")
    a = ap.parse_args(argv)
    if a.render:
        results = merge_results(a.render)
        write_outputs(results, a.out, plot=not a.no_plot)
        print_table(results)
        return 0
    only = a.only
    if a.part:
        from benchmarks.suite import part
        only = [c.key for c in part(a.part, only)]
    results = run_suite(a.out, quick=a.quick, simulator=a.simulator, gpu_preset=a.gpu_preset, only=only,
                        strategies=a.strategies, baselines=a.baselines, reps=a.reps, warmup=a.warmup, seed=a.seed,
                        commit=a.commit, plot=not a.no_plot, argv=["-m", "benchmarks.gpu_bench"] + argv,
                        apply_compiler=a.apply_compiler)
    print_table(results)
    return 0


def merge_results(paths: list) -> dict:
    """Cases of several results.json (e.g. a suite split over two device calls) in one results dict."""
    merged = None
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        if merged is None:
            merged = r
            merged["merged_from"] = [p]
            continue
        if r.get("gpu_preset") != merged.get("gpu_preset") or r.get("mode") != merged.get("mode"):
            raise SystemExit(f"{p}: preset/mode differ from {paths[0]}; not merging")
        have = {c["key"] for c in merged["cases"]}
        merged["cases"] += [c for c in r["cases"] if c["key"] not in have]
        merged["merged_from"].append(p)
        merged.setdefault("provenance_merged", []).append(r.get("provenance"))
    return merged


if __name__ == "__main__":
    sys.exit(main())
