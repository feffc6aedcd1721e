"""What the GPU machine has, checked before anything is measured: the runbook's first step.

A lent machine is a bare image of unknown versions; an hour of planning is
wasted if numba-cuda cannot find NVVM there.  :func:`probe` records, each as
``{"ok", "seconds", ...}`` or ``{"ok": False, "error"}`` so one failure never
hides the others:

``smi``         nvidia-smi: name, driver, memory, clocks (when present);
``versions``    Python and the packages that matter (numba, numba-cuda, jax, torch ...);
``toolchain``   where ptxas, NVVM, libdevice, the device runtime and nvdisasm were
                found (:func:`gpu_backend.machine.toolchain.where`), whether ``CUDA_HOME`` had to be
                named for numba-cuda, and what numba-cuda itself loads for NVVM / libdevice;
``plain``       a grid-stride kernel compiled and run, its result checked;
``grid_sync``   a cooperative kernel with a grid barrier (what a stitched plan needs):
                every block writes, the grid syncs, every block reads a neighbour's value;
``events``      CUDA events around a kernel: a positive elapsed time (the clock of every
                GPU time in the results).

In Numba's CUDA simulator the same checks run (the kernels as Python) and the
record says so; nothing about the GPU is learned there.
"""
from __future__ import annotations

import os
import platform
import time

import numpy as np

VERSIONS = ("numpy", "scipy", "numba", "numba-cuda", "llvmlite", "cuda-python", "cuda-bindings", "cuda-pathfinder",
            "jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "torch", "triton", "cupy-cuda13x", "matplotlib")


def _step(fn) -> dict:
    t0 = time.perf_counter()
    try:
        rec = fn()
        rec.setdefault("ok", True)
    except Exception as e:          # noqa: BLE001 - a probe reports every failure and carries on
        rec = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {"python": platform.python_version()}
    for d in VERSIONS:
        try:
            out[d] = version(d)
        except PackageNotFoundError:
            out[d] = None
    return out


def _toolchain(cuda_home_named) -> dict:
    from gpu_backend.machine import toolchain
    rec = {"where": toolchain.where(), "CUDA_HOME": os.environ.get("CUDA_HOME"),
           "cuda_home_named_by_runbook": cuda_home_named, "apply_compiler_available": toolchain.available()}
    if not rec["apply_compiler_available"]:
        rec["apply_compiler_missing"] = toolchain.missing_reason()
    try:                                # what numba-cuda itself will use (absent in the simulator)
        from numba.cuda.cudadrv import libs, nvvm
        rec["numba_nvvm_version"] = ".".join(map(str, nvvm.NVVM().get_version()))
        rec["numba_libdevice"] = libs.get_libdevice()
    except Exception as e:              # noqa: BLE001
        rec["numba_nvvm_error"] = f"{type(e).__name__}: {e}"
    return rec


def _plain(simulator: bool) -> dict:
    global cuda                  # a module global: the simulator swaps a kernel's global ``cuda``
    from numba import cuda

    @cuda.jit
    def add_one(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] += 1.0
    blocks, threads = (2, 32) if simulator else (16, 256)    # the simulator runs each thread in Python
    x = np.arange(blocks * threads, dtype=np.float32)
    d = cuda.to_device(x)
    add_one[blocks, threads](d)
    ok = bool(np.array_equal(d.copy_to_host(), x + 1))
    return {"ok": ok, "detail": f"a[i] += 1 over {x.size} elements" + ("" if ok else ": WRONG RESULT")}


def _grid_sync(simulator: bool) -> dict:
    global cuda                  # a module global: the simulator swaps a kernel's global ``cuda``
    from numba import cuda

    @cuda.jit
    def neighbour(a, out):
        g = cuda.cg.this_grid()
        i = cuda.grid(1)
        a[i] = i
        g.sync()
        out[i] = a[(i + 32) % a.size]
    # the simulator runs blocks one after another: its grid sync only orders one block's threads
    blocks, threads = (1, 64) if simulator else (132, 256)
    n = blocks * threads
    a, out = cuda.device_array(n, np.int32), cuda.device_array(n, np.int32)
    neighbour[blocks, threads](a, out)
    want = (np.arange(n) + 32) % n
    ok = bool(np.array_equal(out.copy_to_host(), want))
    rec = {"ok": ok, "grid": blocks, "block": threads,
           "detail": "every thread reads another warp's (or block's) write after grid.sync()" + ("" if ok else ": WRONG")}
    if not simulator:
        k = next(iter(neighbour.overloads.values()))
        rec["max_cooperative_grid_blocks"] = int(k.max_cooperative_grid_blocks(threads))
    return rec


def _events(simulator: bool) -> dict:
    global cuda                  # a module global: the simulator swaps a kernel's global ``cuda``
    from numba import cuda

    @cuda.jit
    def spin(a, n):
        i = cuda.grid(1)
        if i < a.size:
            v = a[i]
            for _ in range(n):
                v = v * 0.999 + 0.001
            a[i] = v
    blocks, threads = (1, 32) if simulator else (256, 256)
    d = cuda.to_device(np.ones(blocks * threads, dtype=np.float32))
    e0, e1 = cuda.event(), cuda.event()
    e0.record()
    spin[blocks, threads](d, 10 if simulator else 2000)
    e1.record()
    e1.synchronize()
    ms = e0.elapsed_time(e1)
    if simulator:
        return {"ok": True, "elapsed_ms": ms, "detail": "CUDA simulator: events are fakes (no time)"}
    return {"ok": ms > 0, "elapsed_ms": ms}


def probe(simulator: bool, cuda_home_named=None, smi: dict = None) -> dict:
    """Every check above; never raises."""
    return {"simulator": simulator, "smi": smi or {}, "versions": _versions(),
            "toolchain": _step(lambda: _toolchain(cuda_home_named)), "plain": _step(lambda: _plain(simulator)),
            "grid_sync": _step(lambda: _grid_sync(simulator)), "events": _step(lambda: _events(simulator))}


def summary_lines(p: dict) -> list:
    """One line per check for the session report."""
    lines = []
    for key in ("toolchain", "plain", "grid_sync", "events"):
        r = p.get(key) or {}
        lines.append(f"- {key}: {'ok' if r.get('ok') else 'FAILED'}"
                     + (f" ({r['error']})" if r.get("error") else f" ({r['detail']})" if r.get("detail") else ""))
    tc = (p.get("toolchain") or {}).get("where") or {}
    lines.append("- toolchain files: " + ", ".join(f"{k} {v or 'not found'}" for k, v in tc.items()))
    v = p.get("versions") or {}
    lines.append("- versions: " + ", ".join(f"{k} {x}" for k, x in v.items() if x))
    return lines


__all__ = ["probe", "summary_lines", "VERSIONS"]
