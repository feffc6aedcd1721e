"""Launching generated kernels in Numba's CUDA simulator, grid barriers included.

Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) runs a kernel one block after
another, each thread of the block a Python thread, and implements
``cuda.cg.this_grid().sync()`` as a *block* barrier -- correct only for a
one-block grid.  AStitch's Global stitching needs a real grid barrier across
several blocks, so this module launches kernels itself, reusing the
simulator's pieces (its fake ``cuda`` module, its device arrays, its device
functions) and changing two things:

1. **Cooperative kernels run all their blocks at once.**  Every thread of the
   grid is started together; ``this_grid().sync()`` waits for all of them, and
   ``cuda.syncthreads()`` for the threads of one block.  Each block has its own
   shared memory.  So the very code a GPU runs -- barriers, shared memory,
   atomics -- runs here, blocks interleaving as the Python scheduler decides.
   Other kernels run block by block, like Numba's simulator.
   A kernel whose code meets no barrier at all (no ``syncthreads``, no
   shuffle, no grid group: most elementwise kernels) runs its threads one
   after another in a single Python thread (:func:`meets_barrier`): with no
   barrier, no thread can wait for another, so the order is one the threaded
   run may also take, and starting a Python thread per CUDA thread (most of
   such a launch's time) buys nothing.
2. **Barriers are proper barriers** (a condition variable per block and one for
   the grid) instead of the simulator's polling loop, which is what makes a
   test suite of hundreds of launches fast enough (and the interpreter switches
   threads less often while they run: :data:`SWITCH_INTERVAL_S`).  A thread that returns while
   others wait at a barrier, or a barrier nobody completes within
   :data:`BARRIER_TIMEOUT_S`, is reported as an error (barrier divergence),
   never a hang.

What still differs from a GPU is listed in the ``gpu_backend`` package docstring
(scheduling, math functions, FMA, atomics order, the co-residency limit).
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

#: seconds a simulated barrier waits before it reports the kernel as stuck
BARRIER_TIMEOUT_S = 300.0
#: most threads one cooperative launch may start at once in the simulator (``ASTITCH_SIM_MAX_THREADS``)
MAX_CONCURRENT_THREADS = int(os.environ.get("ASTITCH_SIM_MAX_THREADS", "16384"))
_THREAD_STACK = 1 << 20
#: the interpreter's thread switch interval while simulated threads run (Python's default: 5 ms).  A simulated
#: thread makes progress until it blocks at a barrier, and the block moves on only when every thread got there;
#: taking the interpreter away from a thread every 5 ms in between only adds switches (about 25% of a
#: 1024-thread block's time with barriers)
SWITCH_INTERVAL_S = 0.05
#: threads per warp (a shuffle's partners)
WARP_SIZE = 32
_launch_lock = threading.Lock()


class BarrierError(RuntimeError):
    """Threads of a simulated kernel disagree about a barrier (or one thread failed)."""


class _Barrier:
    """A reusable barrier for ``parties`` threads that knows when it can never complete."""

    def __init__(self, parties: int, what: str):
        self.parties, self.what = parties, what
        self.cond = threading.Condition()
        self.waiting = 0
        self.generation = 0
        self.exited = 0
        self.broken: str | None = None

    def wait(self):
        with self.cond:
            if self.broken:
                raise BarrierError(self.broken)
            if self.exited:
                self.broken = (f"{self.what}: a thread reached the barrier after {self.exited} thread(s) had "
                               "returned without reaching it (barrier divergence)")
                self.cond.notify_all()
                raise BarrierError(self.broken)
            gen = self.generation
            self.waiting += 1
            if self.waiting == self.parties:
                self.waiting = 0
                self.generation += 1
                self.cond.notify_all()
                return
            ok = self.cond.wait_for(lambda: gen != self.generation or self.broken, timeout=BARRIER_TIMEOUT_S)
            if self.broken:
                raise BarrierError(self.broken)
            if not ok:
                self.broken = f"{self.what}: no progress for {BARRIER_TIMEOUT_S:.0f} s (a deadlock?)"
                self.cond.notify_all()
                raise BarrierError(self.broken)

    def thread_exited(self):
        with self.cond:
            self.exited += 1
            if self.waiting and not self.broken:
                self.broken = (f"{self.what}: a thread returned while {self.waiting} thread(s) wait at the "
                               "barrier (barrier divergence)")
                self.cond.notify_all()

    def abort(self, why: str):
        with self.cond:
            if not self.broken:
                self.broken = why
            self.cond.notify_all()


class _SimThread(threading.Thread):
    """One simulated CUDA thread: the attributes Numba's fake ``cuda`` module reads, and our barriers."""

    def __init__(self, fn, args, block_idx, thread_idx, block_dim, block_barrier, grid_barrier, shared,
                 warp=None):
        super().__init__(daemon=True)
        self.warp_barrier, self.warp_slots = warp if warp is not None else (None, None)
        from numba.cuda.simulator.kernelapi import Dim3
        self.fn, self.args = fn, args
        self.blockIdx = Dim3(block_idx, 0, 0)
        self.threadIdx = Dim3(thread_idx, 0, 0)
        self.thread_id = thread_idx
        self.block_barrier, self.grid_barrier, self.block_shared = block_barrier, grid_barrier, shared
        self.exception = None
        self.abort = False

    def run(self):
        try:
            with np.errstate(all="ignore"):      # numpy's error state is per thread: IEEE results, no warnings
                self.fn(*self.args)
        except BaseException as e:       # noqa: BLE001 - reported by the launcher
            self.exception = e
            msg = f"tid={self.threadIdx.x} ctaid={self.blockIdx.x}: {type(e).__name__}: {e}"
            for b in (self.block_barrier, self.grid_barrier, self.warp_barrier):
                if b is not None:
                    b.abort(msg)
        finally:
            for b in (self.block_barrier, self.grid_barrier, self.warp_barrier):
                if b is not None:
                    b.thread_exited()

    def syncthreads(self):
        self.block_barrier.wait()

    def shfl_xor(self, value, offset):
        """``shfl_xor_sync(FULL_MASK, value, offset)``: every lane posts its value, the warp meets, each lane
        reads lane ``laneid ^ offset``'s, the warp meets again (so the next shuffle cannot overwrite it early)."""
        lane = self.thread_id % WARP_SIZE
        self.warp_slots[lane] = value
        self.warp_barrier.wait()
        other = self.warp_slots[lane ^ int(offset)]
        self.warp_barrier.wait()
        return other

    def grid_sync(self):
        if self.grid_barrier is None:
            raise BarrierError("this_grid().sync() in a kernel launched without a cooperative launch: "
                               "the plan does not mark this kernel cooperative")
        self.grid_barrier.wait()

    # Numba's fake module implements these through the thread; keep them working
    def syncthreads_count(self, value):       # pragma: no cover - generated code does not use them
        raise NotImplementedError("syncthreads_count is not used by generated kernels")


def _fake_module(grid, block):
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    class _GridGroup:
        def sync(self):
            threading.current_thread().grid_sync()

    class _CG:
        def this_grid(self):
            return _GridGroup()

    class _Module(FakeCUDAModule):
        """Numba's fake ``cuda`` module, with per-block shared memory and a real grid group."""

        @property
        def shared(self):
            return threading.current_thread().block_shared

        @property
        def cg(self):
            return _CG()

    return _Module((grid, 1, 1), (block, 1, 1), 0)


#: names through which simulated code reaches a barrier or its warp (Numba's fake module and our intrinsics):
#: a kernel whose code, or a function it calls, names none of them cannot wait for another thread
BARRIER_NAMES = frozenset({"syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or", "syncwarp",
                           "shfl_xor", "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "cg",
                           "this_grid", "grid_sync", "laneid", "current_thread"})


def meets_barrier(fn) -> bool:
    """Whether ``fn`` (a kernel's Python function) or any function it reaches through its globals names a
    barrier, a shuffle or the grid group (:data:`BARRIER_NAMES`).  Conservative: a name is enough."""
    seen: set = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        f = getattr(f, "py_func", None) or getattr(f, "fn", None) or f   # a simulator device function's Python
        code = getattr(f, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        names: set = set()
        codes = [code]
        while codes:                                   # nested code: comprehensions, lambdas, inner functions
            c = codes.pop()
            names.update(c.co_names)
            codes.extend(k for k in c.co_consts if hasattr(k, "co_names"))
        if names & BARRIER_NAMES:
            return True
        g = getattr(f, "__globals__", {})
        todo.extend(v for n in names if callable(v := g.get(n)) and not isinstance(v, type))
    return False


def launch(dispatcher, grid: int, block: int, args, cooperative: bool) -> None:
    """Run ``dispatcher`` (a simulator ``@cuda.jit`` kernel) on ``grid`` x ``block`` threads."""
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray
    from numba.cuda.simulator.kernelapi import FakeCUDAShared, swapped_cuda_module

    fn = dispatcher.fn
    fake_args = [FakeWithinKernelCUDAArray(a) if isinstance(a, FakeCUDAArray) else a for a in args]
    module = _fake_module(grid, block)
    groups = [list(range(grid))] if cooperative else [[b] for b in range(grid)]
    with _launch_lock, simkernel._push_kernel_context(module), swapped_cuda_module(fn, module), \
            np.errstate(all="ignore"):
        old_stack, old_switch = threading.stack_size(), sys.getswitchinterval()
        try:
            threading.stack_size(_THREAD_STACK)
            if not cooperative and not meets_barrier(fn):
                _run_serially(fn, fake_args, grid, block, _locked_shared(FakeCUDAShared))
                return
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            for blocks in groups:
                _run_blocks(fn, fake_args, blocks, block, cooperative, _locked_shared(FakeCUDAShared))
        finally:
            threading.stack_size(old_stack)
            sys.setswitchinterval(old_switch)


def _locked_shared(base):
    """Numba's per-block shared memory with its first allocation under a lock.

    ``FakeCUDAShared.array`` finds a block's array by the calling line and allocates it on first
    use without a lock: two threads of a block arriving together could each allocate their own,
    and then not share memory (seen as a rare NaN in a row reduction read back from shared
    memory).  Here the look-up and the allocation are one step."""
    import traceback

    from numba.cuda.simulator.kernelapi import numpy_support, types

    class _Shared(base):
        def __init__(self, size):
            super().__init__(size)
            self._lock = threading.Lock()

        def array(self, shape, dtype, alignment=None):
            if shape == 0 or alignment is not None:
                return super().array(shape, dtype, alignment)
            if isinstance(dtype, types.Type):
                dtype = numpy_support.as_dtype(dtype)
            caller = traceback.extract_stack(sys._getframe(1), limit=1)[-1][0:2]
            with self._lock:
                if caller not in self._allocations:
                    self._allocations[caller] = np.empty(shape, dtype)
                return self._allocations[caller]
    return _Shared


class _SerialThreads(threading.Thread):
    """Every thread of a barrier-free launch, one after another in one Python thread: the attributes Numba's
    fake ``cuda`` module reads are those of the simulated thread running now."""

    def __init__(self, fn, args, grid, block, shared_cls):
        super().__init__(daemon=True)
        from numba.cuda.simulator.kernelapi import Dim3
        self._dim3 = Dim3
        self.fn, self.args, self.grid, self.block, self.shared_cls = fn, args, grid, block, shared_cls
        self.exception = None
        self.blockIdx = self.threadIdx = Dim3(0, 0, 0)
        self.thread_id = 0
        self.block_shared = None

    def run(self):
        Dim3, fn, args = self._dim3, self.fn, self.args
        with np.errstate(all="ignore"):
            for b in range(self.grid):
                self.blockIdx, self.block_shared = Dim3(b, 0, 0), self.shared_cls(0)
                for t in range(self.block):
                    self.threadIdx, self.thread_id = Dim3(t, 0, 0), t
                    try:
                        fn(*args)
                    except BaseException as e:      # noqa: BLE001 - reported by the launcher
                        self.exception = e
                        return

    def _no_barrier(self, *_):
        raise BarrierError("a kernel run without a Python thread per CUDA thread (its code names no barrier: "
                           "cudasim.meets_barrier) reached one; this is a bug in gpu_backend.launch.cudasim")
    syncthreads = shfl_xor = grid_sync = _no_barrier


def _run_serially(fn, args, grid, block, shared_cls):
    runner = _SerialThreads(fn, args, grid, block, shared_cls)
    runner.start()
    runner.join()
    if runner.exception is not None:
        _reraise(runner)


def _reraise(th):
    """Raise the exception simulated thread ``th`` met, noting which thread it was."""
    e = th.exception
    if hasattr(e, "add_note"):
        e.add_note(f"in simulated thread tid={th.threadIdx.x} ctaid={th.blockIdx.x}")
    raise e


def _run_blocks(fn, args, blocks, block, cooperative, shared_cls):
    grid_barrier = _Barrier(len(blocks) * block, "grid barrier") if cooperative else None
    barriers = [grid_barrier] if grid_barrier else []
    threads = []
    for b in blocks:
        bar = _Barrier(block, f"block {b}: cuda.syncthreads()")
        barriers.append(bar)
        shared = shared_cls(0)
        warps = [(_Barrier(min(WARP_SIZE, block - w), f"block {b} warp {w // WARP_SIZE}: shfl_xor_sync"),
                  [None] * WARP_SIZE) for w in range(0, block, WARP_SIZE)]
        barriers.extend(bar_ for bar_, _ in warps)
        for t in range(block):
            threads.append(_SimThread(fn, args, b, t, block, bar, grid_barrier, shared, warps[t // WARP_SIZE]))
    try:
        for th in threads:
            th.start()
    except BaseException:
        for bar in barriers:
            bar.abort("the simulator could not start every thread of the launch")
        raise
    finally:
        for th in threads:
            if th.ident is not None:
                th.join()
    failed = [th for th in threads if th.exception is not None]
    real = [th for th in failed if not isinstance(th.exception, BarrierError)]
    first = (real or failed or [None])[0]
    if first is not None:
        _reraise(first)
