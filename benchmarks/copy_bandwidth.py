"""What "% of copy bandwidth" is measured against: memcpy, a plain Numba copy and a 128-bit Numba copy.

The suite reports each run's bandwidth as a share of a device-to-device copy
measured on the same GPU.  Three copies, each reading and writing ``nbytes``
(bandwidth = bytes read + bytes written / GPU time, CUDA events, L2 flushed):

``memcpy``   ``cudaMemcpyDtoD``: the driver's own copy, the ceiling;
``scalar``   a grid-stride Numba kernel, one 4-byte load and store per element:
             what the generated kernels' access pattern (32-bit ``LDG.E``) can reach;
``vec128``   the same with one 16-byte load and store per 4 elements
             (``ld.global.v4.f32``, through :func:`ld4` / :func:`st4`): what wider
             accesses would buy, the codegen's headroom.

The gap between ``scalar`` and ``vec128`` says how much of a memory-bound plan's
distance from the copy is the load width alone.  In Numba's CUDA simulator the
intrinsics are plain Python (the simulator runs kernels as Python) and every
time is labelled as the simulator's.
"""
from __future__ import annotations

import numpy as np

_KERNELS: dict = {}


def _vector_access(simulator: bool):
    """(ld4, st4): 4 float32 at ``a[4*i .. 4*i+3]`` in one 128-bit access (Python in the simulator)."""
    if simulator:
        def ld4(a, i):
            return a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]

        def st4(a, i, x0, x1, x2, x3):
            a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3] = x0, x1, x2, x3
        return ld4, st4
    from llvmlite import ir
    from numba.cuda import types
    try:
        from numba.cuda.extending import intrinsic
    except ImportError:                       # older numba-cuda: Numba's own extension API
        from numba.core.extending import intrinsic
    v4 = ir.VectorType(ir.FloatType(), 4)

    def vector_pointer(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        i = builder.mul(context.cast(builder, args[1], sig.args[1], types.uint64), ir.Constant(ir.IntType(64), 4))
        ptr = builder.gep(ary.data, [i], inbounds=True)
        return builder.addrspacecast(builder.bitcast(ptr, v4.as_pointer()), ir.PointerType(v4, 1))

    @intrinsic
    def ld4(typingctx, arr, idx):
        sig = types.UniTuple(types.float32, 4)(arr, idx)

        def codegen(context, builder, sig, args):
            v = builder.load(vector_pointer(context, builder, sig, args), align=16)
            return context.make_tuple(builder, sig.return_type,
                                      [builder.extract_element(v, ir.Constant(ir.IntType(32), k)) for k in range(4)])
        return sig, codegen

    @intrinsic
    def st4(typingctx, arr, idx, x0, x1, x2, x3):
        sig = types.void(arr, idx, x0, x1, x2, x3)

        def codegen(context, builder, sig, args):
            v = ir.Constant(v4, ir.Undefined)
            for k in range(4):
                v = builder.insert_element(v, args[2 + k], ir.Constant(ir.IntType(32), k))
            builder.store(v, vector_pointer(context, builder, sig, args), align=16)
            return context.get_dummy_value()
        return sig, codegen
    return ld4, st4


def kernels(simulator: bool) -> dict:
    """``{"scalar": kernel(a, b), "vec128": kernel(a, b, n4)}`` (compiled once per process)."""
    if _KERNELS:
        return _KERNELS
    global cuda, ld4, st4             # module globals: the simulator swaps a kernel's global ``cuda``
    from numba import cuda
    ld4, st4 = _vector_access(simulator)

    @cuda.jit
    def scalar(a, b):
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        while i < a.size:
            b[i] = a[i]
            i += stride

    @cuda.jit
    def vec128(a, b, n4):
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        while i < n4:
            x0, x1, x2, x3 = ld4(a, i)
            st4(b, i, x0, x1, x2, x3)
            i += stride

    _KERNELS.update(scalar=scalar, vec128=vec128)
    return _KERNELS


def measure(clock, nbytes: int, sms: int = 132) -> dict:
    """The three copies of ``nbytes`` (a multiple of 16) timed by ``clock`` (a :class:`gpu_bench.Clock`)."""
    from numba import cuda
    sim = clock.simulator
    n = (nbytes // 16) * 4
    src = cuda.to_device(np.arange(n, dtype=np.float32))
    dst = cuda.device_array(n, dtype=np.float32)
    k = kernels(sim)
    grid, block = (1, 32) if sim else (4 * sms * 8, 256)
    copies = {"memcpy": lambda: dst.copy_to_device(src),
              "scalar": lambda: k["scalar"][grid, block](src, dst),
              "vec128": lambda: k["vec128"][grid, block](src, dst, n // 4)}
    out = {"bytes": 2 * n * 4, "method": "bytes read + written / GPU time (CUDA events, L2 flushed by reading)"}
    for name, f in copies.items():
        dst.copy_to_device(np.zeros(n, dtype=np.float32))
        t = clock.time_launches([f])
        out[f"{name}_us"] = t["gpu_us"]
        out[f"{name}_bandwidth_gbs"] = out["bytes"] / (t["gpu_us"] * 1e3) if t["gpu_us"] > 0 else None
        out[f"{name}_valid"] = bool(np.array_equal(dst.copy_to_host(), src.copy_to_host()))
    out["bandwidth_gbs"] = out["memcpy_bandwidth_gbs"]
    out["numba_copy_kernel_bandwidth_gbs"] = out["scalar_bandwidth_gbs"]
    return out


def vec128_ptx() -> str:
    """The 128-bit copy's PTX for sm_90 (no GPU needed; the real numba.cuda): it must hold ld.global.v4.f32."""
    from numba import cuda
    from numba.cuda import types
    k = kernels(False)
    ptx, _ = cuda.compile_ptx(k["vec128"].py_func, (types.float32[::1], types.float32[::1], types.int64), cc=(9, 0))
    return ptx


__all__ = ["kernels", "measure", "vec128_ptx"]
