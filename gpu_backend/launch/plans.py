"""``run(plan, inputs)``: compile the generated source once per plan, allocate, launch, copy back;
``prepare(plan, inputs)``: allocate once, then ``launch()`` as often as wanted and ``outputs()``.

The runtime decides nothing either: buffers are the ones the generated kernels
ask for (``KernelSpec.params``), kernels launch in plan order with the plan's
``(grid, block)``, a kernel with a grid barrier launches cooperatively -- and
only if its grid fits the blocks the device can keep resident at once, else
an :class:`~astitch_sim.AStitchError` (never a hang).
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import types
from typing import Callable, Optional

import numpy as np

from astitch_sim.ir.dtypes import bf16_bits_to_f32, cast
from astitch_sim.errors import AStitchError
from astitch_sim.plan.plan import Plan
from astitch_sim.ir.reference import bind_inputs

from ..codegen.module import ModuleWriter
from ..codegen.specs import GeneratedModule

_CACHE: dict[str, "CompiledPlan"] = {}
_CACHE_LOCK = threading.Lock()


def simulator() -> bool:
    """Is Numba's CUDA simulator active (``NUMBA_ENABLE_CUDASIM=1`` when numba.cuda was imported)?"""
    from ..numba_compat import cudasim_enabled
    return cudasim_enabled()


def plan_key(plan: Plan, probe: bool = False) -> str:
    return hashlib.sha256(plan.to_json(indent=None).encode()).hexdigest()[:16] + ("_probe" if probe else "")


def source_dir() -> str:
    """Where generated modules are written (``ASTITCH_GPU_CACHE``, default a folder in the temp dir)."""
    d = os.environ.get("ASTITCH_GPU_CACHE") or os.path.join(tempfile.gettempdir(), "astitch_gpu_backend")
    os.makedirs(d, exist_ok=True)
    return d


class CompiledPlan:
    """The generated module of one plan, imported: its source, kernels and their specs."""

    def __init__(self, plan: Plan, generated: GeneratedModule, key: str):
        self.plan, self.generated, self.key = plan, generated, key
        digest = hashlib.sha256(generated.source.encode()).hexdigest()[:8]
        name = f"astitch_kernels_{key}_{digest}"
        # a real file, so tracebacks, linecache and Numba's error messages show the generated lines
        self.path = os.path.join(source_dir(), f"{name}.py")
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(generated.source)
        os.replace(tmp, self.path)
        module = types.ModuleType(name)
        module.__file__ = self.path
        sys.modules[name] = module
        exec(compile(generated.source, self.path, "exec"), module.__dict__)     # no stale .pyc
        self.module = module
        self.functions = [getattr(module, k.func) for k in generated.kernels]

    @property
    def source(self) -> str:
        return self.generated.source


def compile_plan(plan: Plan, probe: bool = False) -> CompiledPlan:
    """Generate and import the kernels of ``plan`` (cached by the hash of ``plan.to_json()``)."""
    if not isinstance(plan, Plan):
        raise AStitchError(f"gpu_backend needs a Plan (from asim.compile), got {type(plan).__name__}")
    key = plan_key(plan, probe)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is None:
            hit = CompiledPlan(plan, ModuleWriter(plan, probe=probe).write(), key)
            _CACHE[key] = hit
        return hit


# -- host <-> device formats -----------------------------------------------------------

def to_storage(value: np.ndarray, dtype: str, storage: np.dtype) -> np.ndarray:
    """A host array (numpy holder of XLA ``dtype``) in the layout the kernels read: flat, row-major."""
    a = np.asarray(value)
    if dtype == "bf16":
        a = np.ascontiguousarray(a, dtype=np.float32)
        return (a.view(np.uint32) >> 16).astype(np.uint16).ravel()
    return np.ascontiguousarray(a, dtype=storage).ravel()


def from_storage(a: np.ndarray, dtype: str, shape) -> np.ndarray:
    if dtype == "bf16":
        a = bf16_bits_to_f32(a)
    return np.array(a, copy=True).reshape(shape)


def cooperative_limit(fn, spec, args, plan: Plan) -> tuple[int, str]:
    """How many blocks of this kernel can be co-resident (a cooperative grid's limit), and who says so."""
    if simulator():
        from .cudasim import MAX_CONCURRENT_THREADS
        wave = plan.gpu.blocks_per_wave(spec.block, spec.shared_bytes,
                                        plan.kernels[spec.index].registers_per_thread)
        limit = min(wave, max(1, MAX_CONCURRENT_THREADS // spec.block))
        why = (f"{plan.gpu.name} preset: {wave} blocks per wave" +
               (f"; the simulator starts at most {MAX_CONCURRENT_THREADS} threads at once"
                if limit < wave else ""))
        return limit, why
    kern = fn.compile(tuple(fn.typeof_pyval(a) for a in args))
    if not getattr(kern, "cooperative", True):
        raise AStitchError(f"kernel {spec.name}: the plan marks it cooperative but Numba compiled no grid "
                           "barrier into it (generator bug)")
    return kern.max_cooperative_grid_blocks(spec.block), "Numba max_cooperative_grid_blocks on this device"


class PreparedPlan:
    """A plan's kernels bound to device buffers: allocate and upload once, then launch as often as wanted.

    Made by :func:`prepare`.  The buffers are the ones the generated kernels ask for
    (``KernelSpec.params``): inputs and array constants uploaded once, outputs, Global
    scratch, split-reduction partials, probe arrays; a split reduction's atomic result
    buffer gets a device-side copy of its init value, copied back into it before every
    launch of its kernel.  ``kernels`` lists the :class:`KernelSpec` of each plan kernel.
    """

    def __init__(self, plan: Plan, inputs, probe: bool = False):
        if not isinstance(plan, Plan):
            raise AStitchError(f"gpu_backend.run needs a Plan (from asim.compile), got {type(plan).__name__}")
        plan.validate()              # the same rules simulate() enforces: launch shapes, barriers, no empty domain
        graph = plan.graph
        self.plan, self.host = plan, bind_inputs(graph, inputs)
        try:
            from numba import cuda
        except ImportError as e:
            raise AStitchError(f"gpu_backend.run needs numba and numba-cuda ({e}): pip install 'astitch-sim[gpu]'") \
                from None
        self.cuda = cuda
        compiled = compile_plan(plan, probe)
        self.sim = simulator()
        if not self.sim and not cuda.is_available():
            raise AStitchError("gpu_backend.run: no CUDA GPU is available; set NUMBA_ENABLE_CUDASIM=1 before "
                               "numba.cuda is imported to run the kernels in Numba's CUDA simulator")
        self.kernels = list(compiled.generated.kernels)
        self.device: dict[str, object] = {}     # node -> its device array (inputs, constants, outputs)
        self.probe_arrays: dict = {}            # (kernel index, node) -> probe array
        self._launches = [self._bind(spec, fn) for spec, fn in zip(self.kernels, compiled.functions)]

    def host_value(self, name):
        node = self.plan.graph[name]
        if name in self.host:
            return self.host[name]
        if node.op == "constant":
            return cast(np.broadcast_to(node.attrs["value"], node.shape), node.dtype)
        raise AStitchError(f"gpu_backend.run: {name} is read before any kernel computes it")

    def init_value(self, reduce_name):
        init = self.plan.graph[reduce_name].operands[1]
        if init.op == "constant" or init.name in self.host:
            return np.asarray(self.host_value(init.name)).reshape(()).item()
        raise AStitchError(f"gpu_backend.run: the init value of split reduce {reduce_name} is computed "
                           f"({init.name}); the atomic combine needs it before the launch")

    def _bind(self, spec, fn):
        """Allocate (or reuse) the arrays of one kernel; return the callable that refills and enqueues it."""
        cuda, device = self.cuda, self.device
        args, refills = [], []
        for p in spec.params:
            if p.role == "input":
                if p.node not in device:
                    device[p.node] = cuda.to_device(to_storage(self.host_value(p.node), p.dtype, p.storage))
                args.append(device[p.node])
                continue
            if p.role == "probe":
                arr = cuda.to_device(np.full(max(1, int(np.prod(p.shape))), -1, dtype=p.storage))
                self.probe_arrays[(spec.index, p.node)] = arr
                args.append(arr)
                continue
            if p.role == "partials":
                args.append(cuda.device_array(int(np.prod(p.shape)), dtype=p.storage))
                continue
            if p.fill_from:
                fill = cuda.to_device(to_storage(np.full(p.shape, self.init_value(p.fill_from)), p.dtype,
                                                 p.storage))
                arr = cuda.device_array_like(fill)
                refills.append((arr, fill))
            else:
                arr = cuda.device_array(max(1, int(np.prod(p.shape))), dtype=p.storage)
            if p.role == "output":
                device[p.node] = arr
            args.append(arr)
        if spec.cooperative:
            limit, why = cooperative_limit(fn, spec, args, self.plan)
            if spec.grid > limit:
                raise AStitchError(
                    f"kernel {spec.name} has a grid barrier and launches {spec.grid} blocks of {spec.block} "
                    f"threads, but only {limit} can be resident at once ({why}): a cooperative launch would "
                    "fail or deadlock. Recompile the plan for this device or cap the grid (vertical packing)")
        grid, block, coop = spec.grid, spec.block, spec.cooperative
        if self.sim:
            from .cudasim import launch

            def enqueue():
                launch(fn, grid, block, args, coop)
        else:
            configured = fn[grid, block]

            def enqueue():
                configured(*args)

        def go():
            for arr, fill in refills:
                arr.copy_to_device(fill)     # device-to-device, async on the default stream
            enqueue()
        return go

    def launch_kernel(self, i: int):
        """Enqueue plan kernel ``i`` (after refilling its atomic result buffers); no synchronisation."""
        self._launches[i]()

    def launch(self, after_kernel: Optional[Callable[[int], None]] = None):
        """Enqueue every kernel in plan order; ``after_kernel(i)``, if given, runs after kernel ``i`` is
        enqueued (e.g. to record a CUDA event).  No host copies, no synchronisation."""
        for i, go in enumerate(self._launches):
            go()
            if after_kernel is not None:
                after_kernel(i)

    def outputs(self) -> list:
        """Wait for the kernels, copy the outputs back (graph output order)."""
        if not self.sim:
            self.cuda.synchronize()
        results = []
        for o in self.plan.graph.outputs:
            if o.name in self.device:
                raw = self.device[o.name].copy_to_host().reshape(-1)[:o.size]
                results.append(from_storage(raw, o.dtype, o.shape))
            else:
                results.append(np.array(self.host_value(o.name), copy=True).reshape(o.shape))
        return results

    def probes(self) -> dict:
        """``{(kernel index, node): array}`` of a ``probe=True`` preparation (see :func:`execute`)."""
        return {k: v.copy_to_host() for k, v in self.probe_arrays.items()}

    def release(self):
        """Drop the device buffers now (Numba frees them once nothing refers to them)."""
        self.device.clear()
        self.probe_arrays.clear()
        self._launches = []


def prepare(plan: Plan, inputs, probe: bool = False) -> PreparedPlan:
    """Compile ``plan``, allocate its device buffers and upload ``inputs``, once: a :class:`PreparedPlan`.

    ``prepared.launch()`` runs the kernels (as often as wanted, on the same buffers),
    ``prepared.outputs()`` copies the results back.  ``inputs`` as for :func:`run`.
    """
    return PreparedPlan(plan, inputs, probe)


def run(plan: Plan, inputs) -> list:
    """Run ``plan`` on ``inputs`` with its generated Numba-CUDA kernels; outputs in graph output order.

    ``inputs``: a sequence in parameter order or a ``{name: array}`` dict, checked
    like :func:`astitch_sim.reference` checks them.  Works on a real GPU or in
    Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before ``numba.cuda`` is
    imported); see ``gpu_backend`` for what differs between the two.
    ``run`` is :func:`prepare` + ``launch()`` + ``outputs()``.
    """
    return execute(plan, inputs)[0]


def execute(plan: Plan, inputs, probe: bool = False):
    """:func:`run`, returning ``(outputs, probes)``; ``probe=True`` (a testing aid) also records, for every
    element a kernel stores to an output, the ``(block, thread, iteration)`` that stored it:
    ``probes[(kernel index, node)] = (block * block_size + thread) * iterations + iteration``."""
    prepared = prepare(plan, inputs, probe)
    prepared.launch()
    return prepared.outputs(), prepared.probes()
