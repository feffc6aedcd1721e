"""Element types: how each XLA dtype is stored in device memory, held in registers, and cast.

* **Storage vs compute.**  ``STORAGE`` is the numpy dtype of an element in device
  memory (bf16: its raw 16 bits in a ``uint16``), ``COMPUTE`` the type it has in
  registers: f16 and bf16 are computed in float32 and rounded after every op
  (``_f16``/``_bf16``), so a kernel's arithmetic is float32 either way.
* **Casts.**  float32 math stays float32: every op result is cast back to its
  node's type, except where Python/Numba already gives that type
  (``TYPE_PRESERVING`` float ops, the bool result of a compare).  Float ->
  integer conversions saturate and send NaN to 0 (``_float_to_int``), as XLA does.
* **Integer variants.**  An op-table helper whose integer meaning differs
  (C-style division, integer power, bitwise not) is swapped for its integer
  variant (``HELPER_BY_DTYPE``).

:class:`CastEmitter` writes these casts for one stage's emitters (it is handed the
stage's :class:`~gpu_backend.codegen.stage_context.StageContext`, for the module's typed constants).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from astitch_sim.ir.ops import OPS

if TYPE_CHECKING:
    from .stage_context import StageContext

#: XLA dtype -> numpy dtype of its elements in device memory (bf16: the raw 16 bits)
STORAGE = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.uint16, "s64": np.int64,
           "s32": np.int32, "s16": np.int16, "s8": np.int8, "u64": np.uint64, "u32": np.uint32,
           "u16": np.uint16, "u8": np.uint8, "pred": np.bool_}
#: XLA dtype -> the type its values have in registers (the name imported into the kernel module)
COMPUTE = {"f64": "float64", "f32": "float32", "f16": "float32", "bf16": "float32", "s64": "int64",
           "s32": "int32", "s16": "int16", "s8": "int8", "u64": "uint64", "u32": "uint32", "u16": "uint16",
           "u8": "uint8", "pred": "bool_"}
STORAGE_NAME = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "uint16", "s64": "int64",
                 "s32": "int32", "s16": "int16", "s8": "int8", "u64": "uint64", "u32": "uint32",
                 "u16": "uint16", "u8": "uint8", "pred": "bool_"}
FLOATS = ("f64", "f32", "f16", "bf16")
#: register types Numba's ``shfl_sync`` cannot take -> the type a shuffle moves them as (same bits, or widened);
#: the generated code casts there and back around ``gpu_backend.intrinsics.shfl_xor``
SHUFFLE_AS = {"bool_": "int32", "int8": "int32", "int16": "int32", "uint8": "int32", "uint16": "int32",
              "uint32": "int32", "uint64": "int64"}
BITS = {"s64": 64, "s32": 32, "s16": 16, "s8": 8, "u64": 64, "u32": 32, "u16": 16, "u8": 8}

#: op-table helpers whose integer meaning differs: the generator picks the integer variant
HELPER_BY_DTYPE = {"_divide": "_idivide", "_remainder": "_iremainder", "_power": "_ipower", "_not": "_invert"}

#: ops whose scalar template already gives a float result the operand's type, or a Python bool for a pred
#: result (no cast needed): the op table's ``uncast`` column
TYPE_PRESERVING = frozenset(name for name, d in OPS.items() if "float" in d.uncast)
BOOL_RESULT = frozenset(name for name, d in OPS.items() if "pred" in d.uncast)


class CastEmitter:
    """Casts between register types.

    The casts are pure expressions, except a float -> integer conversion, whose saturation
    bounds become typed module constants: for those it asks the kernel's module through the
    stage context.
    """

    def __init__(self, ctx: StageContext):
        self.ctx = ctx

    def cast(self, node, expr: str, force: bool = False) -> str:
        """Bring an op's Python/Numba result back to the node's own type."""
        dtype, op = node.dtype, node.op
        if dtype == "f16":
            return f"_f16({expr})"
        if dtype == "bf16":
            return f"_bf16({expr})"
        if dtype == "pred":
            return expr if (op in BOOL_RESULT and not force) else f"bool_({expr})"
        if dtype in ("f32", "f64") and op in TYPE_PRESERVING and not force:
            return expr
        return f"{COMPUTE[dtype]}({expr})"

    def convert(self, src: str, dst: str, x: str) -> str:
        """``x`` of type ``src`` converted to ``dst`` as XLA's convert does (float -> int saturates, NaN -> 0)."""
        if dst == "pred":
            return f"bool_({x} != 0)"
        if dst in FLOATS:
            base = f"{COMPUTE[dst]}({x})"
            return {"f16": f"_f16({base})", "bf16": f"_bf16({base})"}.get(dst, base)
        if src in FLOATS and dst in ("s64", "u64"):        # 2**63 / 2**64 are not representable as the type
            return f"_float_to_{dst}({x})"
        if src in FLOATS:
            info = np.iinfo(STORAGE[dst])
            lo = self.ctx.kw.mod.constant(float(info.min), "f64", f"{dst}_min")
            hi = self.ctx.kw.mod.constant(float(info.max), "f64", f"{dst}_max")
            return f"{COMPUTE[dst]}(_float_to_int({x}, {lo}, {hi}))"
        return f"{COMPUTE[dst]}({x})"

    def round_result(self, node, expr: str) -> str:
        """A float32 result rounded to the node's f16/bf16 type (other types: unchanged)."""
        if node.dtype == "f16":
            return f"_f16({expr})"
        if node.dtype == "bf16":
            return f"_bf16({expr})"
        return expr
