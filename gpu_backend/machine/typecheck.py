"""Compile generated kernels with Numba-CUDA's real compiler -- no GPU needed.

The CUDA simulator runs kernels as Python, so it cannot tell whether Numba's
*compiler* accepts them (type inference: a variable that is float32 on one
path and float64 on another, an unsupported call...).  :func:`check_plan`
runs the real pipeline -- type inference and lowering to NVVM IR for a given
compute capability -- on every kernel of a plan, without a driver: the
compiler only asks the device for its compute capability, which we answer.
It stops before NVVM turns the IR into PTX (that step needs the CUDA
toolkit's NVRTC/libdevice, and a GPU machine does it anyway).

Must run where ``numba.cuda`` is the real target (``NUMBA_ENABLE_CUDASIM``
unset); the tests call it in a subprocess::

    python -m gpu_backend.machine.typecheck layernorm:rows=4,cols=32 tests/fixtures/hlo/bool_ops.hlo plan.json
"""
from __future__ import annotations

import sys


def patch_device_query(cc):
    """Numba asks the current device for its compute capability when it compiles a device function
    (and a grid group); answer ``cc`` without a driver."""
    import numba.cuda.dispatcher as disp

    class _Device:
        compute_capability = cc
    disp.get_current_device = lambda: _Device()


def check_plan(plan, cc=(9, 0)) -> list:
    """Type-check and lower every kernel of ``plan``; returns ``[(kernel name, bytes of LLVM IR)]``.

    Raises whatever Numba raises (a ``TypingError`` names the generated line).
    """
    from ..numba_compat import cudasim_enabled
    if cudasim_enabled():
        raise RuntimeError("typecheck needs the real numba.cuda (unset NUMBA_ENABLE_CUDASIM)")
    from numba.cuda import types
    from numba.cuda.compiler import compile_cuda
    from numba.np import numpy_support

    from ..launch.plans import compile_plan
    patch_device_query(cc)
    compiled = compile_plan(plan)
    out = []
    for spec, fn in zip(compiled.generated.kernels, compiled.functions):
        argtypes = tuple(types.Array(numpy_support.from_dtype(p.storage), 1, "C") for p in spec.params)
        cres = compile_cuda(fn.py_func, types.void, argtypes, cc=cc)
        out.append((spec.name, len(cres.library.get_llvm_str())))
    return out


def _plan_from_arg(arg: str, strategy: str):
    import astitch_sim as asim
    if arg.endswith(".json"):
        with open(arg) as f:
            return asim.Plan.from_json(f.read())
    if arg.endswith(".hlo"):
        g = asim.from_hlo_file(arg)
    else:
        name, _, shape = arg.partition(":")
        kw = dict(kv.split("=") for kv in shape.split(",") if kv)
        g = asim.workload(name, **{k: int(v) for k, v in kw.items()})
    return asim.compile(g, strategy, "H100")


def main(argv=None) -> int:
    """``python -m gpu_backend.machine.typecheck [--strategies a,b] WORKLOAD[:k=v,...]|FILE.hlo|PLAN.json ...``"""
    import astitch_sim as asim
    argv = list(sys.argv[1:] if argv is None else argv)
    strategies = list(asim.STRATEGIES)          # every strategy: each gets the same code generator
    if argv[:1] == ["--strategies"]:
        strategies = argv[1].split(",")
        argv = argv[2:]
    failures = 0
    for arg in argv:
        for s in (["plan"] if arg.endswith(".json") else strategies):
            try:
                res = check_plan(_plan_from_arg(arg, s))
                print(f"ok   {arg} {s}: {len(res)} kernel(s)")
            except Exception as e:          # noqa: BLE001 - report every failure, then exit non-zero
                failures += 1
                print(f"FAIL {arg} {s}: {type(e).__name__}: {e}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
