"""Every low-level Numba-CUDA construct the generated kernels use, in one module.

numba-cuda is in maintenance mode: what the code generator needs beyond plain Python
(casts whose width matters to the machine code, ``@intrinsic`` functions that emit
LLVM IR directly, warp-level calls) lives here and only here, so that a change in
numba-cuda touches one file.  Each name has a simulator twin with the same meaning
(Numba's CUDA simulator runs the kernels as Python), chosen when this module is
imported, as :mod:`gpu_backend.prelude` does for ``math``.

``u32(x)``: an index variable of a kernel whose plan says ``index_bits=32``.  On a GPU
it is the truncating cast to ``uint32``: the variable is then visibly a zero-extended
32-bit value wherever Numba widens it to ``int64``, so LLVM proves it non-negative and
turns Python's floor ``//`` and ``%`` into unsigned 32-bit division by a constant (a
multiply-high and a shift) -- literals stay plain ``int`` and mixed arithmetic stays
signed 64-bit, so an expression that may go negative (a pad's ``d0 - 2``) keeps its
meaning.  The planner chooses 32 bits only where every index fits
(``astitch_sim/plan/index_bits.py``).  In the simulator ``u32`` is ``int``: exact integers,
which is what the GPU computes for values that fit.

``ldg(a, i)`` / ``stg(a, i, v)``: one element of a global array, by pointer arithmetic.
``a[i]`` in Numba checks ``i < 0`` and wraps it (Python's negative indexing: a compare,
a select and a 64-bit add per access); the generated kernels only form indices inside
the tensor, so they address ``a.data + i`` directly, through the ``global`` address
space (``LDG``/``STG``, not the generic ``LD``/``ST``).

``ldg4(a, i)`` -> the tuple ``a[i:i+4]`` with one vector load (``ld.global.v4``, 128 bits
for float32), ``stg4(a, i, x0, x1, x2, x3)`` the matching store; 2 and 8 likewise.
The plan's ``ThreadMapping.vector`` says where: ``i`` is a multiple of the width and
the array's base is aligned (device allocations are 256-byte aligned), which the
load's ``align`` promises LLVM.  Any dtype whose register type is its memory type
(floats, float16, integers; bool is not: the planner keeps pred scalar).

``shfl_xor(value, offset)``: lane ``laneid ^ offset``'s ``value``, every lane of the warp
taking part (``cuda.shfl_xor_sync`` with the full mask) -- the step of a shuffle reduction
(``astitch_sim/plan/reduce_scheme.py``).  Numba shuffles 32- and 64-bit signed integers and
floats only; ``gpu_backend.codegen.dtypes.SHUFFLE_AS`` says which type the generated code shuffles
any other register type as (bit-preserving casts there and back).  Numba's CUDA simulator has no
warp shuffles: the twin exchanges the value through the warp's slots in
:mod:`gpu_backend.launch.cudasim` (a warp barrier before and after the read), so a shuffle that
not every lane of the warp reaches is reported there as a stuck barrier.
"""
from __future__ import annotations

import threading

from numpy import uint32

from .numba_compat import cudasim_enabled

#: vector widths (elements) with a load and a store here
WIDTHS = (2, 4, 8)


def _simulator_twins() -> dict:
    """Plain-Python meanings of the access intrinsics (the CUDA simulator runs kernels as Python)."""
    def ldg(a, i):
        return a[i]

    def stg(a, i, v):
        a[i] = v

    twins = {"ldg": ldg, "stg": stg}
    for w in WIDTHS:
        def load(a, i, w=w):
            return tuple(a[i + k] for k in range(w))

        def store(a, i, *vals, w=w):
            if len(vals) != w:
                raise TypeError(f"stg{w} takes {w} values, got {len(vals)}")
            for k, v in enumerate(vals):
                a[i + k] = v
        twins[f"ldg{w}"], twins[f"stg{w}"] = load, store
    return twins


def _device_intrinsics() -> dict:
    """The same names as Numba ``@intrinsic`` functions emitting the global loads and stores."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def address(context, builder, arrty, arr, idxty, idx, elem):
        """``a.data + i`` in the global address space, as a pointer to ``elem``."""
        ary = context.make_array(arrty)(context, builder, arr)
        i = context.cast(builder, idx, idxty, types.intp)
        ptr = builder.gep(ary.data, [i], inbounds=True)
        return builder.addrspacecast(builder.bitcast(ptr, elem.as_pointer()), ir.PointerType(elem, 1))

    @intrinsic
    def ldg(typingctx, arr, idx):
        sig = arr.dtype(arr, idx)

        def codegen(context, builder, sig, args):
            elem = context.get_data_type(sig.args[0].dtype)
            ptr = address(context, builder, sig.args[0], args[0], sig.args[1], args[1], elem)
            return context.unpack_value(builder, sig.args[0].dtype, ptr)
        return sig, codegen

    @intrinsic
    def stg(typingctx, arr, idx, val):
        sig = types.void(arr, idx, val)

        def codegen(context, builder, sig, args):
            dt = sig.args[0].dtype
            ptr = address(context, builder, sig.args[0], args[0], sig.args[1], args[1], context.get_data_type(dt))
            context.pack_value(builder, dt, context.cast(builder, args[2], sig.args[2], dt), ptr)
            return context.get_dummy_value()
        return sig, codegen

    def vector_load(w):
        @intrinsic
        def load(typingctx, arr, idx):
            sig = types.UniTuple(arr.dtype, w)(arr, idx)

            def codegen(context, builder, sig, args):
                dt = sig.args[0].dtype
                vt = ir.VectorType(context.get_data_type(dt), w)
                ptr = address(context, builder, sig.args[0], args[0], sig.args[1], args[1], vt)
                v = builder.load(ptr, align=w * context.get_abi_sizeof(context.get_data_type(dt)))
                return context.make_tuple(builder, sig.return_type,
                                          [builder.extract_element(v, ir.Constant(ir.IntType(32), k))
                                           for k in range(w)])
            return sig, codegen
        return load

    def vector_store(w):
        def typer(typingctx, arr, idx, *vals):
            sig = types.void(arr, idx, *vals)

            def codegen(context, builder, sig, args):
                dt = sig.args[0].dtype
                elem = context.get_data_type(dt)
                vt = ir.VectorType(elem, w)
                ptr = address(context, builder, sig.args[0], args[0], sig.args[1], args[1], vt)
                v = ir.Constant(vt, ir.Undefined)
                for k in range(w):
                    x = context.cast(builder, args[2 + k], sig.args[2 + k], dt)
                    v = builder.insert_element(v, x, ir.Constant(ir.IntType(32), k))
                builder.store(v, ptr, align=w * context.get_abi_sizeof(elem))
                return context.get_dummy_value()
            return sig, codegen
        names = ", ".join(f"x{k}" for k in range(w))
        scope = {"typer": typer}
        exec(f"def store(typingctx, arr, idx, {names}):\n    return typer(typingctx, arr, idx, {names})", scope)
        return intrinsic(scope["store"])

    out = {"ldg": ldg, "stg": stg}
    for w in WIDTHS:
        out[f"ldg{w}"], out[f"stg{w}"] = vector_load(w), vector_store(w)
    return out


_SIM = cudasim_enabled()

#: the generated kernels' index cast for ``index_bits=32`` (the module docstring says why)
u32 = int if _SIM else uint32

_ACCESS = _simulator_twins() if _SIM else _device_intrinsics()
ldg, stg = _ACCESS["ldg"], _ACCESS["stg"]
ldg2, stg2 = _ACCESS["ldg2"], _ACCESS["stg2"]
ldg4, stg4 = _ACCESS["ldg4"], _ACCESS["stg4"]
ldg8, stg8 = _ACCESS["ldg8"], _ACCESS["stg8"]

#: every lane of a warp takes part in a shuffle
FULL_MASK = 0xFFFFFFFF


def _shfl_xor_sim(value, offset):
    """The simulator's shuffle: through the calling thread's warp slots (``cudasim._SimThread.shfl_xor``)."""
    return threading.current_thread().shfl_xor(value, offset)


if _SIM:
    shfl_xor = _shfl_xor_sim
else:
    from numba import cuda

    @cuda.jit(device=True)
    def shfl_xor(value, offset):
        return cuda.shfl_xor_sync(FULL_MASK, value, offset)
